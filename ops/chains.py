"""Remembered chains of ops over one node: what a front end made of a node of a given type
with given static arguments, replayed at the next call without the front end's checks.

A model repeats the same basic indexing (`qkv[..., :C]`, `x[:, -1]`, `t[:, None]`) and the
same shape methods (`t.view(B, T, H, D)`, `t.transpose(1, 2)`) at every step, on operands
of the same interned type with the same plain arguments: the nodes they record are a
chain from the operand (each step's first operand the step before; any other operand a
kept constant, or a runtime scalar made anew each time). The chain is remembered under
the front end's key (which holds the operand's type) and replayed, each step's node made
from its memo entry (compiler/primitive.py `made`: what `apply` makes of a memo hit,
without the lookup), or through `apply` where its attributes are its own. A front end
remembers only what it made without raising.
"""
from __future__ import annotations

from typing import Any

from ..compiler.graph.node import Node, is_kept, scalar_leaf
from ..compiler.primitive import apply, entry_of, made

PLANS: dict = {}        # a front end's key -> the steps from its operand to its result
CAPACITY = 4096         # keys that change at every call (shapes): bounded


def remember(key: Any, x: Node, y: Node) -> None:
    """The steps from x to y, kept under `key`: (op, extra operands, attrs, memo entry or
    None) in order. Not kept when y is not a chain from x (see the module doc)."""
    steps = []
    n = y
    while n is not x:
        if not n.operands:
            return
        extra = []
        for o in n.operands[1:]:
            if is_kept(o):
                extra.append(o)
            elif o.op == "scalar" and o.buffer is None:
                extra.append((o.value, o.dtype))     # a runtime scalar: made anew each time
            else:
                return
        steps.append((n.op, tuple(extra), n.attrs, entry_of(n) if n.type is not None else None))
        n = n.operands[0]
    if len(PLANS) >= CAPACITY:
        PLANS.clear()
    PLANS[key] = tuple(reversed(steps))


def replay(x: Node, plan: tuple) -> Node:
    """The chain `plan` (from `remember`) made again over x."""
    for op, extra, attrs, entry in plan:
        if not extra:
            x = made(op, (x,), entry) if entry is not None else apply(op, x, **attrs)
            continue
        operands = [o if type(o) is Node else scalar_leaf(*o) for o in extra]
        x = made(op, (x, *operands), entry) if entry is not None else \
            apply(op, x, *operands, **attrs)
    return x
