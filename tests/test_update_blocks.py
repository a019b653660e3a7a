"""Sums of dynamic_update_slices of zeros with run-time starts (the q/k/v gradients of a
fused qkv projection sliced with `x[..., i * C:(i + 1) * C]`) run block by block when the
starts fall on blocks (compiler/codegen/update_blocks.py): the same values as the
interpreter for every start, aligned or not, and vector loads where they fall on blocks."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.codegen import inner_rows, update_blocks
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I, Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

_DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})


def _updates_module(rows: int, n: int, z: tuple, tail: str, dtype: D.DType) -> Module:
    """Parameters: one (rows, z_k) update and one int64 start per update; the sum of
    dynamic_update_slice(zeros (rows, n), update_k, (0, start_k)), then `tail`: "colsum"
    (summed over rows), "scale" (times a parameter row) or "both" (one kernel, two
    outputs)."""
    ins = [I("parameter", (), (rows, w), dtype, {"number": k}) for k, w in enumerate(z)]
    starts = []
    for k in range(len(z)):
        starts.append(len(ins))
        ins.append(I("parameter", (), (), D.int64, {"number": len(z) + k}))
    ins.append(I("constant", (), (), D.int64, {"value": _literal(0, D.int64)}))
    zero_start = len(ins) - 1
    ins.append(I("constant", (), (), dtype, {"value": _literal(0, dtype)}))
    ins.append(I("broadcast_in_dim", (len(ins) - 1,), (rows, n), dtype,
                 {"shape": (rows, n), "broadcast_dimensions": ()}))
    zeros = len(ins) - 1
    total = None
    for k in range(len(z)):
        ins.append(I("dynamic_update_slice", (zeros, k, zero_start, starts[k]), (rows, n),
                     dtype, {}))
        if total is not None:
            ins.append(I("add", (total, len(ins) - 1), (rows, n), dtype, {}))
        total = len(ins) - 1
    outs = []
    if tail in ("scale", "both"):
        ins.append(I("parameter", (), (n,), dtype, {"number": 2 * len(z)}))
        ins.append(I("broadcast_in_dim", (len(ins) - 1,), (rows, n), dtype,
                     {"shape": (rows, n), "broadcast_dimensions": (1,)}))
        ins.append(I("multiply", (total, len(ins) - 1), (rows, n), dtype, {}))
        outs.append(len(ins) - 1)
    if tail in ("colsum", "both"):
        outs.append(total)
        ins.append(I("reduce", (total,), (n,), dtype, {"axes": (0,), "kind": "sum"}))
        outs.append(len(ins) - 1)
    return Module("updates", ins, outs)


def _literal(value, dtype: D.DType):
    from lazyarray.compiler.hlo.literal import Literal
    return Literal(np.asarray(value, dtype=dtype.np))


def _run_both(m: Module, starts: tuple, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    args, given = [], iter(starts)
    for p in m.parameters:
        ins = m.instructions[p]
        if ins.dtype is D.int64:
            args.append(np.int64(next(given)))
        else:
            # small integers: every float32 sum is exact, so any order is bit-equal
            args.append(rng.integers(-100, 100, ins.shape).astype(ins.dtype.np))
    want = InterpreterDevice().compile(m).run(args)
    got = _DEVICE.compile(m).run(args)
    return got, want


# (rows, n, update widths, starts, tail): on blocks, permuted, two at one start, off
# blocks, starts clamped onto blocks (and off them), widths that do not divide n (no
# blocks), different widths, and a single row
CASES = [
    (96, 768, (256, 256, 256), (0, 256, 512), "both"),
    (96, 768, (256, 256, 256), (512, 0, 256), "colsum"),
    (33, 768, (256, 256, 256), (256, 256, 0), "both"),
    (40, 768, (256, 256, 256), (100, 256, 7), "both"),
    (40, 768, (256, 256, 256), (-9, 9999, 256), "scale"),
    (40, 768, (256, 256, 256), (-9, 300, 256), "colsum"),
    (40, 100, (30, 30), (0, 30), "both"),
    (40, 96, (32, 16, 32), (64, 16, 0), "both"),
    (1, 64, (16, 16), (16, 48), "both"),
]


@pytest.mark.parametrize("rows,n,z,starts,tail", CASES)
def test_sums_of_updates_match_the_interpreter(rows, n, z, starts, tail) -> None:
    for dtype in (D.float32, D.int32):
        m = _updates_module(rows, n, z, tail, dtype)
        got, want = _run_both(m, starts, rows + n)
        for g, w in zip(got, want):
            assert np.array_equal(np.asarray(g), np.asarray(w)), f"{z} at {starts} {dtype}"


def test_updates_on_blocks_read_with_vector_loads(monkeypatch) -> None:
    """The block loops read each update with vector loads, where the per-element
    clamp-and-select reads it with gathers (the kernel keeps that loop for starts off
    the blocks): with the blocks turned off, the vector loads of the three updates go."""
    m = _updates_module(96, 768, (256, 256, 256), "both", D.float32)

    def vector_loads() -> int:
        text = _DEVICE.stage(m, "llvm")
        return text.count("load <8 x float>") + text.count("load <16 x float>")
    with_blocks = vector_loads()
    monkeypatch.setattr(update_blocks, "MIN_BLOCK", 10 ** 6)
    assert with_blocks >= vector_loads() + 3


def _heads_module(batch: int, heads: int, seq: int, dim: int) -> Module:
    """Three (batch, heads, seq, dim) head gradients merged to (batch, seq, heads * dim)
    (transpose, reshape) and placed at run-time starts into zeros (batch, seq, 3 * width),
    summed; outputs the sum and its sum over (batch, seq): attention's qkv gradient."""
    f = D.float32
    width = heads * dim
    shape = (batch, seq, 3 * width)
    ins = [I("parameter", (), (batch, heads, seq, dim), f, {"number": k}) for k in range(3)]
    for k in range(3):
        ins.append(I("parameter", (), (), D.int64, {"number": 3 + k}))
    ins.append(I("constant", (), (), D.int64, {"value": _literal(0, D.int64)}))
    z0 = len(ins) - 1
    ins.append(I("constant", (), (), f, {"value": _literal(0, f)}))
    ins.append(I("broadcast_in_dim", (len(ins) - 1,), shape, f,
                 {"shape": shape, "broadcast_dimensions": ()}))
    zeros, total = len(ins) - 1, None
    for k in range(3):
        ins.append(I("transpose", (k,), (batch, seq, heads, dim), f,
                     {"permutation": (0, 2, 1, 3)}))
        ins.append(I("reshape", (len(ins) - 1,), (batch, seq, width), f,
                     {"shape": (batch, seq, width)}))
        ins.append(I("dynamic_update_slice", (zeros, len(ins) - 1, z0, z0, 3 + k), shape, f, {}))
        if total is not None:
            ins.append(I("add", (total, len(ins) - 1), shape, f, {}))
        total = len(ins) - 1
    ins.append(I("reduce", (total,), (3 * width,), f, {"axes": (0, 1), "kind": "sum"}))
    return Module("heads", ins, [total, len(ins) - 1])


