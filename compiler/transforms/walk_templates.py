"""Remembered backward passes: a training loop takes the gradient of a graph of one
structure at every step, and autodiff's walk (compiler/transforms/autodiff.py) then builds a backward
graph of one structure too. When every vjp the walk called reads only types
(`Primitive.vjp_by_type`), the backward graph is a function of the forward graph's
structure alone, so the walk's first result is kept as a template over the forward
graph's positions; a later gradient whose forward graph the template accepts (checked node
by node from the target down, as compiler/graph/trace.py's Template checks a sync's graph) gets
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

from ..graph.graph_walk import CONSTANT, built_nodes, compiled, replay_lines
from ..graph.node import Node, kept_ids

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
        copy = template.copy
        if copy is None:
            copy = template.copy = template.generate()
        try:
            found = copy(target, seed, sources, blocked)
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
                 "steps", "outputs", "copy")

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
                ops.append((i, n.op, n.shape, n.dtype, n.attrs,
                            tuple([positions[id(o)] for o in n.operands])))
            elif n.operands:
                ends.append((i, n.shape, n.dtype))
            else:
                leaves.append((i, n.shape, n.dtype, n if id(n) in kept else None))
        ops.reverse()                   # users before their operands: a node's slot finds it
        self.ops, self.blocked, self.leaves = tuple(ops), tuple(ends), tuple(leaves)
        self.copy = None                # the check and copy as code, made at the first use
        return self

    def generate(self) -> Any:
        """The template's check and copy as one function, straight-line Python made once
        per template (a training step's gradient makes this check and copy at every step;
        written out, each node is a few attribute reads compared with constants and its
        operands unpacked into locals, no loop over entries):

            def copy(target, seed, sources, blocked):
                v54 = target
                if v54.op != 'divide' or v54.dtype is not d54 or v54.shape != () or v54.attrs:
                    return None
                v53, v40, = v54.operands      # another operand count raises ValueError
                ...                           # each op position, users before operands
                if len({v0, v1, ...}) != 55:  # a node in two positions: another structure
                    return None
                ...                           # blocked nodes, leaves, seed, sources
                n = _new(_Node); n.op = 'multiply'; ...; v56 = n    # the backward nodes
                return [v61, None, ...]       # the sources' cotangents

        `None` when the graph is not the template's structure (or its seed, sources or
        blocked nodes differ): every check of the loop this replaces (see the module
        docstring), in the same order."""
        names: dict = {}
        lines = ["def copy(target, seed, sources, blocked):", f"    v{self.size - 1} = target"]
        add = lines.append
        reached: set = {self.size - 1}
        for i, op, shape, dtype, attrs, slots in self.ops:
            test = [f"v{i}.op != {op!r}", f"v{i}.dtype is not d{i}",
                    f"v{i}.shape != {_shape(names, i, shape)}"]
            names[f"d{i}"] = dtype
            if attrs:
                names[f"a{i}"] = attrs
                test.append(f"v{i}.attrs is not a{i} and v{i}.attrs != a{i}")
            else:
                test.append(f"v{i}.attrs")
            _fail_if(add, test)
            targets, again = [], []
            for k, p in enumerate(slots):
                if p in reached:                # met before: must be the same node
                    targets.append(f"o{k}")
                    again.append(f"o{k} is not v{p}")
                else:
                    reached.add(p)
                    targets.append(f"v{p}")
            add(f"    {''.join(t + ', ' for t in targets)}= v{i}.operands")
            if again:
                _fail_if(add, again)
        for i, shape, dtype in self.blocked:
            names[f"d{i}"] = dtype
            _fail_if(add, [f"id(v{i}) not in blocked", f"v{i}.dtype is not d{i}",
                           f"v{i}.shape != {_shape(names, i, shape)}"])
        if self.ops:
            add("    if blocked:")
            add(f"        for n in ({''.join(f'v{i}, ' for i, *_ in self.ops)}):")
            add("            if id(n) in blocked:")
            add("                return None")
        for i, shape, dtype, kept in self.leaves:
            if kept is not None:                # a shared constant: by identity
                names[f"k{i}"] = kept
                _fail_if(add, [f"v{i} is not k{i}"])
            else:
                names[f"d{i}"] = dtype
                _fail_if(add, [f"v{i}.operands", f"v{i}.dtype is not d{i}",
                               f"v{i}.shape != {_shape(names, i, shape)}"])
        add(f"    members = {{{', '.join(f'v{i}' for i in range(self.size))}}}")
        _fail_if(add, [f"len(members) != {self.size}"])
        if self.seed_kept is not None:          # its refs read the shared constant itself
            names["seed_kept"] = self.seed_kept
            _fail_if(add, ["seed is not seed_kept"])
        for j, p in enumerate(self.sources):
            _fail_if(add, [f"sources[{j}] is not v{p}" if p is not None
                           else f"sources[{j}] in members"])
        add(f"    v{self.size} = seed")
        first = self.size + 1 + len(self.constants)
        for k, c in enumerate(self.constants):
            names[f"v{self.size + 1 + k}"] = c
        lines += replay_lines(self.steps, first, names)
        add(f"    return [{', '.join('None' if r is None else f'v{r}' for r in self.outputs)}]")
        return compiled(lines, names, "copy", "backward template")


def _fail_if(add: Any, tests: list) -> None:
    add(f"    if {' or '.join(tests)}:")
    add("        return None")


def _shape(names: dict, i: int, shape: tuple) -> str:
    """A shape as a literal when it is a plain tuple of ints, else a named constant."""
    if type(shape) is tuple and all(type(d) is int for d in shape):
        return repr(shape)
    names[f"s{i}"] = shape
    return f"s{i}"


def _built(outs: list, inputs: dict, kept: set) -> Optional[tuple]:
    """(the nodes the walk made, operands before users; the shared constants they read),
    or None when they reach a node that is none of these nor an input."""
    return built_nodes(outs, inputs,
                       lambda n: CONSTANT if id(n) in kept else None,   # a fresh leaf: no
                       lambda n: n.buffer is None and n.value is None and n.site is None)
