"""A reduction's running value carried in registers through a CPU loop.

Most reductions carry one value and combine with the emitter's `combine`. A float max or
min carries two: the extremum of the values seen, computed with `llvm.maxnum`/`minnum`
under `nnan nsz` (one `vmaxps` a vector on x86), and a flag set once any value was NaN;
the result is NaN if the flag is set. `combine`'s `llvm.maximum` (NaN-propagating in
every step) costs five instructions a vector on AVX2 and bounds a row max by its
latency. Both forms are recognized reductions for LLVM's loop vectorizer.

Between +0.0 and -0.0 either may win, as in NumPy, whose reductions give the later one.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..hlo import dtypes as D
from .llvm_types import Value

_FAST = ("nnan", "nsz")     # the NaN flag covers what nnan leaves undefined


class Accumulator:
    """One reduction's carried registers: `width` LLVM values."""

    def __init__(self, kind: str, dtype: D.DType) -> None:
        self.kind = kind
        self.dtype = dtype
        self.split = kind in ("max", "min") and dtype.is_float and not dtype.is_complex
        self.width = 2 if self.split else 1

    def inits(self, e) -> list:
        first = e.identity(self.kind, self.dtype).ir
        return [first, ir.Constant(_flag_type(first.type), 0)] if self.split else [first]

    def step(self, e, carried: list, v: Value) -> list:
        if v.ir.type != carried[0].type and self.dtype is D.float64:
            v = Value(e.b.fpext(v.ir, carried[0].type), self.dtype)   # a float32 sum, wide
        if not self.split:
            return [e.combine(self.kind, Value(carried[0], self.dtype), v).ir]
        b = e.b
        ty = carried[0].type
        name = ("llvm.maxnum" if self.kind == "max" else "llvm.minnum") + \
            (".f32" if ty == ir.FloatType() else ".f64")
        fn = e.llmod.declare_intrinsic(name, (), ir.FunctionType(ty, [ty, ty]))
        best = b.call(fn, [carried[0], v.ir], fastmath=_FAST)
        # the flag ORs the bits of the NaNs seen (a NaN is never all zero bits): as wide
        # as the value, so that the vector compare's mask is used as it is (a flag of
        # fewer bits is packed lane by lane)
        ity = carried[1].type
        mask = b.sext(b.fcmp_unordered("uno", v.ir, v.ir), ity)
        return [best, b.or_(carried[1], b.and_(b.bitcast(v.ir, ity), mask))]

    def merge(self, e, a: list, b: list) -> list:
        """Two accumulators' registers combined into one's (several accumulators of one
        reduction, merged at its end)."""
        if not self.split:
            return [e.combine(self.kind, Value(a[0], self.dtype), Value(b[0], self.dtype)).ir]
        ty = a[0].type
        name = ("llvm.maxnum" if self.kind == "max" else "llvm.minnum") + \
            (".f32" if ty == ir.FloatType() else ".f64")
        fn = e.llmod.declare_intrinsic(name, (), ir.FunctionType(ty, [ty, ty]))
        # an extremum poisoned by a NaN is covered by its flag, ORed in
        return [e.b.call(fn, [a[0], b[0]], fastmath=_FAST), e.b.or_(a[1], b[1])]

    def result(self, e, carried: list) -> Value:
        if not self.split:
            return Value(carried[0], self.dtype)
        nan = ir.Constant(carried[0].type, float("nan"))
        flag = e.b.icmp_unsigned("!=", carried[1], ir.Constant(carried[1].type, 0))
        return Value(e.b.select(flag, nan, carried[0]), self.dtype)


def _flag_type(ty: ir.Type) -> ir.Type:
    return ir.IntType(64 if ty == ir.DoubleType() else 32)


def flat_inits(e, accs: list) -> list:
    return [v for a in accs for v in a.inits(e)]


def unflatten(accs: list, carried: list) -> list:
    """The carried values, one list per accumulator."""
    out, k = [], 0
    for a in accs:
        out.append(list(carried[k:k + a.width]))
        k += a.width
    return out
