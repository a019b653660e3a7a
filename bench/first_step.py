"""The first step of each benchmark model split into its parts, each in a new process with
an empty compile cache (issue 29: the first step, compile included, in 1 s at most).

    python bench/first_step.py [gpt cnn encoder decode ...] [--rounds 3]

Each child is a new interpreter whose LAZYARRAY_CACHE_DIR is a new empty folder (with
`--runtime-warm`, a folder holding only the runtime's generic native code: worker pool,
control runner, GEMM tile functions, as `runtime_objects.prebuild` leaves it once per
machine and code version; the model's program and kernel trampolines are still built). It
times `import lazyarray`, building the model (bench_models.la_runner: the model, its
weights, the optimizer, the batches; the parameters' initialization is a compile of its
own, before the step), then the first call under `la.profiler`, whose spans give the
parts: recording the step's ops, the passes (fusion, planning, buffer assignment), the
LLVM IR generation (with the functions' texts, cut into pieces that other threads build
meanwhile: compiler/codegen/module_split.py), LLVM's optimization and object code of the
pieces the compiling thread builds itself once generation ends (the other threads' share
is in "CPU, all threads"), loading the program,
the runtime's own native code built on the first run (worker pool, kernel trampolines,
GEMM tile functions: counted apart, as `la.debug.metrics()` does) and the run itself.
Also the first call's CPU time on the main thread (LLVM runs there), the second call (a
cache hit), the compiles and kernels. The table holds medians over the rounds (ms) and
the machine's load average while they ran: on a shared machine the wall times grow with
the load, the CPU times much less.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
import lazyarray as la
t1 = time.perf_counter()
sys.path[:0] = [os.path.join(HERE, "..", "examples"), HERE]
from bench_models import la_runner
t2 = time.perf_counter()
run = la_runner(MODEL)
t3 = time.perf_counter()
compiles = la.debug.metrics().compiles
c0, p0 = time.thread_time(), time.process_time()
with la.profiler.profile() as prof:
    run()
c1, p1 = time.thread_time(), time.process_time()
t4 = time.perf_counter()
run()
t5 = time.perf_counter()
m = la.debug.metrics()

def total(cat, name=None):
    return sum(e.seconds for e in prof.events if e.cat == cat and name in (None, e.name))

runs = [e for e in prof.events if e.cat == "sync" and e.name == "run"]
inside = lambda e: any(r.t0 <= e.t0 and e.t1 <= r.t1 for r in runs)
runtime = [e for e in prof.events if e.cat == "runtime"]
in_run = sum(e.seconds for e in runtime if inside(e))
print(json.dumps({
    "import": t1 - t0, "model build": t3 - t2,
    "first step": t4 - t3, "first step CPU": c1 - c0, "first step CPU, all threads": p1 - p0,
    "recording": total("trace"), "passes": total("pass"),
    "IR generation": total("codegen", "cpu_kernels"),
    "LLVM optimize": total("codegen", "llvm_optimize"),
    "LLVM object code": total("codegen", "emit_object"),
    "load program": total("codegen", "load_object"),
    "runtime builds": sum(e.seconds for e in runtime),
    "run itself": total("sync", "run") - in_run,
    "second step": t5 - t4,
    "compiles": m.compiles - compiles, "runtime objects": len(runtime),
    "kernels": m.kernels_launched,
}))
"""

SECONDS = ("import", "model build", "first step", "first step CPU",
           "first step CPU, all threads", "recording", "passes",
           "IR generation", "LLVM optimize", "LLVM object code", "load program", "runtime builds",
           "run itself", "second step")


# the runtime's generic native code (worker pool, control runner, GEMM tile functions),
# built into the cache by a process of its own before the measured one starts
PREBUILD = ("import lazyarray as la\nla.asarray([1.0])\n"
            "from lazyarray.devices.cpu import runtime_objects\nruntime_objects.prebuild()\n")


def child(model: str, runtime_warm: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="first-step-") as cache:
        env = dict(os.environ, LAZYARRAY_CACHE_DIR=cache)
        env.pop("LAZYARRAY_DEVICE", None)
        if runtime_warm:
            subprocess.run([sys.executable, "-c", PREBUILD], env=env, check=True,
                           capture_output=True, timeout=900)
        src = f"HERE = {HERE!r}\nMODEL = {model!r}\n" + CHILD
        out = subprocess.run([sys.executable, "-c", src], env=env, capture_output=True,
                             text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{model}: the child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(model: str, rounds: int, runtime_warm: bool = False) -> dict:
    """Medians over `rounds` new processes: ms for the SECONDS, counts as they are."""
    load = os.getloadavg()[0]
    rows = [child(model, runtime_warm) for _ in range(rounds)]
    med = {k: round(1e3 * statistics.median(r[k] for r in rows)) for k in SECONDS}
    for k in ("compiles", "runtime objects", "kernels"):
        med[k] = statistics.median(r[k] for r in rows)
    med["load"] = f"{load:.1f}-{os.getloadavg()[0]:.1f}"
    return med


def table(results: dict) -> str:
    models = list(results)
    keys = [k for k in results[models[0]] if k != "load"]
    lines = ["| ms (medians) | " + " | ".join(models) + " |",
             "|---|" + "---|" * len(models)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(str(results[m][k]) for m in models) + " |")
    lines.append("| load average | " + " | ".join(results[m]["load"] for m in models) + " |")
    return "\n".join(lines)


def main(argv: list) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=["gpt", "cnn"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runtime-warm", action="store_true",
                   help="the cache holds the runtime's generic native code (runtime_objects."
                        "prebuild, run in a process of its own first), not the model's")
    args = p.parse_args(argv)
    print(table({m: measure(m, args.rounds, args.runtime_warm) for m in args.models}))


if __name__ == "__main__":
    main(sys.argv[1:])
