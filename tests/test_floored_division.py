"""Floored division and remainder (`//`, `%`, `floor_divide`, `remainder`): the primitives
`floor_divide` and `floor_mod`, one node each, against NumPy itself on edge tables and
many random values (every dtype they take, signs of zero included), the compiled code
against the interpreter, their fusion, and their PTX."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.codegen import nvptx, ptxas
from lazyarray.compiler.passes.pipeline import compile_plan
from lazyarray.compiler.graph.trace import capture
from ptx_marks import needs_libdevice, needs_ptxas

OPS = {"floor_divide": np.floor_divide, "remainder": np.remainder}
PRIMS = {"floor_divide": "floor_divide", "remainder": "floor_mod"}


def _numpy(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy's answer; bfloat16 (which NumPy lacks) in float32 rounded once, as NumPy's
    half loops compute float16."""
    with np.errstate(all="ignore"):
        if a.dtype == D.bfloat16.np:
            wide = OPS[op](a.astype(np.float32), b.astype(np.float32))
            return wide.astype(a.dtype)
        return OPS[op](a, b)


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal values, NaN for NaN, and for floats equal signs (of zeros too; a NaN's sign
    is not specified)."""
    assert got.dtype == want.dtype, what
    if want.dtype.kind in "iu":
        bad = got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        bad = ((g != w) | (np.signbit(g) != np.signbit(w))) & ~both_nan
    if np.any(bad):
        idx = np.argwhere(bad)[:5].ravel()
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ from NumPy, e.g. "
                             + ", ".join(f"got {got[i]!r} want {want[i]!r}" for i in idx))


def _float_edges(dtype: D.DType) -> np.ndarray:
    info = np.finfo(np.float32 if dtype is D.bfloat16 else dtype.np)
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.1, -0.1, 2.0, -2.0, 3.0, -3.0, 7.0, -7.0,
            3.5, -2.25, 1e-3, 1e3, float(info.tiny), -float(info.tiny), float(info.max),
            -float(info.max), np.inf, -np.inf, np.nan]
    if dtype in (D.float32, D.float64):
        vals += [float(info.tiny) / 4, 1e30, -1e-30, 2.0 ** 60, 6.0 ** 20, 1e300 if
                 dtype is D.float64 else 3e38]
    with np.errstate(over="ignore"):
        return np.array(vals, np.float64).astype(dtype.np)


def _int_edges(dtype: D.DType) -> np.ndarray:
    info = np.iinfo(dtype.np)
    vals = {0, 1, 2, 3, 7, 100, info.max, info.max - 1, info.min, info.min + 1}
    if dtype.kind == "int":
        vals |= {-1, -2, -3, -7, -100}
    return np.array(sorted(v for v in vals if info.min <= v <= info.max), dtype.np)


def _pairs(values: np.ndarray) -> tuple:
    a, b = zip(*itertools.product(values, values))
    return np.array(a, values.dtype), np.array(b, values.dtype)


def _random(dtype: D.DType, n: int, seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    if dtype.is_float:
        # magnitudes over many decades: large quotients, tiny remainders, exact multiples
        a = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 6, n)
        b = rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)
        b[::17] = np.round(b[::17]) + 1.0
        a[::13] = b[::13] * rng.integers(-9, 9, a[::13].shape)
        with np.errstate(over="ignore"):
            return a.astype(dtype.np), b.astype(dtype.np)
    info = np.iinfo(dtype.np)
    a = rng.integers(info.min, info.max, n, dtype=dtype.np, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dtype.np, endpoint=True)
    small = rng.integers(-9 if dtype.kind == "int" else 0, 10, n).astype(dtype.np)
    b[::2] = small[::2]                              # small divisors, zero among them
    return a, b


DTYPES = list(D.NUMERIC)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.name)
def test_edge_tables_and_random_values_match_numpy(dtype, device):
    """Every pair of edge values (zeros of both signs, infinities, NaN, extremes, the
    integer MIN // -1 and x // 0) and 4,096 random pairs, both ops, against NumPy."""
    edges = _float_edges(dtype) if dtype.is_float else _int_edges(dtype)
    ea, eb = _pairs(edges)
    ra, rb = _random(dtype, 4096, seed=dtype.bits)
    a, b = np.concatenate([ea, ra]), np.concatenate([eb, rb])
    x, y = la.asarray(a), la.asarray(b)
    got = {op: getattr(la, op)(x, y) for op in OPS}
    for op, t in got.items():
        assert t._node.op == PRIMS[op]
        _same(t.numpy(), _numpy(op, a, b), f"{op} {dtype.name} on {device}")


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16, D.int32, D.int8,
                                   D.uint16, D.int64], ids=lambda d: d.name)
