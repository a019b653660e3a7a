"""Primitives that only move elements (fusion computes them at the index a consumer needs),
and the leaves: parameter, constant, iota.

Shapes are tuples of ints; attributes are ints, tuples of ints, strings and dtypes.
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen import index_rules as IR
from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..passes import algebraic_simplifier as S
from ..primitive import (INDEXING, LEAF, NOT_DIFFERENTIABLE, OPAQUE, LibraryCall, Loop, apply,
                         fail, primitive)


def _ints(x) -> tuple:
    return tuple(int(v) for v in x)


def _check_perm(op, operands, perm, rank, what="permutation"):
    if sorted(perm) != list(range(rank)):
        fail(op, operands, f"{what} {tuple(perm)} is not a permutation of 0..{rank - 1}")


def _check_scalar_ints(op, operands, starts):
    for s in starts:
        if s.shape != () or not s.dtype.is_int:
            fail(op, operands, "start indices must be integer scalars", TypeError)


# ---- vector-Jacobian products ---------------------------------------------------------

def _broadcast_vjp(g, out, x, shape, broadcast_dimensions):
    """Sum over the new dimensions and over the size-1 dimensions that were repeated."""
    dims = tuple(broadcast_dimensions)
    summed = [d for d in range(len(shape)) if d not in dims]
    summed += [d for i, d in enumerate(dims) if x.shape[i] == 1 and shape[d] != 1]
    return (A.reshape(A.reduce_sum(g, summed), x.shape),)


def _reshape_vjp(g, out, x, shape):
    return (A.reshape(g, x.shape),)


def _transpose_vjp(g, out, x, permutation):
    return (A.transpose(g, A.inverse_permutation(permutation)),)


def _slice_vjp(g, out, x, start_indices, limit_indices, strides):
    """Put g back with pad: low = start, interior = stride - 1, high = what is left."""
    high = []
    for n, s, st, m in zip(x.shape, start_indices, strides, out.shape):
        high.append(n - s - m if m == 0 else n - (s + (m - 1) * st + 1))
    return (apply("pad", g, A.const(0, g.dtype), edge_padding_low=tuple(start_indices),
                  edge_padding_high=tuple(high),
                  interior_padding=tuple(st - 1 for st in strides)),)


def _dynamic_slice_vjp(g, out, x, *starts, slice_sizes):
    # the update is clamped into bounds exactly as the slice was
    gx = apply("dynamic_update_slice", A.zeros_like(x), g, *starts)
    return (gx,) + (None,) * len(starts)


def _dus_vjp(g, out, x, update, *starts):
    gx = apply("dynamic_update_slice", g, A.zeros_like(update), *starts)
    gu = apply("dynamic_slice", g, *starts, slice_sizes=update.shape)
    return (gx, gu) + (None,) * len(starts)


def _concat_vjp(g, out, *xs, dimension):
    outs, offset = [], 0
    for x in xs:
        start = [0] * g.ndim
        limit = list(g.shape)
        start[dimension], limit[dimension] = offset, offset + x.shape[dimension]
        outs.append(apply("slice", g, start_indices=tuple(start), limit_indices=tuple(limit),
                          strides=(1,) * g.ndim))
        offset += x.shape[dimension]
    return tuple(outs)


def _pad_vjp(g, out, x, value, edge_padding_low, edge_padding_high, interior_padding):
    """Undo the edges with the opposite padding (crop what was added, zeros for what was
    cropped), then keep every (interior + 1)-th element. The padding value gets the rest."""
    unpadded = apply("pad", g, A.const(0, g.dtype),
                     edge_padding_low=tuple(-lo for lo in edge_padding_low),
                     edge_padding_high=tuple(-hi for hi in edge_padding_high),
                     interior_padding=(0,) * g.ndim)
    gx = apply("slice", unpadded, start_indices=(0,) * g.ndim, limit_indices=unpadded.shape,
               strides=tuple(it + 1 for it in interior_padding))
    every = tuple(range(g.ndim))
    gvalue = A.sub(A.reduce_sum(g, every), A.reduce_sum(gx, every))
    return gx, gvalue


def _reverse_vjp(g, out, x, dimensions):
    return (apply("reverse", g, dimensions=dimensions),)


def _in_range(idx, n):
    lo = A.compare(idx, A.zeros_like(idx), "GE")
    hi = A.compare(idx, A.full_like(idx, n), "LT")
    return apply("and", lo, hi)


def _gather_vjp(g, out, x, idx, axis):
    """Scatter-add g back, at the indices clamped as the gather clamped them."""
    n = x.shape[axis]
    if n == 0:
        return A.zeros_like(x), None
    clamped = apply("clamp", A.zeros_like(idx), idx, A.full_like(idx, n - 1))
    return apply("scatter", A.zeros_like(x), clamped, g, axis=axis, mode="add"), None


def _update_mask(x, idx, upd, axis, mode):
    """Which updates reach the result: in range, and for 'set' the last write to a place."""
    ok = _in_range(idx, x.shape[axis])
    if mode == "set":
        ok = apply("and", ok, _last_writes(idx, x.shape[axis]))
    dims = tuple(range(axis, axis + idx.ndim))
    return A.broadcast(ok, upd.shape, dims)


def _last_writes(idx, n):
    """For each index, whether no later index names the same place."""
    k = 1
    for s in idx.shape:
        k *= s
    flat = A.convert(A.reshape(idx, (k,)), D.int64)
    order = A.iota((k,), D.int64, 0)
    winner = apply("scatter", A.full(-1, (max(n, 1),), D.int64), flat, order, axis=0, mode="set")
    clamped = apply("clamp", A.zeros_like(flat), flat, A.full_like(flat, max(n - 1, 0)))
    mine = A.compare(apply("gather", winner, clamped, axis=0), order, "EQ")
    return A.reshape(mine, idx.shape)


def _scatter_vjp(g, out, x, idx, upd, axis, mode):
    mask = _update_mask(x, idx, upd, axis, mode)
    gathered = apply("gather", g, idx, axis=axis)
    gu = A.where_else_zero(mask, gathered)
    if mode == "add":
        return g, None, gu
    # 'set': the places that were written lose x's gradient
    gx = apply("scatter", g, idx, A.zeros_like(upd), axis=axis, mode="set")
    return gx, None, gu


# ---- leaves --------------------------------------------------------------------------

def _leaf_infer(operands, **attrs):
    raise ValueError("parameters and constants are leaves: they are made, not applied")


parameter = primitive("parameter", LEAF, _leaf_infer, None, attrs=("number",),
                      doc="The module's input number `number`.", vjp=NOT_DIFFERENTIABLE)
constant = primitive("constant", LEAF, _leaf_infer, None, attrs=("value",),
                     doc="A literal kept in the module (and in its fingerprint).",
                     vjp=NOT_DIFFERENTIABLE)


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
                 doc="out[i] = i[dimension], as the dtype.", vjp=NOT_DIFFERENTIABLE,
                 emit=lambda e, ins, index: e.iota(ins, index))

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


def _broadcast_batch(node, size, operands, batched):
    return B.same_op(node, operands, shape=(size,) + tuple(node.attrs["shape"]),
                     broadcast_dimensions=(0,) + B.shifted(node.attrs["broadcast_dimensions"]))


def _broadcast_keeps_tail(ins, src: tuple) -> bool:
    rank, tail = len(ins.shape), tuple(ins.shape[-2:])
    read = [d for k, d in enumerate(ins.attrs["broadcast_dimensions"])
            if d >= rank - 2 and src[k] != 1]
    return not read or (read == [rank - 2, rank - 1] and tuple(src[-2:]) == tail)


broadcast_in_dim = primitive("broadcast_in_dim", INDEXING, _broadcast_infer, _broadcast_ref,
                             emit=IR.broadcast_in_dim, cheap=True, repeats=True,
                             attrs=("shape", "broadcast_dimensions"),
                             doc="Operand dimension i becomes output dimension "
                                 "broadcast_dimensions[i]; the others are repeated.",
                             vjp=_broadcast_vjp, vjp_by_type=True, batch=_broadcast_batch,
                             simplify=S.broadcast_twice, keeps_tail=_broadcast_keeps_tail)


def _reshape_infer(operands, shape):
    (x,) = operands
    shape = _ints(shape)
    if math.prod(shape) != math.prod(x.shape):
        fail("reshape", operands, f"cannot reshape to {shape}: sizes differ")
    return shape, x.dtype


reshape = primitive("reshape", INDEXING, _reshape_infer,
                    lambda x, shape: x.reshape(shape).copy(), emit=IR.reshape, cheap=True,
                    linear=True,
                    attrs=("shape",),
                    doc="Row-major reshape.", vjp=_reshape_vjp, vjp_by_type=True,
                    simplify=S.reshape_twice,
                    keeps_tail=lambda ins, src: len(src) >= 2 and tuple(src[-2:]) == tuple(
                        ins.shape[-2:]),
                    batch=lambda node, size, ops, _: B.same_op(node, ops, shape=(size,) + node.shape))


def _transpose_infer(operands, permutation):
    (x,) = operands
    _check_perm("transpose", operands, permutation, x.ndim)
    return tuple(x.shape[p] for p in permutation), x.dtype


transpose = primitive("transpose", INDEXING, _transpose_infer,
                      lambda x, permutation: np.transpose(x, permutation).copy(),
                      emit=IR.transpose,
                      attrs=("permutation",),
                      doc="out.shape[i] = x.shape[permutation[i]].", vjp=_transpose_vjp,
                      vjp_by_type=True, simplify=S.transpose_rule,
                      keeps_tail=lambda ins, src: tuple(ins.attrs["permutation"][-2:]) == (
                          len(ins.shape) - 2, len(ins.shape) - 1),
                      batch=lambda node, size, ops, _: B.same_op(
                          node, ops, permutation=(0,) + B.shifted(node.attrs["permutation"])))


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


def _slice_batch(node, size, operands, batched):
    a = node.attrs
    return B.same_op(node, operands, start_indices=(0,) + tuple(a["start_indices"]),
                     limit_indices=(size,) + tuple(a["limit_indices"]),
                     strides=(1,) + tuple(a["strides"]))


slice_ = primitive("slice", INDEXING, _slice_infer, _slice_ref,
                   emit=IR.slice_,
                   attrs=("start_indices", "limit_indices", "strides"), vjp=_slice_vjp,
                   vjp_by_type=True, batch=_slice_batch, simplify=S.slice_whole,
                   keeps_tail=lambda ins, src: tuple(src[-2:]) == tuple(ins.shape[-2:])
                   and tuple(ins.attrs["start_indices"][-2:]) == (0, 0)
                   and tuple(ins.attrs["strides"][-2:]) == (1, 1))


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


@B.first_operand_only
def _dynamic_slice_batch(node, size, operands, batched):
    x, *starts = operands
    return B.same_op(node, [x, B.zero_index(starts), *starts],
                     slice_sizes=(size,) + tuple(node.attrs["slice_sizes"]))


dynamic_slice = primitive("dynamic_slice", INDEXING, _dynamic_slice_infer, _dynamic_slice_ref,
                          emit=IR.dynamic_slice,
                          attrs=("slice_sizes",),
                          doc="Starts are clamped so that the slice stays in bounds.",
                          vjp=_dynamic_slice_vjp, vjp_by_type=True,
                          batch=_dynamic_slice_batch)


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


def _dus_batch(node, size, operands, batched):
    if any(batched[2:]):
        return B.loop_over_batch(node, size, operands, batched)
    x, update = B.lift_all(size, operands[:2], batched[:2])
    return B.same_op(node, [x, update, B.zero_index(operands[2:]), *operands[2:]])


dynamic_update_slice = primitive("dynamic_update_slice", INDEXING, _dus_infer, _dus_ref,
                                 emit=IR.dynamic_update_slice,
                                 doc="Starts are clamped so that the update stays in bounds.",
                                 vjp=_dus_vjp, batch=_dus_batch)


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
                        emit=IR.concatenate, pieces=IR.concatenate_pieces,
                        attrs=("dimension",), vjp=_concat_vjp, simplify=S.concatenate_one,
                        batch=lambda node, size, ops, batched: B.same_op(
                            node, B.lift_all(size, ops, batched),
                            dimension=node.attrs["dimension"] + 1))


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


@B.first_operand_only
def _pad_batch(node, size, operands, batched):
    a = node.attrs
    return B.same_op(node, operands, edge_padding_low=(0,) + tuple(a["edge_padding_low"]),
                     edge_padding_high=(0,) + tuple(a["edge_padding_high"]),
                     interior_padding=(0,) + tuple(a["interior_padding"]))


pad = primitive("pad", INDEXING, _pad_infer, _pad_ref,
                emit=IR.pad, pieces=IR.pad_pieces,
                attrs=("edge_padding_low", "edge_padding_high", "interior_padding"),
                doc="pad(x, value): negative edge padding crops.", vjp=_pad_vjp,
                batch=_pad_batch, simplify=S.pad_nothing)


def _reverse_infer(operands, dimensions):
    (x,) = operands
    if any(not 0 <= d < x.ndim for d in dimensions):
        fail("reverse", operands, f"dimensions {tuple(dimensions)} out of range")
    return x.shape, x.dtype


reverse = primitive("reverse", INDEXING, _reverse_infer,
                    lambda x, dimensions: np.flip(x, tuple(dimensions)).copy(),
                    emit=IR.reverse,
                    attrs=("dimensions",), vjp=_reverse_vjp, simplify=S.reverse_nothing,
                    batch=lambda node, size, ops, _: B.same_op(
                        node, ops, dimensions=B.shifted(node.attrs["dimensions"])))


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


gather = primitive("gather", INDEXING, _gather_infer, _gather_ref, emit=IR.gather,
                   attrs=("axis",),
                   doc="np.take(x, indices, axis) with indices clamped into range.",
                   vjp=_gather_vjp, vjp_by_type=True, batch=B.first_operand_only(
                       lambda node, size, ops, _: B.same_op(node, ops, axis=node.attrs["axis"] + 1)))


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
    flat = idx.reshape(-1).astype(np.int64)
    u = u.reshape((flat.size,) + out.shape[1:])   # -1 is ambiguous when a size is 0
    keep = (flat >= 0) & (flat < out.shape[0])
    if mode == "add":
        np.add.at(out, flat[keep], u[keep])
    else:
        out[flat[keep]] = u[keep]
    return np.moveaxis(out, 0, axis).copy()


def _scatter_batch(node, size, operands, batched):
    if batched[1]:                      # per-element indices: one scatter per element
        return B.loop_over_batch(node, size, operands, batched)
    x, idx, upd = operands
    x, upd = B.lift_all(size, (x, upd), (batched[0], batched[2]))
    return B.same_op(node, [x, idx, upd], axis=node.attrs["axis"] + 1)


def _scatter_loops(ins, operands):
    """Two loops: out = x (independent elements), then each update in order (the last
    'set' wins; 'add' accumulates); out-of-range indices are skipped."""
    shape, dtype = ins.shape, ins.dtype
    axis, mode = ins.attrs["axis"], ins.attrs["mode"]

    def copy(e, out, operands, index):
        e.store(out, shape, e.load(operands[0], shape, dtype, index), index)

    def update(e, out, operands, index):
        _, idx, upd = operands
        b = e.b
        k = e.to_index(e.load(idx, ishape, idtype, index[axis:axis + len(ishape)]))
        inside = b.and_(b.icmp_signed(">=", k, e.const(0)),
                        b.icmp_signed("<", k, e.const(shape[axis])))
        with b.if_then(inside):
            at = list(index[:axis]) + [k] + list(index[axis + len(ishape):])
            v = e.load(upd, ushape, dtype, index)
            if mode == "add":
                v = e.round(e.add(e.load(out, shape, dtype, at), v))
            e.store(out, shape, v, at)

    ishape, idtype, ushape = operands[1].shape, operands[1].dtype, operands[2].shape
    loops = [Loop(shape, (), copy)]
    if 0 not in ushape:
        loops.append(Loop(ushape, tuple(range(len(ushape))), update))
    return loops


scatter = primitive("scatter", OPAQUE, _scatter_infer, _scatter_ref, attrs=("axis", "mode"),
                    doc="The transpose of gather: out = x; out[.., idx[j], ..] (=|+=) upd[.., j, ..]. "
                        "Out-of-range indices are skipped; with 'set' the last write wins.",
                    vjp=_scatter_vjp, emit=_scatter_loops, library=LibraryCall("host"),
                    batch=_scatter_batch)


def _tuple_infer(operands):
    return tuple(o.shape for o in operands), tuple(o.dtype for o in operands)


tuple_ = primitive("tuple", OPAQUE, _tuple_infer, lambda *xs: xs,
                   doc="The module's root: its outputs, in order.", vjp=NOT_DIFFERENTIABLE)
