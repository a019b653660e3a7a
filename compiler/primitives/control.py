"""Control flow: `while` and `conditional`, which carry sub-computations (modules held as
attributes, see compiler/hlo/computation.py), and `get_tuple_element`, which reads one value
of their tuple result.

- `while(x..., cond=C, body=B)`: state = x; while C(state): state = B(state); the result
  is the final state (a tuple). C and B take the state's values as parameters 0..n-1; C
  returns one `pred[]`, B returns values of the state's types. Values a loop only reads
  (weights, captured values) are state that B passes through unchanged (B's output k is
  its parameter k): code generation then neither copies them nor treats them as carried.
- `conditional(index, x..., branches=(B0, B1, ...))`: B_index(x...), the index clamped to
  the branches (an index out of range takes the last, as HLO's conditional); every branch
  takes x... and returns values of one tuple type.
- `call(x..., computation=C)`: C(x...), a tuple (HLO's `call`). A recorded sub-graph kept
  whole (lazyarray/nn/module_reuse.py: a module call replayed as one node, so a sync walks
  and checks one node instead of hundreds); compilation inlines it before anything else
  reads the module (its `expand`: compiler/passes/inline_calls.py on the CPU, the
  pipeline's expansion step on every target).

Fusion treats while and conditional as opaque kernels of their own (kind CONTROL) that
read their operands from buffers and write the tuple's elements into the buffers of their
`get_tuple_element` users; code generation compiles each sub-computation into a Program
of its own and emits one control step that runs them (compiler/codegen/control_steps.py).

Batching (vmap): compiler/transforms/control_batching.py.

Gradients: `get_tuple_element` passes its cotangent on as one element of its tuple's
(`TupleCotangent`, compiler/transforms/autodiff.py); a `while` carries its own vjp only
when it is a counted loop made by `scan` (attribute `scan`, see
compiler/transforms/scan_vjp.py); a `conditional` differentiates each branch inside a
conditional of the branches' vjps.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..graph.node import node_type
from ..hlo.module import Module
from ..primitive import CONTROL, fail, primitive
from ..hlo.dtypes import bool_, int32
from ..transforms.autodiff import TupleCotangent


def _types(values: Any) -> list:
    return [(tuple(v.shape), v.dtype) for v in values]


def _param_types(module: Module) -> list:
    return module.signature()[0]


def _output_types(module: Module) -> list:
    return module.signature()[1]


def _interned(shapes: tuple, dtypes: tuple) -> tuple:
    """(shapes, dtypes) of a control node as one object each (graph/node.py's interned
    node type): a sync's template (compiler/graph/template.py) compares a node's dtype by
    identity, and a loop's while node, made anew at each call, must match its first one
    for the cached sync to skip capture."""
    t = node_type(shapes, dtypes)
    return t.shape, t.dtype


def _fmt(types: list) -> str:
    return "(" + ", ".join(f"{d.short}[{','.join(map(str, s))}]" for s, d in types) + ")"


def _check_params(op: str, operands: tuple, what: str, module: Any, types: Any = None) -> None:
    """`types`: the operands' (shape, dtype)s, when the caller has them already."""
    if not isinstance(module, Module):
        fail(op, operands, f"{what} must be a module, got {type(module).__name__}", TypeError)
    if _param_types(module) != (types if types is not None else _types(operands)):
        fail(op, operands, f"{what} takes {_fmt(_param_types(module))}, not the operands' types")


def _batch(rule: str) -> Any:
    """The batching rule `rule` of compiler/transforms/control_batching.py (imported when vmap first
    needs it: it builds on the batching transform)."""
    def batch(node: Any, size: int, operands: Any, batched: Any) -> Any:
        from ..transforms import control_batching
        return getattr(control_batching, rule)(node, size, operands, batched)
    return batch


# ---- while ---------------------------------------------------------------------------------

def _while_infer(operands: tuple, cond: Any, body: Any, scan: Any = None) -> tuple:
    types = _types(operands)            # (once: a loop's state and captures, at every call)
    _check_params("while", operands, "the condition", cond, types)
    _check_params("while", operands, "the body", body, types)
    if _output_types(cond) != [((), bool_)]:
        fail("while", operands, f"the condition must return one pred[], it returns "
                                f"{_fmt(_output_types(cond))}", TypeError)
    if _output_types(body) != types:
        fail("while", operands, f"the body must return the state's types "
                                f"{_fmt(_types(operands))}, it returns "
                                f"{_fmt(_output_types(body))}", TypeError)
    return _interned(tuple(o.shape for o in operands), tuple(o.dtype for o in operands))


def _while_reference(*state: np.ndarray, cond: Module, body: Module, scan: Any = None) -> tuple:
    from ..hlo.computation import evaluate
    state = list(state)
    while bool(evaluate(cond, state)[0]):
        state = evaluate(body, state)
    return tuple(state)


def _while_vjp(g: Any, out: Any, *operands: Any, cond: Module, body: Module,
               scan: Any = None) -> tuple:
    if scan is None:
        raise NotImplementedError(
            "gradient: a while loop with a data-dependent trip count is not differentiable "
            "(nor is JAX's); use la.fori_loop with fixed bounds or la.scan")
    from ..transforms.scan_vjp import while_scan_vjp
    return while_scan_vjp(g, out, operands, cond, body, scan)


while_ = primitive("while", CONTROL, _while_infer, _while_reference, attrs=("cond", "body", "scan"),
                   doc="Repeat the body over the state while the condition holds; the "
                       "final state (a tuple).",
                   vjp=_while_vjp, batch=_batch("while_batch"), memo_infer=False)


