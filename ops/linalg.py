"""Linear algebra: matmul, tensordot, vecdot, multi_dot, all through dot_general; norms, and
the condition number (the spectral and nuclear norms and inverses from decompositions.py)."""
from __future__ import annotations

import math
from typing import Any, Sequence

from ..compiler.graph import builders as _A
from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .manipulation import expand_dims, matrix_transpose, reshape, squeeze
from .promotion import as_node, broadcast_shapes, broadcast_to, convert, normalize_axis, shape_str
from .statistical import sum as _sum
from . import autocast
from .elementwise import multiply
from .decompositions import inv, singular_norm
from .matrix_inputs import back_real, check_matrix, floating


def _common(op: str, a: Any, b: Any) -> tuple:
    a, b = as_node(a), as_node(b)
    dtype = D.promote(a.dtype, b.dtype)
    if dtype is D.bool_:
        raise TypeError(f"{op}: not defined for bool tensors")
    return convert(a, dtype), convert(b, dtype)


def matmul(a: Any, b: Any) -> Node:
    a, b = _common("matmul", a, b)
    a, b = autocast.lower(a), autocast.lower(b)
    if len(a.shape) == 2 and len(b.shape) == 2 and a.shape[1] == b.shape[0]:
        # (m, k) @ (k, n), every linear layer's product: no batch to broadcast
        return apply("dot_general", a, b, lhs_contracting=(1,), rhs_contracting=(0,),
                     lhs_batch=(), rhs_batch=())
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
    a, b = autocast.lower(a), autocast.lower(b)
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
    _check_contracted("vecdot", a, b, axis)
    shape = broadcast_shapes("vecdot", a.shape, b.shape)
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    axis = normalize_axis("vecdot", axis, len(shape))
    if a.dtype.is_complex:      # the array API's (and NumPy's) vecdot: sum(conj(a) * b)
        a = apply("conj", a)
    return _sum(multiply(a, b), axis=axis, dtype=a.dtype)


