"""Elementwise primitives: out[i] = f(a[i], b[i], ...), operands of equal shape.

Each stanza: name, dtype rule, NumPy reference, elemental code. The references compute
half-precision floats in float32 and round once, as the compiled kernels do.

Elemental code (`emit`) is written against the emitter interface of
`compiler/codegen/elemental.py`: ``e.add(a, b)``, ``e.math("exp", x)``,
``e.compare("LT", a, b)`` and so on; a value carries its dtype, so one rule serves every
dtype and every target.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..passes import algebraic_simplifier as S
from ..primitive import (ELEMENTWISE, NOT_DIFFERENTIABLE, MathCode, any_dtype, any_or_complex,
                         apply, elementwise_infer, fail, float_only, inexact, int_or_bool,
                         integer_only, no_flops, numeric, numeric_or_complex, primitive,
                         widen_half, _same_shapes)

_HALF = (D.float16, D.bfloat16)


def _float_ref(fn):
    """Run a float function in at least float32 and round the result to the input dtype."""
    def ref(*arrays, **attrs):
        dtype = arrays[0].dtype
        wide = [widen_half(a) for a in arrays]
        return np.asarray(fn(*wide, **attrs)).astype(dtype)
    return ref


def _same_dtype_ref(fn):
    def ref(*arrays, **attrs):
        return np.asarray(fn(*arrays, **attrs)).astype(arrays[0].dtype)
    return ref


def unary(name, rule, reference, emit, math_name=None, out_dtype=None, doc="", vjp=None,
          **kw):
    return primitive(name, ELEMENTWISE, elementwise_infer(name, rule, out_dtype), reference,
                     emit=emit, math=math_name, doc=doc, vjp=vjp, batch=B.elementwise,
                     arity=1, **kw)


def float_unary(name, fn, doc="", vjp=None, complex_too=False, **kw):
    """A transcendental or rounding function: its code comes from the target's math table
    (for complex values, from compiler/codegen/complex_values.py)."""
    return unary(name, inexact if complex_too else float_only, _float_ref(fn),
                 lambda e, x, _n=name: e.math(_n, x), math_name=name, doc=doc, vjp=vjp, **kw)


def binary(name, rule, reference, emit, math_name=None, doc="", vjp=None, **kw):
    return primitive(name, ELEMENTWISE, elementwise_infer(name, rule), reference,
                     emit=emit, math=math_name, doc=doc, vjp=vjp, batch=B.elementwise,
                     arity=2, **kw)


# ---- references that NumPy lacks or defines differently ------------------------------

def _logistic(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _int_divide(a, b):
    """C division: truncates toward zero; x / 0 = 0 (defined, unlike C)."""
    safe = np.where(b == 0, 1, b)
    q = np.floor_divide(a, safe)
    fix = (np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))
    return np.where(b == 0, 0, q + fix.astype(q.dtype))


def _divide(a, b):
    if a.dtype.kind in "iu":
        return _int_divide(a, b).astype(a.dtype)
    return _float_ref(np.divide)(a, b)


def _remainder(a, b):
    """C fmod: the sign of the dividend; x % 0 = 0 for integers."""
    if a.dtype.kind in "iu":
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.fmod(a, safe)).astype(a.dtype)
    return _float_ref(np.fmod)(a, b)


def _floored(fn):
    """NumPy's floor_divide / remainder (silent: x // 0 is inf or NaN for floats, 0 for
    integers; MIN // -1 wraps), half floats in float32 rounded once, as NumPy computes."""
    def ref(a, b):
        with np.errstate(all="ignore"):
            return _float_ref(fn)(a, b) if a.dtype.kind not in "iu" else fn(a, b)
    return ref


def _power(a, b):
    if a.dtype.kind in "iu":
        neg = b < 0 if a.dtype.kind == "i" else np.zeros(b.shape, bool)
        safe = np.where(neg, 0, b)
        pos = np.power(a, safe)
        # a ** negative: 1 for 1, +-1 for -1, 0 otherwise (integer semantics)
        odd = (np.abs(b) % 2) == 1
        negpow = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
        return np.where(neg, negpow, pos).astype(a.dtype)
    return _float_ref(np.power)(a, b)


def _shift(kind):
    def ref(a, b):
        bits = a.dtype.itemsize * 8
        bu = b.astype(np.uint64)
        ok = bu < bits
        amt = np.where(ok, b, 0).astype(a.dtype)
        if kind == "left":
            return np.where(ok, np.left_shift(a, amt), 0).astype(a.dtype)
        if kind == "logical":
            ua = a.view(np.dtype(f"u{a.dtype.itemsize}"))
            r = np.where(ok, np.right_shift(ua, amt.view(ua.dtype)), 0).astype(ua.dtype)
            return r.view(a.dtype)
        fill = np.where(a < 0, -1, 0) if a.dtype.kind == "i" else 0
        return np.where(ok, np.right_shift(a, amt), fill).astype(a.dtype)
    return ref


