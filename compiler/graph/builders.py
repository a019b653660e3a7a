"""Graph-building helpers for the primitives' vector-Jacobian products (and for gradient
seeds): constants, broadcasts, arithmetic, reshapes, per-row gathers and scatters, each
a few primitives applied to nodes. Nothing here walks a graph (that is `autodiff.py`).
"""
from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ..hlo import dtypes as D
from ..hlo.dtypes import DType
from .node import Node, kept_constant
from ..primitive import apply

# Fast paths. A vjp builds its cotangents from nodes it knows (g has the output's type, an
# operand its own), so most of its arithmetic is over operands of one shape and one float
# or complex dtype, where the primitive's rule cannot fail and gives that same type: such
# nodes are made directly, with the operands, attributes and type `apply` would give them
# (tests/test_vjp_fast.py checks both ways build one graph). Anything else goes through
# `apply`, whose rule checks it.
_INEXACT = frozenset(D.FLOATS + D.COMPLEX)
_ORDERED = frozenset(D.FLOATS)
_DIRECTIONS = frozenset(("EQ", "NE", "LT", "LE", "GT", "GE"))


def _arith(name: str, a: Node, b: Node) -> Node:
    dtype = a.dtype
    if b.dtype is dtype and dtype in _INEXACT and a.shape == b.shape:
        return Node(name, (a, b), a.shape, dtype, {})
    return apply(name, a, b)


def const(value: Any, dtype: DType) -> Node:
    """A 0-d constant kept in the module (a fixed number of a rule, never user data)."""
    return kept_constant(value, dtype)


def full(value: Any, shape: tuple, dtype: DType) -> Node:
    return broadcast(const(value, dtype), shape)


def full_like(x: Node, value: Any) -> Node:
    """`full(value, x.shape, x.dtype)`: a node's shape is already valid, so the broadcast
    of the 0-d constant is made directly."""
    c = kept_constant(value, x.dtype)
    shape = x.shape
    if not shape:
        return c
    return Node("broadcast_in_dim", (c,), shape, x.dtype,
                {"shape": shape, "broadcast_dimensions": ()})


def zeros_like(x: Node) -> Node:
    return full_like(x, 0)


def broadcast(x: Node, shape: tuple, dims: Optional[tuple] = None) -> Node:
    """x's dimension i becomes dimension dims[i] of `shape` (trailing when dims is None)."""
    shape = tuple(shape)
    if dims is None:
        dims = tuple(range(len(shape) - x.ndim, len(shape)))
    if x.shape == shape and tuple(dims) == tuple(range(len(shape))):
        return x
    return apply("broadcast_in_dim", x, shape=shape, broadcast_dimensions=tuple(dims))


def add(a: Node, b: Node) -> Node:
    return _arith("add", a, b)


def sub(a: Node, b: Node) -> Node:
    return _arith("subtract", a, b)


def mul(a: Node, b: Node) -> Node:
    return _arith("multiply", a, b)


def div(a: Node, b: Node) -> Node:
    return _arith("divide", a, b)


def neg(a: Node) -> Node:
    if a.dtype in _INEXACT:
        return Node("negate", (a,), a.shape, a.dtype, {})
    return apply("negate", a)


def scale(x: Node, c: float) -> Node:
    return mul(x, full_like(x, c))


def plus(x: Node, c: float) -> Node:
    return add(x, full_like(x, c))


def select(pred: Node, a: Node, b: Node) -> Node:
    shape, dtype = a.shape, a.dtype
    if pred.dtype is D.bool_ and b.dtype is dtype and dtype in _INEXACT and \
            pred.shape == shape and b.shape == shape:
        return Node("select", (pred, a, b), shape, dtype, {})
    return apply("select", pred, a, b)


def compare(a: Node, b: Node, direction: str) -> Node:
    dtype = a.dtype
    if b.dtype is dtype and dtype in _ORDERED and a.shape == b.shape and \
            direction in _DIRECTIONS:
        return Node("compare", (a, b), a.shape, D.bool_, {"direction": direction})
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
