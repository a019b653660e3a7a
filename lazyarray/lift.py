"""The one path from tensors to ops: `lift` turns a function of `lazyarray.ops` (nodes in,
nodes out) into a public function (tensors in, tensors out). It finds the device, checks
that all tensors share it, turns data (NumPy arrays, lists) into leaves, and wraps the
results. Every public function and every Tensor method and operator goes through it
(`lazyarray/methods.py` builds the methods with `method` and `reflected`).

Keywords follow one rule (see the README): `dim=`/`keepdim=` are PyTorch's spelling of
`axis=`/`keepdims=`; a function whose meaning differs between the two conventions
(`max(dim=)` giving values and indices) says so itself (`lazyarray/conventions.py`).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import numpy as np

from .compiler.hlo import dtypes as D
from .compiler.graph.node import Node
from .compiler.primitive import apply as _apply, beside as _beside, made as _made
from .compiler.primitive import memo_of as _memo_of
from . import runtime
from .ops import elementwise as _elementwise
from .ops import promotion as _promotion
from .ops.promotion import KEPT_SET as _KEPT_SET, typed_scalar as _typed_scalar
from .ops.promotion import int_fits as _int_fits
from .ops.promotion import spread_scalar as _spread_scalar, typed_spread as _typed_spread
from .ops.promotion import weak_operand as _weak_operand
from .tensor import Tensor, host_array, raise_mixed_devices

_SCALARS = (bool, int, float)
_FLOAT64 = np.float64      # an operator takes it as the Python float it subclasses
_NP_BOOL = np.bool_
_wrap = Tensor._wrap
_INEXACT = frozenset(D.FLOATS + D.COMPLEX)
_INT_OR_BOOL = frozenset(D.INTEGERS + (D.bool_,))
_DEFAULT_FLOAT = D.DEFAULT_FLOAT
_F32_EXACT = _elementwise.F32_EXACT
_DEFAULT_INT = D.DEFAULT_INT
_BOOL = D.bool_
_I64_MIN, _I64_MAX = -2 ** 63, 2 ** 63 - 1     # the default int's range


_converted = _promotion.converted

# NumPy scalar type -> (its dtype, the Python type of its value), for the scalars an
# elementwise op takes as a 0-d runtime scalar of their own dtype (see `numpy_operand`);
# np.float64 and np.bool_ are not here
_NP_SCALARS = {d.np.type: (d, complex if d.is_complex else float if d.is_float else int)
               for d in D.EVERY if d not in (D.float64, D.bool_)}


def numpy_operand(v: np.generic) -> Any:
    """A NumPy scalar as an elementwise op's operand, one rule for the operators and the
    functions (`x * s` and `la.multiply(x, s)` record the same graph):

    - np.float64 subclasses Python's float: it is that float, weak (the tensor's dtype
      stays: `x * np.float64(2.5)` is float32 for a float32 x, as PyTorch has it); so is
      np.bool_ the Python bool (weak or strong, a bool never changes a result's dtype);
    - any other NumPy scalar keeps its dtype (strong, as NumPy's scalars are: an int32
      tensor times np.int64(2) is int64; a float16 one times np.float32(2) float32),
      recorded as a 0-d runtime scalar of that dtype (no device buffer to make).

    None for anything else (a NumPy scalar of a dtype lazyarray lacks): the caller lifts
    it as data, which raises naming the dtype."""
    kind = type(v)
    if kind is _FLOAT64:
        return float(v)
    found = _NP_SCALARS.get(kind)
    if found is not None:
        return _typed_scalar(found[1](v), found[0])
    if kind is np.bool_:
        return bool(v)
    return None


def truth_operand(v: np.generic) -> Any:
    """A NumPy scalar as an operand of a logical op (`fn.truth_operands`, ops/elementwise.py
    `_logical`): its truth value as a Python bool, exact (the scalar holds its own dtype's
    value; NaN is true, as in NumPy). None for a NumPy scalar of a dtype lazyarray lacks
    (the caller lifts it as data, which raises naming the dtype)."""
    kind = type(v)
    if kind in _NP_SCALARS or kind is _FLOAT64 or kind is np.bool_:
        return bool(v)
    return None


_RENAMES = (("dim", "axis"), ("keepdim", "keepdims"))


def find_state(values: Any, state: Optional[runtime.DeviceState]) -> Optional[runtime.DeviceState]:
    """The one device of the tensors among `values` (nested in lists and tuples)."""
    for v in values:
        if type(v) is Tensor:
            if state is None:
                state = v._state
            elif v._state is not state:
                raise_mixed_devices(v._state, state)
        elif isinstance(v, (list, tuple)):
            state = find_state(v, state)
    return state


def node_of(x: Any, state: runtime.DeviceState, op: Any = None) -> Any:
    """An operand of an op: a tensor's node, a Python scalar as is, data as a new leaf."""
    if type(x) is Tensor:
        if x._state is not state:
            raise_mixed_devices(x._state, state)
        return x._node
    if isinstance(x, _SCALARS):
        return x
    if isinstance(x, np.generic):
        v = numpy_operand(x)
        if v is not None:
            return v
    if isinstance(x, (str, bytes)) or x is None:
        name = getattr(op, "__name__", "op")
        raise TypeError(f"{name}: unsupported operand {x!r} ({type(x).__name__}); operands "
                        "are tensors, Python scalars and NumPy arrays")
    return Tensor._from_numpy(host_array(x), state)._node


def _unwrap(v: Any, state: runtime.DeviceState, elementwise: bool = False) -> Any:
    if type(v) is Tensor:
        return v._node
    if elementwise and isinstance(v, np.generic):
        s = numpy_operand(v)
        if s is not None:
            return s
    if isinstance(v, np.ndarray) or (isinstance(v, np.generic) and not isinstance(v, np.bool_)):
        return Tensor._from_numpy(np.asarray(v), state)._node
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (list, tuple)) and any(type(e) is Tensor or isinstance(e, np.ndarray) for e in v):
        return type(v)(_unwrap(e, state) for e in v)
    return v


