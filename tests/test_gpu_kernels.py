"""The GPU kernel shapes (compiler/codegen/nvptx.py): which shape each reduction gets,
launch sizes fitted to the GPU, and the PTX of softmax, layer norm and a full sum
assembled by `ptxas` for sm_80 and sm_90 with what makes them fast in it: warp shuffles,
128-bit vector loads, one pass for a full reduction, barriers only where a block shares
a row. Results through the CUDA runtime are checked in tests/test_cuda_fake.py."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.codegen import nvptx, ptxas
from lazyarray.compiler.codegen.gpu_target import GpuTarget, parse_target
from lazyarray.compiler.passes.pipeline import compile_plan
from lazyarray.compiler.graph.trace import capture
from ptx_marks import needs_ptxas

ARCHS = ("sm_80", "sm_90")
SIZES = {"sm_80": (108, 2048), "sm_90": (132, 2048)}     # an A100 and an H100


def _ones(*shape):
    return la.asarray(np.ones(shape, np.float32))


def _softmax(x):
    e = la.exp(x - la.max(x, axis=-1, keepdims=True))
    return e / la.sum(e, axis=-1, keepdims=True)


def _emit(tensors, target="sm_90"):
    plan = compile_plan(capture([t._node for t in tensors]).module("m"))
    return nvptx.emit_plan(plan, target, "m")


def _launch(prog):
    (spec,) = [s for s in prog.launches if isinstance(s, nvptx.LaunchSpec)]
    return spec


WORKLOADS = {
    "softmax": lambda: [_softmax(_ones(4096, 1024))],
    "softmax_long_rows": lambda: [_softmax(_ones(64, 4096))],
    "layer_norm": lambda: [F.layer_norm(_ones(4096, 1024), (1024,), _ones(1024), _ones(1024))],
    "full_sum": lambda: [(3 * _ones(1 << 24) ** 2 + _ones(1 << 24)).mean()],
}


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("label", sorted(WORKLOADS))
def test_fast_kernels_assemble_and_use_shuffles_and_vector_loads(label: str, arch: str) -> None:
    sms, threads = SIZES[arch]
    prog = _emit(WORKLOADS[label](), f"{arch}:{sms}:{threads}")
    ptxas.check(prog.ptx, (arch,), label)
    spec = _launch(prog)
    assert spec.block == (nvptx.BLOCK, 1, 1)
    assert "shfl.sync.bfly" in prog.ptx                  # warp-shuffle reductions
    assert "ld.global.v4" in prog.ptx                    # 128-bit loads of the f32 inputs
    resident = sms * threads // nvptx.BLOCK
    if label == "full_sum":
        # one pass: one launch of one wave, one ticket taken per block, partials in scratch
        assert spec.grid == (resident, 1, 1)
        assert prog.ptx.count("atom.global.add") == 1
        assert list(prog.scratch.values()) == [resident * 4]
    elif label == "softmax_long_rows":
        assert spec.grid == (64, 1, 1)                   # a block per row of 4096
        assert "bar.sync" in prog.ptx                    # its warps share through memory
    else:
        assert spec.grid == (512, 1, 1)                  # a warp per row of 1024: 8 a block
        assert "bar.sync" not in prog.ptx and "atom" not in prog.ptx


def test_team_follows_the_row_length() -> None:
    short = _launch(_emit([_ones(100, nvptx.WARP_ROW_MAX).sum(axis=1)]))
    long = _launch(_emit([_ones(100, nvptx.WARP_ROW_MAX + 4).sum(axis=1)]))
    assert short.grid == (-(-100 // (nvptx.BLOCK // nvptx.WARP)), 1, 1)
    assert long.grid == (100, 1, 1)


def test_grids_are_one_wave_of_the_gpu_they_are_for() -> None:
    x = _ones(1 << 22)
    big, small = _launch(_emit([x * 2], "sm_90:132:2048")), _launch(_emit([x * 2], "sm_90:16:1024"))
    assert big.grid == (132 * 8, 1, 1) and small.grid == (16 * 4, 1, 1)
    # a small space gets only the blocks it needs
    assert _launch(_emit([_ones(1001) * 2], "sm_90:132:2048")).grid == (4, 1, 1)
    assert _launch(_emit([_ones(1000) * 2], "sm_90:132:2048")).grid == (1, 1, 1)   # 4 a thread
    rows = _launch(_emit([_softmax(_ones(1 << 16, 64))], "sm_90:10:2048"))
    assert rows.grid == (10 * 8, 1, 1)


def test_unaligned_rows_use_scalar_loads() -> None:
    prog = _emit([_softmax(_ones(8, 30))])
    assert "ld.global.v4" not in prog.ptx and "shfl.sync.bfly" in prog.ptx


def test_gpu_target_strings() -> None:
    assert parse_target("sm_80") == GpuTarget("sm_80")
    assert parse_target("sm_90:132:2048") == GpuTarget("sm_90", 132, 2048)
    assert str(GpuTarget("sm_86", 84, 1536)) == "sm_86:84:1536"
    assert GpuTarget("sm_86", 84, 1536).resident_blocks(256) == 84 * 6
    assert GpuTarget("sm_90", 2, 2048).resident_blocks(32) == 2 * 32   # 32 blocks an SM at most
    with pytest.raises(ValueError, match="sm_XX"):
        parse_target("sm_90:many")


def test_cuda_device_targets_its_gpus_size() -> None:
    from lazyarray.devices.cuda.cuda import CudaDevice
    from lazyarray.devices.stand_ins.cuda_fake import FAKE_DRIVER
    dev = CudaDevice("cuda", fake=True)
    assert dev.target == f"{dev.arch}:{FAKE_DRIVER.multiprocessors}:" \
                         f"{FAKE_DRIVER.threads_per_multiprocessor}"
    assert dev.cache_key() == ("cuda", dev.target)
    x = np.random.default_rng(0).standard_normal(1 << 12).astype(np.float32)
    exe = dev.compile(capture([(la.asarray(x) * 2).sum()._node]).module("m"))
    (step,) = [s for s in exe.steps if s.kind == "launch"]
    assert exe.program.target == dev.target
    assert step.grid[0] <= FAKE_DRIVER.multiprocessors * 8


@needs_ptxas
def test_elementwise_kernels_use_vector_loads_and_stores() -> None:
    x, y = _ones(2048, 1024), _ones(1024)
    prog = _emit([x * 2 + y, la.exp(x)])
    ptxas.check(prog.ptx, ("sm_90",), "elementwise")
    assert "ld.global.v4" in prog.ptx and "st.global.v4" in prog.ptx
    assert _launch(prog).grid == (132 * 8, 1, 1)
    odd = _emit([_ones(100, 3) * 2])
    assert "ld.global.v4" not in odd.ptx and _launch(odd).grid == (-(-300 // 256), 1, 1)
