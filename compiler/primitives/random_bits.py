"""threefry2x32: the counter-based generator as one elementwise primitive.

`threefry2x32(k0, k1, x0, x1), word=w` is word w (0 or 1) of Threefry-2x32 with 20 rounds
(Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) of the counter
pair (x0, x1) under the key (k0, k1), all uint32 of one shape. It is a pure function of
its operands at each index, so it fuses into whatever consumes it like any elementwise
op, and the traced program shows one line per call instead of ~200 integer ops. The two
words of one pair are two nodes with the same operands: in one kernel LLVM computes the
rounds once for both (its value numbering finds them equal). It is `costly` (about 100
integer ops an element): fusion computes it once, not in each of several consumers.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..transforms import batching as B
from ..hlo import dtypes as D
from ..primitive import ELEMENTWISE, NOT_DIFFERENTIABLE, fail, primitive

ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)
KEY_PARITY = 0x1BD11BDA
ROUNDS = 20


def _infer(operands, word):
    if word not in (0, 1):
        fail("threefry2x32", operands, f"word must be 0 or 1, got {word!r}")
    if any(o.dtype is not D.uint32 for o in operands):
        fail("threefry2x32", operands, "key words and counters must be uint32", TypeError)
    if len({o.shape for o in operands}) != 1:
        fail("threefry2x32", operands, "key words and counters must have one shape")
    return operands[0].shape, D.uint32


_infer.dtypes = (D.uint32,)


def rounds(add, xor, rotl, k0, k1, x0, x1, parity):
    """Threefry-2x32-20 written once over any arithmetic: NumPy arrays or LLVM values.
    `rotl(x, r)` rotates left by r; `parity` is KEY_PARITY in that arithmetic; returns the
    two words."""
    schedule = (k0, k1, xor(xor(k0, k1), parity))
    x0, x1 = add(x0, k0), add(x1, k1)
    for i in range(ROUNDS):
        x0 = add(x0, x1)
        x1 = xor(rotl(x1, ROTATIONS[i % 8]), x0)
        if i % 4 == 3:
            s = (i + 1) // 4
            x0 = add(x0, schedule[s % 3])
            x1 = add(add(x1, schedule[(s + 1) % 3]), s)
    return x0, x1


def _reference(k0, k1, x0, x1, word):
    u32 = np.uint32

    def add(a, b):
        return (np.asarray(a, u32) + np.asarray(b, u32)).astype(u32)

    def rotl(x, r):
        return ((x << u32(r)) | (x >> u32(32 - r))).astype(u32)
    out = rounds(add, np.bitwise_xor, rotl, *(np.asarray(v, u32) for v in (k0, k1, x0, x1)),
                 u32(KEY_PARITY))
    return np.asarray(out[word], u32)


def _emit(e, k0, k1, x0, x1, word):
    key = ("threefry2x32",) + tuple(id(v.ir) for v in (k0, k1, x0, x1))
    pair = e.reused(key)
    if pair is None:
        pair = _rounds_ir(e.b, k0.ir, k1.ir, x0.ir, x1.ir)
        e.keep(key, pair, (k0, k1, x0, x1))
    return type(x0)(pair[word], D.uint32)


def _rounds_ir(b, k0, k1, x0, x1):
    i32 = ir.IntType(32)

    def word_of(v):
        return ir.Constant(i32, v) if isinstance(v, int) else v

    def add(a, c):
        return b.add(word_of(a), word_of(c))

    def rotl(x, r):
        return b.or_(b.shl(x, ir.Constant(i32, r)), b.lshr(x, ir.Constant(i32, 32 - r)))
    return rounds(add, lambda a, c: b.xor(word_of(a), word_of(c)), rotl, k0, k1, x0, x1,
                  KEY_PARITY)


threefry2x32 = primitive(
    "threefry2x32", ELEMENTWISE, _infer, _reference, attrs=("word",), emit=_emit,
    costly=True, vjp=NOT_DIFFERENTIABLE, batch=B.elementwise, arity=4,
    doc="Word `word` (0 or 1) of Threefry-2x32-20 of the counters (x0, x1) under the key "
        "(k0, k1); uint32 operands of one shape.")
