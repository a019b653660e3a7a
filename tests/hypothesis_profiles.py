"""Hypothesis profiles of the random-graph test, registered before pytest reads
`--hypothesis-profile` (tests/conftest.py imports this module). Registering does not
load a profile: other hypothesis tests keep their own settings."""
from __future__ import annotations

from hypothesis import HealthCheck, settings

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large])
settings.register_profile("ci", max_examples=200, **_COMMON)
settings.register_profile("long", max_examples=10_000, **_COMMON)
