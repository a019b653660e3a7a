"""Dynamic-update-slices with run-time starts read plainly, block by block.

A slice written with a start (`qkv[..., i * C:(i + 1) * C]`) records a `dynamic_slice`
with a run-time start (ops/indexing.py), so its gradient is a `dynamic_update_slice` of
zeros at that start; the q, k and v gradients of attention are three of them, summed.
Element by element (index_rules.dynamic_update_slice) each one clamps its index into the
update, reads there and selects: the reads are gathers and the loop does not vectorize
(the GPT step's qkv bias gradient: ~0.85 ms for 1024 x 768 floats).

When every such update of a loop is a block that spans the loop's other dimensions whole
and is z long along the last one, with z dividing that dimension, the kernel tests at
entry whether each update's (clamped) start is a multiple of z. If so (the blocks of a
split), the last dimension runs as n / z blocks of z: in block p an update covers the
whole block or none of it (`inside`, one comparison per block), and its value at j is
read at j - p * z, in bounds either way, contiguous: plain loads and one select by a
loop-invariant condition, which vectorize. Otherwise the loop runs as before.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import llvmlite.ir as ir

from . import inner_rows
from .loops import const, counted_loop

MIN_BLOCK = 8       # shorter blocks: no vector to gain
MAX_UPDATES = 8     # more updates than this in one loop: one clamp-and-select each


def plan(instructions: list, members: list, shape: tuple) -> Optional[tuple]:
    """(z, positions of the updates) for a loop over `shape`, or None (see the module)."""
    if len(shape) < 2 or shape[-1] < 2 * MIN_BLOCK:
        return None
    n = shape[-1]
    by_size: dict = {}
    for pos in members:
        ins = instructions[pos]
        if ins.op != "dynamic_update_slice" or not ins.shape or ins.shape[-1] != n:
            continue
        ushape = instructions[ins.operands[1]].shape
        z = ushape[-1]
        if tuple(ushape[:-1]) == tuple(ins.shape[:-1]) and MIN_BLOCK <= z < n and n % z == 0:
            by_size.setdefault(z, []).append(pos)
    if not by_size:
        return None
    z, updates = max(by_size.items(), key=lambda kv: len(kv[1]))
    return (z, tuple(updates)) if len(updates) <= MAX_UPDATES else None


def _start(e, ins: Any, n: int, z: int) -> ir.Value:
    """The update's start along the last dimension, clamped as the op clamps it."""
    s = e.to_index(e.at(ins.operands[-1], []))
    return e.clamp_index(s, 0, n - z)


def aligned(e, instructions: list, z: int, updates: tuple) -> ir.Value:
    """i1: every update starts at a multiple of z (computed once, at the kernel's entry)."""
    b = e.b
    ok = ir.Constant(ir.IntType(1), 1)
    for pos in updates:
        ins = instructions[pos]
        s = _start(e, ins, ins.shape[-1], z)
        ok = b.and_(ok, b.icmp_unsigned("==", b.urem(s, const(z)), const(0)))
    return ok


def blocks_inner(e, instructions: list, z: int, updates: tuple, n: int, body: Callable,
                 m: int = 1) -> Callable:
    """The innermost level of a loop nest over a last dimension of n, as n / z blocks
    (each z / m rows of m: inner_rows.row_width): index -> None, for `cpu_kernels.nest`'s `inner`. Valid only
    where `aligned` holds."""
    def inner(index: list) -> None:
        b = e.b

        def block(p: ir.Value, carried: list) -> list:
            base = b.mul(p, const(z), flags=("nsw", "nuw"))
            inside = {}
            for pos in updates:
                ins = instructions[pos]
                inside[id(ins)] = b.icmp_unsigned("==", _start(e, ins, n, z), base)

            def row(q: ir.Value, carried: list) -> list:
                def step(r: ir.Value, carried: list) -> list:
                    rel = b.add(b.mul(q, const(m), flags=("nsw", "nuw")), r,
                                flags=("nsw", "nuw")) if m > 1 else r
                    j = b.add(base, rel, flags=("nsw", "nuw"))
                    e.blocks[id(j)] = (rel, inside)
                    if m > 1:
                        inner_rows.know(e, rel, q, m, r)
                    e.push_scope()
                    body(index + [j])
                    e.pop_scope()
                    del e.blocks[id(j)]
                    inner_rows.forget(e, rel)
                    return []
                counted_loop(b, const(0), const(m if m > 1 else z), [], step,
                             name=f"d{len(index)}")
                return []
            if m > 1:
                counted_loop(b, const(0), const(z // m), [], row, name=f"q{len(index)}")
            else:
                row(None, [])
            return []
        counted_loop(b, const(0), const(n // z), [], block, name=f"b{len(index)}")
    return inner
