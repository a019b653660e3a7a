"""The nodes a function freshly built, in an order where operands come first: the one
walk the graph-copying caches (vjp_templates, walk_templates, graph_templates) make a
template from. Each says which leaves a template may hold and which inner nodes it may
copy; the walk stops at the function's inputs."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from .node import Node

CONSTANT, FRESH, BY_REF = "constant", "fresh", "by reference"


def built_nodes(outs: Iterable[Node], inputs: dict, leaf: Callable[[Node], Any],
                copyable: Callable[[Node], bool],
                limit: Optional[int] = None) -> Optional[tuple]:
    """(inner nodes and FRESH leaves, operands before users; CONSTANT leaves) reached from
    `outs` without passing an input (`inputs`: ids). `leaf(n)` says what an operand-less
    node is: CONSTANT (shared, kept by identity), FRESH (made again at each copy),
    BY_REF (neither list: the copy refers to the node itself) or None (no template);
    `copyable(n)` whether an inner node is one the function made. None when a node is
    refused or more than `limit` were visited."""
    order: list = []
    constants: list = []
    state: dict = {}
    stack = list(outs)
    while stack:
        n = stack.pop()
        k = id(n)
        if k in inputs or state.get(k):
            continue
        if not n.operands:
            kind = leaf(n)
            if kind is None:
                return None
            if kind is CONSTANT:
                constants.append(n)
            elif kind is FRESH:
                order.append(n)
            state[k] = True
            continue
        if k in state:                      # its operands are placed: place it
            state[k] = True
            order.append(n)
            continue
        if not copyable(n):
            return None
        state[k] = False
        stack.append(n)
        stack.extend(n.operands)
        if limit is not None and len(state) > limit:
            return None
    return order, constants


def replay(steps: Iterable[tuple], vals: list) -> list:
    """Append to `vals` one new node per step (op, operand refs into `vals`, shape, dtype,
    attrs, value), in order; returns `vals`."""
    append = vals.append
    for op, refs, shape, dtype, attrs, value in steps:
        if len(refs) == 1:
            operands = (vals[refs[0]],)
        elif len(refs) == 2:
            operands = (vals[refs[0]], vals[refs[1]])
        else:
            operands = tuple([vals[r] for r in refs])
        append(Node(op, operands, shape, dtype, attrs, value=value))
    return vals
