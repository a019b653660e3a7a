"""Sub-computations: the modules that control-flow ops carry (a loop's condition and body,
a conditional's branches), how they are traced from nodes, and how they are evaluated
with the primitives' references.

A sub-computation is an ordinary `Module` held as an attribute value (modules hash and
compare by structure, so they are part of cache keys). Its parameters are, by number:
the values the op passes in (the loop state, a branch's operands), then the values it
*captures*: nodes the traced function used that do not depend on those parameters (a
model's weights, a pending value computed before the loop, a Python scalar). Captured
values become extra operands of the op in the enclosing graph (closure conversion, as
JAX does), so a sub-computation never reads anything but its parameters.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .module import Instruction, Module
from ..graph.node import Node


def forward_order(outputs: Sequence[Node], stop: Any) -> list:
    """Nodes reachable from `outputs` (operands before users), not entering nodes whose
    id is in `stop` (a set or dict of ids) nor leaves (buffers, scalars, constants); also
    vmap's walk (batching.py)."""
    order: list = []
    state: dict = {}
    stack = list(outputs)
    while stack:
        n = stack.pop()
        k = id(n)
        done = state.get(k)
        if done is None and n.buffer is None and n.operands and k not in stop:
            state[k] = False
            stack.append(n)
            stack.extend(n.operands)
            continue
        if done:
            continue
        state[k] = True
        order.append(n)
    return order


def _inside(order: list, params: Sequence[Node]) -> set:
    """ids of the nodes that depend on a parameter (computed inside the computation)."""
    dep = {id(p) for p in params}
    for n in order:
        if n.buffer is None and any(id(o) in dep for o in n.operands):
            dep.add(id(n))
    return dep


def find_captured(params: Sequence[Node], outputs: Sequence[Node]) -> list:
    """The nodes outside the computation that it reads: not depending on `params`, used
    by a node that does (or an output itself), constants left out (they stay inside)."""
    order = forward_order(outputs, {id(p) for p in params})
    dep = _inside(order, params)
    seen: set = set()
    out: list = []

    def take(n: Node) -> None:
        if id(n) not in dep and id(n) not in seen and not _kept_inside(n):
            seen.add(id(n))
            out.append(n)

    for n in order:
        if id(n) in dep and n.buffer is None:
            for o in n.operands:
                take(o)
    for n in outputs:
        take(n)
    return out


def _kept_inside(n: Node) -> bool:
    return n.buffer is None and n.op == "constant"


def _fixed_leaf(n: Node) -> bool:
    """A leaf made from Python values alone: a runtime scalar or an op without operands
    (not a parameter, not a value)."""
    return n.buffer is None and not n.operands and n.op != "parameter"


def _fixed_instruction(n: Node) -> Instruction:
    if n.op == "scalar":
        from .literal import Literal
        value = Literal(np.array(n.value, dtype=n.dtype.np))
        return Instruction("constant", (), n.shape, n.dtype, {"value": value})
    return Instruction(n.op, (), n.shape, n.dtype, n.attrs)


def build_computation(name: str, params: Sequence[Node], outputs: Sequence[Node],
                      fixed_inside: bool = False) -> Module:
    """The module computing `outputs` from `params` (parameter k is params[k]); every
    other node it reaches must be a constant or depend on a parameter (`find_captured`
    lists the ones that do not: pass them as parameters too). `fixed_inside`: the leaves
    a trace makes from Python values alone -- runtime scalars (kept as constants of
    their value) and ops without operands (iota) -- are computed inside too (a module
    call replayed with those values fixed by its key, lazyarray/nn/module_reuse.py)."""
    positions: dict = {}
    instructions: list = []
    for k, p in enumerate(params):
        positions[id(p)] = len(instructions)
        instructions.append(Instruction("parameter", (), p.shape, p.dtype, {"number": k}))
    for n in forward_order(outputs, set(positions)):
        if id(n) in positions:
            continue
        if _kept_inside(n):
            ins = Instruction("constant", (), n.shape, n.dtype, {"value": n.value})
        elif fixed_inside and _fixed_leaf(n):
            ins = _fixed_instruction(n)
        elif n.buffer is not None or not n.operands:
            raise ValueError(f"{name}: {n!r} is read by the computation but is neither one "
                             "of its parameters nor computed from them (a value captured "
                             "from outside must be passed as a parameter)")
        else:
            ins = Instruction(n.op, tuple(positions[id(o)] for o in n.operands), n.shape,
                              n.dtype, n.attrs)
        positions[id(n)] = len(instructions)
        instructions.append(ins)
    return Module(name, instructions, tuple(positions[id(n)] for n in outputs))


def placeholders(values: Sequence[Any]) -> list:
    """Fresh parameter nodes of the types of `values` (nodes or instructions); they hold no
    buffer, so computing one outside its computation is an error (capture says so)."""
    return [Node("parameter", (), tuple(v.shape), v.dtype, {}) for v in values]


def inline(module: Module, args: Sequence[Node]) -> list:
    """The module's outputs as nodes computed from `args` (its parameters by number): the
    graph a vjp rule differentiates or a caller splices in."""
    from ..primitive import apply
    values: list = []
    for ins in module.instructions:
        if ins.op == "parameter":
            v = args[ins.attrs["number"]]
        elif ins.op == "constant":
            v = Node("constant", (), ins.shape, ins.dtype, {}, value=ins.attrs["value"])
        else:
            v = apply(ins.op, *[values[o] for o in ins.operands], **ins.attrs)
        values.append(v)
    return [values[o] for o in module.outputs]


# ---- evaluation with the references ---------------------------------------------------------

def evaluate_instruction(ins: Any, operands: list, arg: Any = None) -> Any:
    """One instruction's value from its operands' values (a tuple for a tuple type)."""
    from ..primitive import PRIMITIVES
    if ins.op == "parameter":
        return np.asarray(arg, dtype=ins.dtype.np).reshape(ins.shape)
    if ins.op == "constant":
        return ins.attrs["value"].array.astype(ins.dtype.np).reshape(ins.shape)
    out = PRIMITIVES[ins.op].reference(*operands, **ins.attrs)
    if isinstance(ins.dtype, tuple):
        return tuple(np.asarray(v, dtype=d.np).reshape(s)
                     for v, s, d in zip(out, ins.shape, ins.dtype))
    return np.asarray(out, dtype=ins.dtype.np).reshape(ins.shape)


def evaluate(module: Module, args: Sequence[Any]) -> list:
    """The module's outputs, computed one instruction at a time with the references."""
    values: list = [None] * len(module.instructions)
    with np.errstate(all="ignore"):
        for i, ins in enumerate(module.instructions):
            arg = args[ins.attrs["number"]] if ins.op == "parameter" else None
            values[i] = evaluate_instruction(ins, [values[o] for o in ins.operands], arg)
    return [values[o] for o in module.outputs]


def depends_on(params: Sequence[Node], outputs: Sequence[Node]) -> set:
    """ids of `params` and of the nodes reachable from `outputs` that depend on them."""
    return _inside(forward_order(outputs, {id(p) for p in params}), params)
