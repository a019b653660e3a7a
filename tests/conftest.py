"""Shared fixtures: the `device` parametrization over the devices present.

LAZYARRAY_TEST_DEVICES (comma list) picks the devices; by default every registered device
usable here: "interpreter" always, "cpu" when registered, "cuda" when a GPU answers.
`harness.device_names()` lists them for tests that iterate devices themselves.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

# A test session compiles into a disk cache of its own, made empty: counts of compiles and
# disk hits then never depend on what earlier runs of this or another checkout left in
# ~/.cache/lazyarray (the tests of the disk cache itself name their own folders).
_CACHE = tempfile.mkdtemp(prefix="lazyarray-test-cache-")
os.environ["LAZYARRAY_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

import lazyarray as la  # noqa: E402  (after the cache folder is chosen)
from lazyarray.devices.interpreter import InterpreterDevice
from harness import device_names
import hypothesis_profiles  # noqa: F401  (profiles 'ci' and 'long' for --hypothesis-profile)


def _register_fake_cuda() -> None:
    """"fakecuda": the CUDA device over the host-memory stand-in for its driver
    (tests/test_cuda_fake.py; LAZYARRAY_TEST_DEVICES=fakecuda runs the suite on it)."""
    from lazyarray import devices_registry, runtime
    from lazyarray.devices.cuda.cuda import CudaDevice
    runtime.register_device(
        "fakecuda", lambda name: CudaDevice(name, devices_registry._cuda_settings, fake=True))


_register_fake_cuda()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--op-matrix", choices=("smoke", "diagonal", "full"), default=None,
        help="how much of the op table runs on compiled devices: diagonal (every dtype and "
             "every variant at least once, the default), smoke (two calls per case) or full "
             "(every dtype with every variant, as the interpreter always runs)")
    parser.addoption(
        "--shuffle-seed", type=int, default=None,
        help="run the collected tests in a random order drawn from this seed")


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """--shuffle-seed N: run the tests in an order drawn from N (state that leaks from one
    test into another shows up as a failure that depends on the seed)."""
    seed = config.getoption("--shuffle-seed")
    if seed is not None:
        import random
        random.Random(seed).shuffle(items)


@pytest.fixture
def op_matrix(request: pytest.FixtureRequest):
    """device name -> the op-table tier it runs (see --op-matrix)."""
    chosen = request.config.getoption("--op-matrix")

    def tier(device: str) -> str:
        if device == "interpreter":
            return "full"           # the reference device is cheap: always everything
        return chosen or "diagonal"  # a kernel compiled per call: kept within the time budget
    return tier


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", device_names(), indirect=True)


@pytest.fixture
def device(request: pytest.FixtureRequest):
    """A device name; new tensors default to it for the duration of the test."""
    name = request.param
    with la.config.override(device=name):
        yield name


def drop_leftover_pending() -> None:
    """Forget the tensors earlier tests left pending on every device. A test that failed
    keeps its tensors alive (the traceback holds its frames) and pending (a failed sync
    leaves them so): without this they would join the next test's first sync, and a test
    that counts compiles or makes a sync fail on purpose would depend on the order."""
    from lazyarray import runtime
    for state in runtime.live_states():
        state.take_pending()


@pytest.fixture
def fresh_metrics():
    """Metrics counted from zero, no executable cached from earlier tests, and nothing
    left pending by them."""
    from lazyarray import runtime
    drop_leftover_pending()
    runtime.clear_caches()
    la.debug.reset_metrics()
    return la.debug.metrics()


@pytest.fixture
def clean_metrics():
    """Metrics from zero, after dropping whatever earlier tests left pending on any device
    (a leftover would join this test's first program; one whose sync failed would fail
    it)."""
    from lazyarray import runtime
    drop_leftover_pending()
    runtime.clear_caches()
    la.debug.reset_metrics()
    return la.debug.metrics()


class _OtherDevice(InterpreterDevice):
    name = "otherdev"
    platform = "otherdev"


@pytest.fixture
def other_device(monkeypatch):
    """A second device (an interpreter under another name), registered for one test."""
    from lazyarray import runtime
    monkeypatch.setitem(runtime._FACTORIES, "otherdev", lambda name: _OtherDevice())
    yield "otherdev"
    for key in ("otherdev", "otherdev:0"):
        runtime._STATES.pop(key, None)
