"""Per-target math: how each transcendental or rounding function becomes code.

The elemental emitter asks the target's table (`table.emit(e, name, args, dtype)`), which
does what the op's stanza says for that target (`Primitive.math_code`); a target overrides
only what it lowers differently. The CPU uses LLVM intrinsics where the x86/AArch64 back
ends lower them, libm calls for the rest, a few small compositions (below) and inline
float32 code (poly_math.py).
An op a target cannot lower raises ValueError naming it, in Python, before LLVM sees it
(the NVPTX back end aborts the process on an intrinsic it cannot lower).
"""
from __future__ import annotations

from typing import Optional

import llvmlite.ir as ir

from ..hlo import dtypes as D
from ..primitive import PRIMITIVES, MathCode
from .llvm_types import F32


def _suffix(ty: ir.Type) -> str:
    return "f32" if ty == F32 else "f64"


class MathTable:
    """A target's math: what each math op's stanza says for it (`Primitive.math_code`, the
    entry named `field`), with the intrinsic and library-call forms every LLVM target
    shares. A subclass names its field and overrides what it lowers differently."""

    target = "generic"
    field = None                # the MathCode entry this target reads ("cpu", "cuda")
    float32_field = None        # the entry of inline float32 code, preferred where given

    def entry(self, name: str, field: str = "") -> Optional[str]:
        """The stanza's entry for this target (or its `field`), or None."""
        prim = PRIMITIVES.get(name)
        code = prim.math_code if prim is not None else None
        field = field or self.field
        return getattr(code, field) if code is not None and field else None

    def emit(self, e, name: str, args: list, dtype: D.DType) -> ir.Value:
        fast = self.entry(name, self.float32_field) if self.float32_field else None
        if fast is not None and args and args[0].type == F32:
            return MathCode.code(fast)(self, e, *args)
        found = self.entry(name)
        if found is None:
            raise ValueError(f"{name}: no {self.target} lowering for {dtype.name}; "
                             f"this target lowers {', '.join(sorted(self.supported()))}")
        kind = MathCode.kind(found)
        if kind == "code":
            return MathCode.code(found)(self, e, args, dtype)
        if kind == "intrinsic":
            return self.intrinsic(e, found, args)
        return self.libcall(e, found, args)

    def lowers(self, name: str) -> bool:
        return self.entry(name) is not None

    def supported(self) -> set:
        return {n for n in PRIMITIVES if self.entry(n) is not None}

    def intrinsic(self, e, prefix: str, args: list) -> ir.Value:
        ty = args[0].type
        fn = e.llmod.declare_intrinsic(f"{prefix}.{_suffix(ty)}", (),
                                       ir.FunctionType(ty, [a.type for a in args]))
        return e.b.call(fn, args)

    def libcall(self, e, cname: str, args: list) -> ir.Value:
        ty = args[0].type
        name = cname + ("f" if ty == F32 else "")
        fn = e.llmod.globals.get(name)
        if fn is None:
            fn = ir.Function(e.llmod, ir.FunctionType(ty, [a.type for a in args]), name)
            fn.attributes.add("nounwind")
        return e.b.call(fn, args)


# ---- compositions from other math, which stanzas name ---------------------------------

def rsqrt(table: MathTable, e, args: list, dtype: D.DType) -> ir.Value:
    (x,) = args
    return e.b.fdiv(ir.Constant(x.type, 1.0), table.emit(e, "sqrt", [x], dtype))


def logistic(table: MathTable, e, args: list, dtype: D.DType) -> ir.Value:
    # 1 / (1 + exp(-x)): exp overflows to inf for very negative x, giving exactly 0
    (x,) = args
    one = ir.Constant(x.type, 1.0)
    ex = table.emit(e, "exponential", [e.b.fneg(x)], dtype)
    return e.b.fdiv(one, e.b.fadd(one, ex))


def is_finite(table: MathTable, e, args: list, dtype: D.DType) -> ir.Value:
    (x,) = args
    ax = table.intrinsic(e, "llvm.fabs", [x])
    return e.b.fcmp_ordered("<", ax, ir.Constant(x.type, float("inf")))


def hypot_f32(table: MathTable, e, x: ir.Value, y: ir.Value) -> ir.Value:
    """sqrt(x^2 + y^2) in double, rounded once: glibc's hypotf, so NumPy's float32 hypot
    bit for bit (a double holds the squares of every float exactly enough, and never
    overflows), and vectorizable; +inf where either is infinite, a NaN beside it too."""
    b, f64 = e.b, ir.DoubleType()
    wx, wy = b.fpext(x, f64), b.fpext(y, f64)
    s = b.fadd(b.fmul(wx, wx), b.fmul(wy, wy))
    h = b.fptrunc(table.intrinsic(e, "llvm.sqrt", [s]), x.type)
    inf = ir.Constant(x.type, float("inf"))
    either_inf = b.or_(b.fcmp_ordered("==", table.intrinsic(e, "llvm.fabs", [x]), inf),
                       b.fcmp_ordered("==", table.intrinsic(e, "llvm.fabs", [y]), inf))
    return b.select(either_inf, inf, h)


class CPUMath(MathTable):
    target = "cpu"
    field = "cpu"
    float32_field = "cpu_float32"     # vectorizable; libm would be one call per element


CPU_MATH = CPUMath()
