"""GPU benchmarks: lazyarray on "cuda" beside PyTorch eager and torch.compile on the same
GPU, plus the device-to-device copy bandwidth measured in the same run (the bound for
`mean(3*x**2+y)`, which reads 2 x 2^26 float32), an MLP training step and a GPT-style
transformer block training step. Skipped without a CUDA GPU. Every timed lazyarray step
waits for the GPU (`la.cuda.synchronize()`), as the torch steps do: a sync alone returns
once the work is queued.

    python -m pytest bench/bench_cuda.py --benchmark-only --benchmark-json=bench/results/cuda.json
    python bench/report.py bench/results/cuda.json
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
        la.cuda.synchronize()
        return out
    return step


def _label(benchmark, group: str, framework: str, nbytes=None) -> None:
    benchmark.group = group
    benchmark.extra_info["framework"] = framework
    if nbytes:
        benchmark.extra_info["bytes"] = nbytes


WORK = {"mean_3x2_plus_y": (W.mean_3x2_plus_y, [(N_MEAN,), (N_MEAN,)]),
        "softmax_rows": (W.softmax_rows, [ROWS]),
        "layer_norm_rows": (W.layer_norm_rows, [ROWS]),
        "matmul_8192": (W.matmul, [(MATMUL, MATMUL), (MATMUL, MATMUL)])}
BYTES = {"mean_3x2_plus_y": 2 * N_MEAN * 4, "softmax_rows": 2 * ROWS[0] * ROWS[1] * 4,
         "layer_norm_rows": 2 * ROWS[0] * ROWS[1] * 4}


@pytest.mark.parametrize("workload", list(WORK))
def test_lazyarray_cuda(benchmark, workload):
    fn, shapes = WORK[workload]
    step = _la_run(fn, *_la_inputs(*shapes))
    step()                                   # compile outside the timing
    _label(benchmark, workload, "lazyarray", BYTES.get(workload))
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
    _label(benchmark, workload, "torch.compile" if compiled else "torch", BYTES.get(workload))
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
    _label(benchmark, "memory copy", "lazyarray", 2 * src.nbytes)
    benchmark(copy)


# ---- the seed example with .item(): a host read each call ----------------------------------

@pytest.mark.parametrize("log2n", [24, 27])
@pytest.mark.parametrize("framework", ["lazyarray", "torch", "torch.compile"])
def test_seed_example_item(benchmark, framework, log2n):
    n = 1 << log2n
    if framework == "lazyarray":
        x, y = _la_inputs((n,), (n,))

        def step():
            return (3 * x ** 2 + y).mean().item()
    else:
        torch = _torch(framework == "torch.compile")
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        f = lambda a, b: (3 * a ** 2 + b).mean()                         # noqa: E731
        run = torch.compile(f) if framework == "torch.compile" else f

        def step():
            return run(x, y).item()
    step()
    _label(benchmark, f"seed example 2^{log2n} with .item()", framework, 2 * n * 4)
    benchmark(step)


# ---- training steps ------------------------------------------------------------------------

from training_cuda import block_params, la_block_step, la_mlp_step, torch_block_step, torch_mlp_step  # noqa: E402

MLPS = {"mlp 784-512-512-10 b256": ((784, 512, 512, 10), 256),
        "mlp 4096-4096-4096-1000 b4096": ((4096, 4096, 4096, 1000), 4096)}


@pytest.mark.parametrize("framework", ["lazyarray", "torch", "torch.compile"])
@pytest.mark.parametrize("name", list(MLPS))
def test_mlp_training_step(benchmark, framework, name):
    sizes, batch = MLPS[name]
    if framework == "lazyarray":
        step = la_mlp_step(la, sizes, batch)
    else:
        step = torch_mlp_step(_torch(True), sizes, batch, framework == "torch.compile")
    first = _first(step)
    _label(benchmark, name, framework)
    benchmark.extra_info["first_step_s"] = first
    benchmark(step)


@pytest.mark.parametrize("framework", ["lazyarray", "torch", "torch.compile"])
def test_transformer_block_training_step(benchmark, framework):
    """GPT-style block (pre-norm, causal attention, 4x GELU MLP), width 512, 8 heads,
    sequence 512, batch 16, loss mean(block(x)^2), Adam; the same weights everywhere."""
    params, x = block_params()
    if framework == "lazyarray":
        step = la_block_step(la, params, x)
    else:
        step = torch_block_step(_torch(True), params, x, framework == "torch.compile")
    first = _first(step)
    _label(benchmark, "transformer block step (512w, 8h, T512, B16)", framework)
    benchmark.extra_info["first_step_s"] = first
    benchmark(step)


def _first(step) -> float:
    import time
    t0 = time.perf_counter()
    step()
    return time.perf_counter() - t0
