"""lazyarray.fft against numpy.fft (through the op harness), gradients against complex
finite differences, and the errors."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I, Module
from lazyarray.compiler.primitive import PRIMITIVES
from lazyarray.devices.cpu.cpu import CPUDevice
from harness import OpCase, check_case

import gradcheck

F = la.fft
REAL = (D.float32, D.float64)
CPLX = D.COMPLEX
NORMS = [{}, {"norm": "ortho"}, {"norm": "forward"}]


def _case(name, dtypes, shapes, kwargs, tol=20):
    return OpCase(name, getattr(np.fft, name), fn=getattr(F, name), dtypes=dtypes,
                  shapes=shapes, kwargs=kwargs, tol=tol)


ONE_AXIS = [{}, {"n": 5}, {"n": 12, "axis": 0}, {"norm": "ortho"}, {"norm": "forward", "axis": 0}]
TWO = [{}, {"s": (3, 6)}, {"axes": (0, 1)}, {"norm": "ortho"}, {"s": (5, 2), "axes": (1, 0)}]
MANY = [{}, {"axes": (0,)}, {"s": (3, 4)}, {"s": (5, 6), "axes": (1, 0)}, {"norm": "ortho"}]

CASES = [
    _case("fft", CPLX + REAL + (D.int32,), [((3, 8),), ((7,),)], ONE_AXIS),
    _case("ifft", CPLX + REAL, [((3, 8),), ((7,),)], ONE_AXIS),
    _case("fftn", CPLX, [((3, 4),), ((2, 3, 4),)], MANY),
    _case("ifftn", CPLX, [((3, 4),), ((2, 3, 4),)], MANY),
    _case("rfft", REAL, [((3, 8),), ((7,),)], ONE_AXIS),
    _case("irfft", CPLX, [((3, 5),), ((6,),)], ONE_AXIS),
    _case("rfftn", REAL, [((4, 6),), ((2, 3, 4),)], MANY),
    _case("irfftn", CPLX, [((4, 5),), ((2, 3, 4),)], [{}, {"s": (3, 6)}, {"axes": (0,)}]),
    _case("hfft", CPLX, [((3, 5),)], ONE_AXIS),
    _case("fft2", CPLX + REAL, [((3, 4),), ((2, 3, 4),)], TWO),
    _case("ifft2", CPLX, [((3, 4),), ((2, 3, 4),)], TWO),
    _case("rfft2", REAL, [((4, 6),), ((2, 3, 4),)], TWO),
    _case("irfft2", CPLX, [((4, 5),), ((2, 3, 4),)], [{}, {"s": (3, 6)}, {"axes": (0, 2)}]),
    _case("ihfft", REAL, [((3, 8),), ((7,),)], ONE_AXIS),
    OpCase("fftshift", np.fft.fftshift, fn=F.fftshift, dtypes=REAL + CPLX + (D.int32,),
           shapes=[((3, 4),), ((5,),)], kwargs=[{}, {"axes": 0}, {"axes": (1,)}]),
    OpCase("ifftshift", np.fft.ifftshift, fn=F.ifftshift, dtypes=REAL + CPLX,
           shapes=[((3, 4),), ((5,),)], kwargs=[{}, {"axes": 0}]),
]


def _np_fft_dtype(case):
    """NumPy computes integer input in float64; lazyarray in the default float32."""
    return case


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_numpy_fft(case, device):
    if D.int32 in case.dtypes and case.name == "fft":
        case = OpCase("fft", lambda x, **kw: np.fft.fft(x.astype(np.float32)
                                                        if x.dtype.kind == "i" else x, **kw),
                      fn=F.fft, dtypes=case.dtypes, shapes=case.shapes, kwargs=case.kwargs,
                      tol=case.tol)
    check_case(case, case.dtypes, device)


@pytest.mark.parametrize("n,d", [(1, 1.0), (7, 0.5), (8, 2.0)])
def test_frequencies_match_numpy(n, d, device):
    np.testing.assert_allclose(F.fftfreq(n, d, dtype=la.float64, device=device).numpy(),
                               np.fft.fftfreq(n, d), rtol=1e-15)
    np.testing.assert_allclose(F.rfftfreq(n, d, dtype=la.float64, device=device).numpy(),
                               np.fft.rfftfreq(n, d), rtol=1e-15)
    assert F.fftfreq(n, device=device).dtype == la.float32


def test_float32_stays_single_precision():
    x = la.asarray(np.ones((4, 8), np.float32))
    assert F.rfft(x).dtype == la.complex64
    assert F.irfft(F.rfft(x)).dtype == la.float32
    assert F.fft(la.asarray(np.ones(4))).dtype == la.complex128


def test_round_trips():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 10))
    np.testing.assert_allclose(F.irfft(F.rfft(la.asarray(x)), n=10).numpy(), x, atol=1e-12)
    np.testing.assert_allclose(F.ifftn(F.fftn(la.asarray(x + 0j))).numpy(), x, atol=1e-12)


_rng = np.random.default_rng(1)
_X = _rng.standard_normal((3, 8))
_Z = _X + 1j * _rng.standard_normal((3, 8))
_H = _rng.standard_normal((3, 5)) + 1j * _rng.standard_normal((3, 5))

GRADIENTS = {
    "fft": (F.fft, [_Z]), "ifft_n": (lambda a: F.ifft(a, n=6), [_Z]),
    "fftn_ortho": (lambda a: F.fftn(a, norm="ortho"), [_Z]),
    "fft_of_real": (F.fft, [_X]), "rfft": (F.rfft, [_X]), "rfftn": (F.rfftn, [_X]),
    "rfft_forward": (lambda a: F.rfft(a, norm="forward"), [_X]),
    "irfft": (F.irfft, [_H]), "irfft_odd": (lambda a: F.irfft(a, n=9), [_H]),
    "irfftn": (F.irfftn, [_H]), "hfft": (F.hfft, [_H]), "ihfft": (F.ihfft, [_X]),
    "fftshift": (F.fftshift, [_Z]),
    "fft2": (F.fft2, [_Z]), "ifft2_s": (lambda a: F.ifft2(a, s=(2, 6)), [_Z]),
    "rfft2": (F.rfft2, [_X]), "irfft2": (F.irfft2, [_H]),
    "power_spectrum": (lambda a: la.abs(F.rfft(a)) ** 2, [_X]),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradient_against_finite_differences(name, device):
    fn, inputs = GRADIENTS[name]
    gradcheck.check_complex_direction(fn, inputs, device=device)


def test_real_gradient_through_a_spectrum_matches_gradcheck():
    """A real loss of a real input through rfft/irfft: the real-only gradcheck agrees."""
    gradcheck.check_full(lambda a: F.irfft(F.rfft(a) * (1 + 0.5j), n=8), [_X[:1]],
                         device="interpreter")


@pytest.mark.parametrize("call,match", [
    (lambda: F.rfft(la.asarray(_Z)), "rfft: needs real input"),
    (lambda: F.fft(la.asarray(_Z), norm="both"), "norm must be one of"),
    (lambda: F.fft(la.asarray(_Z), n=0), "lengths must be >= 1"),
    (lambda: F.fftn(la.asarray(_Z), s=(3,), axes=(0, 1)), "same length"),
    (lambda: F.fftfreq(0), "positive int"),
    (lambda: F.irfft(la.asarray(np.ones(1, np.complex64))), "output length must be >= 1"),
])
def test_errors_name_the_function(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


@pytest.mark.parametrize("fft_type,shape,lengths,dtype", [
    ("RFFT", (64, 8192), (8192,), np.float64),
    ("FFT", (16, 64, 256), (64, 256), np.complex64),
    ("IRFFT", (64, 4097), (8192,), np.complex128),
])
def test_large_host_fft_is_written_in_place_split_over_the_pool(monkeypatch, fft_type, shape,
                                                                 lengths, dtype):
    """The CPU runs pocketfft straight into the planned buffer, a large batch in slices
    over the pool's threads: the same values as NumPy's."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    prim = PRIMITIVES["fft"]
    calls = []

    def counting(out, *operands, **attrs):
        calls.append(out.shape)
        prim_into(out, *operands, **attrs)
    prim_into = prim.library.into
    monkeypatch.setattr(prim, "library", dataclasses.replace(prim.library, into=counting))
    param = I("parameter", (), x.shape, D.from_numpy(x.dtype), {"number": 0})
    attrs = {"fft_type": fft_type, "fft_length": lengths}
    out_shape, out_dtype = prim.infer((param,), **attrs)
    m = Module("fft", [param, I("fft", (0,), out_shape, out_dtype, attrs)], [1])
    got = CPUDevice(lambda: {"num_threads": 2, "cache_dir": "off"}).compile(m).run([x])[0]
    assert len(calls) == 2 and sum(c[0] for c in calls) == shape[0], calls
    np.testing.assert_allclose(got, prim.reference(x, **attrs), rtol=1e-5, atol=1e-4)
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    want = {"RFFT": np.fft.rfftn, "FFT": np.fft.fftn, "IRFFT": np.fft.irfftn}[fft_type](
        x, s=lengths, axes=axes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3 * np.abs(want).max())
