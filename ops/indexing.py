"""NumPy indexing over nodes: basic (ints, slices, Ellipsis, None) and advanced (index
arrays), reading (`getitem`, `take`, `take_along_axis`) and functional updates (`setitem`).

Reading lowers to at most one `reverse`, one `slice`, one `reshape` and one `gather`:
several index arrays are broadcast together and linearized into one index over the
merged dimensions they select. Updates use `dynamic_update_slice` (unit-step slices),
`pad` + `select` (strided slices), `select` (boolean masks) or `scatter` (index arrays).

Index arrays may be NumPy arrays or computed tensors whose values are on the host (known
now: they are range-checked and raise IndexError as in NumPy), or pending nodes (their
values are known only when the graph runs: negative entries are wrapped at run time;
out-of-range ones are clamped when reading, as `gather` does, and skipped when writing,
as `scatter` does). Python ints (an index, or a slice's
written start) become a `dynamic_slice` with runtime scalar starts while the result's
shape is computed from them here: a loop over `x[i]` or `x[i:i + 64]` compiles once per
shape.
Boolean *tensor* masks give data-dependent shapes: the runtime turns them into NumPy
arrays before calling here (a graph break), except in `setitem`, where a mask is a select.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Optional

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node, scalar_leaf, type_of
from ..compiler.primitive import apply
from .chains import PLANS, remember, replay
from .promotion import (as_node, broadcast_shapes, broadcast_to, constant,
                        convert, normalize_axis, scalar, shape_str)

LiftArray = Callable[[np.ndarray], Node]


def _default_lift(array: np.ndarray) -> Node:
    return constant(array, D.from_numpy(array.dtype))


# ---- parsing a key -------------------------------------------------------------------

class _Entry:
    """One parsed key component.

    kind: 'int' (a basic int), 'slice', 'new' (None), 'array' (an index array; `dim` is
    None for the array of a 0-d boolean, which indexes its own new axis of size 1).
    """
    __slots__ = ("kind", "value", "dim")

    def __init__(self, kind: str, value: Any = None, dim: Optional[int] = None) -> None:
        self.kind = kind
        self.value = value
        self.dim = dim


def _as_index_array(op: str, v: Any) -> Any:
    """A NumPy array (bool or int) or an integer node from one key component."""
    if isinstance(v, Node):
        if v.dtype is D.bool_:
            raise TypeError(f"{op}: a boolean tensor mask must be resolved by the runtime "
                            "(it is a graph break); got one inside the ops layer")
        if not v.dtype.is_int:
            raise TypeError(f"{op}: index arrays must be integer or boolean, "
                            f"got {v.dtype.name}")
        return v
    try:
        arr = np.asarray(v)
    except ValueError as exc:
        raise IndexError(f"{op}: ragged index list {v!r}") from exc
    if arr.size == 0 and arr.dtype.kind == "f":
        arr = arr.astype(np.int64)      # `x[[]]`: an empty index list
    if arr.dtype.kind not in "biu":
        raise TypeError(f"{op}: only integers, slices, ..., None and integer or boolean "
                        f"arrays are valid indices; got an array of {arr.dtype}")
    return arr


def _classify(op: str, item: Any) -> Any:
    """A key component -> 'ellipsis', an _Entry, or a NumPy boolean array (a mask)."""
    kind = type(item)
    if kind is int:                     # the common cases first: recording stays cheap
        return _Entry("int", item)
    if kind is slice:
        return _Entry("slice", item)
    if item is None:
        return _Entry("new")
    if item is Ellipsis:
        return "ellipsis"
    if isinstance(item, (bool, np.bool_)):
        return np.asarray(bool(item))
    if isinstance(item, (int, np.integer)):
        return _Entry("int", int(item))
    if isinstance(item, slice):
        return _Entry("slice", item)
    if isinstance(item, (Node, np.ndarray, list, tuple, range)):
        arr = _as_index_array(op, item)
        if isinstance(arr, np.ndarray) and arr.dtype == np.bool_:
            return arr
        return _Entry("array", arr)
    # a wrong type, as for Python's own sequences (NumPy says IndexError here)
    raise TypeError(f"{op}: only integers, slices (`:`), ellipsis (`...`), None and "
                    f"integer or boolean arrays are valid indices; got "
                    f"{type(item).__name__} {item!r}")


def _consumed(c: Any) -> int:
    if isinstance(c, np.ndarray):
        return c.ndim
    if isinstance(c, _Entry) and c.kind != "new":
        return 1
    return 0


def parse_key(op: str, shape: tuple, key: Any) -> list:
    """The key as a list of _Entry, one per output-producing component, dims resolved."""
    items = key if isinstance(key, tuple) else (key,)
    comps = [_classify(op, k) for k in items]
    ellipses = [i for i, c in enumerate(comps) if isinstance(c, str)]
    if len(ellipses) > 1:
        raise IndexError(f"{op}: an index can only have a single ellipsis ('...')")
    used = sum(_consumed(c) for c in comps)
    if used > len(shape):
        raise IndexError(f"{op}: too many indices for a tensor of shape {shape_str(shape)}: "
                         f"{len(shape)} dimensions, but {used} were indexed")
    fill = [_Entry("slice", slice(None))] * (len(shape) - used)
    if ellipses:
        at = ellipses[0]
        comps = comps[:at] + fill + comps[at + 1:]
    else:
        comps = comps + fill
    entries: list = []
    dim = 0
    for c in comps:
        if isinstance(c, np.ndarray):
            entries.extend(_mask_entries(op, shape, dim, c))
            dim += c.ndim
            continue
        if c.kind != "new":
            c = _Entry(c.kind, c.value, dim)
            dim += 1
        entries.append(c)
    return entries


def _mask_entries(op: str, shape: tuple, dim: int, mask: np.ndarray) -> list:
    """A constant boolean mask is the index arrays of its nonzero positions (NumPy)."""
    if mask.ndim == 0:
        return [_Entry("array", np.zeros(int(mask), np.int64), None)]
    want = shape[dim:dim + mask.ndim]
    if mask.shape != want:
        raise IndexError(f"{op}: boolean index of shape {shape_str(mask.shape)} does not "
                         f"match the indexed dimensions {shape_str(want)} (dims {dim}.."
                         f"{dim + mask.ndim - 1} of a tensor of shape {shape_str(shape)})")
    return [_Entry("array", idx.astype(np.int64), dim + i)
            for i, idx in enumerate(np.nonzero(mask))]


def _norm_int(op: str, i: int, dim: int, n: int) -> int:
    if not -n <= i < n:
        raise IndexError(f"{op}: index {i} is out of bounds for dimension {dim} with size {n}"
                         f" (valid: {-n}..{n - 1})")
    return i % n


def _slice_bounds(op: str, s: slice, n: int) -> tuple:
    """(start, step, count) of a Python slice over n elements."""
    try:
        parts = [None if p is None else operator.index(p) for p in (s.start, s.stop, s.step)]
    except TypeError:
        raise TypeError(f"{op}: slice indices must be integers or None, got {s!r}") from None
    if parts[2] == 0:
        raise ValueError(f"{op}: slice step cannot be zero")
    start, stop, step = slice(*parts).indices(n)
    return start, step, len(range(start, stop, step))


# ---- reading -------------------------------------------------------------------------

def _basic(op: str, x: Node, entries: list, has_adv: bool) -> tuple:
    """Apply slices and basic ints; insert new axes. -> (node, entries per result dim).

    The result's shape comes from the Python ints now (as NumPy computes it); the start of
    a slice written with an explicit start, and a basic int index, are runtime scalars of
    one `dynamic_slice`, so `x[i:i + 64]` and `x[i]` in a loop compile once per shape."""
    starts = [0] * x.ndim               # an int: a runtime start; 0: none written
    dynamic = [False] * x.ndim
    sizes, strides, flips = list(x.shape), [1] * x.ndim, []
    out_shape, kept = [], []
    for e in entries:
        if e.kind == "slice":
            n = x.shape[e.dim]
            start, step, m = _slice_bounds(op, e.value, n)
            if step < 0 and m:
                flips.append(e.dim)
                start, step = n - 1 - start, -step
            if m:
                # a start left out is 0 here (also after a flip): only a written one varies
                starts[e.dim], dynamic[e.dim] = start, e.value.start is not None
                sizes[e.dim], strides[e.dim] = (m - 1) * step + 1, step
            else:
                sizes[e.dim] = 0
            out_shape.append(m)
            kept.append(e)
        elif e.kind == "int" and not has_adv:
            starts[e.dim] = _norm_int(op, e.value, e.dim, x.shape[e.dim])
            dynamic[e.dim], sizes[e.dim] = True, 1
        elif e.kind == "int" or (e.kind == "array" and e.dim is not None):
            out_shape.append(x.shape[e.dim])
            kept.append(e if e.kind == "array" else _Entry("array", np.asarray(e.value), e.dim))
        else:                           # a new axis, or the axis of a 0-d boolean
            out_shape.append(1)
            kept.append(e)
    if flips:
        x = apply("reverse", x, dimensions=tuple(sorted(flips)))
    if any(dynamic):
        x = apply("dynamic_slice", x, *[_start(s) if d else _zero_start()
                                         for s, d in zip(starts, dynamic)],
                  slice_sizes=tuple(sizes))
    elif sizes != list(x.shape):
        x = apply("slice", x, start_indices=(0,) * x.ndim, limit_indices=tuple(sizes),
                  strides=(1,) * x.ndim)
    if strides != [1] * x.ndim:
        x = apply("slice", x, start_indices=(0,) * x.ndim, limit_indices=x.shape,
                  strides=tuple(strides))
    if tuple(out_shape) != x.shape:
        x = apply("reshape", x, shape=tuple(out_shape))
    return x, kept


def _start(value: int) -> Node:
    """A valid int64 start index (checked by the caller) as a runtime scalar: never a kept
    constant, so that x[0] and x[5] (or x[0:64] and x[64:128]) share one program."""
    return scalar_leaf(value, D.int64)


def _zero_start() -> Node:
    """The start of a dimension no index moves: a kept constant 0."""
    return scalar(0, D.int64)


def _static_index(op: str, arr: np.ndarray, dim: Optional[int], n: int) -> np.ndarray:
    arr = arr.astype(np.int64)
    if arr.size:
        bad = arr[(arr < -n) | (arr >= n)]
        if bad.size:
            where = f"dimension {dim}" if dim is not None else "the new axis of a 0-d bool"
            raise IndexError(f"{op}: index {int(bad.flat[0])} is out of bounds for {where} "
                             f"with size {n} (valid: {-n}..{n - 1})")
    return np.where(arr < 0, arr + n, arr)


_INDEX_KINDS = frozenset(("int", "uint"))


def _dynamic_index(idx: Node, n: int, op: str = "getitem", dim: Optional[int] = None) -> Node:
    """Wrap negative entries (run time); out-of-range ones are left to gather's clamp,
    unless the values are already on the host: then they are checked now, as NumPy does."""
    buf = idx.buffer
    if isinstance(buf, np.ndarray) and buf.size and (buf.min() < -n or buf.max() >= n):
        _static_index(op, buf, dim, n)      # raises, naming the first index out of range
    unsigned = idx.dtype.kind == "uint"
    idx = convert(idx, D.int64)
    if unsigned or n == 0:
        return idx
    neg = apply("compare", idx, broadcast_to(scalar(0, D.int64), idx.shape), direction="LT")
    wrapped = apply("add", idx, broadcast_to(scalar(n, D.int64), idx.shape))
    return apply("select", neg, wrapped, idx)


def _linear_index(op: str, arrays: list, sizes: list, lift: LiftArray) -> Node:
    """One int64 index into the merged dims from several broadcast index arrays."""
    shape = broadcast_shapes(op, *[a.shape for a in arrays])
    strides = [int(np.prod(sizes[i + 1:], dtype=np.int64)) for i in range(len(sizes))]
    if all(isinstance(a, np.ndarray) for a in arrays):
        lin = sum((np.broadcast_to(a, shape) * s for a, s in zip(arrays, strides)),
                  np.zeros(shape, np.int64))
        return lift(np.asarray(lin, dtype=np.int64, order="C"))
    total = None
    for a, s in zip(arrays, strides):
        node = lift(a) if isinstance(a, np.ndarray) else a
        node = broadcast_to(convert(node, D.int64), shape)
        if s != 1:
            node = apply("multiply", node, broadcast_to(scalar(s, D.int64), shape))
        total = node if total is None else apply("add", total, node)
    return total


def replayed(x: Node, key: Any) -> Optional[Node]:
    """x[key] when the key is a basic one already remembered for x's type (see ops/chains.py),
    else None (then `getitem`): a front end holding tensors asks this first, before it
    looks for tensors in the key."""
    plain = _plain_key(x, key)
    if plain is not None:
        plan = PLANS.get(plain)
        if plan is not None:
            return replay(x, plan)
    return None


def getitem(x: Node, key: Any, lift: Optional[LiftArray] = None) -> Node:
    """x[key] with NumPy semantics; `lift` makes a node from a NumPy index array."""
    if type(key) is Node and key.dtype.kind in _INDEX_KINDS and x.shape:
        # one integer tensor picking rows (`embedding[tokens]`, at every step of a
        # decoder): what the general way records for it, without parsing the key
        return apply("gather", x, _dynamic_index(key, x.shape[0], "getitem", 0), axis=0)
    plain = _plain_key(x, key)
    plan = None if plain is None else PLANS.get(plain)
    if plan is not None:
        return replay(x, plan)
    lift = lift or _default_lift
    entries = parse_key("getitem", x.shape, key)
    has_adv = any(e.kind == "array" for e in entries)
    y, kept = _basic("getitem", x, entries, has_adv)
    adv = [(d, e) for d, e in enumerate(kept) if e.kind == "array"]
    if not adv:
        if plain is not None:
            remember(plain, x, y)
        return y
    dims = [d for d, _ in adv]
    arrays = []
    for d, e in adv:
        n = y.shape[d]
        if isinstance(e.value, np.ndarray):
            arrays.append(_static_index("getitem", e.value, e.dim, n))
        else:
            arrays.append(_dynamic_index(e.value, n, "getitem", e.dim))
    adjacent = dims == list(range(dims[0], dims[0] + len(dims))) and not _split_by_ellipsis(key)
    if not adjacent:
        rest = [d for d in range(y.ndim) if d not in dims]
        y = apply("transpose", y, permutation=tuple(dims + rest))
        dims = list(range(len(dims)))
    first = dims[0]
    sizes = [y.shape[d] for d in dims]
    if len(dims) > 1:
        merged = int(np.prod(sizes, dtype=np.int64))
        y = apply("reshape", y, shape=y.shape[:first] + (merged,) + y.shape[first + len(dims):])
    index = _linear_index("getitem", arrays, sizes, lift)
    return apply("gather", y, index, axis=first)


# ---- basic keys, remembered ---------------------------------------------------------------
# A key of ints, slices (of ints or None), None and ... over a node of a given type always
# records the same chain of `_basic`'s nodes (reverse, dynamic_slice, slice, reshape), the
# runtime starts' values fixed by the key: remembered under (the node's interned type, the
# key) and replayed (ops/chains.py). Keys that raise are never remembered.

def _plain_key(x: Node, key: Any) -> Any:
    """(x's type, the key as a hashable tuple) for a key of ints, slices of ints or None,
    None and Ellipsis; None for any other key (arrays, tensors, bools: the general way)."""
    items = key if type(key) is tuple else (key,)
    out = [type_of(x)]
    for k in items:
        kind = type(k)
        if kind is int or k is None or k is Ellipsis:
            out.append(k)
        elif kind is slice:
            start, stop, step = k.start, k.stop, k.step
            if not ((start is None or type(start) is int) and (stop is None or type(stop) is int)
                    and (step is None or type(step) is int)):
                return None
            out.append((start, stop, step))     # (a tuple: an int key is never one)
        else:
            return None
    return tuple(out)


def _split_by_ellipsis(key: Any) -> bool:
    """True when an ellipsis stands between two advanced (or int) indices: NumPy then
    puts the advanced dims first even when the ellipsis expands to no dims."""
    if not isinstance(key, tuple) or not any(it is Ellipsis for it in key):
        return False
    adv = [k for k, it in enumerate(key)
           if not (it is Ellipsis or it is None or isinstance(it, slice))]
    return bool(adv) and any(adv[0] < k < adv[-1] for k, it in enumerate(key) if it is Ellipsis)


def take(x: Any, indices: Any, axis: Optional[int] = None) -> Node:
    """Elements of x at `indices` along `axis` (x flattened when axis is None)."""
    x = as_node(x)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(f"take: axis is required for a tensor of rank {x.ndim} "
                             f"(shape {shape_str(x.shape)})")
        x = apply("reshape", x, shape=(int(np.prod(x.shape, dtype=np.int64)),))
        axis = 0
    axis = normalize_axis("take", axis, x.ndim)
    key = (slice(None),) * axis + (indices,)
    return getitem(x, key)


def take_along_axis(x: Any, indices: Any, axis: int = -1) -> Node:
    """out[..., j, ...] = x[..., indices[..., j, ...], ...] along `axis` (NumPy)."""
    x, idx = as_node(x), as_node(indices)
    if not idx.dtype.is_int:
        raise TypeError(f"take_along_axis: indices must be integers, got {idx.dtype.name}")
    if idx.ndim != x.ndim or x.ndim == 0:
        raise ValueError(f"take_along_axis: indices of shape {shape_str(idx.shape)} must have "
                         f"the rank of x {shape_str(x.shape)} (at least 1)")
    axis = normalize_axis("take_along_axis", axis, x.ndim)
    last = x.ndim - 1
    perm = tuple(d for d in range(x.ndim) if d != axis) + (axis,)
    if axis != last:
        x = apply("transpose", x, permutation=perm)
        idx = apply("transpose", idx, permutation=perm)
    batch = broadcast_shapes("take_along_axis", x.shape[:-1], idx.shape[:-1])
    n, m = x.shape[-1], idx.shape[-1]
    count = int(np.prod(batch, dtype=np.int64))
    # linearize: row r of the flattened batch starts at r * n
    flat = apply("reshape", broadcast_to(x, batch + (n,)), shape=(count * n,))
    if isinstance(idx.buffer, np.ndarray):
        _static_index("take_along_axis", idx.buffer, axis, n)
    idx = _dynamic_index(broadcast_to(idx, batch + (m,)), n)
    rows = apply("iota", shape=(count, m), dtype=D.int64, dimension=0)
    rows = apply("reshape", rows, shape=batch + (m,))
    lin = apply("add", idx, apply("multiply", rows, broadcast_to(scalar(n, D.int64), rows.shape)))
    out = apply("gather", flat, lin, axis=0)
    if axis != last:
        out = apply("transpose", out, permutation=tuple(int(i) for i in np.argsort(perm)))
    return out


# ---- functional updates -------------------------------------------------------------

def _fit_value(op: str, value: Node, shape: tuple) -> Node:
    """Broadcast an update to `shape`, dropping leading size-1 dims first (NumPy)."""
    while value.ndim > len(shape) and value.shape[0] == 1:
        value = apply("reshape", value, shape=value.shape[1:])
    try:
        return broadcast_to(value, shape)
    except ValueError:
        raise ValueError(f"{op}: could not broadcast a value of shape "
                         f"{shape_str(value.shape)} into the indexed shape "
                         f"{shape_str(shape)}") from None


def _value_node(value: Any, dtype: D.DType) -> Node:
    if isinstance(value, Node):
        return convert(value, dtype)
    if isinstance(value, complex) and dtype.kind == "complex":
        return scalar(value, dtype)
    if isinstance(value, (bool, int, float)):
        if dtype is D.bool_:
            return scalar(bool(value), dtype)
        if isinstance(value, float) and not dtype.is_float:
            return convert(scalar(value, D.float64), dtype)
        return scalar(value, dtype)
    raise TypeError(f"setitem: the value must be a tensor or a Python scalar, "
                    f"got {type(value).__name__}")


def setitem(x: Node, key: Any, value: Any, lift: Optional[LiftArray] = None) -> Node:
    """The value of x after `x[key] = value` (a new node; x is unchanged)."""
    lift = lift or _default_lift
    if isinstance(key, Node) and key.dtype is D.bool_:
        return mask_setitem(x, key, value)
    value = _value_node(value, x.dtype)
    entries = parse_key("setitem", x.shape, key)
    if any(e.kind == "array" for e in entries):
        along = _single_axis_update(x, entries, value, lift)
        return along if along is not None else _scatter_update(x, key, value, lift)
    return _basic_update(x, entries, value)


def _basic_update(x: Node, entries: list, value: Node) -> Node:
    starts, steps, counts = [0] * x.ndim, [1] * x.ndim, list(x.shape)
    written = [False] * x.ndim          # a start the key wrote: a runtime scalar
    flips, out_shape = [], []
    for e in entries:
        if e.kind == "slice":
            n = x.shape[e.dim]
            start, step, m = _slice_bounds("setitem", e.value, n)
            if step < 0 and m:
                flips.append(e.dim)
                start, step = start + (m - 1) * step, -step
            starts[e.dim], steps[e.dim], counts[e.dim] = (start if m else 0), step, m
            written[e.dim] = e.value.start is not None or starts[e.dim] != 0
            out_shape.append(m)
        elif e.kind == "int":
            starts[e.dim] = _norm_int("setitem", e.value, e.dim, x.shape[e.dim])
            counts[e.dim], written[e.dim] = 1, True
        else:
            out_shape.append(1)
    value = _fit_value("setitem", value, tuple(out_shape))
    if 0 in counts:
        return x
    value = apply("reshape", value, shape=tuple(counts)) if value.shape != tuple(counts) else value
    if flips:
        value = apply("reverse", value, dimensions=tuple(sorted(flips)))
    if tuple(counts) == x.shape:
        return value
    if all(s == 1 for s in steps):
        return apply("dynamic_update_slice", x, value,
                     *[_start(s) if w else _zero_start() for s, w in zip(starts, written)])
    return _strided_update(x, value, starts, steps, counts)


def _strided_update(x: Node, value: Node, starts: list, steps: list, counts: list) -> Node:
    """pad the update (and a mask of it) out to x's shape, then select."""
    high = [n - (s + (m - 1) * st + 1) for n, s, st, m in zip(x.shape, starts, steps, counts)]
    attrs = dict(edge_padding_low=tuple(starts), edge_padding_high=tuple(high),
                 interior_padding=tuple(st - 1 for st in steps))
    padded = apply("pad", value, scalar(0, x.dtype), **attrs)
    ones = broadcast_to(scalar(True, D.bool_), value.shape)
    mask = apply("pad", ones, scalar(False, D.bool_), **attrs)
    return apply("select", mask, padded, x)


def _is_full(e: _Entry, n: int) -> bool:
    return e.kind == "slice" and _slice_bounds("setitem", e.value, n) == (0, 1, n)


def _single_axis_update(x: Node, entries: list, value: Node, lift: LiftArray) -> Any:
    """`x[:, idx] = v` (one index array, every other dim whole): one scatter along that
    axis. None when the key has another form."""
    arrays = [e for e in entries if e.kind == "array"]
    if len(arrays) != 1 or arrays[0].dim is None:
        return None
    e = arrays[0]
    if any(o is not e and (o.kind != "slice" or not _is_full(o, x.shape[o.dim]))
           for o in entries):
        return None
    n = x.shape[e.dim]
    if isinstance(e.value, np.ndarray):
        index = lift(np.asarray(_static_index("setitem", e.value, e.dim, n), order="C"))
    else:
        index = _dynamic_index(e.value, n, "setitem", e.dim)
    shape = x.shape[:e.dim] + index.shape + x.shape[e.dim + 1:]
    value = _fit_value("setitem", value, shape)
    if 0 in shape:                  # nothing to write
        return x
    return apply("scatter", x, index, value, axis=e.dim, mode="set")


def _scatter_update(x: Node, key: Any, value: Node, lift: LiftArray) -> Node:
    """Index arrays: find the flat positions the key selects, then scatter into them."""
    size = int(np.prod(x.shape, dtype=np.int64))
    ids = apply("reshape", apply("iota", shape=(size,), dtype=D.int64, dimension=0),
                shape=x.shape)
    where = getitem(ids, key, lift)
    value = _fit_value("setitem", value, where.shape)
    count = int(np.prod(where.shape, dtype=np.int64))
    if count == 0:                  # nothing to write
        return x
    flat = apply("reshape", x, shape=(size,))
    out = apply("scatter", flat, apply("reshape", where, shape=(count,)),
                apply("reshape", value, shape=(count,)), axis=0, mode="set")
    return apply("reshape", out, shape=x.shape)


def mask_fits(x_shape: tuple, mask_shape: tuple, value_shape: tuple) -> bool:
    """Whether `x[mask] = value` can be a select (the value broadcasts over each selected
    row), so that it needs no graph break."""
    k = len(mask_shape)
    if tuple(mask_shape) != tuple(x_shape[:k]):
        return False
    rest = tuple(x_shape[k:])
    value_shape = tuple(value_shape)
    while len(value_shape) > len(rest) and value_shape[0] == 1:
        value_shape = value_shape[1:]
    try:
        broadcast_shapes("setitem", value_shape, rest)
    except ValueError:
        return False
    return broadcast_shapes("setitem", value_shape, rest) == rest


def mask_setitem(x: Node, mask: Node, value: Any) -> Node:
    """x[mask] = value as a select: mask covers x's leading dims."""
    value = _value_node(value, x.dtype)
    if mask.dtype is not D.bool_:
        raise TypeError(f"setitem: a mask must be bool, got {mask.dtype.name}")
    if not mask_fits(x.shape, mask.shape, value.shape):
        raise IndexError(f"setitem: boolean mask of shape {shape_str(mask.shape)} with a value "
                         f"of shape {shape_str(value.shape)} does not fit a tensor of shape "
                         f"{shape_str(x.shape)}: the mask must match the leading dimensions "
                         "and the value must broadcast over the rest")
    k = mask.ndim
    full_mask = apply("broadcast_in_dim", mask, shape=x.shape, broadcast_dimensions=tuple(range(k)))
    rest = x.shape[k:]
    v = value
    while v.ndim > len(rest) and v.shape[0] == 1:
        v = apply("reshape", v, shape=v.shape[1:])
    return apply("select", full_mask, broadcast_to(v, x.shape), x)


__all__ = ["take", "take_along_axis"]
