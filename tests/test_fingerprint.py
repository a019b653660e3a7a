"""The fingerprint and the executable cache: structure, shapes, dtypes and kept constants
decide a compile; data and ordinary Python scalars do not."""
from __future__ import annotations

import re

import numpy as np
import pytest

import lazyarray as la


def _step(x, scale=2.5):
    """One call site: every sync of this function is reported at the same line."""
    return ((x * scale + 1) ** 2).sum().item()


def test_new_data_does_not_recompile(device, fresh_metrics):
    rng = np.random.default_rng(0)
    for _ in range(4):
        a = rng.standard_normal((3, 5)).astype(np.float32)
        got = _step(la.asarray(a))
        np.testing.assert_allclose(got, ((a * 2.5 + 1) ** 2).sum(), rtol=1e-5)
    assert fresh_metrics.cache_misses == 1
    assert fresh_metrics.cache_hits == 3
    assert fresh_metrics.recompiles == []


@pytest.mark.parametrize("scales", [(2.5, 3.75, -0.125, 1e6), (2, 3, -7, 100)])
def test_changed_python_scalar_does_not_recompile(scales, device, fresh_metrics):
    a = np.arange(6, dtype=np.float32)
    for s in scales:
        got = _step(la.asarray(a), s)
        np.testing.assert_allclose(got, ((a * s + 1) ** 2).sum(), rtol=1e-5)
    assert fresh_metrics.cache_misses == 1
    assert fresh_metrics.cache_hits == len(scales) - 1


def test_scalar_changes_with_integer_tensors(device, fresh_metrics):
    a = np.arange(4, dtype=np.int32)
    outs = [(la.asarray(a) + k).numpy() for k in (5, 9, -3)]
    for k, out in zip((5, 9, -3), outs):
        np.testing.assert_array_equal(out, a + k)
        assert out.dtype == np.int32
    assert fresh_metrics.cache_misses == 1


def _constants(text: str) -> list:
    return re.findall(r"constant\(([^)]*)\)", text)


def _parameters(text: str) -> int:
    return len(re.findall(r"= \S+ parameter\(", text))


@pytest.mark.parametrize("value", [0, 1, -1, 0.0, 1.0, -1.0])
def test_zero_and_one_stay_constants(value, device):
    x = la.asarray([1.0, 2.0, 3.0])
    text = la.debug.ir(x * value + 3.5, "hlo")
    assert float(value) in [float(c) for c in _constants(text)], text
    # x is one parameter and 3.5 another: the kept constant is not a parameter
    assert _parameters(text) == 2, text


def test_other_scalars_are_parameters_not_constants(device):
    x = la.asarray([1.0, 2.0, 3.0])
    text = la.debug.ir(x * 2.5 - 7.25, "hlo")
    assert not {"2.5", "7.25", "-7.25"} & set(_constants(text)), text
    assert _parameters(text) == 3, text


def test_kept_constants_are_part_of_the_fingerprint(device, fresh_metrics):
    a = np.arange(3, dtype=np.float32)
    for s in (0.0, 1.0, -1.0, 2.0, 3.0):
        np.testing.assert_allclose((la.asarray(a) * s).numpy(), a * s)
    # 0, 1 and -1 each compile their own module; 2.0 and 3.0 share one
    assert fresh_metrics.cache_misses == 4


def test_new_shape_recompiles_and_says_why(device, fresh_metrics):
    for n in (3, 3, 5):
        _step(la.asarray(np.ones(n, np.float32)))
    assert fresh_metrics.cache_misses == 2
    assert len(fresh_metrics.recompiles) == 1
    site, reason = fresh_metrics.recompiles[0]
    assert site.endswith(f"test_fingerprint.py:{_step.__code__.co_firstlineno + 2}")
    assert "[3]" in reason and "[5]" in reason, reason


def test_new_dtype_recompiles_and_says_why(device, fresh_metrics):
    for dt in (np.float32, np.float64):
        _step(la.asarray(np.ones(4, dt)))
    assert fresh_metrics.cache_misses == 2
    (site, reason), = fresh_metrics.recompiles
    assert "f32" in reason and "f64" in reason, reason


def test_new_structure_recompiles(device, fresh_metrics):
    x = la.asarray(np.ones(4, np.float32))
    (x + 2.5).numpy()
    (x * 2.5).numpy()
    (x + 2.5).numpy()
    assert fresh_metrics.cache_misses == 2 and fresh_metrics.cache_hits == 1


def test_attributes_are_part_of_the_fingerprint(device, fresh_metrics):
    x = la.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_allclose(x.sum(axis=0).numpy(), np.arange(12).reshape(3, 4).sum(0))
    np.testing.assert_allclose(x.sum(axis=1).numpy(), np.arange(12).reshape(3, 4).sum(1))
    assert fresh_metrics.cache_misses == 2


def test_fingerprint_ignores_identity_of_tensors(device, fresh_metrics):
    # the same expression over different tensors (and their history) is one executable
    x = la.asarray(np.ones(4, np.float32))
    y = (x * 3).sum()
    y.numpy()
    z = (la.asarray(np.zeros(4, np.float32)) * 3).sum()
    z.numpy()
    assert fresh_metrics.cache_misses == 1
    assert z.item() == 0.0 and y.item() == 12.0


def test_materializing_a_bare_constant_keeps_it_a_constant(device):
    # la.zeros(()) is the kept constant 0 itself; computing it must not make the shared
    # constant a parameter of every later module
    for make in (lambda: la.zeros(()), lambda: la.ones(()), lambda: la.full((), -1.0)):
        assert make().item() in (0.0, 1.0, -1.0)
    x = la.asarray([1.0, 2.0, 3.0])
    text = la.debug.ir(x * 0.0 + x * 1.0 - x * -1.0, "hlo")
    assert sorted(float(c) for c in _constants(text)) == [-1.0, 0.0, 1.0], text
    assert _parameters(text) == 1, text


def test_nan_and_inf_scalars_are_parameters(device, fresh_metrics):
    x = la.asarray([1.0, 2.0])
    for value in (float("nan"), float("inf"), 0.5):
        text = la.debug.ir(x * value, "hlo")
        assert _constants(text) == [] and _parameters(text) == 2, text
        (x * value).numpy()
    assert fresh_metrics.cache_misses == 1


def test_integer_kept_constants(device):
    x = la.asarray([1, 2], dtype="int32")
    text = la.debug.ir((x + 1) * -1 - 0, "hlo")
    assert sorted(int(float(c)) for c in _constants(text)) == [-1, 0, 1], text
    assert _parameters(text) == 1


def test_each_device_caches_its_own_executables(device, other_device, fresh_metrics):
    a = np.arange(4, dtype=np.float32)
    for name in (device, other_device, device, other_device):
        np.testing.assert_allclose((la.asarray(a, device=name) * 2.5).numpy(), a * 2.5)
    assert fresh_metrics.cache_misses == 2 and fresh_metrics.cache_hits == 2
