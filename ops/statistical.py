"""Statistical functions: sum, prod, mean, var, std, max, min, cumulative sums."""
from __future__ import annotations

from typing import Any, Optional

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply, entry_of, made
from .promotion import (as_node, broadcast_to, convert, normalize_axes, normalize_axis, scalar,
                        spread_scalar)
from .elementwise import abs as _abs, divide, subtract, sqrt, square
from . import autocast


def _keep(x: Node, out: Node, axes: tuple, keepdims: bool) -> Node:
    if not keepdims:
        return out
    shape = tuple(1 if i in axes else n for i, n in enumerate(x.shape))
    return apply("reshape", out, shape=shape)


def _accumulator(x: Node, dtype: Any) -> D.DType:
    if dtype is not None:
        return D.to_dtype(dtype)
    if x.dtype in autocast.LOW and autocast.current() is not None:
        return D.float32
    if x.dtype is D.bool_ or x.dtype.kind == "int":
        return D.int64
    if x.dtype.kind == "uint":
        return D.uint64
    return x.dtype


def _reduce(name: str, kind: str, x: Any, axis: Any, keepdims: bool, dtype: Any = None,
            accumulate: bool = True) -> Node:
    x = as_node(x)
    axes = normalize_axes(name, axis, x.ndim)
    if accumulate:
        x = convert(x, _accumulator(x, dtype))
    elif x.dtype is D.bool_ and kind in ("max", "min"):
        kind = "or" if kind == "max" else "and"
    elif x.dtype is D.bool_:
        pass
    out = apply("reduce", x, axes=axes, kind=kind)
    return _keep(x, out, axes, keepdims)


# ---- the common case, recorded directly -------------------------------------------------
#
# `x.sum()`, `x.mean(-1, keepdims=True)`, `x.max()` of a tensor whose dtype needs no
# accumulator (a float, int64, uint64), autocast off, an int or None axis: the nodes the
# general way makes, from a plan remembered per (op, shape, axis, keepdims). A plan is
# made by the general way's own checks (`normalize_axes`, `_nonempty`), so bad input
# raises each time and is never remembered. tests/test_recording_paths.py compares both.

_AUTOCAST = autocast._CURRENT           # [the autocast dtype or None], read at every call
_SUM_FAST = frozenset(D.FLOATS + (D.int64, D.uint64))     # their own accumulator
_MEAN_FAST = frozenset((D.float32, D.float64))            # no float32 detour
_ORDER_FAST = frozenset(D.FLOATS + D.INTEGERS)            # max/min: no bool, no complex
_PLANS: dict = {}      # (op, shape, axis, keepdims) -> (axes, shape out, kept shape, count)


def _plan(name: str, x: Node, axis: Any, keepdims: Any) -> Any:
    """(axes, reduced shape, kept shape or None, element count per result) of reducing `x`
    over `axis`; None for an axis other than an int or None (a bool hashes as an int but
    is no axis; a list is unhashable): the general way takes those."""
    if axis is not None and type(axis) is not int:
        return None
    key = (name, x.shape, axis, bool(keepdims))
    plan = _PLANS.get(key)
    if plan is None:
        axes = normalize_axes(name, axis, x.ndim)        # raises for a bad axis
        if name in ("max", "min"):
            _nonempty(name, x, axis)                     # raises for an empty one
        shape = x.shape
        out = tuple(n for i, n in enumerate(shape) if i not in axes)
        kept = tuple(1 if i in axes else n for i, n in enumerate(shape)) if keepdims else None
        plan = (axes, out, kept, _count(x, axes), {})
        if len(_PLANS) > 4096:          # shapes that change at every call: stay bounded
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


def _planned(kind: str, x: Node, plan: tuple) -> Node:
    """The reduce node of `plan` (and its keepdims reshape): what `_reduce` records, made
    by `apply`; the memo's entries for them kept in the plan per (kind, x's type), so
    that the next call makes them with no key to build (`made`)."""
    axes, _, kept, _, entries = plan
    entry = entries.get((kind, x.type))
    if entry is not None:
        node = made("reduce", (x,), entry[0])
        return node if kept is None else made("reshape", (node,), entry[1])
    node = apply("reduce", x, axes=axes, kind=kind)
    out = node if kept is None else apply("reshape", node, shape=kept)
    first, second = entry_of(node), entry_of(out)
    if first is not None and second is not None:
        entries[(kind, x.type)] = (first, second)
    return out


