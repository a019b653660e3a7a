"""GPU benchmarks: lazyarray on "cuda" beside PyTorch eager and torch.compile on the same
GPU, plus the device-to-device copy bandwidth measured in the same run (the bound for
`mean(3*x**2+y)`, which reads 2 x 2^26 float32). Skipped without a CUDA GPU.

    python -m pytest bench/bench_cuda.py --benchmark-only
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices import cuda as cuda_device

import workloads as W

pytestmark = pytest.mark.skipif(not cuda_device.available(), reason="no CUDA GPU")

N_MEAN = 1 << 26
ROWS = (4096, 1024)
MATMUL = 8192


def _torch(compiled: bool):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


def _la_inputs(*shapes):
    rng = np.random.default_rng(0)
    return [la.asarray(rng.standard_normal(s).astype(np.float32)).to("cuda") for s in shapes]


def _la_run(fn, *args):
    def step():
        out = fn(la, *args)
        la.sync()
        return out
    return step


WORK = {"mean_3x2_plus_y": (W.mean_3x2_plus_y, [(N_MEAN,), (N_MEAN,)]),
        "softmax_rows": (W.softmax_rows, [ROWS]),
        "layer_norm_rows": (W.layer_norm_rows, [ROWS]),
        "matmul_8192": (W.matmul, [(MATMUL, MATMUL), (MATMUL, MATMUL)])}


@pytest.mark.parametrize("workload", list(WORK))
def test_lazyarray_cuda(benchmark, workload):
    fn, shapes = WORK[workload]
    step = _la_run(fn, *_la_inputs(*shapes))
    step()                                   # compile outside the timing
    benchmark.group = workload
    benchmark(step)


@pytest.mark.parametrize("compiled", [False, True], ids=["torch_eager", "torch_compile"])
@pytest.mark.parametrize("workload", list(WORK))
def test_torch_cuda(benchmark, workload, compiled):
    torch = _torch(compiled)
    fn, shapes = WORK[workload]
    args = [torch.randn(*s, device="cuda") for s in shapes]
    run = torch.compile(lambda *a: fn(torch, *a)) if compiled else (lambda *a: fn(torch, *a))

    def step():
        out = run(*args)
        torch.cuda.synchronize()
        return out
    step()
    benchmark.group = workload
    benchmark(step)


def test_device_copy_bandwidth(benchmark):
    """Device-to-device copy of the bytes `mean(3*x**2+y)` reads (2 x 2^26 float32)."""
    dev = la.runtime.get_device("cuda").device
    src = dev.new_buffer((2 * N_MEAN,), np.float32)
    dst = dev.new_buffer((2 * N_MEAN,), np.float32)

    def copy():
        dev.copy(src, dst)
        dev.synchronize()
    copy()
    benchmark.group = "mean_3x2_plus_y"
    benchmark.extra_info["bytes"] = 2 * src.nbytes
    benchmark(copy)
