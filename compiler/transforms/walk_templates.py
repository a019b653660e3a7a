"""Remembered backward passes: a training loop takes the gradient of a graph of one
structure at every step, and autodiff's walk (compiler/transforms/autodiff.py) then builds a backward
graph of one structure too. When every vjp the walk called reads only types
(`Primitive.vjp_by_type`), the backward graph is a function of the forward graph's
structure alone, so the walk's first result is kept as a template over the forward
graph's positions (compiler/graph/template.py: the forward graph is the template's
pattern, the backward graph its steps); a later gradient whose forward graph the pattern
accepts (checked node by node from the target down, as a sync's graph is) gets a copy:
one `Node` per backward node, no walk, no vjp rule, no per-node lookups.

What the check covers is all that the walk reads (the template's validity rule, with
leaves by type): each position's op, shape, dtype and attributes, which nodes are the
same node, which are leaves (TYPED) or blocked (STOP: stopped, or a source the walk must
not go behind), where each source sits (or that it is absent), and, for the rules'
shared constants (`kept_constant`) that appear in the forward graph or as the seed,
that they are the same objects (SHARED). Scalar and buffer values are not read by such
a walk, so they are not compared. tests/test_walk_templates.py checks that the copy is
the graph the walk builds.

A template holds no node of a user's graph: shapes, dtypes, attributes and positions, and
the rules' shared constants (which live for the whole process anyway).
"""
from __future__ import annotations

from typing import Any, Optional

from ..graph.node import Node, kept_ids
from ..graph.template import CONSTANT, SHARED, STOP, TYPED, Cache, Code, Pattern, record

ENABLED = [True]            # tests turn it off to compare with the walk itself
_MAX_POSITIONS = 50_000     # larger graphs are walked each time (a template's memory)
_PER_KEY = 2                # graphs sharing a target type (alternating steps) each keep one

# (target op, shape, dtype, number of sources) -> [Template, ...], most recent first
_TEMPLATES = Cache(256)
STATS = {"hits": 0, "made": 0}


def key_of(target: Node, sources: list) -> tuple:
    return (target.op, target.shape, target.dtype, len(sources))


def lookup(target: Node, seed: Node, sources: list, blocked: set) -> Optional[list]:
    """The cotangents of `sources` copied from a template that accepts this graph, or
    None (then the caller walks)."""
    for template in _TEMPLATES.get(key_of(target, sources), ()):
        copy = template.copy
        if copy is None:
            copy = template.copy = template.generate()
        try:
            found = copy((target,), seed, sources, blocked)
        except ValueError:                  # a node with another operand count: another
            continue                        # structure (see `generate`)
        if found is not None:
            STATS["hits"] += 1
            return found
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
        kept = _TEMPLATES.put(key, [])
    kept.insert(0, template)
    del kept[_PER_KEY:]
    STATS["made"] += 1


class Template:
    """The forward graph as a pattern (op positions, blocked nodes as STOP leaves, leaves
    by type, shared constants by identity), the sources' positions, and the backward
    graph as steps over [forward positions..., seed] (compiler/graph/template.py)."""

    __slots__ = ("pattern", "seed_kept", "sources", "steps", "copy")

    @classmethod
    def make(cls, order: list, blocked: set, seed: Node, sources: list,
             cotangents: list) -> "Optional[Template]":
        kept = kept_ids()
        seed_kept = seed if id(seed) in kept else None
        # placeholders: the forward positions and the seed; shared constants are read by
        # identity (a seed that is a forward node too: refs ambiguous, no template)
        inputs = [None if id(n) in kept else n for n in order]
        inputs.append(None if seed_kept is not None else seed)
        steps = record(cotangents, inputs, lambda n: CONSTANT if id(n) in kept else None)
        if steps is None:
            return None
        positions = {n: i for i, n in enumerate(order)}

        def kind(n: Node) -> Optional[str]:
            if n.operands:
                return STOP if id(n) in blocked else None
            return SHARED if id(n) in kept else TYPED
        self = cls()
        self.pattern = Pattern(order, positions, (len(order) - 1,), kind, stops=True)
        self.seed_kept = seed_kept
        self.sources = tuple(None if s is None else positions.get(s) for s in sources)
        self.steps = steps
        self.copy = None                # the check and copy as code, made at the first use
        return self

    def generate(self) -> Any:
        """The template's check and copy as one function, straight-line Python made once
        per template (compiler/graph/template.py `Code`):

            def copy(roots, seed, sources, blocked):
                v54, = roots
                if v54.op != 'divide' or v54.dtype is not d54 or ... or v54.attrs:
                    return None
                v53, v40, = v54.operands      # another operand count raises ValueError
                ...                           # each op position, users before operands
                ...                           # blocked nodes, leaves, distinct nodes
                ...                           # seed, sources
                n = _new(_Node); n.op = 'multiply'; ...; v56 = n    # the backward nodes
                return [v61, None, ...]       # the sources' cotangents

        `None` when the graph is not the template's structure (or its seed, sources or
        blocked nodes differ)."""
        p = self.pattern
        code = Code("copy(roots, seed, sources, blocked)")
        code.match(p, "roots", stops="blocked")
        if self.seed_kept is not None:          # its refs read the shared constant itself
            code.names["seed_kept"] = self.seed_kept
            code.fail_if(["seed is not seed_kept"])
        if None in self.sources:                # an absent source is no node of the graph
            code.add(f"members = {{{', '.join(f'v{i}' for i in range(p.size))}}}")
        code.fail_if([f"sources[{j}] is not v{q}" if q is not None else f"sources[{j}] in members"
                      for j, q in enumerate(self.sources)])
        code.add(f"v{p.size} = seed")
        code.replay(self.steps)
        code.add(f"return [{code.refs(self.steps.outputs)}]")
        return code.build("copy", "backward template")
