"""Regressions found while reviewing the code base: each test failed before its fix."""
from __future__ import annotations

import numpy as np

import lazyarray as la


def test_negative_zero_scalar_keeps_its_sign(device):
    """0.0 and -0.0 compare equal; they must not share one kept constant."""
    x = la.asarray(np.array([1.0, -2.0], np.float32), device=device)
    for scale in (-0.0, 0.0, -0.0):
        got = (x * scale).numpy()
        want = np.array([1.0, -2.0], np.float32) * np.float32(scale)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
