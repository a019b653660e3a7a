"""Complex values in the elemental emitter: an LLVM struct {re, im} of two floats (NumPy's
layout, so loads and stores need nothing special), and the arithmetic and math on it,
written with the real operations of the emitter and its target's math table.

The formulas are the textbook ones NumPy's own loops use (division scaled as Smith's
algorithm against overflow; sqrt through |z| by halves; log through hypot and atan2).
"""
from __future__ import annotations

from typing import Callable

import llvmlite.ir as ir

from ..hlo import dtypes as D
from ..primitive import PRIMITIVES, MathCode
from .llvm_types import Value, compute_type


def parts(e, z: Value) -> tuple:
    """(re, im) as real Values."""
    real = D.real_dtype(z.dtype)
    return (Value(e.b.extract_value(z.ir, 0), real), Value(e.b.extract_value(z.ir, 1), real))


def make(e, re: Value, im: Value, dtype: D.DType) -> Value:
    ty = compute_type(dtype)
    z = e.b.insert_value(ir.Constant(ty, ir.Undefined), re.ir, 0)
    return Value(e.b.insert_value(z, im.ir, 1), dtype)


def _real(e, x: float, like: Value) -> Value:
    return Value(ir.Constant(like.ir.type, x), like.dtype)


def add(e, a: Value, b: Value) -> Value:
    (ar, ai), (br, bi) = parts(e, a), parts(e, b)
    return make(e, e.add(ar, br), e.add(ai, bi), a.dtype)


def sub(e, a: Value, b: Value) -> Value:
    (ar, ai), (br, bi) = parts(e, a), parts(e, b)
    return make(e, e.sub(ar, br), e.sub(ai, bi), a.dtype)


def neg(e, a: Value) -> Value:
    ar, ai = parts(e, a)
    return make(e, e.neg(ar), e.neg(ai), a.dtype)


def conj(e, a: Value) -> Value:
    ar, ai = parts(e, a)
    return make(e, ar, e.neg(ai), a.dtype)


def mul(e, a: Value, b: Value) -> Value:
    (ar, ai), (br, bi) = parts(e, a), parts(e, b)
    return make(e, e.sub(e.mul(ar, br), e.mul(ai, bi)), e.add(e.mul(ar, bi), e.mul(ai, br)),
                a.dtype)


def div(e, a: Value, b: Value) -> Value:
    """Smith's algorithm: scale by the larger of |br|, |bi| so the products do not overflow."""
    (ar, ai), (br, bi) = parts(e, a), parts(e, b)
    bb = e.b
    wide = bb.fcmp_ordered(">=", e.abs(br).ir, e.abs(bi).ir)
    # |br| >= |bi|: r = bi / br, d = br + bi r; re = (ar + ai r) / d, im = (ai - ar r) / d
    r1 = e.div(bi, br)
    d1 = e.add(br, e.mul(bi, r1))
    re1, im1 = e.div(e.add(ar, e.mul(ai, r1)), d1), e.div(e.sub(ai, e.mul(ar, r1)), d1)
    # else: r = br / bi, d = br r + bi; re = (ar r + ai) / d, im = (ai r - ar) / d
    r2 = e.div(br, bi)
    d2 = e.add(e.mul(br, r2), bi)
    re2, im2 = e.div(e.add(e.mul(ar, r2), ai), d2), e.div(e.sub(e.mul(ai, r2), ar), d2)
    re = Value(bb.select(wide, re1.ir, re2.ir), ar.dtype)
    im = Value(bb.select(wide, im1.ir, im2.ir), ar.dtype)
    return make(e, re, im, a.dtype)


def abs_(e, a: Value) -> Value:
    """|z| without overflow: m * sqrt(1 + (s / m)^2), m = max(|re|, |im|), s the smaller."""
    ar, ai = parts(e, a)
    x, y = e.abs(ar), e.abs(ai)
    big, small = e.max(x, y), e.min(x, y)
    safe = Value(e.b.select(e.b.fcmp_ordered("==", big.ir, ir.Constant(big.ir.type, 0.0)),
                            ir.Constant(big.ir.type, 1.0), big.ir), big.dtype)
    q = e.div(small, safe)
    r = e.mul(big, e.math("sqrt", e.add(_real(e, 1.0, q), e.mul(q, q))))
    # an infinite part makes |z| infinite even when the other is NaN (C99's cabs)
    inf = e.b.or_(_is_inf(e, ar), _is_inf(e, ai))
    return Value(e.b.select(inf, ir.Constant(r.ir.type, float("inf")), r.ir), r.dtype)


