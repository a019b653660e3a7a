"""la.fft on the CUDA device through cuFFT: the ctypes binding against the real
libcufft of the nvidia-cufft-cu12 wheel (what runs without a GPU), and the whole device
path — plans, work areas, the stream, the inverse scaling, the complex-to-real copy,
gradients — over the fake CUDA driver and the cuFFT stand-in (devices/stand_ins/cuda_fft_fake.py),
against NumPy."""
from __future__ import annotations

import ctypes
import importlib.metadata
import inspect

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.devices.cuda import cuda_driver, cuda_fft, cuda_fft_library as L
from lazyarray.devices.stand_ins.cuda_fft_fake import FAKE_VERSION, FakeCufft
from harness import check_case

import gradcheck
from test_fft import CASES, GRADIENTS

FAKE = "fakecuda"
REAL, WHY_NOT = L.load()
needs_real = pytest.mark.skipif(REAL is None, reason=f"libcufft is absent ({WHY_NOT})")


def _device():
    return runtime.get_device(FAKE).device


def _lib() -> FakeCufft:
    return cuda_fft.plan_cache(_device()).cufft.lib


def _calls() -> dict:
    return dict(_lib().calls)


def _spent(before: dict, after: dict) -> dict:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}


# ---- the binding on the real library ----------------------------------------------------

@needs_real
def test_the_wheel_library_loads_and_every_prototype_resolves():
    lib = ctypes.CDLL(REAL.path)
    for name in L.PROTOTYPES:
        assert hasattr(lib, name), name
    L.bind(lib)
    assert "libcufft.so" in REAL.path


@needs_real
def test_version_needs_no_gpu_and_is_the_wheels():
    try:
        wheel = importlib.metadata.version("nvidia-cufft-cu12")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(reason="libcufft is not the nvidia-cufft-cu12 wheel's: no version to compare")
    major, minor, patch = (int(v) for v in wheel.split(".")[:3])
    assert REAL.version() == major * 1000 + minor * 100 + patch     # cufft.h's CUFFT_VERSION


@needs_real
def test_each_plan_function_takes_our_arguments_and_answers_a_cufft_result():
    """Header-free check of the prototypes: called with a handle that names no plan, each
    function reads it as a plan and answers CUFFT_INVALID_PLAN (it needs no GPU)."""
    lib, bogus = REAL.lib, 987654
    work, n = ctypes.c_size_t(), (ctypes.c_longlong * 2)(8, 4)
    answers = {
        "cufftSetAutoAllocation": lib.cufftSetAutoAllocation(bogus, 0),
        "cufftMakePlanMany64": lib.cufftMakePlanMany64(bogus, 2, n, None, 1, 32, None, 1, 32,
                                                      L.C2C, 3, ctypes.byref(work)),
        "cufftSetWorkArea": lib.cufftSetWorkArea(bogus, None),
        "cufftSetStream": lib.cufftSetStream(bogus, None),
        "cufftDestroy": lib.cufftDestroy(bogus),
        **{name: getattr(lib, name)(bogus, None, None, *([L.FORWARD] if directed else []))
           for name, directed in L.EXECUTORS.values()},
    }
    assert answers == {name: L.INVALID_PLAN for name in answers}


def test_the_stand_in_has_every_function_with_the_prototypes_arity():
    for name, (_, argtypes) in L.PROTOTYPES.items():
        fn = getattr(FakeCufft, name)
        assert len(inspect.signature(fn).parameters) - 1 == len(argtypes), name


def test_a_failed_call_names_the_call_and_result():
    with pytest.raises(L.CufftError, match=r"cufftExecC2R failed: CUFFT_INVALID_PLAN \(1\)"):
        L.Cufft(FakeCufft()).execute(5, L.C2R, 0, 0)


# ---- the device path over the stand-in --------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_numpy_fft_on_cufft(case):
    before = _calls()
    check_case(case, [d for d in case.dtypes if d.name != "int32"], FAKE)
    if "shift" not in case.name:
        assert sum(v for k, v in _spent(before, _calls()).items() if k.startswith("cufftExec"))


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradient_on_cufft_against_finite_differences(name):
    fn, inputs = GRADIENTS[name]
    gradcheck.check_complex_direction(fn, inputs, device=FAKE)


