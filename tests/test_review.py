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


def test_long_elementwise_chain_compiles(device):
    """1,000 fused elementwise ops in a row used to exceed Python's recursion limit in the
    elemental emitter; fusion now materializes along such a chain."""
    a = np.linspace(-2, 2, 64, dtype=np.float32).reshape(8, 8)
    b = np.linspace(1, 3, 64, dtype=np.float32).reshape(8, 8)
    x, y = la.asarray(a, device=device), la.asarray(b, device=device)
    z, want = x, a
    for _ in range(250):
        z = la.maximum((z + y) * 0.5 - x, y)
        want = np.maximum((want + b) * np.float32(0.5) - a, b)
    np.testing.assert_allclose(z.numpy(), want, rtol=1e-5)
