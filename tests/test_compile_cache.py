"""The CPU device's disk cache: a fresh process hits it, a corrupt or truncated entry is
recompiled (never loaded), concurrent writers both succeed, the directory is private."""
from __future__ import annotations

import glob
import os
import stat
import subprocess
import sys
import textwrap

import numpy as np

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.devices.compile_cache import DiskCache
from lazyarray.devices.cpu.cpu import CPUDevice

PROGRAM = textwrap.dedent("""
    import numpy as np
    import lazyarray as la
    x = la.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    y = (3 * x ** 2 + 1).sum(axis=1)
    print(y.numpy().tolist(), la.debug.metrics().disk_hits)
""")


def _run(cache_dir: str) -> tuple:
    env = dict(os.environ, LAZYARRAY_CACHE_DIR=cache_dir, LAZYARRAY_DEVICE="cpu")
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    values, hits = out.stdout.strip().rsplit(" ", 1)
    return values, int(hits)


def _module() -> Module:
    return Module("m", [Instruction("parameter", (), (8,), D.float32, {"number": 0}),
                        Instruction("exponential", (0,), (8,), D.float32, {})], [1])


def _device(cache_dir: str) -> CPUDevice:
    return CPUDevice(lambda: {"cache_dir": cache_dir})


def test_a_new_process_hits_the_disk_cache(tmp_path) -> None:
    first, hits1 = _run(str(tmp_path))
    second, hits2 = _run(str(tmp_path))
    assert (hits1, hits2) == (0, 1)
    assert first == second
    mode = stat.S_IMODE(os.stat(tmp_path / os.listdir(tmp_path)[0]).st_mode)
    assert mode & 0o077 == 0, oct(mode)


def test_cache_directory_is_created_private(tmp_path) -> None:
    where = tmp_path / "fresh"
    _device(str(where)).compile(_module())
    assert stat.S_IMODE(os.stat(where).st_mode) == 0o700


def test_corrupt_or_truncated_entry_is_recompiled(tmp_path) -> None:
    x = np.linspace(-1, 1, 8, dtype=np.float32)
    dev = _device(str(tmp_path))
    assert not dev.compile(_module()).from_disk_cache
    (entry,) = glob.glob(str(tmp_path / "*" / "*.bin"))
    data = open(entry, "rb").read()
    for broken in (data[:len(data) // 2], data[:-1] + bytes([data[-1] ^ 0xFF]), b""):
        with open(entry, "wb") as f:
            f.write(broken)
        exe = dev.compile(_module())
        assert not exe.from_disk_cache
        np.testing.assert_allclose(exe.run([x])[0], np.exp(x), rtol=1e-6)
    assert dev.compile(_module()).from_disk_cache     # rewritten whole by the recompile


def test_concurrent_writers_both_succeed(tmp_path) -> None:
    script = textwrap.dedent(f"""
        from lazyarray.devices.compile_cache import DiskCache
        c = DiskCache({str(tmp_path)!r})
        for i in range(200):
            assert c.store("ab" + "0" * 62, {{"i": i}}, b"x" * 100000)
            got = c.load("ab" + "0" * 62)
            assert got is not None and got[1] == b"x" * 100000
        print("ok")
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0 and out.strip() == "ok", err
    assert not glob.glob(str(tmp_path / "*" / ".tmp-*"))


def test_key_changes_with_the_module(tmp_path) -> None:
    dev = _device(str(tmp_path))
    other = Module("m", [Instruction("parameter", (), (8,), D.float32, {"number": 0}),
                         Instruction("log", (0,), (8,), D.float32, {})], [1])
    assert dev.cache_entry_key(_module()) != dev.cache_entry_key(other)
    assert DiskCache(str(tmp_path)).load(dev.cache_entry_key(other)) is None
