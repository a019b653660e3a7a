"""Issue 30 point 3 on a GPU: a decoding loop and a tiny-body loop on "cuda", the loop as
one CUDA graph with a WHILE node (devices/cuda/cuda_loops.py; CUDA 12.4+ drivers) beside
the host-driven form (the condition read back asynchronously, one iteration ahead:
`cuda_loops.ENABLED = False`), the Python loop over a cached step, NumPy's eager decoder
and a PyTorch Python loop. Each form's result is checked against NumPy's first. Run by
bench/gpu_check.sh (phase "loops"); skipped without a GPU.

    python -m pytest bench/bench_cuda_loops.py --benchmark-only
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cuda import cuda as cuda_device
from lazyarray.devices.cuda import cuda_loops

from bench_generate import NEW_TOKENS, PROMPT, _example

pytestmark = pytest.mark.skipif(not cuda_device.available(), reason="no CUDA GPU")
TINY_ITERATIONS = 1000
# the default form on a 12.4+ driver is "lazyarray" (report.py's ratio column reads it)
FRAMEWORK = {"graph": "lazyarray", "host": "lazyarray (host-driven loop)"}


@contextlib.contextmanager
def _form(form: str):
    """"graph": loops as conditional graph nodes (where the driver has them);
    "host": the host-driven read-ahead form."""
    was = cuda_loops.ENABLED
    cuda_loops.ENABLED = form == "graph"
    try:
        with la.config.override(device="cuda"):
            yield
    finally:
        cuda_loops.ENABLED = was


def _label(benchmark, group: str, framework: str) -> None:
    benchmark.group = group
    benchmark.extra_info["framework"] = framework


@pytest.mark.parametrize("form", ["graph", "host"])
def test_decoder_compiled_loop(benchmark, form):
    """The example decoder's token loop as one la.fori_loop on the GPU."""
    gen = _example()
    want = gen.np_generate(gen.make_weights(), PROMPT, NEW_TOKENS)
    with _form(form):
        if form == "graph" and la.runtime.get_device("cuda").device.loop_graphs_missing():
            pytest.skip(la.runtime.get_device("cuda").device.loop_graphs_missing())
        weights = gen.la_weights(gen.make_weights())
        tokens, _ = gen.la_generate_compiled(weights, PROMPT, NEW_TOKENS)    # compiles
        assert tokens == want
        _label(benchmark, f"decoder, {NEW_TOKENS} new tokens", FRAMEWORK[form])
        tokens, compiles = benchmark(gen.la_generate_compiled, weights, PROMPT, NEW_TOKENS)
    assert compiles == 0 and tokens == want
    if benchmark.stats is not None:               # (None under --benchmark-disable)
        benchmark.extra_info["tokens_per_s"] = NEW_TOKENS / benchmark.stats.stats.median


def test_decoder_python_loop(benchmark):
    gen = _example()
    with _form("graph"):
        weights = gen.la_weights(gen.make_weights())
        gen.la_generate(weights, PROMPT, NEW_TOKENS)
        _label(benchmark, f"decoder, {NEW_TOKENS} new tokens", "lazyarray (Python loop)")
        benchmark(gen.la_generate, weights, PROMPT, NEW_TOKENS)


def test_decoder_numpy(benchmark):
    gen = _example()
    weights = gen.make_weights()
    _label(benchmark, f"decoder, {NEW_TOKENS} new tokens", "numpy")
    benchmark(gen.np_generate, weights, PROMPT, NEW_TOKENS)


@pytest.mark.parametrize("framework", ["graph", "host", "torch"])
def test_tiny_body_loop(benchmark, framework):
    """1000 iterations of `v * 0.5 + 1` over 4096 floats, the result read once: what a
    loop costs per iteration beyond its body."""
    x = np.linspace(0.0, 1.0, 4096, dtype=np.float32)
    want = x.copy()
    for _ in range(TINY_ITERATIONS):
        want = want * np.float32(0.5) + np.float32(1.0)
    group = f"loop of {TINY_ITERATIONS} tiny iterations"
    if framework == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch has no CUDA here")
        xt = torch.from_numpy(x).to("cuda")

        def step():
            v = xt
            for _ in range(TINY_ITERATIONS):
                v = v * 0.5 + 1.0
            return v.cpu().numpy()
        np.testing.assert_allclose(step(), want, rtol=1e-6)
        _label(benchmark, group, "torch")
        benchmark(step)
        return
    with _form(framework):
        xt = la.asarray(x)

        def run():
            return la.fori_loop(0, TINY_ITERATIONS, lambda i, v: v * 0.5 + 1.0, xt).numpy()
        np.testing.assert_allclose(run(), want, rtol=1e-6)
        _label(benchmark, group, FRAMEWORK[framework])
        benchmark(run)


KV_ROWS, KV_WIDTH, KV_STEPS = 4096, 1024, 64       # a 16 MB float32 cache, 64 rows written


@pytest.mark.parametrize("framework", ["graph", "host", "torch"])
def test_kv_cache_loop(benchmark, framework):
    """A loop whose state holds a 16 MB cache written one row a step (a decoder's KV
    cache): the body is compiled with its state donated, so the row alone is written and
    the cache is never copied (the graph form; the host form's read-ahead copies states
    up to host_loops.AHEAD_COPY_BYTES, a larger one is updated in place with a read back
    per step). PyTorch writes the row in place (`cache[i] = h`)."""
    h0 = np.linspace(-1.0, 1.0, KV_WIDTH, dtype=np.float32)
    want = np.zeros((KV_ROWS, KV_WIDTH), np.float32)
    h = h0.copy()
    for i in range(KV_STEPS):
        h = np.tanh(h * np.float32(0.5) + np.float32(0.1))
        want[i] = h
    group = f"KV cache {KV_ROWS}x{KV_WIDTH}, {KV_STEPS} rows written"
    if framework == "torch":
        torch = pytest.importorskip("torch")
        if not torch.cuda.is_available():
            pytest.skip("PyTorch has no CUDA here")

        def step():
            v = torch.from_numpy(h0).to("cuda")
            cache = torch.zeros((KV_ROWS, KV_WIDTH), device="cuda")
            for i in range(KV_STEPS):
                v = torch.tanh(v * 0.5 + 0.1)
                cache[i] = v
            return cache[KV_STEPS - 1].cpu().numpy()
        np.testing.assert_allclose(step(), want[KV_STEPS - 1], rtol=1e-5)
        _label(benchmark, group, "torch")
        benchmark(step)
        return
    with _form(framework):
        ht = la.asarray(h0)

        def body(i, s):
            v = la.tanh(s[0] * 0.5 + 0.1)
            return v, la.dynamic_update_slice(s[1], la.reshape(v, (1, KV_WIDTH)), (i, 0))

        def run():
            cache = la.zeros((KV_ROWS, KV_WIDTH), dtype=la.float32)
            return la.fori_loop(0, KV_STEPS, body, (ht, cache))[1][KV_STEPS - 1].numpy()
        np.testing.assert_allclose(run(), want[KV_STEPS - 1], rtol=1e-5)
        _label(benchmark, group, FRAMEWORK[framework])
        benchmark(run)