def _expm1(x):
    """NumPy's expm1, with C99's special values for complex x, which NumPy's complex loop
    lacks (it gives inf + NaN i for expm1(inf + 0i)): as exp(z) - 1 at infinities."""
    out = np.expm1(x)
    if x.dtype.kind != "c":
        return out
    re, im = x.real, x.imag
    bad_im = ~np.isfinite(im)
    real_line = np.empty_like(x)            # expm1(x + 0i) = expm1(x) + 0i, zero's sign kept
    real_line.real, real_line.imag = np.expm1(re), im
    fixes = [(im == 0, real_line),
             ((re == -np.inf) & bad_im, np.full(x.shape, -1 + 0j)),
             ((re == np.inf) & bad_im, np.full(x.shape, complex(np.inf, np.nan)))]
    for cond, value in reversed(fixes):
        out = np.where(cond, value, out)
    return out


def _clamp_ref(lo, x, hi):
    """max(x, lo) then min(., hi), x (or the first result) kept where the two are equal
    (so of +0.0 and -0.0 it is x's zero), a NaN anywhere giving NaN: NumPy's clip with
    scalar bounds, and its float16 clip with any bounds (its float32/float64 loop over
    full-array bounds keeps the bound's zero instead). min > max gives max, as NumPy."""
    wide = [widen_half(a) for a in (lo, x, hi)]
    lo_, x_, hi_ = wide
    with np.errstate(invalid="ignore"):
        if x_.dtype.kind in "fc":
            t = np.where(np.isnan(x_) | (x_ >= lo_), x_, lo_)
            out = np.where(np.isnan(t) | (t <= hi_), t, hi_)
        else:
            out = np.where(x_ >= lo_, x_, lo_)
            out = np.where(out <= hi_, out, hi_)
    return np.asarray(out).astype(x.dtype)


def _nextafter_ref(a, b):
    """NumPy's nextafter in the operands' own dtype (float16 and bfloat16 step their own
    bits: ml_dtypes defines it for bfloat16)."""
    return np.nextafter(a, b).astype(a.dtype)


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _sign(x):
    return np.sign(x).astype(x.dtype)


# ---- vector-Jacobian products: vjp(g, out, *operands) -> one cotangent per operand -----
# Rounding functions and sign have a zero gradient (as in JAX), not "no gradient".

_numeric_infer = elementwise_infer("abs", numeric_or_complex)


def _abs_infer(operands):
    shape, dtype = _numeric_infer(operands)
    return shape, D.real_dtype(dtype)


_abs_infer.dtypes = D.NUMERIC + D.COMPLEX


def _abs_ref(x):
    return np.abs(x).astype(D.real_dtype(D.from_numpy(x.dtype)).np)


def _zero_vjp(g, out, x):
    return (A.zeros_like(x),)


def _neg_vjp(g, out, x):
    return (A.neg(g),)


def _abs_vjp(g, out, x):
    if x.dtype.is_complex:      # d|z| = re(conj(z) dz) / |z|: the cotangent g z / |z|
        safe = A.select(A.compare(out, A.zeros_like(out), "EQ"), A.full_like(out, 1), out)
        unit = A.div(x, A.convert(safe, x.dtype))
        return (A.mul(A.convert(g, x.dtype), unit),)
    return (A.mul(g, apply("sign", x)),)


def _exp_vjp(g, out, x):
    return (A.mul(g, out),)


def _expm1_vjp(g, out, x):
    return (A.mul(g, A.plus(out, 1)),)


def _log_vjp(g, out, x):
    return (A.div(g, x),)


def _log1p_vjp(g, out, x):
    return (A.div(g, A.plus(x, 1)),)


def _sqrt_vjp(g, out, x):
    return (A.div(A.scale(g, 0.5), out),)


def _rsqrt_vjp(g, out, x):
    return (A.mul(A.scale(g, -0.5), A.div(out, x)),)


def _tanh_vjp(g, out, x):
    return (A.mul(g, A.sub(A.full_like(out, 1), A.mul(out, out))),)


def _logistic_vjp(g, out, x):
    return (A.mul(g, A.mul(out, A.sub(A.full_like(out, 1), out))),)