def sum(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Node:
    if type(x) is Node and dtype is None and x.dtype in _SUM_FAST and _AUTOCAST[0] is None:
        plan = _plan("sum", x, axis, keepdims)
        if plan is not None:
            return _planned("sum", x, plan)
    return _reduce("sum", "sum", x, axis, keepdims, dtype)


def prod(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Node:
    if type(x) is Node and dtype is None and x.dtype in _SUM_FAST and _AUTOCAST[0] is None:
        plan = _plan("prod", x, axis, keepdims)
        if plan is not None:
            return _planned("prod", x, plan)
    return _reduce("prod", "prod", x, axis, keepdims, dtype)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    if type(x) is Node and x.dtype in _ORDER_FAST:
        plan = _plan("max", x, axis, keepdims)
        if plan is not None:
            return _planned("max", x, plan)
    x = as_node(x)
    _nonempty("max", x, axis)
    return _reduce("max", "max", x, axis, keepdims, accumulate=False)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    if type(x) is Node and x.dtype in _ORDER_FAST:
        plan = _plan("min", x, axis, keepdims)
        if plan is not None:
            return _planned("min", x, plan)
    x = as_node(x)
    _nonempty("min", x, axis)
    return _reduce("min", "min", x, axis, keepdims, accumulate=False)


def _nonempty(name: str, x: Node, axis: Any) -> None:
    axes = normalize_axes(name, axis, x.ndim)
    if any(x.shape[a] == 0 for a in axes) or (not axes and 0 in x.shape and axis is None):
        raise ValueError(f"{name}: zero-size reduction over axes {axes} of shape {x.shape} "
                         "has no identity")


def _count(x: Node, axes: tuple) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


# float16 and bfloat16 statistics are computed in float32 and rounded once (as NumPy's
# mean does): a float16 sum of 10,000 values of 10 is already past float16's largest value
_LOW_PRECISION = (D.float16, D.bfloat16)


def _rounded_back(out: Node, dtype: D.DType) -> Node:
    """A low-precision input's statistic, back in its dtype (under autocast it stays
    float32, as autocast's reductions do)."""
    return out if autocast.current() is not None else convert(out, dtype)


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    if type(x) is Node and x.dtype in _MEAN_FAST and _AUTOCAST[0] is None:
        plan = _plan("mean", x, axis, keepdims)
        if plan is not None:
            n = plan[3]
            total = _planned("sum", x, plan)
            if n < 2:
                return divide(total, float(n)) if n != 1 else total
            # divide(total, float(n)) written out: a float beside a float tensor, weak
            return apply("divide", total, spread_scalar(float(n), x.dtype, total.shape,
                                                        total.type))
    x = autocast.widen(as_node(x))      # under autocast: computed and returned in float32
    if x.dtype in _LOW_PRECISION:
        return _rounded_back(mean(convert(x, D.float32), axis, keepdims), x.dtype)
    if not x.dtype.is_inexact:          # a complex x keeps its dtype (array API 2024.12)
        x = convert(x, D.DEFAULT_FLOAT)
    axes = normalize_axes("mean", axis, x.ndim)
    total = _reduce("mean", "sum", x, axes, keepdims)
    n = _count(x, axes)
    return divide(total, float(n)) if n != 1 else total


def var(x: Any, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Node:
    x = autocast.widen(as_node(x))      # under autocast: computed and returned in float32
    if x.dtype in _LOW_PRECISION:
        return _rounded_back(var(convert(x, D.float32), axis, keepdims, correction), x.dtype)
    if not x.dtype.is_inexact:
        x = convert(x, D.DEFAULT_FLOAT)
    axes = normalize_axes("var", axis, x.ndim)
    mu = mean(x, axes, keepdims=True)
    dev = subtract(x, broadcast_to(mu, x.shape))
    # a complex x's variance is the mean squared modulus, real (NumPy's var)
    dev = square(_abs(dev) if dev.dtype.is_complex else dev)
    total = _reduce("var", "sum", dev, axes, keepdims)
    n = _count(x, axes) - correction
    return divide(total, float(n) if n > 0 else 0.0)


def std(x: Any, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Node:
    x = as_node(x)
    if x.dtype in _LOW_PRECISION:
        return _rounded_back(std(convert(x, D.float32), axis, keepdims, correction), x.dtype)
    return sqrt(var(x, axis, keepdims, correction))


def cumulative_sum(x: Any, axis: Optional[int] = None, dtype: Any = None,
                   include_initial: bool = False) -> Node:
    x = as_node(x)
    if axis is None:
        if x.ndim != 1:
            raise ValueError(f"cumulative_sum: axis is required for a tensor of rank {x.ndim}")
        axis = 0
    axis = normalize_axis("cumulative_sum", axis, x.ndim)
    x = convert(x, _accumulator(x, dtype))
    out = apply("cumulative", x, axis=axis, kind="sum", reverse=False)
    if include_initial:
        low = tuple(1 if i == axis else 0 for i in range(x.ndim))
        out = apply("pad", out, scalar(0, x.dtype), edge_padding_low=low,
                    edge_padding_high=(0,) * x.ndim, interior_padding=(0,) * x.ndim)
    return out


def cumulative_prod(x: Any, axis: Optional[int] = None, dtype: Any = None,
                    include_initial: bool = False) -> Node:
    """Running products along `axis`; include_initial puts the empty product (1) first."""
    x = as_node(x)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"cumulative_prod: axis is required for a tensor of rank {x.ndim}")
        axis = 0
    axis = normalize_axis("cumulative_prod", axis, x.ndim)
    x = convert(x, _accumulator(x, dtype))
    out = apply("cumulative", x, axis=axis, kind="prod", reverse=False)
    if include_initial:
        low = tuple(1 if i == axis else 0 for i in range(x.ndim))
        out = apply("pad", out, scalar(1, x.dtype), edge_padding_low=low,
                    edge_padding_high=(0,) * x.ndim, interior_padding=(0,) * x.ndim)
    return out


__all__ = ["sum", "prod", "max", "min", "mean", "var", "std", "cumulative_sum", "cumulative_prod"]
