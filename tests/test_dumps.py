"""Seeing inside, on every device: `la.debug.ir` gives PTX (for a CPU tensor too: PTX
needs no GPU) and a CUDA program's LLVM IR and optimized HLO; LAZYARRAY_DUMP writes every
stage's file for CPU and CUDA programs, on a disk-cache hit as on a miss; a dumped
`.optimized.hlo` replays with run_hlo as the `.hlo` does (its scalars recorded)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler.codegen import ptxas
from lazyarray.tools import run_hlo

from ptx_marks import needs_libdevice

CPU_FILES = {".hlo", ".inputs.npz", ".optimized.hlo", ".fusion.txt", ".dot", ".ll", ".s"}
CUDA_FILES = {".hlo", ".inputs.npz", ".optimized.hlo", ".fusion.txt", ".dot", ".ll", ".ptx"}


@pytest.fixture(autouse=True)
def nothing_pending():
    from conftest import drop_leftover_pending
    drop_leftover_pending()
    yield


def _program(device: str) -> la.Tensor:
    """A program with a reduction, a transcendental and two runtime scalars."""
    x = la.asarray(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, device=device)
    x.numpy()
    return (la.exp(x * 0.37) + 1.5).sum(axis=1)


@needs_libdevice
def test_ir_gives_ptx_for_a_cpu_tensor():
    ptx = la.debug.ir(_program("cpu"), "ptx")
    assert ".target sm_" in ptx and ".entry" in ptx


@needs_libdevice
@pytest.mark.parametrize("stage, marker", [("ptx", ".entry"), ("llvm", "nvptx64-nvidia-cuda"),
                                           ("optimized_hlo", "HloModule"),
                                           ("fusion", "kernel"), ("dot", "digraph")])
def test_ir_of_a_cuda_program(stage, marker):
    text = la.debug.ir(_program("fakecuda"), stage)
    assert marker in text
    if stage == "ptx" and ptxas.find_ptxas() is not None:
        arch = re.search(r"\.target (sm_\w+)", text).group(1)
        ptxas.check(text, archs=(arch,))     # what the GPU would load assembles


def test_ir_names_the_stages_a_cuda_program_has():
    with pytest.raises(ValueError, match="no stage 'asm'.*ptx"):
        la.debug.ir(_program("fakecuda"), "asm")


def _suffixes(directory) -> set:
    return {p.name[len(p.name.split(".")[0]):] for p in directory.iterdir()}


def _dump_twice(tmp_path, device: str) -> tuple:
    """The same program dumped by a compile (a disk-cache miss) and then, with the
    in-memory cache emptied, by a disk-cache hit; -> (files of each, the results)."""
    out = []
    state = runtime.get_device(device)
    first_name = state.names       # the same module name both times (it is in the key)
    for run in ("miss", "hit"):
        runtime.clear_caches()
        state.names = first_name
        before = la.debug.metrics().disk_hits
        where = tmp_path / run
        with la.config.override(dump=str(where), cache_dir=str(tmp_path / "cache")):
            value = _program(device).numpy()
        assert la.debug.metrics().disk_hits - before == (run == "hit")
        out.append((where, value))
    return out


@needs_libdevice
@pytest.mark.parametrize("dev, files", [("cpu", CPU_FILES), ("fakecuda", CUDA_FILES)])
def test_dump_writes_every_file_on_a_miss_and_on_a_disk_cache_hit(tmp_path, dev, files):
    (miss, want), (hit, got) = _dump_twice(tmp_path, dev)
    np.testing.assert_array_equal(got, want)
    assert _suffixes(miss) == files
    assert _suffixes(hit) == files
    for suffix in files - {".inputs.npz"}:
        a, b = (next(d.glob("*" + suffix)).read_text() for d in (miss, hit))
        assert a == b, suffix


@needs_libdevice
@pytest.mark.parametrize("dev", ["cpu", "fakecuda"])
def test_a_dumped_optimized_module_replays_with_its_scalars(tmp_path, dev):
    (where, want), _ = _dump_twice(tmp_path, dev)
    (path,) = where.glob("*.optimized.hlo")
    text = path.read_text()
    assert "// scalar number=" in text and "value=0.37" in text and "value=1.5" in text
    module = run_hlo.parse_module(text)
    inputs, source = run_hlo.replay_inputs(module, text, str(path))
    assert source.endswith(".inputs.npz")
    np.testing.assert_allclose(run_hlo.run(module, inputs, "interpreter")[0], want, rtol=1e-6)
    assert run_hlo.main([str(path), "--save", str(tmp_path / "o.npz"), "--device", "cpu"]) == 0
    with np.load(tmp_path / "o.npz") as saved:
        np.testing.assert_array_equal(saved["o0"], want)
