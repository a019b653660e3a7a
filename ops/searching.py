"""Searching: argmax, argmin, where (in elementwise), searchsorted, count_nonzero, and
nonzero with a static size (traceable: no graph break)."""
from __future__ import annotations

from typing import Any

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .manipulation import reshape
from .promotion import (as_node, broadcast_to, convert, normalize_axes, normalize_axis,
                        scalar, shape_str)


def _arg(name: str, x: Any, axis: Any, keepdims: bool) -> Node:
    x = as_node(x)
    if x.dtype is D.bool_:
        x = apply("convert", x, dtype=D.int8)
    if axis is None or x.ndim == 0:
        flat = reshape(x, (-1,))
        if flat.shape[0] == 0:
            raise ValueError(f"{name}: empty tensor of shape {shape_str(x.shape)} has no {name}")
        out = apply(name, flat, axis=0, index_dtype=D.DEFAULT_INDEX)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    axis = normalize_axis(name, axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"{name}: axis {axis} of shape {shape_str(x.shape)} is empty")
    out = apply(name, x, axis=axis, index_dtype=D.DEFAULT_INDEX)
    if keepdims:
        out = apply("reshape", out, shape=x.shape[:axis] + (1,) + x.shape[axis + 1:])
    return out


def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _arg("argmax", x, axis, keepdims)


def argmin(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _arg("argmin", x, axis, keepdims)


def compare(a: Node, b: Node, direction: str) -> Node:
    return apply("compare", a, b, direction=direction)


def _precedes(a: Node, v: Node, side: str) -> Node:
    """Whether sorted element a goes before the value v: a < v (left) or a <= v (right),
    in the order sort uses (NaN after every number)."""
    if side == "left":
        before = compare(a, v, "LT")
        if a.dtype.is_float:
            v_nan, a_nan = compare(v, v, "NE"), compare(a, a, "NE")
            before = apply("or", before, apply("and", v_nan, apply("not", a_nan)))
        return before
    before = compare(a, v, "LE")
    if a.dtype.is_float:
        before = apply("or", before, compare(v, v, "NE"))
    return before


# up to this many sorted elements a compare-and-count (one fused kernel over
# len(x2) * len(x1) elements) beats a binary search's chain of gathers
COUNT_LIMIT = 64


def searchsorted(x1: Any, x2: Any, side: str = "left", sorter: Any = None) -> Node:
    """Where each value of x2 would go in the sorted 1-d x1 to keep it sorted (int64).

    Traceable (no data-dependent control flow): a short x1 is counted (how many elements
    precede each value); a long one is binary-searched with a fixed number of steps."""
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    a, v = as_node(x1), as_node(x2)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: x1 must be 1-d, got shape {shape_str(a.shape)}")
    if sorter is not None:
        from .indexing import take
        a = take(a, sorter, axis=0)
    dtype = D.promote(a.dtype, v.dtype)
    a, v = convert(a, dtype), convert(v, dtype)
    n = a.shape[0]
    if n == 0:
        return broadcast_to(scalar(0, D.DEFAULT_INDEX), v.shape)
    if n <= COUNT_LIMIT:
        return _count_before(a, v, side)
    return binary_search(a, v, side)


def _count_before(a: Node, v: Node, side: str) -> Node:
    shape = v.shape + (a.shape[0],)
    a = apply("broadcast_in_dim", a, shape=shape, broadcast_dimensions=(v.ndim,))
    v = apply("broadcast_in_dim", v, shape=shape, broadcast_dimensions=tuple(range(v.ndim)))
    count = apply("convert", _precedes(a, v, side), dtype=D.DEFAULT_INDEX)
    return apply("reduce", count, axes=(v.ndim - 1,), kind="sum")


def binary_search(a: Node, v: Node, side: str) -> Node:
    """lo/hi bisection, n.bit_length() steps, each halving every value's range; a value
    whose range is already empty keeps it."""
    n = a.shape[0]
    shape = v.shape

    def const(c: int) -> Node:
        return broadcast_to(scalar(c, D.int64), shape)

    lo, hi = const(0), const(n)
    for _ in range(n.bit_length()):
        mid = apply("divide", apply("add", lo, hi), const(2))
        go_right = _precedes(apply("gather", a, mid, axis=0), v, side)
        active = compare(lo, hi, "LT")
        lo = apply("select", apply("and", active, go_right), apply("add", mid, const(1)), lo)
        hi = apply("select", apply("and", active, apply("not", go_right)), mid, hi)
    return lo


def count_nonzero(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    """The number of nonzero elements (int64) over `axis`."""
    x = as_node(x)
    axes = normalize_axes("count_nonzero", axis, x.ndim)
    zero = broadcast_to(scalar(0, x.dtype) if x.dtype is not D.bool_ else scalar(False, x.dtype),
                        x.shape)
    ones = apply("convert", compare(x, zero, "NE"), dtype=D.DEFAULT_INDEX)
    out = apply("reduce", ones, axes=axes, kind="sum")
    if keepdims:
        out = apply("reshape", out, shape=tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return out


def nonzero_static(x: Any, size: int, fill_value: int = 0) -> tuple:
    """The indices of the first `size` nonzero elements, one int64 array of shape (size,)
    per dimension, padded with `fill_value` (jax.numpy.nonzero's static form).

    Each nonzero element's rank among the nonzero ones (an exclusive cumulative sum) is
    where its flat position is scattered; the rest are scattered out of range (skipped)."""
    x = as_node(x)
    if x.ndim == 0:
        raise ValueError("nonzero: zero-dimensional tensors are not supported (array API); "
                         "reshape to 1-d first")
    if not isinstance(size, int) or size < 0:
        raise ValueError(f"nonzero: size must be a non-negative int, got {size!r}")
    total = 1
    for n in x.shape:
        total *= n
    flat = reshape(x, (total,))
    zero = broadcast_to(scalar(False, D.bool_) if x.dtype is D.bool_ else scalar(0, x.dtype),
                        (total,))
    keep = compare(flat, zero, "NE")
    rank = apply("cumulative", apply("convert", keep, dtype=D.int64), axis=0, kind="sum",
                 reverse=False)
    rank = apply("subtract", rank, broadcast_to(scalar(1, D.int64), (total,)))
    skip = broadcast_to(scalar(size, D.int64), (total,))
    target = apply("select", keep, rank, skip)
    positions = apply("iota", shape=(total,), dtype=D.int64, dimension=0)
    empty = broadcast_to(scalar(-1, D.int64), (size,))
    found = apply("scatter", empty, target, positions, axis=0, mode="set")
    missing = compare(found, broadcast_to(scalar(0, D.int64), (size,)), "LT")
    fill = broadcast_to(scalar(int(fill_value), D.int64), (size,))
    if total == 0:
        return tuple(fill for _ in x.shape)
    out = []
    stride = total
    for d, n in enumerate(x.shape):
        stride //= n
        coord = found
        if stride != 1:
            coord = apply("divide", coord, broadcast_to(scalar(stride, D.int64), (size,)))
        if d > 0:       # the first coordinate is already below its size
            coord = apply("remainder", coord, broadcast_to(scalar(n, D.int64), (size,)))
        out.append(apply("select", missing, fill, coord))
    return tuple(out)


__all__ = ["argmax", "argmin", "searchsorted", "count_nonzero", "nonzero_static"]
