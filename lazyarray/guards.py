"""Guards: whether what a function can read is still what it was, checked by identity.

`trace_cache.fingerprint` keys what a function may read by value, walking every object
at every call (a GPT's decoding step: ~470 objects, ~0.5 ms). A guard walks once, with
the same rules (the same `Doubt`s: what a key cannot describe, a guard cannot either),
and remembers the mutable places it read from: each dict and list (an instance's
attributes, a module's tables of parameters and submodules, a class's namespace, a
function's globals), each function's code, defaults and closure cells, each object's
class. Everything else it read is immutable (numbers, strings, tuples, code) or reached
through those places. While every place holds the very objects it held (`is`, never
`==`: 1, 1.0 and True are equal but trace differently), and every tensor it reached has
the same shape, dtype, device and requires_grad, a new trace would read the same things:
`holds()` says so with a few C-level passes over flat lists (dynamo's guards, reduced to identity
checks), ~45 us for a 4-layer GPT where the walk costs ~500.

The guard holds the objects it compares with (so their ids stay their own): a dict's
values, a function's globals it read. It holds no array data beyond tensors' handles.
"""
from __future__ import annotations

import dis
import functools
import operator
import types
from itertools import chain, repeat
from typing import Any

import numpy as np

from . import trace_cache
from .tensor import GRAD_FLAG_CHANGES
from .trace_cache import Doubt, _Walk

# names whose call is visible to the user (reusing a trace would skip it): a function
# reading one of them is not reused
_EFFECTS = frozenset(("print", "input", "open", "breakpoint", "exec", "eval", "__import__",
                      "logging", "warnings", "warn", "getLogger"))
_LOUD_MODULES = ("logging", "warnings")
_MISSING = object()
_state_of = operator.attrgetter("_node.shape", "_node.dtype", "_state")


@functools.lru_cache(maxsize=4096)
def _global_names(code: types.CodeType) -> tuple:
    """The names `code` and the code nested in it read or bind as globals (or builtins):
    the names a guard watches in a function's globals (attribute names are not read
    there). A global only stored (`global LAST; LAST = x`) is watched too: forward
    storing a new object there changes it, and is not remembered (a replay would skip
    the store)."""
    out = [i.argval for i in dis.get_instructions(code)
           if i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "STORE_GLOBAL", "DELETE_GLOBAL",
                           "STORE_NAME", "DELETE_NAME")]
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _global_names(c)
    return tuple(dict.fromkeys(out))


class _GuardWalk(_Walk):
    """`trace_cache._Walk` that also notes the mutable places it reads (see the module
    docstring); its key is not kept."""

    def __init__(self, root: Any = None) -> None:
        super().__init__()
        self.root = root           # checked by the caller: held by no check here
        self.maps: list = []       # dicts, OrderedDicts, class namespaces: keys and values
        self.lists: list = []      # lists: items
        self.attrs: list = []      # (object, attribute name): the attribute's identity
        self.names: list = []      # (globals dict, name): the global's identity
        self.arrays: list = []     # small NumPy arrays keyed by value
        self.sets: list = []       # sets: (the set, its items held, their ids)
        self.libclasses: list = []  # the library's classes: (namespace, a copy of it)
        self.deferred: dict = {}    # id(code) of methods doubted if they run -> (code, why)
        self._in_class = 0          # walking a class's namespace
        self._noted: set = set()

    def _once(self, x: Any) -> bool:
        k = id(x)
        if k in self._noted:
            return False
        self._noted.add(k)
        return True

    def fp(self, x: Any) -> Any:
        t = type(x)
        if t is dict or (t is not list and isinstance(x, dict)):
            if self._once(x):
                self.maps.append(x)
        elif t is list or isinstance(x, list):
            if self._once(x):
                self.lists.append(x)
        elif t is set:
            if self._once(x):
                self.sets.append((x, tuple(x), frozenset(map(id, x))))
        elif t is np.ndarray:
            if self._once(x):
                self.arrays.append((x, x.dtype.str, x.shape, x.tobytes()))
        elif isinstance(x, types.ModuleType) and x.__name__.split(".")[0] in _LOUD_MODULES:
            raise Doubt(f"reads module {x.__name__}")
        elif getattr(t, "__module__", "").split(".")[0] in _LOUD_MODULES:
            raise Doubt(f"reads a {t.__name__}")
        return super().fp(x)

    def _object(self, x: Any) -> Any:
        if self._once(x):
            if x is not self.root:
                self.attrs.append((x, "__class__"))
        elif x is self.root:
            # reached again (a method bound to it held as an attribute, a reference
            # back to it): the guard would hold it, and the table that holds the guard
            # would keep it alive for ever
            raise Doubt("it holds a reference to itself (a bound method of it as an "
                        "attribute, a reference back from a submodule)")
        return super()._object(x)

    def _attributes(self, attrs: dict) -> tuple:
        if self._once(attrs):
            self.maps.append(attrs)
        for v in attrs.values():     # a module's tables (walked inline by the key)
            if type(v) is trace_cache.OrderedDict and not v.__dict__ and self._once(v):
                self.maps.append(v)
        return super()._attributes(attrs)

    def _class_key(self, cls: type) -> Any:
        if not trace_cache._library(cls.__module__):
            self.attrs.append((cls, "__mro__"))
        for c in cls.__mro__:
            if c.__module__ == "builtins" or not self._once(c):
                continue
            if trace_cache._library(c.__module__):
                # its code is not walked, but a method of it may be replaced
                # (`nn.Linear.forward = patched`): compared whole, as a copy of its
                # namespace (one C-level dict comparison, identity first)
                self.libclasses.append((vars(c), dict(vars(c))))
            else:
                self.maps.append(vars(c))
        self._in_class += 1
        try:
            return super()._class_key(cls)
        finally:
            self._in_class -= 1

    def _function(self, f: types.FunctionType) -> Any:
        names = trace_cache._code_names(f.__code__)
        loud = _EFFECTS.intersection(names)
        user = not trace_cache._library(f.__module__)
        if (loud and user) or "random" in names:
            why = f"{f.__qualname__} " + (f"calls {sorted(loud)[0]}" if loud and user
                                          else "reads a random module")
            if not self._in_class:
                raise Doubt(why)
            # a method (or what one reads) that forward may never call: `__init__`
            # drawing the initial weights, a `reset_parameters`. Doubted only if it runs
            # while the call is recorded (Guard.deferred)
            # (by id: a code object's hash hashes its constants, and generated code, a
            # template's copy, may hold an unhashable one; the code is held with it)
            self.deferred[id(f.__code__)] = (f.__code__, why)
            return ("deferred", f.__code__)
        if self._once(f):
            self.attrs += [(f, "__code__"), (f, "__defaults__"), (f, "__kwdefaults__")]
            if not trace_cache._library(f.__module__):
                glob = f.__globals__
                self.names += [(glob, n) for n in _global_names(f.__code__)]
        return super()._function(f)

    def _cell(self, c: Any) -> Any:
        if self._once(c):
            self.attrs.append((c, "cell_contents"))
        return super()._cell(c)