def _sin_vjp(g, out, x):
    return (A.mul(g, apply("cosine", x)),)


def _cos_vjp(g, out, x):
    return (A.neg(A.mul(g, apply("sine", x))),)


def _tan_vjp(g, out, x):
    return (A.mul(g, A.plus(A.mul(out, out), 1)),)


def _one_minus_square(x):
    return A.sub(A.full_like(x, 1), A.mul(x, x))


def _rsqrt(x):
    """1 / sqrt(x); complex values (which rsqrt does not take) through sqrt."""
    if x.dtype.is_complex:
        return A.div(A.full_like(x, 1), apply("sqrt", x))
    return apply("rsqrt", x)


def _sign_vjp(g, out, x):
    """Zero for real x (as JAX); for complex, z / |z| moves only across the ray: the
    cotangent (g - s re(conj(s) g)) / |z| (s = sign z; 0 at 0), as PyTorch's sgn."""
    if not x.dtype.is_complex:
        return (A.zeros_like(x),)
    r = apply("abs", x)
    zero = A.compare(r, A.zeros_like(r), "EQ")
    safe = A.convert(A.select(zero, A.full_like(r, 1), r), x.dtype)
    along = A.mul(out, A.convert(apply("real", A.mul(apply("conj", out), g)), x.dtype))
    return (A.div(A.sub(g, along), safe),)


def _asin_vjp(g, out, x):
    return (A.mul(g, _rsqrt(_one_minus_square(x))),)


def _acos_vjp(g, out, x):
    return (A.neg(A.mul(g, _rsqrt(_one_minus_square(x)))),)


def _atan_vjp(g, out, x):
    return (A.div(g, A.plus(A.mul(x, x), 1)),)


def _sinh_vjp(g, out, x):
    return (A.mul(g, apply("cosh", x)),)


def _cosh_vjp(g, out, x):
    return (A.mul(g, apply("sinh", x)),)


def _asinh_vjp(g, out, x):
    return (A.mul(g, _rsqrt(A.plus(A.mul(x, x), 1))),)


def _acosh_vjp(g, out, x):
    if x.dtype.is_complex:      # 1 / (sqrt(z - 1) sqrt(z + 1)): 1 / sqrt(z^2 - 1) has the wrong sign for re z < 0
        return (A.div(g, A.mul(apply("sqrt", A.plus(x, -1)), apply("sqrt", A.plus(x, 1)))),)
    return (A.mul(g, apply("rsqrt", A.plus(A.mul(x, x), -1))),)


def _atanh_vjp(g, out, x):
    return (A.div(g, _one_minus_square(x)),)


def _erf_vjp(g, out, x):
    dens = apply("exponential", A.neg(A.mul(x, x)))
    return (A.mul(A.scale(g, 2 / math.sqrt(math.pi)), dens),)


def _add_vjp(g, out, a, b):
    return g, g


def _subtract_vjp(g, out, a, b):
    return g, A.neg(g)


def _multiply_vjp(g, out, a, b):
    return A.mul(g, b), A.mul(g, a)


def _divide_vjp(g, out, a, b):
    ga = A.div(g, b)
    return ga, A.neg(A.mul(ga, out))


def _remainder_vjp(g, out, a, b):
    # fmod(a, b) = a - b * trunc(a / b)
    return g, A.neg(A.mul(g, apply("truncate", A.div(a, b))))


def _floor_divide_vjp(g, out, a, b):
    return A.zeros_like(a), A.zeros_like(b)


def _floor_mod_vjp(g, out, a, b):
    # a % b = a - b * (a // b), the floored quotient constant between its jumps
    return g, A.neg(A.mul(g, apply("floor_divide", a, b)))


def _power_vjp(g, out, a, b):
    """d/da = b a^(b-1), taken as 0 where b == 0 (so 0^0 has no NaN); d/db = a^b log(a),
    taken as 0 where a == 0 (log is evaluated at 1 there), as JAX does."""
    zero_b = A.compare(b, A.zeros_like(b), "EQ")
    da = A.mul(b, apply("power", a, A.plus(b, -1)))
    zero_a = A.compare(a, A.zeros_like(a), "EQ")
    safe_a = A.select(zero_a, A.full_like(a, 1), a)
    db = A.mul(out, apply("log", safe_a))
    return A.where_else_zero(apply("not", zero_b), A.mul(g, da)), A.mul(g, db)


def _choice_weights(x, other, out):
    """1 where x alone gives the max/min, 1/2 on a tie (the gradient is split), else 0."""
    mine = A.compare(x, out, "EQ")
    theirs = A.compare(other, out, "EQ")
    half_or_one = A.select(theirs, A.full_like(x, 0.5), A.full_like(x, 1))
    return A.select(mine, half_or_one, A.zeros_like(x))


