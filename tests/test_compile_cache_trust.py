"""The disk cache trusts only itself: each attack a hostile user (or a damaged disk) can
play on it is refused or is a miss, with one warning, and compiling goes on correctly.

Files owned by another user are made with os.chown where the tests run as root, and by
mocking os.fstat / os.lstat elsewhere."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import warnings

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.devices import compile_cache
from lazyarray.devices.compile_cache import MAGIC, DiskCache
from lazyarray.devices.cpu.cpu import CPUDevice

OTHER_UID = 65534          # "nobody"


def _module(op: str) -> Module:
    """x*3 or x+3 (the pair the probe swapped): same shapes, different programs."""
    return Module("m", [Instruction("parameter", (), (8,), D.float32, {"number": 0}),
                        Instruction("constant", (), (8,), D.float32,
                                    {"value": _three()}),
                        Instruction(op, (0, 1), (8,), D.float32, {})], [2])


def _three():
    from lazyarray.compiler.hlo.literal import Literal
    return Literal(np.full((8,), 3.0, np.float32))


X = np.arange(8, dtype=np.float32)
EXPECT = {"multiply": X * 3, "add": X + 3}


@pytest.fixture(autouse=True)
def _fresh_refusals():
    compile_cache.REFUSED.clear()
    yield
    compile_cache.REFUSED.clear()


def _device(where: str) -> CPUDevice:
    return CPUDevice(lambda: {"cache_dir": where})


def _entry(dev: CPUDevice, op: str) -> str:
    return DiskCache(dev.disk_cache().directory)._path(dev.cache_entry_key(_module(op)))


def _compile_checked(dev: CPUDevice, op: str):
    exe = dev.compile(_module(op))
    np.testing.assert_array_equal(exe.run([X])[0], EXPECT[op])
    return exe


def _seed(tmp_path) -> CPUDevice:
    dev = _device(str(tmp_path / "cache"))
    for op in EXPECT:
        assert not _compile_checked(dev, op).from_disk_cache
        assert _compile_checked(dev, op).from_disk_cache
    return dev


def _owned_by_other(monkeypatch, path: str) -> None:
    """Make `path` look (or be) owned by another user."""
    if os.geteuid() == 0:
        os.chown(path, OTHER_UID, OTHER_UID, follow_symlinks=False)
        return
    target = os.stat(path, follow_symlinks=False)
    real_fstat, real_lstat = os.fstat, os.lstat

    def fake(st):
        values = list(st)
        values[4] = OTHER_UID
        return os.stat_result(values)

    def fstat(fd):
        st = real_fstat(fd)
        return fake(st) if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev) else st

    def lstat(p, *a, **k):
        st = real_lstat(p, *a, **k)
        return fake(st) if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev) else st

    monkeypatch.setattr(os, "fstat", fstat)
    monkeypatch.setattr(os, "lstat", lstat)


def _refused_once(dev: CPUDevice, op: str) -> None:
    """The next compiles warn once, run without the cache and give the right values."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert not _compile_checked(dev, op).from_disk_cache
    mine = [w for w in caught if "compile cache" in str(w.message)]
    assert len(mine) == 1, [str(w.message) for w in caught]


def test_world_writable_directory_is_refused(tmp_path) -> None:
    dev = _seed(tmp_path)
    os.chmod(tmp_path / "cache", 0o777)
    _refused_once(dev, "multiply")


def test_group_writable_shard_directory_is_refused(tmp_path) -> None:
    dev = _seed(tmp_path)
    os.chmod(os.path.dirname(_entry(dev, "add")), 0o770)
    _refused_once(dev, "add")


def test_directory_owned_by_another_user_is_refused(tmp_path, monkeypatch) -> None:
    dev = _seed(tmp_path)
    _owned_by_other(monkeypatch, str(tmp_path / "cache"))
    _refused_once(dev, "multiply")


def test_entry_owned_by_another_user_is_refused(tmp_path, monkeypatch) -> None:
    dev = _seed(tmp_path)
    _owned_by_other(monkeypatch, _entry(dev, "multiply"))
    _refused_once(dev, "multiply")


def test_group_writable_entry_is_refused(tmp_path) -> None:
    dev = _seed(tmp_path)
    os.chmod(_entry(dev, "multiply"), 0o664)
    _refused_once(dev, "multiply")


def test_symlinked_entry_is_not_followed(tmp_path) -> None:
    dev = _seed(tmp_path)
    victim = _entry(dev, "add")
    os.unlink(victim)
    os.symlink(_entry(dev, "multiply"), victim)
    _refused_once(dev, "add")


def test_entry_copied_over_another_key_is_a_miss(tmp_path) -> None:
    dev = _seed(tmp_path)
    with open(_entry(dev, "multiply"), "rb") as f:
        data = f.read()
    with open(_entry(dev, "add"), "wb") as f:       # x*3's code under x+3's key
        f.write(data)
    assert not _compile_checked(dev, "add").from_disk_cache
    assert _compile_checked(dev, "add").from_disk_cache        # rewritten with its own code


