"""Devices with indices: K logical CPU devices ('cpu:0' ... 'cpu:K-1'), each with its own
name, pending tensors and compiled programs; moves between them; bad indices."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la


@pytest.fixture
def two_cpus():
    with la.config.override(cpu_devices=2):
        yield


def test_each_logical_cpu_has_its_own_name(two_cpus):
    a = la.asarray(np.arange(3.0), device="cpu:1")
    b = la.asarray(np.arange(3.0))
    assert repr(a.device) == "device(type='cpu', index=1)"
    assert repr(b.device) == "device(type='cpu')"
    assert la.device("cpu:0") is la.device("cpu") and la.device("cpu:1") is not la.device("cpu")
    assert "device='cpu:1'" in repr(a)
    with pytest.raises(ValueError, match="'cpu' and 'cpu:1'"):
        a + b


def test_moves_between_logical_cpus_and_separate_caches(two_cpus, clean_metrics):
    x = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    on0 = la.asarray(x)
    on1 = on0.to("cpu:1")
    assert on1.device is la.device("cpu:1")
    r1 = la.tanh(on1 * 2).sum(axis=0)
    r0 = la.tanh(on0 * 2).sum(axis=0)
    np.testing.assert_allclose(r1.numpy(), r0.numpy(), rtol=1e-6)
    np.testing.assert_allclose(r1.numpy(), np.tanh(x * 2).sum(0), rtol=1e-5)
    assert clean_metrics.cache_misses == 2          # one program per device, no sharing of state
    back = r1.to("cpu") + r0
    np.testing.assert_allclose(back.numpy(), 2 * r0.numpy(), rtol=1e-6)
    assert la.tanh(on1 * 2).sum(axis=0).device is la.device("cpu:1")


def test_an_index_beyond_the_devices_is_an_error_at_the_call():
    with pytest.raises(ValueError, match=r"unknown device 'cpu:5': there is 1 cpu device "
                                         r"\(cpu:0\).*LAZYARRAY_CPU_DEVICES"):
        la.asarray([1.0], device="cpu:5")
    with pytest.raises(ValueError, match="index after ':' must be a number"):
        la.zeros((2,), device="cpu:x")
    with pytest.raises(ValueError, match="unknown device 'tpu'"):
        la.asarray([1.0]).to("tpu")


def test_interpreter_has_one_device():
    assert la.device("interpreter:0") is la.device("interpreter")
    with pytest.raises(ValueError, match="there is 1 interpreter device"):
        la.device("interpreter:1")
