"""Index-moving ops inside the elemental emitter: which operand element an output element
is, as index arithmetic (no data moves; the consumer reads through the map).

Each rule is (emitter, instruction, output index) -> Value: the `emit` of its op's stanza
(compiler/primitives/structural.py), in the elemental emitter's index form. Where an op
chooses between operands (pad, concatenate, dynamic_update_slice) every candidate index is
clamped into its operand, all candidates are computed and one is selected: loads stay in
bounds and the loop stays branch-free, so it still vectorizes.
"""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ir

from ..hlo import dtypes as D
from . import inner_rows
from .llvm_types import I1, Value
from .loops import const


def _shape(e, pos: int) -> tuple:
    return e.module.instructions[pos].shape


def broadcast_in_dim(e, ins: Any, index: list):
    (x,) = ins.operands
    xshape = _shape(e, x)
    dims = ins.attrs["broadcast_dimensions"]
    idx = [const(0) if xshape[i] == 1 else index[d] for i, d in enumerate(dims)]
    return e.at(x, idx)


def reshape(e, ins: Any, index: list):
    (x,) = ins.operands
    return e.at(x, same_element(e, _shape(e, x), ins.shape, index))


def same_element(e, shape: tuple, from_shape: tuple, index: list) -> list:
    """The index into `shape` of the element at `index` of `from_shape` (same row-major
    position; the shapes have equal sizes): a reshape's operand index, and where a
    reduction kernel writes each epilogue output (a keepdims reshape, a 0-d result).

    The shapes split into the shortest runs of dimensions with equal sizes (`_groups`):
    (8, 128, 256) -> (8, 128, 4, 64) is 8 | 128 | 256 -> (4, 64). Each run maps on its
    own: equal runs pass their indices through; a run of one dimension is the other
    run's row-major offset (multiply-adds, no division: a head split's reads stay
    contiguous, so the loop vectorizes); only a run that splits one offset into several
    dimensions divides, and only its own index."""
    if tuple(shape) == tuple(from_shape):
        return list(index)
    groups = _groups(tuple(shape), tuple(from_shape))
    if groups is None:
        return _split_offset(e, tuple(shape), e.linear(tuple(from_shape), index))
    out: list = [const(0)] * len(shape)
    for (a0, a1), (b0, b1) in groups:
        dims, src = tuple(shape[a0:a1]), tuple(from_shape[b0:b1])
        if dims == src:
            out[a0:a1] = index[b0:b1]
        else:
            out[a0:a1] = _split_offset(e, dims, e.linear(src, index[b0:b1]))
    return out


def _groups(a: tuple, b: tuple) -> Any:
    """[((a_lo, a_hi), (b_lo, b_hi))]: the shortest runs of a's and b's dimensions with
    equal sizes, in order (size-1 dimensions left over at the end join no run: their
    index is 0); None when a shape has a zero-size dimension."""
    if 0 in a or 0 in b:
        return None
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        i0, j0 = i, j
        pa, pb = a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                pa, i = pa * a[i], i + 1
            else:
                pb, j = pb * b[j], j + 1
        out.append(((i0, i), (j0, j)))
    return out


def _split_offset(e, dims: tuple, lin) -> list:
    """The row-major index into `dims` of offset `lin` (< their size): the outermost
    dimension longer than 1 takes the quotient whole (no remainder needed)."""
    big = [k for k, n in enumerate(dims) if n != 1]
    out: list = [const(0)] * len(dims)
    for k in reversed(big):
        if k == big[0]:
            out[k] = lin
            break
        known = inner_rows.known(e, lin)
        if known is not None and known[1] == dims[k]:
            # lin = q * m + r with r < m (a loop run as rows of m): no division
            lin, out[k] = known[0], known[2]
            continue
        out[k] = e.b.urem(lin, const(dims[k]))
        lin = e.b.udiv(lin, const(dims[k]))
    return out


def transpose(e, ins: Any, index: list):
    (x,) = ins.operands
    perm = ins.attrs["permutation"]
    idx: list = [None] * len(perm)
    for i, p in enumerate(perm):
        idx[p] = index[i]
    return e.at(x, idx)


def slice_(e, ins: Any, index: list):
    (x,) = ins.operands
    b = e.b
    idx = []
    for i, s, st in zip(index, ins.attrs["start_indices"], ins.attrs["strides"]):
        v = b.mul(i, const(st), flags=("nsw",)) if st != 1 else i
        idx.append(b.add(v, const(s), flags=("nsw",)) if s else v)
    return e.at(x, idx)


def reverse(e, ins: Any, index: list):
    (x,) = ins.operands
    xshape = _shape(e, x)
    dims = set(ins.attrs["dimensions"])
    idx = [e.b.sub(const(xshape[d] - 1), i) if d in dims else i for d, i in enumerate(index)]
    return e.at(x, idx)


