"""A process's start: what `import lazyarray` loads, and what a new process with a warm
disk cache does for a cached program. Checked by which modules a fresh interpreter holds
and by the caches' counters, never by time (bench/bench_startup.py times it)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

import lazyarray as la
from lazyarray.devices import compile_cache

# what `import lazyarray` must not load: LLVM's binding (the library and its engine),
# the compiler's passes and code generators, the devices' modules (CPU, CUDA: the
# CUDA libraries), SciPy, and the rarely used parts of the frontend
NOT_ON_IMPORT = ("llvmlite.binding", "lazyarray.compiler.driver",
                 "lazyarray.compiler.passes.pipeline", "lazyarray.compiler.planning.fusion",
                 "lazyarray.compiler.codegen.cpu_kernels", "lazyarray.devices.cpu.cpu",
                 "lazyarray.devices.cuda.cuda", "lazyarray.devices.cuda.cuda_blas",
                 "lazyarray.devices.cuda.cuda_link", "lazyarray.devices.stand_ins.cuda_fake",
                 "lazyarray.devices.cpu.native_pool", "cuda", "cuda.bindings", "nvmath", "scipy",
                 "lazyarray.nn", "lazyarray.optim", "lazyarray.profiler", "lazyarray.aot",
                 "lazyarray.distributed", "lazyarray.control_flow", "lazyarray.amp",
                 "lazyarray.cuda", "concurrent.futures",
                 "importlib.metadata")

# what a cache hit must not load: all of the compiler's work
NOT_ON_HIT = ("lazyarray.compiler.passes.pipeline", "lazyarray.compiler.planning.fusion",
              "lazyarray.compiler.codegen.cpu_kernels", "lazyarray.compiler.codegen.elemental",
              "importlib.metadata")

PROGRAM = """
import json, sys
import lazyarray as la
from lazyarray.devices.cpu import runtime_objects
x = la.arange(4096, dtype=la.float32)
value = float((x * 2 + 1).sum())
m = la.debug.metrics()
print(json.dumps({"value": value, "disk_hits": m.disk_hits,
                  "runtime_misses": runtime_objects.STATS["misses"],
                  "loaded": sorted(m for m in %r if m in sys.modules)}))
"""


def _python(code: str, **env: str) -> str:
    full = dict(os.environ, **env)
    full.pop("LAZYARRAY_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("fake_cuda", ["0", "1"])
def test_import_loads_no_compiler_llvm_device_or_rare_module(fake_cuda):
    code = (f"import sys, lazyarray\n"
            f"print(sorted(m for m in {NOT_ON_IMPORT!r} if m in sys.modules))")
    assert _python(code, LAZYARRAY_FAKE_CUDA=fake_cuda) == "[]"


def test_a_new_process_runs_a_cached_program_without_compiler_work(tmp_path):
    code = PROGRAM % (NOT_ON_HIT,)
    first = json.loads(_python(code, LAZYARRAY_CACHE_DIR=str(tmp_path)))
    second = json.loads(_python(code, LAZYARRAY_CACHE_DIR=str(tmp_path)))
    want = float((2 * __import__("numpy").arange(4096, dtype="float32") + 1).sum())
    assert first["value"] == second["value"] == want
    assert first["disk_hits"] == 0 and "lazyarray.compiler.passes.pipeline" in first["loaded"]
    # the second process: the program and the runtime's own code (pool, trampolines)
    # come from the disk cache, and no pass or code generator is even imported
    assert second["disk_hits"] == 1 and second["runtime_misses"] == 0
    assert second["loaded"] == []


def test_lazy_submodules_work_as_attributes_imports_and_star():
    import lazyarray.nn as nn_module
    from lazyarray import optim, cond
    assert la.nn is nn_module and la.optim is optim and la.cond is cond
    assert la.vmap.__module__ == "lazyarray.vmap" and callable(la.vmap)
    assert callable(la.autocast) and la.amp.autocast is la.autocast
    assert set(la._LAZY) <= set(dir(la)) and set(la._LAZY) <= set(la.__all__)
    with pytest.raises(AttributeError, match="no attribute 'not_a_thing'"):
        la.not_a_thing
    namespace: dict = {}
    exec("from lazyarray import *", namespace)
    assert namespace["nn"] is nn_module and namespace["scan"] is la.scan


def test_vmap_stays_the_function_after_control_flow_loads():
    code = ("import lazyarray as la\nla.cond\nimport lazyarray.control_flow\n"
            "print(callable(la.vmap) and la.vmap.__module__ == 'lazyarray.vmap')")
    assert _python(code) == "True"


def test_the_cache_records_the_package_version():
    """compile_cache.VERSION (read without importlib.metadata) is the installed one."""
    assert compile_cache.VERSION == la.__version__
    assert compile_cache.VERSION == importlib.metadata.version("lazyarray")


class _FakeLinker:
    """Stands in for cuda-python's nvJitLink module where only its version is asked."""
    @staticmethod
    def version() -> tuple:
        return (12, 9)