def _is_inf(e, x: Value) -> ir.Value:
    return e.b.fcmp_ordered("==", e.abs(x).ir, ir.Constant(x.ir.type, float("inf")))


def compare(e, direction: str, a: Value, b: Value) -> Value:
    (ar, ai), (br, bi) = parts(e, a), parts(e, b)
    if direction == "EQ":
        return Value(e.b.and_(e.compare("EQ", ar, br).ir, e.compare("EQ", ai, bi).ir), D.bool_)
    if direction == "NE":
        return Value(e.b.or_(e.compare("NE", ar, br).ir, e.compare("NE", ai, bi).ir), D.bool_)
    raise ValueError(f"compare {direction}: complex numbers are not ordered")


def convert(e, x: Value, dtype: D.DType) -> Value:
    """To complex: the real part converted, imaginary 0 (or both parts converted); from
    complex: the real part (NumPy's astype), or != 0 for bool."""
    if x.dtype.is_complex and dtype.is_complex:
        re, im = parts(e, x)
        part = D.real_dtype(dtype)
        return make(e, e.convert(re, part), e.convert(im, part), dtype)
    if dtype.is_complex:
        part = D.real_dtype(dtype)
        re = e.convert(x, part)
        return make(e, re, _real(e, 0.0, re), dtype)
    re, im = parts(e, x)
    if dtype is D.bool_:
        nz = e.b.or_(e.convert(re, D.bool_).ir, e.convert(im, D.bool_).ir)
        return Value(nz, D.bool_)
    return e.convert(re, dtype)


def identity(kind: str, dtype: D.DType) -> Value:
    from .llvm_types import constant
    return Value(constant(dtype, {"sum": 0, "prod": 1}[kind]), dtype)


def math(e, name: str, z: Value) -> Value:
    """Math op `name` of a complex z: the function its stanza's `math_code.complex` names."""
    code = PRIMITIVES[name].math_code if name in PRIMITIVES else None
    if code is None or code.complex is None:
        raise ValueError(f"{name}: not defined for complex {z.dtype.name} (complex math: "
                         f"{', '.join(_with_complex_code())})")
    return MathCode.code(code.complex)(e, z)


def _with_complex_code() -> list:
    return sorted(n for n, p in PRIMITIVES.items()
                  if p.math_code is not None and p.math_code.complex is not None)


_PI = 3.141592653589793

# ---- helpers for the special values (C99 Annex G, as NumPy and the array API give them) --

def _k(x: float, like: Value) -> Value:
    return Value(ir.Constant(like.ir.type, x), like.dtype)


def _pick(e, cond: ir.Value, a: Value, b: Value) -> Value:
    return Value(e.b.select(cond, a.ir, b.ir), a.dtype)


def _is_nan(e, x: Value) -> ir.Value:
    return e.b.fcmp_unordered("uno", x.ir, x.ir)


def _not_finite(e, x: Value) -> ir.Value:
    return e.b.fcmp_unordered(">=", e.abs(x).ir, ir.Constant(x.ir.type, float("inf")))


def _eq(e, x: Value, c: float) -> ir.Value:
    return e.b.fcmp_ordered("==", x.ir, ir.Constant(x.ir.type, c))


def _copysign(e, mag: Value, sign_of: Value) -> Value:
    """|mag| with the sign of `sign_of` (its sign bit: -0.0 counts as negative)."""
    bits = ir.IntType(64 if isinstance(mag.ir.type, ir.DoubleType) else 32)
    neg = e.b.icmp_signed("<", e.b.bitcast(sign_of.ir, bits), ir.Constant(bits, 0))
    m = e.abs(mag)
    return _pick(e, neg, e.neg(m), m)


