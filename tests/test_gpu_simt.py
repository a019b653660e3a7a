"""The GPU kernels' own code, run on the host thread by thread (devices/stand_ins/cuda_simt.py),
against the interpreter: every kernel shape the NVPTX code generator picks — a warp per
row, a block per row, vector loads and their scalar fallback, column reductions, the
one-pass full reduction over several blocks with its last-block ticket (run twice: the
ticket must be reset) — at the launch sizes of a small GPU, so that grids of several
blocks and grid-stride loops are exercised. (The fake CUDA driver runs a CPU twin of
each kernel instead, tests/test_cuda_fake.py.)"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.codegen import nvptx
from lazyarray.compiler.driver import compile_gpu_for_host
from lazyarray.compiler.graph.trace import capture
from lazyarray.devices.stand_ins.cuda_simt import SimtExecutable
from lazyarray.devices.interpreter import InterpretedExecutable

SMALL_GPU = "sm_90:2:512"           # 2 multiprocessors of 2 blocks: grids of 4 blocks


def _t(*shape, dtype=np.float32, seed=0):
    return la.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _softmax(x):
    e = la.exp(x - la.max(x, axis=-1, keepdims=True))
    return e / la.sum(e, axis=-1, keepdims=True)


def _check(tensors, rtol=1e-5, atol=1e-5, runs=1):
    cap = capture([t._node for t in tensors])
    module = cap.module("m")
    args = [np.asarray(a) for a in cap.args]
    want = InterpretedExecutable(module).run(args)
    program = compile_gpu_for_host(module, SMALL_GPU)
    exe = SimtExecutable(program)
    for _ in range(runs):
        got = exe.run(args)
        for g, w in zip(got, want):
            wide = np.complex128 if np.iscomplexobj(w) else np.float64
            np.testing.assert_allclose(np.asarray(g).astype(wide), np.asarray(w).astype(wide),
                                       rtol=rtol, atol=atol)
    return program


def _grid(program):
    (step,) = program.steps
    return step.grid[0]


def test_full_sum_over_several_blocks_with_vector_loads_twice():
    x, y = _t(5000), _t(5000, seed=1)            # 5000 = 4 x 1250: vector path, 2 rounds
    program = _check([(3 * x ** 2 + y).mean()], runs=2)
    assert _grid(program) == 2 * 2


def test_full_reductions_scalar_path_other_dtypes_and_argmax():
    x = _t(3, 1001)                              # the last axis is no multiple of 4
    _check([x.sum(), la.max(x)])
    _check([_t(4100, dtype=np.float64).sum()], rtol=1e-12)      # 64-bit shuffles
    ints = la.asarray(np.arange(3000, dtype=np.int32) % 7 - 3)
    _check([ints.sum(), la.argmax(_t(2000))])


@pytest.mark.parametrize("shape", [(9, 64), (6, 30), (3, 2, 48)], ids=["aligned", "odd", "3d"])
def test_softmax_warp_per_row(shape):
    program = _check([_softmax(_t(*shape))])
    assert program.steps[0].block == [nvptx.BLOCK, 1, 1]


def test_softmax_and_row_sums_block_per_row():
    n = nvptx.WARP_ROW_MAX + 36                  # a block per row, vector loads
    program = _check([_softmax(_t(5, n))])
    assert _grid(program) == 4                   # 5 rows over one wave of 4 blocks
    _check([_t(3, nvptx.WARP_ROW_MAX + 3).sum(axis=1)], rtol=1e-4)   # scalar loads


def test_layer_norm_rows():
    x, w, b = _t(7, 96), _t(96, seed=1), _t(96, seed=2)
    _check([F.layer_norm(x, (96,), w, b)], rtol=1e-4, atol=1e-5)


def test_column_and_interleaved_reductions():
    x = _t(40, 70)
    _check([x.sum(axis=0), la.argmax(x, axis=0), _t(4, 5, 6).sum(axis=(0, 2))], rtol=1e-5)


def test_elementwise_vector_and_scalar_paths():
    x, y = _t(37, 8), _t(8, seed=1)
    # f32 with a broadcast operand (vector loads of x, scalar of y, vector stores), a
    # multi-output fusion, a non-32-bit output (scalar stores), and an odd last axis
    _check([x * 2 + y, la.exp(x), (x > y).astype(la.float16)])
    _check([_t(5, 7) * 3 + 1])
    ints = la.asarray(np.arange(4 * 300, dtype=np.int32).reshape(300, 4))
    _check([ints * 3 - 7])


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int64", "float16", "bfloat16",
                                   "complex64"])
def test_reductions_of_every_width(dtype):
    """Shuffles and partials of 1-, 8-, 16-, 64-bit and two-part (complex) values."""
    rng = np.random.default_rng(3)
    raw = rng.integers(-3, 4, (6, 40)) + (1j * rng.integers(-2, 3, (6, 40)) if dtype == "complex64" else 0)
    if dtype == "bool":
        raw = raw > 0
    x = la.asarray(np.asarray(raw).astype(np.float32 if dtype == "bfloat16" else dtype))
    x = x.astype(la.bfloat16) if dtype == "bfloat16" else x
    tensors = [x.sum(), x.sum(axis=1), x.sum(axis=0)] if dtype != "bool" else \
        [la.any(x), la.all(x, axis=1), la.any(x, axis=0)]
    if dtype not in ("bool", "complex64"):
        tensors += [la.max(x), la.argmax(x, axis=1)]
    _check(tensors, rtol=1e-2, atol=1e-2)
