"""log and cos(2 pi u) from operations IEEE 754 rounds the same way everywhere.

The random generator's bits are integer HLO, exact on every device, but turning them into
normals needs a logarithm and a cosine, and each device computes those its own way (LLVM's
or libdevice's polynomial, NumPy's SIMD loops): the same seed gave numbers a few ulp apart
on "cpu" and "interpreter". These versions use only add, subtract, multiply, divide, bit
casts, integer shifts, compares and selects, each correctly rounded by IEEE 754 on the CPU,
in NumPy and in PTX's `.rn` forms (LLVM contracts no multiply-add without a `contract`
flag, and the simplifier applies no value-changing rewrite), so one seed gives the same
bits on every device. They serve the generator's domains only: `log` of a positive normal
number, `cos_two_pi` of u in [0, 1). Accuracy: a few ulp, in float32 or float64.
"""
from __future__ import annotations

import math

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .promotion import broadcast_to, constant

# (bits dtype, signed dtype, mantissa bits, exponent bias) of each working float
_LAYOUT = {D.float32: (D.uint32, D.int32, 23, 127), D.float64: (D.uint64, D.int64, 52, 1023)}

# log(m) = 2 atanh(s), s = (m - 1) / (m + 1): 2 s (1 + s^2/3 + s^4/5 + ...), |s| <= 0.1716;
# terms to below half an ulp of the working precision
_ATANH_TERMS = {D.float32: 5, D.float64: 10}
# cos x and sin x / x on [0, pi/4] as series in x^2, to below half an ulp
_COS_TERMS = {D.float32: 6, D.float64: 9}
_SIN_TERMS = {D.float32: 5, D.float64: 9}

_LN2_HI = 0.693145751953125         # ln 2 split so that e * _LN2_HI is exact for |e| < 2^11
_LN2_LO = 1.4286068203094173e-06    # ln 2 - _LN2_HI

_CONSTANTS: dict = {}


def _c(value: float, dtype: D.DType, shape: tuple) -> Node:
    """A constant kept in the module (structure, not a runtime scalar), broadcast."""
    key = (value, dtype)
    node = _CONSTANTS.get(key)
    if node is None:
        node = _CONSTANTS[key] = constant(np.asarray(value, dtype.np), dtype)
    return broadcast_to(node, shape)


def _horner(z: Node, coefficients: list) -> Node:
    """c0 + z (c1 + z (c2 + ...)), each step rounded on its own."""
    acc = _c(coefficients[-1], z.dtype, z.shape)
    for c in reversed(coefficients[:-1]):
        acc = apply("add", apply("multiply", acc, z), _c(c, z.dtype, z.shape))
    return acc


def log(x: Node) -> Node:
    """ln x for positive normal x (float32 or float64): x = m 2^e with m in [sqrt(1/2),
    sqrt(2)), ln x = e ln 2 + 2 atanh((m - 1) / (m + 1))."""
    udt, idt, mbits, bias = _LAYOUT[x.dtype]
    shape, dt = x.shape, x.dtype
    bits = apply("bitcast_convert", x, dtype=udt)
    exponent = apply("convert", apply("shift_right_logical", bits, _c(mbits, udt, shape)),
                     dtype=idt)
    mantissa = apply("or", apply("and", bits, _c((1 << mbits) - 1, udt, shape)),
                     _c(bias << mbits, udt, shape))
    m = apply("bitcast_convert", mantissa, dtype=dt)                     # in [1, 2)
    high = apply("compare", m, _c(math.sqrt(2.0), dt, shape), direction="GT")
    m = apply("select", high, apply("multiply", m, _c(0.5, dt, shape)), m)   # exact
    exponent = apply("select", high, apply("add", exponent, _c(1 - bias, idt, shape)),
                     apply("subtract", exponent, _c(bias, idt, shape)))
    f = apply("subtract", m, _c(1.0, dt, shape))                         # exact (Sterbenz)
    s = apply("divide", f, apply("add", f, _c(2.0, dt, shape)))
    series = _horner(apply("multiply", s, s),
                     [1.0 / (2 * k + 1) for k in range(_ATANH_TERMS[dt] + 1)])
    log_m = apply("multiply", apply("add", s, s), series)
    e = apply("convert", exponent, dtype=dt)
    low = apply("add", apply("multiply", e, _c(_LN2_LO, dt, shape)), log_m)
    return apply("add", apply("multiply", e, _c(_LN2_HI, dt, shape)), low)


def cos_two_pi(u: Node) -> Node:
    """cos(2 pi u) for u in [0, 1): reduced exactly by the symmetries of cosine to
    cos or sin of 2 pi c with c in [0, 1/8]."""
    shape, dt = u.shape, u.dtype
    zero, half, quarter = _c(0.0, dt, shape), _c(0.5, dt, shape), _c(0.25, dt, shape)
    wrap = apply("compare", u, half, direction="GE")
    t = apply("select", wrap, apply("subtract", u, _c(1.0, dt, shape)), u)   # [-1/2, 1/2)
    a = apply("abs", t)
    flip = apply("compare", a, quarter, direction="GT")                  # cos(pi - x) = -cos x
    b = apply("select", flip, apply("subtract", half, a), a)             # [0, 1/4], exact
    to_sin = apply("compare", b, _c(0.125, dt, shape), direction="GT")   # cos x = sin(pi/2 - x)
    c = apply("select", to_sin, apply("subtract", quarter, b), b)        # [0, 1/8], exact
    x = apply("multiply", c, _c(2.0 * math.pi, dt, shape))
    z = apply("multiply", x, x)
    cos = _horner(z, [(-1.0) ** k / math.factorial(2 * k) for k in range(_COS_TERMS[dt])])
    sin = apply("multiply", x, _horner(z, [(-1.0) ** k / math.factorial(2 * k + 1)
                                           for k in range(_SIN_TERMS[dt])]))
    value = apply("select", to_sin, sin, cos)
    return apply("select", flip, apply("subtract", zero, value), value)


__all__: list = []      # the generator's helpers, not user functions