def _minmax_vjp(g, out, a, b, wanted=(True, True)):
    """Partial: relu's maximum(x, 0) needs no cotangent for its 0."""
    return (A.mul(g, _choice_weights(a, b, out)) if wanted[0] else None,
            A.mul(g, _choice_weights(b, a, out)) if wanted[1] else None)


def _atan2_vjp(g, out, a, b):
    denom = A.add(A.mul(a, a), A.mul(b, b))
    return A.mul(g, A.div(b, denom)), A.neg(A.mul(g, A.div(a, denom)))


def _select_vjp(g, out, pred, a, b):
    zero = A.zeros_like(g)
    return None, A.select(pred, g, zero), A.select(pred, zero, g)


def _clamp_vjp(g, out, lo, x, hi):
    """PyTorch's rule for torch.clamp: x takes the gradient where lo <= x <= hi (ties
    included), lo where x < lo < hi, hi where x > hi or hi < lo (min > max gives max); a
    NaN anywhere sends it nowhere (every comparison is false), as there."""
    inside = A.compare(x, lo, "GE")
    x_wins = apply("and", inside, A.compare(x, hi, "LE"))
    lo_wins = apply("and", A.compare(x, lo, "LT"), A.compare(lo, hi, "LT"))
    hi_wins = apply("or", A.compare(x, hi, "GT"), A.compare(hi, lo, "LT"))
    return (A.where_else_zero(lo_wins, g), A.where_else_zero(x_wins, g),
            A.where_else_zero(hi_wins, g))


def _hypot_vjp(g, out, a, b):
    """a / h and b / h, as PyTorch (NaN at h = 0, where the function has no derivative)."""
    return A.mul(g, A.div(a, out)), A.mul(g, A.div(b, out))


def _logaddexp_vjp(g, out, a, b, scale=1.0):
    """e^a / (e^a + e^b) = logistic(a - b) (scale ln 2 for base 2), and its mirror, as
    PyTorch's 1 / (1 + exp(b - a)); where a == b (both -inf or both +inf too, where
    PyTorch gives NaN) one half each, the limit along a = b."""
    d = A.sub(a, b)
    if scale != 1.0:
        d = A.scale(d, scale)
    tie = A.compare(a, b, "EQ")
    half = A.full_like(g, 0.5)
    wa = A.select(tie, half, apply("logistic", d))
    wb = A.select(tie, half, apply("logistic", A.neg(d)))
    return A.mul(g, wa), A.mul(g, wb)


def _logaddexp2_vjp(g, out, a, b):
    return _logaddexp_vjp(g, out, a, b, scale=math.log(2))


def _copysign_vjp(g, out, a, b):
    """PyTorch's: out / a (the sign flip, +1 or -1), 0 where a == 0; nothing for b."""
    zero_a = A.compare(a, A.zeros_like(a), "EQ")
    ratio = A.select(zero_a, A.zeros_like(a), A.div(out, a))
    return A.mul(g, ratio), A.zeros_like(b)


def _nextafter_vjp(g, out, a, b):
    """PyTorch's: g for a where a != b (NaN included), 0 where the result is b itself;
    nothing for b."""
    return A.where_else_zero(A.compare(a, b, "NE"), g), A.zeros_like(b)


def _convert_vjp(g, out, x, dtype):
    if not x.dtype.is_inexact or not out.dtype.is_inexact:
        return (None,)
    if out.dtype.is_complex and not x.dtype.is_complex:    # x -> x + 0i: the real part
        return (A.convert(apply("real", g), x.dtype),)
    return (A.convert(g, x.dtype),)


# ---- unary --------------------------------------------------------------------------

neg = unary("negate", numeric_or_complex, _same_dtype_ref(np.negative), lambda e, x: e.neg(x),
            vjp=_neg_vjp, vjp_by_type=True, cheap=True, simplify=S.involution)
abs_ = primitive("abs", ELEMENTWISE, _abs_infer, _abs_ref, emit=lambda e, x: e.abs(x),
                 doc="|x|; the modulus (a real value) of a complex x.", vjp=_abs_vjp,
                 batch=B.elementwise, cheap=True)
sign = primitive("sign", ELEMENTWISE, elementwise_infer("sign", numeric_or_complex), _sign,
                 emit=lambda e, x: e.math("sign", x) if x.dtype.is_complex else e.sign(x),
                 doc="-1, 0, 1 (NaN for NaN); z / |z| (0 for 0) for a complex z, as NumPy 2.",
                 vjp=_sign_vjp, holomorphic=False, batch=B.elementwise, arity=1, cheap=True,
                 math_code=MathCode(complex="complex_values.sign"))