def _fix(e, out: tuple, rules: list) -> tuple:
    """Apply (condition, (re, im)) rules in order: the first that holds wins."""
    re, im = out
    for cond, (r, i) in reversed(rules):
        re, im = _pick(e, cond, r, re), _pick(e, cond, i, im)
    return re, im


# ---- exp, expm1, the hyperbolic functions --------------------------------------------

def exp(e, z: Value) -> Value:
    re, im = parts(e, z)
    m = e.math("exponential", re)
    out = (e.mul(m, e.math("cosine", im)), e.mul(m, e.math("sine", im)))
    return make(e, *_exp_special(e, re, im, out, m, _k(0.0, re)), z.dtype)


def _exp_special(e, re, im, out, m, low):
    """exp(x + 0i) = exp(x) + 0i (also for x = inf, NaN); exp(-inf + i(inf|NaN)) = low + 0i
    (0 for exp, -1 for expm1); exp(+inf + i(inf|NaN)) = inf + NaN i."""
    bad_im = _not_finite(e, im)
    return _fix(e, out, [
        (_eq(e, im, 0.0), (m, im)),
        (e.b.and_(_eq(e, re, float("-inf")), bad_im), (low, _copysign(e, _k(0.0, re), im))),
        (e.b.and_(_eq(e, re, float("inf")), bad_im), (re, _k(float("nan"), re))),
    ])


def expm1(e, z: Value) -> Value:
    """NumPy's formula: expm1(x) cos y - 2 sin^2(y/2) + i exp(x) sin y (no cancellation
    near 0)."""
    re, im = parts(e, z)
    m1 = e.math("exponential_minus_one", re)
    h = e.math("sine", e.mul(im, _k(0.5, im)))
    out = (e.sub(e.mul(m1, e.math("cosine", im)), e.mul(_k(2.0, h), e.mul(h, h))),
           e.mul(e.math("exponential", re), e.math("sine", im)))
    return make(e, *_exp_special(e, re, im, out, m1, _k(-1.0, re)), z.dtype)


def _hyperbolic(e, z: Value, first: str, second: str, zero_rule: Callable,
                even: bool) -> Value:
    """sinh: (sinh x cos y, cosh x sin y); cosh (`even`): (cosh x cos y, sinh x sin y); the
    special values where a 0 times an inf or NaN gave NaN."""
    re, im = parts(e, z)
    out = (e.mul(e.math(first, re), e.math("cosine", im)),
           e.mul(e.math(second, re), e.math("sine", im)))
    bad_im = _not_finite(e, im)
    return make(e, *_fix(e, out, [
        (_eq(e, im, 0.0), (e.math(first, re),
                           _pick(e, _is_nan(e, out[1]), e.mul(im, _copysign(e, _k(1.0, re), re)),
                                 out[1]))),
        (e.b.and_(_eq(e, re, 0.0), bad_im), zero_rule(re)),
        (e.b.and_(_is_inf(e, re), bad_im), (e.abs(re) if even else re,
                                             _k(float("nan"), re))),
    ]), z.dtype)


def sinh(e, z: Value) -> Value:
    return _hyperbolic(e, z, "sinh", "cosh", lambda re: (re, _k(float("nan"), re)), False)


def cosh(e, z: Value) -> Value:
    return _hyperbolic(e, z, "cosh", "sinh", lambda re: (_k(float("nan"), re), _k(0.0, re)),
                       True)


