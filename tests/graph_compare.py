"""Structural comparison of two recorded graphs, for the tests of the paths that build a
graph another way (direct recording, remembered VJPs, copied backward passes and
composites): each must build exactly the general path's expression."""
from __future__ import annotations

from lazyarray.compiler.graph.node import Node


def same_graph(a: Node, b: Node, fresh_leaves: bool = False,
               seen: dict | None = None) -> bool:
    """a and b are the same expression: op, type, attributes and operands; leaves by
    identity, except, with `fresh_leaves`, those a copy makes afresh (runtime scalars,
    iotas: equal op, type, attributes and value)."""
    seen = {} if seen is None else seen
    key = (id(a), id(b))
    if key not in seen:
        if not a.operands or not b.operands:
            ok = a is b or (fresh_leaves and _same_fresh_leaf(a, b))
        else:
            ok = (a.op == b.op and a.shape == b.shape and a.dtype is b.dtype
                  and list(a.attrs.items()) == list(b.attrs.items())
                  and len(a.operands) == len(b.operands)
                  and all(same_graph(x, y, fresh_leaves, seen)
                          for x, y in zip(a.operands, b.operands)))
        seen[key] = ok
    return seen[key]


def _same_fresh_leaf(a: Node, b: Node) -> bool:
    return (a.buffer is None and b.buffer is None and not a.operands and not b.operands
            and a.op == b.op != "parameter" and a.dtype is b.dtype and a.shape == b.shape
            and a.attrs == b.attrs and repr(a.value) == repr(b.value))
