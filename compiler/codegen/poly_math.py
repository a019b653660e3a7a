"""float32 exp, log, tanh, logistic and erf as straight-line polynomial code: no calls, so loops vectorize.

LLVM lowers `llvm.exp` on x86 to one libm call per element (a vector of 16 becomes 16
calls); these versions are plain arithmetic and selects that the loop vectorizer widens.
Accuracy: a few ulp over the whole float32 range (Cephes-style minimax polynomials after
range reduction), checked against NumPy by the codegen tests. The CPU uses them for float32
where an op's stanza names one (`MathCode.cpu_float32`).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .llvm_target import has_feature
from .llvm_types import F32, I32

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
# exp(r) ~ 1 + r + r**2 P(r) on |r| <= ln(2)/2: P's coefficients (highest power first)
# fitted for the least maximum relative error (Lawson's iteration), rounded to float32:
# 5e-9, a tenth of an ulp, below the final rounding
_EXP_POLY = (1.381313311867416e-3, 8.369424380362034e-3, 4.166845604777336e-2,
             1.6666515171527863e-1, 4.999999403953552e-1)
_TANH_POLY = (-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
              -3.33332819422e-1)
# multiply-adds may fuse (FMA): a third less work for exp, and no less accurate
_FMA = ("contract",)
_EXP_MAX = 88.8                  # exp overflows there; n stays <= 128
_EXP_MIN = -103.972084045410     # below: 0 (past the smallest subnormal)


def _c(v: float) -> ir.Constant:
    return ir.Constant(F32, v)


def _horner(b: ir.IRBuilder, x: ir.Value, coeffs: tuple) -> ir.Value:
    acc = _c(coeffs[0])
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=_FMA), _c(c), flags=_FMA)
    return acc


def _ldexp(e, p: ir.Value, n: ir.Value) -> ir.Value:
    """p * 2**n for integer n (AVX-512: one vscalefps, a single rounding)."""
    fnty = ir.FunctionType(F32, [F32, I32])
    fn = e.llmod.globals.get(_LDEXP) or ir.Function(e.llmod, fnty, _LDEXP)
    return e.b.call(fn, [p, n])


_LDEXP = "llvm.ldexp.f32.i32"
# x * log2(e) + 1.5 * 2**23 rounds x * log2(e) to an integer n (to nearest, ties to even)
# and leaves n in the low bits of the sum's bit pattern: no cvt, and no poison from a NaN
# (fptosi's)
_ROUNDER = 12582912.0
_ROUNDER_BITS = 0x4B400000


def _clamp(b: ir.IRBuilder, x: ir.Value, lo: float, hi: float) -> ir.Value:
    """x limited to [lo, hi]; a NaN stays NaN (one vminps/vmaxps each on x86)."""
    x = b.select(b.fcmp_ordered(">", x, _c(hi)), _c(hi), x)
    return b.select(b.fcmp_ordered("<", x, _c(lo)), _c(lo), x)


def _exp_poly(b: ir.IRBuilder, r: ir.Value, r2: ir.Value) -> ir.Value:
    """P(r) with exp(r) ~ 1 + r + r**2 P(r), by Estrin's scheme (three dependent steps,
    not Horner's four: a vectorized exp is bound by latency as much as by throughput)."""
    c = [_c(v) for v in _EXP_POLY]
    high = b.fadd(b.fmul(c[0], r2, flags=_FMA),
                  b.fadd(b.fmul(c[1], r, flags=_FMA), c[2], flags=_FMA), flags=_FMA)
    low = b.fadd(b.fmul(c[3], r, flags=_FMA), c[4], flags=_FMA)
    return b.fadd(b.fmul(high, r2, flags=_FMA), low, flags=_FMA)


