"""Shape manipulation: reshape, permute_dims, expand_dims, squeeze, concat, stack, flip..."""
from __future__ import annotations

import math

from typing import Any, Sequence

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from . import checks
from .promotion import (as_node, broadcast_shapes, broadcast_to as _broadcast_to, convert,
                        normalize_axes, normalize_axis, shape_str)


def reshape(x: Any, shape: Any, copy: Any = None) -> Node:
    x = as_node(x)
    if type(shape) is tuple and all(type(s) is int for s in shape):
        # the same reshape at every step: its checked target shape is remembered
        key = (x.shape, shape)
        target = _RESHAPED.get(key)
        if target is None:
            target = _reshape_target(x, shape)
            if len(_RESHAPED) > 4096:
                _RESHAPED.clear()
            _RESHAPED[key] = target
    else:
        target = _reshape_target(x, shape)
    return x if target == x.shape else apply("reshape", x, shape=target)


_RESHAPED: dict = {}      # (shape, requested shape) -> the checked target shape


def _reshape_target(x: Node, shape: Any) -> tuple:
    """The shape `reshape(x, shape)` gives (one -1 inferred); raises for a bad request."""
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    for s in shape:
        if not checks.is_int(s):
            raise TypeError(f"reshape: shape {tuple(shape)} has {type(s).__name__} {s!r}; "
                            "sizes must be ints (one may be -1)")
    shape = [int(s) for s in shape]
    size = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {tuple(shape)}")
    if any(s < -1 for s in shape):
        raise ValueError(f"reshape: negative size in {tuple(shape)} (only -1 is allowed, "
                         "for one dimension to be inferred)")
    if -1 in shape:
        known = math.prod([s for s in shape if s != -1])
        if known == 0 or size % known:
            raise ValueError(f"reshape: cannot reshape {shape_str(x.shape)} (size {size}) "
                             f"to {tuple(shape)}")
        shape[shape.index(-1)] = size // known
    shape = tuple(shape)
    if any(s < 0 for s in shape) or math.prod(shape) != size:
        raise ValueError(f"reshape: cannot reshape {shape_str(x.shape)} (size {size}) "
                         f"to {shape_str(shape)} (size {math.prod(shape)})")
    return shape


def permute_dims(x: Any, axes: Sequence[int]) -> Node:
    x = as_node(x)
    axes = tuple(normalize_axis("permute_dims", a, x.ndim) for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ValueError(f"permute_dims: {tuple(axes)} is not a permutation of the "
                         f"{x.ndim} axes of {shape_str(x.shape)}")
    return x if axes == tuple(range(x.ndim)) else apply("transpose", x, permutation=axes)


def transpose(x: Any, axis0: Any = None, axis1: Any = None) -> Node:
    """No axes: reverse them all (NumPy). Two axes: swap them (PyTorch)."""
    x = as_node(x)
    if axis0 is None:                 # x.T: a permutation by construction, no checks
        n = x.ndim
        return x if n < 2 else apply("transpose", x, permutation=tuple(range(n - 1, -1, -1)))
    n = len(x.shape)
    if type(axis0) is int and type(axis1) is int and -n <= axis0 < n and -n <= axis1 < n:
        a, b = axis0 % n, axis1 % n        # `t.transpose(1, 2)`: valid plain ints, the
        if a == b:                         # swap made here (no check that could fail)
            return x
        perm = list(range(n))
        perm[a], perm[b] = b, a
        return apply("transpose", x, permutation=tuple(perm))
    perm = list(range(x.ndim))
    a, b = normalize_axis("transpose", axis0, x.ndim), normalize_axis("transpose", axis1, x.ndim)
    perm[a], perm[b] = perm[b], perm[a]
    return permute_dims(x, perm)


def matrix_transpose(x: Any) -> Node:
    x = as_node(x)
    n = x.ndim
    if n < 2:
        raise ValueError(f"matrix_transpose: needs rank >= 2, got {shape_str(x.shape)}")
    # transpose(x, -1, -2) without its general axis checks (every linear layer's weight)
    return apply("transpose", x, permutation=tuple(range(n - 2)) + (n - 1, n - 2))


def expand_dims(x: Any, axis: Any = 0) -> Node:
    """New axes of size 1 at `axis` (an int, or a tuple of positions in the result, as
    array API 2025.12 and NumPy take them)."""
    x = as_node(x)
    if not isinstance(axis, (tuple, list)):
        axis = normalize_axis("expand_dims", axis, x.ndim + 1)
        return apply("reshape", x, shape=x.shape[:axis] + (1,) + x.shape[axis:])
    rank = x.ndim + len(axis)
    new = [normalize_axis("expand_dims", a, rank) for a in axis]
    if len(set(new)) != len(new):
        raise ValueError(f"expand_dims: axis {tuple(axis)} names a position twice (for a "
                         f"result of rank {rank})")
    dims = iter(x.shape)
    return apply("reshape", x, shape=tuple(1 if i in new else next(dims) for i in range(rank)))


def squeeze(x: Any, axis: Any = None) -> Node:
    x = as_node(x)
    if axis is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = normalize_axes("squeeze", axis, x.ndim)
        for a in axes:
            if x.shape[a] != 1:
                raise ValueError(f"squeeze: axis {a} of {shape_str(x.shape)} has size "
                                 f"{x.shape[a]}, not 1")
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def broadcast_to(x: Any, shape: Sequence[int]) -> Node:
    return _broadcast_to(as_node(x), checks.shape("broadcast_to", shape))


def broadcast_arrays(*xs: Any) -> tuple:
    """The arrays broadcast to one shape, as a tuple (array API 2025.12; NumPy 2)."""
    nodes = [as_node(x) for x in xs]
    shape = broadcast_shapes("broadcast_arrays", *[n.shape for n in nodes])
    return tuple(_broadcast_to(n, shape) for n in nodes)


def _same_dtype(op: str, xs: Sequence[Any]) -> list:
    nodes = [as_node(x) for x in xs]
    if not nodes:
        raise ValueError(f"{op}: needs at least one tensor")
    dtype = D.result_type(*[n.dtype for n in nodes])
    return [convert(n, dtype) for n in nodes]


def concat(xs: Sequence[Any], axis: Any = 0) -> Node:
    nodes = _same_dtype("concat", xs)
    if axis is None:
        nodes = [reshape(n, (-1,)) for n in nodes]
        axis = 0
    first = nodes[0]
    if first.ndim == 0:
        raise ValueError("concat: zero-dimensional tensors cannot be concatenated")
    axis = normalize_axis("concat", axis, first.ndim)
    for n in nodes:
        if n.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(n.shape, first.shape))
                                       if i != axis):
            raise ValueError(f"concat: shapes {', '.join(shape_str(m.shape) for m in nodes)} "
                             f"differ outside axis {axis}")
    # operands with nothing along the axis add nothing (and all empty: the first has the
    # result's shape)
    nodes = [n for n in nodes if n.shape[axis]] or [first]
    if len(nodes) == 1:
        return nodes[0]
    return apply("concatenate", *nodes, dimension=axis)