def _check_contracted(op: str, a: Node, b: Node, axis: int) -> None:
    """The contracted axis is the operands' own, never broadcast (the array API standard's
    and NumPy's vecdot): both must have it, of one size."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    ndim = max(a.ndim, b.ndim)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for shapes {shape_str(a.shape)} "
                         f"and {shape_str(b.shape)}")
    back = axis - ndim if axis >= 0 else axis       # counted from the end, as broadcasting does
    if -back > min(a.ndim, b.ndim):
        raise ValueError(f"{op}: axis {axis} is not an axis of both {shape_str(a.shape)} and "
                         f"{shape_str(b.shape)}; the contracted axis is never broadcast")
    if a.shape[back] != b.shape[back]:
        raise ValueError(f"{op}: the contracted axis {axis} has size {a.shape[back]} in "
                         f"{shape_str(a.shape)} and {b.shape[back]} in {shape_str(b.shape)}; "
                         "they must be equal (the contracted axis is never broadcast)")


def outer(a: Any, b: Any) -> Node:
    a, b = as_node(a), as_node(b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


# ---- the traceable part of the array API's linalg extension ------------------------
# (decompositions such as inv, solve, svd, eigh need primitives the HLO does not have)

def diagonal(x: Any, offset: int = 0) -> Node:
    """The `offset` diagonal of the last two axes (above the main one when positive)."""
    x = as_node(x)
    if x.ndim < 2:
        raise ValueError(f"diagonal: needs rank >= 2, got {shape_str(x.shape)}")
    m, n = x.shape[-2:]
    row0, col0 = max(-offset, 0), max(offset, 0)
    length = max(0, min(m - row0, n - col0))
    flat = reshape(x, x.shape[:-2] + (m * n,))
    if length == 0:
        return broadcast_to(_zero(x), x.shape[:-2] + (0,))
    # element i sits at (row0 + i) * n + col0 + i of the flattened matrix
    index = apply("iota", shape=(length,), dtype=D.int64, dimension=0)
    index = apply("multiply", index, broadcast_to(_int(n + 1), (length,)))
    index = apply("add", index, broadcast_to(_int(row0 * n + col0), (length,)))
    return apply("gather", flat, index, axis=flat.ndim - 1)


def _int(value: int) -> Node:
    from .promotion import scalar
    return scalar(value, D.int64)


def _zero(x: Node) -> Node:
    from .promotion import scalar
    return scalar(False if x.dtype is D.bool_ else 0, x.dtype)


def trace(x: Any, offset: int = 0, dtype: Any = None) -> Node:
    """The sum of the `offset` diagonal of the last two axes."""
    return _sum(diagonal(x, offset), axis=-1, dtype=dtype)


def _float(op: str, x: Any) -> Node:
    """x in the dtype a norm computes in: a float or complex x as it is, others the default
    float."""
    x = as_node(x)
    if x.dtype is D.bool_:
        raise TypeError(f"{op}: not defined for bool tensors")
    return x if x.dtype.is_inexact else convert(x, D.DEFAULT_FLOAT)


def _magnitude(x: Node) -> Node:
    """|x| in x's real dtype: a complex value's modulus (complex128 -> float64), as NumPy's
    norms take it."""
    from .elementwise import abs as _abs
    return _abs(x)


def vector_norm(x: Any, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Node:
    """The p-norm over `axis` (all axes by default): ord 2, 1, inf, -inf, 0 or any p. A
    complex x gives the norm of its magnitudes, in the matching real dtype."""
    from .elementwise import pow as _pow, sqrt, not_equal
    from .statistical import max as _max, min as _min
    x = _float("vector_norm", x)
    a = _magnitude(x)
    if ord == 2:
        return sqrt(_sum(multiply(a, a), axis=axis, keepdims=keepdims))
    if ord == 1:
        return _sum(a, axis=axis, keepdims=keepdims)
    if ord == float("inf"):
        return _max(a, axis=axis, keepdims=keepdims)
    if ord == float("-inf"):
        return _min(a, axis=axis, keepdims=keepdims)
    if ord == 0:
        return convert(_sum(not_equal(a, 0), axis=axis, keepdims=keepdims), a.dtype)
    if not isinstance(ord, (int, float)) or isinstance(ord, bool):
        raise ValueError(f"vector_norm: ord must be a number, got {ord!r}")
    total = _sum(_pow(a, float(ord)), axis=axis, keepdims=keepdims)
    return _pow(total, 1.0 / float(ord))


def matrix_norm(x: Any, keepdims: bool = False, ord: Any = "fro") -> Node:
    """Norms of the matrices in the last two axes: 'fro', 1, -1, inf, -inf, and from the
    singular values 2 (largest), -2 (smallest), 'nuc' (their sum). A complex x gives a real
    norm of the matching precision."""
    from .elementwise import sqrt
    from .statistical import max as _max, min as _min
    x = _float("matrix_norm", x)
    if x.ndim < 2:
        raise ValueError(f"matrix_norm: needs rank >= 2, got {shape_str(x.shape)}")
    if ord in (2, -2, "nuc"):
        return singular_norm(x, ord, keepdims)
    a = _magnitude(x) if x.dtype.is_complex else x
    if ord == "fro":
        return sqrt(_sum(multiply(a, a), axis=(-2, -1), keepdims=keepdims))
    inner = {1: -2, -1: -2, float("inf"): -1, float("-inf"): -1}
    if ord not in inner:
        raise ValueError(f"matrix_norm: ord {ord!r} is not supported; valid: 'fro', 'nuc', "
                         "1, -1, 2, -2, inf, -inf")
    sums = _sum(_magnitude(a), axis=inner[ord], keepdims=True)
    pick = _max if ord in (1, float("inf")) else _min
    other = -1 if inner[ord] == -2 else -2
    out = pick(sums, axis=other, keepdims=True)
    return out if keepdims else reshape(out, x.shape[:-2])


def norm(x: Any, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Node:
    """numpy.linalg.norm: a vector norm over one axis, a matrix norm over two, and with no
    axis the 2-norm of all elements (ord None) or the norm a 1-D or 2-D x has."""
    x = _float("norm", x)
    if axis is None:
        if ord is None:
            return vector_norm(x, None, keepdims)
        if x.ndim not in (1, 2):
            raise ValueError(f"norm: with ord={ord!r} and no axis, x must be 1-D or 2-D, got "
                             f"shape {shape_str(x.shape)}")
        axis = tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(normalize_axis("norm", a, x.ndim) for a in axes)
    if len(axes) == 1:
        return vector_norm(x, axes[0], keepdims, 2 if ord is None else ord)
    if len(axes) != 2 or axes[0] == axes[1]:
        raise ValueError(f"norm: axis must name one axis or two different ones, got {axis!r}")
    from .manipulation import moveaxis
    out = matrix_norm(moveaxis(x, axes, (-2, -1)), False, "fro" if ord is None else ord)
    if keepdims:
        for a in sorted(axes):
            out = expand_dims(out, a)
    return out


def cross(a: Any, b: Any, axis: int = -1) -> Node:
    """The cross product of 3-vectors along `axis` (broadcasting the others)."""
    from .elementwise import subtract
    from .manipulation import concat, slice_axis
    a, b = _common("cross", a, b)
    shape = broadcast_shapes("cross", a.shape, b.shape)
    a, b = broadcast_to(a, shape), broadcast_to(b, shape)
    axis = normalize_axis("cross", axis, len(shape))
    if shape[axis] != 3:
        raise ValueError(f"cross: axis {axis} must have size 3, got shape {shape_str(shape)}")
    ai = [slice_axis(a, axis, i, i + 1) for i in range(3)]
    bi = [slice_axis(b, axis, i, i + 1) for i in range(3)]
    parts = [subtract(multiply(ai[(i + 1) % 3], bi[(i + 2) % 3]),
                      multiply(ai[(i + 2) % 3], bi[(i + 1) % 3])) for i in range(3)]
    return concat(parts, axis)


def matrix_power(x: Any, n: int) -> Node:
    """x @ x @ ... (n times) by repeated squaring; n = 0 gives the identity, a negative n
    the power of the inverse."""
    x = as_node(x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"matrix_power: needs square matrices, got {shape_str(x.shape)}")
    if not isinstance(n, int) or isinstance(n, bool):
        raise ValueError(f"matrix_power: n must be an int, got {n!r}")
    if n < 0:
        x, n = inv(x), -n
    if n == 0:
        k = x.shape[-1]
        eye = apply("compare", apply("iota", shape=(k, k), dtype=D.int64, dimension=0),
                    apply("iota", shape=(k, k), dtype=D.int64, dimension=1), direction="EQ")
        return broadcast_to(convert(eye, x.dtype), x.shape)
    result, base = None, x
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def cond(x: Any, p: Any = None) -> Node:
    """The condition number: max(s) / min(s) for p None or 2 (-2: the inverse ratio),
    else matrix_norm(x, p) * matrix_norm(inv(x), p)."""
    (a,), dtype = floating("cond", x)
    check_matrix("cond", a, square=p not in (None, 2, -2))
    if p in (None, 2, -2):
        s = apply("svd", a, full_matrices=False, compute_uv=False)
        top = apply("reduce", s, axes=(s.ndim - 1,), kind="max")
        low = apply("reduce", s, axes=(s.ndim - 1,), kind="min")
        return back_real(_A.div(low, top) if p == -2 else _A.div(top, low), dtype)
    return _A.mul(matrix_norm(a, ord=p), matrix_norm(inv(a), ord=p))


def multi_dot(arrays: Sequence[Any]) -> Node:
    """a @ b @ c ..., multiplied in the order that costs the fewest multiply-adds."""
    xs = [as_node(x) for x in arrays]
    if len(xs) < 2:
        raise ValueError(f"multi_dot: needs at least 2 arrays, got {len(xs)}")
    first_vec, last_vec = xs[0].ndim == 1, xs[-1].ndim == 1
    if first_vec:
        xs[0] = _A.reshape(xs[0], (1,) + xs[0].shape)
    if last_vec:
        xs[-1] = _A.reshape(xs[-1], xs[-1].shape + (1,))
    for i, x in enumerate(xs):
        if x.ndim != 2:
            raise ValueError(f"multi_dot: array {i} must be 2-D (the first and last may be "
                             f"1-D), got shape {shape_str(x.shape)}")
    out = _chain(xs, _chain_order([x.shape[0] for x in xs] + [xs[-1].shape[1]]), 0,
                 len(xs) - 1, matmul)
    if first_vec:
        out = _A.reshape(out, out.shape[1:])
    if last_vec:
        out = _A.reshape(out, out.shape[:-1])
    return out


def _chain_order(dims: list) -> dict:
    """The classic matrix-chain dynamic program: split[i, j] of the cheapest order."""
    n = len(dims) - 1
    cost = {(i, i): 0 for i in range(n)}
    split: dict = {}
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i, j] = math.inf
            for k in range(i, j):
                c = cost[i, k] + cost[k + 1, j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i, j]:
                    cost[i, j], split[i, j] = c, k
    return split


def _chain(xs: list, split: dict, i: int, j: int, matmul: Any) -> Node:
    if i == j:
        return xs[i]
    k = split[i, j]
    return matmul(_chain(xs, split, i, k, matmul), _chain(xs, split, k + 1, j, matmul))


LINALG = ("cond", "cross", "diagonal", "matmul", "matrix_norm", "matrix_power",
          "matrix_transpose", "multi_dot", "norm", "outer", "tensordot", "trace", "vecdot",
          "vector_norm")

__all__ = ["matmul", "tensordot", "vecdot", "matrix_transpose", "outer", "diagonal", "trace",
           "vector_norm", "matrix_norm", "cross", "matrix_power"]
