"""Sorting along one axis: sort (values) and argsort (their order), both stable."""
from __future__ import annotations

from typing import Any

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .promotion import as_node, normalize_axis


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


__all__ = ["sort", "argsort"]