def stack(xs: Sequence[Any], axis: int = 0) -> Node:
    nodes = _same_dtype("stack", xs)
    for n in nodes:
        if n.shape != nodes[0].shape:
            raise ValueError(f"stack: all shapes must be equal, got "
                             f"{', '.join(shape_str(m.shape) for m in nodes)}")
    axis = normalize_axis("stack", axis, nodes[0].ndim + 1)
    return concat([expand_dims(n, axis) for n in nodes], axis)


def unstack(x: Any, axis: int = 0) -> tuple:
    x = as_node(x)
    axis = normalize_axis("unstack", axis, x.ndim)
    return tuple(squeeze(slice_axis(x, axis, i, i + 1), axis) for i in range(x.shape[axis]))


def slice_axis(x: Node, axis: int, start: int, stop: int, step: int = 1) -> Node:
    starts = [0] * x.ndim
    limits = list(x.shape)
    strides = [1] * x.ndim
    starts[axis], limits[axis], strides[axis] = start, stop, step
    return apply("slice", x, start_indices=tuple(starts), limit_indices=tuple(limits),
                 strides=tuple(strides))


def flip(x: Any, axis: Any = None) -> Node:
    x = as_node(x)
    axes = normalize_axes("flip", axis, x.ndim)
    return apply("reverse", x, dimensions=axes) if axes else x


def roll(x: Any, shift: Any, axis: Any = None) -> Node:
    x = as_node(x)
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x.shape)
    shifts = (shift,) if isinstance(shift, int) else tuple(shift)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if len(shifts) != len(axes):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(axes)} axes")
    for s, a in zip(shifts, axes):
        a = normalize_axis("roll", a, x.ndim)
        n = x.shape[a]
        if n == 0 or s % n == 0:
            continue
        s %= n
        x = concat([slice_axis(x, a, n - s, n), slice_axis(x, a, 0, n - s)], a)
    return x


