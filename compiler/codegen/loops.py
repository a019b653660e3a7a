"""A counted loop in LLVM IR, with values carried from one iteration to the next.

Both the elemental emitter (a reduction computed at one index) and the targets' loop
nests use it. The loop is top-tested; LLVM's loop rotation turns it into the form the
vectorizer wants.
"""
from __future__ import annotations

from typing import Callable, Sequence

import llvmlite.ir as ir

I64 = ir.IntType(64)


def counted_loop(b: ir.IRBuilder, start: ir.Value, end: ir.Value, carried: Sequence[ir.Value],
                 body: Callable[[ir.Value, list], list], name: str = "i") -> list:
    """for i in [start, end): carried = body(i, carried). Returns the carried values after
    the loop. `body` may add blocks; it must leave the builder where the iteration ends."""
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
    i.add_incoming(b.add(i, ir.Constant(I64, 1), flags=("nsw", "nuw")), latch)
    for p, v in zip(phis, new):
        p.add_incoming(v, latch)
    b.branch(header)
    b.position_at_end(done)
    return phis


def const(n: int) -> ir.Constant:
    return ir.Constant(I64, int(n))