def tanh(e, z: Value) -> Value:
    """tanh(a + bi) = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b); for |a| > 20 (where cosh
    overflows first) sign(a) + 2 sin 2b exp(-2|a|) i."""
    re, im = parts(e, z)
    a2, b2 = e.add(re, re), e.add(im, im)
    d = e.add(e.math("cosh", a2), e.math("cosine", b2))
    s2 = e.math("sine", b2)
    out = (e.div(e.math("sinh", a2), d), e.div(s2, d))
    big = e.b.fcmp_ordered(">", e.abs(re).ir, ir.Constant(re.ir.type, 20.0))
    one = _copysign(e, _k(1.0, re), re)
    tail = e.mul(e.mul(_k(2.0, re), s2), e.math("exponential", e.neg(e.abs(a2))))
    return make(e, *_fix(e, out, [
        (_eq(e, im, 0.0), (e.math("tanh", re), im)),
        # re = +-inf: +-1 + 0i signed as y (the array API's table; C99 and NumPy sign the
        # zero as sin 2y, which the table does not)
        (_is_inf(e, re), (one, _copysign(e, _k(0.0, re), im))),
        (e.b.and_(big, e.b.not_(_not_finite(e, im))), (one, tail)),
        (e.b.and_(_eq(e, re, 0.0), _not_finite(e, im)), (re, _k(float("nan"), re))),
    ]), z.dtype)


# ---- log, log1p, sqrt, sin, cos -------------------------------------------------------

def log(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.math("log", abs_(e, z)), e.math("atan2", im, re), z.dtype)


def log1p(e, z: Value) -> Value:
    """log(1 + z) as NumPy computes it: log|1 + z| + i atan2(y, 1 + x); for |z| < 1/2 the
    modulus through log1p(x (2 + x) + y^2) / 2, which keeps the digits of a small z."""
    re, im = parts(e, z)
    one_x = e.add(_k(1.0, re), re)
    far = e.math("log", abs_(e, make(e, one_x, im, z.dtype)))
    near = e.mul(_k(0.5, re), e.math("log_plus_one",
                                     e.add(e.mul(re, e.add(_k(2.0, re), re)), e.mul(im, im))))
    small = e.b.fcmp_ordered("<", abs_(e, z).ir, ir.Constant(re.ir.type, 0.5))
    return make(e, _pick(e, small, near, far), e.math("atan2", im, one_x), z.dtype)


def sqrt(e, z: Value) -> Value:
    """t = sqrt((|z| + |re|) / 2); re >= 0: (t, im / 2t), else (|im| / 2t, copysign(t, im))."""
    re, im = parts(e, z)
    bb = e.b
    t = e.math("sqrt", e.mul(e.add(abs_(e, z), e.abs(re)), _real(e, 0.5, re)))
    two_t = e.add(t, t)
    zero_t = bb.fcmp_ordered("==", t.ir, ir.Constant(t.ir.type, 0.0))
    safe = Value(bb.select(zero_t, ir.Constant(t.ir.type, 1.0), two_t.ir), t.dtype)
    q_im = e.div(im, safe)
    q_abs = e.div(e.abs(im), safe)
    signed_t = _copysign(e, t, im)      # the sign bit: sqrt(-4 - 0i) = -2i (C99, NumPy)
    pos = bb.fcmp_unordered(">=", re.ir, ir.Constant(re.ir.type, 0.0))
    out_re = Value(bb.select(pos, t.ir, q_abs.ir), t.dtype)
    out_im = Value(bb.select(pos, q_im.ir, signed_t.ir), t.dtype)
    # sqrt(x +- i inf) = inf +- i inf, even for x = NaN (C99)
    inf_im = _is_inf(e, im)
    return make(e, _pick(e, inf_im, _k(float("inf"), re), out_re), _pick(e, inf_im, im, out_im),
                z.dtype)


def sin(e, z: Value) -> Value:
    """sin z = -i sinh(i z): sinh's special values carry over (C99 defines them so)."""
    return _times_minus_i(e, sinh(e, _times_i(e, z)))


def cos(e, z: Value) -> Value:
    """cos z = cosh(i z)."""
    return cosh(e, _times_i(e, z))


# ---- inverse trigonometric and hyperbolic functions ------------------------------------
# Kahan's formulas ("Branch cuts for complex elementary functions", 1987): built from two
# complex square roots, the real atan2 and asinh, they keep the branch cuts' signed zeros
# and square nothing, so they neither overflow nor cancel where the textbook logarithms do.

