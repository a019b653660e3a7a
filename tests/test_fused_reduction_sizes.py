"""Fused full reductions of the bandwidth benchmarks (`sum(x + y*z)`, `mean(3*x*x + y)`) and a
max, at every length where the CPU code changes shape: the vector width and the
vectorizer's interleaved accumulators (8, 32 floats), the optimization tiers and the lane
accumulators (4,096 and 32,768 elements, compiler/codegen/llvm_target.py), the split over
threads (devices/cpu/cpu.py: SPLIT_ELEMENTS, and CHUNKS_PER_THREAD chunks from 64 times it),
each on 1, 2 and 3 threads; float32, float64, int32 and bool; NaN and infinity at a chunk's
first and last element. Checked against NumPy in float64 and against the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.devices.cpu import cpu
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

SPLIT = cpu.SPLIT_ELEMENTS
BIG = 64 * SPLIT                  # from here a kernel gets several chunks per thread
SIZES = [1, 7, 8, 9, 31, 32, 33, 4095, 4096, 4097, SPLIT - 1, SPLIT, SPLIT + 1,
         BIG - 1, BIG + 3]
THREADS = [1, 2, 3]
_DEVICES: dict = {}


def _device(threads: int) -> CPUDevice:
    if threads not in _DEVICES:
        _DEVICES[threads] = CPUDevice(lambda: {"cache_dir": "off", "num_threads": threads})
    return _DEVICES[threads]


def _scalar(value: float, dtype: D.DType, n: int, at: int) -> list:
    """A constant broadcast to (n,): two instructions, the second at position `at + 1`."""
    return [I("constant", (), (), dtype, {"value": Literal(np.asarray(value, dtype.np)[()])}),
            I("broadcast_in_dim", (at,), (n,), dtype, {"shape": (n,), "broadcast_dimensions": ()})]


def sum_x_plus_yz(n: int, dtype: D.DType) -> Module:
    return Module("sum3", [
        I("parameter", (), (n,), dtype, {"number": 0}),
        I("parameter", (), (n,), dtype, {"number": 1}),
        I("parameter", (), (n,), dtype, {"number": 2}),
        I("multiply", (1, 2), (n,), dtype, {}),
        I("add", (0, 3), (n,), dtype, {}),
        I("reduce", (4,), (), dtype, {"axes": (0,), "kind": "sum"}),
    ], [5])


def mean_3xx_plus_y(n: int, dtype: D.DType) -> Module:
    """sum(3*x*x + y) / n, and max(x + y) from the same reads (a second root)."""
    return Module("mean2", [
        I("parameter", (), (n,), dtype, {"number": 0}),
        I("parameter", (), (n,), dtype, {"number": 1}),
        *_scalar(3, dtype, n, 2),                                   # 2, 3
        I("multiply", (3, 0), (n,), dtype, {}),                     # 4
        I("multiply", (4, 0), (n,), dtype, {}),                     # 5
        I("add", (5, 1), (n,), dtype, {}),                          # 6
        I("reduce", (6,), (), dtype, {"axes": (0,), "kind": "sum"}),  # 7
        I("constant", (), (), dtype, {"value": Literal(np.asarray(n, dtype.np)[()])}),  # 8
        I("divide", (7, 8), (), dtype, {}),                         # 9
        I("add", (0, 1), (n,), dtype, {}),                          # 10
        I("reduce", (10,), (), dtype, {"axes": (0,), "kind": "max"}),  # 11
    ], [9, 11])


def any_x_and_y(n: int) -> Module:
    return Module("any_and", [
        I("parameter", (), (n,), D.bool_, {"number": 0}),
        I("parameter", (), (n,), D.bool_, {"number": 1}),
        I("and", (0, 1), (n,), D.bool_, {}),
        I("reduce", (2,), (), D.bool_, {"axes": (0,), "kind": "or"}),
        I("or", (0, 1), (n,), D.bool_, {}),
        I("reduce", (4,), (), D.bool_, {"axes": (0,), "kind": "and"}),
    ], [3, 5])


def _data(n: int, dtype: D.DType, rng, count: int) -> list:
    if dtype.is_float:
        return [rng.standard_normal(n).astype(dtype.np) for _ in range(count)]
    return [rng.integers(-100, 100, n).astype(dtype.np) for _ in range(count)]


def _close(got, want, dtype: D.DType, n: int) -> None:
    if dtype.is_float:
        rtol = 1e-5 if dtype == D.float32 else 1e-12
        np.testing.assert_allclose(np.float64(got), np.float64(want), rtol=rtol,
                                   atol=rtol * np.sqrt(n) * 4)
    else:
        assert got == want


def _chunks(exe) -> int:
    return max(len(exe._ranges(s)) for s in exe.steps if s.kind == "partial")


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.int32], ids=lambda d: d.name)
def test_sum_of_x_plus_y_times_z(dtype: D.DType, n: int, threads: int) -> None:
    module = sum_x_plus_yz(n, dtype)
    x, y, z = _data(n, dtype, np.random.default_rng(n), 3)
    exe = _device(threads).compile(module)
    got = exe.run([x, y, z])[0]
    want = InterpreterDevice().compile(module).run([x, y, z])[0]
    wide = [a.astype(np.float64) if dtype.is_float else a.astype(np.int64) for a in (x, y, z)]
    exact = (wide[0] + wide[1] * wide[2]).sum()
    if dtype.is_float:
        _close(got, exact, dtype, n)
        _close(got, want, dtype, n)
    else:                  # int32 wraps as NumPy's int32 does; these values never overflow
        assert int(got) == int(want) == int(exact)
    if threads > 1 and n >= SPLIT:
        assert _chunks(exe) >= threads, "a large reduction was not split over the threads"


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [D.float32, D.float64], ids=lambda d: d.name)
def test_mean_and_max_read_together(dtype: D.DType, n: int, threads: int) -> None:
    module = mean_3xx_plus_y(n, dtype)
    x, y = _data(n, dtype, np.random.default_rng(n + 1), 2)
    exe = _device(threads).compile(module)
    mean, top = exe.run([x, y])
    ref = InterpreterDevice().compile(module).run([x, y])
    xw, yw = x.astype(np.float64), y.astype(np.float64)
    _close(mean, (3 * xw * xw + yw).mean(), dtype, n)
    _close(mean, ref[0], dtype, n)
    assert float(top) == float((x + y).max()) == float(ref[1])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [4097, SPLIT + 1, BIG + 3])
def test_nan_and_infinity_at_chunk_edges(n: int, threads: int) -> None:
    """A NaN or an infinity at the first or last element of any chunk (and of the whole
    range) reaches the sum, the mean and the max."""
    exe = _device(threads).compile(mean_3xx_plus_y(n, D.float32))
    step = next(s for s in exe.steps if s.kind == "partial")
    edges = sorted({k for a, b in exe._ranges(step) for k in (a, b - 1)})
    rng = np.random.default_rng(n)
    for at in edges[:6] + edges[-2:]:
        x, y = _data(n, D.float32, rng, 2)
        x[at] = np.nan
        mean, top = exe.run([x, y])
        assert np.isnan(mean) and np.isnan(top), f"NaN at {at} of {n} was lost"
        x[at] = np.inf
        mean, top = exe.run([x, y])
        assert mean == np.inf and top == np.inf, f"inf at {at} of {n} was lost"
        y[at] = -np.inf                          # inf + -inf: NaN, as in NumPy
        mean, top = exe.run([x, y])
        assert np.isnan(mean) and np.isnan(top)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("n", [1, 9, 4097, SPLIT + 1, BIG + 3])
def test_bool_any_and_all(n: int, threads: int) -> None:
    """or/and reductions of fused bool ops: one True (or one False) anywhere decides."""
    exe = _device(threads).compile(any_x_and_y(n))
    rng = np.random.default_rng(n)
    for at in sorted({0, n // 2, n - 1}):
        x, y = np.zeros(n, bool), rng.random(n) < 0.5
        y[at] = True
        x[at] = True
        got = exe.run([x, y])
        assert bool(got[0]) == bool((x & y).any()) is True
        assert bool(got[1]) == bool((x | y).all())
        ones = np.ones(n, bool)
        ones[at] = False
        got = exe.run([ones, ones])
        assert bool(got[0]) == (n > 1) and bool(got[1]) is False
