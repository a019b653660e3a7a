"""JAX's `lax.dynamic_slice` and `lax.dynamic_update_slice`: a block at start indices known
only at run time (ints become runtime scalars, tensors are read when the graph runs).

As HLO defines them, a start is clamped so that the block stays inside the operand
(`start = clamp(start, 0, n - size)`): no negative wrap-around, no error for a start out of
range (unlike `x[i]`, which checks `i` now, since a Python int is known now).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node, scalar_leaf
from ..compiler.primitive import apply
from .promotion import as_node, shape_str

_I64 = np.iinfo(np.int64)
_MIN, _MAX = int(_I64.min), int(_I64.max)


def _start_nodes(op: str, x: Node, starts: Any) -> list:
    """One 0-d integer node per start: ints become runtime scalars (int64), 0-d integer
    nodes are taken as they are."""
    # the usual form, a tuple of Python ints and 0-d integer nodes (a decoding loop writes
    # its key/value caches at (0, 0, pos, 0) in every layer at every token), taken
    # directly; anything else goes the checked way, which raises naming the op
    if type(starts) is tuple and len(starts) == len(x.shape):
        out = []
        for s in starts:
            kind = type(s)
            if kind is int and _MIN <= s <= _MAX:
                out.append(scalar_leaf(s, D.int64))
            elif kind is Node and not s.shape and s.dtype.is_int:
                out.append(s)
            else:
                return _checked_starts(op, x, starts)
        return out
    return _checked_starts(op, x, starts)


def _checked_starts(op: str, x: Node, starts: Any) -> list:
    if isinstance(starts, Node):
        if starts.ndim != 1:
            raise TypeError(f"{op}: start_indices as one tensor must be 1-D, got shape "
                            f"{shape_str(starts.shape)}")
        starts = [apply("reshape", apply("slice", starts, start_indices=(k,),
                                         limit_indices=(k + 1,), strides=(1,)), shape=())
                  for k in range(starts.shape[0])]
    starts = list(starts)
    if len(starts) != x.ndim:
        raise ValueError(f"{op}: {len(starts)} start indices for an operand of shape "
                         f"{shape_str(x.shape)}; give one per dimension ({x.ndim})")
    out = []
    for k, s in enumerate(starts):
        if isinstance(s, Node):
            if s.ndim != 0 or not s.dtype.is_int:
                raise TypeError(f"{op}: start index {k} must be an integer scalar, got "
                                f"{s.dtype.name}{list(s.shape)}")
            out.append(s)
        elif isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)):
            if not _I64.min <= int(s) <= _I64.max:
                raise OverflowError(f"{op}: start index {k} = {s} does not fit int64")
            out.append(scalar_leaf(int(s), D.int64))     # a runtime scalar: one program
        else:
            raise TypeError(f"{op}: start index {k} must be an int or an integer scalar "
                            f"tensor, got {type(s).__name__}")
    return out


def dynamic_slice(x: Any, start_indices: Any, slice_sizes: Sequence[int]) -> Node:
    """The block of `x` of shape `slice_sizes` at `start_indices`, each start clamped into
    [0, n - size] (JAX's `lax.dynamic_slice`)."""
    x = as_node(x)
    sizes = tuple(int(z) for z in slice_sizes)
    if len(sizes) != x.ndim or any(not 0 <= z <= n for z, n in zip(sizes, x.shape)):
        raise ValueError(f"dynamic_slice: slice_sizes {sizes} must give one size per "
                         f"dimension of the operand's shape {shape_str(x.shape)}, each "
                         "between 0 and that dimension")
    return apply("dynamic_slice", x, *_start_nodes("dynamic_slice", x, start_indices),
                 slice_sizes=sizes)


def dynamic_update_slice(x: Any, update: Any, start_indices: Any) -> Node:
    """`x` with the block at `start_indices` replaced by `update` (same dtype and rank),
    each start clamped into [0, n - size] (JAX's `lax.dynamic_update_slice`)."""
    x, update = as_node(x), as_node(update)
    if update.dtype is not x.dtype or len(update.shape) != len(x.shape) or not all(
            [u <= n for u, n in zip(update.shape, x.shape)]):
        raise ValueError(f"dynamic_update_slice: the update {update.dtype.name}"
                         f"{list(update.shape)} must have the operand's dtype and rank and "
                         f"fit inside it ({x.dtype.name}{list(x.shape)})")
    return apply("dynamic_update_slice", x, update,
                 *_start_nodes("dynamic_update_slice", x, start_indices))


__all__ = ["dynamic_slice", "dynamic_update_slice"]
