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


@pytest.mark.parametrize("copier", ["numpy", "torch"])
def test_memory_copy(benchmark, copier):
    """The bandwidth yardstick: read one 64 MB buffer and write another. NumPy's copyto uses
    one core; PyTorch's copy_ splits large copies over all cores. The report takes the
    faster of the two."""
    src = np.random.default_rng(0).standard_normal(1 << 24, dtype=np.float32)
    if copier == "torch":
        if not FRAMEWORKS["torch"].available:
            pytest.skip("torch is not installed")
        import torch
        s, d = torch.from_numpy(src), torch.empty(src.shape, dtype=torch.float32)
        copy = lambda: d.copy_(s)
    else:
        dst = np.empty_like(src)
        copy = lambda: np.copyto(dst, src)
    benchmark.group = "memory copy"
    benchmark.extra_info.update(framework=copier, bytes=2 * src.nbytes)
    benchmark(copy)
