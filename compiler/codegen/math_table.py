"""Per-target math: how each transcendental or rounding function becomes code.

The elemental emitter asks the target's table (`table.emit(e, name, args, dtype)`); a
target overrides only what it lowers differently. The CPU uses LLVM intrinsics where the
x86/AArch64 back ends lower them, libm calls for the rest, and a few small compositions.
An op a target cannot lower raises ValueError naming it, in Python, before LLVM sees it
(the NVPTX back end aborts the process on an intrinsic it cannot lower).
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from ..hlo import dtypes as D
from . import poly_math
from .llvm_types import F32


def _suffix(ty: ir.Type) -> str:
    return "f32" if ty == F32 else "f64"


class MathTable:
    """Base table: compositions every target shares; subclasses fill `intrinsics`/`calls`."""

    target = "generic"
    intrinsics: dict = {}       # op name -> LLVM intrinsic prefix ("llvm.exp")
    calls: dict = {}            # op name -> C function name (float variant gets an "f")
    float32_code: dict = {}     # op name -> inline code for float32 (poly_math)

    def emit(self, e, name: str, args: list, dtype: D.DType) -> ir.Value:
        fast = self.float32_code.get(name)
        if fast is not None and args and args[0].type == F32:
            return fast(self, e, *args)
        composite = COMPOSITES.get(name)
        if composite is not None and name not in self.intrinsics and name not in self.calls:
            return composite(self, e, args, dtype)
        if name in self.intrinsics:
            return self.intrinsic(e, self.intrinsics[name], args)
        if name in self.calls:
            return self.libcall(e, self.calls[name], args)
        raise ValueError(f"{name}: no {self.target} lowering for {dtype.name}; "
                         f"this target lowers {', '.join(sorted(self.supported()))}")

    def supported(self) -> set:
        return set(self.intrinsics) | set(self.calls) | set(COMPOSITES)

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


# ---- compositions from other math: the same on every target -------------------------

def _rsqrt(table: MathTable, e, args: list, dtype: D.DType) -> ir.Value:
    (x,) = args
    return e.b.fdiv(ir.Constant(x.type, 1.0), table.emit(e, "sqrt", [x], dtype))


def _logistic(table: MathTable, e, args: list, dtype: D.DType) -> ir.Value:
    # 1 / (1 + exp(-x)): exp overflows to inf for very negative x, giving exactly 0
    (x,) = args
    one = ir.Constant(x.type, 1.0)
    ex = table.emit(e, "exponential", [e.b.fneg(x)], dtype)
    return e.b.fdiv(one, e.b.fadd(one, ex))


def _is_finite(table: MathTable, e, args: list, dtype: D.DType) -> ir.Value:
    (x,) = args
    ax = table.intrinsic(e, "llvm.fabs", [x])
    return e.b.fcmp_ordered("<", ax, ir.Constant(x.type, float("inf")))


COMPOSITES: dict[str, Callable] = {
    "rsqrt": _rsqrt,
    "logistic": _logistic,
    "is_finite": _is_finite,
}


def _hypot_f32(table: MathTable, e, x: ir.Value, y: ir.Value) -> ir.Value:
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
    # vectorizable; libm would be one call per element
    float32_code = {**poly_math.FLOAT32, "hypot": _hypot_f32}
    intrinsics = {
        "exponential": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt",
        "sine": "llvm.sin", "cosine": "llvm.cos", "floor": "llvm.floor", "ceil": "llvm.ceil",
        "round_nearest_even": "llvm.roundeven", "truncate": "llvm.trunc", "power": "llvm.pow",
    }
    calls = {
        "exponential_minus_one": "expm1", "log_plus_one": "log1p", "tanh": "tanh",
        "tan": "tan", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
        "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "erf": "erf",
        "atan2": "atan2", "hypot": "hypot",      # float64: libm's, as NumPy's
    }


CPU_MATH = CPUMath()