def test_a_cached_cubin_loads_without_nvjitlink(tmp_path, monkeypatch):
    """A new process finds the cubin in the compile cache without loading (or even
    having) nvJitLink; a miss links once and stores it."""
    from lazyarray.devices.cuda import cuda_link
    links: list = []

    def link(ptx: str, arch: str) -> bytes:
        links.append(arch)
        return b"\x7fELF" + ptx.encode()[::-1]
    monkeypatch.setattr(cuda_link, "nvjitlink", lambda: _FakeLinker)
    monkeypatch.setattr(cuda_link, "link_cubin", link)
    monkeypatch.setattr(cuda_link, "_CUBINS", {})
    ptx = ".version 7.8\n.target sm_90\n// kernel"
    cubin = cuda_link.load_image(ptx, "sm_90", str(tmp_path))
    assert links == ["sm_90"] and cubin == link(ptx, "sm_90")
    links.clear()

    def no_linker() -> None:
        raise AssertionError("a cached cubin loaded nvJitLink")
    monkeypatch.setattr(cuda_link, "nvjitlink", no_linker)
    monkeypatch.setattr(cuda_link, "_CUBINS", {})                 # a new process
    hits = cuda_link.STATS["disk_hits"]
    assert cuda_link.load_image(ptx, "sm_90", str(tmp_path)) == cubin
    assert cuda_link.STATS["disk_hits"] == hits + 1 and links == []
    # another architecture is another entry: linked (here: no linker, so the PTX)
    monkeypatch.setattr(cuda_link, "nvjitlink", lambda: None)
    assert cuda_link.load_image(ptx, "sm_80", str(tmp_path)) == ptx.encode() + b"\0"


def test_cubins_are_trusted_only_as_the_compile_cache_is(tmp_path, monkeypatch):
    """A cubin is code the GPU runs: one in a folder others may write is never loaded."""
    from lazyarray.devices.cuda import cuda_link
    monkeypatch.setattr(cuda_link, "nvjitlink", lambda: _FakeLinker)
    monkeypatch.setattr(cuda_link, "link_cubin", lambda ptx, arch: b"\x7fELF" + ptx.encode())
    monkeypatch.setattr(cuda_link, "_CUBINS", {})
    ptx = "// another kernel"
    cuda_link.load_image(ptx, "sm_90", str(tmp_path))
    os.chmod(tmp_path, 0o777)
    monkeypatch.setattr(cuda_link, "_CUBINS", {})
    links = cuda_link.STATS["links"]
    try:
        with pytest.warns(RuntimeWarning, match="writable by group or others"):
            cuda_link.load_image(ptx, "sm_90", str(tmp_path))
    finally:
        os.chmod(tmp_path, 0o700)
        compile_cache.REFUSED.pop(str(tmp_path), None)
    assert cuda_link.STATS["links"] == links + 1


def test_the_source_fingerprint_follows_every_write(tmp_path):
    """Cache entries are pinned to the code by its files' stats: a same-size edit, a new
    file or a rename changes the fingerprint; reading the files does not."""
    import time
    (tmp_path / "pkg").mkdir()
    code = tmp_path / "pkg" / "a.py"
    code.write_text("X = 1\n")
    first = compile_cache.source_fingerprint(str(tmp_path))
    assert compile_cache.source_fingerprint(str(tmp_path)) == first
    code.read_text()
    assert compile_cache.source_fingerprint(str(tmp_path)) == first
    time.sleep(0.05)                  # past the file system's timestamp granularity
    code.write_text("X = 2\n")        # same size, other content
    second = compile_cache.source_fingerprint(str(tmp_path))
    assert second != first
    (tmp_path / "pkg" / "b.txt").write_text("not code")
    assert compile_cache.source_fingerprint(str(tmp_path)) == second
    code.rename(tmp_path / "pkg" / "c.py")
    assert compile_cache.source_fingerprint(str(tmp_path)) != second
    assert compile_cache.compiler_fingerprint() == compile_cache.compiler_fingerprint()