def _roots(e, z: Value, shift: float) -> tuple:
    """sqrt(shift - z)'s and sqrt(shift + z)'s parts for shift = 1 (with -z negating both
    parts, so a signed zero picks its side of the cut), or sqrt(z - 1), sqrt(z + 1) for -1."""
    re, im = parts(e, z)
    one = _k(1.0, re)
    if shift > 0:
        a = sqrt(e, make(e, e.sub(one, re), e.neg(im), z.dtype))
    else:
        a = sqrt(e, make(e, e.sub(re, one), im, z.dtype))
    b = sqrt(e, make(e, e.add(one, re), im, z.dtype))
    return parts(e, a), parts(e, b)


def acos(e, z: Value) -> Value:
    """acos z = 2 atan2(re a, re b) + i asinh(im(conj(b) a)), a = sqrt(1 - z), b = sqrt(1 + z)."""
    re, im = parts(e, z)
    (ar, ai), (br, bi) = _roots(e, z, 1.0)
    out = (e.mul(_k(2.0, re), e.math("atan2", ar, br)),
           e.math("asinh", e.sub(e.mul(br, ai), e.mul(bi, ar))))
    return make(e, *_fix(e, out, _acos_special(e, re, im)), z.dtype)


def _acos_special(e, re, im) -> list:
    """Where an infinite part makes Kahan's products inf * 0 or inf - inf (Annex G)."""
    nan, pi = _k(float("nan"), re), _k(_PI, re)
    minus_inf_im = _copysign(e, _k(float("inf"), re), e.neg(im))
    inf_re, inf_im = _is_inf(e, re), _is_inf(e, im)
    # x = +-inf, y finite: (0 or pi) - i inf sign(y); both infinite: pi/4 or 3pi/4
    corner = _pick(e, e.b.fcmp_ordered(">", re.ir, ir.Constant(re.ir.type, 0.0)),
                   _k(0.25 * _PI, re), _k(0.75 * _PI, re))
    edge = _pick(e, e.b.fcmp_ordered(">", re.ir, ir.Constant(re.ir.type, 0.0)),
                 _k(0.0, re), pi)
    return [
        (e.b.and_(inf_re, _is_nan(e, im)), (nan, _k(float("-inf"), re))),
        (e.b.and_(_is_nan(e, re), inf_im), (nan, minus_inf_im)),
        (e.b.and_(inf_re, inf_im), (corner, minus_inf_im)),
        (inf_re, (edge, minus_inf_im)),
        (e.b.and_(inf_im, e.b.not_(_is_nan(e, re))), (_k(0.5 * _PI, re), minus_inf_im)),
        (e.b.and_(_eq(e, re, 0.0), _is_nan(e, im)), (_k(0.5 * _PI, re), nan)),
    ]


def acosh(e, z: Value) -> Value:
    """acosh z = asinh(re(conj(a) b)) + 2i atan2(im a, re b), a = sqrt(z - 1), b = sqrt(z + 1);
    its special values are acos's turned a quarter: acosh z = +-i acos z."""
    re, im = parts(e, z)
    (ar, ai), (br, bi) = _roots(e, z, -1.0)
    out = (e.math("asinh", e.add(e.mul(ar, br), e.mul(ai, bi))),
           e.mul(_k(2.0, re), e.math("atan2", ai, br)))
    # acosh z = i acos z where im z >= 0 (conjugate below): an infinite real part and
    # acos's real part signed as y
    rules = [(c, (e.abs(i), _copysign(e, r, im))) for c, (r, i) in _acos_special(e, re, im)]
    return make(e, *_fix(e, out, rules), z.dtype)


def asin(e, z: Value) -> Value:
    """asin z = atan2(x, re(a b)) + i asinh(im(conj(a) b)), a = sqrt(1 - z), b = sqrt(1 + z)."""
    re, im = parts(e, z)
    (ar, ai), (br, bi) = _roots(e, z, 1.0)
    out = (e.math("atan2", re, e.sub(e.mul(ar, br), e.mul(ai, bi))),
           e.math("asinh", e.sub(e.mul(ar, bi), e.mul(ai, br))))
    # asin z = pi/2 - acos z, an odd function: acos's special values turned, signed as z
    rules = [(c, (_copysign(e, e.sub(_k(0.5 * _PI, re), r), re), _copysign(e, i, im)))
             for c, (r, i) in _acos_special(e, re, im)]
    return make(e, *_fix(e, out, rules), z.dtype)


