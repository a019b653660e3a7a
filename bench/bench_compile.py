"""Issue 12: how long a first call takes (trace + compile + run), per workload, and how
many programs a loop idiom compiles. Not timed tests: figures for the results table.

    python -m pytest bench/bench_compile.py --benchmark-only

Each round starts from empty caches (memory and disk off), so every round measures a
first call. PyTorch's first eager call is measured beside it where installed.

Reported per workload (extra_info): `compile_s` (median seconds in the compiler over the
rounds), for the encoder `compile_s_per_block` (that over its layers; issue 12's budget:
first call <= 0.5 s, <= 50 ms per block, a first MLP step <= 0.3 s), and `stages_ms`: where
one more first call spent its compile (each HLO pass, fusion, buffer assignment, LLVM IR
generation, LLVM optimization, object emission, loading), from the profiler's hooks.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from compile_workloads import LAYERS, make_encoder, make_mlp_step
from peers import installed

WORKLOADS = {
    "encoder 6x384 forward": lambda: make_encoder(),
    "transformer block forward": lambda: make_encoder(layers=1),
    "mlp training step": make_mlp_step,
}


class _Stages:
    """A profile recorder that only sums each compile stage's seconds."""

    def __init__(self) -> None:
        self.seconds: dict = {}

    def span(self, category: str, name: str, t0: float, t1: float, args: dict) -> None:
        if category in ("pass", "codegen"):
            self.seconds[name] = self.seconds.get(name, 0.0) + (t1 - t0)

    def __getattr__(self, name: str):     # the hooks of kernels, syncs, autodiff: ignored
        return lambda *args, **kwargs: None


def stage_breakdown(make) -> dict:
    """Milliseconds per compile stage of one first call of `make()`'s workload."""
    import lazyarray as la
    from lazyarray import runtime
    from lazyarray.compiler import profile_hooks
    runtime.clear_caches()
    fn = make()
    rec = _Stages()
    with la.config.override(cache_dir="off"):
        profile_hooks.ACTIVE = rec
        try:
            fn()
        finally:
            profile_hooks.ACTIVE = None
    return {k: round(v * 1e3, 1) for k, v in sorted(rec.seconds.items(), key=lambda kv: -kv[1])}


def _first_call(make, compile_seconds: list):
    import lazyarray as la
    from lazyarray import runtime

    def setup():
        runtime.clear_caches()
        return (make(),), {}

    def first(fn):
        before = la.debug.metrics().compile_seconds
        with la.config.override(cache_dir="off"):
            fn()
        compile_seconds.append(la.debug.metrics().compile_seconds - before)
    return setup, first


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_lazyarray_first_call(benchmark, name):
    seconds: list = []
    setup, first = _first_call(WORKLOADS[name], seconds)
    benchmark.group = f"first call: {name}"
    benchmark.pedantic(first, setup=setup, rounds=3, iterations=1)
    compile_s = float(np.median(seconds))
    benchmark.extra_info.update(framework="lazyarray", compile_s=compile_s)
    if name.startswith("encoder"):
        benchmark.extra_info["compile_s_per_block"] = compile_s / LAYERS
    benchmark.extra_info["stages_ms"] = stage_breakdown(WORKLOADS[name])


def _torch_encoder():
    import torch
    layer = torch.nn.TransformerEncoderLayer(384, 6, 1536, dropout=0.0, batch_first=True,
                                             activation="gelu")
    model = torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
    embed = torch.nn.Embedding(1000, 384)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, 1000, (2, 32)))
    with torch.no_grad():
        return model(embed(tokens)).numpy()


def test_torch_encoder_first_call(benchmark):
    if not installed("torch"):
        pytest.skip("PyTorch is not installed")
    benchmark.group = "first call: encoder 6x384 forward"
    benchmark.extra_info.update(framework="torch")
    benchmark.pedantic(_torch_encoder, rounds=3, iterations=1)


# ---- compiles per loop idiom ------------------------------------------------------------

def _idioms():
    import lazyarray as la
    X = la.asarray(np.random.default_rng(0).standard_normal((1000, 16), dtype=np.float32))
    perm = la.asarray(np.random.default_rng(1).permutation(1000))

    def batches():             # 16 batches of 64 and a short last one: 2 shapes
        for i in range(0, 1000, 64):
            X[perm[i:i + 64]].numpy()

    def rows():
        for i in range(40):
            X[i].numpy()

    def windows():
        for i in range(40):
            la.dynamic_slice(X, (i * 7, 0), (32, 16)).numpy()
    return {"X[perm[i:i+64]]": batches, "X[i]": rows, "dynamic_slice window": windows}


@pytest.mark.parametrize("idiom", ["X[perm[i:i+64]]", "X[i]", "dynamic_slice window"])
def test_compiles_per_loop_idiom(benchmark, idiom):
    import lazyarray as la
    from lazyarray import runtime
    runtime.clear_caches()
    loop = _idioms()[idiom]
    before = la.debug.metrics().cache_misses
    t0 = time.perf_counter()
    loop()
    first_s = time.perf_counter() - t0
    benchmark.group = "compiles per loop idiom"
    benchmark.extra_info.update(framework="lazyarray", compiles=la.debug.metrics().cache_misses - before,
                                first_loop_s=first_s)
    benchmark(loop)


# ---- a quick table without pytest -------------------------------------------------------

def main(rounds: int = 5) -> None:
    """`python bench/bench_compile.py [rounds]`: per workload, the median first call, the
    median compile (per block for the encoder) and the stage breakdown of one more."""
    import statistics
    for name, make in WORKLOADS.items():
        seconds: list = []
        walls: list = []
        setup, first = _first_call(make, seconds)
        for _ in range(rounds):
            (fn,), _ = setup()
            t0 = time.perf_counter()
            first(fn)
            walls.append(time.perf_counter() - t0)
        compile_s = statistics.median(seconds)
        per_block = f", {compile_s / LAYERS * 1e3:.0f} ms per block" if name.startswith("encoder") else ""
        print(f"{name}: first call {statistics.median(walls) * 1e3:.0f} ms, compile "
              f"{compile_s * 1e3:.0f} ms{per_block} (medians of {rounds})")
        stages = stage_breakdown(make)
        print("    " + ", ".join(f"{k} {v:.0f}" for k, v in stages.items() if v >= 1) + " (ms)")


if __name__ == "__main__":
    import sys
    sys.path.insert(0, __import__("os").path.dirname(__file__))
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
