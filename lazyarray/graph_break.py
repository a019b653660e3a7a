"""Ops whose output shape depends on data: they materialize their input and go on.

Each is a graph break, counted in the metrics; with `LAZYARRAY_STRICT=1` it is an error
that names the op and the user's line.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import config
from . import ops
from .callsite import user_site
from .creation import asarray
from .lift import lift
from .metrics import METRICS
from .tensor import Tensor

_nonzero_static = lift(ops.nonzero_static)
_repeat_static = lift(ops.repeat)
_take = lift(ops.take)


class GraphBreakError(RuntimeError):
    """A data-dependent op in strict mode."""


_HINTS = {
    "nonzero": "use nonzero(x, size=N, fill_value=...) for a static-size result",
    "boolean mask indexing": "use where(mask, x, other) or mask assignment x[mask] = v, "
                             "which stay in the graph",
    "boolean mask assignment": "give a value that broadcasts over each selected row, so "
                               "that the assignment is a select",
    "length bucket slice": "keep the padded length (la.pad_to_bucket with a mask) and slice "
                           "where the value is read, or leave la.config.length_buckets off",
}


def host_value(op: str, x: Tensor) -> np.ndarray:
    """Materialize `x` for a data-dependent op, counting (or refusing) the graph break."""
    site = user_site()
    if config.strict:
        hint = _HINTS.get(op, "it has no static-size form: run it outside strict mode")
        raise GraphBreakError(f"{op}: its output shape depends on the data, which would "
                              f"break the graph at {site} (LAZYARRAY_STRICT is set); {hint}")
    METRICS.graph_breaks += 1
    METRICS.graph_break_sites[f"{op} at {site}"] += 1
    return x.numpy()


def _result(array: np.ndarray, like: Tensor) -> Tensor:
    return Tensor._from_numpy(np.asarray(array, order="C"), like._state)


def _tensor(x: Any) -> Tensor:
    """Accept NumPy arrays, lists and scalars too, as the lifted functions do."""
    if type(x) is Tensor:
        return x
    return asarray(x)


def nonzero(x: Tensor, size: Any = None, fill_value: int = 0) -> tuple:
    x = _tensor(x)
    if size is not None:
        return _nonzero_static(x, size=size, fill_value=fill_value)
    if x.ndim == 0:
        raise ValueError("nonzero: zero-dimensional tensors are not supported (array API)")
    return tuple(_result(i.astype(np.int64), x) for i in np.nonzero(host_value("nonzero", x)))


class UniqueAllResult(NamedTuple):
    """unique_all's result, with the array API's field names (NumPy's too)."""
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


class UniqueCountsResult(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


def unique_values(x: Tensor) -> Tensor:
    x = _tensor(x)
    return _result(np.unique(host_value("unique_values", x), equal_nan=False), x)


def unique_counts(x: Tensor) -> tuple:
    x = _tensor(x)
    v, c = np.unique(host_value("unique_counts", x), return_counts=True,
                     equal_nan=False)
    return UniqueCountsResult(_result(v, x), _result(c.astype(np.int64), x))


def unique_inverse(x: Tensor) -> tuple:
    x = _tensor(x)
    a = host_value("unique_inverse", x)
    v, inv = np.unique(a, return_inverse=True, equal_nan=False)
    return UniqueInverseResult(_result(v, x), _result(inv.reshape(a.shape).astype(np.int64), x))


def unique_all(x: Tensor) -> tuple:
    x = _tensor(x)
    a = host_value("unique_all", x)
    v, idx, inv, c = np.unique(a, return_index=True, return_inverse=True, return_counts=True,
                                equal_nan=False)
    return UniqueAllResult(_result(v, x), _result(idx.astype(np.int64), x),
                           _result(inv.reshape(a.shape).astype(np.int64), x),
                           _result(c.astype(np.int64), x))


def unique(x: Any, return_index: bool = False, return_inverse: bool = False,
           return_counts: bool = False, axis: Any = None, *, equal_nan: bool = True) -> Any:
    """NumPy's unique: the sorted distinct values (of the flattened x, or the distinct
    slices along `axis`), and with the flags the first indices, the inverse and the
    counts, as a tuple in NumPy's order. A graph break (the length depends on the data)."""
    x = _tensor(x)
    out = np.unique(host_value("unique", x), return_index=return_index,
                    return_inverse=return_inverse, return_counts=return_counts, axis=axis,
                    equal_nan=equal_nan)
    if not isinstance(out, tuple):
        return _result(out, x)
    return (_result(out[0], x),) + tuple(_result(np.asarray(o).astype(np.int64), x)
                                         for o in out[1:])


def torch_unique(x: Any, sorted: bool = True, return_inverse: bool = False,
                 return_counts: bool = False, dim: Any = None) -> Any:
    """PyTorch's unique (`Tensor.unique`, `lazyarray.torch.unique`): the distinct values
    (or slices along `dim`), sorted, then the inverse (shaped like x, or like dim) and
    the counts when asked. A graph break."""
    x = _tensor(x)
    a = host_value("unique", x)
    v, inv, c = np.unique(a, return_inverse=True, return_counts=True, axis=dim,
                          equal_nan=False)
    inv = inv.reshape(a.shape if dim is None else (a.shape[dim],)).astype(np.int64)
    out = (_result(v, x),)
    if return_inverse:
        out += (_result(inv, x),)
    if return_counts:
        out += (_result(c.astype(np.int64), x),)
    return out[0] if len(out) == 1 else out


def repeat(x: Any, repeats: Any, axis: Any = None) -> Tensor:
    """NumPy's repeat: each element (or slice along `axis`) `repeats` times; an array of
    repeats (one per element, or one for all) gives a data-dependent length, so a tensor
    of repeats is read on the host (a graph break) and x is gathered, still lazily."""
    if isinstance(repeats, (int, np.integer)) and not isinstance(repeats, (bool, np.bool_)):
        return _repeat_static(x, int(repeats), axis=axis)
    x = _tensor(x)
    counts = host_value("repeat", repeats) if type(repeats) is Tensor else np.asarray(repeats)
    if axis is None:
        x, axis = x.reshape((-1,)), 0
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"repeat: axis {axis} is out of range for shape {tuple(x.shape)}")
    size = x.shape[axis]
    if counts.dtype.kind not in "iu" or counts.ndim > 1 or counts.size not in (1, size):
        raise ValueError(f"repeat: repeats must be an int or a 1-D integer array of length 1 "
                         f"or {size} (axis {axis} of {tuple(x.shape)}), got "
                         f"{counts.dtype} {counts.shape}")
    if (counts < 0).any():
        raise ValueError(f"repeat: repeats must be non-negative, got {counts.min()}")
    if counts.size == 1:
        return _repeat_static(x, int(counts.reshape(())), axis=axis)
    index = np.repeat(np.arange(size, dtype=np.int64), counts.reshape(-1))
    return _take(x, Tensor._from_numpy(index, x._state), axis=axis)


def host_mask(op: str, mask: Tensor) -> np.ndarray:
    """A boolean tensor used as an index, as a host array (a graph break)."""
    return np.asarray(host_value(op, mask), dtype=np.bool_)