def pad(e, ins: Any, index: list):
    x, value = ins.operands
    xshape = _shape(e, x)
    fill = e.at(value, [])
    if 0 in xshape:
        return fill
    attrs = ins.attrs
    last = len(index) - 1
    lo_last = attrs["edge_padding_low"][last] if index else 0
    known = e.ranges.get(id(index[last])) if index else None
    if known is not None and attrs["interior_padding"][last] == 0 and lo_last >= 0:
        # the loop's piece lies in the padding or in x along the last dimension
        # (`pad_pieces`): the fill itself, or x read there plainly (no clamp, no test
        # of that dimension), so the piece vectorizes
        if known[1] <= lo_last or known[0] >= lo_last + xshape[last]:
            return fill
        if lo_last <= known[0] and known[1] <= lo_last + xshape[last]:
            last_index = inner_rows.shifted(e, index[last], lo_last) if lo_last \
                else index[last]
            inside, idx = _padded_dims(e, attrs, index[:last], xshape[:last])
            v = e.at(x, idx + [last_index])
            return e.select(_bool(e, inside), v, fill) if last else v
    inside, idx = _padded_dims(e, attrs, index, xshape)
    return e.select(_bool(e, inside), e.at(x, idx), fill)


def _padded_dims(e, attrs: dict, index: list, xshape: tuple) -> tuple:
    """(whether `index` lies inside x, x's index there, clamped) over the given
    dimensions of a pad: a dimension not padded is read as it is."""
    b = e.b
    inside = ir.Constant(I1, 1)
    idx = []
    for i, n, lo, hi, it in zip(index, xshape, attrs["edge_padding_low"],
                                attrs["edge_padding_high"], attrs["interior_padding"]):
        if lo == hi == it == 0:
            idx.append(i)
            continue
        rel = b.sub(i, const(lo))
        step = it + 1
        q = b.sdiv(rel, const(step)) if step != 1 else rel
        ok = b.and_(b.icmp_signed(">=", rel, const(0)), b.icmp_signed("<", q, const(n)))
        if step != 1:
            ok = b.and_(ok, b.icmp_signed("==", b.srem(rel, const(step)), const(0)))
        inside = b.and_(inside, ok)
        idx.append(e.clamp_index(q, 0, n - 1))
    return inside, idx


def pad_pieces(ins: Any, operands: list) -> tuple:
    """Where x starts and ends along a pad's last dimension (no holes, no crop there): a
    loop split there writes the fill plainly in the padding and reads x plainly between
    (`pad`)."""
    x = operands[0]
    if not ins.shape or 0 in x.shape:
        return ()
    lo, hi = ins.attrs["edge_padding_low"][-1], ins.attrs["edge_padding_high"][-1]
    if ins.attrs["interior_padding"][-1] != 0 or lo < 0 or hi < 0 or lo + hi == 0:
        return ()
    return tuple(c for c in (lo, lo + x.shape[-1]) if 0 < c < ins.shape[-1])


def concatenate(e, ins: Any, index: list):
    taps = _window_taps(e, ins)
    if taps is not None:
        return _one_tap(e, ins, index, *taps)
    dim = ins.attrs["dimension"]
    b = e.b
    known = e.ranges.get(id(index[dim]))
    result = None
    offset = 0
    for o in ins.operands:
        n = _shape(e, o)[dim]
        if n == 0:
            continue
        if known is not None and offset <= known[0] and known[1] <= offset + n:
            # the loop's piece lies inside this operand (`innermost_cuts`): a plain
            # read, no clamp and no select, so the piece vectorizes
            idx = list(index)
            idx[dim] = inner_rows.shifted(e, index[dim], offset) if offset else index[dim]
            return e.at(o, idx)
        idx = list(index)
        idx[dim] = e.clamp_index(b.sub(index[dim], const(offset)), 0, n - 1)
        v = e.at(o, idx)
        if result is None:
            result = v
        else:
            use = b.icmp_signed(">=", index[dim], const(offset))
            result = e.select(_bool(e, use), v, result)
        offset += n
    return result


MAX_PIECES = 8      # more operands than this: one select chain beats that much code
MIN_PIECE = 8       # narrower operands (convolution's window taps): no vector to gain


def concatenate_pieces(ins: Any, operands: list) -> tuple:
    """The positions along a concatenate's last dimension where its next operand starts,
    when it joins along that dimension: a loop split there reads each operand plainly in
    its own piece (`concatenate`, which checks the piece's range itself)."""
    dim = ins.attrs["dimension"]
    if dim != len(ins.shape) - 1 or len(operands) > MAX_PIECES or any(
            o.shape[dim] < MIN_PIECE for o in operands):
        return ()
    out, offset = [], 0
    for o in operands[:-1]:
        offset += o.shape[dim]
        out.append(offset)
    return tuple(out)


