"""Broadcasting, type promotion with weak Python scalars, and scalar leaves.

Every user-facing op turns its inputs into nodes of one dtype and one shape through
these helpers, and the errors they raise name the op and the shapes or dtypes.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.hlo.dtypes import DType
from ..compiler.hlo.literal import Literal
from ..compiler.graph.node import (Node, constant_leaf, kept_constant, new_node, node_type,
                                   scalar_leaf)
from ..compiler.primitive import apply, entry_of, made, memo_of

PY_SCALARS = (bool, int, float)

# Scalars that simplification cares about stay constants in the module (and in its
# fingerprint); every other Python scalar becomes a runtime parameter.
KEPT_CONSTANTS = (0, 1, -1)

def shape_str(shape: tuple) -> str:
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


@functools.lru_cache(maxsize=None)
def _int_range(dtype: DType) -> tuple:
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


def scalar(value: Any, dtype: DType) -> Node:
    """A 0-d node holding a Python scalar as `dtype`."""
    if dtype.is_int:
        if isinstance(value, float):
            raise TypeError(f"cannot use the float {value!r} as {dtype.name}")
        lo, hi = _int_range(dtype)
        if not lo <= int(value) <= hi:
            raise OverflowError(f"Python int {value} is out of range for {dtype.name} "
                                f"[{lo}, {hi}]")
    # NaN is in no tuple; -0.0 == 0 would share (and flip the sign of) the cached 0
    if value not in KEPT_CONSTANTS or _is_negative_zero(value):
        return scalar_leaf(value, dtype)
    return kept_constant(value, dtype)


_copysign = math.copysign


def _is_negative_zero(value: Any) -> bool:
    return type(value) is float and value == 0.0 and math.copysign(1.0, value) < 0.0


def constant(array: Any, dtype: DType) -> Node:
    """A literal array kept in the module (small index tables and the like)."""
    return constant_leaf(Literal(np.asarray(array, dtype.np)), dtype)


def convert(x: Node, dtype: DType) -> Node:
    if x.dtype is dtype:
        return x
    return converted(x, dtype)


def converted(x: Node, dtype: DType) -> Node:
    """x (of another dtype) as `dtype`: the memo's entry for it, looked up here in the
    memo's table of conversions to `dtype`, `apply` on a miss (convert's rule takes every
    pair of dtypes)."""
    table = _CONVERTS.get(dtype)
    if table is None:
        table = _CONVERTS[dtype] = memo_of("convert", dtype=dtype)
    found = table.get(x.type)
    return made("convert", (x,), found) if found is not None else apply("convert", x, dtype=dtype)


_CONVERTS: dict = {}     # dtype -> the memo's table of conversions to it (`memo_of`)


def broadcast_shapes(op: str, *shapes: tuple) -> tuple:
    """The shape `shapes` broadcast to together; raises naming `op` when they cannot be.
    Results are remembered (a training step broadcasts the same shapes at every step);
    failures are not."""
    try:
        out = _BROADCAST.get(shapes)
    except TypeError:                    # a shape given as a list
        return _broadcast_shapes(op, shapes)
    if out is None:
        out = _broadcast_shapes(op, shapes)
        if len(_BROADCAST) > 4096:       # shapes that change at every call: stay bounded
            _BROADCAST.clear()
        _BROADCAST[shapes] = out
    return out


_BROADCAST: dict = {}      # shapes -> their broadcast shape


def _broadcast_shapes(op: str, shapes: tuple) -> tuple:
    ndim = max(len(s) for s in shapes)
    out = []
    for i in range(ndim):
        size = 1
        for s in shapes:
            d = s[i - ndim + len(s)] if i - ndim + len(s) >= 0 else 1
            if d != 1:
                if size != 1 and d != size:
                    raise ValueError(f"{op}: shapes {', '.join(shape_str(s) for s in shapes)} "
                                     f"cannot be broadcast together (dimension {i - ndim}: "
                                     f"{size} vs {d})")
                size = d
        out.append(size)
    return tuple(out)


def broadcast_to(x: Node, shape: tuple) -> Node:
    if x.shape == shape:
        return x
    offset = len(shape) - x.ndim
    if offset < 0:
        raise ValueError(f"broadcast_to: cannot broadcast {shape_str(x.shape)} to {shape_str(shape)}")
    for i, d in enumerate(x.shape):
        if d != 1 and d != shape[offset + i]:
            raise ValueError(f"broadcast_to: cannot broadcast {shape_str(x.shape)} to "
                             f"{shape_str(shape)}")
    return apply("broadcast_in_dim", x, shape=tuple(shape),
                 broadcast_dimensions=tuple(range(offset, len(shape))))


_INEXACT = frozenset(D.FLOATS + D.COMPLEX)
_INT_RANGE = {d: _int_range(d) for d in D.INTEGERS}     # what a Python int may be, per dtype
KEPT_SET = frozenset(KEPT_CONSTANTS)     # `in` hashes once (the tuple compares three times)
_KEPT_NODES: dict = {}     # (Python type, value, dtype) -> `kept_constant(value, dtype)`


def int_fits(value: int, dtype: DType) -> bool:
    """Whether the Python int (or bool) `value` is in the range of integer `dtype` (any
    value fits a bool or float dtype here: the callers check the kinds themselves)."""
    bounds = _INT_RANGE.get(dtype)
    return bounds is None or bounds[0] <= value <= bounds[1]


def weak_scalar_like(value: Any, node: Node) -> Any:
    """A Python scalar beside a node whose dtype it takes: the common `x * 2.5` case
    (what `weak_scalar_dtype` and `scalar` decide, written out for the usual kinds; None
    sends the rest down the general path: a float beside an integer tensor, an int beside
    a bool one or out of the tensor's range, which raises there). The result, when not
    None, has `node`'s dtype and shape (a 0-d scalar or constant, broadcast when `node`
    is not 0-d)."""
    dtype = node.dtype
    kind = type(value)
    if kind is float:
        if dtype not in _INEXACT:
            return None
    elif kind is int:
        bounds = _INT_RANGE.get(dtype)
        if bounds is not None:
            if not bounds[0] <= value <= bounds[1]:
                return None
        elif dtype is D.bool_:
            return None
    elif kind is not bool:
        return None
    if value not in KEPT_SET:
        return spread_scalar(value, dtype, node.shape, node.type)
    s = _kept(value, kind, dtype)
    return spread_node(s, node.shape, node.type) if node.shape else s


def weak_operand(value: Any, node: Node) -> Any:
    """`weak_scalar_like(value, node)` for an operand of a node being made (never a
    result: a tensor must not hold a shared node): a kept constant 0, 1 or -1 broadcast
    to node's shape is made once per (kind, value, dtype, shape) and shared
    (`kept_spread`), so that `x + 1`, `relu(x)`, `where(c, x, 0.0)` make one node fewer."""
    dtype = node.dtype
    kind = type(value)
    if kind is float:
        if dtype not in _INEXACT:
            return None
    elif kind is int:
        bounds = _INT_RANGE.get(dtype)
        if bounds is not None:
            if not bounds[0] <= value <= bounds[1]:
                return None
        elif dtype is D.bool_:
            return None
    elif kind is not bool:
        return None
    shape = node.shape
    if value in KEPT_SET and (kind is not float or value != 0.0 or _copysign(1.0, value) > 0.0):
        return kept_spread(kind, value, dtype, shape)
    return spread_scalar(value, dtype, shape, node.type)


_KEPT_SPREADS: dict = {}    # (kind, value, dtype, shape) -> a kept constant spread to shape


def spread_scalar(value: Any, dtype: DType, shape: tuple, t: Any = None) -> Node:
    """A runtime scalar `value` of `dtype` broadcast to `shape` (the bare scalar when
    `shape` is ()): the two nodes of every scalar beside a tensor, the leaf's slots set
    here as `new_node` sets them, the broadcast made from the memo's entry (`spread_node`;
    tests/test_recording_fronts.py compares them with `new_node`'s). `t`: the interned
    type of (shape, dtype) when the caller has it (a tensor's beside which the scalar is
    spread), or None (interned here)."""
    s = _new(Node)
    s.op = "scalar"
    s.operands = ()
    s.shape = ()
    s.dtype = dtype
    s.attrs = {}
    s.buffer = None
    s.value = value
    s.sig = None
    s.site = None
    if not shape:
        s.type = t
        return s
    s.type = None
    if t is None:
        t = node_type(shape, dtype)
    found = t.spread
    if found is not None:
        return made("broadcast_in_dim", (s,), found)
    return _first_spread(s, t)


def spread_node(s: Node, shape: tuple, t: Any = None) -> Node:
    """The 0-d node `s` broadcast to `shape`: `apply("broadcast_in_dim", s, shape=shape,
    broadcast_dimensions=())`, its memo entry kept on the result's type (`NodeType.spread`:
    a 0-d node of one dtype spread to one shape has one type and one entry; the attribute
    items of apply's key cost more to build than the node). `t`: that type, (shape,
    s.dtype) interned, when the caller has it."""
    if t is None:
        t = node_type(shape, s.dtype)
    found = t.spread
    if found is not None:
        return made("broadcast_in_dim", (s,), found)
    return _first_spread(s, t)


def _first_spread(s: Node, t: Any) -> Node:
    """`spread_node` of a type whose entry is not yet kept: through `apply` (its rule and
    memo), the entry kept on `t` (not when its attributes are not shareable)."""
    n = apply("broadcast_in_dim", s, shape=t.shape, broadcast_dimensions=())
    if n.type is t:
        t.spread = entry_of(n)
    return n


_new = object.__new__


def kept_spread(kind: type, value: Any, dtype: DType, shape: tuple) -> Node:
    """The kept constant `value` (0, 1 or -1 as a Python `kind`; not -0.0) of `dtype`
    broadcast to `shape`, made once and shared by every graph: kept constants live for
    good, and so does their broadcast (bounded: cleared past 1024 entries). Only for an
    operand of a node being made, never a tensor's own node (materializing it would
    turn the shared node into a buffer of every later graph)."""
    key = (kind, value, dtype, shape)
    n = _KEPT_SPREADS.get(key)
    if n is None:
        n = _kept(value, kind, dtype)
        if shape:
            n = apply("broadcast_in_dim", n, shape=shape, broadcast_dimensions=())
        if len(_KEPT_SPREADS) >= 1024:
            _KEPT_SPREADS.clear()
        _KEPT_SPREADS[key] = n
    return n


def typed_spread(value: Any, dtype: DType, shape: tuple, t: Any = None) -> Node:
    """`typed_scalar(value, dtype)` broadcast to `shape`, as an operand of a node being
    made: a kept constant's broadcast is the shared one (`kept_spread`). `t`: the
    interned type of (shape, dtype), if the caller has it (see `spread_scalar`)."""
    if value in KEPT_SET and (type(value) is not float or value != 0.0 or
                              _copysign(1.0, value) > 0.0):
        return kept_spread(type(value), value, dtype, shape)
    return spread_scalar(value, dtype, shape, t)


def typed_scalar(value: Any, dtype: DType) -> Node:
    """`scalar(value, dtype)` for a value `dtype` holds exactly (a NumPy scalar's own value,
    from `.item()`): no range or kind check to make."""
    if value in KEPT_SET:
        return _kept(value, type(value), dtype)
    return new_node("scalar", (), (), dtype, {}, value)


def _kept(value: Any, kind: type, dtype: DType) -> Node:
    """What `scalar` gives for a value equal to a kept constant: the shared constant
    node, or a runtime scalar for -0.0 (which == 0 and hashes as 0, so the cache below
    must not see it)."""
    if kind is float and value == 0.0 and _copysign(1.0, value) < 0.0:     # -0.0
        return new_node("scalar", (), (), dtype, {}, value)
    key = (kind, value, dtype)
    node = _KEPT_NODES.get(key)
    if node is None:
        node = _KEPT_NODES[key] = scalar(value, dtype)
    return node


def operands(op: str, *args: Any, dtype: Any = None) -> list:
    """Nodes of one dtype and one shape from nodes and Python scalars (weakly typed)."""
    if dtype is None and len(args) == 1 and type(args[0]) is Node:
        return [args[0]]
    if dtype is None and len(args) == 2:        # fast paths: recording must stay cheap
        a, b = args
        ta, tb = type(a), type(b)
        if ta is Node and tb is Node:
            if a.dtype is b.dtype:
                if a.shape == b.shape:
                    return [a, b]
                shape = broadcast_shapes(op, a.shape, b.shape)      # x + bias
                return [broadcast_to(a, shape), broadcast_to(b, shape)]
        elif ta is Node and tb in PY_SCALARS:
            s = weak_scalar_like(b, a)
            if s is not None:
                return [a, s]
        elif tb is Node and ta in PY_SCALARS:
            s = weak_scalar_like(a, b)
            if s is not None:
                return [s, b]
    nodes = [a for a in args if isinstance(a, Node)]
    for a in args:
        if not isinstance(a, (Node,) + PY_SCALARS):
            raise TypeError(f"{op}: unsupported operand type {type(a).__name__}")
    if dtype is None:
        if nodes:
            dtype = D.result_type(*[n.dtype for n in nodes])
            for a in args:
                if not isinstance(a, Node):
                    dtype = D.promote(dtype, D.weak_scalar_dtype(dtype, a))
        else:
            dtype = D.result_type(*[D.scalar_dtype(a) for a in args])
    shape = broadcast_shapes(op, *[n.shape for n in nodes]) if nodes else ()
    out = []
    for a in args:
        n = convert(a, dtype) if isinstance(a, Node) else scalar(a, dtype)
        out.append(broadcast_to(n, shape))
    return out


def dtype_of(x: Any) -> DType:
    return x.dtype if isinstance(x, Node) else D.scalar_dtype(x)


def as_node(x: Any, dtype: Any = None) -> Node:
    if isinstance(x, Node):
        return x if dtype is None else convert(x, D.to_dtype(dtype))
    if isinstance(x, PY_SCALARS):
        return scalar(x, D.to_dtype(dtype) if dtype is not None else D.scalar_dtype(x))
    raise TypeError(f"expected a tensor or a Python scalar, got {type(x).__name__}")


def normalize_axis(op: str, axis: int, ndim: int) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {type(axis).__name__}")
    if not -max(ndim, 1) <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        valid = "0 or -1" if ndim == 0 else f"{-ndim}..{ndim - 1}"
        raise IndexError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim} "
                         f"(valid: {valid})")
    return axis % ndim if ndim else 0


def normalize_axes(op: str, axis: Any, ndim: int) -> tuple:
    """None -> every axis; an int or a sequence -> sorted distinct non-negative axes.
    Results for None, ints and tuples of ints are remembered (every reduction asks, the
    same question at every step); errors are not."""
    kind = type(axis)
    if kind is int or axis is None or kind is tuple and all(type(a) is int for a in axis):
        key = (axis, ndim)
        out = _AXES.get(key)
        if out is None:
            out = _normalize_axes(op, axis, ndim)
            if len(_AXES) > 4096:
                _AXES.clear()
            _AXES[key] = out
        return out
    return _normalize_axes(op, axis, ndim)


_AXES: dict = {}      # (axis, ndim) -> normalized axes


def _normalize_axes(op: str, axis: Any, ndim: int) -> tuple:
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (int, np.integer)):
        axis = (axis,)
    elif not isinstance(axis, (tuple, list)):
        raise TypeError(f"{op}: axis must be an int, a tuple of ints or None, got "
                        f"{type(axis).__name__} {axis!r}")
    axes = [normalize_axis(op, int(a) if isinstance(a, np.integer) else a, ndim) for a in axis]
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axis in {tuple(axis)}")
    if ndim == 0:
        return ()     # axis 0 / -1 of a 0-d tensor is accepted (as NumPy does) and names no axis
    return tuple(sorted(axes))
