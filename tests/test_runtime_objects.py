"""The CPU runtime's own native code (pool, trampolines, GEMM tiles) is kept in the
compile cache: a new process loads it instead of running LLVM (issue 12's first step)."""
from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest

import lazyarray as la  # noqa: F401  (the CPU device sets the cache hook)
from lazyarray.devices.cpu.runtime_objects import runtime_code
from lazyarray.devices.cpu import runtime_objects as R
from lazyarray.devices.compile_cache import DiskCache
from lazyarray.devices.cpu.object_code import LoadedCode


@pytest.fixture
def cache_at(tmp_path, monkeypatch):
    directory = str(tmp_path / "cache")
    monkeypatch.setattr(R, "CACHE", [lambda: (DiskCache(directory), ("v", "fp", "target"))])
    monkeypatch.setattr(R, "STATS", {"hits": 0, "misses": 0})
    return directory


def test_runtime_code_is_compiled_once_then_loaded(cache_at):
    first = R.runtime_object("trampoline", 5, 1, 0)
    second = R.runtime_object("trampoline", 5, 1, 0)
    assert R.STATS == {"hits": 1, "misses": 1}
    assert first == second == runtime_code("trampoline", 5, 1, 0)
    LoadedCode(second)                       # the cached object code loads
    R.runtime_object("trampoline", 6, 1, 0)  # another signature is another entry
    assert R.STATS["misses"] == 2


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _flip_last_byte(path):              # inside the object code
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))


def _garbage(path):
    with open(path, "wb") as f:
        f.write(b"\x7fELF not a cache entry")


@pytest.mark.parametrize("damage", [_truncate, _flip_last_byte, _garbage])
def test_a_damaged_entry_is_a_miss_and_is_rewritten(cache_at, damage):
    good = R.runtime_object("trampoline", 3, 0, 0)
    (entry,) = glob.glob(os.path.join(cache_at, "*", "*.bin"))
    damage(entry)
    assert R.runtime_object("trampoline", 3, 0, 0) == good
    assert R.STATS == {"hits": 0, "misses": 2}
    assert R.runtime_object("trampoline", 3, 0, 0) == good
    assert R.STATS["hits"] == 1


def test_without_a_cache_nothing_is_stored(monkeypatch):
    monkeypatch.setattr(R, "CACHE", [lambda: (None, ())])
    monkeypatch.setattr(R, "STATS", {"hits": 0, "misses": 0})
    assert R.runtime_object("trampoline", 2, 0, 0) == runtime_code("trampoline", 2, 0, 0)
    assert R.STATS == {"hits": 0, "misses": 0}


_CHILD = """
import numpy as np, lazyarray as la
from lazyarray.devices.cpu import runtime_objects as R
a = la.asarray(np.arange(1 << 16, dtype=np.float32))
b = la.asarray(np.ones((64, 64), np.float32))
print(float((a * 2 + 1).sum()), float((b @ b).sum()), R.STATS["hits"], R.STATS["misses"])
"""


