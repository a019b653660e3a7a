"""Complex numbers' parts: real, imag, conj, and complex (two reals into one complex).

Their vjps follow the conjugate-Wirtinger convention (PyTorch's): the cotangent of z is
dL/dx + i dL/dy, so real(z) passes g back as g + 0i, imag(z) as 0 + gi.
"""
from __future__ import annotations

import numpy as np

from ..graph import builders as A
from ..hlo import dtypes as D
from ..transforms import batching as B
from ..primitive import ELEMENTWISE, apply, elementwise_infer, dtype_rule, fail, primitive

complex_only = dtype_rule(D.COMPLEX, "complex")
_part_infer = elementwise_infer("real", complex_only)


def _real_infer(operands):
    shape, dtype = _part_infer(operands)
    return shape, D.real_dtype(dtype)


_real_infer.dtypes = D.COMPLEX


def _zero(x):
    return A.zeros_like(x)


def _real_vjp(g, out, z):
    return (apply("complex", g, _zero(g)),)


def _imag_vjp(g, out, z):
    return (apply("complex", _zero(g), g),)


def _conj_vjp(g, out, z):
    return (apply("conj", g),)


real = primitive("real", ELEMENTWISE, _real_infer, lambda z: np.ascontiguousarray(z.real),
                 emit=lambda e, z: e.complex_part(z, 0), vjp=_real_vjp,
                 batch=B.elementwise, holomorphic=False)
imag = primitive("imag", ELEMENTWISE, _real_infer, lambda z: np.ascontiguousarray(z.imag),
                 emit=lambda e, z: e.complex_part(z, 1), vjp=_imag_vjp,
                 batch=B.elementwise, holomorphic=False)
conj = primitive("conj", ELEMENTWISE, _part_infer, np.conj, emit=lambda e, z: e.conj(z),
                 vjp=_conj_vjp, batch=B.elementwise, holomorphic=False)


def _complex_infer(operands):
    re, im = operands
    if re.dtype is not im.dtype or re.dtype not in (D.float32, D.float64):
        fail("complex", operands, "needs two float32 or two float64 operands", TypeError)
    if re.shape != im.shape:
        fail("complex", operands, "operands of an elementwise op must have equal shapes")
    return re.shape, D.complex_dtype(re.dtype)


_complex_infer.dtypes = (D.float32, D.float64)


def _complex_ref(re, im):
    out = np.empty(re.shape, D.complex_dtype(D.from_numpy(re.dtype)).np)
    out.real, out.imag = re, im
    return out


def _complex_vjp(g, out, re, im):
    return apply("real", g), apply("imag", g)


complex_ = primitive("complex", ELEMENTWISE, _complex_infer, _complex_ref,
                     emit=lambda e, re, im: e.make_complex(re, im), doc="re + i im.", vjp=_complex_vjp,
                     batch=B.elementwise,
                     holomorphic=False)
