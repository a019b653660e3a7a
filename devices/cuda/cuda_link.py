"""PTX to a loadable image: a cubin linked by nvJitLink when it is installed (the
`nvidia-nvjitlink` wheel and cuda-python's bindings), else the PTX itself, which the
driver then compiles at load (345 ms of a first MLP step on an H100).

Cubins are kept per (PTX, architecture): in memory for the process, and in the compile
cache (devices/compile_cache.py: LAZYARRAY_CACHE_DIR, ~/.cache/lazyarray by default, with
its trust checks, atomic writes and size cap) so that a new process loads them without
compiling and without loading nvJitLink at all: the linker is needed only on a miss (its
version is recorded in the entry; a cubin that one linker made loads on any driver that
runs the architecture, as one linked now would). nvJitLink runs without a GPU, so this
path is checked on every machine where it is installed.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Optional

from ..compile_cache import DiskCache, default_dir, entry_key

_CUBINS: dict = {}
_LOCK = threading.Lock()
STATS = {"links": 0, "memory_hits": 0, "disk_hits": 0}


@functools.lru_cache(maxsize=1)
def nvjitlink() -> Optional[Any]:
    """cuda-python's nvJitLink bindings when its library loads here, else None."""
    try:
        from cuda.bindings import nvjitlink as nv
        nv.version()                  # loads libnvJitLink: fails when the wheel is absent
        return nv
    except Exception:
        return None


def link_cubin(ptx: str, arch: str) -> bytes:
    """nvJitLink: PTX -> cubin for `arch` (sm_XY); raises with the linker's log on error."""
    nv = nvjitlink()
    if nv is None:
        raise RuntimeError("nvJitLink is not available (pip install nvidia-nvjitlink cuda-python)")
    handle = nv.create(2, [f"-arch={arch}", "-O3"])
    try:
        data = ptx.encode()
        try:
            nv.add_data(handle, nv.InputType.PTX, data, len(data), "lazyarray")
            nv.complete(handle)
        except Exception as e:
            size = nv.get_error_log_size(handle)
            log = bytearray(size)
            nv.get_error_log(handle, log)
            raise RuntimeError(f"nvJitLink failed for {arch}: {e}: "
                               f"{bytes(log).decode(errors='replace').strip()}") from None
        cubin = bytearray(nv.get_linked_cubin_size(handle))
        nv.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nv.destroy(handle)


def cubin_cache(cache_dir: str) -> Optional[DiskCache]:
    """The compile cache of a cache setting ('' the default folder, 'off' none)."""
    return None if cache_dir == "off" else DiskCache(cache_dir or default_dir())


def load_image(ptx: str, arch: str, cache_dir: str = "") -> bytes:
    """What cuModuleLoadData gets: a cached or freshly linked cubin, else the PTX."""
    key = entry_key(ptx, "cubin", arch)
    with _LOCK:
        hit = _CUBINS.get(key)
    if hit is not None:
        STATS["memory_hits"] += 1
        return hit
    cache = cubin_cache(cache_dir)
    entry = cache.load(key) if cache is not None else None
    if entry is not None and entry[0].get("cubin") == arch and entry[1][:4] == b"\x7fELF":
        STATS["disk_hits"] += 1
        cubin = entry[1]
    else:
        if nvjitlink() is None:
            return ptx.encode() + b"\0"
        cubin = link_cubin(ptx, arch)
        STATS["links"] += 1
        if cache is not None:       # a cache that cannot be written costs the next process a link
            cache.store(key, {"cubin": arch, "nvjitlink": str(nvjitlink().version())}, cubin)
    with _LOCK:
        _CUBINS[key] = cubin
    return cubin