def test_no_copy_through_host_memory_and_the_plan_is_reused():
    dev = _device()
    rng = np.random.default_rng(3)
    z = (rng.standard_normal((5, 16)) + 1j * rng.standard_normal((5, 16))).astype(np.complex64)
    x = la.asarray(z, device=FAKE)
    la.fft.ifft(x).numpy()                  # the plan, made once
    before, host_reads = _calls(), dev.cu.calls.get("cuMemcpyDtoHAsync", 0)
    ys = [la.fft.ifft(x * k, norm=norm) for k, norm in ((1, "backward"), (2, "ortho"))]
    la.sync(FAKE)
    assert dev.cu.calls.get("cuMemcpyDtoHAsync", 0) == host_reads      # nothing came back
    spent = _spent(before, _calls())
    assert spent.get("cufftExecC2C") == 2 and not spent.get("cufftMakePlanMany64")  # cached
    for y, k, norm in zip(ys, (1, 2), ("backward", "ortho")):
        np.testing.assert_allclose(y.numpy(), np.fft.ifft(z * k, norm=norm), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_complex_to_real_leaves_its_input_whole(dtype):
    """cuFFT's C2R destroys its input (the stand-in writes NaN over it): the device
    transforms a copy, so the spectrum is still there to use again."""
    rng = np.random.default_rng(4)
    h = (rng.standard_normal((3, 4, 5)) + 1j * rng.standard_normal((3, 4, 5))).astype(dtype)
    spec = la.asarray(h, device=FAKE)
    la.sync(FAKE)
    before = _calls()
    out = [la.fft.irfft(spec, n=8), la.fft.irfftn(spec, s=(4, 9)), spec * 1]
    la.sync(FAKE)
    assert _spent(before, _calls()).get("cufftExecC2R" if dtype == np.complex64 else "cufftExecZ2D") == 2
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    np.testing.assert_allclose(out[0].numpy(), np.fft.irfft(h, n=8), rtol=tol, atol=tol)
    np.testing.assert_allclose(out[1].numpy(), np.fft.irfftn(h, s=(4, 9), axes=(1, 2)),
                               rtol=tol, atol=tol)
    np.testing.assert_array_equal(out[2].numpy(), h)
    np.testing.assert_array_equal(spec.numpy(), h)


def test_the_stand_in_refuses_what_cufft_refuses():
    """So that the device path above is held to cuFFT's contract."""
    fake = FakeCufft(_device().cu)
    lib = L.Cufft(fake)
    plan, work = lib.make_plan((8,), 2, L.C2C)
    assert work > 0
    with pytest.raises(L.CufftError, match="CUFFT_INVALID_VALUE"):     # no stream bound
        lib.execute(plan, L.C2C, 0, 0)
    lib.set_stream(plan, int(_device().stream))
    with pytest.raises(L.CufftError, match="CUFFT_NO_WORKSPACE"):      # no work area given
        lib.execute(plan, L.C2C, 0, 0)
    with pytest.raises(L.CufftError, match="CUFFT_INVALID_VALUE"):     # wrong executor
        lib.execute(plan, L.Z2Z, 0, 0)
    with pytest.raises(L.CufftError, match="CUFFT_INVALID_VALUE"):     # rank 4
        lib.make_plan((2, 2, 2, 2), 1, L.C2C)
    lib.destroy(plan)
    with pytest.raises(L.CufftError, match="CUFFT_INVALID_PLAN"):
        lib.destroy(plan)


def test_the_stand_in_makes_an_undefined_complex_to_real_nan():
    """An imaginary zero frequency is what cuFFT does not define for C2R: the stand-in's
    NaN there is what makes the device's zeroing of it (pocketfft ignores it) tested."""
    dev = _device()
    lib = L.Cufft(FakeCufft(dev.cu))
    plan, nbytes = lib.make_plan((6,), 1, L.Z2D)
    work = dev.new_buffer((nbytes,), np.uint8)
    lib.set_work_area(plan, work.ptr)
    lib.set_stream(plan, int(dev.stream))
    spec = dev.put(np.array([1 + 1j, 2, 3, 4], np.complex128))
    out = dev.new_buffer((6,), np.float64)
    lib.execute(plan, L.Z2D, spec.ptr, out.ptr)
    assert np.isnan(dev.get(out)).all() and np.isnan(dev.get(spec).real).all()


def test_more_than_three_axes_run_on_the_host_and_match_numpy():
    rng = np.random.default_rng(6)
    z = rng.standard_normal((2, 3, 2, 4)) + 1j * rng.standard_normal((2, 3, 2, 4))
    got = la.fft.fftn(la.asarray(z, device=FAKE)).numpy()
    np.testing.assert_allclose(got, np.fft.fftn(z), rtol=1e-12, atol=1e-12)


def test_plans_beyond_the_cache_are_destroyed_least_recently_used_first(monkeypatch):
    monkeypatch.setattr(cuda_fft, "PLAN_CACHE_SIZE", 2)
    dev = _device()
    cache = cuda_fft.PlanCache(dev, L.Cufft(FakeCufft(dev.cu)))
    a, b = cache.get((4,), 1, L.C2C), cache.get((8,), 1, L.C2C)
    assert cache.get((4,), 1, L.C2C) == a                   # a hit, now the most recent
    cache.get((16,), 1, L.C2C)                               # evicts (8,)
    live = cache.cufft.lib.plans
    assert a in live and b not in live and len(cache.plans) == 2
    cuda_fft._destroy_all(cache.cufft, cache.plans)        # the device's teardown
    assert not live


@pytest.mark.skipif(cuda_driver.missing() is not None, reason="no CUDA GPU here")
@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_on_a_real_gpu_matches_numpy(dtype):
    rng = np.random.default_rng(7)
    z = (rng.standard_normal((4, 6, 10)) + 1j * rng.standard_normal((4, 6, 10))).astype(dtype)
    x = la.asarray(z, device="cuda")
    tol = 1e-4 if dtype == np.complex64 else 1e-10
    for fn in ("fft", "ifft", "fftn", "ifftn", "irfft", "irfftn"):
        np.testing.assert_allclose(getattr(la.fft, fn)(x).numpy(), getattr(np.fft, fn)(z),
                                   rtol=tol, atol=tol * 10)
    r = z.real.copy()
    np.testing.assert_allclose(la.fft.rfftn(la.asarray(r, device="cuda")).numpy(),
                               np.fft.rfftn(r, axes=(-3, -2, -1)), rtol=tol, atol=tol * 100)
