"""Issue 30: what one iteration of a compiled loop costs beyond its body's kernels.

    python -m pytest bench/bench_loops.py --benchmark-only
    python bench/bench_loops.py          # the same figures as one table (medians)

Each workload runs a loop of ITERATIONS iterations and, timed apart, of one; the
difference over ITERATIONS - 1 is the cost of an iteration (`us_per_iteration`):

- empty body: the state passes through untouched, only the counter changes (the loop's
  own cost: the condition, the counter's kernel, the runner);
- tiny body: `s * 0.5 + 1` over 16 float32 (one fused kernel an iteration).

lazyarray runs the loop as one `la.fori_loop` (an HLO while, run natively by the control
runner); jax.jit as one `lax.fori_loop`; NumPy and PyTorch eager as a Python loop.
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from peers import installed

# iterations of the timed loop: enough for a compiled loop's (well under a microsecond)
# to stand out of a call's own cost, fewer for the Python loops
ITERATIONS = {"compiled": 100_001, "python": 2_001}
STATE = np.linspace(0.0, 1.0, 16, dtype=np.float32)


def _lazyarray(body: str):
    import lazyarray as la
    x = la.asarray(STATE)
    la.sync()
    step = (lambda i, s: s) if body == "empty" else (lambda i, s: s * 0.5 + 1.0)

    def run(n: int):
        c, s = la.fori_loop(0, n, lambda i, s: (s[0] + 1, step(i, s[1])),
                            (la.asarray(np.int32(0)), x))
        la.sync()                                   # both results, one program
        return c.item() + 0 * float(s.numpy()[0])
    return run


def _jax(body: str):
    import jax
    import jax.numpy as jnp
    x = jnp.asarray(STATE)
    step = (lambda i, s: s) if body == "empty" else (lambda i, s: s * 0.5 + 1.0)
    f = jax.jit(lambda n, v: jax.lax.fori_loop(0, n, lambda i, s: (s[0] + 1, step(i, s[1])),
                                              (jnp.int32(0), v)))

    def run(n: int):
        c, s = f(n, x)
        return int(c) + 0 * float(s[0])
    return run


def _numpy(body: str):
    x = STATE.copy()

    def run(n: int):
        s, c = x, 0
        for _ in range(n):
            c += 1
            if body == "tiny":
                s = s * np.float32(0.5) + np.float32(1.0)
        return c + 0 * float(s[0])
    return run


def _torch(body: str):
    import torch
    x = torch.from_numpy(STATE.copy())

    def run(n: int):
        s, c = x, 0
        for _ in range(n):
            c += 1
            if body == "tiny":
                s = s * 0.5 + 1.0
        return c + 0 * float(s[0])
    return run


FRAMEWORKS = {"lazyarray (la.fori_loop)": (_lazyarray, None, "compiled"),
              "jax.jit (lax.fori_loop)": (_jax, "jax", "compiled"),
              "numpy (Python loop)": (_numpy, None, "python"),
              "torch (Python loop)": (_torch, "torch", "python")}


def _one_iteration(run, repeats: int = 30) -> float:
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        run(1)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


@pytest.mark.parametrize("body", ["empty", "tiny"])
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_loop_iteration(benchmark, framework: str, body: str) -> None:
    make, module, kind = FRAMEWORKS[framework]
    if module is not None and not installed(module):
        pytest.skip(f"{module} is not installed")
    run = make(body)
    n = ITERATIONS[kind]
    assert run(n) == n and run(1) == 1      # compiled, and correct
    benchmark.group = f"loop iteration, {body} body"
    benchmark.extra_info["framework"] = framework
    benchmark(run, n)
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is None:              # (--benchmark-disable: nothing timed)
        return
    per = (stats.median - _one_iteration(run)) / (n - 1)
    benchmark.extra_info["us_per_iteration"] = per * 1e6


def main() -> None:
    """Per-iteration costs, medians of alternating runs of each framework."""
    rows = {}
    for body in ("empty", "tiny"):
        runs = {}
        for name, (make, module, kind) in FRAMEWORKS.items():
            if module is None or installed(module):
                runs[name] = (make(body), ITERATIONS[kind])
                runs[name][0](2)
        times: dict = {name: ([], []) for name in runs}
        for _ in range(9):
            for name, (run, iterations) in runs.items():
                for k, n in enumerate((1, iterations)):
                    t = time.perf_counter()
                    run(n)
                    times[name][k].append(time.perf_counter() - t)
        for name, (one, many) in times.items():
            per = (statistics.median(many) - statistics.median(one)) / (runs[name][1] - 1)
            rows[(body, name)] = per * 1e6
    print(f"{'body':6} {'framework':28} us/iteration")
    for (body, name), us in rows.items():
        print(f"{body:6} {name:28} {us:8.3f}")


if __name__ == "__main__":
    main()
