"""Shared fixtures: the `device` parametrization over the devices present.

LAZYARRAY_TEST_DEVICES (comma list) picks the devices; by default every registered device
usable here: "interpreter" always, "cpu" when registered, "cuda" when a GPU answers.
`harness.device_names()` lists them for tests that iterate devices themselves.
"""
from __future__ import annotations

import pytest

import lazyarray as la
from harness import device_names
import hypothesis_profiles  # noqa: F401  (profiles 'ci' and 'long' for --hypothesis-profile)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", device_names(), indirect=True)


@pytest.fixture
def device(request: pytest.FixtureRequest):
    """A device name; new tensors default to it for the duration of the test."""
    name = request.param
    with la.config.override(device=name):
        yield name


@pytest.fixture
def fresh_metrics():
    """Metrics counted from zero, and no executable cached from earlier tests."""
    from lazyarray import runtime
    runtime.clear_caches()
    la.debug.reset_metrics()
    return la.debug.metrics()
