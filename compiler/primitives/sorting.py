"""Sorting along one dimension: sort gives the values, argsort their stable order."""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..primitive import OPAQUE, fail, primitive


def _check(op, operands, dimension):
    (x,) = operands
    if not 0 <= dimension < x.ndim:
        fail(op, operands, f"dimension {dimension} out of range for rank {x.ndim}", IndexError)
    return x


def _stable_order(x, dimension, descending):
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


sort = primitive("sort", OPAQUE, _sort_infer, _sort_ref, attrs=("dimension", "descending"),
                 doc="NaN sorts after every number.")


def _argsort_infer(operands, dimension, descending, index_dtype):
    x = _check("argsort", operands, dimension)
    return x.shape, D.to_dtype(index_dtype)


def _argsort_ref(x, dimension, descending, index_dtype):
    return _stable_order(x, dimension, descending).astype(D.to_dtype(index_dtype).np)


argsort = primitive("argsort", OPAQUE, _argsort_infer, _argsort_ref,
                    attrs=("dimension", "descending", "index_dtype"),
                    doc="Stable: equal elements keep their order.")