_PLAIN = (type(None), bool, int, float, str, D.DType)


def _plain(v: Any) -> bool:
    """A keyword value `_unwrap` leaves as it is (no tensor or array inside)."""
    t = type(v)
    return t in _PLAIN or (t is tuple and all(type(e) is int for e in v))


def _flat_operands(args: tuple) -> Any:
    """(device, operands) when every argument is a tensor (at least one, all on one
    device) or a plain value (a Python scalar, None, a str, a tuple of ints and tensors): what
    `_unwrap` would give, without its general walk. None otherwise (data to lift, nested
    lists, mixed devices: the general path)."""
    state = None
    nodes = []
    for a in args:
        kind = type(a)
        if kind is Tensor:
            if state is None:
                state = a._state
            elif a._state is not state:
                return None
            nodes.append(a._node)
        elif kind in _SCALARS or a is None or _plain(a):    # _plain: a shape, a str
            nodes.append(a)
        elif kind is tuple:                 # start indices (0, 0, pos, 0): ints and tensors
            items = []
            for e in a:
                if type(e) is Tensor:
                    if state is None:
                        state = e._state
                    elif e._state is not state:
                        return None
                    items.append(e._node)
                elif type(e) is int:
                    items.append(e)
                else:
                    return None
            nodes.append(tuple(items))
        else:
            return None
    return None if state is None else (state, nodes)


def _three(a: Tensor, b: Any, c: Any) -> Any:
    """The operands of `fn(a, b, c)` when b and c are tensors of a's device or Python
    scalars (or None): (b, c) as nodes and scalars; None for anything else (data to
    lift, another device: the general path). The caller records and wraps: `Tensor._wrap`
    finds the user's line by walking the frames above it, each one of ours costs."""
    state = a._state
    kind = type(b)
    if kind is Tensor:
        if b._state is not state:
            return None
        b = b._node
    elif kind not in _SCALARS and b is not None:
        return None
    kind = type(c)
    if kind is Tensor:
        if c._state is not state:
            return None
        c = c._node
    elif kind not in _SCALARS and c is not None:
        return None
    return b, c


