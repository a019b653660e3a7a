"""Issue 3's CPU workloads, by lazyarray and by each peer in the same run, plus a memory
copy for the bandwidth figure. `python bench/report.py` writes the table of ratios."""
from __future__ import annotations

import numpy as np
import pytest

from peers import FRAMEWORKS, namespace
from workloads import WORKLOADS

_INPUTS: dict = {}


def inputs(name: str) -> tuple:
    if name not in _INPUTS:
        _INPUTS.clear()                  # keep one workload's arrays in memory at a time
        _INPUTS[name] = WORKLOADS[name][1](np.random.default_rng(0))
    return _INPUTS[name]


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_workload(benchmark, workload, framework):
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    fn, _, nbytes = WORKLOADS[workload]
    xp = namespace(framework)
    args = [fw.put(a) for a in inputs(workload)]
    run = fw.compile(lambda *a: fn(xp, *a))
    expect = fn(np, *inputs(workload))
    got = np.asarray(fw.finish(run(*args)))
    np.testing.assert_allclose(got, expect, rtol=2e-3, atol=2e-3)
    benchmark.group = workload
    benchmark.extra_info.update(framework=framework, bytes=nbytes)
    benchmark(lambda: fw.finish(run(*args)))


@pytest.mark.parametrize("size", [1 << 24])
def test_memory_copy(benchmark, size):
    """The bandwidth yardstick: read one buffer and write another (NumPy copyto)."""
    src = np.random.default_rng(0).standard_normal(size, dtype=np.float32)
    dst = np.empty_like(src)
    benchmark.group = "memory copy"
    benchmark.extra_info.update(framework="numpy", bytes=2 * src.nbytes)
    benchmark(np.copyto, dst, src)
