"""lazyarray at work: ordinary array code is traced, fused, compiled once and reused.

Run: python examples/demo.py
"""
import time

import numpy as np

import lazyarray as la


def timed(fn, repeat=5):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    dev = la.device()
    print(f"device: {dev.device.name}")
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((2048, 2048), dtype=np.float32)
    yn = rng.standard_normal((2048, 2048), dtype=np.float32)
    x, y = la.asarray(xn), la.asarray(yn)

    # 1. Nothing runs while you write array code: each op is recorded.
    z = (3 * x ** 2 + y).mean(axis=1)
    print("\nthe traced program (HLO):")
    print(la.debug.ir(z, "hlo"))

    # 2. Reading a value syncs: the pending graph is compiled and run.
    la.debug.reset_metrics()
    t0 = time.perf_counter()
    first = z[:4].numpy()
    print(f"first sync (compile + run): {(time.perf_counter() - t0) * 1e3:.1f} ms -> {first}")
    m = la.debug.metrics()
    print(f"compiles: {m.compiles}, kernels launched: {m.kernels_launched}")

    # 3. The same code on new data is a cache hit: no compiler work.
    def step():
        return (3 * x ** 2 + y).mean(axis=1).numpy()
    t_la = timed(step)
    t_np = timed(lambda: (3 * xn ** 2 + yn).mean(axis=1))
    np.testing.assert_allclose(step(), (3 * xn ** 2 + yn).mean(axis=1), rtol=1e-4, atol=1e-4)
    m = la.debug.metrics()
    print(f"cached runs: {t_la * 1e3:.2f} ms (NumPy {t_np * 1e3:.2f} ms, "
          f"{t_np / t_la:.1f}x); compiles still {m.compiles}, cache hits {m.cache_hits}")

    # 4. A scalar that changes every step is a runtime parameter: still one compile.
    for lr in (0.1, 0.05, 0.01):
        (x * lr + y).sum().item()
    print(f"three learning rates, compiles: {la.debug.metrics().compiles} "
          f"(one more program: x*lr+y)")


if __name__ == "__main__":
    main()
