"""float32 exp, tanh, logistic and erf as straight-line polynomial code: no calls, so loops vectorize.

LLVM lowers `llvm.exp` on x86 to one libm call per element (a vector of 16 becomes 16
calls); these versions are plain arithmetic and selects that the loop vectorizer widens.
Accuracy: a few ulp over the whole float32 range (Cephes-style minimax polynomials after
range reduction), checked against NumPy by the codegen tests. A target may use them from
its math table (`CPUMath` does for float32).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .llvm_target import has_feature
from .llvm_types import F32, I32

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)
# multiply-adds may fuse (FMA): a third less work for exp, and no less accurate
_FMA = ("contract",)
_EXP_MAX = 88.72283935546875     # above: +inf
_EXP_MIN = -103.972084045410     # below: 0 (past the smallest subnormal)


def _c(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def _horner(b: ir.IRBuilder, x: ir.Value, coeffs: tuple) -> ir.Value:
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=_FMA), _c(c), flags=_FMA)
    return acc


def _pow2(b: ir.IRBuilder, n: ir.Value) -> ir.Value:
    """2**n as a float for integer n in [-126, 127]."""
    biased = b.add(n, ir.Constant(I32, 127))
    return b.bitcast(b.shl(biased, ir.Constant(I32, 23)), F32)


def _scale(e, p: ir.Value, n: ir.Value) -> ir.Value:
    """p * 2**n for n in [-150, 128], exact down to the subnormals."""
    b = e.b
    if has_feature("avx512f"):
        # llvm.ldexp becomes one vscalefps (a single rounding, subnormals included)
        fnty = ir.FunctionType(F32, [F32, I32])
        fn = e.llmod.globals.get(_LDEXP) or ir.Function(e.llmod, fnty, _LDEXP)
        return b.call(fn, [p, n])
    # elsewhere ldexp is a libm call per element: scale in two halves instead, so that
    # 2**half stays a normal float
    half = b.ashr(n, ir.Constant(I32, 1))
    return b.fmul(b.fmul(p, _pow2(b, half)), _pow2(b, b.sub(n, half)))


_LDEXP = "llvm.ldexp.f32.i32"


def exp_f32(table, e, x: ir.Value) -> ir.Value:
    b = e.b
    clamped = e.math_table.intrinsic(e, "llvm.minnum", [x, _c(_EXP_MAX)])
    clamped = e.math_table.intrinsic(e, "llvm.maxnum", [clamped, _c(_EXP_MIN)])
    n = e.math_table.intrinsic(e, "llvm.roundeven", [b.fmul(clamped, _c(_LOG2E))])
    r = b.fsub(b.fsub(clamped, b.fmul(n, _c(_LN2_HI), flags=_FMA), flags=_FMA),
               b.fmul(n, _c(_LN2_LO), flags=_FMA), flags=_FMA)
    p = b.fadd(b.fadd(b.fmul(b.fmul(_horner(b, r, _EXP_POLY), r, flags=_FMA), r, flags=_FMA),
                      r, flags=_FMA), _c(1.0), flags=_FMA)
    scaled = _scale(e, p, b.fptosi(n, I32))
    big = b.fcmp_ordered(">", x, _c(_EXP_MAX))
    nan = b.fcmp_unordered("uno", x, x)
    out = b.select(big, _c(float("inf")), scaled)
    return b.select(nan, x, out)


def tanh_f32(table, e, x: ir.Value) -> ir.Value:
    b = e.b
    ax = e.math_table.intrinsic(e, "llvm.fabs", [x])
    z = b.fmul(x, x)
    small = b.fadd(b.fmul(b.fmul(_horner(b, z, _TANH_POLY), z), x), x)
    # 1 - 2 / (exp(2|x|) + 1): exp overflows to inf for large |x|, giving exactly 1
    ex = exp_f32(table, e, b.fmul(ax, _c(2.0)))
    large = b.fsub(_c(1.0), b.fdiv(_c(2.0), b.fadd(ex, _c(1.0))))
    out = b.select(b.fcmp_ordered("<", ax, _c(0.625)), small, large)
    # odd: the sign of x on both paths (the polynomial's x + x*p gives +0.0 for -0.0)
    return e.math_table.intrinsic(e, "llvm.copysign", [out, x])


def logistic_f32(table, e, x: ir.Value) -> ir.Value:
    b = e.b
    one = _c(1.0)
    return b.fdiv(one, b.fadd(one, exp_f32(table, e, b.fneg(x))))


# erf: Taylor series below 0.5 (relative error ~1e-8); above, Abramowitz & Stegun 7.1.26
# (absolute error 1.5e-7, so at most ~3e-7 relative where erf >= 0.52)
_ERF_TAYLOR = tuple(2 / 1.7724538509055159 * c for c in
                    (-1 / 1320, 1 / 216, -1 / 42, 1 / 10, -1 / 3, 1.0))
_ERF_AS = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)


def erf_f32(table, e, x: ir.Value) -> ir.Value:
    b = e.b
    ax = e.math_table.intrinsic(e, "llvm.fabs", [x])
    z = b.fmul(x, x)
    small = b.fmul(_horner(b, z, _ERF_TAYLOR), x)
    t = b.fdiv(_c(1.0), b.fadd(_c(1.0), b.fmul(ax, _c(0.3275911))))
    poly = b.fmul(_horner(b, t, _ERF_AS), t)
    large = b.fsub(_c(1.0), b.fmul(poly, exp_f32(table, e, b.fneg(z))))
    signed = e.math_table.intrinsic(e, "llvm.copysign", [large, x])
    return b.select(b.fcmp_ordered("<", ax, _c(0.5)), small, signed)


FLOAT32 = {"exponential": exp_f32, "tanh": tanh_f32, "logistic": logistic_f32, "erf": erf_f32}
