"""Full reductions of the sizes compiled without the loop vectorizer (4K-32K elements) run
with independent accumulators (compiler/codegen/lane_reduce.py): every kind and dtype,
lengths that leave a rest, NaNs in the lanes and in the rest, several dimensions, and any
[start, end) range of the outer dimension give NumPy's and the interpreter's results."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.codegen import llvm_target
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})


def _module(shape: tuple, dtype: D.DType, kind: str, square: bool = False) -> Module:
    """reduce(kind) over every axis of x (or of x * x: an elementwise producer fused in)."""
    ins = [I("parameter", (), shape, dtype, {"number": 0})]
    if square:
        ins.append(I("multiply", (0, 0), shape, dtype, {}))
    ins.append(I("reduce", (len(ins) - 1,), (), dtype,
                 {"axes": tuple(range(len(shape))), "kind": kind}))
    return Module("full_reduce", ins, [len(ins) - 1])


def _data(shape: tuple, dtype: D.DType, kind: str, rng) -> np.ndarray:
    if dtype.kind == "bool":
        return rng.random(shape) < (0.999 if kind == "and" else 0.001)
    if dtype.is_float:
        base = rng.standard_normal(shape)
        if kind == "prod":              # products of values near 1: no overflow
            base = 1 + base * 1e-3
        return base.astype(dtype.np)
    info = np.iinfo(dtype.np)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype.np)


def _numpy(x: np.ndarray, kind: str, square: bool) -> np.ndarray:
    if square:
        x = x * x
    wide = x.astype(np.float64) if x.dtype.kind == "f" or x.dtype == D.bfloat16.np else x
    fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
          "and": np.all, "or": np.any}[kind]
    out = fn(wide) if wide.dtype.kind == "f" else fn(x)
    return np.asarray(out).astype(x.dtype)


def _uses_lanes(module: Module) -> bool:
    return "lanes.body" in DEVICE.stage(module, "llvm")


def _close(got: np.ndarray, want: np.ndarray, dtype: D.DType, n: int) -> None:
    if dtype.is_float:
        rtol = {2: 1e-2, 4: 1e-5, 8: 1e-12}[dtype.itemsize]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=rtol * np.sqrt(n))
    else:
        np.testing.assert_array_equal(got, want)


CASES = [(d, k) for d in (D.float32, D.float64, D.float16, D.int32, D.int64, D.uint8, D.int8)
         for k in ("sum", "prod", "max", "min")] + [(D.bool_, "and"), (D.bool_, "or")]


@pytest.mark.parametrize("dtype,kind", CASES, ids=[f"{d.name}-{k}" for d, k in CASES])
@pytest.mark.parametrize("shape", [(4096,), (5003,), (70, 101), (9, 31, 17)])
def test_full_reductions_match_numpy_and_the_interpreter(dtype, kind: str, shape: tuple) -> None:
    module = _module(shape, dtype, kind, square=dtype.is_float and kind == "sum")
    n = int(np.prod(shape))
    assert llvm_target.opt_tier(n) == 1          # the tier these accumulators are for
    rng = np.random.default_rng(n)
    x = _data(shape, dtype, kind, rng)
    got = DEVICE.compile(module).run([x])[0]
    want = InterpreterDevice().compile(module).run([x])[0]
    _close(got, want, dtype, n)
    _close(got, _numpy(x, kind, dtype.is_float and kind == "sum"), dtype, n)
    if len(shape) == 1:     # (an inner loop of a static length may be unrolled away)
        assert _uses_lanes(module) == (dtype != D.bool_)


@pytest.mark.parametrize("kind", ["max", "min", "sum"])
@pytest.mark.parametrize("where", [0, 5, 15, 16, 2047, 5001, 5002])
def test_a_nan_anywhere_gives_nan(kind: str, where: int) -> None:
    """In any lane, in the last full block or in the rest after it (5,003 = 312*16 + 11)."""
    module = _module((5003,), D.float32, kind)
    x = np.random.default_rng(where).standard_normal(5003).astype(np.float32)
    x[where] = np.nan
    exe = DEVICE.compile(module)
    assert np.isnan(exe.run([x])[0])
    x[where] = np.inf if kind != "min" else -np.inf
    want = {"max": np.inf, "min": -np.inf, "sum": np.inf}[kind]
    assert exe.run([x])[0] == want


def test_signed_zeros_and_infinities() -> None:
    x = np.zeros(4096, np.float32)
    x[::3] = -0.0
    got = DEVICE.compile(_module((4096,), D.float32, "max")).run([x])[0]
    assert got == 0.0                            # either zero, as NumPy's
    x[100], x[4000] = np.inf, -np.inf
    assert np.isnan(DEVICE.compile(_module((4096,), D.float32, "sum")).run([x])[0])


@pytest.mark.parametrize("shape", [(4099,), (70, 101)])
def test_any_range_of_the_outer_dimension(shape: tuple) -> None:
    """A kernel may be given any [start, end) of its outer dimension (a split over threads
    elsewhere, an ahead-of-time library): the partial covers exactly those rows."""
    module = _module(shape, D.float32, "sum")
    exe = DEVICE.compile(module)
    step = next(s for s in exe.steps if s.kind == "partial")
    assert len(step.args) == 1
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    fn = exe._fns[step.fn]
    part = np.zeros(1, np.dtype(step.roots[0]["acc"]))    # float64: a float32 sum, wide
    outer = shape[0]
    ranges = [(0, outer), (1, outer), (0, 17), (3, 20), (5, 5), (7, 6), (outer - 1, outer)]
    for start, end in ranges:
        part[0] = np.nan
        fn(ctypes.c_void_p(x.ctypes.data), start, end, ctypes.c_void_p(part.ctypes.data))
        want = x[start:end].astype(np.float64).sum() if end > start else 0.0
        np.testing.assert_allclose(part[0], want, rtol=1e-5, atol=1e-4)


def _chain(n: int, ops: list) -> Module:
    """sum(f(x)) with f a chain of unary ops (x*x, x-x*x, ... as given), float32."""
    f32 = D.float32
    ins = [I("parameter", (), (n,), f32, {"number": 0})]
    for op in ops:
        last = len(ins) - 1
        operands = (last,) if op in ("exponential", "negate", "abs") else (last, 0)
        ins.append(I(op, operands, (n,), f32, {}))
    ins.append(I("reduce", (len(ins) - 1,), (), f32, {"axes": (0,), "kind": "sum"}))
    return Module("chain", ins, [len(ins) - 1])


@pytest.mark.parametrize("ops,lanes", [
    (["multiply", "subtract"] * 6, True),             # 12 cheap ops: lanes
    (["multiply", "exponential", "negate"], False),   # a transcendental: one accumulator
    (["add"] * 17, False),                            # past MAX_BODY: one accumulator
])
def test_which_element_code_gets_lanes(ops: list, lanes: bool) -> None:
    module = _chain(6000, ops)
    x = (np.random.default_rng(2).standard_normal(6000) * 0.1).astype(np.float32)
    got = DEVICE.compile(module).run([x])[0]
    want = InterpreterDevice().compile(module).run([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert _uses_lanes(module) == lanes
