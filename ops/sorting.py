"""Sorting along one axis: sort (values) and argsort (their order), both stable."""
from __future__ import annotations

from typing import Any

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .elementwise import equal, where
from .indexing import take_along_axis
from .manipulation import expand_dims, moveaxis, slice_axis, squeeze
from .promotion import as_node, normalize_axis
from .searching import argmax
from .statistical import max as _max, sum as _sum


def _prepare(op: str, x: Any, axis: int) -> tuple:
    x = as_node(x)
    if x.ndim == 0:
        raise ValueError(f"{op}: a 0-d tensor has no axis to sort (needs rank >= 1)")
    return x, normalize_axis(op, axis, x.ndim)


def sort(x: Any, axis: int = -1, descending: bool = False, stable: bool = True) -> Node:
    """The values of x sorted along `axis`; NaN sorts after every number. Always stable
    (`stable=False` is accepted and gives the stable order too)."""
    x, axis = _prepare("sort", x, axis)
    if x.dtype is D.bool_:
        out = apply("sort", apply("convert", x, dtype=D.uint8), dimension=axis,
                    descending=bool(descending))
        return apply("convert", out, dtype=D.bool_)
    return apply("sort", x, dimension=axis, descending=bool(descending))


def argsort(x: Any, axis: int = -1, descending: bool = False, stable: bool = True) -> Node:
    """The indices (int64) that sort x along `axis`; equal elements keep their order,
    also when descending."""
    x, axis = _prepare("argsort", x, axis)
    if x.dtype is D.bool_:
        x = apply("convert", x, dtype=D.uint8)
    return apply("argsort", x, dimension=axis, descending=bool(descending),
                 index_dtype=D.DEFAULT_INDEX)


def _ordered(op: str, x: Any, axis: int, descending: bool) -> tuple:
    """x, its normalized axis, and the indices that sort it along that axis (stable)."""
    x, axis = _prepare(op, x, axis)
    return x, axis, argsort(x, axis, descending=descending)


def _pick(x: Node, order: Node, axis: int, start: int, stop: int) -> tuple:
    """(values, indices) of the sorted positions start..stop along `axis`."""
    idx = slice_axis(order, axis, start, stop)
    return take_along_axis(x, idx, axis), idx


def topk(x: Any, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> tuple:
    """(values, indices) of the k largest (or smallest) elements along `axis`, in sorted
    order (PyTorch's topk; `sorted=False` gives them sorted too, which it allows). Among
    equal elements the first index comes first."""
    x, axis, order = _ordered("topk", x, axis, bool(largest))
    n = x.shape[axis]
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= n:
        raise ValueError(f"topk: k must be an int in 0..{n} (the length of axis {axis} of "
                         f"{x.shape}), got {k!r}")
    return _pick(x, order, axis, 0, k)


def _squeezed(pair: tuple, axis: int, keepdims: bool) -> tuple:
    return pair if keepdims else tuple(squeeze(t, axis) for t in pair)


def kthvalue(x: Any, k: int, axis: int = -1, keepdims: bool = False) -> tuple:
    """(values, indices) of the k-th smallest element (k from 1) along `axis` (PyTorch)."""
    x, axis, order = _ordered("kthvalue", x, axis, False)
    n = x.shape[axis]
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n:
        raise ValueError(f"kthvalue: k must be an int in 1..{n} (the length of axis {axis}), "
                         f"got {k!r}")
    return _squeezed(_pick(x, order, axis, k - 1, k), axis, keepdims)


def median_low(x: Any, axis: int = -1, keepdims: bool = False) -> tuple:
    """(values, indices) of the lower median along `axis`: the ((n - 1) // 2)-th smallest,
    never an average of two (PyTorch's median with a dim)."""
    x, axis, order = _ordered("median", x, axis, False)
    n = x.shape[axis]
    if n == 0:
        raise ValueError(f"median: axis {axis} of {x.shape} is empty (no median)")
    m = (n - 1) // 2
    return _squeezed(_pick(x, order, axis, m, m + 1), axis, keepdims)


def mode(x: Any, axis: int = -1, keepdims: bool = False) -> tuple:
    """(values, indices) of the most frequent value along `axis`, the smallest of the most
    frequent on a tie (PyTorch's mode); the index is one of that value's positions (the
    last, as PyTorch's CPU kernel gives). O(n^2) compares along the axis."""
    x, axis = _prepare("mode", x, axis)
    n = x.shape[axis]
    if n == 0:
        raise ValueError(f"mode: axis {axis} of {x.shape} is empty (no mode)")
    order = argsort(x, axis)
    s = take_along_axis(x, order, axis)                      # sorted: ties -> smallest first
    a = moveaxis(s, axis, -1)
    counts = _sum(apply("convert", equal(expand_dims(a, -1), expand_dims(a, -2)),
                        dtype=D.int64), axis=-1)              # (..., n): how often each occurs
    best = expand_dims(argmax(counts, axis=-1), -1)           # first max: the smallest value
    values = take_along_axis(a, best, -1)
    # the last position of that value in x
    pos = apply("iota", shape=moveaxis(x, axis, -1).shape, dtype=D.int64,
                dimension=x.ndim - 1)
    hits = equal(moveaxis(x, axis, -1), values)
    index = _max(where(hits, pos, -1), axis=-1, keepdims=True)
    values, index = moveaxis(values, -1, axis), moveaxis(index, -1, axis)
    return _squeezed((values, index), axis, keepdims)


__all__ = ["sort", "argsort", "topk"]
