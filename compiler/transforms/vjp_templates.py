"""Remembered vector-Jacobian products: a training loop differentiates the same graph at
every step, so the walk (compiler/transforms/autodiff.py) meets the same nodes — same primitive,
attributes, types and needed cotangents — step after step. For a primitive whose vjp reads
nothing but those (`Primitive.vjp_by_type`), the nodes its vjp built the first time are
kept as a template over its inputs (g, the node, its operands) and copied at the next
meeting: a few `Node` constructions instead of the vjp's rules, shape inference and
helpers. The copy is the same graph the vjp would build (tests/test_vjp_fast.py checks it
for every such primitive).

A template holds no node of a user's graph, only the shared 0-d constants of the rules
(`kept_constant`), so it keeps no value alive.
"""
from __future__ import annotations

from typing import Any, Optional

from ..graph.graph_walk import BY_REF, built_nodes
from ..graph.node import Node
from ..graph.template import Cache

_MAX_NODES = 32          # a vjp that builds more (or reaches past its inputs) is not kept

# key -> (steps, outputs) or None (this vjp cannot be kept); see `_make`. Bounded: types
# that change at every step
_TEMPLATES = Cache(4096)


def key_of(node: Node, wanted: tuple) -> Optional[tuple]:
    """What the vjp of `node` depends on, or None when an attribute is unhashable."""
    key = (node.op, node.shape, node.dtype, wanted, *node.attrs.items())
    for o in node.operands:
        key += (o.shape, o.dtype)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def lookup(key: tuple) -> Any:
    """The template for `key`: a pair, None (known not to be kept), or False (not seen)."""
    return _TEMPLATES.get(key, False)


def instantiate(template: tuple, g: Node, node: Node) -> list:
    """The vjp's cotangents, built by copying `template` over (g, node, *operands)."""
    steps, outputs = template
    vals = [g, node, *node.operands]
    append = vals.append
    for op, refs, shape, dtype, attrs in steps:
        append(Node(op, tuple([vals[r] if type(r) is int else r for r in refs]),
                    shape, dtype, attrs))
    return [None if i is None else vals[i] for i in outputs]


def remember(key: tuple, g: Node, node: Node, outs: Any) -> None:
    """Keep the template of `outs` (what the vjp of `node` built over g) under `key`."""
    inputs = (g, node, *node.operands)
    if len({id(n) for n in inputs}) < len(inputs):
        return              # aliased inputs: a template made here could not tell them apart
    _TEMPLATES.put(key, _make(g, node, outs))


def _make(g: Node, node: Node, outs: Any) -> Optional[tuple]:
    """(steps, outputs): steps are (op, operand refs, shape, dtype, attrs) in an order
    where operands come first, a ref being an index into [g, node, *operands, *steps'
    results] or a shared constant node; outputs index the same list (None for None).
    None when the outputs reach a node that is none of these."""
    index = {id(g): 0, id(node): 1}
    for i, o in enumerate(node.operands):
        index.setdefault(id(o), 2 + i)
    steps: list = []
    order = _built(outs, index)
    if order is None:
        return None
    for n in order:
        refs = []
        for o in n.operands:
            r = index.get(id(o))
            refs.append(o if r is None else r)
        index[id(n)] = 2 + len(node.operands) + len(steps)
        steps.append((n.op, tuple(refs), n.shape, n.dtype, n.attrs))
    outputs = [None if c is None else index[id(c)] for c in outs]
    return tuple(steps), outputs


def _built(outs: Any, inputs: dict) -> Optional[list]:
    """The nodes the vjp made (operands before users), or None when it reached a node
    that is neither an input nor a shared constant, or made too many."""
    found = built_nodes([c for c in outs if c is not None], inputs,
                        lambda n: BY_REF if n.op == "constant" and n.buffer is None else None,
                        lambda n: n.buffer is None and n.value is None and n.sig is None,
                        _MAX_NODES)
    return None if found is None else found[0]
