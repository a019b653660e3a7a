"""Process start: a new user's first training step from an empty compile cache, and a
fresh interpreter's `import` and first call of a program already on disk, beside the peers.

    python -m pytest bench/bench_startup.py --benchmark-only
    python bench/bench_startup.py [rounds]          # the tables on stdout

Cold start (issue 31): each child is a new process whose LAZYARRAY_CACHE_DIR is a new
empty folder, so every program and the runtime's own native code (the worker pool, the
GEMM tile functions a product needs) is compiled in it. Two workloads, as a user first
meets them: the README's training loop (an MLP 64-128-10, Adam, batch 32) and
examples/train_digits.py's CNN (its `make_cnn`, Adam with the cosine schedule, batch 32
of 1x8x8 images). Each child times `import lazyarray`, building the model and Adam
(Adam's constructor computes the parameters' lazy initialization: one compile), the
first step (forward, backward, update and `loss.item()`: compile included) and the
second (a cache hit), in wall time and in the process's CPU time (all threads), and
reports the compile metrics. Medians over `rounds` children.

Warm start (issue 10 point 5, issue 11):
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


# ---- cold start: the first training step from an empty cache --------------------------

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
COLD = """
import json, os, sys, time
def clocks():
    return time.perf_counter(), time.process_time()
t = [clocks()]
import numpy as np
import lazyarray as la
t.append(clocks())
rng = np.random.default_rng(0)
WORKLOAD
t.append(clocks())
def step():
    with la.GradientTape() as tape:
        loss = criterion(model(xb), yb)
    opt.apply_gradients(tape.gradient(loss, model.parameters()))
    return loss.item()
first = step()
t.append(clocks())
step()
t.append(clocks())
m = la.debug.metrics()
assert np.isfinite(first)
print(json.dumps({"wall": [b[0] - a[0] for a, b in zip(t, t[1:])],
                  "cpu": [b[1] - a[1] for a, b in zip(t, t[1:])],
                  "compiles": m.compiles, "disk_hits": m.disk_hits,
                  "runtime_builds": getattr(m, "runtime_builds", None)}))
"""
COLD_WORKLOADS = {
    "README MLP step": """
xb = la.asarray(rng.normal(size=(32, 64)).astype(np.float32))
yb = la.asarray(rng.integers(0, 10, 32))
model = la.nn.Sequential(la.nn.Linear(64, 128), la.nn.ReLU(), la.nn.Linear(128, 10))
opt = la.optim.Adam(model.parameters(), lr=1e-3)
criterion = la.nn.functional.cross_entropy
""",
    "train_digits CNN step": """
sys.path.insert(0, os.environ["BENCH_EXAMPLES"])
from train_digits import make_cnn
xb = la.asarray(rng.random((32, 1, 8, 8)).astype(np.float32))
yb = la.asarray(rng.integers(0, 10, 32))
model = make_cnn()
opt = la.optim.Adam(model.parameters(), lr=la.optim.schedules.cosine(5e-3, 1000))
criterion = la.nn.CrossEntropyLoss()
""",
}
PHASES = ("import", "model + Adam", "first step", "second step")


def run_cold(workload: str) -> dict:
    """One new process with a new empty cache folder: seconds of each phase."""
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as cache:
        env = dict(os.environ, LAZYARRAY_CACHE_DIR=cache, BENCH_EXAMPLES=EXAMPLES)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("LAZYARRAY_DEVICE", None)
        code = COLD.replace("WORKLOAD", COLD_WORKLOADS[workload])
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{workload}: the child failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_cold(workload: str, rounds: int = 3) -> dict:
    """Median milliseconds of each phase (wall and CPU) over `rounds` cold processes."""
    rows = [run_cold(workload) for _ in range(rounds)]
    med = lambda key, i: round(statistics.median(r[key][i] for r in rows) * 1e3, 1)
    return {"rounds": rounds, "compiles": rows[-1]["compiles"],
            **{f"{p}_ms": med("wall", i) for i, p in enumerate(PHASES)},
            **{f"{p}_cpu_ms": med("cpu", i) for i, p in enumerate(PHASES)}}


@pytest.mark.parametrize("workload", list(COLD_WORKLOADS))
def test_cold_first_step(benchmark, workload: str) -> None:
    benchmark.group = "new process, empty compile cache: the first training step"
    benchmark.extra_info.update(workload=workload, **measure_cold(workload))
    benchmark.pedantic(run_cold, args=(workload,), rounds=3, iterations=1)


def print_cold(rounds: int) -> None:
    print(f"cold start: medians over {rounds} new processes, each with an empty cache; "
          f"load {os.getloadavg()[0]:.1f}; ms wall (CPU of all threads)")
    print(f"{'workload':<24}" + "".join(f"{p:>22}" for p in PHASES))
    for workload in COLD_WORKLOADS:
        m = measure_cold(workload, rounds)
        print(f"{workload:<24}" + "".join(
            f"{m[p + '_ms']:>12.0f} ({m[p + '_cpu_ms']:>6.0f})" for p in PHASES))


# ---- warm start: import and a cached tiny sync, beside the peers -----------------------

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
    print_cold(min(rounds, 3))
    print()
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