not_ = unary("not", int_or_bool, _not, lambda e, x: e.not_(x),
             doc="Logical not for bool, bitwise not for integers.", vjp=NOT_DIFFERENTIABLE,
             cheap=True, simplify=S.involution)

exp = float_unary("exponential", np.exp, vjp=_exp_vjp, complex_too=True, vjp_by_type=True,
                  math_code=MathCode(cpu="llvm.exp", cpu_float32="poly_math.exp_f32", cuda="exp",
                                     complex="complex_values.exp"))
expm1 = float_unary("exponential_minus_one", _expm1, vjp=_expm1_vjp, complex_too=True,
                    math_code=MathCode(cpu="expm1", cuda="expm1", complex="complex_values.expm1"))
log = float_unary("log", np.log, vjp=_log_vjp, complex_too=True, vjp_by_type=True,
                  math_code=MathCode(cpu="llvm.log", cpu_float32="poly_math.log_f32", cuda="log",
                                     complex="complex_values.log"))
log1p = float_unary("log_plus_one", np.log1p, vjp=_log1p_vjp, complex_too=True,
                    math_code=MathCode(cpu="log1p", cuda="log1p", complex="complex_values.log1p"))
sqrt = float_unary("sqrt", np.sqrt, vjp=_sqrt_vjp, complex_too=True, cheap=True,
                   math_code=MathCode(cpu="llvm.sqrt", cuda="llvm.sqrt",
                                      complex="complex_values.sqrt"))
rsqrt = float_unary("rsqrt", lambda x: 1 / np.sqrt(x), vjp=_rsqrt_vjp, vjp_by_type=True,
                    math_code=MathCode(cpu="math_table.rsqrt", cuda="rsqrt"))
tanh = float_unary("tanh", np.tanh, vjp=_tanh_vjp, complex_too=True,
                   math_code=MathCode(cpu="tanh", cpu_float32="poly_math.tanh_f32", cuda="tanh",
                                      complex="complex_values.tanh"))
logistic = float_unary("logistic", _logistic, vjp=_logistic_vjp,
                       math_code=MathCode(cpu="math_table.logistic",
                                          cpu_float32="poly_math.logistic_f32",
                                          cuda="gpu_math.logistic"))
sin = float_unary("sine", np.sin, vjp=_sin_vjp, complex_too=True,
                  math_code=MathCode(cpu="llvm.sin", cuda="sin", complex="complex_values.sin"))
cos = float_unary("cosine", np.cos, vjp=_cos_vjp, complex_too=True,
                  math_code=MathCode(cpu="llvm.cos", cuda="cos", complex="complex_values.cos"))
tan = float_unary("tan", np.tan, vjp=_tan_vjp,
                  math_code=MathCode(cpu="tan", cuda="tan"))
asin = float_unary("asin", np.arcsin, vjp=_asin_vjp, complex_too=True,
                   math_code=MathCode(cpu="asin", cuda="asin", complex="complex_values.asin"))
acos = float_unary("acos", np.arccos, vjp=_acos_vjp, complex_too=True,
                   math_code=MathCode(cpu="acos", cuda="acos", complex="complex_values.acos"))
atan = float_unary("atan", np.arctan, vjp=_atan_vjp, complex_too=True,
                   math_code=MathCode(cpu="atan", cuda="atan", complex="complex_values.atan"))
sinh = float_unary("sinh", np.sinh, vjp=_sinh_vjp, complex_too=True,
                   math_code=MathCode(cpu="sinh", cuda="sinh", complex="complex_values.sinh"))
cosh = float_unary("cosh", np.cosh, vjp=_cosh_vjp, complex_too=True,
                   math_code=MathCode(cpu="cosh", cuda="cosh", complex="complex_values.cosh"))
asinh = float_unary("asinh", np.arcsinh, vjp=_asinh_vjp, complex_too=True,
                    math_code=MathCode(cpu="asinh", cuda="asinh", complex="complex_values.asinh"))
acosh = float_unary("acosh", np.arccosh, vjp=_acosh_vjp, complex_too=True,
                    math_code=MathCode(cpu="acosh", cuda="acosh", complex="complex_values.acosh"))
atanh = float_unary("atanh", np.arctanh, vjp=_atanh_vjp, complex_too=True,
                    math_code=MathCode(cpu="atanh", cuda="atanh", complex="complex_values.atanh"))
