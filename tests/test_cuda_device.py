"""The "cuda" device on a real GPU: transfers, mixed-device errors, fused kernels and
cuBLAS against NumPy, the op harness on cuda. Skipped where no GPU is present."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cuda import cuda as cuda_device

pytestmark = pytest.mark.skipif(not cuda_device.available(), reason="no CUDA GPU")


def _rand(*shape: int, dtype=np.float32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_transfers_round_trip() -> None:
    for dtype in (np.float32, np.float16, np.int64, np.bool_, np.float64):
        host = _rand(3, 5).astype(dtype)
        t = la.asarray(host).to("cuda")
        assert str(t.device).startswith("cuda") or "cuda" in repr(t.device)
        np.testing.assert_array_equal(t.numpy(), host)
        np.testing.assert_array_equal(t.to("cpu" if "cpu" in la.runtime._FACTORIES
                                           else "interpreter").numpy(), host)
    assert "cuda" in repr(la.asarray(np.ones(3, np.float32)).to("cuda"))


def test_mixed_devices_error_names_both_and_the_fix() -> None:
    a = la.asarray(np.ones(3, np.float32)).to("cuda")
    b = la.asarray(np.ones(3, np.float32), device="interpreter")
    with pytest.raises(ValueError) as err:
        _ = a + b
    text = str(err.value)
    assert "cuda" in text and "interpreter" in text and ".to(" in text


@pytest.mark.parametrize("shape,axis", [((4096, 1000), 1), ((1000, 513), 0), ((1 << 20,), None),
                                        ((6, 7, 8), (0, 2)), ((33, 65), 1)])
def test_fused_reductions_match_numpy(shape: tuple, axis) -> None:
    x, y = _rand(*shape), _rand(*shape, seed=1)
    got = (3 * la.asarray(x).to("cuda") ** 2 + la.asarray(y).to("cuda")).mean(axis=axis).numpy()
    want = (3 * x.astype(np.float64) ** 2 + y).mean(axis=axis)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_softmax_layernorm_argmax() -> None:
    x = _rand(256, 1000)
    t = la.asarray(x).to("cuda")
    e = la.exp(t - t.max(axis=1, keepdims=True))
    np.testing.assert_allclose((e / e.sum(axis=1, keepdims=True)).numpy(),
                               np.exp(x - x.max(1, keepdims=True)) / np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True),
                               rtol=1e-5, atol=1e-6)
    mu = t.mean(axis=1, keepdims=True)
    var = ((t - mu) ** 2).mean(axis=1, keepdims=True)
    np.testing.assert_allclose(((t - mu) / la.sqrt(var + 1e-5)).numpy(),
                               (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), x.argmax(1))


@pytest.mark.parametrize("name", ["exp", "log", "sin", "tanh", "erf"])
def test_math_within_float32_tolerance(name: str) -> None:
    x = np.abs(_rand(1 << 16)) + 0.1
    got = getattr(la, name)(la.asarray(x).to("cuda")).numpy()
    import math
    ref = np.vectorize(math.erf)(x.astype(np.float64)) if name == "erf" else getattr(np, name)(x.astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=4e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_matmul_plain_transposed_batched(dtype) -> None:
    a, b = _rand(4, 64, 32, dtype=dtype), _rand(4, 32, 48, dtype=dtype, seed=2)
    ta, tb = la.asarray(a).to("cuda"), la.asarray(b).to("cuda")
    tol = 1e-4 if dtype == np.float32 else 2e-2
    want = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose((ta @ tb).numpy().astype(np.float32), want, rtol=tol, atol=tol)
    np.testing.assert_allclose((ta[0] @ la.asarray(b[0].T.copy()).to("cuda").T).numpy().astype(np.float32),
                               want[0], rtol=tol, atol=tol)


def test_freed_memory_is_reused_and_oom_is_explained() -> None:
    dev = la.runtime.get_device("cuda").device
    first = dev.new_buffer((1 << 20,), np.float32)
    ptr = first.ptr
    del first
    dev.synchronize()
    again = dev.new_buffer((1 << 20,), np.float32)
    assert again.ptr == ptr                 # the pool handed the same block back
    with pytest.raises(MemoryError, match="bytes free"):
        dev.new_buffer((1 << 62,), np.uint8)


def test_op_harness_on_cuda() -> None:
    from harness import check_case
    from op_table import CASES
    failures = []
    for case in CASES:
        try:
            check_case(case, case.dtypes, "cuda")
        except AssertionError as e:
            failures.append(str(e)[:300])
    assert not failures, "\n".join(failures[:20])