BUILT = """
import json
import numpy as np
import lazyarray as la
from lazyarray.devices.cpu import native_gemm, runtime_objects as R
built = []
plain = R.runtime_code
def counting(name, *shape, **how):
    built.append([name, *shape])
    return plain(name, *shape, **how)
R.runtime_code = counting
a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
value = (la.asarray(a) @ la.asarray(a)).numpy()
assert np.allclose(value, a @ a, rtol=1e-5)
print(json.dumps({"built": built, "native": native_gemm.available()}))
"""


def test_a_first_product_builds_only_the_tile_function_it_uses(tmp_path):
    """With an empty cache, a float32 64x64 product (one CBLAS call a tile, or our packed
    GEMM's) builds the runtime's pool and that one tile function: not the others (all six in one
    module were ~1 s of LLVM at a first training step)."""
    out = json.loads(_python(BUILT, LAZYARRAY_CACHE_DIR=str(tmp_path)))
    if not out["native"]:
        pytest.skip(reason="NumPy's BLAS is not the ILP64 OpenBLAS: products take NumPy's path")
    gemm = [b for b in out["built"] if b[0] == "gemm_tiles"]
    from lazyarray.devices.cpu.native_gemm import IR, packed
    kind = IR.GEMM_KIND_PACKED if packed() else IR.GEMM_KIND_BLAS   # (AVX-512: our own)
    assert gemm == [["gemm_tiles", kind, 4]]


PREFETCHED = """
import json, threading
import numpy as np
import lazyarray as la
from lazyarray.devices.cpu import native_gemm, runtime_objects as R
built = []
plain = R.runtime_code
def counting(name, *shape, **how):
    built.append([name, *shape, threading.current_thread().name])
    return plain(name, *shape, **how)
R.runtime_code = counting
rng = np.random.default_rng(0)
a, b = rng.random((256, 10), np.float32), rng.random((10, 512), np.float32)
c, w = rng.random((64, 512), np.float32), rng.random((10, 512), np.float32)
big = rng.random((16384, 16), np.float32)
x, y = la.asarray(a) @ la.asarray(b), la.asarray(c) @ la.asarray(w).T
z = la.tanh(la.asarray(big) * 3.0).sum(axis=0) + 1.0     # partial reduction and finish
la.sync()
assert np.allclose(x.numpy(), a @ b, rtol=1e-5) and np.allclose(y.numpy(), c @ w.T, rtol=1e-5)
assert np.allclose(z.numpy(), np.tanh(big * 3.0).sum(axis=0) + 1, rtol=1e-5)
print(json.dumps({"built": built, "native": native_gemm.available()}))
"""


def test_a_programs_tile_functions_are_built_while_it_compiles(tmp_path):
    """With an empty cache, a program with a short-inner-dimension product (`direct`) and a
    narrow x @ W.T (`dots`) has both tile functions (and, the first program, the worker
    pool; and its tasks' trampolines) built on threads of their own as soon as its steps
    are planned (driver.compile's `planned`), each once, not one after the
    other inside its first run; the results are NumPy's."""
    out = json.loads(_python(PREFETCHED, LAZYARRAY_CACHE_DIR=str(tmp_path)))
    if not out["native"]:
        pytest.skip(reason="NumPy's BLAS is not the ILP64 OpenBLAS: products take NumPy's path")
    from lazyarray.devices.cpu.native_gemm import IR
    gemm = sorted(b for b in out["built"] if b[0] == "gemm_tiles")
    assert gemm == [["gemm_tiles", IR.GEMM_KIND_DIRECT, 4, "lazyarray-runtime-build"],
                    ["gemm_tiles", IR.GEMM_KIND_DOTS, 4, "lazyarray-runtime-build"]]
    # the process's first program: the worker pool's code too
    assert [b for b in out["built"] if b[0] == "pool"] == [["pool", "lazyarray-runtime-build"]]
    # its tasks' trampolines, predicted from its steps (native_pool.trampoline_keys): one
    # object built beside the compile, none left for the run to build
    tramps = [b for b in out["built"] if b[0].startswith("trampoline")]
    assert len(tramps) == 1 and tramps[0][0] == "trampolines" \
        and tramps[0][-1] == "lazyarray-runtime-build"
