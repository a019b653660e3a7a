"""Reusing the traced sub-computations of `fori_loop`/`while_loop`/`scan`/`cond`.

Tracing a loop body costs far more than running a short loop (the example decoder: about
1.9 ms of tracing against 0.6 ms of 32 compiled steps), so a call that would trace the
same thing again takes the modules of the earlier trace instead. "The same thing" is a
key computed without calling the function: its code objects, and what it can read --
closure cells, defaults and the globals its code names, followed through nested
functions, partials, bound methods, tuples, lists and dicts. Python scalars and small
NumPy arrays enter the key by value (so a changed one re-traces); a tensor enters by
shape, dtype and device only and becomes an operand with its *current* value on every
call (JAX's closure conversion). Anything the key cannot describe (an object of a user
class, a module outside the library's own and NumPy's, a big array) is a doubt, and a
doubt traces as before. So does a trace whose captured values are not all reachable
from the key (a random draw: it reads the generator's state), or whose key changed
while it was traced (a body with side effects on what it closes over).

The captured values are recomputed per call by a small "captured" module whose
parameters are the key's tensors, the caller's own extra operands (a loop's lower
bound, a scan's xs) and fixed leaves made during the trace (Python scalars used as
runtime scalars, iotas): inlining it gives the closed-over tensors' current nodes, and
anything the body computed from them outside the loop is computed again from those.
"""
from __future__ import annotations

import functools
import sys
import types
from collections import OrderedDict
from typing import Any, Optional, Sequence

import numpy as np

from . import config
from .backward import is_grad_enabled
from .compiler.hlo.computation import build_computation, inline
from .tensor import TRAINABLE, Tensor
from .ops import autocast as _autocast

_LIBRARIES = ("lazyarray", "numpy", "math", "builtins", "ops", "compiler", "devices",
              "functools", "operator", "itertools", "cmath")
_SCALARS = (bool, int, float, complex, str, bytes, type(None))
_FIXED_LEAVES = ("scalar", "iota")   # leaves a trace makes from Python values alone
_MAX_ITEMS = 20000                   # a key bigger than this is a doubt (cost bound)
_SMALL_ARRAY = 4096                  # bytes of a NumPy array keyed by value
_CAPACITY = 256
_CLASS_PLUMBING = ("__dict__", "__weakref__", "__module__", "__doc__", "__qualname__",
                   "__annotations__", "__dataclass_fields__", "__dataclass_params__",
                   "__match_args__", "__hash__", "__orig_bases__", "__parameters__")
_CACHE: "OrderedDict[Any, Entry]" = OrderedDict()


class Doubt(Exception):
    """The key cannot describe what the function may read: trace."""


# the standard library's modules hold no values a trace reads, except these (a value
# drawn or read from them while tracing would be frozen by reuse)
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {
    "random", "time", "datetime", "os", "secrets", "uuid", "sys", "threading", "builtins",
    "__main__", "io", "gc", "signal", "socket", "subprocess", "tempfile", "pathlib"}


def _library(module_name: Optional[str]) -> bool:
    return bool(module_name) and module_name.split(".")[0] in _LIBRARIES


def _trusted_module(module_name: str) -> bool:
    """A module whose attributes a traced function may read without keying them: the
    library's own, NumPy, the standard library but for its sources of varying values."""
    return _library(module_name) or module_name.split(".")[0] in _STDLIB


def _names(code: types.CodeType) -> list:
    """The global names `code` and the code objects nested in it may read."""
    out = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _names(c)
    return out


@functools.lru_cache(maxsize=4096)
def _code_names(code: types.CodeType) -> tuple:
    """`_names` once each (a code object never changes: found once, not at every call)."""
    return tuple(dict.fromkeys(_names(code)))


