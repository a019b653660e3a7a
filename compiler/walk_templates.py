"""Remembered backward passes: a training loop takes the gradient of a graph of one
structure at every step, and autodiff's walk (compiler/autodiff.py) then builds a backward
graph of one structure too. When every vjp the walk called reads only types
(`Primitive.vjp_by_type`), the backward graph is a function of the forward graph's
structure alone, so the walk's first result is kept as a template over the forward
graph's positions; a later gradient whose forward graph the template accepts (checked node
by node from the target down, as compiler/trace.py's Template checks a sync's graph) gets
a copy: one `Node` per backward node, no walk, no vjp rule, no per-node lookups.

What the check covers is all that the walk reads: each position's op, shape, dtype and
attributes, which nodes are the same node, which are leaves or blocked (stopped, or a
source the walk must not go behind), where each source sits (or that it is absent), and,
for the rules' shared constants (`kept_constant`) that appear in the forward graph or as
the seed, that they are the same objects. Scalar and buffer values are not read by such
a walk, so they are not compared. tests/test_walk_templates.py checks that the copy is
the graph the walk builds.

A template holds no node of a user's graph: shapes, dtypes, attributes and positions, and
the rules' shared constants (which live for the whole process anyway).
"""
from __future__ import annotations

from typing import Any, Optional

from .graph_walk import CONSTANT, built_nodes, replay
from .node import Node, kept_ids

ENABLED = [True]            # tests turn it off to compare with the walk itself
_MAX_POSITIONS = 50_000     # larger graphs are walked each time (a template's memory)
_PER_KEY = 2                # graphs sharing a target type (alternating steps) each keep one
_MAX_KEYS = 256

# (target op, shape, dtype, number of sources) -> [Template, ...], most recent first
_TEMPLATES: dict = {}
STATS = {"hits": 0, "made": 0}


def key_of(target: Node, sources: list) -> tuple:
    return (target.op, target.shape, target.dtype, len(sources))


def lookup(target: Node, seed: Node, sources: list, blocked: set) -> Optional[list]:
    """The cotangents of `sources` copied from a template that accepts this graph, or
    None (then the caller walks)."""
    for template in _TEMPLATES.get(key_of(target, sources), ()):
        order = template.bind(target, seed, sources, blocked)
        if order is not None:
            STATS["hits"] += 1
            return template.build(order, seed)
    return None


def remember(order: list, blocked: set, target: Node, seed: Node, sources: list,
             cotangents: list) -> None:
    """Keep the template of `cotangents` (what the walk built over `order`, the forward
    graph in the walk's topological order with `target` last)."""
    if len(order) > _MAX_POSITIONS or not order or order[-1] is not target:
        return
    template = Template.make(order, blocked, seed, sources, cotangents)
    if template is None:
        return
    key = key_of(target, sources)
    kept = _TEMPLATES.get(key)
    if kept is None:
        if len(_TEMPLATES) >= _MAX_KEYS:
            _TEMPLATES.clear()
        kept = _TEMPLATES[key] = []
    kept.insert(0, template)
    del kept[_PER_KEY:]
    STATS["made"] += 1


class Template:
    """The forward graph by position (op nodes from the last position down, then blocked
    nodes and leaves), the sources' positions, and the backward graph's steps:
    (op, operand refs, shape, dtype, attrs), a ref indexing [forward positions..., seed,
    shared constants..., steps' results...]; `outputs` index the same list per source."""

    __slots__ = ("ops", "blocked", "leaves", "size", "sources", "seed_kept", "constants",
                 "steps", "outputs")

    @classmethod
    def make(cls, order: list, blocked: set, seed: Node, sources: list,
             cotangents: list) -> "Optional[Template]":
        kept = kept_ids()
        size = len(order)
        index = {id(n): i for i, n in enumerate(order) if id(n) not in kept}
        seed_kept = seed if id(seed) in kept else None
        if seed_kept is None:
            if id(seed) in index:
                return None                 # the seed is a forward node: refs ambiguous
            index[id(seed)] = size
        built = _built([c for c in cotangents if c is not None], index, kept)
        if built is None:
            return None
        nodes, constants = built
        for k, c in enumerate(constants):   # the shared constants, read by identity
            index[id(c)] = size + 1 + k
        first = size + 1 + len(constants)
        steps: list = []
        for n in nodes:
            index[id(n)] = first + len(steps)
            steps.append((n.op, tuple([index[id(o)] for o in n.operands]), n.shape, n.dtype,
                          n.attrs, None))
        self = cls()
        self.size = size
        self.seed_kept = seed_kept
        self.constants = tuple(constants)
        self.steps = tuple(steps)
        self.outputs = tuple(None if c is None else index[id(c)] for c in cotangents)
        positions = {id(n): i for i, n in enumerate(order)}
        self.sources = tuple(None if s is None else positions.get(id(s)) for s in sources)
        ops, ends, leaves = [], [], []
        for i, n in enumerate(order):
            if n.operands and id(n) not in blocked:
                ops.append((i, n.op, n.shape, n.dtype, dict(n.attrs),
                            tuple([positions[id(o)] for o in n.operands])))
            elif n.operands:
                ends.append((i, n.shape, n.dtype))
            else:
                leaves.append((i, n.shape, n.dtype, n if id(n) in kept else None))
        ops.reverse()                   # users before their operands: a node's slot finds it
        self.ops, self.blocked, self.leaves = tuple(ops), tuple(ends), tuple(leaves)
        return self

    def bind(self, target: Node, seed: Node, sources: list, blocked: set) -> Optional[list]:
        """The forward graph of `target` in the template's order, or None when it is not
        the template's structure (or its seed, sources or blocked nodes differ)."""
        size = self.size
        order: list = [None] * size
        order[-1] = target
        for i, op, shape, dtype, attrs, slots in self.ops:
            n = order[i]
            operands = n.operands
            if n.op != op or n.dtype is not dtype or n.shape != shape \
                    or len(operands) != len(slots) or n.attrs != attrs:
                return None
            for o, p in zip(operands, slots):
                q = order[p]
                if q is None:
                    order[p] = o
                elif q is not o:
                    return None
        for i, shape, dtype in self.blocked:
            n = order[i]
            if id(n) not in blocked or n.dtype is not dtype or n.shape != shape:
                return None
        if blocked:
            for i, *_ in self.ops:
                if id(order[i]) in blocked:
                    return None
        for i, shape, dtype, kept in self.leaves:
            n = order[i]
            if n.operands or n.dtype is not dtype or n.shape != shape \
                    or (kept is not None and n is not kept):
                return None
        members = set(order)
        if len(members) != size:            # a node in two places: another structure
            return None
        if self.seed_kept is not None and seed is not self.seed_kept:
            return None                     # its refs read the shared constant itself
        for s, p in zip(sources, self.sources):
            if (order[p] is not s) if p is not None else (s in members):
                return None
        return order

    def build(self, order: list, seed: Node) -> list:
        """The backward graph's nodes over the bound forward graph; its cotangents."""
        vals = order
        vals.append(seed)
        vals.extend(self.constants)
        replay(self.steps, vals)
        return [None if r is None else vals[r] for r in self.outputs]


def _built(outs: list, inputs: dict, kept: set) -> Optional[tuple]:
    """(the nodes the walk made, operands before users; the shared constants they read),
    or None when they reach a node that is none of these nor an input."""
    return built_nodes(outs, inputs,
                       lambda n: CONSTANT if id(n) in kept else None,   # a fresh leaf: no
                       lambda n: n.buffer is None and n.value is None and n.site is None)
