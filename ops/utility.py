"""Utility functions: all, any."""
from __future__ import annotations

from typing import Any

from ..compiler.node import Node
from ..compiler.primitive import apply
from .elementwise import as_bool
from .promotion import normalize_axes


def _logical_reduce(name: str, kind: str, x: Any, axis: Any, keepdims: bool) -> Node:
    x = as_bool(x)
    axes = normalize_axes(name, axis, x.ndim)
    out = apply("reduce", x, axes=axes, kind=kind)
    if keepdims:
        out = apply("reshape", out, shape=tuple(1 if i in axes else n for i, n in enumerate(x.shape)))
    return out


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _logical_reduce("all", "and", x, axis, keepdims)


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Node:
    return _logical_reduce("any", "or", x, axis, keepdims)


__all__ = ["all", "any"]
