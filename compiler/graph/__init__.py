"""The traced graph: the immutable nodes a lazy tensor points at, the helpers that build
small graphs of primitives, and the walk that turns pending nodes into a module (trace,
its sync templates and their generated check code)."""
