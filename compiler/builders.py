"""Graph-building helpers for the primitives' vector-Jacobian products (and for gradient
seeds): constants, broadcasts, arithmetic, reshapes, per-row gathers and scatters, each
a few primitives applied to nodes. Nothing here walks a graph (that is `autodiff.py`).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np

from . import dtypes as D
from .dtypes import DType
from .node import Node, kept_constant
from .primitive import apply

def const(value: Any, dtype: DType) -> Node:
    """A 0-d constant kept in the module (a fixed number of a rule, never user data)."""
    return kept_constant(value, dtype)


def full(value: Any, shape: tuple, dtype: DType) -> Node:
    return broadcast(const(value, dtype), shape)


def full_like(x: Node, value: Any) -> Node:
    return full(value, x.shape, x.dtype)


def zeros_like(x: Node) -> Node:
    return full(0, x.shape, x.dtype)


def broadcast(x: Node, shape: tuple, dims: Optional[tuple] = None) -> Node:
    """x's dimension i becomes dimension dims[i] of `shape` (trailing when dims is None)."""
    shape = tuple(shape)
    if dims is None:
        dims = tuple(range(len(shape) - x.ndim, len(shape)))
    if x.shape == shape and tuple(dims) == tuple(range(len(shape))):
        return x
    return apply("broadcast_in_dim", x, shape=shape, broadcast_dimensions=tuple(dims))


def add(a: Node, b: Node) -> Node:
    return apply("add", a, b)


def sub(a: Node, b: Node) -> Node:
    return apply("subtract", a, b)


def mul(a: Node, b: Node) -> Node:
    return apply("multiply", a, b)


def div(a: Node, b: Node) -> Node:
    return apply("divide", a, b)


def neg(a: Node) -> Node:
    return apply("negate", a)


def scale(x: Node, c: float) -> Node:
    return mul(x, full_like(x, c))


def plus(x: Node, c: float) -> Node:
    return add(x, full_like(x, c))


def select(pred: Node, a: Node, b: Node) -> Node:
    return apply("select", pred, a, b)


def compare(a: Node, b: Node, direction: str) -> Node:
    return apply("compare", a, b, direction=direction)


def where_else_zero(pred: Node, g: Node) -> Node:
    return select(pred, g, zeros_like(g))


def reduce_sum(x: Node, axes: Iterable[int]) -> Node:
    axes = tuple(sorted(axes))
    if not axes:
        return x
    return apply("reduce", x, axes=axes, kind="sum")


def reshape(x: Node, shape: tuple) -> Node:
    shape = tuple(shape)
    return x if x.shape == shape else apply("reshape", x, shape=shape)


def transpose(x: Node, perm: Sequence[int]) -> Node:
    perm = tuple(perm)
    return x if perm == tuple(range(x.ndim)) else apply("transpose", x, permutation=perm)


def inverse_permutation(perm: Sequence[int]) -> tuple:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return tuple(inv)


def convert(x: Node, dtype: DType) -> Node:
    return x if x.dtype is dtype else apply("convert", x, dtype=dtype)


def iota(shape: tuple, dtype: DType, dimension: int) -> Node:
    return apply("iota", shape=tuple(shape), dtype=dtype, dimension=dimension)


def _rows(x: Node, axis: int) -> tuple:
    """x with `axis` moved last and the rest flattened: (node of shape (R, n), perm)."""
    perm = tuple(d for d in range(x.ndim) if d != axis) + (axis,)
    moved = transpose(x, perm)
    n = x.shape[axis]
    r = int(np.prod(moved.shape[:-1], dtype=np.int64))
    return reshape(moved, (r, n)), perm


def take_along_axis(x: Node, idx: Node, axis: int) -> Node:
    """out[..., i, ...] = x[..., idx[..., i, ...], ...] with per-row indices along `axis`
    (idx has x's shape), written with one flat gather."""
    rows, perm = _rows(x, axis)
    irows, _ = _rows(idx, axis)
    r, n = rows.shape
    offsets = mul(iota((r, n), D.int64, 0), full(n, (r, n), D.int64))
    flat = reshape(add(offsets, convert(irows, D.int64)), (r * n,))
    out = apply("gather", reshape(rows, (r * n,)), flat, axis=0)
    moved_shape = tuple(x.shape[p] for p in perm)
    return transpose(reshape(out, moved_shape), inverse_permutation(perm))


def scatter_add_along_axis(shape: tuple, idx: Node, upd: Node, axis: int) -> Node:
    """zeros(shape) with upd[..., i, ...] added at [..., idx[..., i, ...], ...] (per-row)."""
    irows, perm = _rows(idx, axis)
    urows, _ = _rows(upd, axis)
    r, n = irows.shape
    m = shape[axis]
    offsets = mul(iota((r, n), D.int64, 0), full(m, (r, n), D.int64))
    flat = reshape(add(offsets, convert(irows, D.int64)), (r * n,))
    base = full(0, (r * m,), upd.dtype)
    out = apply("scatter", base, flat, reshape(urows, (r * n,)), axis=0, mode="add")
    moved_shape = tuple(shape[p] for p in perm)
    return transpose(reshape(out, moved_shape), inverse_permutation(perm))
