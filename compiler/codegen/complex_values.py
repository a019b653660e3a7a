"""Complex values in the elemental emitter: an LLVM struct {re, im} of two floats (NumPy's
layout, so loads and stores need nothing special), and the arithmetic and math on it,
written with the real operations of the emitter and its target's math table.

The formulas are the textbook ones NumPy's own loops use (division scaled as Smith's
algorithm against overflow; sqrt through |z| by halves; log through hypot and atan2).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .. import dtypes as D
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
    rule = _MATH.get(name)
    if rule is None:
        raise ValueError(f"{name}: not defined for complex {z.dtype.name} (complex math: "
                         f"{', '.join(sorted(_MATH))})")
    return rule(e, z)


def _exp(e, z: Value) -> Value:
    re, im = parts(e, z)
    m = e.math("exponential", re)
    return make(e, e.mul(m, e.math("cosine", im)), e.mul(m, e.math("sine", im)), z.dtype)


def _log(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.math("log", abs_(e, z)), e.math("atan2", im, re), z.dtype)


def _sqrt(e, z: Value) -> Value:
    """t = sqrt((|z| + |re|) / 2); re >= 0: (t, im / 2t), else (|im| / 2t, copysign(t, im))."""
    re, im = parts(e, z)
    bb = e.b
    t = e.math("sqrt", e.mul(e.add(abs_(e, z), e.abs(re)), _real(e, 0.5, re)))
    two_t = e.add(t, t)
    zero_t = bb.fcmp_ordered("==", t.ir, ir.Constant(t.ir.type, 0.0))
    safe = Value(bb.select(zero_t, ir.Constant(t.ir.type, 1.0), two_t.ir), t.dtype)
    q_im = e.div(im, safe)
    q_abs = e.div(e.abs(im), safe)
    neg_t = e.neg(t)
    signed_t = Value(bb.select(bb.fcmp_ordered("<", im.ir, ir.Constant(im.ir.type, 0.0)),
                               neg_t.ir, t.ir), t.dtype)
    pos = bb.fcmp_unordered(">=", re.ir, ir.Constant(re.ir.type, 0.0))
    out_re = Value(bb.select(pos, t.ir, q_abs.ir), t.dtype)
    out_im = Value(bb.select(pos, q_im.ir, signed_t.ir), t.dtype)
    return make(e, out_re, out_im, z.dtype)


def _sin(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.mul(e.math("sine", re), e.math("cosh", im)),
                e.mul(e.math("cosine", re), e.math("sinh", im)), z.dtype)


def _cos(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.mul(e.math("cosine", re), e.math("cosh", im)),
                e.neg(e.mul(e.math("sine", re), e.math("sinh", im))), z.dtype)


def _sinh(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.mul(e.math("sinh", re), e.math("cosine", im)),
                e.mul(e.math("cosh", re), e.math("sine", im)), z.dtype)


def _cosh(e, z: Value) -> Value:
    re, im = parts(e, z)
    return make(e, e.mul(e.math("cosh", re), e.math("cosine", im)),
                e.mul(e.math("sinh", re), e.math("sine", im)), z.dtype)


def _tanh(e, z: Value) -> Value:
    """tanh(a + bi) = (sinh 2a + i sin 2b) / (cosh 2a + cos 2b)."""
    re, im = parts(e, z)
    a2, b2 = e.add(re, re), e.add(im, im)
    d = e.add(e.math("cosh", a2), e.math("cosine", b2))
    return make(e, e.div(e.math("sinh", a2), d), e.div(e.math("sine", b2), d), z.dtype)


def power(e, a: Value, b: Value) -> Value:
    """a ** b = exp(b log a), with 0 ** b = 0 for re(b) > 0 and anything ** 0 = 1."""
    out = _exp(e, mul(e, b, _log(e, a)))
    ar, ai = parts(e, a)
    br, bi = parts(e, b)
    zero = ir.Constant(ar.ir.type, 0.0)
    a_zero = e.b.and_(e.b.fcmp_ordered("==", ar.ir, zero), e.b.fcmp_ordered("==", ai.ir, zero))
    b_zero = e.b.and_(e.b.fcmp_ordered("==", br.ir, zero), e.b.fcmp_ordered("==", bi.ir, zero))
    from .llvm_types import constant
    one, nought = constant(a.dtype, 1), constant(a.dtype, 0)
    out_ir = e.b.select(a_zero, nought, out.ir)
    return Value(e.b.select(b_zero, one, out_ir), a.dtype)


_MATH = {"exponential": _exp, "log": _log, "sqrt": _sqrt, "sine": _sin, "cosine": _cos,
         "sinh": _sinh, "cosh": _cosh, "tanh": _tanh}