class _Walk:
    def __init__(self) -> None:
        self.tensors: list = []
        self.items = 0
        self.active: set = set()
        self.path: list = []
        self.classes: dict = {}      # class -> its key: each instance of it would walk it again

    def fp(self, x: Any) -> Any:
        self.items += 1
        if self.items > _MAX_ITEMS:
            raise Doubt("too much to key")
        t = type(x)
        fast = _BY_TYPE.get(t)         # the common exact types first (a key walks ~60-1000)
        if fast is not None:
            return fast(self, x, t)
        if isinstance(x, Tensor):
            return _tensor_key(self, x, t)
        if isinstance(x, np.generic):
            return ("np", x.dtype.str, x.tobytes())
        if isinstance(x, np.ndarray):
            if x.nbytes > _SMALL_ARRAY or x.dtype.hasobject:
                raise Doubt("a large or object array")
            return ("nd", x.dtype.str, x.shape, x.tobytes())
        if isinstance(x, (tuple, list, dict)):
            return self._container(x, t)
        if t in (set, frozenset):
            before = len(self.tensors)
            items = frozenset(self.fp(v) for v in x)
            if len(self.tensors) != before:
                raise Doubt("tensors in a set (no order to pass them in)")
            return (t.__name__, items)
        if isinstance(x, types.ModuleType):
            if not _trusted_module(x.__name__):
                raise Doubt(f"module {x.__name__}")
            return ("mod", x.__name__)
        if t is types.FunctionType:
            return self._function(x)
        if t is functools.partial:
            return ("partial", self.fp(x.func), self.fp(x.args), self.fp(x.keywords))
        if t is types.MethodType:
            return ("method", self.fp(x.__func__), self.fp(x.__self__))
        if isinstance(x, (types.BuiltinFunctionType, np.ufunc, type)):
            owner = getattr(x, "__self__", None)
            if owner is not None and not isinstance(x, type) and not (
                    isinstance(owner, types.ModuleType) and _trusted_module(owner.__name__)):
                raise Doubt("a builtin bound to an object or an untrusted module")
            if isinstance(x, type) and not _library(x.__module__):
                return ("cls", self._class(x))
            return ("builtin", x)        # the object itself: kept alive, so its id stays its own
        if _library(getattr(t, "__module__", None)) and callable(x) \
                and not hasattr(x, "__dict__"):
            try:
                return ("libobj", hash(x), x)   # a library callable without state of its own
            except TypeError:
                raise Doubt(f"an unhashable {t.__name__}") from None
        if type(getattr(x, "__dict__", None)) is dict and not hasattr(t, "__slots__"):
            return self._object(x)
        raise Doubt(f"a {t.__name__}")

    def _container(self, x: Any, t: type) -> Any:
        """A tuple, list or dict (or a subclass: a namedtuple, an OrderedDict), by items."""
        items = tuple((self.fp(k), self.fp(v)) for k, v in x.items()) \
            if isinstance(x, dict) else tuple(self.fp(v) for v in x)
        if t in (tuple, list, dict):
            return (t.__name__, items)
        extra = self.fp(vars(x)) if type(getattr(x, "__dict__", None)) is dict else None
        return ("sub", self._class(t), items, extra)

    def _object(self, x: Any) -> Any:
        """An instance (a model, a config): its attributes, and what its class and the
        user classes above it hold (their methods' code and globals, class values)."""
        if id(x) in self.active:
            return ("cycle", self.path.index(id(x)))
        self.active.add(id(x))
        self.path.append(id(x))
        try:
            return ("obj", self._class(type(x)), self._attributes(vars(x)))
        finally:
            self.path.pop()
            self.active.discard(id(x))

    def _attributes(self, attrs: dict) -> tuple:
        """An instance's attributes: a name (a str) as itself; a plain OrderedDict with no
        attributes of its own (an nn.Module's tables of parameters, buffers and
        submodules) by its items, its string keys as themselves. The same things the
        general walk of the dict would key, with fewer steps: a model's key walks every
        module of it at every call of a loop over it."""
        out = []
        for k, v in attrs.items():
            if type(k) is not str:
                k = self.fp(k)
            if type(v) is OrderedDict and not v.__dict__:
                self.items += 1
                out.append((k, "od", tuple([(n if type(n) is str else self.fp(n), self.fp(e))
                                            for n, e in v.items()])))
            else:
                out.append((k, self.fp(v)))
        return tuple(out)

    def _class(self, cls: type) -> Any:
        key = self.classes.get(cls)
        if key is None:
            key = self.classes[cls] = self._class_key(cls)
        return key

    def _class_key(self, cls: type) -> Any:
        out = []
        for c in cls.__mro__:
            if _library(c.__module__):
                out.append(("libclass", c))
                continue
            items = []
            for k, v in vars(c).items():
                if k in _CLASS_PLUMBING:
                    continue
                if isinstance(v, (staticmethod, classmethod)):
                    v = v.__func__
                elif isinstance(v, property):
                    v = (v.fget, v.fset, v.fdel)
                items.append((k, self.fp(v)))
            out.append(("class", c, tuple(items)))
        return tuple(out)

    def _function(self, f: types.FunctionType) -> Any:
        if id(f) in self.active:
            return ("recursive", f.__code__)
        names = _code_names(f.__code__)
        if "random" in names:      # np.random.*, random.*: a draw reuse would freeze
            raise Doubt("reads a random module")
        self.active.add(id(f))
        try:
            cells = tuple(self._cell(c) for c in (f.__closure__ or ()))
            if _library(f.__module__):    # the library's globals hold no traced values,
                return ("libfn", f, cells)  # but its closures may (la.vmap(user_fn))
            glob = f.__globals__
            names = tuple((n, self.fp(glob[n])) for n in names if n in glob)
            return ("fn", f.__code__, cells, self.fp(f.__defaults__),
                    self.fp(f.__kwdefaults__), names)
        finally:
            self.active.discard(id(f))

    def _cell(self, c: Any) -> Any:
        try:
            v = c.cell_contents
        except ValueError:
            return ("empty",)
        return self.fp(v)


