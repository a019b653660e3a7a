"""Graph builders over batched matrices (the last two axes), made of primitives: what the
decompositions' vector-Jacobian products are written with (and ops/ reuses)."""
from __future__ import annotations

from typing import Optional

from ..graph import builders as A
from ..hlo import dtypes as D
from ..graph.node import Node
from ..primitive import apply


def mT(x: Node) -> Node:
    """Swap the last two axes."""
    n = x.ndim
    return A.transpose(x, tuple(range(n - 2)) + (n - 1, n - 2))


def conj(x: Node) -> Node:
    """The complex conjugate (the value itself for real dtypes)."""
    return apply("conj", x) if getattr(x.dtype, "is_complex", False) else x


def mH(x: Node) -> Node:
    """The conjugate transpose of the last two axes."""
    return conj(mT(x))


def matmul(a: Node, b: Node) -> Node:
    """(..., m, k) @ (..., k, n) with equal batch dims: one batched dot_general."""
    nb = a.ndim - 2
    return apply("dot_general", a, b, lhs_contracting=(nb + 1,), rhs_contracting=(nb,),
                 lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)))


def _index_grid(shape: tuple) -> tuple:
    n = len(shape)
    return A.iota(shape, D.int64, n - 2), A.iota(shape, D.int64, n - 1)


def band_mask(shape: tuple, lower: bool, k: int = 0) -> Node:
    """True on and below the k-th diagonal (lower) or on and above it (upper)."""
    rows, cols = _index_grid(shape)
    offset = A.add(rows, A.full(k, shape, D.int64))
    return A.compare(cols, offset, "LE") if lower else A.compare(cols, offset, "GE")


def tril(x: Node, k: int = 0) -> Node:
    return A.where_else_zero(band_mask(x.shape, True, k), x)


def triu(x: Node, k: int = 0) -> Node:
    return A.where_else_zero(band_mask(x.shape, False, k), x)


def eye_mask(shape: tuple) -> Node:
    rows, cols = _index_grid(shape)
    return A.compare(rows, cols, "EQ")


def eye(shape: tuple, dtype: D.DType) -> Node:
    """Identity matrices of `shape` (..., n, n) (1 where row == column)."""
    return A.convert(eye_mask(shape), dtype)


def diagonal(x: Node) -> Node:
    """The main diagonal of the last two axes: (..., n, n) -> (..., n)."""
    return A.reduce_sum(A.where_else_zero(eye_mask(x.shape), x), (x.ndim - 1,))


def diag_embed(v: Node, n: Optional[int] = None) -> Node:
    """(..., k) -> (..., k, k) with v on the diagonal (or (..., n, n), v in its corner)."""
    k = v.shape[-1]
    n = k if n is None else n
    shape = v.shape[:-1] + (n, n)
    if n != k:
        v = pad_last(v, v.ndim - 1, n)
    wide = A.broadcast(v, shape, tuple(range(v.ndim - 1)) + (v.ndim,))
    return A.where_else_zero(eye_mask(shape), wide)


def rows_of(x: Node, start: int, stop: int) -> Node:
    """x[..., start:stop, :]"""
    return _slice(x, x.ndim - 2, start, stop)


def cols_of(x: Node, start: int, stop: int) -> Node:
    """x[..., :, start:stop]"""
    return _slice(x, x.ndim - 1, start, stop)


def _slice(x: Node, axis: int, start: int, stop: int) -> Node:
    if start == 0 and stop == x.shape[axis]:
        return x
    lo = [0] * x.ndim
    hi = list(x.shape)
    lo[axis], hi[axis] = start, stop
    return apply("slice", x, start_indices=tuple(lo), limit_indices=tuple(hi),
                 strides=(1,) * x.ndim)


def pad_last(x: Node, axis: int, total: int) -> Node:
    """x padded with zeros at the end of `axis` to size `total`."""
    extra = total - x.shape[axis]
    if extra == 0:
        return x
    high = [0] * x.ndim
    high[axis] = extra
    return apply("pad", x, A.const(0, x.dtype), edge_padding_low=(0,) * x.ndim,
                 edge_padding_high=tuple(high), interior_padding=(0,) * x.ndim)


def concat(xs: list, axis: int) -> Node:
    return xs[0] if len(xs) == 1 else apply("concatenate", *xs, dimension=axis)


def real_part(x: Node) -> Node:
    return apply("real", x) if getattr(x.dtype, "is_complex", False) else x
