"""PTX to a loadable image: a cubin linked by nvJitLink when it is installed (the
`nvidia-nvjitlink` wheel and cuda-python's bindings), else the PTX itself, which the
driver then compiles at load (345 ms of a first MLP step on an H100).

Cubins are kept per (PTX, architecture, nvJitLink version): in memory for the process,
and on disk in the compile cache's folder (LAZYARRAY_CACHE_DIR, ~/.cache/lazyarray by
default) so that a new process loads without compiling. nvJitLink runs without a GPU, so this path is checked on every machine where
it is installed.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
from typing import Any, Optional

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


def cubin_dir(cache_dir: str) -> Optional[str]:
    """The cubin folder of a compile-cache setting ('' the default folder, 'off' none)."""
    if cache_dir == "off":
        return None
    from .compile_cache import default_dir
    return os.path.join(cache_dir or default_dir(), "cubin")


def load_image(ptx: str, arch: str, cache_dir: str = "") -> bytes:
    """What cuModuleLoadData gets: a cached or freshly linked cubin, else the PTX."""
    if nvjitlink() is None:
        return ptx.encode() + b"\0"
    key = hashlib.sha256(f"{arch}\n{nvjitlink().version()}\n{ptx}".encode()).hexdigest()
    with _LOCK:
        hit = _CUBINS.get(key)
    if hit is not None:
        STATS["memory_hits"] += 1
        return hit
    folder = cubin_dir(cache_dir)
    cubin = _read_disk(folder, key)
    if cubin is not None:
        STATS["disk_hits"] += 1
    else:
        cubin = link_cubin(ptx, arch)
        STATS["links"] += 1
        _write_disk(folder, key, cubin)
    with _LOCK:
        _CUBINS[key] = cubin
    return cubin


def _read_disk(d: Optional[str], key: str) -> Optional[bytes]:
    if d is None:
        return None
    try:
        with open(os.path.join(d, key + ".cubin"), "rb") as f:
            data = f.read()
        return data if data[:4] == b"\x7fELF" else None
    except OSError:
        return None


def _write_disk(d: Optional[str], key: str, cubin: bytes) -> None:
    if d is None:
        return
    try:
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f"{key}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(cubin)
        os.replace(tmp, os.path.join(d, key + ".cubin"))
    except OSError:
        pass                  # a read-only cache only costs the next process a link
