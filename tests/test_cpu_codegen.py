"""Every primitive compiles on the CPU device, for every dtype it supports, and matches the
interpreter. Cases come from the shared table (tests/primitive_cases.py); to keep LLVM's
work small, the cases of one dtype are merged into a few modules, compiled once each."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

from primitive_cases import CASES, build_module, dtypes_for, make_inputs

BATCH = 48

# (primitive, dtype) pairs whose *reference* is known to disagree with itself
KNOWN_REFERENCE_ISSUES = {
    ("convolution", "bfloat16"):
        "the interpreter returns zeros for bf16 convolution (np.asarray(x, bfloat16) of its "
        "float32 result); the CPU device computes the values",
}

_DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})


def merge(modules: list) -> tuple:
    """One module computing every module's outputs; returns it and each one's output slice."""
    instructions: list = []
    outputs: list = []
    spans = []
    number = 0
    for m in modules:
        base = len(instructions)
        for ins in m.instructions:
            attrs = dict(ins.attrs)
            if ins.op == "parameter":
                attrs["number"] = number + ins.attrs["number"]
            instructions.append(Instruction(ins.op, tuple(o + base for o in ins.operands),
                                            ins.shape, ins.dtype, attrs))
        number += len(m.parameters)
        spans.append((len(outputs), len(outputs) + len(m.outputs)))
        outputs.extend(o + base for o in m.outputs)
    return Module("merged", instructions, outputs), spans


def tolerance(dtype: np.dtype) -> float:
    if dtype == D.bfloat16.np:
        return 2e-2
    if dtype.kind == "c":           # per part: complex64 is two float32s
        return {8: 2e-5, 16: 1e-12}[dtype.itemsize]
    return {2: 2e-3, 4: 2e-5, 8: 1e-12}.get(dtype.itemsize, 0)


def assert_matches(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, \
        f"{what}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    if want.dtype.kind in "fc" or want.dtype == D.bfloat16.np:
        tol = tolerance(want.dtype)
        wide = np.complex128 if want.dtype.kind == "c" else np.float64
        ok = np.allclose(got.astype(wide), want.astype(wide), rtol=tol, atol=tol,
                         equal_nan=True)
        assert ok, f"{what}: got {got.ravel()[:6]}, want {want.ravel()[:6]}"
    else:
        assert np.array_equal(got, want), f"{what}: got {got.ravel()[:6]}, want {want.ravel()[:6]}"


def batches(dtype: D.DType) -> list:
    cases = [c for c in CASES if dtype in dtypes_for(c)
             and (c.prim, dtype.name) not in KNOWN_REFERENCE_ISSUES]
    return [cases[k:k + BATCH] for k in range(0, len(cases), BATCH)]


PARAMS = [(d, k) for d in D.EVERY for k in range(len(batches(d)))]


@pytest.mark.parametrize("dtype,batch", PARAMS, ids=[f"{d.name}-{k}" for d, k in PARAMS])
def test_primitives_match_interpreter(dtype: D.DType, batch: int) -> None:
    cases = batches(dtype)[batch]
    module, spans = merge([build_module(c, dtype) for c in cases])
    args = [a for c in cases for a in make_inputs(c, dtype, seed=1)]
    want = InterpreterDevice().compile(module).run(args)
    got = _DEVICE.compile(module).run(args)
    for case, (lo, hi) in zip(cases, spans):
        for k in range(lo, hi):
            assert_matches(np.asarray(got[k]), np.asarray(want[k]), f"{case.id} {dtype.name}")


def test_every_primitive_with_a_case_is_covered() -> None:
    covered = {c.prim for d in D.EVERY for b in batches(d) for c in b}
    assert covered == {c.prim for c in CASES}


def test_integer_division_by_zero_and_overflow_are_defined() -> None:
    from lazyarray.compiler.hlo.module import Instruction as I
    for dt in (D.int8, D.int32, D.int64, D.uint16):
        info = np.iinfo(dt.np)
        a = np.array([7, -7 if dt.kind == "int" else 7, info.min, info.min, 5], dt.np)
        b = np.array([0, 2, -1 if dt.kind == "int" else 1, 0, 3], dt.np)
        for op in ("divide", "remainder"):
            m = Module("div", [I("parameter", (), (5,), dt, {"number": 0}),
                               I("parameter", (), (5,), dt, {"number": 1}),
                               I(op, (0, 1), (5,), dt, {})], [2])
            want = InterpreterDevice().compile(m).run([a, b])[0]
            got = _DEVICE.compile(m).run([a, b])[0]
            assert np.array_equal(got, want), (op, dt.name, got, want)


def test_math_table_rejects_what_it_cannot_lower() -> None:
    from lazyarray.compiler.codegen.math_table import MathTable
    with pytest.raises(ValueError, match="no generic lowering"):
        MathTable().emit(None, "exponential", [], D.float32)


def test_float_reductions_reassociate_and_loops_vectorize() -> None:
    from lazyarray.compiler.hlo.module import Instruction as I
    n = 4096
    m = Module("vec", [I("parameter", (), (64, n), D.float32, {"number": 0}),
                       I("reduce", (0,), (64,), D.float32, {"axes": (1,), "kind": "sum"})], [1])
    text = _DEVICE.stage(m, "llvm")
    assert "<8 x float>" in text or "<16 x float>" in text, "the row sum did not vectorize"


@pytest.mark.parametrize("op,ref,rtol", [
    ("exponential", np.exp, 3e-7), ("tanh", np.tanh, 3e-7), ("erf", None, 1e-6),
    ("logistic", lambda v: 1 / (1 + np.exp(-v)), 3e-7)])
def test_float32_polynomial_math_over_the_whole_range(op: str, ref, rtol: float) -> None:
    import math
    x = np.concatenate([np.linspace(-110, 100, 100001, dtype=np.float32),
                        np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 0.5, 0.625])])
    from lazyarray.compiler.hlo.module import Instruction as I
    m = Module("poly", [I("parameter", (), x.shape, D.float32, {"number": 0}),
                        I(op, (0,), x.shape, D.float32, {})], [1])
    got = _DEVICE.compile(m).run([x])[0].astype(np.float64)
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        want = np.array([math.erf(v) for v in wide]) if ref is None else ref(wide)
        want32 = want.astype(np.float32).astype(np.float64)      # what float32 can hold
    normal = np.isfinite(want32) & (np.abs(want32) > 1e-37)
    np.testing.assert_allclose(got[normal], want[normal], rtol=rtol, atol=0)
    rest = ~normal
    np.testing.assert_allclose(got[rest], want32[rest], atol=1e-38)    # inf, nan, 0, tiny


def test_float32_polynomial_log_over_the_whole_range() -> None:
    """log as polynomial code (vectorizes; libm was one call per element): within 3 ulps
    of log in float64 from the smallest subnormal to the largest float, around 1 and
    sqrt(1/2) (where the mantissa's range turns), libm's values at 0, -0, inf, and NaN
    for NaN and negative numbers."""
    from lazyarray.compiler.hlo.module import Instruction as I
    rng = np.random.default_rng(5)
    x = np.concatenate([np.exp(rng.uniform(-103, 88.7, 200000)).astype(np.float32),
                        np.float32(1) + rng.uniform(-1e-3, 1e-3, 20000).astype(np.float32),
                        np.float32(0.70710677) * (1 + rng.uniform(-1e-4, 1e-4, 20000)).astype(np.float32),
                        np.float32([1e-45, 1e-40, 1.1754942e-38, 1.1754944e-38, 3.4028235e38, 1.0])])
    special = np.float32([0.0, -0.0, np.inf, np.nan, -1.0, -np.inf, -1e-40])
    x = np.concatenate([x, special])
    m = Module("log", [I("parameter", (), x.shape, D.float32, {"number": 0}),
                       I("log", (0,), x.shape, D.float32, {})], [1])
    got = _DEVICE.compile(m).run([x])[0]
    n = len(x) - len(special)
    want = np.log(x[:n].astype(np.float64))
    ulps = np.abs(got[:n] - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 3, (x[:n][ulps.argmax()], got[:n][ulps.argmax()], want[ulps.argmax()])
    tail = got[n:]
    assert list(tail[:3]) == [-np.inf, -np.inf, np.inf] and np.isnan(tail[3:]).all()
    big = Module("logv", [I("parameter", (), (1 << 16,), D.float32, {"number": 0}),
                          I("log", (0,), (1 << 16,), D.float32, {})], [1])
    text = _DEVICE.stage(big, "llvm")
    assert "llvm.log" not in text and ("<8 x float>" in text or "<16 x float>" in text)


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_float_extremum_reductions_propagate_nan_from_any_position(dtype, kind) -> None:
    """A float max/min keeps its extremum and a NaN flag in separate registers
    (compiler/codegen/register_reduce.py): a NaN in any lane, first or last, alone or
    beside infinities, gives NaN; rows without one give NumPy's value. Rows (the last
    axis), full reductions (one chunk per thread) and columns (partials in memory)."""
    from lazyarray.compiler.hlo.module import Instruction as I
    rows, n = 12, 1037                  # not a multiple of the vector width: a scalar tail
    x = np.random.default_rng(3).standard_normal((rows, n)).astype(dtype.np)
    x[1, 0] = x[2, n - 1] = x[3, 517] = np.nan
    x[4, :] = np.nan
    x[5, 3], x[5, 9] = np.inf, -np.inf
    x[6, 7], x[6, 8] = np.inf, np.nan
    x[7, :] = 0.0
    x[7, 100] = -0.0
    x[8, :] = -np.inf
    ref = {"max": np.max, "min": np.min}[kind]
    for axes, out_shape in (((1,), (rows,)), ((0, 1), ()), ((0,), (n,))):
        m = Module("ext", [I("parameter", (), x.shape, dtype, {"number": 0}),
                           I("reduce", (0,), out_shape, dtype, {"axes": axes, "kind": kind})],
                   [1])
        got = _DEVICE.compile(m).run([x])[0]
        want = ref(x, axis=axes)
        np.testing.assert_array_equal(got, want, err_msg=f"{kind} over axes {axes}")
    big = np.zeros(1 << 20, dtype.np)                       # split over threads
    for at in (0, 12345, (1 << 20) - 1):
        big[:] = 1.0
        big[at] = np.nan
        m = Module("ext", [I("parameter", (), big.shape, dtype, {"number": 0}),
                           I("reduce", (0,), (), dtype, {"axes": (0,), "kind": kind})], [1])
        assert np.isnan(_DEVICE.compile(m).run([big])[0]), f"NaN at {at} lost"


def _concat_module(widths: tuple, rows: int, tail: str, dtype: D.DType = D.float32) -> Module:
    """parameters (rows, w) for each width, concatenated along the last dimension, then
    `tail`: "scale" (times a parameter row, elementwise), "colsum" (summed over rows, the
    bias gradient of a fused qkv projection) or "both" (two outputs of one kernel)."""
    from lazyarray.compiler.hlo.module import Instruction as I
    ins = [I("parameter", (), (rows, w), dtype, {"number": k}) for k, w in enumerate(widths)]
    n = sum(widths)
    cat = len(ins)
    ins.append(I("concatenate", tuple(range(cat)), (rows, n), dtype, {"dimension": 1}))
    outs = []
    if tail in ("scale", "both"):
        ins.append(I("parameter", (), (n,), dtype, {"number": len(widths)}))
        ins.append(I("broadcast_in_dim", (len(ins) - 1,), (rows, n), dtype,
                     {"shape": (rows, n), "broadcast_dimensions": (1,)}))
        ins.append(I("multiply", (cat, len(ins) - 1), (rows, n), dtype, {}))
        outs.append(len(ins) - 1)
    if tail in ("colsum", "both"):
        ins.append(I("reduce", (cat,), (n,), dtype, {"axes": (0,), "kind": "sum"}))
        outs.append(len(ins) - 1)
    return Module("concat", ins, outs)


@pytest.mark.parametrize("widths,rows,tail", [
    ((256, 256, 256), 96, "colsum"), ((256, 256, 256), 96, "scale"), ((64, 40, 72), 33, "both"),
    ((8, 0, 24, 9), 70, "both"), ((3, 5, 64), 40, "scale"), ((17,) * 9, 20, "both"),
    ((40, 24), 1, "scale"), ((100, 100), 2, "colsum")])
def test_concatenate_along_the_loops_innermost_dimension_matches_interpreter(
        widths: tuple, rows: int, tail: str) -> None:
    """The innermost loop split at the operands' boundaries (cpu_kernels.innermost_cuts)
    gives the interpreter's values bit for bit, for pieces narrower than a vector, empty
    operands, more operands than the split takes, and a single row (no split there)."""
    for dtype in (D.float32, D.int32):
        m = _concat_module(widths, rows, tail, dtype)
        rng = np.random.default_rng(len(widths) + rows)
        # small integers: every float32 sum is exact, so any order of summing is bit-equal
        args = [rng.integers(-100, 100, m.instructions[p].shape).astype(dtype.np)
                for p in m.parameters]
        want = InterpreterDevice().compile(m).run(args)
        got = _DEVICE.compile(m).run(args)
        for g, w in zip(got, want):
            assert np.array_equal(np.asarray(g), np.asarray(w)), f"{widths} {tail} {dtype}"


def test_concatenate_along_the_innermost_dimension_vectorizes() -> None:
    """A concatenate along the last dimension read by the innermost loop: each operand's
    piece is a plain loop of vector loads, not a clamp-and-select chain per element (the
    select chain made the qkv projection's bias gradient 4x slower, 2.4 -> 0.6 ms)."""
    text = _DEVICE.stage(_concat_module((256, 256, 256), 96, "scale"), "llvm")
    assert "<8 x float>" in text or "<16 x float>" in text, "the pieces did not vectorize"
    assert " select " not in text.split("define", 1)[1], "a per-element select remains"


def _pad_module(shape: tuple, low: tuple, high: tuple, interior: tuple,
                dtype: D.DType = D.float32, op: str = "maximum") -> Module:
    """op(x, 0) padded with zeros (the padding of a convolution's input or output
    gradient, fused with its producer)."""
    from lazyarray.compiler.hlo.literal import Literal
    from lazyarray.compiler.hlo.module import Instruction as I
    out = tuple(n + lo + hi + max(n - 1, 0) * it for n, lo, hi, it in
                zip(shape, low, high, interior))
    ins = [I("parameter", (), shape, dtype, {"number": 0}),
           I("constant", (), (), dtype, {"value": Literal(np.zeros((), dtype.np))}),
           I("broadcast_in_dim", (1,), shape, dtype, {"shape": shape,
                                                      "broadcast_dimensions": ()}),
           I(op, (0, 2), shape, dtype, {}),
           I("pad", (3, 1), out, dtype, {"edge_padding_low": low, "edge_padding_high": high,
                                         "interior_padding": interior})]
    return Module("pad", ins, [4])


@pytest.mark.parametrize("shape,low,high,interior", [
    ((4, 3, 16, 16), (0, 0, 1, 1), (0, 0, 1, 1), (0, 0, 0, 0)),      # a 3x3 convolution's
    ((2, 5, 7, 5), (0, 0, 1, 2), (0, 0, 2, 3), (0, 0, 0, 0)),        # rows under a vector
    ((3, 40), (1, 0), (0, 37), (0, 0)),                              # the right edge only
    ((3, 40), (0, 9), (2, 0), (0, 0)),                               # the left edge only
    ((3, 40), (0, -3), (0, 5), (0, 0)),                              # a crop: no split
    ((3, 9, 10), (0, 1, 1), (0, 0, 1), (0, 0, 1)),                   # holes: no split
    ((1, 1, 1, 1), (0, 0, 2, 2), (0, 0, 2, 2), (0, 0, 0, 0)),
    ((6, 8), (1, 0), (1, 0), (0, 0))])                               # the rows only
def test_pad_along_the_loops_innermost_dimension_matches_interpreter(
        shape: tuple, low: tuple, high: tuple, interior: tuple) -> None:
    """The innermost loop split where x starts and ends (index_rules.pad_pieces): the fill
    in the padding, x read plainly between, the interpreter's values bit for bit."""
    for dtype in (D.float32, D.int32):
        m = _pad_module(shape, low, high, interior, dtype)
        args = [np.random.default_rng(7).integers(-9, 9, shape).astype(dtype.np)]
        want = InterpreterDevice().compile(m).run(args)
        got = _DEVICE.compile(m).run(args)
        assert np.array_equal(np.asarray(got[0]), np.asarray(want[0])), (shape, dtype)


def test_pad_along_the_innermost_dimension_vectorizes() -> None:
    """Rows padded at both ends: the piece inside x is a loop of vector loads and stores,
    with no clamp or select per element (a clamped, selected read per element kept the
    pads of the CNN's convolution gradients scalar)."""
    text = _DEVICE.stage(_pad_module((64, 128), (0, 1), (0, 1), (0, 0), op="add"), "llvm")
    body = text.split("define", 1)[1]      # x + 0: x padded, each row x's row copied
    assert any(s in body for s in ("<8 x float>", "<16 x float>", "memcpy")), \
        "the piece did not vectorize"
    assert " select " not in body, "a per-element select remains"