def exp_f32(table, e, x: ir.Value) -> ir.Value:
    """exp(x) = (1 + q) * 2**n, n = round(x / ln 2), q = r + r**2 P(r) for the remainder r.
    Without AVX-512, 2**n is applied in two halves, the first added to the exponent field
    of 1 + q (integer ops: the multiply-add units are the bottleneck), so that each step
    stays a normal float and the result is rounded once, subnormals included."""
    b = e.b
    # above _EXP_MAX the result overflows to inf by itself, below _EXP_MIN it is 0
    clamped = _clamp(b, x, _EXP_MIN, _EXP_MAX)
    t = b.fadd(b.fmul(clamped, _c(_LOG2E), flags=_FMA), _c(_ROUNDER), flags=_FMA)
    n = b.fsub(t, _c(_ROUNDER))
    r = b.fsub(b.fsub(clamped, b.fmul(n, _c(_LN2_HI), flags=_FMA), flags=_FMA),
               b.fmul(n, _c(_LN2_LO), flags=_FMA), flags=_FMA)
    r2 = b.fmul(r, r)
    q = b.fadd(b.fmul(_exp_poly(b, r, r2), r2, flags=_FMA), r, flags=_FMA)
    p = b.fadd(q, _c(1.0))
    k = b.sub(b.bitcast(t, I32), ir.Constant(I32, _ROUNDER_BITS))    # n as an integer
    if has_feature("avx512f"):
        return _ldexp(e, p, k)
    half = b.ashr(k, ir.Constant(I32, 1))
    twenty_three = ir.Constant(I32, 23)
    first = b.add(b.bitcast(p, I32), b.shl(half, twenty_three))
    rest = b.add(b.sub(k, half), ir.Constant(I32, 127))
    return b.fmul(b.bitcast(first, F32), b.bitcast(b.shl(rest, twenty_three), F32))


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


# log(1 + m) ~ m - m**2/2 + m**3 P(m) on sqrt(1/2) - 1 <= m < sqrt(2) - 1 (Cephes logf's
# minimax polynomial, highest power first; about 1 ulp over the float32 range)
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
             1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
             3.3333331174e-1)
_SQRT_HALF = 0.707106781186547524
_TWO_23 = 8388608.0              # 2**23: scales a subnormal input to a normal one


def log_f32(table, e, x: ir.Value) -> ir.Value:
    """log(x) = k ln 2 + log(1 + m): x's exponent k and mantissa 1 + m taken from its bits
    (1 + m in [sqrt(1/2), sqrt(2)), k adjusted), ln 2 in two parts. Subnormals are scaled
    by 2**23 first; NaN or x < 0 give NaN, +-0 gives -inf, +inf gives +inf, as libm."""
    b = e.b
    i32 = lambda v: ir.Constant(I32, v)
    tiny = b.fcmp_ordered("<", x, _c(1.1754943508222875e-38))       # subnormal (or <= 0)
    scaled = b.select(tiny, b.fmul(x, _c(_TWO_23)), x)
    bits = b.bitcast(scaled, I32)
    k = b.sub(b.lshr(bits, i32(23)), i32(126))                        # mantissa in [0.5, 1)
    k = b.sub(k, b.select(tiny, i32(23), i32(0)))
    half_m = b.bitcast(b.or_(b.and_(bits, i32(0x007FFFFF)), i32(0x3F000000)), F32)
    low = b.fcmp_ordered("<", half_m, _c(_SQRT_HALF))
    k = b.sub(k, b.select(low, i32(1), i32(0)))
    m = b.fsub(b.select(low, b.fadd(half_m, half_m), half_m), _c(1.0))
    kf = b.sitofp(k, F32)
    z = b.fmul(m, m)
    y = b.fmul(b.fmul(_horner(b, m, _LOG_POLY), m), z)
    y = b.fadd(b.fmul(kf, _c(_LN2_LO), flags=_FMA), y, flags=_FMA)
    y = b.fsub(y, b.fmul(z, _c(0.5)))
    out = b.fadd(b.fadd(m, y), b.fmul(kf, _c(_LN2_HI), flags=_FMA), flags=_FMA)
    inf = _c(float("inf"))
    out = b.select(b.fcmp_ordered("==", x, inf), inf, out)
    out = b.select(b.fcmp_ordered("==", x, _c(0.0)), _c(float("-inf")), out)
    # x < 0 or NaN: NaN
    return b.select(b.fcmp_unordered("<", x, _c(0.0)), _c(float("nan")), out)
