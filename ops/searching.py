"""Searching: argmax, argmin, where (in elementwise), nonzero with a static size."""
from __future__ import annotations

from typing import Any

from ..compiler import dtypes as D
from ..compiler.node import Node
from ..compiler.primitive import apply
from .manipulation import reshape
from .promotion import as_node, normalize_axis, shape_str


def _arg(name: str, x: Any, axis: Any, keepdims: bool) -> Node:
    x = as_node(x)
    if x.dtype is D.bool_:
        x = apply("convert", x, dtype=D.int8)
    if axis is None:
        flat = reshape(x, (-1,))
        if flat.shape[0] == 0:
            raise ValueError(f"{name}: empty tensor of shape {shape_str(x.shape)} has no {name}")
        out = apply(name, flat, axis=0, index_dtype=D.DEFAULT_INDEX)
        return reshape(out, (1,) * x.ndim) if keepdims else out
    axis = normalize_axis(name, axis, x.ndim)
    if x.shape[axis] == 0:
        raise ValueError(f"{name}: axis {axis} of shape {shape_str(x.shape)} is empty")
    out = apply(name, x, axis=axis, index_dtype=D.DEFAULT_INDEX)
    if keepdims:
        out = apply("reshape", out, shape=x.shape[:axis] + (1,) + x.shape[axis + 1:])
    return out


def argmax(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _arg("argmax", x, axis, keepdims)


def argmin(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _arg("argmin", x, axis, keepdims)


__all__ = ["argmax", "argmin"]
