"""THE pass pipeline of the compiler: one list, each step with why it is there.

`optimize(module)` runs the HLO passes; `compile_plan(module)` adds fusion and buffer
assignment and returns the `ExecutionPlan` that code generation and devices consume.
With `verify=True` (the device passes `config.verify`, i.e. LAZYARRAY_VERIFY=1) the
verifier checks the module before the first pass and after every pass.
"""
from __future__ import annotations

from typing import Callable

from ..module import Module
from ..plan import ExecutionPlan
from .algebraic_simplifier import simplify
from .constant_folding import fold_constants
from .cse import cse
from .dce import dce
from .expand_convolution import expand_convolution

# Repeated until the module stops changing (each step can expose work for the others).
SIMPLIFY_GROUP: list = [
    ("expand_convolution", expand_convolution,
     "rewrites convolution and reduce_window into pad/slice/concatenate + dot_general or "
     "an elementwise max/add chain, so code generation needs nothing new"),
    ("algebraic_simplifier", simplify,
     "removes identities and collapses reshape/transpose/broadcast/convert chains, "
     "so that fusion sees fewer, simpler ops"),
    ("constant_folding", fold_constants,
     "evaluates small constant subgraphs once, at compile time, with the references"),
    ("cse", cse,
     "merges equal subexpressions (user code and gradients repeat work, e.g. x*x twice)"),
    ("dce", dce,
     "drops what no output needs, including what the steps above left behind"),
]
MAX_ROUNDS = 8   # the group converges in 2-3 rounds on real graphs; this bounds a bug


def _verifier() -> Callable:
    try:
        from ..verifier import verify
    except ImportError:       # the verifier is optional to the pipeline
        return lambda module: None
    return verify


def _run(step: str, fn: Callable, module: Module, check: Callable) -> Module:
    out = fn(module)
    try:
        check(out)
    except ValueError as e:
        raise ValueError(f"after pass {step}: {e}") from e
    return out


def optimize(module: Module, verify: bool = False) -> Module:
    """The HLO passes, to a fixed point; the result computes the same outputs."""
    check = _verifier() if verify else (lambda m: None)
    check(module)
    for _ in range(MAX_ROUNDS):
        before = module
        for step, fn, _why in SIMPLIFY_GROUP:
            module = _run(step, fn, module, check)
        if module == before:
            break
    return module


# After SIMPLIFY_GROUP, compile_plan runs, in order:
#   fusion             groups instructions into kernels, because memory traffic, not
#                      arithmetic, is what costs (compiler/fusion.py)
#   buffer_assignment  gives every kernel output a slot, reusing dead temporaries, so a
#                      program needs little more memory than its inputs and outputs
#                      (compiler/buffer_assignment.py, called by plan_fusion)
# Kernels come out in a topological order (the schedule): a kernel runs after those it
# reads, ties broken by program order.


def compile_plan(module: Module, verify: bool = False,
                 donate_inputs: bool = False) -> ExecutionPlan:
    """optimize, then fusion (which kernels) and buffer assignment (which slots).
    `donate_inputs`: the runtime gives up the parameter buffers, so outputs may reuse them."""
    from ..fusion import plan_fusion
    return plan_fusion(optimize(module, verify=verify), donate_inputs=donate_inputs)