def test_a_new_process_loads_the_runtime_code_from_the_cache(tmp_path):
    env = dict(os.environ, LAZYARRAY_CACHE_DIR=str(tmp_path / "c"), LAZYARRAY_NUM_THREADS="2")
    runs = [subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    (s1, m1, hits1, misses1), (s2, m2, hits2, misses2) = \
        [r.stdout.split() for r in runs]
    assert (s1, m1) == (s2, m2) == (str(float(2 * sum(range(1 << 16)) + (1 << 16))),
                                    str(float(64 * 64 * 64)))
    assert int(misses1) > 0 and int(hits1) == 0
    assert int(hits2) == int(misses1) and int(misses2) == 0


def test_a_prefetched_object_is_built_once_on_its_own_thread(cache_at, monkeypatch):
    """`prefetch` builds on a thread of its own (apart from the LLVM lock) the object code a
    serial build gives; the `runtime_object` call that needs it waits for that build
    rather than building again."""
    import threading
    from lazyarray.devices.cpu import pool_ir
    threads = []
    plain = R.runtime_code

    def counting(name, *shape, **how):
        threads.append((threading.current_thread().name, how.get("apart", False)))
        return plain(name, *shape, **how)
    monkeypatch.setattr(R, "runtime_code", counting)
    shape = (pool_ir.GEMM_KIND_DIRECT, 4)
    R.prefetch("gemm_tiles", *shape)
    R.prefetch("gemm_tiles", *shape)              # already under way: not a second thread
    obj = R.runtime_object("gemm_tiles", *shape)
    assert threads == [("lazyarray-runtime-build", True)]
    assert obj == plain("gemm_tiles", *shape)     # byte-identical to a build on this thread
    assert R.STATS == {"hits": 0, "misses": 1}
    assert R.runtime_object("gemm_tiles", *shape) == obj and R.STATS["hits"] == 1


def test_a_failed_prefetch_raises_where_the_object_is_needed(cache_at, monkeypatch):
    plain = R.runtime_code

    def failing(name, *shape, **how):
        raise RuntimeError("no LLVM today")
    monkeypatch.setattr(R, "runtime_code", failing)
    R.prefetch("trampoline", 4, 0, 0)
    with pytest.raises(RuntimeError, match="no LLVM today"):
        R.runtime_object("trampoline", 4, 0, 0)
    monkeypatch.setattr(R, "runtime_code", plain)  # the next need builds it anew
    assert R.runtime_object("trampoline", 4, 0, 0) == plain("trampoline", 4, 0, 0)


def test_the_device_keys_runtime_code_by_code_version_and_cpu():
    """What the CPU device pins a runtime object to: lazyarray's version, the compiler's and
    devices' sources, the triple, CPU name and features, LLVM's version."""
    from lazyarray.compiler.driver import CPU, target_id
    from lazyarray.devices.compile_cache import VERSION, compiler_fingerprint
    la.asarray([1.0])                       # the CPU device exists
    _, context = R.CACHE[0]()
    assert context == (VERSION, compiler_fingerprint()) + target_id(CPU)


@pytest.mark.parametrize("changed", ["lazyarray version", "compiler sources", "cpu name",
                                     "cpu features", "llvm version"])
def test_an_entry_of_other_code_or_another_cpu_is_not_reused(tmp_path, monkeypatch, changed):
    """An entry written by other code (a new version, edited sources) or for another CPU
    (a feature set the host lacks) is never loaded: a miss, built for this one."""
    directory = str(tmp_path / "cache")
    here = ["0.1.0", "fingerprint", "x86_64-unknown-linux-gnu", "znver4", "+avx2,+fma", "20.1"]
    index = {"lazyarray version": 0, "compiler sources": 1, "cpu name": 3,
             "cpu features": 4, "llvm version": 5}[changed]
    other = list(here)
    other[index] = other[index] + ",other"
    monkeypatch.setattr(R, "STATS", {"hits": 0, "misses": 0})
    monkeypatch.setattr(R, "CACHE", [lambda: (DiskCache(directory), tuple(other))])
    R.runtime_object("trampoline", 7, 0, 0)
    monkeypatch.setattr(R, "CACHE", [lambda: (DiskCache(directory), tuple(here))])
    R.runtime_object("trampoline", 7, 0, 0)
    assert R.STATS == {"hits": 0, "misses": 2}
    assert len(glob.glob(os.path.join(directory, "*", "*.bin"))) == 2
    R.runtime_object("trampoline", 7, 0, 0)
    assert R.STATS == {"hits": 1, "misses": 2}


def test_prebuild_puts_the_generic_objects_in_the_cache(cache_at, monkeypatch):
    """`prebuild` (what a first process on a machine, or an install step, would run) leaves
    every generic runtime object in the disk cache; a second call builds none, and a
    later need loads them. (Two small objects stand in for the eight generic ones.)"""
    assert ("gemm_tiles", (R.pool_ir.GEMM_KIND_DIRECT, 4)) in R.generic_objects()
    monkeypatch.setattr(R, "generic_objects", lambda: [("trampoline", (2, 1, 0)), ("pool", ())])
    assert R.prebuild() == 2
    assert R.prebuild() == 0
    assert R.STATS == {"hits": 2, "misses": 2}
    assert R.runtime_object("pool") == runtime_code("pool")
    assert R.STATS["hits"] == 3


def test_without_a_thread_to_prefetch_on_the_object_is_built_where_needed(cache_at,
                                                                          monkeypatch):
    import threading

    def no_thread(self):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    R.prefetch("trampoline", 8, 0, 0)
    assert ("trampoline", (8, 0, 0)) not in R._PENDING
    assert R.runtime_object("trampoline", 8, 0, 0) == runtime_code("trampoline", 8, 0, 0)
    assert R.STATS == {"hits": 0, "misses": 1}


_EXITS_AT_ONCE = """
import lazyarray as la
from lazyarray.devices.cpu import runtime_objects as R
la.asarray([1.0])
R.prefetch("gemm_tiles", R.pool_ir.GEMM_KIND_DIRECT, 4)
"""


def test_a_prefetch_under_way_at_exit_is_finished_and_stored(tmp_path):
    """A process that exits while a prefetch thread is inside LLVM waits for it (no crash
    tearing LLVM down under it), and its object reaches the cache."""
    env = dict(os.environ, LAZYARRAY_CACHE_DIR=str(tmp_path / "c"))
    out = subprocess.run([sys.executable, "-c", _EXITS_AT_ONCE], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(glob.glob(str(tmp_path / "c" / "*" / "*.bin"))) == 1
