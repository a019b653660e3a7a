"""Linear algebra: matmul, tensordot, vecdot, all through dot_general."""
from __future__ import annotations

from typing import Any, Sequence

from ..compiler import dtypes as D
from ..compiler.node import Node
from ..compiler.primitive import apply
from .manipulation import expand_dims, matrix_transpose, reshape, squeeze
from .promotion import as_node, broadcast_shapes, broadcast_to, convert, normalize_axis, shape_str
from .statistical import sum as _sum
from .elementwise import multiply


def _common(op: str, a: Any, b: Any) -> tuple:
    a, b = as_node(a), as_node(b)
    dtype = D.promote(a.dtype, b.dtype)
    if dtype is D.bool_:
        raise TypeError(f"{op}: not defined for bool tensors")
    return convert(a, dtype), convert(b, dtype)


def matmul(a: Any, b: Any) -> Node:
    a, b = _common("matmul", a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(f"matmul: operands must have rank >= 1, got {shape_str(a.shape)} @ "
                         f"{shape_str(b.shape)}")
    va, vb = a.ndim == 1, b.ndim == 1
    if va:
        a = expand_dims(a, 0)
    if vb:
        b = expand_dims(b, 1)
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: shapes {shape_str(a.shape if not va else a.shape[1:])} and "
                         f"{shape_str(b.shape if not vb else b.shape[:1])} are not aligned: "
                         f"{a.shape[-1]} (dim -1) != {b.shape[-2]} (dim -2)")
    batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    if b.ndim == 2 and not batch == () and a.shape[:-2] == batch:
        # (..., m, k) @ (k, n): fold the batch into m, one plain GEMM
        out = apply("dot_general", a, b, lhs_contracting=(a.ndim - 1,), rhs_contracting=(0,),
                    lhs_batch=(), rhs_batch=())
    else:
        a = broadcast_to(a, batch + a.shape[-2:])
        b = broadcast_to(b, batch + b.shape[-2:])
        nb = len(batch)
        out = apply("dot_general", a, b, lhs_contracting=(nb + 1,), rhs_contracting=(nb,),
                    lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)))
    if va:
        out = squeeze(out, out.ndim - 2)
    if vb:
        out = squeeze(out, out.ndim - 1)
    return out


def tensordot(a: Any, b: Any, axes: Any = 2) -> Node:
    a, b = _common("tensordot", a, b)
    if isinstance(axes, int):
        if axes < 0 or axes > min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: axes={axes} out of range for {shape_str(a.shape)} and "
                             f"{shape_str(b.shape)}")
        la = tuple(range(a.ndim - axes, a.ndim))
        lb = tuple(range(axes))
    else:
        xa, xb = axes
        xa = [xa] if isinstance(xa, int) else list(xa)
        xb = [xb] if isinstance(xb, int) else list(xb)
        la = tuple(normalize_axis("tensordot", i, a.ndim) for i in xa)
        lb = tuple(normalize_axis("tensordot", i, b.ndim) for i in xb)
    for i, j in zip(la, lb):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"tensordot: axis {i} of {shape_str(a.shape)} (size {a.shape[i]}) "
                             f"does not match axis {j} of {shape_str(b.shape)} (size {b.shape[j]})")
    return apply("dot_general", a, b, lhs_contracting=la, rhs_contracting=lb, lhs_batch=(),
                 rhs_batch=())


def vecdot(a: Any, b: Any, axis: int = -1) -> Node:
    a, b = _common("vecdot", a, b)
    shape = broadcast_shapes("vecdot", a.shape, b.shape)
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    axis = normalize_axis("vecdot", axis, len(shape))
    return _sum(multiply(a, b), axis=axis, dtype=a.dtype)


def outer(a: Any, b: Any) -> Node:
    a, b = as_node(a), as_node(b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "outer"]
