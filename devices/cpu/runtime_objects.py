"""The CPU runtime's own native functions (the worker pool, kernel trampolines, GEMM
tiles) as object code, kept in the compile cache beside programs: a new process loads
them instead of running LLVM again (~140 ms of a fresh process's first training step).
The CPU device names the cache (`CACHE`); without one, or on any miss, they are
compiled as before (`runtime_code`: IR from pool_ir.py, object code from the compiler's
`host_object`)."""
from __future__ import annotations

import atexit
import os
import threading
import time
from concurrent.futures import Future
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


def runtime_code(name: str, *shape: int, apart: bool = False) -> bytes:
    """Object code of one of the CPU runtime's own native functions, generated with the
    builder and for the target kernels use (pool_ir.py): "pool" (the worker pool's job
    runner and worker loop), "trampoline" (nargs, npartials, ncounts: calls a kernel with
    its arguments from a buffer table), "trampolines" (several: nargs, npartials, ncounts
    of each in turn, named by pool_ir.trampoline_name), "gemm_tiles" (matrix products in
    tiles, each a CBLAS call), "control" (the runner of loops and branches, control_ir.py).
    `apart`: built without the LLVM lock (driver.host_object), on a `prefetch` thread."""
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
                       slp=name != "gemm_tiles", apart=apart)


def _triples(shape: tuple) -> list:
    if len(shape) % 3:
        raise ValueError(f"lazyarray: trampolines take (nargs, npartials, ncounts) triples, "
                         f"got {len(shape)} numbers")
    return [tuple(shape[k:k + 3]) for k in range(0, len(shape), 3)]


def runtime_object(name: str, *shape: int) -> bytes:
    """Object code of `runtime_code(name, *shape)`, from the disk cache when it holds it
    (counted in runtime_builds either way), or from the `prefetch` thread building it
    (waited for: the wait is what runtime_builds counts)."""
    t0 = time.perf_counter()
    built = True
    try:
        with profile_hooks.span("runtime", name):     # a profile shows it (no-op otherwise)
            pending = _PENDING.pop((name, shape), None)
            obj, built = _object(name, shape) if pending is None else pending.result()
    finally:
        record(built, time.perf_counter() - t0)
    return obj


# (name, shape) -> the Future of a `prefetch` thread's (object code, whether LLVM built it)
_PENDING: dict = {}
# a child made by fork() has none of its parent's threads: what they were building is
# built again where needed
os.register_at_fork(after_in_child=_PENDING.clear)


def _finish_pending() -> None:
    """At exit, wait for the prefetch threads still building: a daemon thread left inside
    LLVM while the process tears LLVM down could crash it, and its object would be lost
    to the cache."""
    for future in list(_PENDING.values()):
        try:
            future.exception(timeout=EXIT_WAIT_S)
        except Exception:       # (a timeout: exit anyway)
            pass


EXIT_WAIT_S = 30.0
atexit.register(_finish_pending)


def prefetch(name: str, *shape: int) -> None:
    """Start building (or loading) `runtime_object(name, *shape)` on a thread of its own,
    for the `runtime_object` call that will need it: a program's GEMM tile functions
    (0.1-0.2 s of LLVM each) are built while its own code is compiled, each kind on its
    own thread, not one after the other inside the first run. Built apart from the LLVM
    lock (`runtime_code`'s `apart`), so the compiling thread never waits for it."""
    key = (name, shape)
    if key in _PENDING:
        return
    future: Future = Future()
    _PENDING[key] = future

    def build() -> None:
        try:
            future.set_result(_object(name, shape, apart=True))
        except BaseException as e:      # raised again where the object is needed
            future.set_exception(e)
    try:
        threading.Thread(target=build, name="lazyarray-runtime-build", daemon=True).start()
    except RuntimeError:        # no thread to be had: built where it is needed, as before
        _PENDING.pop(key, None)


def generic_objects() -> list:
    """(name, shape) of the runtime objects no program decides: the worker pool, the
    control runner and the eight GEMM tile functions (four kinds, float32 and float64).
    Built once per machine and code version, like a library's prebuilt kernels, they are
    what `prebuild` puts in the disk cache; kernel trampolines follow a program's
    kernels' signatures and are built with it."""
    kinds = (pool_ir.GEMM_KIND_BLAS, pool_ir.GEMM_KIND_DIRECT, pool_ir.GEMM_KIND_DOTS,
             pool_ir.GEMM_KIND_PACKED)
    return [("pool", ()), ("control", ())] + [("gemm_tiles", (kind, size))
                                              for size in (4, 8) for kind in kinds]


def prebuild() -> int:
    """Build (or load) every `generic_objects` into the disk cache, a thread each; returns
    how many LLVM built. A new process then starts with them loaded from the cache."""
    wanted = [(name, shape) for name, shape in generic_objects() if (name, shape) not in _PENDING]
    for name, shape in wanted:
        prefetch(name, *shape)
    return sum(_PENDING.pop((name, shape)).result()[1] for name, shape in wanted)


def _object(name: str, shape: tuple, apart: bool = False) -> tuple:
    """(object code, whether LLVM built it)."""
    where: Optional[Callable[[], tuple]] = CACHE[0]
    cache, context = where() if where is not None else (None, ())
    if cache is None:
        return runtime_code(name, *shape, apart=apart), True
    key = entry_key(f"runtime {name} {list(shape)}", *context)
    hit: Any = cache.load(key)
    if hit is not None and hit[0].get("runtime") == name and malformed(hit[1]) is None:
        STATS["hits"] += 1
        return hit[1], False
    STATS["misses"] += 1
    obj = runtime_code(name, *shape, apart=apart)
    cache.store(key, {"runtime": name}, obj)
    return obj, True