def test_scalar_operands_on_either_side_match_numpy(dtype, device):
    """x // s, s // x, x % s, s % x with Python and NumPy scalars, as NumPy 2 promotes
    them (a Python scalar is weak)."""
    rng = np.random.default_rng(1)
    if dtype.is_float:
        a = np.concatenate([rng.standard_normal(64) * 9, [0.0, -0.0, np.inf, -np.inf, np.nan]])
        scalars = [2, -3, 2.5, -0.75, np.float32(1.5), np.float64(-2.0)]
    else:
        lo = -50 if dtype.kind == "int" else 0
        a = np.concatenate([rng.integers(lo, 50, 64), [0, 1, 7]])
        scalars = [3, 7, 0, np.int8(3)] + ([-3, -1] if dtype.kind == "int" else [])
    a = a.astype(dtype.np)
    x = la.asarray(a)
    for s in scalars:
        for op, fn in OPS.items():
            for got, want in [(getattr(la, op)(x, s), _numpy_scalar(fn, a, s, False)),
                              (getattr(la, op)(s, x), _numpy_scalar(fn, a, s, True))]:
                _same(got.numpy(), want, f"{op} {dtype.name} with {s!r} on {device}")


def _numpy_scalar(fn, a: np.ndarray, s, reflected: bool) -> np.ndarray:
    if type(s) is np.float64:      # a float subclass: weak, as a Python float (lazyarray's rule)
        s = float(s)
    with np.errstate(all="ignore"):
        return np.asarray(fn(s, a) if reflected else fn(a, s))


