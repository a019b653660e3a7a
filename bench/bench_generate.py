"""Issue 12: the generation example's decoding speed (tokens per second) beside the same
decoder as a NumPy loop. The compile is done before timing (one program for all steps).

    python -m pytest bench/bench_generate.py --benchmark-only
"""
from __future__ import annotations

import importlib.util
import os

import pytest

NEW_TOKENS = 32
PROMPT = [3, 14, 15, 9, 26]


def _example():
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "generate.py")
    spec = importlib.util.spec_from_file_location("generate_example", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(benchmark, framework):
    benchmark.group = f"greedy generation, {NEW_TOKENS} new tokens"
    benchmark.extra_info.update(framework=framework, tokens=NEW_TOKENS)


def test_lazyarray_generate(benchmark):
    gen = _example()
    weights = gen.la_weights(gen.make_weights())          # uploaded once, as a model's
    _, compiles = gen.la_generate(weights, PROMPT, NEW_TOKENS)      # compiles once
    _record(benchmark, "lazyarray")
    result = benchmark(gen.la_generate, weights, PROMPT, NEW_TOKENS)
    assert result[1] == 0                    # every timed step was a cache hit
    benchmark.extra_info["tokens_per_s"] = NEW_TOKENS / benchmark.stats.stats.median


def test_lazyarray_generate_compiled_loop(benchmark):
    """The token loop as one la.fori_loop (an HLO while): one program, one sync."""
    gen = _example()
    weights = gen.la_weights(gen.make_weights())
    gen.la_generate_compiled(weights, PROMPT, NEW_TOKENS)             # compiles once
    _record(benchmark, "lazyarray (compiled loop)")
    result = benchmark(gen.la_generate_compiled, weights, PROMPT, NEW_TOKENS)
    assert result[1] == 0
    benchmark.extra_info["tokens_per_s"] = NEW_TOKENS / benchmark.stats.stats.median


def test_numpy_generate(benchmark):
    gen = _example()
    weights = gen.make_weights()
    _record(benchmark, "numpy")
    benchmark(gen.np_generate, weights, PROMPT, NEW_TOKENS)
    benchmark.extra_info["tokens_per_s"] = NEW_TOKENS / benchmark.stats.stats.median


def main() -> None:
    """Tokens per second of each form, medians of alternating runs in one process: CPU
    time of the process (the machine is shared: wall time mostly measures the others)
    and wall time; and the compiled loop's cost per token alone (the slope between 8 and
    NEW_TOKENS new tokens, which leaves out the per-call tracing and sync)."""
    import statistics
    import time

    gen = _example()
    weights = gen.make_weights()
    # each engine's weights in its own form, made once (lazyarray's uploaded once)
    la_w = gen.la_weights(weights)
    forms = {"numpy": gen.np_generate,
             "lazyarray (compiled loop)": lambda _, p, n: gen.la_generate_compiled(la_w, p, n),
             "lazyarray (Python loop)": lambda _, p, n: gen.la_generate(la_w, p, n)}
    for f in forms.values():
        f(weights, PROMPT, NEW_TOKENS)
        f(weights, PROMPT, 8)
    cpu: dict = {k: {n: [] for n in (8, NEW_TOKENS)} for k in forms}
    wall: dict = {k: [] for k in forms}
    for _ in range(15):
        for name, f in forms.items():
            for n in (8, NEW_TOKENS):
                t, c = time.perf_counter(), time.process_time()
                f(weights, PROMPT, n)
                cpu[name][n].append(time.process_time() - c)
                if n == NEW_TOKENS:
                    wall[name].append(time.perf_counter() - t)
    base = statistics.median(cpu["numpy"][NEW_TOKENS])
    print(f"{'form':28} {'CPU ms':>8} {'wall ms':>8} {'tokens/s (CPU)':>15} {'vs numpy':>9} "
          f"{'per token us':>13}")
    for name in forms:
        c = statistics.median(cpu[name][NEW_TOKENS])
        per = (c - statistics.median(cpu[name][8])) / (NEW_TOKENS - 8)
        print(f"{name:28} {c * 1e3:8.2f} {statistics.median(wall[name]) * 1e3:8.2f} "
              f"{NEW_TOKENS / c:15.0f} {base / c:8.2f}x {per * 1e6:13.1f}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
