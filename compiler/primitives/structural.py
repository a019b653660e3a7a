"""Primitives that only move elements (fusion computes them at the index a consumer needs),
and the leaves: parameter, constant, iota.

Shapes are tuples of ints; attributes are ints, tuples of ints, strings and dtypes.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes as D
from ..primitive import INDEXING, LEAF, OPAQUE, fail, primitive


def _ints(x) -> tuple:
    return tuple(int(v) for v in x)


def _check_perm(op, operands, perm, rank, what="permutation"):
    if sorted(perm) != list(range(rank)):
        fail(op, operands, f"{what} {tuple(perm)} is not a permutation of 0..{rank - 1}")


def _check_scalar_ints(op, operands, starts):
    for s in starts:
        if s.shape != () or not s.dtype.is_int:
            fail(op, operands, "start indices must be integer scalars", TypeError)


# ---- leaves --------------------------------------------------------------------------

def _leaf_infer(operands, **attrs):
    raise ValueError("parameters and constants are leaves: they are made, not applied")


parameter = primitive("parameter", LEAF, _leaf_infer, None, attrs=("number",),
                      doc="The module's input number `number`.")
constant = primitive("constant", LEAF, _leaf_infer, None, attrs=("value",),
                     doc="A literal kept in the module (and in its fingerprint).")


def _iota_infer(operands, shape, dtype, dimension):
    if not 0 <= dimension < max(len(shape), 1) or len(shape) == 0:
        raise ValueError(f"iota: dimension {dimension} out of range for shape {tuple(shape)}")
    d = D.to_dtype(dtype)
    if d is D.bool_:
        raise TypeError("iota: dtype must be numeric, got bool")
    return _ints(shape), d


def _iota_ref(shape, dtype, dimension):
    d = D.to_dtype(dtype)
    v = np.arange(shape[dimension]).astype(d.np)
    view = [1] * len(shape)
    view[dimension] = shape[dimension]
    return np.broadcast_to(v.reshape(view), shape).copy()


iota = primitive("iota", LEAF, _iota_infer, _iota_ref, attrs=("shape", "dtype", "dimension"),
                 doc="out[i] = i[dimension], as the dtype.")

# ---- index-moving ops ----------------------------------------------------------------


def _broadcast_infer(operands, shape, broadcast_dimensions):
    (x,) = operands
    shape, dims = _ints(shape), _ints(broadcast_dimensions)
    if len(dims) != x.ndim or len(set(dims)) != len(dims) or list(dims) != sorted(dims):
        fail("broadcast_in_dim", operands,
             f"broadcast_dimensions {dims} must be increasing, one per operand dimension")
    for i, d in enumerate(dims):
        if not 0 <= d < len(shape) or x.shape[i] not in (1, shape[d]):
            fail("broadcast_in_dim", operands,
                 f"operand dimension {i} (size {x.shape[i]}) cannot broadcast to {shape}")
    return shape, x.dtype


def _broadcast_ref(x, shape, broadcast_dimensions):
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dimensions):
        view[d] = x.shape[i]
    return np.broadcast_to(x.reshape(view), shape).copy()


broadcast_in_dim = primitive("broadcast_in_dim", INDEXING, _broadcast_infer, _broadcast_ref,
                             attrs=("shape", "broadcast_dimensions"),
                             doc="Operand dimension i becomes output dimension "
                                 "broadcast_dimensions[i]; the others are repeated.")


def _reshape_infer(operands, shape):
    (x,) = operands
    shape = _ints(shape)
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod(x.shape, dtype=np.int64)):
        fail("reshape", operands, f"cannot reshape to {shape}: sizes differ")
    return shape, x.dtype


reshape = primitive("reshape", INDEXING, _reshape_infer,
                    lambda x, shape: x.reshape(shape).copy(), attrs=("shape",),
                    doc="Row-major reshape.")


def _transpose_infer(operands, permutation):
    (x,) = operands
    _check_perm("transpose", operands, permutation, x.ndim)
    return tuple(x.shape[p] for p in permutation), x.dtype


transpose = primitive("transpose", INDEXING, _transpose_infer,
                      lambda x, permutation: np.transpose(x, permutation).copy(),
                      attrs=("permutation",),
                      doc="out.shape[i] = x.shape[permutation[i]].")


def _slice_infer(operands, start_indices, limit_indices, strides):
    (x,) = operands
    if not len(start_indices) == len(limit_indices) == len(strides) == x.ndim:
        fail("slice", operands, "needs one start, limit and stride per dimension")
    out = []
    for n, s, l, st in zip(x.shape, start_indices, limit_indices, strides):
        if st < 1 or not 0 <= s <= l <= n:
            fail("slice", operands, f"bad slice [{s}:{l}:{st}] of a dimension of size {n}",
                 IndexError)
        out.append(max(0, -(-(l - s) // st)))
    return tuple(out), x.dtype


def _slice_ref(x, start_indices, limit_indices, strides):
    return x[tuple(slice(s, l, st) for s, l, st in
                   zip(start_indices, limit_indices, strides))].copy()


slice_ = primitive("slice", INDEXING, _slice_infer, _slice_ref,
                   attrs=("start_indices", "limit_indices", "strides"))


def _clamped_starts(shape, sizes, starts):
    return [int(min(max(int(s), 0), n - z)) for s, n, z in zip(starts, shape, sizes)]


def _dynamic_slice_infer(operands, slice_sizes):
    x, *starts = operands
    _check_scalar_ints("dynamic_slice", operands, starts)
    if len(starts) != x.ndim or len(slice_sizes) != x.ndim:
        fail("dynamic_slice", operands, "needs one start index and one size per dimension")
    if any(not 0 <= z <= n for z, n in zip(slice_sizes, x.shape)):
        fail("dynamic_slice", operands, f"slice_sizes {tuple(slice_sizes)} exceed the shape",
             IndexError)
    return _ints(slice_sizes), x.dtype


def _dynamic_slice_ref(x, *starts, slice_sizes):
    st = _clamped_starts(x.shape, slice_sizes, starts)
    return x[tuple(slice(s, s + z) for s, z in zip(st, slice_sizes))].copy()


dynamic_slice = primitive("dynamic_slice", INDEXING, _dynamic_slice_infer, _dynamic_slice_ref,
                          attrs=("slice_sizes",),
                          doc="Starts are clamped so that the slice stays in bounds.")


def _dus_infer(operands):
    x, update, *starts = operands
    _check_scalar_ints("dynamic_update_slice", operands, starts)
    if update.dtype is not x.dtype or update.ndim != x.ndim or len(starts) != x.ndim:
        fail("dynamic_update_slice", operands,
             "update must match the operand's dtype and rank, with one start per dimension")
    if any(u > n for u, n in zip(update.shape, x.shape)):
        fail("dynamic_update_slice", operands, "update is larger than the operand", IndexError)
    return x.shape, x.dtype


def _dus_ref(x, update, *starts):
    st = _clamped_starts(x.shape, update.shape, starts)
    out = x.copy()
    out[tuple(slice(s, s + z) for s, z in zip(st, update.shape))] = update
    return out


dynamic_update_slice = primitive("dynamic_update_slice", INDEXING, _dus_infer, _dus_ref,
                                 doc="Starts are clamped so that the update stays in bounds.")


def _concat_infer(operands, dimension):
    first = operands[0]
    if not 0 <= dimension < first.ndim:
        fail("concatenate", operands, f"dimension {dimension} out of range")
    total = 0
    for o in operands:
        if o.dtype is not first.dtype or o.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(o.shape, first.shape)) if i != dimension):
            fail("concatenate", operands,
                 f"operands must share dtype and all dimensions but {dimension}")
        total += o.shape[dimension]
    shape = list(first.shape)
    shape[dimension] = total
    return tuple(shape), first.dtype


concatenate = primitive("concatenate", INDEXING, _concat_infer,
                        lambda *xs, dimension: np.concatenate(xs, axis=dimension),
                        attrs=("dimension",))


def _pad_infer(operands, edge_padding_low, edge_padding_high, interior_padding):
    x, value = operands
    if value.shape != () or value.dtype is not x.dtype:
        fail("pad", operands, "the padding value must be a scalar of the operand's dtype")
    if not len(edge_padding_low) == len(edge_padding_high) == len(interior_padding) == x.ndim:
        fail("pad", operands, "needs low, high and interior padding per dimension")
    out = []
    for n, lo, hi, it in zip(x.shape, edge_padding_low, edge_padding_high, interior_padding):
        size = lo + hi + n + max(n - 1, 0) * it
        if it < 0 or size < 0:
            fail("pad", operands, "negative interior padding or negative result size")
        out.append(size)
    return tuple(out), x.dtype


def _pad_ref(x, value, edge_padding_low, edge_padding_high, interior_padding):
    for d, it in enumerate(interior_padding):
        if it and x.shape[d] > 1:
            n = x.shape[d]
            shape = list(x.shape)
            shape[d] = n + (n - 1) * it
            y = np.full(shape, value, x.dtype)
            idx = [slice(None)] * x.ndim
            idx[d] = slice(None, None, it + 1)
            y[tuple(idx)] = x
            x = y
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in zip(edge_padding_low, edge_padding_high)]
    x = np.pad(x, widths, constant_values=value) if x.ndim else x.copy()
    crop = tuple(slice(-min(lo, 0), x.shape[d] + min(hi, 0)) for d, (lo, hi) in
                 enumerate(zip(edge_padding_low, edge_padding_high)))
    return x[crop].copy()


pad = primitive("pad", INDEXING, _pad_infer, _pad_ref,
                attrs=("edge_padding_low", "edge_padding_high", "interior_padding"),
                doc="pad(x, value): negative edge padding crops.")


def _reverse_infer(operands, dimensions):
    (x,) = operands
    if any(not 0 <= d < x.ndim for d in dimensions):
        fail("reverse", operands, f"dimensions {tuple(dimensions)} out of range")
    return x.shape, x.dtype


reverse = primitive("reverse", INDEXING, _reverse_infer,
                    lambda x, dimensions: np.flip(x, tuple(dimensions)).copy(),
                    attrs=("dimensions",))


def _gather_infer(operands, axis):
    x, idx = operands
    if not 0 <= axis < x.ndim:
        fail("gather", operands, f"axis {axis} out of range")
    if not idx.dtype.is_int:
        fail("gather", operands, "indices must be integers", TypeError)
    return x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype


def _gather_ref(x, idx, axis):
    if x.shape[axis] == 0:
        return np.zeros(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)
    return np.take(x, np.clip(idx, 0, x.shape[axis] - 1), axis=axis)


gather = primitive("gather", INDEXING, _gather_infer, _gather_ref, attrs=("axis",),
                   doc="np.take(x, indices, axis) with indices clamped into range.")


def _scatter_infer(operands, axis, mode):
    x, idx, upd = operands
    if mode not in ("set", "add"):
        fail("scatter", operands, f"mode must be 'set' or 'add', got {mode!r}")
    want = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    if not idx.dtype.is_int or upd.dtype is not x.dtype or upd.shape != want:
        fail("scatter", operands, f"updates must be {x.dtype.short}{list(want)} and indices integer")
    return x.shape, x.dtype


def _scatter_ref(x, idx, upd, axis, mode):
    out = np.moveaxis(x.copy(), axis, 0)
    u = np.moveaxis(upd, list(range(axis, axis + idx.ndim)), list(range(idx.ndim)))
    u = u.reshape((-1,) + out.shape[1:])
    flat = idx.reshape(-1).astype(np.int64)
    keep = (flat >= 0) & (flat < out.shape[0])
    if mode == "add":
        np.add.at(out, flat[keep], u[keep])
    else:
        out[flat[keep]] = u[keep]
    return np.moveaxis(out, 0, axis).copy()


scatter = primitive("scatter", OPAQUE, _scatter_infer, _scatter_ref, attrs=("axis", "mode"),
                    doc="The transpose of gather: out = x; out[.., idx[j], ..] (=|+=) upd[.., j, ..]. "
                        "Out-of-range indices are skipped; with 'set' the last write wins.")


def _tuple_infer(operands):
    return tuple(o.shape for o in operands), tuple(o.dtype for o in operands)


tuple_ = primitive("tuple", OPAQUE, _tuple_infer, lambda *xs: xs,
                   doc="The module's root: its outputs, in order.")
