"""fft: the discrete Fourier transform over the trailing axes, as XLA's Fft op.

`fft_type` is FFT (complex -> complex), IFFT (its inverse, scaled by 1/N), RFFT (real ->
the n//2 + 1 non-negative frequencies of the last axis) or IRFFT (those back to n reals,
scaled by 1/N); `fft_length` gives the transform's lengths over the last
len(fft_length) axes (IRFFT's last one is the real output's). A library call: pocketfft
through NumPy on the CPU and in the interpreter; cuFFT on the CUDA device's stream
(devices/cuda/cuda_fft.py, which the device calls by this primitive's name). Normalizations other than XLA's are scalings
the ops add (ops/fft.py).

The vjps follow the conjugate-Wirtinger convention: for a complex-linear y = F x the
cotangent is F^H g (FFT <-> N IFFT); RFFT's is the real part of N IFFT of g zero-padded to
full length; IRFFT's is RFFT of g over N, doubled on the frequencies that stand for two.
"""
from __future__ import annotations

import numpy as np

from ..graph import builders as A
from ..hlo import dtypes as D
from ..transforms import batching as B
from ..primitive import LIBRARY, LibraryCall, apply, fail, primitive
from . import matrix_graph as M

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")


def _size(lengths) -> int:
    return int(np.prod(lengths, dtype=np.int64))


def _fft_infer(operands, fft_type, fft_length):
    (x,) = operands
    lengths = tuple(int(n) for n in fft_length)
    k = len(lengths)
    if fft_type not in FFT_TYPES:
        fail("fft", operands, f"fft_type must be one of {FFT_TYPES}, got {fft_type!r}")
    if not 1 <= k <= x.ndim or any(n < 0 for n in lengths):
        fail("fft", operands, f"fft_length {lengths} must name 1 to {x.ndim} trailing axes")
    lead, tail = x.shape[:-k], x.shape[-k:]
    if fft_type == "RFFT":
        if x.dtype not in (D.float32, D.float64) or tail != lengths:
            fail("fft", operands, f"RFFT needs float32/float64 input ending in {lengths}",
                 TypeError if x.dtype not in (D.float32, D.float64) else ValueError)
        return lead + lengths[:-1] + (lengths[-1] // 2 + 1,), D.complex_dtype(x.dtype)
    if not x.dtype.is_complex:
        fail("fft", operands, f"{fft_type} needs complex input", TypeError)
    if fft_type == "IRFFT":
        want = lengths[:-1] + (lengths[-1] // 2 + 1,)
        if tail != want:
            fail("fft", operands, f"IRFFT of lengths {lengths} needs input ending in {want}")
        return lead + lengths, D.real_dtype(x.dtype)
    if tail != lengths:
        fail("fft", operands, f"{fft_type} of lengths {lengths} needs input ending in {lengths}")
    return x.shape, x.dtype


_FUNCTIONS = {"FFT": np.fft.fftn, "IFFT": np.fft.ifftn, "RFFT": np.fft.rfftn,
              "IRFFT": np.fft.irfftn}
_ONE_AXIS = {"FFT": np.fft.fft, "IFFT": np.fft.ifft, "RFFT": np.fft.rfft, "IRFFT": np.fft.irfft}


def _fft_ref(x, fft_type, fft_length):
    lengths = tuple(int(n) for n in fft_length)
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    shape, dtype = _fft_infer((_Typed(x),), fft_type, fft_length)
    if 0 in lengths or 0 in x.shape:
        return np.zeros(shape, dtype.np)
    return np.asarray(_FUNCTIONS[fft_type](x, s=lengths, axes=axes)).astype(dtype.np)


def _fft_into(out, x, fft_type, fft_length):
    """The reference written by pocketfft straight into `out` (NumPy 2's `out=`: no
    result array to allocate and copy; NumPy 1 computes and copies)."""
    lengths = tuple(int(n) for n in fft_length)
    if 0 in lengths or 0 in x.shape or _NUMPY_1:
        out[...] = _fft_ref(x, fft_type, fft_length)
        return
    if len(lengths) == 1:          # NumPy's one-axis functions skip the n-d bookkeeping
        _ONE_AXIS[fft_type](x, n=lengths[0], axis=-1, out=out)
        return
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    _FUNCTIONS[fft_type](x, s=lengths, axes=axes, out=out)


_NUMPY_1 = int(np.__version__.split(".")[0]) < 2


def _batch_axis0(x, fft_type, fft_length) -> bool:
    return x.ndim > len(fft_length)


class _Typed:
    def __init__(self, a: np.ndarray) -> None:
        self.shape, self.dtype, self.ndim = a.shape, D.from_numpy(a.dtype), a.ndim


def _scale(x, c: float):
    return A.mul(x, A.full(c, x.shape, x.dtype)) if c != 1 else x


def _fft_vjp(g, out, x, fft_type, fft_length):
    lengths = tuple(int(n) for n in fft_length)
    n = _size(lengths)
    if fft_type == "FFT":
        return (_scale(apply("fft", g, fft_type="IFFT", fft_length=lengths), float(n)),)
    if fft_type == "IFFT":
        return (_scale(apply("fft", g, fft_type="FFT", fft_length=lengths), 1.0 / max(n, 1)),)
    if fft_type == "RFFT":
        full = M.pad_last(g, g.ndim - 1, lengths[-1])
        back = apply("fft", full, fft_type="IFFT", fft_length=lengths)
        return (_scale(apply("real", back), float(n)),)
    # IRFFT: rfft(g) / N, counted twice for the frequencies whose mirror image is implied
    spec = apply("fft", g, fft_type="RFFT", fft_length=lengths)
    m = spec.shape[-1]
    last = lengths[-1]
    k = A.iota(spec.shape, D.int64, spec.ndim - 1)
    single = A.compare(k, A.full(0, spec.shape, D.int64), "EQ")
    if last % 2 == 0:
        single = apply("or", single, A.compare(k, A.full(m - 1, spec.shape, D.int64), "EQ"))
    weight = A.select(single, A.full(1.0 / max(n, 1), spec.shape, D.real_dtype(spec.dtype)),
                      A.full(2.0 / max(n, 1), spec.shape, D.real_dtype(spec.dtype)))
    return (A.mul(spec, A.convert(weight, spec.dtype)),)


fft = primitive("fft", LIBRARY, _fft_infer, _fft_ref, attrs=("fft_type", "fft_length"),
                doc="XLA's Fft over the trailing len(fft_length) axes; IFFT and IRFFT scale "
                    "by 1/N.", vjp=_fft_vjp, holomorphic=False,
                library=LibraryCall("host", into=_fft_into, batch_axis0=_batch_axis0),
                batch=B.elementwise)     # trailing axes: a leading batch axis is one more