erf = float_unary("erf", _erf, vjp=_erf_vjp, vjp_by_type=True,
                  math_code=MathCode(cpu="erf", cpu_float32="poly_math.erf_f32", cuda="erf"))
floor = float_unary("floor", np.floor, vjp=_zero_vjp, cheap=True,
                    math_code=MathCode(cpu="llvm.floor", cuda="llvm.floor"))
ceil = float_unary("ceil", np.ceil, vjp=_zero_vjp, cheap=True,
                   math_code=MathCode(cpu="llvm.ceil", cuda="llvm.ceil"))
round_ = float_unary("round_nearest_even", np.round, vjp=_zero_vjp, cheap=True,
                     math_code=MathCode(cpu="llvm.roundeven", cuda="llvm.rint"))
trunc = float_unary("truncate", np.trunc, vjp=_zero_vjp, cheap=True,
                    math_code=MathCode(cpu="llvm.trunc", cuda="llvm.trunc"))
is_finite = unary("is_finite", float_only, lambda x: np.isfinite(x),
                  lambda e, x: e.math("is_finite", x), math_name="is_finite",
                  out_dtype=D.bool_, vjp=NOT_DIFFERENTIABLE, cheap=True,
                  math_code=MathCode(cpu="math_table.is_finite", cuda="gpu_math.is_finite"))

# ---- binary -------------------------------------------------------------------------

add = binary("add", any_or_complex, lambda a, b: (np.logical_or(a, b) if a.dtype == np.bool_
                                             else _same_dtype_ref(np.add)(a, b)),
             lambda e, a, b: e.add(a, b), vjp=_add_vjp, vjp_by_type=True, cheap=True,
             simplify=S.add_zero)
subtract = binary("subtract", numeric_or_complex, _same_dtype_ref(np.subtract),
                  lambda e, a, b: e.sub(a, b), vjp=_subtract_vjp, vjp_by_type=True, cheap=True,
                  simplify=S.subtract_zero)
multiply = binary("multiply", any_or_complex, lambda a, b: (np.logical_and(a, b) if a.dtype == np.bool_
                                                       else _same_dtype_ref(np.multiply)(a, b)),
                  lambda e, a, b: e.mul(a, b), vjp=_multiply_vjp, vjp_by_type=True, cheap=True,
                  simplify=S.multiply_one_or_zero)
divide = binary("divide", numeric_or_complex, _divide, lambda e, a, b: e.div(a, b),
                doc="Floats: IEEE division. Integers: truncation toward zero; x / 0 = 0.",
                vjp=_divide_vjp, vjp_by_type=True, cheap=True, simplify=S.right_identity_one)
remainder = binary("remainder", numeric, _remainder, lambda e, a, b: e.rem(a, b),
                   doc="C fmod: the result has the sign of the dividend; x % 0 = 0 for integers.",
                   vjp=_remainder_vjp,
                   math_code=MathCode(cuda="fmod"))
# Python's // and % (NumPy's floor_divide and remainder): one node each, their code in the
# elemental emitter (`floor_div`, `floor_mod`: rem/div with a sign fix, NumPy's divmod for
# floats), emitted directly rather than expanded into HLO (see there why)
floor_divide = binary("floor_divide", numeric, _floored(np.floor_divide),
                      lambda e, a, b: e.floor_div(a, b), costly=True,
                      doc="Rounds toward negative infinity, as NumPy's floor_divide (floats "
                          "as its divmod: 1.0 // 0.1 is 9.0); integers: x // 0 = 0.",
                      vjp=_floor_divide_vjp, vjp_by_type=True)
floor_mod = binary("floor_mod", numeric, _floored(np.remainder),
                   lambda e, a, b: e.floor_mod(a, b), costly=True,
                   doc="The sign of the divisor, as NumPy's remainder (a zero result takes "
                       "the divisor's sign); integers: x % 0 = 0.",
                   vjp=_floor_mod_vjp, vjp_by_type=True)
power = binary("power", numeric_or_complex, _power, lambda e, a, b: e.pow(a, b), math_name="power",
               vjp=_power_vjp, simplify=S.right_identity_one,
               math_code=MathCode(cpu="llvm.pow", cuda="pow"))
def _extremum(direction: str, integer_emit: Callable) -> Callable:
    """NumPy's float maximum / minimum, bit for bit: NaN-propagating (the first NaN), and
    between equal values (+0.0 and -0.0) the second operand, or for float16 the first
    (NumPy's SIMD loops and its half-precision loop differ; IEEE's maximum would always
    give +0.0)."""
    def emit(e, a, b):
        if not a.dtype.is_float:
            return integer_emit(e, a, b)
        strict = direction if a.dtype is not D.float16 else direction[0] + "E"
        take_a = e.or_(e.compare(strict, a, b), e.compare("NE", a, a))
        return e.select(take_a, a, b)
    return emit


