"""Remembered composites: a function that builds a graph from its node arguments (a loss
made of a dozen primitives) builds the same graph, call after call, when its arguments
have the same types — if the graph is a function of those types, of its other (static)
arguments and of a context (autocast), and of nothing else. `remembered(fn)` keeps the
nodes the first call built as a template over the node arguments (compiler/graph/
template.py: steps over the arguments; the key their types, the static arguments and the
context) and copies it at the next call with the same key: one `Node` per node, none of
the front ends' checks (which could not fail for those types: they passed the first
time).

Leaves the function made are copied as they were: the rules' shared constants
(`kept_constant`) by identity, runtime scalars afresh with the same value (their value is
part of what the key fixes), ops without operands (iota) afresh. A graph that reaches any
other node (a buffer, another constant, a node of the user's graph behind an argument)
makes no template. tests/test_graph_templates.py checks the copies against the function.

What the function built from no argument at all (a runtime scalar such as layer norm's
eps and its broadcast, attention's scale and its -inf fill, a causal mask's iotas and
their comparison) is the same for every call of the key: the template holds the first
call's nodes of it and every copy uses them (`_held`), so a model calling a composite
at each layer and each token makes those nodes once. A GPT's decoding step made about a
hundred such nodes per token (of 560); the first call's graph shares them too, so the
graphs of the first and later calls have one structure (one program).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ..graph.node import Node, kept_ids, type_of
from ..graph.template import CONSTANT, FRESH, Cache, copier, record
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
        templates = Cache(_MAX_PER_FUNCTION)

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
                templates.put(k, Template.make(out, args))
            return out
        call.templates = templates
        return call
    return wrap


def _key(args: tuple, context: Any) -> Optional[tuple]:
    key: list = [context]
    for a in args:
        if type(a) is Node:
            # its interned type (one object per shape and dtype: hashed and compared by
            # identity, where a (shape, dtype) pair hashes the shape's items each time)
            t = a.type
            if t is None:
                try:
                    t = type_of(a)
                except TypeError:               # an unhashable shape: not copied
                    return None
            key.append(t)
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
    """The nodes the function built, recorded as steps over its arguments (an argument
    that is not a node is never referred to; compiler/graph/template.py), stopped nodes
    marked; `single`: the function returned one node, not a tuple. `copy`: the steps as
    straight-line code over the call's arguments, made at the first copy."""

    __slots__ = ("recorded", "single", "copy", "held")

    @classmethod
    def make(cls, out: Any, args: tuple) -> "Optional[Template]":
        single = type(out) is Node
        outs = (out,) if single else out
        if type(outs) is not tuple or not outs or not all(type(o) is Node for o in outs):
            return None
        kept = kept_ids()
        held = _held(outs, args, kept)
        # (aliased arguments: refs would be ambiguous, no template; the held nodes are
        # placeholders after the arguments, passed by `build`)
        recorded = record(outs, list(args) + held, lambda n: _leaf(n, kept),
                          marked=is_stopped)
        if recorded is None:
            return None
        self = cls()
        self.recorded, self.single = recorded, single
        self.copy = None
        self.held = tuple(held)
        return self

    @property
    def steps(self) -> tuple:
        """(op, operand refs, shape, dtype, attrs, value) per node the copy makes."""
        return self.recorded.steps

    def build(self, args: tuple) -> Any:
        """The function's result for `args` (of the key's types), copied."""
        if self.copy is None:
            # a copy of a stopped node is stopped too (softmax's shift by its max)
            self.copy = copier(self.recorded, "composite template",
                               "one" if self.single else "tuple", mark_stopped)
        if self.held:
            return self.copy(*args, *self.held)
        return self.copy(*args)


def _leaf(n: Node, kept: set) -> Optional[str]:
    """The leaves a composite may make besides its arguments: the rules' shared constants
    (held), runtime scalars and operand-less ops (made afresh: the key fixes them)."""
    if n.buffer is not None or n.site is not None:
        return None                         # a value, or a node of the user's graph
    if id(n) in kept:
        return CONSTANT
    if (n.op == "scalar") != (n.value is not None):
        return None                         # a literal of its own: not copied
    return FRESH                            # a runtime scalar, an iota: made afresh


def _held(outs: tuple, args: tuple, kept: set) -> list:
    """The nodes of the function's graph that no argument reaches and that a node built
    from an argument (or an output) reads: made once, by the first call, and shared by
    every copy. The rules' shared constants are held anyway (by `record`), the outputs
    never (each call's result is a node of its own, a tensor's)."""
    arg_ids = {id(a) for a in args if type(a) is Node}
    out_ids = {id(o) for o in outs}
    free: dict = {}                   # id -> whether no argument reaches the node
    held: dict = {}
    stack = [(o, False) for o in outs]
    while stack:
        n, placed = stack.pop()
        k = id(n)
        if k in free:
            continue
        if k in arg_ids:
            free[k] = False
            continue
        if not placed and n.operands:
            stack.append((n, True))
            stack.extend((o, False) for o in n.operands if id(o) not in free)
            continue
        if not n.operands:
            free[k] = k not in out_ids and _leaf(n, kept) is not None
            continue
        mine = k not in out_ids and n.buffer is None and n.site is None \
            and all(free[id(o)] for o in n.operands)
        free[k] = mine
        if not mine:
            for o in n.operands:
                j = id(o)
                if free[j] and j not in kept:
                    held[j] = o
    return list(held.values())
