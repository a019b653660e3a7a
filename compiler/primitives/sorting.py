"""Sorting along one dimension: sort gives the values, argsort their stable order."""
from __future__ import annotations

import numpy as np

from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..primitive import NOT_DIFFERENTIABLE, OPAQUE, LibraryCall, apply, fail, primitive


def _check(op, operands, dimension):
    (x,) = operands
    if x.dtype.is_complex:
        fail(op, operands, "complex numbers are not ordered", TypeError)
    if not 0 <= dimension < x.ndim:
        fail(op, operands, f"dimension {dimension} out of range for rank {x.ndim}", IndexError)
    return x


def _stable_order(x, dimension, descending):
    if x.dtype == D.bfloat16.np:
        x = x.astype(np.float32)        # NumPy's bfloat16 (ml_dtypes) sort misorders NaN
    if not descending:
        return np.argsort(x, axis=dimension, kind="stable")
    n = x.shape[dimension]
    flipped = np.argsort(np.flip(x, dimension), axis=dimension, kind="stable")
    return (n - 1) - np.flip(flipped, dimension)


def _sort_infer(operands, dimension, descending):
    x = _check("sort", operands, dimension)
    return x.shape, x.dtype


def _sort_ref(x, dimension, descending):
    return np.take_along_axis(x, _stable_order(x, dimension, descending), axis=dimension)


def _sort_vjp(g, out, x, dimension, descending):
    """out[i] = x[perm[i]]: g[i] goes back to perm[i]."""
    perm = apply("argsort", x, dimension=dimension, descending=descending, index_dtype=D.int64)
    return (A.scatter_add_along_axis(x.shape, perm, g, dimension),)


def _dimension_batch(node, size, operands, batched):
    return B.same_op(node, operands, dimension=node.attrs["dimension"] + 1)


sort = primitive("sort", OPAQUE, _sort_infer, _sort_ref, attrs=("dimension", "descending"),
                 doc="NaN sorts after every number.", vjp=_sort_vjp,
                 library=LibraryCall("host"), batch=_dimension_batch)


def _argsort_infer(operands, dimension, descending, index_dtype):
    x = _check("argsort", operands, dimension)
    return x.shape, D.to_dtype(index_dtype)


def _argsort_ref(x, dimension, descending, index_dtype):
    return _stable_order(x, dimension, descending).astype(D.to_dtype(index_dtype).np)


argsort = primitive("argsort", OPAQUE, _argsort_infer, _argsort_ref,
                    attrs=("dimension", "descending", "index_dtype"),
                    doc="Stable: equal elements keep their order.", vjp=NOT_DIFFERENTIABLE,
                    library=LibraryCall("host"), batch=_dimension_batch)