# ---- conditional ---------------------------------------------------------------------------

def _conditional_infer(operands: tuple, branches: Any) -> tuple:
    index, args = operands[0], operands[1:]
    if index.shape != () or index.dtype is not int32:
        fail("conditional", operands, "the branch index must be an s32[] scalar", TypeError)
    if not isinstance(branches, tuple) or not branches:
        fail("conditional", operands, "branches must be a non-empty tuple of modules", TypeError)
    types = _types(args)
    for k, b in enumerate(branches):
        _check_params("conditional", args, f"branch {k}", b, types)
    first = _output_types(branches[0])
    for k, b in enumerate(branches[1:], 1):
        if _output_types(b) != first:
            fail("conditional", operands, f"branch {k} returns {_fmt(_output_types(b))} but "
                                          f"branch 0 returns {_fmt(first)}", TypeError)
    return _interned(tuple(s for s, _ in first), tuple(d for _, d in first))


def _conditional_reference(index: np.ndarray, *args: np.ndarray, branches: tuple) -> tuple:
    from ..hlo.computation import evaluate
    k = min(max(int(index), 0), len(branches) - 1)
    return tuple(evaluate(branches[k], list(args)))


def _conditional_vjp(g: Any, out: Any, index: Any, *args: Any, branches: tuple) -> tuple:
    from ..transforms.scan_vjp import conditional_vjp
    return (None,) + tuple(conditional_vjp(g, out, index, args, branches))


conditional = primitive("conditional", CONTROL, _conditional_infer, _conditional_reference,
                        attrs=("branches",),
                        doc="Run the branch the index names (clamped) on the operands; its "
                            "results (a tuple).",
                        vjp=_conditional_vjp, batch=_batch("conditional_batch"),
                        memo_infer=False)


# ---- call -----------------------------------------------------------------------------------

def call_type(computation: Module) -> tuple:
    """(shapes, dtypes) of a call of `computation`, interned (one object each, kept on the
    module): a sync's template compares a node's type by identity, and every call of one
    computation -- its expansion's tuple too -- has this one."""
    t = computation.__dict__.get("_call_type")
    if t is None:
        outs = _output_types(computation)
        t = computation._call_type = _interned(tuple(s for s, _ in outs),
                                               tuple(d for _, d in outs))
    return t


def _call_infer(operands: tuple, computation: Any) -> tuple:
    _check_params("call", operands, "the computation", computation)
    return call_type(computation)


def _call_reference(*args: np.ndarray, computation: Module) -> tuple:
    from ..hlo.computation import evaluate
    return tuple(evaluate(computation, list(args)))


def _call_expand(*operands: Any, computation: Module) -> Any:
    """The computation inlined over the operands, its outputs gathered in a `tuple` whose
    elements `get_tuple_element` then reads directly (its `simplify`)."""
    from ..graph.node import Node
    from ..hlo.computation import inline
    shape, dtype = call_type(computation)
    return Node("tuple", tuple(inline(computation, operands)), shape, dtype, {})


def _call_vjp(g: Any, out: Any, *operands: Any, computation: Module) -> tuple:
    """The computation inlined over the operands and differentiated (its forward is the
    call's own once inlined: CSE merges the two)."""
    from ..hlo.computation import inline
    from ..transforms.autodiff import vjp_many
    outs = inline(computation, operands)
    live = [k for k, o in enumerate(outs) if g[k] is not None and o.dtype.is_inexact]
    floats = [k for k, a in enumerate(operands) if a.dtype.is_inexact]
    result: list = [None] * len(operands)
    if not live or not floats:
        return tuple(result)
    cts = vjp_many([outs[k] for k in live], [g[k] for k in live],
                   [operands[k] for k in floats], through_sources=False)
    for k, c in zip(floats, cts):
        result[k] = c
    return tuple(result)


call = primitive("call", CONTROL, _call_infer, _call_reference, attrs=("computation",),
                 doc="The computation applied to the operands; its results (a tuple).",
                 vjp=_call_vjp, expand=_call_expand, batch=_batch("call_batch"))


# ---- get_tuple_element ---------------------------------------------------------------------

def _gte_infer(operands: tuple, index: int) -> tuple:
    (t,) = operands
    if not isinstance(t.dtype, tuple):
        fail("get_tuple_element", operands, "the operand must be a tuple (of a while or a "
                                            "conditional)", TypeError)
    if not isinstance(index, int) or not 0 <= index < len(t.dtype):
        raise ValueError(f"get_tuple_element: index {index!r} out of range for a tuple of "
                         f"{len(t.dtype)} values")
    return tuple(t.shape[index]), t.dtype[index]


def _gte_vjp(g: Any, out: Any, t: Any, index: int) -> tuple:
    return (TupleCotangent(index, g),)


def _gte_of_tuple(b: Any, ins: Any) -> Any:
    """get_tuple_element(tuple(x0, x1, ...), k) -> xk (an expanded call's results)."""
    t = b[ins.operands[0]]
    return t.operands[ins.attrs["index"]] if t.op == "tuple" else None


get_tuple_element = primitive(
    "get_tuple_element", CONTROL, _gte_infer, lambda t, index: t[index], attrs=("index",),
    doc="One value of a tuple (the result of a while, a conditional or a call).",
    vjp=_gte_vjp, batch=_batch("get_tuple_element_batch"), simplify=_gte_of_tuple)

