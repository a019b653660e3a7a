"""`x + y -> concatenate(...)` when x and y are zero outside disjoint runs of one dimension.

The gradient of a value sliced into parts along a dimension (`q, k, v = qkv.split(C,
-1)`) is the sum of each part's gradient placed among zeros: a `pad` with zeros per part
(or a `dynamic_update_slice` into zeros at constant starts), summed. Element by element
each placement clamps, reads and selects, and the sum pays for all of them at every
element; the same value is the parts side by side, a `concatenate`, which the CPU loops
read plainly, one loop per part (index_rules.concatenate_pieces).

A value is a *placement* along dimension d when it is zero outside runs [lo, hi) of d
where it is one operand's value (which spans every other dimension whole):
- `pad(x, 0)` with edge padding (no interior, none negative) on d alone: x at [lo, n - hi);
- `dynamic_update_slice(0, u, constant starts)` with u whole on every dimension but d: u
  at the clamped start;
- `concatenate` along d: each operand at its offset, its zero operands left out.

`placement + placement` along the same d, whose runs do not overlap, is the concatenate of
the runs in order with zeros between them (a single run over all of d is its operand).
Each element is then the one value that is not a zero there: x + 0 is x, as the rule
`x + 0 -> x` counts it (a -0.0 stays -0.0 where the sum would give +0.0).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..hlo.module import Instruction
from .rewrite import Builder, splat


def _zero(b: Builder, pos: int) -> bool:
    v = splat(b, pos)
    return v is not None and bool(v == 0)


def _constant(b: Builder, pos: int) -> Optional[int]:
    v = splat(b, pos)
    return None if v is None else int(v)


def _pad(b: Builder, ins: Instruction) -> Optional[tuple]:
    x, value = ins.operands
    a = ins.attrs
    if not _zero(b, value) or any(a["interior_padding"]):
        return None
    low, high = a["edge_padding_low"], a["edge_padding_high"]
    dims = [d for d in range(len(ins.shape)) if low[d] or high[d]]
    if len(dims) != 1 or low[dims[0]] < 0 or high[dims[0]] < 0:
        return None
    d = dims[0]
    return d, [(low[d], ins.shape[d] - high[d], x)]


def _update(b: Builder, ins: Instruction) -> Optional[tuple]:
    x, u = ins.operands[:2]
    ushape = b[u].shape
    dims = [d for d, (n, z) in enumerate(zip(ins.shape, ushape)) if n != z]
    if len(dims) != 1 or not _zero(b, x):
        return None
    d = dims[0]
    start = _constant(b, ins.operands[2 + d])
    if start is None:
        return None
    n, z = ins.shape[d], ushape[d]
    lo = min(max(start, 0), n - z)
    return d, [(lo, lo + z, u)]


def _concatenate(b: Builder, ins: Instruction) -> Optional[tuple]:
    d = ins.attrs["dimension"]
    runs, lo = [], 0
    for o in ins.operands:
        hi = lo + b[o].shape[d]
        if hi > lo and not _zero(b, o):
            runs.append((lo, hi, o))
        lo = hi
    return d, runs


def placement(b: Builder, pos: int) -> Optional[tuple]:
    """(d, [(lo, hi, operand)]) if `pos` is a placement (see the module), else None."""
    ins = b[pos]
    if not ins.shape:
        return None
    if ins.op == "pad":
        return _pad(b, ins)
    if ins.op == "dynamic_update_slice":
        return _update(b, ins)
    if ins.op == "concatenate":
        return _concatenate(b, ins)
    return None


def disjoint_sum(b: Builder, ins: Instruction) -> Optional[int]:
    """`placement + placement -> concatenate` (see the module), or None."""
    x, y = ins.operands
    px = placement(b, x)
    py = placement(b, y) if px is not None else None
    if py is None or px[0] != py[0]:
        return None
    d = px[0]
    runs = sorted(px[1] + py[1])
    if any(r[1] > s[0] for r, s in zip(runs, runs[1:])):
        return None                                     # overlapping: a real sum
    n = ins.shape[d]
    if len(runs) == 1 and runs[0][:2] == (0, n):
        return runs[0][2]
    pieces, at = [], 0
    for lo, hi, o in runs + [(n, n, None)]:
        if lo > at:
            pieces.append(_zeros(b, ins, d, lo - at))
        if o is not None:
            pieces.append(o)
        at = hi
    return b.emit("concatenate", tuple(pieces), ins.shape, ins.dtype, {"dimension": d})


def _zeros(b: Builder, ins: Instruction, d: int, length: int) -> int:
    shape = ins.shape[:d] + (length,) + ins.shape[d + 1:]
    zero = b.constant(np.zeros((), ins.dtype.np), ins.dtype)
    return b.emit("broadcast_in_dim", (zero,), shape, ins.dtype,
                  {"shape": shape, "broadcast_dimensions": ()})
