"""The CPU runtime's own native functions (the worker pool, kernel trampolines, GEMM
tiles) as object code, kept in the compile cache beside programs: a new process loads
them instead of running LLVM again (~140 ms of a fresh process's first training step).
The CPU device names the cache (`CACHE`); without one, or on any miss, they are
compiled as before (`runtime_code`: IR from pool_ir.py, object code from the compiler's
`host_object`)."""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from ...compiler import profile_hooks
from ...compiler.driver import CPU, host_object, target_id
from ..compile_cache import entry_key
from ..runtime_builds import record
from . import control_ir, pool_ir
from .object_code import malformed

# set by the CPU device: () -> (DiskCache or None, the strings that pin an entry to this
# code and machine: version, compiler fingerprint, target)
CACHE: list = [None]
STATS = {"hits": 0, "misses": 0}


def runtime_code(name: str, *shape: int) -> bytes:
    """Object code of one of the CPU runtime's own native functions, generated with the
    builder and for the target kernels use (pool_ir.py): "pool" (the worker pool's job
    runner and worker loop), "trampoline" (nargs, npartials, ncounts: calls a kernel with
    its arguments from a buffer table), "trampolines" (several: nargs, npartials, ncounts
    of each in turn, named by pool_ir.trampoline_name), "gemm_tiles" (matrix products in
    tiles, each a CBLAS call), "control" (the runner of loops and branches, control_ir.py)."""
    triple = target_id(CPU)[0]
    make = {"pool": lambda: pool_ir.PoolIR(triple).text(),
            "control": lambda: control_ir.control_ir(triple),
            "trampoline": lambda: pool_ir.trampoline_ir(triple, *shape),
            "trampolines": lambda: pool_ir.trampolines_ir(triple, _triples(shape)),
            "gemm_tiles": lambda: pool_ir.gemm_tiles_ir(triple, *shape)}
    # trampolines are parsed and emitted, not optimized (paid per kernel signature); the
    # GEMM tiles are vector code already: the SLP vectorizer finds nothing in them (the
    # assembly is the same without it, checked for every kind) and took 25-50% of their
    # IR passes' time
    return host_object(make[name](), "lazyarray_" + name,
                       optimize=name not in ("trampoline", "trampolines"),
                       slp=name != "gemm_tiles")


def _triples(shape: tuple) -> list:
    if len(shape) % 3:
        raise ValueError(f"lazyarray: trampolines take (nargs, npartials, ncounts) triples, "
                         f"got {len(shape)} numbers")
    return [tuple(shape[k:k + 3]) for k in range(0, len(shape), 3)]


def runtime_object(name: str, *shape: int) -> bytes:
    """Object code of `runtime_code(name, *shape)`, from the disk cache when it holds it
    (counted in runtime_builds either way)."""
    t0 = time.perf_counter()
    built = True
    try:
        with profile_hooks.span("runtime", name):     # a profile shows it (no-op otherwise)
            obj, built = _object(name, shape)
    finally:
        record(built, time.perf_counter() - t0)
    return obj


def _object(name: str, shape: tuple) -> tuple:
    """(object code, whether LLVM built it)."""
    where: Optional[Callable[[], tuple]] = CACHE[0]
    cache, context = where() if where is not None else (None, ())
    if cache is None:
        return runtime_code(name, *shape), True
    key = entry_key(f"runtime {name} {list(shape)}", *context)
    hit: Any = cache.load(key)
    if hit is not None and hit[0].get("runtime") == name and malformed(hit[1]) is None:
        STATS["hits"] += 1
        return hit[1], False
    STATS["misses"] += 1
    obj = runtime_code(name, *shape)
    cache.store(key, {"runtime": name}, obj)
    return obj, True