def _rewrite(path: str, change) -> None:
    """Apply `change(head, obj) -> (head, obj)` and write a self-consistent entry back
    (recomputed hash: the hash alone proves nothing)."""
    with open(path, "rb") as f:
        data = f.read()
    payload = data[len(MAGIC) + 32:]
    size = int.from_bytes(payload[:8], "little")
    head, obj = json.loads(payload[8:8 + size]), payload[8 + size:]
    head, obj = change(head, obj)
    hb = json.dumps(head).encode()
    payload = len(hb).to_bytes(8, "little") + hb + obj
    with open(path, "wb") as f:
        f.write(MAGIC + hashlib.sha256(payload).digest() + payload)


@pytest.mark.parametrize("change", [
    lambda h, o: (h, o[:len(o) // 2]),                                    # code cut short
    lambda h, o: (dict(h, versions=dict(h["versions"], llvmlite="0.0.1")), o),
    lambda h, o: (dict(h, versions=dict(h["versions"], lazyarray="9.9")), o),
    lambda h, o: (dict(h, key="0" * 64), o),
    lambda h, o: ({k: v for k, v in h.items() if k != "meta"}, o),
    lambda h, o: ([h], o),
], ids=["truncated-code", "llvmlite-version", "lazyarray-version", "other-key", "no-meta",
        "not-a-dict"])
def test_inconsistent_entry_is_a_miss_never_a_crash(tmp_path, change) -> None:
    dev = _seed(tmp_path)
    _rewrite(_entry(dev, "multiply"), change)
    assert not _compile_checked(dev, "multiply").from_disk_cache
    assert _compile_checked(dev, "multiply").from_disk_cache


def test_size_cap_evicts_the_least_recently_used(tmp_path) -> None:
    cache = DiskCache(str(tmp_path / "c"), max_bytes=3700)
    keys = [f"{k:02x}" + "0" * 62 for k in range(4)]
    for k in keys[:3]:
        assert cache.store(k, {}, b"x" * 1000)
        os.utime(cache._path(k), ns=(1, 1 + keys.index(k)))   # distinct ages, oldest first
    assert cache.load(keys[0]) is not None            # used again: now the newest
    assert cache.store(keys[3], {}, b"x" * 1000)       # past the cap: one must go
    present = [k for k in keys if os.path.exists(cache._path(k))]
    assert present == [keys[0], keys[2], keys[3]]
    total = sum(os.path.getsize(p) for p in glob.glob(str(tmp_path / "c" / "*" / "*.bin")))
    assert total <= 3700


def test_size_cap_comes_from_the_setting(tmp_path) -> None:
    import lazyarray as la
    with la.config.override(cache_max_mb=7, cache_dir=str(tmp_path)):
        dev = la.device("cpu").device
        assert dev.disk_cache().max_bytes == 7 << 20
    with pytest.raises(TypeError, match="cache_max_mb"):
        la.config.cache_max_mb = "big"


# ---- damaged entries whose hash and sizes were rewritten to match (issue 33, item 18) ----

def _cut(frac: float):
    def change(h, o):
        n = int(len(o) * frac)
        return dict(h, obj_bytes=n), o[:n]
    return change


def _rename_functions(h, o):
    for step in h["meta"]["steps"]:
        if "fn" in step:
            step["fn"] += "_gone"
    return h, o


_CHILD = """
import sys
sys.path.insert(0, {tests!r})
import test_compile_cache_trust as t
dev = t._device({where!r})
exe = t._compile_checked(dev, "multiply")
print("from disk", exe.from_disk_cache)
exe = t._compile_checked(dev, "multiply")
print("from disk", exe.from_disk_cache)
"""


@pytest.mark.parametrize("change", [_cut(0.3), _cut(0.9), _cut(0.999), _rename_functions],
                         ids=["code-cut-to-30%", "code-cut-to-90%", "code-cut-by-bytes",
                              "names-a-function-the-code-lacks"])
def test_damaged_code_is_dropped_and_recompiled_never_a_crash(tmp_path, change) -> None:
    """Object code cut short loaded as a SIGSEGV, and an entry naming a function its code
    lacks failed the sync; now both are misses, and the entry is rewritten. Run in a
    fresh process: a crash fails this test instead of ending the run."""
    import subprocess
    import sys
    dev = _seed(tmp_path)
    _rewrite(_entry(dev, "multiply"), change)
    code = _CHILD.format(tests=os.path.dirname(os.path.abspath(__file__)),
                         where=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["from disk False", "from disk True"], proc.stdout


def test_object_code_is_checked_whole_before_llvm_reads_it() -> None:
    from lazyarray.devices.cpu.object_code import LoadedCode, malformed
    from lazyarray.devices.cpu.runtime_objects import runtime_code
    obj = runtime_code("pool")
    assert malformed(obj) is None
    for n in (0, 10, 63, len(obj) // 2, len(obj) - 1):
        assert malformed(obj[:n]) is not None, n
        with pytest.raises(ValueError, match="object code refused"):
            LoadedCode(obj[:n])
    assert malformed(b"\x00" * len(obj)) == "not an ELF object file"
