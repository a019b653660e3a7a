"""Remembered vector-Jacobian products: a training loop differentiates the same graph at
every step, so the walk (compiler/transforms/autodiff.py) meets the same nodes — same primitive,
attributes, types and needed cotangents — step after step. For a primitive whose vjp reads
nothing but those (`Primitive.vjp_by_type`), the nodes its vjp built the first time are
kept as a template (compiler/graph/template.py: steps over the placeholders g, the node
and its operands; its key their types, the attributes and the cotangents wanted) and
copied at the next meeting: a few `Node` constructions instead of the vjp's rules, shape
inference and helpers. The copy is the same graph the vjp would build
(tests/test_vjp_fast.py checks it for every such primitive).

A template holds no node of a user's graph, only the constants its rules made (mostly
the shared 0-d ones of `kept_constant`), so it keeps no value alive.
"""
from __future__ import annotations

from typing import Any, Optional

from ..graph.node import Node
from ..graph.template import CONSTANT, Cache, Steps, record

_MAX_NODES = 32          # a vjp that builds more (or reaches past its inputs) is not kept

# key -> Steps, or None (this vjp cannot be kept); bounded: types that change at every step
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
    """The template for `key`: Steps, None (known not to be kept), or False (not seen)."""
    return _TEMPLATES.get(key, False)


def instantiate(template: Steps, g: Node, node: Node) -> list:
    """The vjp's cotangents, built by copying `template` over (g, node, *operands) (a
    loop: a vjp's few nodes do not pay for code of their own)."""
    return template.run([g, node, *node.operands])


def remember(key: tuple, g: Node, node: Node, outs: Any) -> None:
    """Keep the template of `outs` (what the vjp of `node` built over g) under `key`:
    steps over [g, node, *operands], the rules' constants held by identity."""
    inputs = (g, node, *node.operands)
    if len({id(n) for n in inputs}) < len(inputs):
        return              # aliased inputs: a template made here could not tell them apart
    _TEMPLATES.put(key, record(outs, list(inputs), _constant, _MAX_NODES))


def _constant(n: Node) -> Optional[str]:
    """The leaves a vjp's rules may make besides its inputs: literals (held)."""
    return CONSTANT if n.op == "constant" and n.buffer is None else None
