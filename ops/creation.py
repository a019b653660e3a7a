"""Creation functions that need no data: full, zeros, ones, arange, linspace, eye, tri."""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from . import checks
from .promotion import as_node, broadcast_to, convert, scalar
from .elementwise import add, greater_equal, less_equal, multiply, subtract, where


def full(shape: Any, fill_value: Any, dtype: Any = None, op: str = "full") -> Node:
    shape = checks.shape(op, shape)
    if isinstance(fill_value, Node):
        value = fill_value if dtype is None else convert(fill_value, D.to_dtype(dtype))
    else:
        d = D.to_dtype(dtype) if dtype is not None else D.scalar_dtype(fill_value)
        value = scalar(fill_value, d)
    return broadcast_to(value, shape) if shape else value


def zeros(shape: Any, dtype: Any = None) -> Node:
    return full(shape, 0, D.to_dtype(dtype) if dtype is not None else D.DEFAULT_FLOAT, "zeros")


def ones(shape: Any, dtype: Any = None) -> Node:
    return full(shape, 1, D.to_dtype(dtype) if dtype is not None else D.DEFAULT_FLOAT, "ones")


empty = zeros


def zeros_like(x: Node, dtype: Any = None) -> Node:
    return full(x.shape, 0, dtype if dtype is not None else x.dtype)


def ones_like(x: Node, dtype: Any = None) -> Node:
    return full(x.shape, 1, dtype if dtype is not None else x.dtype)


def full_like(x: Node, fill_value: Any, dtype: Any = None) -> Node:
    return full(x.shape, fill_value, dtype if dtype is not None else x.dtype)


empty_like = zeros_like


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> Node:
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("arange: step must not be zero")
    n = max(0, math.ceil((stop - start) / step))
    if dtype is None:
        dtype = D.DEFAULT_FLOAT if any(isinstance(v, float) for v in (start, stop, step)) \
            else D.DEFAULT_INT
    dtype = D.to_dtype(dtype)
    if n == 0:
        return full((0,), 0, dtype)
    work = dtype if dtype is not D.bool_ else D.int64
    i = apply("iota", shape=(n,), dtype=work, dimension=0)
    if step != 1:
        i = multiply(i, step)
    if start != 0:
        i = add(i, start)
    return convert(i, dtype)


def linspace(start: float, stop: float, num: int, dtype: Any = None, endpoint: bool = True) -> Node:
    dtype = D.to_dtype(dtype) if dtype is not None else D.DEFAULT_FLOAT
    num = checks.size("linspace", "num", num)
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    i = apply("iota", shape=(num,), dtype=D.float64 if dtype is D.float64 else D.float32,
              dimension=0) if num else full((0,), 0.0, dtype)
    out = add(multiply(i, float(step)), float(start))
    if endpoint and num > 1:
        out = where(greater_equal(i, float(num - 1)), float(stop), out)
    return convert(out, dtype)


def eye(n_rows: int, n_cols: Optional[int] = None, k: int = 0, dtype: Any = None) -> Node:
    n_rows = checks.size("eye", "n_rows", n_rows)
    n_cols = n_rows if n_cols is None else checks.size("eye", "n_cols", n_cols)
    # a diagonal past the last column or below the last row is empty: clamped there, any
    # Python int k fits the int64 index arithmetic (NumPy takes k = 2**63)
    k = min(max(checks.integer("eye", "k", k), -n_rows), n_cols)
    dtype = D.to_dtype(dtype) if dtype is not None else D.DEFAULT_FLOAT
    r = apply("iota", shape=(n_rows, n_cols), dtype=D.int64, dimension=0)
    c = apply("iota", shape=(n_rows, n_cols), dtype=D.int64, dimension=1)
    return convert(apply("compare", add(r, k), c, direction="EQ"), dtype)


def _tri_mask(x: Node, k: int, lower: bool) -> Node:
    if x.ndim < 2:
        raise ValueError(f"{'tril' if lower else 'triu'}: needs rank >= 2, got {x.shape}")
    shape = x.shape[-2:]
    r = apply("iota", shape=shape, dtype=D.int64, dimension=0)
    c = apply("iota", shape=shape, dtype=D.int64, dimension=1)
    d = subtract(c, r)
    m = less_equal(d, k) if lower else greater_equal(d, k)
    return broadcast_to(m, x.shape)


def tril(x: Any, k: int = 0) -> Node:
    x = as_node(x)
    return where(_tri_mask(x, k, True), x, scalar(0, x.dtype))


def triu(x: Any, k: int = 0) -> Node:
    x = as_node(x)
    return where(_tri_mask(x, k, False), x, scalar(0, x.dtype))


def meshgrid(*xs: Node, indexing: str = "xy") -> tuple:
    """Coordinate arrays from 1-D ones, as a tuple (array API 2025.12; NumPy 2)."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [as_node(x) for x in xs]
    shape = [x.shape[0] for x in xs]
    if indexing == "xy" and len(xs) >= 2:
        shape[0], shape[1] = shape[1], shape[0]
    out = []
    for i, x in enumerate(xs):
        d = i
        if indexing == "xy" and len(xs) >= 2 and i < 2:
            d = 1 - i
        out.append(apply("broadcast_in_dim", x, shape=tuple(shape), broadcast_dimensions=(d,)))
    return tuple(out)


__all__ = ["full", "zeros", "ones", "empty", "zeros_like", "ones_like", "full_like",
           "empty_like", "arange", "linspace", "eye", "tril", "triu", "meshgrid"]
