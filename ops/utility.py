"""Utility functions: all, any, diff; and the array API's finfo/iinfo objects."""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .elementwise import as_bool
from .promotion import as_node, normalize_axes, normalize_axis, shape_str


def _logical_reduce(name: str, kind: str, x: Any, axis: Any, keepdims: bool) -> Node:
    x = as_bool(x)
    axes = normalize_axes(name, axis, x.ndim)
    out = apply("reduce", x, axes=axes, kind=kind)
    if keepdims:
        out = apply("reshape", out, shape=tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return out


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _logical_reduce("all", "and", x, axis, keepdims)


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _logical_reduce("any", "or", x, axis, keepdims)


def diff(x: Any, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Node:
    """The n-th forward difference along `axis` (bool: not_equal, as NumPy)."""
    from .manipulation import concat, slice_axis
    from .elementwise import not_equal, subtract
    x = as_node(x)
    if x.ndim == 0:
        raise ValueError("diff: needs a tensor of rank >= 1, got a 0-d tensor")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"diff: n must be a non-negative int, got {n!r}")
    axis = normalize_axis("diff", axis, x.ndim)
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        x = concat([_along(as_node(p), x, axis) for p in parts], axis)
    for _ in range(n):
        m = x.shape[axis]
        if m == 0:
            break
        hi, lo = slice_axis(x, axis, 1, m), slice_axis(x, axis, 0, m - 1)
        x = not_equal(hi, lo) if x.dtype.kind == "bool" else subtract(hi, lo)
    return x


def _along(p: Node, x: Node, axis: int) -> Node:
    """A prepend/append value shaped to join x along `axis` (a scalar spans one step)."""
    from .promotion import broadcast_to
    if p is x or p.ndim == x.ndim:
        return p
    if p.ndim != 0:
        raise ValueError(f"diff: prepend/append of shape {shape_str(p.shape)} must be 0-d or "
                         f"have the rank of x {shape_str(x.shape)}")
    shape = tuple(1 if d == axis else k for d, k in enumerate(x.shape))
    return broadcast_to(p, shape)


@dataclass(frozen=True)
class FloatInfo:
    """finfo(dtype) as the array API describes it; `dtype` is lazyarray's own."""
    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: D.DType


@dataclass(frozen=True)
class IntInfo:
    bits: int
    max: int
    min: int
    dtype: D.DType


def finfo_of(dtype: D.DType) -> FloatInfo:
    """A complex dtype's limits are its parts' (NumPy's finfo(complex64) is float32's, and
    the array API's says so)."""
    if dtype.is_complex:
        dtype = D.real_dtype(dtype)
    if not dtype.is_float:
        raise TypeError(f"finfo: needs a floating-point or complex dtype, got {dtype.name} "
                        "(use iinfo)")
    f = D.finfo(dtype)
    return FloatInfo(int(f.bits), float(f.eps), float(f.max), float(f.min),
                     float(f.smallest_normal), dtype)


def iinfo_of(dtype: D.DType) -> IntInfo:
    if not dtype.is_int:
        raise TypeError(f"iinfo: needs an integer dtype, got {dtype.name} (use finfo)")
    i = D.iinfo(dtype)
    return IntInfo(int(i.bits), int(i.max), int(i.min), dtype)


__all__ = ["all", "any", "diff"]
