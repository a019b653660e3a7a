"""The machine's measured peaks, for a profile to set achieved figures against: host
memory copy bandwidth and float32 GEMM throughput, each measured once per process, when
first asked for (a fraction of a second), and cached.

Copy: NumPy copies of a 64 MiB array, split over the CPU's native pool (the threads the
device's runs use; NumPy releases the GIL while it copies), best of several; bytes counted read + written. GEMM:
a 1024x1024 float32 matrix product as the device computes one (native_gemm over the native
pool's threads; NumPy's matmul where that path does not apply), best of several.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from .devices.cpu import native_gemm
from .devices.cpu.native_pool import get_pool, split

COPY_BYTES = 64 << 20
GEMM_N = 1024
REPEATS = 5


@dataclass(frozen=True)
class Peaks:
    copy_gbps: float       # GB/s (1e9 bytes), read + written
    gemm_gflops: float     # GFLOP/s, float32


def _best(fn, repeats: int = REPEATS) -> float:
    fn()                                  # warm up: page faults, BLAS threads, caches
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def copy_bandwidth(threads: int = 0) -> float:
    """GB/s of a large host copy over `threads` threads (0: one per core)."""
    src = np.ones(COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    pool = get_pool(threads)
    ranges = split(src.size, pool.threads)

    def copy() -> None:
        pool.run_python(lambda _k, s, e: np.copyto(dst[s:e], src[s:e]), ranges)
    seconds = _best(copy)
    return 2 * src.nbytes / seconds / 1e9


def gemm_throughput(n: int = GEMM_N) -> float:
    """GFLOP/s of an n x n float32 matrix product."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), np.float32)
    threads = get_pool(0).threads
    # the code the device's products run (native_gemm: our packed GEMM or BLAS's tiles on
    # the native pool), not NumPy's matmul: with OpenBLAS pinned to AVX2 kernels on an
    # AVX-512 CPU that was half the peak the products reach
    if not native_gemm.matmul(a, b, out, threads):
        seconds = _best(lambda: np.matmul(a, b, out=out))
    else:
        seconds = _best(lambda: native_gemm.matmul(a, b, out, threads))
    return 2 * n ** 3 / seconds / 1e9


@functools.lru_cache(maxsize=None)
def host_peaks() -> Peaks:
    return Peaks(copy_bandwidth(), gemm_throughput())
