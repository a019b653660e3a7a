"""Remembered composites: a function that builds a graph from its node arguments (a loss
made of a dozen primitives) builds the same graph, call after call, when its arguments
have the same types — if the graph is a function of those types, of its other (static)
arguments and of a context (autocast), and of nothing else. `remembered(fn)` keeps the
nodes the first call built as a template over the node arguments and copies it at the
next call with the same key: one `Node` per node, none of the front ends' checks (which
could not fail for those types: they passed the first time).

Leaves the function made are copied as they were: the rules' shared constants
(`kept_constant`) by identity, runtime scalars afresh with the same value (their value is
part of what the key fixes), ops without operands (iota) afresh. A graph that reaches any
other node (a buffer, another constant, a node of the user's graph behind an argument)
makes no template. tests/test_graph_templates.py checks the copies against the function.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from .graph_walk import CONSTANT, FRESH, built_nodes, compiled, replay_lines
from .node import Node, kept_ids

ENABLED = [True]            # tests turn it off to compare with the function itself
_MAX_PER_FUNCTION = 256     # keys that change at every call: stay bounded


def remembered(context: Callable[[], Any] = lambda: None) -> Callable:
    """Decorator for `fn(*args)` returning one node, where every argument is a node or a
    hashable static value and the graph built depends only on the nodes' types, the
    other arguments and `context()`."""
    def wrap(fn: Callable) -> Callable:
        templates: dict = {}

        @functools.wraps(fn)
        def call(*args: Any) -> Node:
            key = _key(args, context()) if ENABLED[0] else None
            if key is None:
                return fn(*args)
            template = templates.get(key, False)
            if template:
                return template.build([a for a in args if type(a) is Node])
            out = fn(*args)
            if template is False:
                if len(templates) >= _MAX_PER_FUNCTION:
                    templates.clear()
                templates[key] = Template.make(out, [a for a in args if type(a) is Node])
            return out
        call.templates = templates
        return call
    return wrap


def _key(args: tuple, context: Any) -> Optional[tuple]:
    key: list = [context]
    for a in args:
        if type(a) is Node:
            key.append((a.shape, a.dtype))
        elif type(a) is float:
            key.append((float, repr(a)))        # 0.0 and -0.0 apart
        else:
            key.append((type(a), a))
    key = tuple(key)
    try:
        hash(key)
    except TypeError:
        return None
    return key


class Template:
    """Steps (op, operand refs, shape, dtype, attrs, value), a ref indexing [arguments...,
    shared constants..., steps' results...]; `output` indexes the same list. `copy`: the
    steps as straight-line code (compiler/graph_walk.py `replay_lines`), made at the
    first copy."""

    __slots__ = ("constants", "steps", "output", "first", "copy")

    @classmethod
    def make(cls, out: Any, inputs: list) -> "Optional[Template]":
        if type(out) is not Node or len({id(n) for n in inputs}) < len(inputs):
            return None                     # aliased arguments: refs would be ambiguous
        index = {id(n): i for i, n in enumerate(inputs)}
        found = _built(out, index, kept_ids())
        if found is None:
            return None
        nodes, constants = found
        for k, c in enumerate(constants):
            index[id(c)] = len(inputs) + k
        first = len(inputs) + len(constants)
        steps = []
        for n in nodes:
            index[id(n)] = first + len(steps)
            steps.append((n.op, tuple([index[id(o)] for o in n.operands]), n.shape, n.dtype,
                          n.attrs, n.value))
        self = cls()
        self.constants, self.steps, self.output = tuple(constants), tuple(steps), index[id(out)]
        self.first = len(inputs)
        self.copy = None
        return self

    def build(self, inputs: list) -> Node:
        if self.copy is None:
            self.copy = self._generate()
        return self.copy(*inputs)

    def _generate(self) -> Any:
        """def copy(v0, v1, ...): the arguments' nodes in, the output node out."""
        names: dict = {}
        for k, c in enumerate(self.constants):
            names[f"v{self.first + k}"] = c      # shared constants: read by identity
        args = ", ".join(f"v{i}" for i in range(self.first))
        lines = [f"def copy({args}):"]
        lines += replay_lines(self.steps, self.first + len(self.constants), names)
        lines.append(f"    return v{self.output}")
        return compiled(lines, names, "copy", "composite template")


def _built(out: Node, inputs: dict, kept: set) -> Optional[tuple]:
    """(the nodes the function made, operands before users; the shared constants they
    read), or None when they reach a node that is none of these nor an argument."""
    return built_nodes([out], inputs, lambda n: _leaf(n, kept), _copyable)


def _leaf(n: Node, kept: set) -> Optional[str]:
    if n.buffer is not None or n.site is not None:
        return None                         # a value, or a node of the user's graph
    if id(n) in kept:
        return CONSTANT
    if (n.op == "scalar") != (n.value is not None):
        return None                         # a literal of its own: not copied
    return FRESH                            # a runtime scalar, an iota: made afresh


def _copyable(n: Node) -> bool:
    return n.buffer is None and n.site is None and n.value is None
