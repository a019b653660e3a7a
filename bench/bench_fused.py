"""Issue 3's CPU workloads, by lazyarray and by each peer in the same run, plus a memory
copy for the bandwidth figure. `python bench/report.py` writes the table of ratios.

The bandwidth-bound workloads are measured a second way too (`test_interleaved`): on a
machine shared with other work, the bandwidth a test gets drifts between one framework's
benchmark and the next, and for workloads every framework runs at the memory's speed that
drift decides the ratio. There each round runs every framework in turn, so the drift falls
on all of them alike."""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from peers import FRAMEWORKS, namespace
from workloads import WORKLOADS

_INPUTS: dict = {}

# the workloads bound by memory bandwidth, measured interleaved, and the frameworks there
# (NumPy and PyTorch eager are 5-20x slower: nothing a few percent of drift could decide)
INTERLEAVED = ("mean(3*x**2+y) 2^24", "sum(x+y*z) 2^24")
INTERLEAVED_FRAMEWORKS = ("lazyarray", "torch.compile", "jax.jit")
INTERLEAVED_ROUNDS = 40
TIMED_PER_ROUND = 2          # calls timed per framework and round, after one untimed call


def inputs(name: str) -> tuple:
    if name not in _INPUTS:
        _INPUTS.clear()                  # keep one workload's arrays in memory at a time
        _INPUTS[name] = WORKLOADS[name][1](np.random.default_rng(0))
    return _INPUTS[name]


def _runner(framework: str, workload: str):
    """A checked, warmed-up call of `workload` by `framework` (compiled once)."""
    fw = FRAMEWORKS[framework]
    fn = WORKLOADS[workload][0]
    xp = namespace(framework)
    args = [fw.put(a) for a in inputs(workload)]
    run = fw.compile(lambda *a: fn(xp, *a))
    expect = fn(np, *inputs(workload))
    got = np.asarray(fw.finish(run(*args)))
    np.testing.assert_allclose(got, expect, rtol=2e-3, atol=2e-3)
    return lambda: fw.finish(run(*args))


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_workload(benchmark, workload, framework):
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    call = _runner(framework, workload)
    benchmark.group = workload
    benchmark.extra_info.update(framework=framework, bytes=WORKLOADS[workload][2])
    benchmark(call)


def interleaved_rounds(calls: dict, rounds: int, timed: int) -> dict:
    """Each framework's call times, measured in rounds: in each round every framework in
    turn (the order rotated from round to round) makes one untimed call (its threads,
    asleep after the other frameworks' turns, wake up) and then `timed` timed ones."""
    names = list(calls)
    times: dict = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            calls[name]()
            for _ in range(timed):
                t0 = time.perf_counter()
                calls[name]()
                times[name].append(time.perf_counter() - t0)
    return times


@pytest.mark.parametrize("workload", INTERLEAVED)
def test_interleaved(benchmark, workload):
    """The workload by lazyarray and the compiled peers, interleaved round by round; the
    medians go to `extra_info["interleaved"]` (report.py's second table). The benchmark's
    own figure is the whole measurement's time, not a call's."""
    calls = {name: _runner(name, workload) for name in INTERLEAVED_FRAMEWORKS
             if FRAMEWORKS[name].available}
    if len(calls) < 2:
        pytest.skip("no compiled peer (torch.compile, jax.jit) is installed")
    times: dict = {}
    benchmark.group = workload + " (interleaved)"
    benchmark.pedantic(lambda: times.update(interleaved_rounds(
        calls, INTERLEAVED_ROUNDS, TIMED_PER_ROUND)), rounds=1, iterations=1)
    benchmark.extra_info.update(
        interleaved={name: statistics.median(ts) for name, ts in times.items()},
        rounds=INTERLEAVED_ROUNDS, bytes=WORKLOADS[workload][2])


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


# ---- the README's first example: random numbers and their consumer ----------------------

RANDOM_SHAPE = (4096, 4096)


def _random_then_reduce(framework: str):
    """normal(RANDOM_SHAPE) then (3 x^2 + 1).mean(axis=1), each framework with its own
    generator (lazyarray's and JAX's are counter-based and fuse into the reduction;
    NumPy's and PyTorch's write x first). The results are each generator's own, so the
    check is statistical: every row's mean of 3 x^2 + 1 is close to 4."""
    if framework == "lazyarray":
        import lazyarray as la

        def call():
            x = la.random.normal(RANDOM_SHAPE)
            return (3 * x ** 2 + 1).mean(axis=1).numpy()
    elif framework == "numpy":
        rng = np.random.default_rng(0)

        def call():
            x = rng.standard_normal(RANDOM_SHAPE, dtype=np.float32)
            return (3 * x ** 2 + 1).mean(axis=1)
    elif framework in ("torch", "torch.compile"):
        import torch
        fn = lambda: (3 * torch.randn(RANDOM_SHAPE) ** 2 + 1).mean(dim=1)
        run = torch.compile(fn) if framework == "torch.compile" else fn
        call = lambda: run().numpy()
    else:                                             # jax.jit
        import jax
        import jax.numpy as jnp
        keys = iter(jax.random.split(jax.random.PRNGKey(0), 10_000))
        run = jax.jit(lambda k: (3 * jax.random.normal(k, RANDOM_SHAPE, jnp.float32) ** 2
                                 + 1).mean(axis=1))
        call = lambda: np.asarray(run(next(keys)))
    got = call()
    assert got.shape == RANDOM_SHAPE[:1] and abs(float(got.mean()) - 4.0) < 0.05, got.mean()
    return call


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_random_normal_then_reduce(benchmark, framework):
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    call = _random_then_reduce(framework)
    benchmark.group = "normal 4096^2 -> (3x^2+1).mean(1)"
    benchmark.extra_info.update(framework=framework)
    benchmark(call)
