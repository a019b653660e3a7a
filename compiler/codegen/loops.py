"""A counted loop in LLVM IR, with values carried from one iteration to the next.

Both the elemental emitter (a reduction computed at one index) and the targets' loop
nests use it. The loop is top-tested; LLVM's loop rotation turns it into the form the
vectorizer wants.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import llvmlite.ir as ir

I64 = ir.IntType(64)
I32 = ir.IntType(32)

# A loop that carries values (a reduction) is bound by the latency of its combining op
# (a float add: 3-4 cycles) when it has one accumulator; asking the vectorizer for this
# many interleaved copies gives it independent vector accumulators instead. The pass
# builder leaves interleaving off elsewhere (see llvm_target.optimize). Eight measured no
# faster on a 2-core AMD EPYC (full and row sums from L2-resident to DRAM-sized, softmax,
# layer norm) and doubles the loop's code; a DRAM-bound sum is at the memory's speed with
# four (the same time as a hand-written AVX2 loop on one thread and on two).
REDUCTION_INTERLEAVE = 4


class _LoopID(ir.values.MDValue):
    """A loop's `!llvm.loop` node: its first operand is itself, as LLVM requires.
    Compared by identity (its operands refer back to it)."""

    def __init__(self, module: ir.Module, options: list) -> None:
        super().__init__(module, [], name=str(len(module.metadata)))
        self.operands = (self,) + tuple(options)

    __hash__ = object.__hash__

    def __eq__(self, other: object) -> bool:
        return self is other

    def __ne__(self, other: object) -> bool:
        return self is not other


def _interleave_hint(module: ir.Module, count: int) -> ir.values.MDValue:
    option = module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"),
                                  ir.Constant(I32, count)])
    return _LoopID(module, [option])


def no_vectorize(fn: ir.Function) -> None:
    """Mark every loop of `fn` (its back edges: branches to an earlier `.head` block) as
    not to be vectorized, replacing any interleave hint."""
    order = {id(block): k for k, block in enumerate(fn.blocks)}
    off = None
    for block in fn.blocks:
        term = block.terminator
        if not isinstance(term, ir.Branch) or isinstance(term, ir.ConditionalBranch):
            continue
        target = term.operands[0]
        if target.name.endswith(".head") and order[id(target)] < order[id(block)]:
            if off is None:
                off = fn.module.add_metadata([
                    ir.MetaDataString(fn.module, "llvm.loop.vectorize.enable"),
                    ir.Constant(ir.IntType(1), 0)])
            term.set_metadata("llvm.loop", _LoopID(fn.module, [off]))


def counted_loop(b: ir.IRBuilder, start: ir.Value, end: ir.Value, carried: Sequence[ir.Value],
                 body: Callable[[ir.Value, list], list], name: str = "i",
                 step: Optional[ir.Value] = None, interleave: bool = True) -> list:
    """for (i = start; i < end; i += step) carried = body(i, carried); step defaults to 1.
    Returns the carried values after the loop. `body` may add blocks; it must leave the
    builder where the iteration ends. `interleave` asks LLVM for independent accumulators
    when values are carried (a CPU vectorizer hint; GPU loops turn it off)."""
    fn = b.function
    pre = b.block
    header = fn.append_basic_block(name + ".head")
    loop = fn.append_basic_block(name + ".body")
    done = fn.append_basic_block(name + ".end")
    b.branch(header)
    b.position_at_end(header)
    i = b.phi(I64, name=name)
    i.add_incoming(start, pre)
    phis = []
    for v in carried:
        p = b.phi(v.type)
        p.add_incoming(v, pre)
        phis.append(p)
    b.cbranch(b.icmp_signed("<", i, end), loop, done)
    b.position_at_end(loop)
    new = body(i, list(phis))
    latch = b.block
    if step is None:
        nxt = b.add(i, ir.Constant(I64, 1), flags=("nsw", "nuw"))
    else:
        nxt = b.add(i, step, flags=("nsw",))
    i.add_incoming(nxt, latch)
    for p, v in zip(phis, new):
        p.add_incoming(v, latch)
    back = b.branch(header)
    if interleave and phis and REDUCTION_INTERLEAVE > 1:
        back.set_metadata("llvm.loop", _interleave_hint(fn.module, REDUCTION_INTERLEAVE))
    b.position_at_end(done)
    return phis


def const(n: int) -> ir.Constant:
    return ir.Constant(I64, int(n))
