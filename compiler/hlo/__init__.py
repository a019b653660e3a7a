"""The HLO itself: dtypes and shapes, constants, modules and their sub-computations, the
verifier, the text printer and parser, Graphviz text, and the runtime scalars a dumped
module carries. Everything else of the compiler is written over these."""
