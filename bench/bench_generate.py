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
    weights = gen.make_weights()
    _, compiles = gen.la_generate(weights, PROMPT, NEW_TOKENS)      # compiles once
    _record(benchmark, "lazyarray")
    result = benchmark(gen.la_generate, weights, PROMPT, NEW_TOKENS)
    assert result[1] == 0                    # every timed step was a cache hit
    benchmark.extra_info["tokens_per_s"] = NEW_TOKENS / benchmark.stats.stats.median


def test_lazyarray_generate_compiled_loop(benchmark):
    """The token loop as one la.fori_loop (an HLO while): one program, one sync."""
    gen = _example()
    weights = gen.make_weights()
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
