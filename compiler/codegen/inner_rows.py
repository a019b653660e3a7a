"""An innermost loop run as rows of m, where the kernel reads through a reshape that
splits the loop's dimension into (..., m).

A head merge (B, H, T, D) -> transpose -> reshape (B, T, H * D) read by a loop over
H * D computes each element's head and offset by dividing the index by D: LLVM cannot
see that consecutive indices read consecutive elements, and loads them one by one
(gathers). Run as H rows of D, the index is q * D + r with r the innermost loop's
variable; the emitter is told so (`know`), and the reshape reads (q, r) without dividing
(index_rules.same_element), contiguous in r: vector loads.
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from ..primitive import PRIMITIVES
from .loops import const, counted_loop

MIN_ROW = 8         # narrower rows: no vector to gain


def row_width(instructions: list, members: list, length: int) -> int:
    """m: a loop over `length` elements runs as rows of m when a reshape among `members`
    makes a dimension `length` long of one whose last dimension is m (m < length,
    dividing it; the widest such m). 1: none."""
    best = 1
    for pos in members:
        ins = instructions[pos]
        if not PRIMITIVES[ins.op].linear or not ins.shape or ins.shape[-1] != length:
            continue
        src = instructions[ins.operands[0]].shape
        m = src[-1] if src else 1
        if MIN_ROW <= m < length and length % m == 0:
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
    divides lo), i known to the emitter as q * m + r."""
    b = e.b
    if m <= 1 or lo % m:
        counted_loop(b, const(lo), const(lo + length), [],
                     lambda i, carried: (step(i), [])[1], name=name)
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
