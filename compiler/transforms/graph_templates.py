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

from ..graph.graph_walk import CONSTANT, FRESH, built_nodes, compiled, replay_lines
from ..graph.node import Node, kept_ids
from .autodiff import is_stopped, mark_stopped

ENABLED = [True]            # tests turn it off to compare with the function itself
_MAX_PER_FUNCTION = 256     # keys that change at every call: stay bounded


def remembered(context: Callable[[], Any] = lambda: None,
               key: Optional[Callable[..., Any]] = None) -> Callable:
    """Decorator for `fn(*args)` returning one node or a tuple of nodes, where every
    argument is a node or a hashable static value and the graph built depends only on
    the nodes' types, the other arguments and `context()`.

    `key(*args)`, if given, stands for the key made of all of these: a hashable value that
    fixes them (cheaper to make when the caller knows more, e.g. that every node argument
    has one shape and dtype), or None for a call that is not to be copied."""
    def wrap(fn: Callable) -> Callable:
        templates: dict = {}

        @functools.wraps(fn)
        def call(*args: Any) -> Any:
            if not ENABLED[0]:
                return fn(*args)
            k = _key(args, context()) if key is None else key(*args)
            if k is None:
                return fn(*args)
            template = templates.get(k, False)
            if template:
                return template.build(args)
            out = fn(*args)
            if template is False:
                if len(templates) >= _MAX_PER_FUNCTION:
                    templates.clear()
                templates[k] = Template.make(out, args)
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
    """Steps (op, operand refs, shape, dtype, attrs, value), a ref indexing [the call's
    arguments..., shared constants..., steps' results...] (an argument that is not a
    node is never referred to); `outputs` index the same list (`single`: the function
    returned one node, not a tuple). `copy`: the steps as straight-line code over the
    call's arguments (compiler/graph/graph_walk.py `replay_lines`), made at the first copy."""

    __slots__ = ("constants", "steps", "outputs", "single", "nargs", "copy", "stopped")

    @classmethod
    def make(cls, out: Any, args: tuple) -> "Optional[Template]":
        single = type(out) is Node
        outs = (out,) if single else out
        if type(outs) is not tuple or not outs or not all(type(o) is Node for o in outs):
            return None
        index = {id(a): k for k, a in enumerate(args) if type(a) is Node}
        if len(index) < sum(type(a) is Node for a in args):
            return None                     # aliased arguments: refs would be ambiguous
        found = _built(outs, index, kept_ids())
        if found is None:
            return None
        nodes, constants = found
        for k, c in enumerate(constants):
            index[id(c)] = len(args) + k
        first = len(args) + len(constants)
        steps, stopped = [], []
        for n in nodes:
            index[id(n)] = first + len(steps)
            if is_stopped(n):               # (softmax's shift by its max: no gradient)
                stopped.append(first + len(steps))
            steps.append((n.op, tuple([index[id(o)] for o in n.operands]), n.shape, n.dtype,
                          n.attrs, n.value))
        self = cls()
        self.stopped = tuple(stopped)
        self.constants, self.steps = tuple(constants), tuple(steps)
        self.outputs, self.single = tuple(index[id(o)] for o in outs), single
        self.nargs = len(args)
        self.copy = None
        return self

    def build(self, args: tuple) -> Any:
        """The function's result for `args` (of the key's types), copied."""
        if self.copy is None:
            self.copy = self._generate()
        return self.copy(*args)

    def _generate(self) -> Any:
        """def copy(v0, v1, ...): the call's arguments in, its result out."""
        names: dict = {}
        for k, c in enumerate(self.constants):
            names[f"v{self.nargs + k}"] = c      # shared constants: read by identity
        lines = [f"def copy({', '.join(f'v{i}' for i in range(self.nargs))}):"]
        lines += replay_lines(self.steps, self.nargs + len(self.constants), names)
        names["_stop"] = mark_stopped           # a copy of a stopped node is stopped too
        lines += [f"    _stop(v{j})" for j in self.stopped]
        outs = ", ".join(f"v{r}" for r in self.outputs)
        lines.append(f"    return {outs}" if self.single else f"    return ({outs},)")
        return compiled(lines, names, "copy", "composite template")


def _built(outs: tuple, inputs: dict, kept: set) -> Optional[tuple]:
    """(the nodes the function made, operands before users; the shared constants they
    read), or None when they reach a node that is none of these nor an argument."""
    return built_nodes(outs, inputs, lambda n: _leaf(n, kept), _copyable)


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