class Guard:
    """What `holds()` compares, taken from one walk (see the module docstring)."""

    __slots__ = ("maps", "lens", "full", "keys", "pair_maps", "held", "ids", "lists",
                 "list_lens", "list_held", "list_ids", "objs", "attr_names", "attr_held",
                 "attr_ids", "globs", "glob_names", "glob_held", "glob_ids", "arrays", "sets",
                 "tensors", "states", "lib_spaces", "lib_copies", "grad_flags", "deferred")

    def __init__(self, w: _GuardWalk) -> None:
        self.maps = w.maps
        self.lens = list(map(len, w.maps))
        # the non-empty maps, once per key (read by one C-level pass of getitem: half
        # the cost of iterating each map's values)
        self.full = [m for m in w.maps if m]
        self.keys = list(chain.from_iterable(self.full))
        self.pair_maps = [m for m in self.full for _ in m]
        self.held = list(map(operator.getitem, self.pair_maps, self.keys))
        self.ids = list(map(id, self.held))
        self.lists = w.lists
        self.list_lens = list(map(len, w.lists))
        self.list_held = list(chain.from_iterable(w.lists))
        self.list_ids = list(map(id, self.list_held))
        self.objs = [o for o, _ in w.attrs]
        self.attr_names = [a for _, a in w.attrs]
        try:
            self.attr_held = list(map(getattr, self.objs, self.attr_names))
        except ValueError:            # an empty closure cell: no guard
            raise Doubt("an empty closure cell") from None
        self.attr_ids = list(map(id, self.attr_held))
        self.globs = [g for g, _ in w.names]
        self.glob_names = [n for _, n in w.names]
        self.glob_held = list(map(dict.get, self.globs, self.glob_names, repeat(_MISSING)))
        self.glob_ids = list(map(id, self.glob_held))
        self.arrays = w.arrays
        self.sets = w.sets
        self.lib_spaces = [n for n, _ in w.libclasses]
        self.lib_copies = [c for _, c in w.libclasses]
        self.tensors = w.tensors
        self.states = list(map(_state_of, w.tensors))
        # (a tensor's requires_grad, which forward may read, is not in its state: no
        # tensor's flag changed since, then none of these did)
        self.grad_flags = GRAD_FLAG_CHANGES[0]
        self.deferred = w.deferred

    def holds(self) -> bool:
        """Whether every place still holds what it held, and every tensor its type."""
        try:
            return (GRAD_FLAG_CHANGES[0] == self.grad_flags
                    and list(map(len, self.maps)) == self.lens
                    and list(chain.from_iterable(self.full)) == self.keys      # in order
                    and list(map(id, map(operator.getitem, self.pair_maps, self.keys)))
                    == self.ids
                    and list(map(len, self.lists)) == self.list_lens
                    and list(map(id, chain.from_iterable(self.lists))) == self.list_ids
                    and list(map(id, map(getattr, self.objs, self.attr_names))) == self.attr_ids
                    and list(map(id, map(dict.get, self.globs, self.glob_names,
                                         repeat(_MISSING)))) == self.glob_ids
                    and list(map(_state_of, self.tensors)) == self.states
                    and all(map(operator.eq, self.lib_spaces, self.lib_copies))
                    and all(a.dtype.str == d and a.shape == s and a.tobytes() == b
                            for a, d, s, b in self.arrays)
                    and all(frozenset(map(id, s)) == ids for s, _, ids in self.sets))
        except (ValueError, AttributeError, KeyError, RuntimeError, TypeError):
            return False     # a cell emptied, an attribute deleted, a dict changed by a thread


def guard(things: Any, root: Any = None) -> Guard:
    """The guard of what `things` (functions, objects, static values) may read; its
    tensors in a fixed order (`Guard.tensors`). `root`: an object the caller finds the
    guard by, whose class it checks itself (the guard keeps no reference to it). Raises
    Doubt."""
    w = _GuardWalk(root)
    w.fp(things)
    return Guard(w)


__all__ = ["Doubt", "Guard", "guard"]
