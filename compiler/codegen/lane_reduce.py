"""A full reduction's loop with independent accumulators ("lanes"), for kernels whose loops
LLVM does not vectorize.

A kernel below llvm_target.VECTORIZE_ELEMENTS is optimized without the loop vectorizer
(it is half of -O2's compile time). Its reduction then carries one accumulator, one
dependent add per element: a 4,096-float sum is bound by the add's latency (~4.5 us).
Emitting the innermost loop `lanes` elements at a time into `lanes` accumulators, merged
once at the end, breaks that chain; the lanes' consecutive loads and adds are what the
SLP vectorizer (still on at that tier) packs into vector registers. The order of a float
sum changes as the vectorized tier's does (reassociation is allowed for reductions).

Lanes are a vector register's worth of the accumulator's type (at most 16), for the float
and integer kinds over cheap element code (see MAX_BODY); complex and bool reductions, and
costly element code, keep one accumulator.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..primitive import INDEXING, LEAF, PRIMITIVES
from . import llvm_target
from .llvm_types import Value
from .loops import const, counted_loop
from .register_reduce import Accumulator, unflatten

# vector registers' worth of lanes: two took ~0.25 us less on 4,096 floats (two adds in
# flight) but +15 ms to compile (twice the element code for the SLP vectorizer)
VECTORS = 1
MAX_LANES = 16

# The element code the lanes copy: ops of one or a few instructions (their stanzas say
# `cheap`), at most MAX_BODY of them besides index moves. A body with a transcendental
# function or an index computation is bound by its own work rather than by the add's
# latency, and copying it costs compile time (a sum of tanh(exp(x)) took 3x longer to
# compile with lanes).
MAX_BODY = 16


def cheap_body(instructions: list, members: set, srcs: list) -> bool:
    """Whether the values reduced (`srcs`, computed from the kernel's `members`) are cheap
    element code (see MAX_BODY)."""
    seen, todo, count = set(), list(srcs), 0
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        prim = PRIMITIVES[instructions[p].op]
        if p not in members or prim.kind == LEAF:
            continue                  # read from memory, or a leaf
        if not prim.cheap:
            return False
        count += prim.kind != INDEXING
        todo.extend(instructions[p].operands)
    return count <= MAX_BODY


def lanes_for(accs: list) -> int:
    """Accumulators a reduction of these accumulator dtypes gets (1: the plain loop)."""
    if not accs or any(a.kind not in ("float", "int", "uint") for a in accs):
        return 1
    width = 64 if llvm_target.has_feature("avx512f") else \
        32 if llvm_target.has_feature("avx") else 16
    return max(2, min(MAX_LANES, VECTORS * width // max(a.itemsize for a in accs)))


def accumulate_lanes(e, srcs: list, kinds: list, inits: list, shape: tuple, outer: int,
                     start: ir.Value, end: ir.Value, lanes: int, visit=None) -> list:
    """Combine every element of `shape` (dimension `outer` in [start, end), the others
    whole) into one value per source, `lanes` accumulators along the innermost one;
    `visit(index)`, if given, runs at each element first, in its scope (side outputs
    stored from the same element code)."""
    accs = [Accumulator(kind, v.dtype) for kind, v in zip(kinds, inits)]
    one = [v for a in accs for v in a.inits(e)]
    last = len(shape) - 1

    def element(index: list, carried: list) -> list:
        e.push_scope()
        if visit is not None:
            visit(index)
        out = []
        for src, acc, c in zip(srcs, accs, unflatten(accs, carried)):
            v = e.at(src, index)
            out.extend(acc.step(e, c, Value(v.ir, acc.dtype)))
        e.pop_scope()
        return out

    def level(d: int, index: list, carried: list) -> list:
        lo, hi = (start, end) if d == outer else (const(0), const(shape[d]))
        if d == last:
            return _lanes_loop(e, lo, hi, carried, len(one), lanes,
                               lambda i, cs: element(index + [i], cs))

        def step(i: ir.Value, cs: list) -> list:
            e.push_scope()
            out = level(d + 1, index + [i], cs)
            e.pop_scope()
            return out
        return counted_loop(e.b, lo, hi, carried, step, name=f"l{d}", interleave=False)

    per_lane = _lanes_of(level(0, [], [v for v in one for _ in range(lanes)]), lanes)
    total = per_lane[0]
    for lane in per_lane[1:]:       # a chain the SLP vectorizer takes for a vector reduction
        total = _merge(e, accs, total, lane)
    return [acc.result(e, c) for acc, c in zip(accs, unflatten(accs, total))]


def _lanes_loop(e, lo: ir.Value, hi: ir.Value, carried: list, width: int, lanes: int,
                element) -> list:
    """[lo, hi) `lanes` elements an iteration (element lo + k into lane k), then the
    rest into lane 0. `carried`: each of the `width` registers of an element, every
    lane's (the lanes of one register side by side, as the SLP vectorizer packs them)."""
    b = e.b
    count = b.select(b.icmp_signed("<", lo, hi), b.sub(hi, lo), const(0))
    main_end = b.add(lo, b.sub(count, b.urem(count, const(lanes))))

    def block(i: ir.Value, cs: list) -> list:
        return _joined([element(b.add(i, const(k), flags=("nsw", "nuw")) if k else i, lane)
                        for k, lane in enumerate(_lanes_of(cs, lanes))])

    per_lane = _lanes_of(counted_loop(b, lo, main_end, carried, block, name="lanes",
                                      step=const(lanes), interleave=False), lanes)
    per_lane[0] = counted_loop(b, main_end, hi, per_lane[0], element, name="rest",
                               interleave=False)
    return _joined(per_lane)


def _lanes_of(values: list, lanes: int) -> list:
    """Each lane's registers from the carried values (register-major)."""
    return [list(values[k::lanes]) for k in range(lanes)]


def _joined(per_lane: list) -> list:
    """The carried values (register-major) from each lane's registers."""
    return [v for regs in zip(*per_lane) for v in regs]


def _merge(e, accs: list, a: list, b: list) -> list:
    out = []
    for acc, ca, cb in zip(accs, unflatten(accs, a), unflatten(accs, b)):
        out.extend(acc.merge(e, ca, cb))
    return out
