"""CPU time per step of bench_models.py's models on ONE thread, lazyarray against PyTorch
eager: a measure a loaded machine does not bend. On the shared 2-core machine the wall-
clock rows of bench_models.py swing 2-10x with other processes' load (a 2-thread pool
waits at each barrier for a thread the OS took away; torch's threads spin), while one
thread's CPU time (`time.thread_time`) per step stays within a few percent.

Each engine runs in its own process, the processes alternating round by round; each
reports the median of STEPS steps after WARMUP, the table the median over rounds:
lazyarray with its products as it chooses them (our packed GEMM on an AVX-512 CPU),
lazyarray with BLAS's tiles (`native_gemm.packed` off), and torch eager, each on one
thread (`la.config.num_threads = 1`, `torch.set_num_threads(1)`). OpenBLAS takes its
kernels from the environment (OPENBLAS_CORETYPE), as the caller's shell has it.

    python bench/models_cpu_time.py [gpt,encoder] [rounds]
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = ("lazyarray", "lazyarray, BLAS tiles", "torch")
STEPS, WARMUP = 8, 3


def _child(model: str, engine: str) -> float:
    """Median thread CPU seconds of one step of `model` by `engine` in this process."""
    sys.path[:0] = [os.path.join(HERE, "..", "examples"), HERE]
    import bench_models as BM
    if engine.startswith("lazyarray"):
        import lazyarray as la
        la.config.num_threads = 1
        if engine != "lazyarray":
            from lazyarray.devices.cpu import native_gemm
            native_gemm.packed = lambda: False
        call = BM.la_runner(model)
    else:
        import torch
        torch.set_num_threads(1)
        call = BM.torch_runner(model, False)
    for _ in range(WARMUP):
        call()
    times = []
    for _ in range(STEPS):
        t0 = time.thread_time()
        call()
        times.append(time.thread_time() - t0)
    return statistics.median(times)


def main(argv: list) -> None:
    if argv[:1] == ["--child"]:
        print(json.dumps(_child(argv[1], argv[2])))
        return
    models = (argv[0] if argv else "gpt,encoder").split(",")
    rounds = int(argv[1]) if len(argv) > 1 else 3
    got: dict = {}
    for r in range(rounds):
        order = ENGINES if r % 2 == 0 else ENGINES[::-1]
        for model in models:
            for engine in order:
                out = subprocess.run([sys.executable, __file__, "--child", model, engine],
                                     capture_output=True, text=True, check=True)
                got.setdefault((model, engine), []).append(json.loads(out.stdout.splitlines()[-1]))
    print(f"one thread, CPU ms per step, median of {rounds} alternating processes "
          f"(OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')})\n")
    print("| model | " + " | ".join(ENGINES) + " | torch / lazyarray |")
    print("|---|" + "---|" * (len(ENGINES) + 1))
    for model in models:
        ms = {e: 1e3 * statistics.median(got[model, e]) for e in ENGINES}
        print(f"| {model} | " + " | ".join(f"{ms[e]:.0f}" for e in ENGINES)
              + f" | {ms['torch'] / ms['lazyarray']:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