def moveaxis(x: Any, source: Any, destination: Any) -> Node:
    x = as_node(x)
    src = [normalize_axis("moveaxis", a, x.ndim) for a in np.atleast_1d(source).tolist()]
    dst = [normalize_axis("moveaxis", a, x.ndim) for a in np.atleast_1d(destination).tolist()]
    order = [i for i in range(x.ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order)


def tile(x: Any, repetitions: Sequence[int]) -> Node:
    x = as_node(x)
    reps = checks.shape("tile", repetitions)
    nd = max(x.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x.shape)
    # broadcast to (r0, n0, r1, n1, ...) then merge pairs
    inter = tuple(v for r, n in zip(reps, x.shape) for v in (r, n))
    y = apply("broadcast_in_dim", x, shape=inter, broadcast_dimensions=tuple(range(1, 2 * nd, 2)))
    return reshape(y, tuple(r * n for r, n in zip(reps, x.shape)))


def repeat(x: Any, repeats: int, axis: Any = None) -> Node:
    x = as_node(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    if not checks.is_int(repeats):
        raise TypeError("repeat: only an int number of repeats is supported "
                        "(tensor repeats give a data-dependent shape)")
    repeats = checks.size("repeat", "repeats", repeats)
    axis = normalize_axis("repeat", axis, x.ndim)
    shape = x.shape[:axis + 1] + (repeats,) + x.shape[axis + 1:]
    dims = tuple(range(axis + 1)) + tuple(range(axis + 2, x.ndim + 1))
    y = apply("broadcast_in_dim", x, shape=shape, broadcast_dimensions=dims)
    return reshape(y, x.shape[:axis] + (x.shape[axis] * repeats,) + x.shape[axis + 1:])


def _pieces(x: Node, axis: int, bounds: Sequence[int]) -> tuple:
    """x cut along `axis` at `bounds` (each piece a slice, fused downstream; a bound below
    the one before gives an empty piece, as Python's slicing does)."""
    edges = [0] + list(bounds) + [x.shape[axis]]
    return tuple(slice_axis(x, axis, a, max(a, b)) for a, b in zip(edges, edges[1:]))


def _split_axis(name: str, x: Any, axis: int) -> tuple:
    """(node, normalized axis, its length) for the split family; a 0-d input has none."""
    x = as_node(x)
    if x.ndim == 0:
        raise ValueError(f"{name}: a 0-d tensor has no axis to {name}")
    axis = normalize_axis(name, axis, x.ndim)
    return x, axis, x.shape[axis]


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> tuple:
    """NumPy's split: an int cuts `axis` into that many equal parts (it must divide the
    length), a sequence gives the indices to cut at. PyTorch's split (by part sizes) is
    `Tensor.split` and `lazyarray.torch.split`."""
    x, axis, n = _split_axis("split", x, axis)
    if checks.is_int(indices_or_sections):
        k = int(indices_or_sections)
        if k <= 0 or n % k:
            raise ValueError(f"split: {k} sections do not divide axis {axis} of length {n} "
                             "equally (NumPy's rule; PyTorch's split by size is "
                             "Tensor.split / lazyarray.torch.split)")
        return _pieces(x, axis, [i * (n // k) for i in range(1, k)])
    cuts = [max(0, min(n, int(i) + n if int(i) < 0 else int(i))) for i in indices_or_sections]
    return _pieces(x, axis, cuts)


def split_sizes(x: Any, split_size_or_sections: Any, axis: int = 0) -> tuple:
    """PyTorch's split: an int is the size of each part (the last may be smaller), a
    sequence the size of every part (they must add up to the length of `axis`)."""
    x, axis, n = _split_axis("split", x, axis)
    if checks.is_int(split_size_or_sections):
        size = int(split_size_or_sections)
        if size <= 0 and not (size == 0 and n == 0):
            raise ValueError(f"split: split_size must be positive, got {size}")
        if n == 0:
            return (x,)
        return _pieces(x, axis, range(size, n, size))
    sizes = [int(s) for s in split_size_or_sections]
    if any(s < 0 for s in sizes) or sum(sizes) != n:
        raise ValueError(f"split: sizes {sizes} must be non-negative and add up to "
                         f"{n}, the length of dim {axis}")
    return _pieces(x, axis, list(np.cumsum(sizes[:-1], dtype=np.int64).tolist()))


def chunk(x: Any, chunks: int, axis: int = 0) -> tuple:
    """PyTorch's chunk: parts of ceil(n / chunks) along `axis` (fewer parts when that size
    already covers the length)."""
    if not checks.is_int(chunks) or int(chunks) <= 0:
        raise ValueError(f"chunk: chunks must be a positive int, got {chunks!r}")
    x, axis, n = _split_axis("chunk", x, axis)
    return split_sizes(x, max(1, -(-n // int(chunks))) if n else 0, axis)


__all__ = ["reshape", "permute_dims", "transpose", "matrix_transpose", "expand_dims", "squeeze",
           "broadcast_to", "broadcast_arrays", "concat", "stack", "unstack", "flip", "roll",
           "moveaxis", "tile", "repeat", "split", "chunk"]   # split_sizes: PyTorch's split