def _scalar_key(w: _Walk, x: Any, t: type) -> Any:
    return (t.__name__, repr(x) if t in (float, complex) else x)


def _tensor_key(w: _Walk, x: Any, t: type) -> Any:
    w.tensors.append(x)
    # (no tensor requires grad: then none is derived from one, and the walk back over
    # each tensor's graph that requires_grad makes is skipped)
    return ("T", x.shape, x.dtype.name, id(x._state), bool(TRAINABLE) and x.requires_grad)


# exact type -> its key, as `_Walk.fp` makes it (the same keys, fewer checks)
_BY_TYPE: dict = {t: _scalar_key for t in _SCALARS}
_BY_TYPE.update({Tensor: _tensor_key, tuple: _Walk._container, list: _Walk._container,
                 dict: _Walk._container,
                 types.FunctionType: lambda w, x, t: w._function(x)})


def fingerprint(things: Any) -> tuple:
    """(key, tensors): the key of what `things` (functions, static values) may read, the
    tensors in it in a fixed order. Raises Doubt."""
    w = _Walk()
    key = w.fp(things)
    try:
        settings = tuple(sorted(config._values.items()))
        hash(settings)
    except TypeError:
        raise Doubt("unhashable settings") from None
    return (key, settings, _autocast.current(), is_grad_enabled()), w.tensors


class Entry:
    __slots__ = ("mods", "pre", "specs", "extra")

    def __init__(self, mods: Any, pre: Any, specs: list, extra: Any) -> None:
        self.mods, self.pre, self.specs, self.extra = mods, pre, specs, extra


class Site:
    """One call of a control-flow op: its key (None on a doubt) and the values that vary
    per call (the key's tensors, the caller's extra operand nodes)."""

    def __init__(self, op: str, things: Any, state: Any, types_: Sequence[Any],
                 ext: Sequence[Any] = ()) -> None:
        self.ext = list(ext)
        self.extra: Any = None          # what the caller keeps with the modules
        self.things = (op, things)
        self.head = (op, id(state), tuple((tuple(n.shape), n.dtype.name)
                                          for n in list(types_) + self.ext))
        try:
            fp, self.tensors = fingerprint(self.things)
            # which inputs are one node: a trace reads such a node once (the key's
            # tensors enter it by type alone, `_plan` maps each node to its first place)
            self.key: Any = (self.head, fp,
                             aliases(list(self.ext) + [t._node for t in self.tensors]))
        except Doubt:
            self.key, self.tensors = None, []

    def lookup(self) -> Optional[Entry]:
        if self.key is None:
            return None
        try:
            e = _CACHE.get(self.key)
        except TypeError:          # an unhashable value in the key
            self.key = None
            return None
        if e is not None:
            _CACHE.move_to_end(self.key)
        return e

    def captures(self, e: Entry) -> list:
        """The captured nodes of this call: the entry's module over current values."""
        args = [self.ext[v] if k == "e" else self.tensors[v]._node if k == "t" else v
                for k, v in e.specs]
        return inline(e.pre, args)

    def store(self, mods: Any, cap: Sequence[Any]) -> None:
        """Keep a fresh trace's modules for the next call with this key, unless the key
        changed while tracing or a captured value is not reachable from it."""
        if self.key is None:
            return
        try:
            fp, again = fingerprint(self.things)
            if (self.head, fp, aliases(list(self.ext) + [t._node for t in again])) \
                    != self.key:
                return
            if any(t._node.buffer is None and _constant_only(t._node) for t in again) \
                    and _reads_a_constant(self.things[1]):
                return     # a constant not yet computed: recording may have folded it
            specs, leaves = _plan(cap, [t._node for t in self.tensors], self.ext)
            pre = build_computation("captured", leaves, list(cap))
        except (Doubt, TypeError, ValueError):
            return
        _CACHE[self.key] = Entry(mods, pre, specs, self.extra)
        while len(_CACHE) > _CAPACITY:
            _CACHE.popitem(last=False)


