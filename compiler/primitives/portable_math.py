"""portable_log, portable_cos_two_pi: the normal generator's log and cos(2 pi u), the same
bits on every device.

Each device computes `log` and `cosine` its own way (LLVM's or libdevice's polynomial,
NumPy's SIMD loops), a few ulp apart, so Box-Muller normals of one seed differed between
"cpu" and "interpreter". These two use only add, subtract, multiply, divide, bit casts,
shifts, compares and selects, each correctly rounded by IEEE 754 on the CPU, in NumPy
and in PTX's `.rn` forms (LLVM contracts no multiply-add without a `contract` flag).
Each sequence is written once over an arithmetic (`_NumPyArith` for the reference,
`_LLVMArith` for the elemental code), so reference and kernels compute the very same
sequence of roundings. As primitives they fuse like any elementwise op and print as one
line each, not ~60 ops of constants, compares and selects.

Domains (accuracy a few ulp there, in float32 or float64): `portable_log` of a positive
normal number, `portable_cos_two_pi` of u in [0, 1).
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ..graph import builders as A
from ..hlo import dtypes as D
from ..primitive import ELEMENTWISE, apply, dtype_rule, elementwise_infer, primitive
from ..transforms import batching as B

_float32_or_64 = dtype_rule((D.float32, D.float64), "float32 or float64")
# (bits dtype, mantissa bits, exponent bias) of each working float
_LAYOUT = {D.float32: (D.uint32, 23, 127), D.float64: (D.uint64, 52, 1023)}

# log(m) = 2 atanh(s), s = (m - 1) / (m + 1): 2 s (1 + s^2/3 + s^4/5 + ...), |s| <= 0.1716;
# terms to below half an ulp of the working precision
_ATANH_TERMS = {D.float32: 5, D.float64: 10}
# cos x and sin x / x on [0, pi/4] as series in x^2, to below half an ulp
_COS_TERMS = {D.float32: 6, D.float64: 9}
_SIN_TERMS = {D.float32: 5, D.float64: 9}

_LN2_HI = 0.693145751953125         # ln 2 split so that e * _LN2_HI is exact for |e| < 2^11
_LN2_LO = 1.4286068203094173e-06    # ln 2 - _LN2_HI


# ---- the two arithmetics the sequences run on ------------------------------------------

class _NumPyArith:
    """NumPy arrays of one float dtype (float32 stays float32: each op rounds once)."""

    def __init__(self, dtype: D.DType) -> None:
        self.dtype = dtype
        self.f, self.u = dtype.np.type, _LAYOUT[dtype][0].np.type

    def k(self, value: float):
        return self.f(value)

    def ku(self, value: int):
        return self.u(value)

    add, sub, mul, div = np.add, np.subtract, np.multiply, np.divide
    gt, ge, abs = np.greater, np.greater_equal, np.abs
    where = staticmethod(np.where)
    and_, or_ = np.bitwise_and, np.bitwise_or

    def shr(self, bits, n: int):
        return np.right_shift(bits, self.u(n))

    def to_bits(self, x):
        return np.asarray(x, self.f).view(self.u)

    def from_bits(self, bits):
        return np.asarray(bits, self.u).view(self.f)

    def to_float(self, bits):
        return np.asarray(bits).astype(self.f)


class _LLVMArith:
    """The elemental emitter's values (compiler/codegen/elemental.py): the same ops as
    the HLO primitives of those names emit, so the kernels round as the reference does."""

    def __init__(self, e, x) -> None:
        self.e, self.dtype, self.udt = e, x.dtype, _LAYOUT[x.dtype][0]
        self._value, self._float, self._int = type(x), x.ir.type, ir.IntType(self.udt.bits)

    def k(self, value: float):
        exact = float(self.dtype.np.type(value))      # rounded to the dtype, as NumPy's
        return self._value(ir.Constant(self._float, exact), self.dtype)

    def ku(self, value: int):
        return self._value(ir.Constant(self._int, value), self.udt)

    def add(self, a, b):
        return self.e.add(a, b)

    def sub(self, a, b):
        return self.e.sub(a, b)

    def mul(self, a, b):
        return self.e.mul(a, b)

    def div(self, a, b):
        return self.e.div(a, b)

    def gt(self, a, b):
        return self.e.compare("GT", a, b)

    def ge(self, a, b):
        return self.e.compare("GE", a, b)

    def where(self, p, a, b):
        return self.e.select(p, a, b)

    def abs(self, x):
        return self.e.abs(x)

    def and_(self, a, b):
        return self.e.and_(a, b)

    def or_(self, a, b):
        return self.e.or_(a, b)

    def shr(self, bits, n: int):
        return self._value(self.e.b.lshr(bits.ir, self.ku(n).ir), self.udt)

    def to_bits(self, x):
        return self.e.bitcast(x, self.udt)

    def from_bits(self, bits):
        return self.e.bitcast(bits, self.dtype)

    def to_float(self, bits):
        return self.e.convert(bits, self.dtype)


# ---- the sequences, written once --------------------------------------------------------

def _horner(a, z, coefficients: list):
    """c0 + z (c1 + z (c2 + ...)), each step rounded on its own."""
    acc = a.k(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        acc = a.add(a.mul(acc, z), a.k(c))
    return acc


def log_sequence(a, x):
    """ln x for positive normal x: x = m 2^e with m in [sqrt(1/2), sqrt(2)),
    ln x = e ln 2 + 2 atanh((m - 1) / (m + 1))."""
    _, mbits, bias = _LAYOUT[a.dtype]
    bits = a.to_bits(x)
    biased = a.to_float(a.shr(bits, mbits))                   # the exponent field, exact
    m = a.from_bits(a.or_(a.and_(bits, a.ku((1 << mbits) - 1)), a.ku(bias << mbits)))  # [1, 2)
    high = a.gt(m, a.k(math.sqrt(2.0)))
    m = a.where(high, a.mul(m, a.k(0.5)), m)                  # exact
    e = a.where(high, a.add(biased, a.k(1 - bias)), a.sub(biased, a.k(bias)))   # exact
    f = a.sub(m, a.k(1.0))                                    # exact (Sterbenz)
    s = a.div(f, a.add(f, a.k(2.0)))
    series = _horner(a, a.mul(s, s), [1.0 / (2 * k + 1) for k in range(_ATANH_TERMS[a.dtype] + 1)])
    log_m = a.mul(a.add(s, s), series)
    low = a.add(a.mul(e, a.k(_LN2_LO)), log_m)
    return a.add(a.mul(e, a.k(_LN2_HI)), low)


def cos_two_pi_sequence(a, u):
    """cos(2 pi u) for u in [0, 1): reduced exactly by the symmetries of cosine to cos or
    sin of 2 pi c with c in [0, 1/8]."""
    half, quarter = a.k(0.5), a.k(0.25)
    t = a.where(a.ge(u, half), a.sub(u, a.k(1.0)), u)        # [-1/2, 1/2), exact
    r = a.abs(t)
    flip = a.gt(r, quarter)                                   # cos(pi - x) = -cos x
    b = a.where(flip, a.sub(half, r), r)                      # [0, 1/4], exact
    to_sin = a.gt(b, a.k(0.125))                              # cos x = sin(pi/2 - x)
    c = a.where(to_sin, a.sub(quarter, b), b)                 # [0, 1/8], exact
    x = a.mul(c, a.k(2.0 * math.pi))
    z = a.mul(x, x)
    cos = _horner(a, z, [(-1.0) ** k / math.factorial(2 * k) for k in range(_COS_TERMS[a.dtype])])
    sin = a.mul(x, _horner(a, z, [(-1.0) ** k / math.factorial(2 * k + 1)
                                  for k in range(_SIN_TERMS[a.dtype])]))
    value = a.where(to_sin, sin, cos)
    return a.where(flip, a.sub(a.k(0.0), value), value)


# ---- the primitives ---------------------------------------------------------------------

def _reference(sequence):
    def ref(x):
        x = np.asarray(x)
        with np.errstate(all="ignore"):     # outside the domain: meaningless, and silent
            return np.asarray(sequence(_NumPyArith(D.to_dtype(x.dtype)), x), x.dtype)
    return ref


def _emit(sequence):
    return lambda e, x: sequence(_LLVMArith(e, x), x)


def _log_vjp(g, out, x):
    return (A.div(g, x),)


def _cos_two_pi_vjp(g, out, u):
    """d/du cos(2 pi u) = -2 pi sin(2 pi u) (the device's own sine: gradients need no
    bit-identity)."""
    return (A.mul(g, A.scale(apply("sine", A.scale(u, 2.0 * math.pi)), -2.0 * math.pi)),)


def _unary(name: str, sequence, vjp, doc: str):
    return primitive(name, ELEMENTWISE, elementwise_infer(name, _float32_or_64),
                     _reference(sequence), emit=_emit(sequence), costly=True, vjp=vjp,
                     batch=B.elementwise, arity=1, doc=doc)


portable_log = _unary(
    "portable_log", log_sequence, _log_vjp,
    "ln x for positive normal float32/float64 x, from correctly rounded operations only: "
    "the same bits on every device (within 2 ulp).")
portable_cos_two_pi = _unary(
    "portable_cos_two_pi", cos_two_pi_sequence, _cos_two_pi_vjp,
    "cos(2 pi u) for float32/float64 u in [0, 1), from correctly rounded operations only: "
    "the same bits on every device (within 3 eps).")
