"""GFLOP/s of the matrix products the model benchmarks run (bench_models.py's GPT training
step and encoder, forward and gradient forms, attention's batches), per shape: our packed
GEMM (devices/cpu/packed_gemm_ir.py) against OpenBLAS's tiles on the same native pool,
NumPy's matmul and torch.matmul, each on the same threads.

NumPy's OpenBLAS picks its kernels when it loads, by OPENBLAS_CORETYPE: the script runs
itself once as the environment has it and once without it (`--child` runs one), so the
table shows OpenBLAS pinned and unpinned side by side. Each figure is the best of ROUNDS
runs of each engine in turn (the engines' threads spin a while after a call: interleaved
call by call they took each other's cores); the best is what each reaches on a loaded
machine. No assertion: a measurement.

    python bench/gemm_shapes.py [--threads 2]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

# (label, batch, m, n, k, A transposed, B transposed): y = x @ W.T, its gradients
# dx = g @ W and dW = g.T @ x; attention per head q @ k.T and p @ v
SHAPES = [
    ("gpt qkv x@W.T", 1, 1024, 768, 256, False, True),
    ("gpt qkv dW=g.T@x", 1, 768, 256, 1024, True, False),
    ("gpt qkv dx=g@W", 1, 1024, 256, 768, False, False),
    ("gpt fc x@W.T", 1, 1024, 1024, 256, False, True),
    ("gpt proj x@W.T", 1, 1024, 256, 1024, False, True),
    ("gpt proj dW=g.T@x", 1, 256, 1024, 1024, True, False),
    ("gpt head x@E.T", 1, 1024, 512, 256, False, True),
    ("gpt att q@k.T", 32, 128, 128, 64, False, True),
    ("gpt att p@v", 32, 128, 64, 128, False, False),
    ("enc qkv x@W.T", 1, 1024, 1152, 384, False, True),
    ("enc fc x@W.T", 1, 1024, 1536, 384, False, True),
    ("enc proj x@W.T", 1, 1024, 384, 1536, False, True),
    ("enc att q@k.T", 96, 128, 128, 32, False, True),
    ("enc att p@v", 96, 128, 32, 128, False, False),
]
ROUNDS = 15
DTYPES = (np.float32, np.float64)


def _operands(rng, dt, batch, m, n, k, ta, tb) -> tuple:
    def mat(rows, cols, trans):
        x = rng.standard_normal((batch, cols, rows) if trans else (batch, rows, cols)).astype(dt)
        x = x.transpose(0, 2, 1) if trans else x
        return x[0] if batch == 1 else x
    return mat(m, k, ta), mat(k, n, tb)


def _engines(a, b, out, threads: int, pool) -> dict:
    """name -> a call computing out = a @ b (ours and OpenBLAS's tiles on `pool`)."""
    import threadpoolctl
    import torch
    from lazyarray.devices.cpu import native_gemm as G, native_pool as NP
    from lazyarray.devices.cpu.blas_threads import blas_single_threaded
    dt = out.dtype
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = a.shape[0] if a.ndim == 3 else 1
    dims = lambda x: [(d, s // x.itemsize) for d, s in zip(x.shape, x.strides)]
    pa, pb = G._read(dims(a), batch, m, k), G._read(dims(b), batch, k, n)
    strides = (pa[2], pb[2], m * n) if batch > 1 else (0, 0, 0)
    calls = {}
    for how in ("packed", "blas"):
        _, desc, ranges = G.task(dt, m, n, k, pa[:2], pb[:2], threads, batch, strides)
        job = NP.Job([(G.tile_function(dt, how), [0, 1, 2, 3], [], [], ranges)], 4)
        job.table[:] = [NP.address(v) for v in (a, b, out, desc)]

        def run(job=job, desc=desc) -> None:
            with blas_single_threaded():
                pool.run(job)
        calls["ours" if how == "packed" else "openblas tiles"] = run
    limits = threadpoolctl.threadpool_limits(threads)
    calls["numpy"] = lambda: np.matmul(a, b, out=out)
    torch.set_num_threads(threads)
    ta, tb, to = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
    calls["torch"] = lambda: torch.matmul(ta, tb, out=to)
    calls["_keep"] = limits
    return calls


def measure(threads: int) -> dict:
    """{label/dtype: {engine: GFLOP/s}} in this process (OpenBLAS as loaded)."""
    from lazyarray.devices.cpu import native_pool
    rng = np.random.default_rng(0)
    pool = native_pool.NativePool(threads)
    table = {}
    for label, batch, m, n, k, ta, tb in SHAPES:
        for dt in DTYPES:
            a, b = _operands(rng, dt, batch, m, n, k, ta, tb)
            out = np.empty((batch, m, n) if batch > 1 else (m, n), dt)
            calls = _engines(a, b, out, threads, pool)
            calls.pop("_keep")
            best = {name: float("inf") for name in calls}
            want = a.astype(np.float64) @ b.astype(np.float64)
            for name, call in calls.items():      # warm, and checked
                call()
                assert np.allclose(out, want, rtol=1e-3, atol=1e-2 * np.sqrt(k)), (label, name)
            for name, call in calls.items():     # one engine after the other: their
                for _ in range(ROUNDS):              # threads spin after a call and would
                    t0 = time.perf_counter()         # take the cores of the next one's
                    call()
                    best[name] = min(best[name], time.perf_counter() - t0)
                time.sleep(0.05)
            flop = 2.0 * batch * m * n * k
            table[f"{label} {np.dtype(dt).name}"] = {x: flop / t / 1e9 for x, t in best.items()}
    return table


def main() -> None:
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 2
    if "--child" in sys.argv:
        print(json.dumps(measure(threads)))
        return
    here = [sys.executable, __file__, "--child", "--threads", str(threads)]
    env = dict(os.environ)
    pinned = env.get("OPENBLAS_CORETYPE")
    runs = {"pinned": json.loads(subprocess.check_output(here, env=env))}
    for key in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        env.pop(key, None)
    runs["unset"] = json.loads(subprocess.check_output(here, env=env))
    print(f"GFLOP/s, {threads} threads, best of {ROUNDS}; OpenBLAS pinned: "
          f"OPENBLAS_CORETYPE={pinned}, unset: its own choice\n")
    print("| product | dtype | ours | OpenBLAS tiles pinned | unset | NumPy pinned | unset "
          "| torch |")
    print("|---|---|---|---|---|---|---|---|")
    for key, p in runs["pinned"].items():
        u = runs["unset"][key]
        label, dt = key.rsplit(" ", 1)
        print(f"| {label} | {dt} | {p['ours']:.0f} ({u['ours']:.0f}) | {p['openblas tiles']:.0f} "
              f"| {u['openblas tiles']:.0f} | {p['numpy']:.0f} | {u['numpy']:.0f} "
              f"| {p['torch']:.0f} |")


if __name__ == "__main__":
    main()
