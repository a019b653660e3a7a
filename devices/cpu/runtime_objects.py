"""The CPU runtime's own native functions (the worker pool, kernel trampolines, GEMM
tiles) as object code, kept in the compile cache beside programs: a new process loads
them instead of running LLVM again (~140 ms of a fresh process's first training step).
The CPU device names the cache (`CACHE`); without one, or on any miss, they are
compiled as before (compiler/driver.py `runtime_code`)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from ...compiler.driver import runtime_code
from ..compile_cache import entry_key

# set by the CPU device: () -> (DiskCache or None, the strings that pin an entry to this
# code and machine: version, compiler fingerprint, target)
CACHE: list = [None]
STATS = {"hits": 0, "misses": 0}


def runtime_object(name: str, *shape: int) -> bytes:
    """Object code of `runtime_code(name, *shape)`, from the disk cache when it holds it."""
    where: Optional[Callable[[], tuple]] = CACHE[0]
    cache, context = where() if where is not None else (None, ())
    if cache is None:
        return runtime_code(name, *shape)
    key = entry_key(f"runtime {name} {list(shape)}", *context)
    hit: Any = cache.load(key)
    if hit is not None and hit[0].get("runtime") == name:
        STATS["hits"] += 1
        return hit[1]
    STATS["misses"] += 1
    obj = runtime_code(name, *shape)
    cache.store(key, {"runtime": name}, obj)
    return obj