maximum = binary("maximum", any_dtype, _same_dtype_ref(np.maximum),
                 _extremum("GT", lambda e, a, b: e.max(a, b)),
                 doc="NaN-propagating, as NumPy's maximum; of +0.0 and -0.0 the second "
                     "(float16: the first), as NumPy.", vjp=_minmax_vjp, vjp_partial=True,
                 vjp_by_type=True, cheap=True, simplify=S.idempotent)
minimum = binary("minimum", any_dtype, _same_dtype_ref(np.minimum),
                 _extremum("LT", lambda e, a, b: e.min(a, b)),
                 doc="NaN-propagating, as NumPy's minimum; of +0.0 and -0.0 the second "
                     "(float16: the first), as NumPy.", vjp=_minmax_vjp, vjp_partial=True,
                 vjp_by_type=True, cheap=True, simplify=S.idempotent)
atan2 = binary("atan2", float_only, _float_ref(np.arctan2), lambda e, a, b: e.math("atan2", a, b),
               math_name="atan2", vjp=_atan2_vjp,
               math_code=MathCode(cpu="atan2", cuda="atan2"))
hypot = binary("hypot", float_only, _float_ref(np.hypot), lambda e, a, b: e.math("hypot", a, b),
               math_name="hypot", doc="sqrt(a^2 + b^2) without overflow; +inf where either is "
                                      "infinite (a NaN beside it too), as NumPy.",
               vjp=_hypot_vjp, vjp_by_type=True,
               math_code=MathCode(cpu="hypot", cpu_float32="math_table.hypot_f32", cuda="hypot"))
logaddexp = binary("logaddexp", float_only, _float_ref(np.logaddexp),
                   lambda e, a, b: e.logaddexp(a, b, base2=False), costly=True,
                   doc="log(e^a + e^b), NumPy's npy_logaddexp (a + log 2 where a == b).",
                   vjp=_logaddexp_vjp, vjp_by_type=True)
logaddexp2 = binary("logaddexp2", float_only, _float_ref(np.logaddexp2),
                    lambda e, a, b: e.logaddexp(a, b, base2=True), costly=True,
                    doc="log2(2^a + 2^b), NumPy's npy_logaddexp2 (a + 1 where a == b).",
                    vjp=_logaddexp2_vjp, vjp_by_type=True)
copysign = binary("copysign", float_only, _float_ref(np.copysign),
                  lambda e, a, b: e.copysign(a, b),
                  doc="|a| with b's sign bit (of a zero or a NaN too), exact.",
                  vjp=_copysign_vjp, vjp_by_type=True)
nextafter = binary("nextafter", float_only, _nextafter_ref, lambda e, a, b: e.nextafter(a, b),
                   doc="The next value of a's dtype after a toward b (float16 and bfloat16 "
                       "step their own bits); b where a == b (float16: a, as NumPy's loop); "
                       "NaN if either is.",
                   vjp=_nextafter_vjp, vjp_by_type=True)
and_ = binary("and", int_or_bool, _same_dtype_ref(np.bitwise_and), lambda e, a, b: e.and_(a, b),
              vjp=NOT_DIFFERENTIABLE, cheap=True, simplify=S.idempotent)
or_ = binary("or", int_or_bool, _same_dtype_ref(np.bitwise_or), lambda e, a, b: e.or_(a, b),
             vjp=NOT_DIFFERENTIABLE, cheap=True, simplify=S.idempotent)
xor = binary("xor", int_or_bool, _same_dtype_ref(np.bitwise_xor), lambda e, a, b: e.xor(a, b),
             vjp=NOT_DIFFERENTIABLE, cheap=True)
shift_left = binary("shift_left", integer_only, _shift("left"), lambda e, a, b: e.shl(a, b),
                    doc="Shifting by the bit width or more gives 0.", vjp=NOT_DIFFERENTIABLE)
shift_right_arithmetic = binary("shift_right_arithmetic", integer_only, _shift("arithmetic"),
                                lambda e, a, b: e.ashr(a, b), vjp=NOT_DIFFERENTIABLE)
shift_right_logical = binary("shift_right_logical", integer_only, _shift("logical"),
                             lambda e, a, b: e.lshr(a, b), vjp=NOT_DIFFERENTIABLE)

# ---- compare, select, clamp ---------------------------------------------------------

COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
               "GT": np.greater, "GE": np.greater_equal}


def _compare_infer(operands, direction):
    if direction not in COMPARISONS:
        fail("compare", operands, f"direction must be one of {sorted(COMPARISONS)}, got {direction!r}")
    dtype = any_or_complex("compare", operands)
    if dtype.is_complex and direction not in ("EQ", "NE"):
        fail("compare", operands, f"{direction}: complex numbers are not ordered (EQ and NE "
                                  "compare them)", TypeError)
    return _same_shapes("compare", operands), D.bool_


_compare_infer.dtypes = D.EVERY
compare = primitive("compare", ELEMENTWISE, _compare_infer,
                    lambda a, b, direction: COMPARISONS[direction](a, b),
                    attrs=("direction",), emit=lambda e, a, b, direction: e.compare(direction, a, b),
                    vjp=NOT_DIFFERENTIABLE, batch=B.elementwise, cheap=True)


def _select_infer(operands):
    pred, a, b = operands
    _same_shapes("select", operands)
    if pred.dtype is not D.bool_:
        fail("select", operands, "the predicate must be bool", TypeError)
    return a.shape, any_or_complex("select", (a, b))


_select_infer.dtypes = D.EVERY
select = primitive("select", ELEMENTWISE, _select_infer, lambda p, a, b: np.where(p, a, b),
                   emit=lambda e, p, a, b: e.select(p, a, b), vjp=_select_vjp,
                   vjp_by_type=True, batch=B.elementwise, cheap=True, flops=no_flops,
                   simplify=S.select_known)


def _clamp_infer(operands):
    return _same_shapes("clamp", operands), numeric("clamp", operands)


_clamp_infer.dtypes = D.NUMERIC
clamp = primitive("clamp", ELEMENTWISE, _clamp_infer, _clamp_ref,
                  emit=lambda e, lo, x, hi: e.clamp(lo, x, hi),
                  doc="clamp(lo, x, hi): max(x, lo) then min(., hi), operands of equal shape; "
                      "x where it equals a bound (a signed zero too); NaN if any is; hi "
                      "where lo > hi (NumPy's clip, torch.clamp).",
                  vjp=_clamp_vjp, vjp_by_type=True, batch=B.elementwise, cheap=True)

# ---- conversions --------------------------------------------------------------------


def _convert_infer(operands, dtype):
    (x,) = operands
    return x.shape, D.to_dtype(dtype)


def _convert_ref(x, dtype):
    d = D.to_dtype(dtype)
    if (x.dtype.kind == "f" or x.dtype == D.bfloat16.np) and d.is_int:   # bf16 is kind "V"
        # float -> int: truncate, NaN -> 0, saturate at the integer range (defined, unlike C)
        info = np.iinfo(d.np)
        with np.errstate(invalid="ignore"):
            t = np.trunc(np.nan_to_num(x.astype(np.float64), nan=0.0))
            return np.clip(t, info.min, info.max).astype(d.np)
    if d is D.bool_:
        return x != 0
    if x.dtype.kind == "c" and not d.is_complex:      # the real part, as NumPy's astype
        return _convert_ref(np.ascontiguousarray(x.real), dtype)
    return x.astype(d.np)


_convert_infer.dtypes = D.EVERY
convert = primitive("convert", ELEMENTWISE, _convert_infer, _convert_ref, attrs=("dtype",),
                    emit=lambda e, x, dtype: e.convert(x, D.to_dtype(dtype)),
                    doc="Float to integer truncates toward zero, saturates, and maps NaN to 0.",
                    vjp=_convert_vjp, vjp_by_type=True, batch=B.elementwise, cheap=True,
                    flops=no_flops, simplify=S.convert_twice)


def _bitcast_infer(operands, dtype):
    (x,) = operands
    d = D.to_dtype(dtype)
    if d.bits != x.dtype.bits or d is D.bool_ or x.dtype is D.bool_ or d.is_complex \
            or x.dtype.is_complex:
        fail("bitcast_convert", operands, f"cannot reinterpret as {d.name}: bit widths differ",
             TypeError)
    return x.shape, d


_bitcast_infer.dtypes = D.NUMERIC
bitcast_convert = primitive("bitcast_convert", ELEMENTWISE, _bitcast_infer,
                            lambda x, dtype: x.view(D.to_dtype(dtype).np), attrs=("dtype",),
                            emit=lambda e, x, dtype: e.bitcast(x, D.to_dtype(dtype)),
                            vjp=NOT_DIFFERENTIABLE, batch=B.elementwise, flops=no_flops)
