"""Process start (issue 10 point 5, issue 11): a fresh interpreter's `import` and its first
call of a program whose compiled code is already on disk, beside the peers.

    python -m pytest bench/bench_startup.py --benchmark-only
    python bench/bench_startup.py [rounds]          # the table on stdout

The workload is the tiny sync of bench_host.py, `float((ones(4096) * 2 + 1).sum())`.
Each child interpreter times itself: `import` (the import statements) and `first call`
(making the array, recording, finding the program in the warm disk cache, loading it,
running it, the float back), in wall time and in the main thread's CPU time (which a
machine busy with other work inflates less); the figures are medians over `rounds` children, after two
that fill every cache (Python's .pyc files, lazyarray's compile cache, JAX's persistent
compilation cache). The benchmark's own timing is the whole child (interpreter start
included). Children run with PYTHONDONTWRITEBYTECODE unset, as an installed package
runs: without .pyc files every import compiles its source.

Peers: NumPy, PyTorch eager, and jax.jit with its persistent compilation cache; they run
with BENCH_PEERS_PYTHON (an interpreter with torch and jax, e.g. a venv made for the
bench) if set, else this one, and are skipped where not installed. torch.compile is left
out: its warm-cache start goes through Inductor's caches and a first call of seconds.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

import pytest

ROUNDS = 7

LAZYARRAY = """
import lazyarray as la
T1, C1 = time.perf_counter(), time.thread_time()
value = float((la.ones(4096{device}) * 2 + 1).sum())
"""
CHILDREN = {
    "lazyarray": (LAZYARRAY.format(device=""), {}),
    "lazyarray fake cuda": (LAZYARRAY.format(device=", device='cuda'"),
                            {"LAZYARRAY_FAKE_CUDA": "1"}),
    "numpy": ("""
import numpy as np
T1, C1 = time.perf_counter(), time.thread_time()
value = float((np.ones(4096) * 2 + 1).sum())
""", {}),
    "torch": ("""
import torch
T1, C1 = time.perf_counter(), time.thread_time()
value = float((torch.ones(4096) * 2 + 1).sum())
""", {}),
    "jax.jit": ("""
import jax
import jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", os.environ["BENCH_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
T1, C1 = time.perf_counter(), time.thread_time()
value = float(jax.jit(lambda x: (x * 2 + 1).sum())(jnp.ones(4096)))
""", {"JAX_PLATFORMS": "cpu"}),
}
MODULE = {"lazyarray": "lazyarray", "lazyarray fake cuda": "lazyarray", "numpy": "numpy",
          "torch": "torch", "jax.jit": "jax"}


def child_source(body: str) -> str:
    return ("import json, os, time\nT0, C0 = time.perf_counter(), time.thread_time()\n" +
            body + "T2, C2 = time.perf_counter(), time.thread_time()\n"
            "assert value == 12288.0, value\n"
            "print(json.dumps([T1 - T0, T2 - T1, C1 - C0, C2 - C1]))\n")


def interpreter(framework: str) -> str:
    if framework.startswith("lazyarray"):
        return sys.executable
    return os.environ.get("BENCH_PEERS_PYTHON") or sys.executable


def available(framework: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({MODULE[framework]!r}) is None)"
    return subprocess.run([interpreter(framework), "-c", probe]).returncode == 0


def run_child(framework: str, cache_dir: str) -> tuple:
    """Seconds of one fresh interpreter: (import, first call) wall, then the same in
    the main thread's CPU time (less sensitive to a loaded machine)."""
    body, extra = CHILDREN[framework]
    env = dict(os.environ, LAZYARRAY_CACHE_DIR=cache_dir, BENCH_CACHE_DIR=cache_dir, **extra)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("LAZYARRAY_DEVICE", None)
    out = subprocess.run([interpreter(framework), "-c", child_source(body)], env=env,
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{framework}: the child failed:\n{out.stderr[-2000:]}")
    return tuple(json.loads(out.stdout.strip().splitlines()[-1]))


def measure(framework: str, rounds: int = ROUNDS, cache_dir: str = "") -> dict:
    """Median milliseconds of `import` and `first call` over `rounds` fresh processes,
    after two that fill the caches."""
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        where = cache_dir or tmp
        for _ in range(2):
            run_child(framework, where)
        rows = [run_child(framework, where) for _ in range(rounds)]
    def median_ms(i: int) -> float:
        return round(statistics.median(r[i] for r in rows) * 1e3, 1)
    return {"import_ms": median_ms(0), "first_call_ms": median_ms(1),
            "import_cpu_ms": median_ms(2), "first_call_cpu_ms": median_ms(3), "rounds": rounds}


@pytest.mark.parametrize("framework", list(CHILDREN))
def test_startup(benchmark, framework: str) -> None:
    if not available(framework):
        pytest.skip(f"{MODULE[framework]} is not installed for {interpreter(framework)}")
    benchmark.group = "fresh process: import + first call of a cached tiny sync"
    benchmark.extra_info.update(framework=framework, **measure(framework))
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        run_child(framework, tmp)                      # fills this timing's caches
        benchmark.pedantic(run_child, args=(framework, tmp), rounds=ROUNDS, iterations=1)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS
    print(f"medians over {rounds} fresh processes, warm caches; load {os.getloadavg()[0]:.1f}")
    print(f"{'framework':<22} {'import ms':>10} {'first call ms':>14} "
          f"{'(CPU: import':>13} {'first call)':>12}")
    for framework in CHILDREN:
        if not available(framework):
            print(f"{framework:<22} {'(not installed)':>25}")
            continue
        m = measure(framework, rounds)
        print(f"{framework:<22} {m['import_ms']:>10.1f} {m['first_call_ms']:>14.1f} "
              f"{m['import_cpu_ms']:>13.1f} {m['first_call_cpu_ms']:>12.1f}")


if __name__ == "__main__":
    main()