def wrap(v: Any, state: runtime.DeviceState) -> Any:
    """Results of an op as tensors (a node, or a tuple or list holding nodes)."""
    if type(v) is Node or isinstance(v, Node):
        return Tensor._wrap(v, state)
    if isinstance(v, (list, tuple)) and any(isinstance(e, Node) for e in v):
        return type(v)(wrap(e, state) for e in v)
    return v


def _torch_keywords(fn: Callable) -> Callable[[dict], dict]:
    """A function renaming dim/keepdim to axis/keepdims where `fn` takes the latter."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return lambda kw: kw
    renames = [(a, b) for a, b in _RENAMES if b in params and a not in params]
    if not renames:
        return lambda kw: kw

    def rename(kwargs: dict) -> dict:
        for theirs, ours in renames:
            if theirs in kwargs:
                if ours in kwargs:
                    raise TypeError(f"{fn.__name__}: got both {theirs}= and {ours}=; "
                                    f"pass one")
                kwargs[ours] = kwargs.pop(theirs)
        return kwargs
    return rename


def lift(fn: Callable) -> Callable:
    """`fn` over nodes as a function over tensors (and data, and Python scalars)."""
    if getattr(fn, "direct", None) is not None:
        return _direct_public(fn, _lift(fn))
    public = _lift(fn)
    if getattr(fn, "__module__", None) == _elementwise.__name__:
        return _elementwise_front(fn, public) or public
    return public


# the operands `_direct_public` hands to the operators' direct forms: what `_method` and
# `_reflected` take as `lift` does (a NumPy scalar by `numpy_operand`'s rule)
_DIRECT_OPERANDS = frozenset((Tensor, bool, int, float, _FLOAT64, np.bool_, *_NP_SCALARS))


def _direct_public(fn: Callable, public: Callable) -> Callable:
    """`la.add(x, 2.5)`, `la.less(2, x)`, `la.multiply(x, np.float32(3))`: a binary
    elementwise op that says how it records its common cases (`fn.direct`) takes a tensor
    and a tensor or scalar the way its operator does (`direct_method`: the same graph,
    fewer calls); anything else (keywords, data to lift, two scalars) goes to `public`,
    the general lifted function. (One function for both, the operator's body taking
    `device=` too, made the operators ~0.05 us slower: a keyword parameter and a check
    at every `x * y`, for ~0.03 us here.)"""
    # the user's frame is 3 above `_wrap` (direct, the operator's body, _wrap), 4 when
    # the operator's body calls its general one
    forward = direct_method(fn, _method(fn, 4), False, 3)
    backward = direct_method(fn, _reflected(fn, 4), True, 3)
    operands = _DIRECT_OPERANDS

    def direct(a: Any, b: Any, *, device: Any = None) -> Any:
        if device is None:
            if type(a) is Tensor:
                if type(b) in operands:
                    return forward(a, b)
            elif type(b) is Tensor and type(a) in operands:
                return backward(b, a)
        return public(a, b, device=device)
    return _named(direct, fn)


# NumPy scalars an elementwise op takes as operands (`numpy_operand`, `truth_operand`)
_NP_KINDS = frozenset((_FLOAT64, np.bool_, *_NP_SCALARS))
_SCALAR_KINDS = frozenset(_SCALARS)
_PLAIN_OPERANDS = frozenset((*_SCALARS, type(None)))     # a ternary op's scalar or None


def _elementwise_front(fn: Callable, public: Callable) -> Any:
    """The public function of an elementwise op of one, two or three operands (`la.exp(x)`,
    `la.pow(x, 2)`, `la.where(c, x, 0.0)`, `la.clip(x, 0, 1)`): the op's own parameters
    (and `device=`), so that a call binds them as a plain function does (no tuple of
    arguments or dict of keywords to make); the usual forms (tensors of one device,
    Python and NumPy scalars) go straight to the op and are wrapped in this frame (the
    user's is the next one up: no frame of ours between for `_wrap` to walk); anything
    else goes to `public`, the general lifted function. None for an op whose parameters
    no front here has."""
    params = _parameters(fn)
    if params == ("x",):
        front = _unary_front(fn, public)
    elif params == ("a", "b"):
        np_operand = truth_operand if getattr(fn, "truth_operands", False) else numpy_operand
        front = _binary_front(fn, public, np_operand)
    elif params in (("condition", "x", "y"), ("x", "min=None", "max=None")):
        front = _ternary_front(fn, public, params[1] == "min=None")
    else:
        return None
    return _named(front, fn)


def _parameters(fn: Callable) -> tuple:
    """`fn`'s parameters as ('x', 'min=None', ...); () for any but plain positional ones."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    if any(p.kind is not _POSITIONAL for p in params):
        return ()
    return tuple(p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
                 for p in params)


_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD


def _named(front: Callable, fn: Callable) -> Callable:
    """`front` under `fn`'s name (its own errors, a missing or unexpected argument, name
    the op), docstring and signature."""
    front.__code__ = front.__code__.replace(co_name=fn.__name__, co_qualname=fn.__name__)
    functools.update_wrapper(front, fn)
    front.__qualname__ = fn.__name__
    front.__wrapped_op__ = fn
    return front


def _unary_front(fn: Callable, public: Callable) -> Callable:
    def front(x: Any, *, device: Any = None) -> Any:
        if device is None and type(x) is Tensor:
            out = fn(x._node)
            return _wrap(out, x._state) if type(out) is Node else wrap(out, x._state)
        return public(x, device=device)
    return front


def _binary_front(fn: Callable, public: Callable, np_operand: Callable) -> Callable:
    """`fn(tensor, tensor or scalar)` and `fn(scalar, tensor)`; a NumPy scalar as
    `np_operand` takes it (None: `public` lifts it, which raises naming its dtype)."""
    np_kinds, scalars = _NP_KINDS, _SCALAR_KINDS

    def front(a: Any, b: Any, *, device: Any = None) -> Any:
        if device is None:
            if type(a) is Tensor:
                state = a._state
                kind = type(b)
                if kind is Tensor:
                    if b._state is state:
                        out = fn(a._node, b._node)
                        return _wrap(out, state) if type(out) is Node else wrap(out, state)
                elif kind in scalars:
                    out = fn(a._node, b)
                    return _wrap(out, state) if type(out) is Node else wrap(out, state)
                elif kind in np_kinds:
                    s = np_operand(b)
                    if s is not None:
                        out = fn(a._node, s)
                        return _wrap(out, state) if type(out) is Node else wrap(out, state)
            elif type(b) is Tensor:
                state = b._state
                kind = type(a)
                if kind in scalars:
                    out = fn(a, b._node)
                    return _wrap(out, state) if type(out) is Node else wrap(out, state)
                if kind in np_kinds:
                    s = np_operand(a)
                    if s is not None:
                        out = fn(s, b._node)
                        return _wrap(out, state) if type(out) is Node else wrap(out, state)
        return public(a, b, device=device)
    return front


def _ternary_front(fn: Callable, public: Callable, bounds: bool) -> Callable:
    """`fn(tensor, b, c)` with b and c tensors of its device, Python scalars or None:
    `where(condition, x, y)`, or (`bounds`) `clip(x, min=None, max=None)`."""
    plain = _PLAIN_OPERANDS

    def record(a: Tensor, b: Any, c: Any) -> Any:
        """The op's node when b and c are tensors of a's device, scalars or None (the
        caller wraps it); `_NO` for anything else."""
        state = a._state
        kind = type(b)
        if kind is Tensor:
            if b._state is not state:
                return _NO
            b = b._node
        elif kind not in plain:
            return _NO
        kind = type(c)
        if kind is Tensor:
            if c._state is not state:
                return _NO
            c = c._node
        elif kind not in plain:
            return _NO
        return fn(a._node, b, c)

    if bounds:
        def front(x: Any, min: Any = None, max: Any = None, *, device: Any = None) -> Any:
            if device is None and type(x) is Tensor:
                if type(min) in plain and type(max) in plain:     # clip(x, 0, 1)
                    out = fn(x._node, min, max)
                else:
                    out = record(x, min, max)
                if out is not _NO:
                    return _wrap(out, x._state) if type(out) is Node else wrap(out, x._state)
            return public(x, min, max, device=device)
        return front

    def front(condition: Any, x: Any, y: Any, *, device: Any = None) -> Any:
        if device is None and type(condition) is Tensor:
            if type(x) in plain and type(y) in plain:         # where(c, 1.0, 0.0)
                out = fn(condition._node, x, y)
            else:
                out = record(condition, x, y)
            if out is not _NO:
                state = condition._state
                return _wrap(out, state) if type(out) is Node else wrap(out, state)
        return public(condition, x, y, device=device)
    return front


_NO = object()      # an operand `_ternary_front` leaves to the general way


def _lift(fn: Callable) -> Callable:
    """`lift` for every op: the fast paths of the usual argument forms, then the general
    way (find the device, lift data, wrap the results)."""
    rename = _torch_keywords(fn)
    # an elementwise op takes NumPy scalars as the operators do (`numpy_operand`)
    elementwise = getattr(fn, "__module__", None) == _elementwise.__name__
    np_operand = truth_operand if getattr(fn, "truth_operands", False) else numpy_operand

    @functools.wraps(fn)
    def public(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        if device is None and not kwargs and args and type(args[0]) is Tensor:
            n = len(args)
            if n == 2:
                a, b = args                   # fast path: f(tensor, tensor or scalar)
                kind = type(b)
                if kind is Tensor:
                    if a._state is b._state:
                        out = fn(a._node, b._node)
                        return _wrap(out, a._state) if type(out) is Node else wrap(out, a._state)
                elif kind in _SCALARS or _plain(b):
                    out = fn(a._node, b)          # a scalar, a dtype, a shape: f(x, (3, 4))
                    return _wrap(out, a._state) if type(out) is Node else wrap(out, a._state)
                if elementwise and isinstance(b, np.generic):
                    s = np_operand(b)             # la.multiply(x, np.float32(2.5))
                    if s is not None:
                        out = fn(a._node, s)
                        return _wrap(out, a._state) if type(out) is Node else wrap(out, a._state)
            elif n == 1:
                t = args[0]                   # fast path: f(tensor)
                out = fn(t._node)
                return _wrap(out, t._state) if type(out) is Node else wrap(out, t._state)
            elif n == 3:
                a = args[0]                   # where(c, x, y), clip(x, 0, 1), f(c, x, 0.0)
                found = _three(a, args[1], args[2])
                if found is not None:
                    out = fn(a._node, *found)
                    return _wrap(out, a._state) if type(out) is Node else wrap(out, a._state)
        if elementwise and device is None and not kwargs and len(args) == 2 and \
                type(args[1]) is Tensor:
            s, b = args                       # fast path: f(scalar, tensor), `la.less(2, x)`
            kind = type(s)
            if kind in _SCALARS:
                out = fn(s, b._node)
                return _wrap(out, b._state) if type(out) is Node else wrap(out, b._state)
            if isinstance(s, np.generic):
                s = np_operand(s)             # la.subtract(np.float32(2.5), x)
                if s is not None:
                    out = fn(s, b._node)
                    return _wrap(out, b._state) if type(out) is Node else wrap(out, b._state)
        if device is None and len(args) == 1 and type(args[0]) is Tensor \
                and all(map(_plain, kwargs.values())):
            t = args[0]                       # fast path: f(tensor, axis=..., keepdims=...)
            return wrap(fn(t._node, **rename(kwargs)), t._state)
        if device is None and all(map(_plain, kwargs.values())):
            found = _flat_operands(args)      # fast path: f(x, weight, bias), f(c, x, 0.0)
            if found is not None:
                state, nodes = found
                out = fn(*nodes, **rename(kwargs)) if kwargs else fn(*nodes)
                return _wrap(out, state) if type(out) is Node else wrap(out, state)
        state = runtime.get_device(device) if device is not None else None
        state = find_state(args, state)
        state = find_state(kwargs.values(), state) or runtime.get_device(None)
        if static:
            args, kwargs = _static_ints(static, args, kwargs)
        args = tuple(_unwrap(a, state, elementwise) for a in args)
        kwargs = rename({k: _unwrap(v, state, elementwise) for k, v in kwargs.items()})
        return wrap(fn(*args, **kwargs), state)
    static = _static_parameters(fn)
    public.__wrapped_op__ = fn
    return public


# parameters that name axes, counts or offsets: a NumPy integer there is the int it holds
# (`x.sum(np.int64(1))`, `la.transpose(x, (np.int64(1), 0))` as NumPy takes them), never
# an operand lifted into a tensor
_STATIC_NAMES = frozenset(("axis", "axes", "axis0", "axis1", "axis2", "dim", "dims",
                           "source", "destination", "start_dim", "end_dim", "k", "offset",
                           "shift", "shifts"))


def _static_parameters(fn: Callable) -> tuple:
    """(positions, names) of `fn`'s parameters in _STATIC_NAMES; () when it has none."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return ()
    names = {p.name for p in params if p.name in _STATIC_NAMES}
    if not names:
        return ()
    positional = {k for k, p in enumerate(params) if p.name in names and
                  p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
    star = next((k for k, p in enumerate(params) if p.kind is p.VAR_POSITIONAL
                 and p.name in names), None)
    return positional, names, star


def _as_int(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, (tuple, list)) and any(isinstance(e, np.integer) for e in v):
        return tuple(int(e) if isinstance(e, np.integer) else e for e in v)
    return v


def _static_ints(static: tuple, args: tuple, kwargs: dict) -> tuple:
    positional, names, star = static
    args = tuple(_as_int(a) if k in positional or (star is not None and k >= star) else a
                 for k, a in enumerate(args))
    kwargs = {k: _as_int(v) if k in names else v for k, v in kwargs.items()}
    return args, kwargs


def unary_method(fn: Callable) -> Callable:
    """A Tensor method of one operand, `t.exp()`: the op on the node, wrapped; anything
    more (arguments, keywords) goes through `lift`."""
    public = lift(fn)

    def op_method(self: Tensor, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:
            return public(self, *args, **kwargs)
        out = fn(self._node)
        return _wrap(out, self._state) if type(out) is Node else wrap(out, self._state)
    functools.update_wrapper(op_method, public)
    op_method.__wrapped_op__ = fn
    return op_method


def method(fn: Callable) -> Callable:
    """A Tensor method from an op: `t.op(x)` is `op(t, x)`; the operators (one other
    operand, the hot path of recording) take it without a detour through `lift`."""
    if getattr(fn, "direct", None) is not None:
        return direct_method(fn, _method(fn, 3), False)
    return _method(fn)


def reflected(fn: Callable) -> Callable:
    """The reflected operator: `2 - t` is `subtract(2, t)`."""
    if getattr(fn, "direct", None) is not None:
        return direct_method(fn, _reflected(fn, 3), True)
    return _reflected(fn)


def direct_method(fn: Callable, general: Callable, swap: bool, depth: int = 2) -> Callable:
    """The operator of an elementwise op that says how it records its common cases
    (`fn.direct`, ops/elementwise.py `_recorder`): another tensor of the same dtype and
    shape, a Python scalar that the tensor's dtype takes (weakly), a NumPy scalar of the
    tensor's own dtype, or a Python int beside a bool tensor (both the default int),
    written out here — the nodes `fn` records, without the calls between (the hottest
    path of recording: `x * 0.5`, `2.5 - x`, `x * y`). Anything else goes to `general`,
    the method that calls `fn`. `swap`: the reflected operator (the scalar is the first
    operand). `depth`: where `_wrap` starts its walk for the user's frame (2: this is the
    operator itself; 3: a lifted function calls it, `_direct_public`)."""
    prim, fast, attrs, _ = fn.direct
    kw = {} if attrs is None else dict(attrs)
    memo = _memo_of(prim, **kw)     # the memo's table of prim (and compare's direction)
    floats = fast & _INEXACT
    to_float = D.DEFAULT_FLOAT in fast
    # a bool tensor beside a Python int: both the default int (`weak_scalar_dtype`), the
    # tensor converted, as `fn` records it
    to_int = D.DEFAULT_INT in fast
    exact_ints = getattr(fn, "exact_ints", False)

    def scalar_node(xn: Node, s: Node, state: Any) -> Tensor:
        """`prim` of node xn and the scalar s spread beside it (xn's type), wrapped: the
        memo's entry for two operands of xn's type, looked up here (`beside` written out)."""
        t = xn.type
        if t is not None:
            found = memo.get(t.pair)
            if found is not None:
                return _wrap(_made(prim, (s, xn) if swap else (xn, s), found), state, depth + 1)
        return _wrap(_beside(memo, prim, xn, s, s, xn, kw) if swap else
                     _beside(memo, prim, xn, s, xn, s, kw), state, depth + 1)

    def exact_int(a: Node, other: int) -> Node:
        """`i / 2`: i as the default float, the int weak beside it (what `fn` records for
        an int the default float and i's dtype both hold exactly)."""
        a = _converted(a, _DEFAULT_FLOAT)
        if other in _KEPT_SET:
            s = _weak_operand(other, a)
        else:            # what `_weak_operand` makes of it, written out
            s = _spread_scalar(other, _DEFAULT_FLOAT, a.shape, a.type)
        return _beside(memo, prim, a, s, s, a, kw) if swap else _beside(memo, prim, a, s, a, s, kw)

    def op_method(a: Tensor, b: Any) -> Tensor:
        kind = type(b)
        if kind is _FLOAT64:              # a float subclass, weak as a float is
            b, kind = float(b), float
        elif kind is _NP_BOOL:            # the Python bool it is (see `numpy_operand`)
            b, kind = bool(b), bool
        if kind is float:
            xn = a._node
            dtype = xn.dtype
            if dtype not in floats and dtype in _INT_OR_BOOL and to_float:
                # an integer tensor beside a float: both the default float, the tensor converted
                dtype = D.DEFAULT_FLOAT
                xn = _converted(xn, dtype)
            if dtype in floats:
                if b in _KEPT_SET:       # 0.0, -0.0, 1.0, -1.0: a constant
                    s = _weak_operand(b, xn)
                else:                        # what `_weak_operand` makes of it, written out
                    t = xn.type
                    s = _spread_scalar(b, dtype, xn.shape, t)
                    if t is not None:        # (`scalar_node` written out: the hottest form)
                        found = memo.get(t.pair)
                        if found is not None:
                            return _wrap(_made(prim, (s, xn) if swap else (xn, s), found),
                                         a._state, depth)
                return scalar_node(xn, s, a._state)
        elif kind is int or kind is bool:    # x + 1, 3 * x: as `fn` takes it
            xn = a._node
            dtype = xn.dtype
            if dtype in fast and (dtype is not _BOOL or kind is bool):
                s = _weak_operand(b, xn)
                if s is not None:
                    t = xn.type                  # (`scalar_node` written out)
                    if t is not None:
                        found = memo.get(t.pair)
                        if found is not None:
                            return _wrap(_made(prim, (s, xn) if swap else (xn, s), found),
                                         a._state, depth)
                    return scalar_node(xn, s, a._state)
            elif dtype is _BOOL and kind is int and to_int and _I64_MIN <= b <= _I64_MAX:
                xn = _converted(xn, _DEFAULT_INT)     # `m * 2`, `2 << m`: m as the default int
                return scalar_node(xn, _weak_operand(b, xn), a._state)
            if exact_ints and dtype in _INT_OR_BOOL and \
                    -_F32_EXACT <= b <= _F32_EXACT and _int_fits(b, dtype):
                return _wrap(exact_int(xn, b), a._state, depth)
        elif kind is Tensor:
            if not swap:
                xn, yn = a._node, b._node
                dtype = xn.dtype
                if dtype in fast and b._state is a._state:
                    # two of one type: the memo's entry (the rule accepted them before)
                    t = xn.type
                    if t is yn.type and t is not None:
                        found = memo.get(t.pair)
                        if found is not None:
                            return _wrap(_made(prim, (xn, yn), found), a._state, depth)
                if yn.dtype is dtype and yn.shape == xn.shape and b._state is a._state:
                    if dtype in fast:
                        return _wrap(_apply(prim, xn, yn, **kw), a._state, depth)
                    if exact_ints and dtype in _INT_OR_BOOL:   # `i / j`: both the default float
                        xn, yn = _converted(xn, _DEFAULT_FLOAT), _converted(yn, _DEFAULT_FLOAT)
                        t = xn.type
                        found = memo.get(t.pair if t is yn.type and t is not None else
                                         (t, yn.type))
                        return _wrap(_made(prim, (xn, yn), found) if found is not None else
                                     _apply(prim, xn, yn, **kw), a._state, depth)
        else:
            found = _NP_SCALARS.get(kind)
            if found is not None and found[0] is a._node.dtype:
                # `x * np.float32(2.5)`: a 0-d scalar of x's dtype
                xn = a._node
                dtype = xn.dtype
                if dtype in fast:
                    t = xn.type
                    s = _typed_spread(found[1](b), dtype, xn.shape, t)
                    if t is not None:            # (`scalar_node` written out)
                        hit = memo.get(t.pair)
                        if hit is not None:
                            return _wrap(_made(prim, (s, xn) if swap else (xn, s), hit),
                                         a._state, depth)
                    return scalar_node(xn, s, a._state)
                if exact_ints and found[1] is int:
                    # `i / np.int32(2)` as `i / 2`: the int, exact in the default float,
                    # divides as the same value converted along with i would
                    v = int(b)
                    if -_F32_EXACT <= v <= _F32_EXACT:
                        return _wrap(exact_int(xn, v), a._state, depth)
        return general(a, b)
    op_method.__name__ = ("r" if swap else "") + getattr(fn, "__name__", "op")
    op_method.__doc__ = getattr(fn, "__doc__", None)
    return op_method


def _method(fn: Callable, depth: int = 2) -> Callable:
    """`method` calling `fn` for every operand."""
    def op_method(self: Tensor, other: Any) -> Tensor:
        state = self._state
        kind = type(other)
        if kind is Tensor:
            if other._state is not state:
                raise_mixed_devices(other._state, state)
            return _wrap(fn(self._node, other._node), state, depth)
        if kind is float or kind is int:
            return _wrap(fn(self._node, other), state, depth)
        if kind is _FLOAT64:        # a float subclass, weak as a float is (see node_of)
            return _wrap(fn(self._node, float(other)), state, depth)
        found = _NP_SCALARS.get(kind)
        if found is not None:       # another NumPy scalar: strong (see numpy_operand)
            return _wrap(fn(self._node, _typed_scalar(found[1](other), found[0])), state, depth)
        return _wrap(fn(self._node, node_of(other, state, fn)), state, depth)
    op_method.__name__ = getattr(fn, "__name__", "op")
    op_method.__doc__ = getattr(fn, "__doc__", None)
    return op_method


def _reflected(fn: Callable, depth: int = 2) -> Callable:
    """`reflected` calling `fn` for every operand."""
    def op_method(self: Tensor, other: Any) -> Tensor:
        state = self._state
        kind = type(other)
        if kind is float or kind is int:
            return _wrap(fn(other, self._node), state, depth)
        if kind is _FLOAT64:
            return _wrap(fn(float(other), self._node), state, depth)
        found = _NP_SCALARS.get(kind)
        if found is not None:
            return _wrap(fn(_typed_scalar(found[1](other), found[0]), self._node), state, depth)
        return _wrap(fn(node_of(other, state, fn), self._node), state, depth)
    op_method.__name__ = "r" + getattr(fn, "__name__", "op")
    return op_method
