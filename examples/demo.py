"""lazyarray at work: ordinary array code is traced, fused into a few kernels, compiled once
and reused; a Python number that changes at every call does not recompile.

Run: python examples/demo.py
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import lazyarray as la


def median_ms(fn, repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> dict:
    print(f"device: {la.device().device.name}")
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((2048, 2048), dtype=np.float32)
    yn = rng.standard_normal((2048, 2048), dtype=np.float32)
    x, y = la.asarray(xn), la.asarray(yn)

    # 1. Writing array code runs nothing: each op is recorded into a program.
    z = (3 * x ** 2 + y).mean(axis=1)
    print("\n1. the traced program (HLO), nothing computed yet:")
    print(la.debug.ir(z, "hlo"))

    # 2. The compiler fuses it: one line per kernel, with the ops computed inside it.
    kernels = [line[3:] for line in la.debug.ir(z, "optimized_hlo").splitlines()
               if line.startswith("//")]
    print("2. after optimization and fusion:")
    print("\n".join("   " + k for k in kernels))

    # 3. Reading a value syncs: the program is compiled (or loaded from the disk cache)
    #    and run.
    la.debug.reset_metrics()
    t0 = time.perf_counter()
    first = z[:4].numpy()
    first_ms = (time.perf_counter() - t0) * 1e3
    m = la.debug.metrics()
    how = (f"compiled in {m.compile_seconds * 1e3:.0f} ms" if m.compiles
           else f"loaded from the disk cache in {m.disk_load_seconds * 1e3:.0f} ms")
    print(f"\n3. first sync: {first_ms:.0f} ms, the program {how} -> {first}")

    # 4. The same code again is a cache hit: no compiler work, just the kernels.
    def step():
        return (3 * x ** 2 + y).mean(axis=1).numpy()
    np.testing.assert_allclose(step(), (3 * xn ** 2 + yn).mean(axis=1), rtol=1e-4, atol=1e-4)
    before = la.debug.metrics().cache_misses
    la_ms = median_ms(step)
    np_ms = median_ms(lambda: (3 * xn ** 2 + yn).mean(axis=1))
    assert la.debug.metrics().cache_misses == before        # every run was a cache hit
    print(f"4. cached: {la_ms:.2f} ms a call, NumPy {np_ms:.2f} ms "
          f"({np_ms / la_ms:.1f}x; medians of 7, the same results)")

    # 5. A Python number is a runtime parameter of the program: a learning rate that
    #    changes at every step reuses the one program.
    before = la.debug.metrics().cache_misses
    rates = (0.1, 0.05, 0.01, 0.005)
    for lr in rates:
        (x * lr + y).sum().item()
    programs = la.debug.metrics().cache_misses - before
    print(f"5. {len(rates)} learning rates in x * lr + y: {programs} program, "
          f"{len(rates) - programs} cache hits")
    return {"kernels": kernels, "programs_for_rates": programs, "rates": len(rates),
            "cached_ms": la_ms, "numpy_ms": np_ms}


if __name__ == "__main__":
    main()