@pytest.mark.parametrize("starts", [(0, 64, 128), (128, 0, 64), (64, 64, 0), (5, 64, 128)])
def test_merged_heads_placed_at_run_time_starts_match_the_interpreter(starts) -> None:
    """The blocks run as rows of one head's width (inner_rows.row_width): the head
    merge's reshape reads (row, offset) without dividing."""
    m = _heads_module(2, 4, 16, 16)
    got, want = _run_both(m, starts, 7)
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w)), f"at {starts}"


def test_merged_heads_in_blocks_read_with_vector_loads(monkeypatch) -> None:
    """Rows of a head's width: each head gradient is read with vector loads (one per
    head gradient at least); without the rows its reshape divides each index, and the
    loads are gathers. (Large enough for LLVM's loop vectorizer: llvm_target.opt_tier.)"""
    m = _heads_module(4, 2, 64, 32)

    def vector_loads() -> int:
        text = _DEVICE.stage(m, "llvm")
        return text.count("load <8 x float>") + text.count("load <16 x float>")
    with_rows = vector_loads()
    monkeypatch.setattr(inner_rows, "row_width", lambda *a: 1)
    assert with_rows >= vector_loads() + 3


def _chain_module(rows: int, n: int, z: int) -> Module:
    """dynamic_update_slice(dynamic_update_slice(x, a, (0, s)), b, (0, t)) of a parameter
    x (not zeros), times 3: a later update overwrites an earlier one where they meet."""
    f = D.float32
    ins = [I("parameter", (), (rows, n), f, {"number": 0}),
           I("parameter", (), (rows, z), f, {"number": 1}),
           I("parameter", (), (rows, z), f, {"number": 2}),
           I("parameter", (), (), D.int64, {"number": 3}),
           I("parameter", (), (), D.int64, {"number": 4}),
           I("constant", (), (), D.int64, {"value": _literal(0, D.int64)}),
           I("dynamic_update_slice", (0, 1, 5, 3), (rows, n), f, {}),
           I("dynamic_update_slice", (6, 2, 5, 4), (rows, n), f, {}),
           I("constant", (), (), f, {"value": _literal(3, f)}),
           I("broadcast_in_dim", (8,), (rows, n), f, {"shape": (rows, n),
                                                     "broadcast_dimensions": ()}),
           I("multiply", (7, 9), (rows, n), f, {})]
    return Module("chain", ins, [10])


@pytest.mark.parametrize("starts", [(0, 64), (64, 64), (128, 0), (64, 100), (999, -3)])
def test_chained_updates_of_a_value_match_the_interpreter(starts) -> None:
    m = _chain_module(48, 192, 64)
    got, want = _run_both(m, starts, 3)
    assert np.array_equal(np.asarray(got[0]), np.asarray(want[0])), f"at {starts}"
