"""Resident memory of a process that compiles shape after shape (issue 33, item 17).

    python bench/compile_memory.py [--shapes 3000] [--warm 50] [--size 3] [--cache-max N]

Each step is `x = la.ones((n,)) * 2 + 1; (x.sum() + x.max()).item()` for a new n, so
every step compiles one program (n from --size up: below 4,096 elements a kernel is not
optimized, above 32,768 it is vectorized; try --size 40000 for the second). After --warm
steps the resident set (pages of /proc/self/statm, after a collection) is printed six
times and at the end, with the programs compiled, KiB kept per compile, and the
executable cache's count and bytes. With the default cap (512 programs) the cache fills
first: ~60-70 KiB a program (its MCJIT engine and code) until it holds 512, then only
what a compile leaves. Measured (issue 33, item 17), 3,000 shapes: 124.0 -> 289.2 MiB
before (still rising ~21 MiB per 500 shapes), 121.3 -> 157.7 MiB after (+3.2 MiB over the
last 2,500: the bounded Python caches filling; small kernels build no pass builder).
With --size 40000 --cache-max 64, 900 shapes: 137.7 -> 352.4 MiB before, 131.7 -> 170.3
after (2,400: 181.3, growth slowing from 6 to 2 MiB per 400 shapes; ~1.1 KiB a compile
of it is what llvmlite keeps of each pass builder).
A fresh cache directory is used (the disk cache would otherwise answer repeated runs).
Not a test: tests/test_memory_bounds.py holds the bound.
"""
from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=int, default=3000)
    parser.add_argument("--warm", type=int, default=50)
    parser.add_argument("--size", type=int, default=3, help="the first n")
    parser.add_argument("--cache-max", type=int, default=None,
                        help="executable_cache_max (default: the library's)")
    args = parser.parse_args()
    os.environ["LAZYARRAY_CACHE_DIR"] = tempfile.mkdtemp(prefix="lazyarray-compile-memory-")
    import lazyarray as la
    from lazyarray import runtime

    def step(n: int) -> None:
        x = la.ones((n,)) * 2.0 + 1.0
        assert (x.sum() + x.max()).item() == 3.0 * n + 3.0

    overrides = {} if args.cache_max is None else {"executable_cache_max": args.cache_max}
    with la.config.override(**overrides):
        first = args.size
        for n in range(first, first + args.warm):
            step(n)
        gc.collect()
        before, compiles, start = _rss_mib(), la.debug.metrics().compiles, time.time()
        print(f"after {args.warm} warm-up shapes: {before:.1f} MiB")
        mark = max(1, args.shapes // 6)
        first += args.warm
        for i, n in enumerate(range(first, first + args.shapes), 1):
            step(n)
            if i % mark == 0 or i == args.shapes:
                gc.collect()
                print(f"  {i:5d} shapes: {_rss_mib():7.1f} MiB")
        after = _rss_mib()
        made = la.debug.metrics().compiles - compiles
    cache = runtime.get_device("cpu").executables
    print(f"{args.shapes} shapes, {made} compiles: {before:.1f} -> {after:.1f} MiB "
          f"(+{after - before:.1f}; {(after - before) * 1024 / max(made, 1):.1f} KiB a compile); "
          f"executable cache {len(cache)} programs, {cache.nbytes / 2 ** 20:.1f} MB; "
          f"{time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
