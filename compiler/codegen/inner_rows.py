"""An innermost loop run as rows of m, where the kernel reads through a reshape that
splits the loop's dimension into (..., m).

A head merge (B, H, T, D) -> transpose -> reshape (B, T, H * D) read by a loop over
H * D computes each element's head and offset by dividing the index by D: LLVM cannot
see that consecutive indices read consecutive elements, and loads them one by one
(gathers). Run as H rows of D, the index is q * D + r with r the innermost loop's
variable; the emitter is told so (`know`), and the reshape reads (q, r) without dividing
(index_rules.same_element), contiguous in r: vector loads.

The same knowledge shapes two other innermost loops: columns (a dimension woven from
phases, (..., n, s) -> (..., n * s) with s small: r unrolled, a constant, and q the loop
variable; `columns_loop`), and two inner dimensions run as one loop (a narrow last one,
(q, r) the quotient and remainder of the loop variable i, which `e.linear` reads as i
itself; `joined_loop`).
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from ..primitive import ELEMENTWISE, INDEXING, LEAF, PRIMITIVES, REDUCTION
from .loops import const, counted_loop

MIN_ROW = 8         # narrower rows: no vector to gain


def row_width(instructions: list, members: list, length: int) -> int:
    """m: a loop over `length` elements runs as rows of m when a reshape among `members`
    makes a dimension `length` long of one whose last dimension is m (m < length,
    dividing it; the widest such m). 1: none."""
    return _widest_source_row(instructions, members, length, MIN_ROW, length)


def column_width(instructions: list, members: list, length: int) -> int:
    """s: a loop over `length` elements runs as columns of s (`rows_loop`) when a reshape
    among `members` makes a dimension `length` long of one whose last dimension is s,
    2 <= s < MIN_ROW (phases woven into one dimension: a strided convolution's input
    gradient, (..., m, s) -> (..., m * s)); the widest such s. 1: none."""
    return _widest_source_row(instructions, members, length, 2, MIN_ROW)


def _widest_source_row(instructions: list, members: list, length: int, lo: int,
                       hi: int) -> int:
    """The widest last dimension m, lo <= m < hi, dividing `length`, of the operand of a
    reshape among `members` whose last dimension is `length`; 1: none."""
    best = 1
    for pos in members:
        ins = instructions[pos]
        if not PRIMITIVES[ins.op].linear or not ins.shape or ins.shape[-1] != length:
            continue
        src = instructions[ins.operands[0]].shape
        m = src[-1] if src else 1
        if lo <= m < hi and length % m == 0:
            best = max(best, m)
    return best


def know(e, value: ir.Value, q: ir.Value, m: int, r: ir.Value) -> None:
    """Tell the emitter value == q * m + r with 0 <= r < m (until `forget`)."""
    e.offsets[id(value)] = (value, q, m, r)


def forget(e, value: ir.Value) -> None:
    e.offsets.pop(id(value), None)


def known(e, value: ir.Value):
    """(q, m, r) if value == q * m + r is known, else None."""
    hit = e.offsets.get(id(value))
    return hit[1:] if hit is not None and hit[0] is value else None


def shifted(e, value: ir.Value, offset: int) -> ir.Value:
    """value - offset, known as (q - offset / m) * m + r where value is known and m
    divides offset."""
    out = e.b.sub(value, const(offset))
    k = known(e, value)
    if k is not None and offset % k[1] == 0:
        q, m, r = k
        know(e, out, e.b.sub(q, const(offset // m)), m, r)
    return out


def rows_loop(e, lo: int, length: int, m: int, step: Callable, name: str) -> None:
    """for i in [lo, lo + length): step(i); as length / m rows of m when m > 1 (and m
    divides lo), i known to the emitter as q * m + r; below MIN_ROW, as columns: a loop
    over q with r = 0 ... m - 1 unrolled in its body, a constant each (`columns_loop`)."""
    b = e.b
    if m <= 1 or lo % m:
        counted_loop(b, const(lo), const(lo + length), [],
                     lambda i, carried: (step(i), [])[1], name=name)
        return
    if m < MIN_ROW:
        columns_loop(e, lo, length, m, step, name)
        return

    def row(q: ir.Value, carried: list) -> list:
        def inner(r: ir.Value, carried: list) -> list:
            qq = b.add(q, const(lo // m), flags=("nsw", "nuw")) if lo else q
            i = b.add(b.mul(qq, const(m), flags=("nsw", "nuw")), r, flags=("nsw", "nuw"))
            know(e, i, qq, m, r)
            step(i)
            forget(e, i)
            return []
        counted_loop(b, const(0), const(m), [], inner, name=name)
        return []
    counted_loop(b, const(0), const(length // m), [], row, name=name + "q")


def columns_loop(e, lo: int, length: int, m: int, step: Callable, name: str) -> None:
    """for i in [lo, lo + length) as q * m + r, r unrolled: a read through phases woven
    along this dimension ((..., n, m) -> (..., n * m)) picks its phase by the constant r
    and reads it at q, consecutive along the loop; varying r along the loop made each
    element select among the phases (gathers from every phase: a CNN's batch-norm
    gradient over a strided convolution's woven input gradient ran at ~15 GB/s). The
    loop's other accesses, at q * m + r, are LLVM's interleaved groups (wide loads and
    stores, shuffled)."""
    b = e.b

    def column(q: ir.Value, carried: list) -> list:
        qq = b.add(q, const(lo // m), flags=("nsw", "nuw")) if lo else q
        at = b.mul(qq, const(m), flags=("nsw", "nuw"))
        for r in range(m):
            i = b.add(at, const(r), flags=("nsw", "nuw")) if r else at
            know(e, i, qq, m, const(r))
            e.push_scope()
            step(i)
            e.pop_scope()
            forget(e, i)
        return []
    counted_loop(b, const(0), const(length // m), [], column, name=name + "c")


# ---- two inner dimensions as one loop -----------------------------------------------

# The widest last dimension whose loop joins the one before it (`joined_loop`): a row of
# 64 floats is four AVX-512 vectors, and a reduction's lanes are summed at each row's end
# (a batch norm's statistics over 32 x 32 planes took ~30 instructions a row of 32 for 8
# of work); wider rows pay that sum rarely enough.
MAX_JOINED_ROW = 64


def joins(rows: int, width: int) -> bool:
    """Whether a loop over (rows, width) runs as one loop of rows * width (`joined_loop`):
    two dimensions longer than 1, the last narrow, a power of two (its quotient and
    remainder a shift and a mask, folded away where only an address needs them)."""
    return rows > 1 and 1 < width <= MAX_JOINED_ROW and width & (width - 1) == 0


def joinable(instructions: list, members: list, shape: tuple) -> bool:
    """Whether a loop over `shape` runs its two inner dimensions as one (`joined_loop`):
    they `join`, and every member that moves indices reads its operand at those two
    indices as they are, or at neither (a broadcast of a channel's value). A pad, slice,
    concatenate or reverse there computes its own row index from q (a clamp or an
    offset): the address is then no longer consecutive in i, and the loads become
    gathers."""
    if len(shape) < 2 or not joins(shape[-2], shape[-1]):
        return False
    tail = tuple(shape[-2:])
    for pos in members:
        ins = instructions[pos]
        kind = PRIMITIVES[ins.op].kind
        if kind in (ELEMENTWISE, LEAF, REDUCTION) or tuple(ins.shape[-2:]) != tail:
            continue        # the same index, or none; a smaller shape is read through
                            # an index move of this shape, checked itself
        keeps = PRIMITIVES[ins.op].keeps_tail
        if kind != INDEXING or keeps is None or \
                not keeps(ins, instructions[ins.operands[0]].shape):
            return False
    return True


def joined_loop(e, rows: int, width: int, step: Callable, name: str) -> None:
    """for q in [0, rows): for r in [0, width): step(q, r), as one loop over
    i = q * width + r: a vectorized reduction carries its lanes across rows (one sum of
    lanes at the loop's end, not one a row), and an elementwise loop over narrow rows
    (8 floats: half an AVX-512 vector) runs whole vectors. `e.linear` reads (q, r) of a
    `width`-long dimension as i itself (`joined`), so that addresses stay consecutive in
    i for LLVM's vectorizer."""
    b = e.b
    shift = width.bit_length() - 1

    def inner(i: ir.Value, carried: list) -> list:
        q = b.lshr(i, const(shift))
        r = b.and_(i, const(width - 1))
        know(e, i, q, width, r)
        e.joined[(id(q), id(r))] = (i, width, q, r)    # keeps the ids valid
        step(q, r)
        del e.joined[(id(q), id(r))]
        forget(e, i)
        return []
    counted_loop(b, const(0), const(rows * width), [], inner, name=name)


def joined(e, q: ir.Value, r: ir.Value, width: int):
    """i where (q, r) is `joined_loop`'s split of i over rows of `width`, else None."""
    hit = e.joined.get((id(q), id(r)))
    return hit[0] if hit is not None and hit[1] == width and hit[2] is q and hit[3] is r \
        else None