def test_operators_record_one_node():
    """x // 2, x % 2, i // 3, x // y, and their reflected and in-place forms: one
    floor_divide or floor_mod node over the operands (the scalar a weak 0-d value,
    broadcast), as `x * 2.5` records."""
    x = la.asarray(np.arange(8, dtype=np.float32))
    y = la.asarray(np.arange(1, 9, dtype=np.float32))
    i = la.asarray(np.arange(8, dtype=np.int32))
    for t, prim in [(x // 2, "floor_divide"), (x % 2, "floor_mod"), (i // 3, "floor_divide"),
                    (i % 3, "floor_mod"), (x // y, "floor_divide"), (x % y, "floor_mod"),
                    (2.5 // x, "floor_divide"), (7 % i, "floor_mod"),
                    (la.floor_divide(x, 2), "floor_divide"), (la.remainder(i, -3), "floor_mod")]:
        node = t._node
        assert node.op == prim
        assert [o.op for o in node.operands].count("broadcast_in_dim") <= 1
        leaves = {id(o) for o in node.operands}
        assert leaves & {id(x._node), id(y._node), id(i._node)}
    z = la.asarray(np.arange(8, dtype=np.float32))
    z //= 3
    assert z._node.op == "floor_divide"
    np.testing.assert_array_equal(z.numpy(), np.arange(8, dtype=np.float32) // 3)


def test_bool_and_complex_operands_are_refused_at_the_call():
    b = la.asarray(np.array([True, False]))
    c = la.asarray(np.array([1 + 1j, 2j], np.complex64))
    for op in (la.floor_divide, la.remainder):
        with pytest.raises(TypeError, match="bool"):
            op(b, b)
        with pytest.raises(TypeError, match=f"{op.__name__}: not defined for complex"):
            op(c, c)
        with pytest.raises(TypeError, match=f"{op.__name__}: not defined for complex"):
            op(c, 2)
    # bool beside a float promotes to the default float, as NumPy's weak scalar does
    np.testing.assert_array_equal((b // 2.0).numpy(), np.array([True, False]) // 2.0)


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.float16, D.bfloat16, D.int32,
                                   D.int8, D.uint32, D.int64], ids=lambda d: d.name)
def test_compiled_code_matches_the_interpreter(dtype):
    """The reference interpreter and the CPU code agree bit for bit (signs of zero and
    NaNs included), inside a fused expression too."""
    edges = _float_edges(dtype) if dtype.is_float else _int_edges(dtype)
    ea, eb = _pairs(edges)
    ra, rb = _random(dtype, 2048, seed=5)
    a, b = np.concatenate([ea, ra]), np.concatenate([eb, rb])
    results = {}
    for dev in ("interpreter", "cpu"):
        x, y = la.asarray(a, device=dev), la.asarray(b, device=dev)
        outs = [x // y, x % y, (x // y) * y + x % y]
        results[dev] = [t.numpy() for t in outs]
    for k, (g, w) in enumerate(zip(results["cpu"], results["interpreter"])):
        _same(g, w, f"result {k}, {dtype.name}: cpu against the interpreter")


def test_floored_division_fuses_with_its_neighbours():
    """// and % fuse like the other elementwise ops: one kernel for a chain around them,
    one for a reduction of them, and the results are NumPy's."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((64, 33)).astype(np.float32) * 10
    b = rng.uniform(0.5, 3.0, (64, 33)).astype(np.float32)
    x, y = la.asarray(a), la.asarray(b)
    chain = (x * 2.0 + 1.0) // y + (x % 3.0) * y
    total = ((x // 2.0) + x % y).sum(axis=1)
    for t, kinds in [(chain, ["loop"]), (total, ["reduction", "row"])]:
        plan = compile_plan(capture([t._node]).module("m"))
        assert len(plan.kernels) == 1 and plan.kernels[0].kind in kinds, \
            [(k.kind, k.name) for k in plan.kernels]
        ops = {plan.module.instructions[p].op for p in plan.kernels[0].members}
        assert {"floor_divide", "floor_mod"} & ops
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(chain.numpy(), (a * 2 + 1) // b + (a % 3) * b, rtol=1e-6)
        np.testing.assert_allclose(total.numpy(), ((a // 2) + a % b).sum(axis=1), rtol=1e-5,
                                   atol=1e-4)


def test_gradients_are_zero_and_one_minus_the_floored_quotient():
    """d(a // b) = 0; d(a % b) = (1, -(a // b)) (finite differences: tests/test_gradients
    through the op table and the primitive table)."""
    a = np.array([7.5, -7.5, 3.25, -0.5])
    b = np.array([2.0, 2.0, -1.5, 0.75])
    x, y = la.asarray(a), la.asarray(b)
    with la.GradientTape() as tape:
        tape.watch([x, y])
        loss = la.sum(x // y) + la.sum((x % y) * la.asarray([1.0, 2.0, 3.0, 4.0]))
    gx, gy = tape.gradient(loss, [x, y])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(gx.numpy(), w)
    np.testing.assert_array_equal(gy.numpy(), -w * np.floor_divide(a, b))




@needs_ptxas
@needs_libdevice
def test_ptx_of_every_dtype_assembles():
    """One PTX module with // and % of every numeric dtype (a fused chain each), accepted
    by ptxas for sm_80 and sm_90; floats take libdevice's exact fmod, not NVPTX's frem."""
    mod = nvptx.new_module("floored")
    for k, dtype in enumerate(DTYPES):
        x = la.asarray(np.ones((5, 7), dtype.np))
        y = la.asarray(np.full((5, 7), 3, dtype.np))
        plan = compile_plan(capture([((x // y) + (x % y))._node, (x % 3)._node]).module(f"m{k}"))
        nvptx.emit_kernels(mod, plan, f"k{k}_")
    text = str(mod)
    assert "frem " not in text and '@"__nv_fmodf"(' in text and '@"__nv_fmod"(' in text
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    ptxas.check(ptx, ("sm_80", "sm_90"), "floored")
