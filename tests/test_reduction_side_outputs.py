"""A fused reduction whose kernel also writes values of the reduced shape S ("side
outputs": BatchNorm backward's chain, stored and summed) passes over S once: each element
is computed once, stored and accumulated in the same loop (compiler/codegen/cpu_kernels.py
`_partial_reduction`, `_row_reduction`). Every layout (row, column, full, generic), one or
several side outputs and reductions, float32 and float64, odd sizes, sizes on both sides
of the lane and vectorizer tiers, and any [start, end) chunk of the outer dimension give
the interpreter's results."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})


def _constant(value: float, dtype: D.DType) -> I:
    return I("constant", (), (), dtype, {"value": Literal(np.asarray(value, dtype.np))})


def _broadcast(operand: int, shape: tuple, dtype: D.DType, dims: tuple) -> I:
    return I("broadcast_in_dim", (operand,), shape, dtype,
             {"shape": shape, "broadcast_dimensions": dims})


def _module(shape: tuple, axes: tuple, dtype: D.DType, sides: int, kinds: tuple) -> Module:
    """y = x * x + w (w broadcast along the last axis), z = y * 0.5 - x; outputs: the
    first `sides` of (y, z), reduce(kind, z) over `axes` for each of `kinds`, and
    sum(z) / n (an epilogue)."""
    out = tuple(n for d, n in enumerate(shape) if d not in axes)
    ins = [I("parameter", (), shape, dtype, {"number": 0}),
           I("parameter", (), (shape[-1],), dtype, {"number": 1})]
    ins.append(_broadcast(1, shape, dtype, (len(shape) - 1,)))
    ins.append(I("multiply", (0, 0), shape, dtype, {}))
    ins.append(I("add", (3, 2), shape, dtype, {}))                          # y: 4
    ins.append(_constant(0.5, dtype))
    ins.append(_broadcast(5, shape, dtype, ()))
    ins.append(I("multiply", (4, 6), shape, dtype, {}))
    ins.append(I("subtract", (7, 0), shape, dtype, {}))                     # z: 8
    outputs = [4, 8][:sides]
    for kind in kinds:
        ins.append(I("reduce", (8,), out, dtype, {"axes": axes, "kind": kind}))
        outputs.append(len(ins) - 1)
    n = int(np.prod([shape[a] for a in axes]))
    ins.append(_constant(float(n), dtype))
    ins.append(_broadcast(len(ins) - 1, out, dtype, ()))
    ins.append(I("divide", (outputs[sides], len(ins) - 1), out, dtype, {}))
    outputs.append(len(ins) - 1)
    return Module("side", ins, outputs)


# (shape, axes): column, full (lane tier, vectorized tier, several dimensions), generic, row
LAYOUTS = [((37, 19), (0,)), ((5003,), (0,)), ((70, 101), (0, 1)), ((300, 257), (0, 1)),
           ((6, 5, 7), (0, 2)), ((129, 3, 67), (0,)), ((33, 17), (1,)), ((9, 31, 17), (1, 2))]
CASES = [(s, a, d, n, k) for s, a in LAYOUTS for d in (D.float32, D.float64)
         for n, k in ((1, ("sum",)), (2, ("sum", "max")))]


def _inputs(shape: tuple, dtype: D.DType) -> list:
    rng = np.random.default_rng(int(np.prod(shape)))
    return [rng.standard_normal(shape).astype(dtype.np),
            rng.standard_normal(shape[-1]).astype(dtype.np)]


@pytest.mark.parametrize("shape,axes,dtype,sides,kinds", CASES,
                         ids=[f"{s}-{a}-{d.name}-{n}" for s, a, d, n, _ in CASES])
def test_side_outputs_match_the_interpreter(shape: tuple, axes: tuple, dtype: D.DType,
                                            sides: int, kinds: tuple) -> None:
    module = _module(shape, axes, dtype, sides, kinds)
    args = _inputs(shape, dtype)
    got = DEVICE.compile(module).run(args)
    want = InterpreterDevice().compile(module).run(args)
    rtol = 1e-6 if dtype is D.float32 else 1e-14
    for g, w in zip(got[:sides], want[:sides]):          # elementwise: no reassociation
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
    n = int(np.prod([shape[a] for a in axes]))
    for g, w in zip(got[sides:], want[sides:]):
        np.testing.assert_allclose(g, w, rtol=100 * rtol, atol=100 * rtol * np.sqrt(n))


# sizes below the vectorizer's tier (whose copies of the loop body would blur the count)
@pytest.mark.parametrize("shape,axes", [((37, 19), (0,)), ((6, 5, 7), (0, 2)),
                                        ((129, 3, 67), (0,))])
def test_the_element_code_is_emitted_once(shape: tuple, axes: tuple) -> None:
    """The reduction's function writes both side outputs (its buffers: y, z, x, w) and
    no loop of their own passes over S: the element code's multiplies (x * x, y * 0.5)
    appear once in the generated IR (the epilogue, a loop of its own, divides)."""
    module = _module(shape, axes, D.float32, 2, ("sum",))
    steps = DEVICE.compile(module).steps
    assert [len(s.args) for s in steps if s.kind == "partial"] == [4]
    assert all(s.kind == "partial" or s.extent < shape[0] for s in steps)
    assert DEVICE.stage(module, "llvm").count("fmul") == 2


def test_a_vectorized_full_reduction_stores_as_it_sums() -> None:
    module = _module((300, 257), (0, 1), D.float32, 2, ("sum",))
    steps = DEVICE.compile(module).steps
    assert [len(s.args) for s in steps if s.kind == "partial"] == [4]
    assert [s.kind for s in steps].count("loop") == 1       # the epilogue's divide


@pytest.mark.parametrize("shape,axes", [((37, 19), (0,)), ((300, 257), (0, 1)),
                                        ((6, 5, 7), (0, 2)),
                                        ((129, 3, 67), (0,))])
def test_any_chunk_writes_its_side_outputs_and_partials(shape: tuple, axes: tuple) -> None:
    """Threads each run a [start, end) chunk of the outer dimension: the kernel writes the
    side output there (and nowhere else) and accumulates exactly those elements."""
    module = _module(shape, axes, D.float32, 1, ("sum",))
    exe = DEVICE.compile(module)
    step = next(s for s in exe.steps if s.kind == "partial")
    x, w = _inputs(shape, D.float32)
    y_want = x * x + w
    z_want = (y_want * np.float32(0.5) - x).astype(np.float64)
    fn = exe._fns[step.fn]
    out_shape = tuple(step.roots[0]["shape"])
    outer = shape[0]
    for start, end in [(0, outer), (1, outer), (3, min(20, outer)), (5, 5), (outer - 1, outer)]:
        y = np.full(shape, np.nan, np.float32)
        part = np.zeros(out_shape, np.dtype(step.roots[0]["acc"]))
        ptrs = {"y": y, "x": x, "w": w}
        # the function's buffers: the side output first, then what it reads (_begin)
        order = [ptrs[k] for k in ("y", "x", "w")]
        assert len(step.args) == len(order)
        fn(*[ctypes.c_void_p(a.ctypes.data) for a in order], start, end,
           ctypes.c_void_p(part.ctypes.data))
        np.testing.assert_allclose(y[start:end], y_want[start:end], rtol=1e-6)
        assert np.isnan(y[:start]).all() and np.isnan(y[max(start, end):]).all()
        want = z_want[start:end].sum(axis=tuple(axes))      # (zeros for an empty chunk)
        np.testing.assert_allclose(part.reshape(np.shape(want)), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape,axes", [((5003,), (0,)), ((70, 101), (0, 1)),
                                        ((33, 17), (1,)), ((9, 31, 17), (1, 2))])
def test_a_row_kernel_stores_free_outputs_in_its_first_pass(shape: tuple, axes: tuple) -> None:
    """A ROW kernel (compiler/planning/row_fusion.py) writes the outputs its first pass
    reduces in that pass, and then has no last pass: x * x and y * 0.5 once."""
    module = _module(shape, axes, D.float32, 2, ("sum",))
    steps = DEVICE.compile(module).steps
    assert [s.kind for s in steps] == ["loop"]
    assert DEVICE.stage(module, "llvm").count("fmul") == 2


def _phases(shape: tuple, dtype: D.DType) -> Module:
    """A row kernel of two passes and a last one: m = sum(x), d = x - m (needs pass 0's
    sum; written by pass 1, which reduces d * d into v), d * v (needs v) and q = x * x
    (which no pass reduces): the last pass."""
    rows, n = shape
    ins = [I("parameter", (), shape, dtype, {"number": 0}),
           I("reduce", (0,), (rows,), dtype, {"axes": (1,), "kind": "sum"})]
    ins.append(_broadcast(1, shape, dtype, (0,)))
    ins.append(I("subtract", (0, 2), shape, dtype, {}))                       # d: 3
    ins.append(I("multiply", (3, 3), shape, dtype, {}))
    ins.append(I("reduce", (4,), (rows,), dtype, {"axes": (1,), "kind": "max"}))
    ins.append(_broadcast(5, shape, dtype, (0,)))
    ins.append(I("multiply", (3, 6), shape, dtype, {}))                       # d * v: 7
    ins.append(I("multiply", (0, 0), shape, dtype, {}))                       # q: 8
    return Module("phases", ins, [3, 7, 8, 5])


@pytest.mark.parametrize("dtype", [D.float32, D.float64])
@pytest.mark.parametrize("shape", [(7, 5), (33, 129), (4, 1031)])
def test_outputs_of_a_middle_pass_match_the_interpreter(shape: tuple, dtype: D.DType) -> None:
    module = _phases(shape, dtype)
    assert "kernel row_0 (row)" in DEVICE.stage(module, "fusion")
    x = _inputs(shape, dtype)[0]
    got = DEVICE.compile(module).run([x])
    want = InterpreterDevice().compile(module).run([x])
    rtol = 1e-5 if dtype is D.float32 else 1e-12
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * shape[1])


@pytest.mark.parametrize("dtype", [D.float32, D.float64])
@pytest.mark.parametrize("shape,axis", [((37, 19), 0), ((6, 5, 7), 1)])
def test_an_arg_reduction_down_columns_stores_its_side_output(shape: tuple, axis: int,
                                                              dtype: D.DType) -> None:
    """argmax of y = x * x + w down a column (one pass in memory order) writes y in that
    pass: one function, x * x once."""
    out = tuple(n for d, n in enumerate(shape) if d != axis)
    ins = [I("parameter", (), shape, dtype, {"number": 0}),
           I("parameter", (), (shape[-1],), dtype, {"number": 1}),
           _broadcast(1, shape, dtype, (len(shape) - 1,)),
           I("multiply", (0, 0), shape, dtype, {})]
    ins.append(I("add", (3, 2), shape, dtype, {}))
    ins.append(I("argmax", (4,), out, D.int64, {"axis": axis, "index_dtype": "int64"}))
    module = Module("argside", ins, [4, 5])
    args = _inputs(shape, dtype)
    got = DEVICE.compile(module).run(args)
    want = InterpreterDevice().compile(module).run(args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[1], np.argmax(args[0] * args[0] + args[1], axis=axis))
    assert [s.kind for s in DEVICE.compile(module).steps] == ["partial"]
    assert DEVICE.stage(module, "llvm").count("fmul") == 1