def _window_taps(e, ins: Any) -> Any:
    """(source, each operand's start indices, strides, inserted) when every operand of a
    concatenate is one element wide along its dimension and is a fused strided slice of
    one and the same `source` (directly, or through a reshape that inserts the size-1
    dimension: `inserted`), as the window taps of convolution's im2col are. Such a
    concatenate reads one source element per output element, at a start chosen by the
    position along the dimension: one load instead of one per operand and a select chain."""
    dim = ins.attrs["dimension"]
    if len(ins.operands) < 2:
        return None
    found = []
    for pos in ins.operands:
        op = e.module.instructions[pos]
        if pos in e.buffers or op.shape[dim] != 1:
            return None
        inserted = op.op == "reshape"
        if inserted:
            (pos,) = op.operands
            if pos in e.buffers or tuple(_shape(e, pos)) != op.shape[:dim] + op.shape[dim + 1:]:
                return None
            op = e.module.instructions[pos]
        if op.op != "slice":
            return None
        found.append((op.operands[0], tuple(op.attrs["start_indices"]),
                      tuple(op.attrs["strides"]), inserted))
    first = found[0]
    if any(f[0] != first[0] or f[2] != first[2] or f[3] != first[3] for f in found):
        return None
    return first[0], [f[1] for f in found], first[2], first[3]


def _one_tap(e, ins: Any, index: list, source: int, starts: list, strides: tuple,
             inserted: bool):
    dim = ins.attrs["dimension"]
    b = e.b
    which = index[dim]                  # the operand: each is one element wide
    inner = list(index[:dim]) + list(index[dim + 1:]) if inserted else \
        list(index[:dim]) + [const(0)] + list(index[dim + 1:])
    idx = []
    for j, (i, st) in enumerate(zip(inner, strides)):
        start = const(starts[0][j])
        for k in range(1, len(starts)):
            if starts[k][j] != starts[0][j]:
                start = b.select(b.icmp_unsigned("==", which, const(k)), const(starts[k][j]),
                                 start)
        v = b.mul(i, const(st), flags=("nsw",)) if st != 1 else i
        idx.append(b.add(v, start, flags=("nsw",)))
    return e.at(source, idx)


def _starts(e, ins: Any, first: int, sizes: tuple, shape: tuple) -> list:
    """Start indices, clamped so that a block of `sizes` stays inside `shape`."""
    out = []
    for k, (pos, z, n) in enumerate(zip(ins.operands[first:], sizes, shape)):
        s = e.to_index(e.at(pos, []))
        out.append(e.clamp_index(s, 0, n - z))
    return out


def dynamic_slice(e, ins: Any, index: list):
    x = ins.operands[0]
    starts = _starts(e, ins, 1, ins.attrs["slice_sizes"], _shape(e, x))
    return e.at(x, [e.b.add(i, s) for i, s in zip(index, starts)])


def update_starts(e, ins: Any) -> list:
    """A dynamic_update_slice's start indices, clamped so the update fits the operand."""
    return _starts(e, ins, 2, _shape(e, ins.operands[1]), ins.shape)


def dynamic_update_slice(e, ins: Any, index: list):
    x, upd = ins.operands[:2]
    ushape = _shape(e, upd)
    old = e.at(x, index)
    if 0 in ushape:
        return old
    b = e.b
    block = e.blocks.get(id(index[-1]))
    if block is not None and id(ins) in block[1]:
        # the loop runs the last dimension in blocks this update covers whole or not at
        # all (update_blocks): a plain read at the offset in the block, in bounds either way
        rel, covers = block[0], block[1][id(ins)]
        new = e.at(upd, list(index[:-1]) + [rel])
        return e.select(_bool(e, covers), new, old)
    starts = _starts(e, ins, 2, ushape, ins.shape)
    inside = ir.Constant(I1, 1)
    idx = []
    for i, s, z in zip(index, starts, ushape):
        rel = b.sub(i, s)
        ok = b.and_(b.icmp_signed(">=", rel, const(0)), b.icmp_signed("<", rel, const(z)))
        inside = b.and_(inside, ok)
        idx.append(e.clamp_index(rel, 0, z - 1))
    new = e.at(upd, idx)
    return e.select(_bool(e, inside), new, old)


def gather(e, ins: Any, index: list):
    x, ind = ins.operands
    axis = ins.attrs["axis"]
    xshape, ishape = _shape(e, x), _shape(e, ind)
    if xshape[axis] == 0:
        return e.identity("sum", ins.dtype)     # the reference: zeros
    k = e.to_index(e.at(ind, list(index[axis:axis + len(ishape)])))
    k = e.clamp_index(k, 0, xshape[axis] - 1)
    return e.at(x, list(index[:axis]) + [k] + list(index[axis + len(ishape):]))


def _bool(e, v: ir.Value) -> Value:
    return Value(v, D.bool_)