def _reads_a_constant(things: tuple) -> bool:
    """Whether the functions among `things` (a site's callables, beside its operands)
    read a tensor that is a constant not yet computed (`la.zeros(3)`): tracing folds
    ops on constants (`zeros + 1` is a constant 1), so the trace does not read it as an
    input. An operand (a loop's initial state) is a placeholder inside: never folded."""
    funcs = [x for x in things if callable(x) or (
        type(x) is tuple and x and all(callable(b) for b in x))]
    _, tensors = fingerprint(funcs)
    return any(t._node.buffer is None and _constant_only(t._node) for t in tensors)


def aliases(nodes: list) -> Optional[tuple]:
    """None when `nodes` are all distinct, else the first place of each one's node: part
    of a key whose nodes a trace (or a replay) reads once each (a function reading `a`
    and `b`, one tensor at its first call, must not reuse that trace once they differ)."""
    ids = list(map(id, nodes))
    if len(set(ids)) == len(ids):
        return None
    first: dict = {}
    return tuple(first.setdefault(k, j) for j, k in enumerate(ids))


def _plan(cap: Sequence[Any], nodes: list, ext: list) -> tuple:
    """(specs, leaf nodes): where each leaf of the captured values comes from on a later
    call -- ("t", k) the node of the key's k-th tensor (`nodes`: those nodes when the
    trace began), ("e", k) the caller's k-th extra operand, ("n", node) a fixed leaf made
    while tracing. Raises Doubt for anything else (also lazyarray/nn/module_reuse.py's)."""
    where = {}
    for k, n in enumerate(ext):
        where.setdefault(id(n), ("e", k))
    for k, n in enumerate(nodes):
        where.setdefault(id(n), ("t", k))
    specs, leaves, seen = [], [], set()
    stack = list(cap)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        spec = where.get(id(n))
        if spec is None:
            if n.op == "constant" and n.buffer is None:
                continue                       # kept inside the module
            if n.buffer is not None or (not n.operands and n.op not in _FIXED_LEAVES):
                raise Doubt(f"a captured {n.op} not reachable from the key")
            if n.operands and not _constant_only(n):
                stack.extend(n.operands)
                continue
            spec = ("n", n)
        specs.append(spec)
        leaves.append(n)
    return specs, leaves


def _constant_only(n: Any) -> bool:
    """Whether `n` is computed from kept constants and fixed leaves alone (a shared
    broadcast of 0.0, made once for every graph by ops/promotion.py; a Python scalar of
    the body broadcast to a shape). Such a node is passed as itself on a later call:
    recomputed from its constant it would be a new node where the first call's graph
    had the shared one (also read outside the loop there), and the graph, one node
    longer, would compile again; and a fixed leaf is passed as itself anyway, so what is
    computed from it alone is the same value (the example decoder's 20 broadcasts of
    its scalars were recomputed at every call)."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        if m.buffer is not None or (not m.operands and m.op != "constant"
                                    and m.op not in _FIXED_LEAVES):
            return False
        stack.extend(m.operands)
    return True


def clear() -> None:
    """Forget every kept trace (tests)."""
    _CACHE.clear()


__all__ = ["Doubt", "Entry", "Site", "aliases", "clear", "fingerprint"]