def _times_i(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.neg(im), re, z.dtype)


def _times_minus_i(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, im, e.neg(re), z.dtype)


def asinh(e, z: Value) -> Value:
    """asinh z = -i asin(i z)."""
    return _times_minus_i(e, asin(e, _times_i(e, z)))


def atanh(e, z: Value) -> Value:
    """atanh z = log1p(4x / ((1 - x)^2 + y^2)) / 4 + i atan2(2y, (1 - x)(1 + x) - y^2) / 2;
    for |z| > 2^26 (where the squares would lose or overflow) 1/z + i sign(y) pi/2."""
    re, im = parts(e, z)
    one = _k(1.0, re)
    omx = e.sub(one, re)
    d = e.add(e.mul(omx, omx), e.mul(im, im))
    out = (e.mul(_k(0.25, re), e.math("log_plus_one", e.div(e.mul(_k(4.0, re), re), d))),
           e.mul(_k(0.5, re), e.math("atan2", e.add(im, im),
                                     e.sub(e.mul(omx, e.add(one, re)), e.mul(im, im)))))
    inv_r, inv_i = parts(e, div(e, make(e, one, _k(0.0, re), z.dtype), z))
    half_pi = _copysign(e, _k(0.5 * _PI, re), im)
    big = e.b.fcmp_ordered(">", abs_(e, z).ir, ir.Constant(re.ir.type, 2.0 ** 26))
    nan = _k(float("nan"), re)
    return make(e, *_fix(e, out, [
        (e.b.or_(_is_inf(e, re), _is_inf(e, im)),
         (_copysign(e, _k(0.0, re), re), _pick(e, _is_nan(e, im), nan, half_pi))),
        (e.b.and_(_eq(e, re, 0.0), _is_nan(e, im)), (re, nan)),
        (big, (inv_r, e.add(half_pi, inv_i))),
    ]), z.dtype)


def atan(e, z: Value) -> Value:
    """atan z = -i atanh(i z)."""
    return _times_minus_i(e, atanh(e, _times_i(e, z)))


def sign(e, z: Value) -> Value:
    """z / |z|, and 0 for 0 (NumPy 2's sign of a complex number); with an infinite part,
    the direction of its infinity (sign(inf + 1i) = 1)."""
    re, im = parts(e, z)
    inf = e.b.xor(_is_inf(e, re), _is_inf(e, im))      # both infinite: NaN, as NumPy
    unit = lambda x: _copysign(e, _pick(e, _is_inf(e, x), _k(1.0, x), _k(0.0, x)), x)
    re, im = _pick(e, inf, unit(re), re), _pick(e, inf, unit(im), im)
    r = abs_(e, make(e, re, im, z.dtype))
    zero = _eq(e, r, 0.0)
    safe = _pick(e, zero, _k(1.0, r), r)
    nought = _k(0.0, re)
    return make(e, _pick(e, zero, nought, e.div(re, safe)), _pick(e, zero, nought, e.div(im, safe)),
                z.dtype)


def power(e, a: Value, b: Value) -> Value:
    """a ** b = exp(b log a), with 0 ** b = 0 for re(b) > 0 and anything ** 0 = 1."""
    out = exp(e, mul(e, b, log(e, a)))
    ar, ai = parts(e, a)
    br, bi = parts(e, b)
    zero = ir.Constant(ar.ir.type, 0.0)
    a_zero = e.b.and_(e.b.fcmp_ordered("==", ar.ir, zero), e.b.fcmp_ordered("==", ai.ir, zero))
    b_zero = e.b.and_(e.b.fcmp_ordered("==", br.ir, zero), e.b.fcmp_ordered("==", bi.ir, zero))
    from .llvm_types import constant
    one, nought = constant(a.dtype, 1), constant(a.dtype, 0)
    out_ir = e.b.select(a_zero, nought, out.ir)
    return Value(e.b.select(b_zero, one, out_ir), a.dtype)

