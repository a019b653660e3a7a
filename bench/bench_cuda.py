"""GPU benchmarks: lazyarray on "cuda" beside PyTorch eager and torch.compile on the same
GPU, plus the device-to-device copy bandwidth measured in the same run (the bound for
`mean(3*x**2+y)`, which reads 2 x 2^26 float32), an MLP training step and a GPT-style
transformer block training step. Skipped without a CUDA GPU; a peer that is absent
(PyTorch, PyTorch without CUDA, a torch.compile that cannot compile here) is skipped with
its reason, and the rest still runs. Every timed lazyarray step waits for the GPU
(`la.cuda.synchronize()`), as the torch steps do: a sync alone returns once the work is
queued.

At the end of the module the run's own summary is printed and written to
`bench/results/cuda_summary.md`: for each workload that moves a known number of bytes,
lazyarray's achieved bandwidth beside the copy bandwidth measured in this run (and its
share of it), and the medians of every framework with their ratio to lazyarray's.

    python -m pytest bench/bench_cuda.py --benchmark-only --benchmark-json=bench/results/cuda.json
    python bench/report.py bench/results/cuda.json
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cuda import cuda as cuda_device

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


# ---- the run's own summary: bandwidth beside the copy's, ratios to the peers -----------

MEDIANS: dict = {}           # group -> framework -> (median seconds, bytes moved or None)
COPY = "memory copy"


def _timed(benchmark, step, group: str, framework: str, nbytes=None):
    """benchmark(step), labelled, its median kept for the summary."""
    _label(benchmark, group, framework, nbytes)
    out = benchmark(step)
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is not None:          # None under --benchmark-disable
        MEDIANS.setdefault(group, {})[framework] = (stats.median, nbytes)
    return out


def summary(medians: dict) -> str:
    """Markdown: per workload, each framework's median, lazyarray's bandwidth and its
    share of the copy bandwidth measured in the same run, and peer / lazyarray ratios
    (above 1: lazyarray is faster)."""
    copy = medians.get(COPY, {}).get("device")
    copy_bw = copy[1] / copy[0] if copy and copy[1] else None
    frameworks = ["lazyarray", "torch", "torch.compile"]
    lines = ["| workload | " + " | ".join(frameworks) + " | lazyarray GB/s | % of copy | "
             "torch / lazyarray | torch.compile / lazyarray |",
             "|---|---|---|---|---|---|---|---|"]
    for group, row in medians.items():
        if group == COPY:
            continue
        la_t = row.get("lazyarray")
        cells = [f"{row[f][0] * 1e3:.3f} ms" if f in row else "—" for f in frameworks]
        bw = la_t[1] / la_t[0] if la_t and la_t[1] else None
        cells.append(f"{bw / 1e9:.0f}" if bw else "—")
        cells.append(f"{100 * bw / copy_bw:.0f}%" if bw and copy_bw else "—")
        for peer in frameworks[1:]:
            cells.append(f"{row[peer][0] / la_t[0]:.2f}x" if la_t and peer in row else "—")
        lines.append(f"| {group} | " + " | ".join(cells) + " |")
    if copy_bw:
        lines.append(f"\nDevice-to-device copy in this run: {copy_bw / 1e9:.0f} GB/s "
                     f"(bytes read + written / median time).")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module", autouse=True)
def _summary_at_the_end(request):
    yield
    if not MEDIANS:
        return
    text = summary(MEDIANS)
    where = os.path.join(os.path.dirname(__file__), "results", "cuda_summary.md")
    os.makedirs(os.path.dirname(where), exist_ok=True)
    with open(where, "w") as f:
        f.write(text)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line("\n" + text + f"(written to {where})")


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
    _timed(benchmark, step, workload, "lazyarray", BYTES.get(workload))


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
    _first_or_skip(step, "torch.compile" if compiled else "torch")
    _timed(benchmark, step, workload, "torch.compile" if compiled else "torch", BYTES.get(workload))


def _first_or_skip(step, framework: str) -> None:
    """Run a peer's first step; a peer that cannot run here (torch.compile without a
    working Triton, say) is skipped with its error, not counted as a failure."""
    try:
        step()
    except Exception as e:                      # noqa: BLE001 (any reason a peer fails)
        pytest.skip(f"{framework} cannot run here: {type(e).__name__}: {str(e)[:200]}")


def test_device_copy_bandwidth(benchmark):
    """Device-to-device copy of the bytes `mean(3*x**2+y)` reads (2 x 2^26 float32)."""
    dev = la.runtime.get_device("cuda").device
    src = dev.new_buffer((2 * N_MEAN,), np.float32)
    dst = dev.new_buffer((2 * N_MEAN,), np.float32)

    def copy():
        dev.copy(src, dst)
        dev.synchronize()
    copy()
    _timed(benchmark, copy, COPY, "device", 2 * src.nbytes)


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
    _first_or_skip(step, framework)
    _timed(benchmark, step, f"seed example 2^{log2n} with .item()", framework, 2 * n * 4)


# ---- a loop (issue 30): one CUDA graph with a WHILE node where the driver has them (12.4+),
# else the condition read back asynchronously, one iteration ahead (bench_cuda_loops.py
# sets the two forms side by side) -------------------------------------------------------

LOOP_ITERATIONS = 1000


@pytest.mark.parametrize("framework", ["lazyarray", "torch"])
def test_loop_of_a_tiny_body(benchmark, framework):
    """1000 iterations of `s * 0.5 + 1` over 4096 floats: one la.fori_loop (an HLO while:
    a graph's WHILE node, or each body queued before the previous condition reaches the
    host on an older driver) beside a PyTorch
    Python loop; the result is read once. Checked against NumPy."""
    x = np.linspace(0.0, 1.0, 4096, dtype=np.float32)
    want = x.copy()
    for _ in range(LOOP_ITERATIONS):
        want = want * np.float32(0.5) + np.float32(1.0)
    if framework == "lazyarray":
        (xt,) = [la.asarray(x).to("cuda")]

        def step():
            return la.fori_loop(0, LOOP_ITERATIONS, lambda i, v: v * 0.5 + 1.0, xt).numpy()
    else:
        torch = _torch(False)
        xt = torch.from_numpy(x).to("cuda")

        def step():
            v = xt
            for _ in range(LOOP_ITERATIONS):
                v = v * 0.5 + 1.0
            return v.cpu().numpy()
    _first_or_skip(step, framework)
    np.testing.assert_allclose(step(), want, rtol=1e-6)
    _timed(benchmark, step, f"loop of {LOOP_ITERATIONS} tiny iterations", framework)


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
    first = _first(step, framework)
    benchmark.extra_info["first_step_s"] = first
    _timed(benchmark, step, name, framework)


@pytest.mark.parametrize("framework", ["lazyarray", "torch", "torch.compile"])
def test_transformer_block_training_step(benchmark, framework):
    """GPT-style block (pre-norm, causal attention, 4x GELU MLP), width 512, 8 heads,
    sequence 512, batch 16, loss mean(block(x)^2), Adam; the same weights everywhere."""
    params, x = block_params()
    if framework == "lazyarray":
        step = la_block_step(la, params, x)
    else:
        step = torch_block_step(_torch(True), params, x, framework == "torch.compile")
    first = _first(step, framework)
    benchmark.extra_info["first_step_s"] = first
    _timed(benchmark, step, "transformer block step (512w, 8h, T512, B16)", framework)


def _first(step, framework: str) -> float:
    import time
    t0 = time.perf_counter()
    if framework == "lazyarray":
        step()
    else:
        _first_or_skip(step, framework)
    return time.perf_counter() - t0


# ---- library calls: cuFFT and cuSOLVER beside torch.fft and torch.linalg.eigh ------------

def _spd(rng, batch: int, n: int, dtype) -> np.ndarray:
    """A batch of well-conditioned Hermitian matrices (eigh's input)."""
    a = rng.standard_normal((batch, n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((batch, n, n))
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2 + n * np.eye(n)).astype(dtype)


# name -> (lazyarray/torch function name, input shape, dtype, kwargs)
SPECTRAL = {"fft c64 1024x4096": ("fft", (1024, 4096), np.complex64, {}),
            "ifft c128 256x4096": ("ifft", (256, 4096), np.complex128, {}),
            "rfft f32 4096x4096": ("rfft", (4096, 4096), np.float32, {}),
            "irfft c64 4096x2049": ("irfft", (4096, 2049), np.complex64, {"n": 4096}),
            "fftn 2-axis c64 64x512x512": ("fftn", (64, 512, 512), np.complex64, {"dim": (-2, -1)}),
            "rfftn f32 16x128^3": ("rfftn", (16, 128, 128, 128), np.float32, {"dim": (-3, -2, -1)})}
EIGH = {"eigh f32 64x256x256": ((64, 256), np.float32), "eigh f32 1x2048x2048": ((1, 2048), np.float32),
        "eigh c64 64x128x128": ((64, 128), np.complex64)}


def _spectral_input(shape, dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@pytest.mark.parametrize("framework", ["lazyarray", "torch"])
@pytest.mark.parametrize("name", list(SPECTRAL))
def test_fft(benchmark, framework, name):
    fn, shape, dtype, kwargs = SPECTRAL[name]
    host = _spectral_input(shape, dtype)
    if framework == "lazyarray":
        la_kwargs = {("axes" if k == "dim" else k): v for k, v in kwargs.items()}
        x = la.asarray(host).to("cuda")
        step = _la_run(lambda lib, a: getattr(lib.fft, fn)(a, **la_kwargs), x)
    else:
        torch = _torch(False)
        x = torch.from_numpy(host).to("cuda")

        def step():
            out = getattr(torch.fft, fn)(x, **kwargs)
            torch.cuda.synchronize()
            return out
    _first(step, framework)
    _timed(benchmark, step, name, framework, host.nbytes)


@pytest.mark.parametrize("framework", ["lazyarray", "torch"])
@pytest.mark.parametrize("name", list(EIGH))
def test_eigh(benchmark, framework, name):
    (batch, n), dtype = EIGH[name]
    host = _spd(np.random.default_rng(0), batch, n, dtype)
    if framework == "lazyarray":
        x = la.asarray(host).to("cuda")
        step = _la_run(lambda lib, a: lib.linalg.eigh(a), x)
    else:
        torch = _torch(False)
        x = torch.from_numpy(host).to("cuda")

        def step():
            out = torch.linalg.eigh(x)
            torch.cuda.synchronize()
            return out
    _first(step, framework)
    _timed(benchmark, step, name, framework)
