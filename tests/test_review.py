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


def test_cuda_plan_runs_the_pass_pipeline():
    """The CUDA device's plan imported the pipeline from a wrong module path and silently
    skipped every pass, so convolution and reduce_window (which only the pass
    expand_convolution lowers) could not be planned. No GPU is needed to plan."""
    from lazyarray.compiler.primitive import apply
    from lazyarray.compiler.graph.node import Node
    from lazyarray.compiler.graph.trace import capture
    from lazyarray.compiler.hlo import dtypes as D
    from lazyarray.compiler import compile
    x = Node("parameter", (), (1, 2, 6, 6), D.float32, {}, buffer=object())
    w = Node("parameter", (), (3, 2, 3, 3), D.float32, {}, buffer=object())
    conv = apply("convolution", x, w, window_strides=(1, 1), padding_low=(0, 0),
                 padding_high=(0, 0), lhs_dilation=(1, 1), rhs_dilation=(1, 1),
                 feature_group_count=1)
    pooled = apply("reduce_window", conv, kind="max", window_dimensions=(1, 1, 2, 2),
                   window_strides=(1, 1, 2, 2), padding_low=(0,) * 4, padding_high=(0,) * 4)
    program = compile(capture([pooled]).module(), "sm_80")   # what the CUDA device loads
    ops = {v["op"] for v in program.values.values()} | {getattr(s, "op", None) for s in program.steps}
    assert not ops & {"convolution", "reduce_window"}, ops
    assert "dot_general" in ops
