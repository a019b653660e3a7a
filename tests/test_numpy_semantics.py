"""Results as NumPy gives them, compared with NumPy itself (not only with our interpreter):
the special-value grid bit for bit, float floor division and remainder, signed zeros,
low-precision statistics, advanced-indexing axis placement.

Documented differences (the only ones the grid allows):
- a NaN is compared as a NaN: its sign bit and payload are not part of any standard and
  differ between NumPy's loops too;
- finite, nonzero results of functions computed by a math library (exp, sin, tanh,
  hypot, logaddexp, ...) may differ by rounding (a few ulps): ours is not NumPy's libm.
  Wherever NumPy's result (or ours) is NaN, an infinity or a zero, the results are the
  same bit for bit (sign of zero included).
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la

GRID = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.1, -0.1, 2.0, -2.5,
        3.0, -4.0, 7.5, 100.0, 1e30, -1e30, 1e-40, -1e-40]
FLOATS = [np.float16, np.float32, np.float64]

BINARY = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
          "divide": np.divide, "maximum": np.maximum, "minimum": np.minimum,
          "floor_divide": np.floor_divide, "remainder": np.remainder, "pow": np.power,
          "atan2": np.arctan2, "copysign": np.copysign, "hypot": np.hypot,
          "logaddexp": np.logaddexp}
UNARY = {"negative": np.negative, "abs": np.abs, "sign": np.sign, "square": np.square,
         "sqrt": np.sqrt, "exp": np.exp, "expm1": np.expm1, "log": np.log,
         "log1p": np.log1p, "tanh": np.tanh, "sin": np.sin, "cos": np.cos,
         "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.round,
         "reciprocal": np.reciprocal, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh}
# exact operations: every result bit for bit, not only the special ones
EXACT = {"add", "subtract", "multiply", "divide", "maximum", "minimum", "floor_divide",
         "remainder", "copysign", "negative", "abs", "sign", "square", "sqrt", "floor",
         "ceil", "trunc", "round", "reciprocal"}
ULPS = {np.float16: 2, np.float32: 4, np.float64: 4}


def _special(v: np.ndarray) -> np.ndarray:
    return np.isnan(v) | np.isinf(v) | (v == 0)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in units in the last place (finite values of one dtype)."""
    bits = {2: np.int16, 4: np.int32, 8: np.int64}[a.dtype.itemsize]
    ia, ib = a.view(bits).astype(np.int64), b.view(bits).astype(np.int64)
    # map to a monotonic integer line: negative floats count down from zero
    top = np.int64(1) << (8 * a.dtype.itemsize - 1)
    ia = np.where(ia < 0, -(ia + top), ia)
    ib = np.where(ib < 0, -(ib + top), ib)
    return np.abs(ia - ib)


def _check(name: str, got: np.ndarray, want: np.ndarray, inputs: list, exact: bool) -> None:
    want = want.astype(got.dtype)
    both_nan = np.isnan(got) & np.isnan(want)
    same_bits = (got == want) & (np.signbit(got) == np.signbit(want))
    ok = both_nan | same_bits
    strict = _special(want) | _special(got)
    if not exact:
        near = ~strict & np.isfinite(got) & np.isfinite(want) & \
            (_ulps(got, want) <= ULPS[got.dtype.type])
        ok |= near
    if not ok.all():
        bad = np.argwhere(~ok)[:6]
        rows = [(tuple(float(i[tuple(k)]) for i in inputs), float(got[tuple(k)]),
                 float(want[tuple(k)])) for k in bad]
        pytest.fail(f"{name} {got.dtype}: {int((~ok).sum())} results differ from NumPy "
                    f"(inputs, ours, NumPy): {rows}")


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_special_value_grid(name, dtype, device):
    with np.errstate(over="ignore"):          # 1e30 is inf in float16
        v = np.array(GRID, dtype)
    a, b = np.meshgrid(v, v)
    with np.errstate(all="ignore"):
        want = BINARY[name](a, b)
    got = getattr(la, name)(la.asarray(a), la.asarray(b)).numpy()
    _check(name, got, want, [a, b], name in EXACT)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_special_value_grid(name, dtype, device):
    with np.errstate(over="ignore"):
        v = np.array(GRID, dtype)
    with np.errstate(all="ignore"):
        want = UNARY[name](v)
    got = getattr(la, name)(la.asarray(v)).numpy()
    _check(name, got, want, [v], name in EXACT)


def test_float_floor_divide_and_remainder_are_python_s(device):
    assert la.floor_divide(la.asarray(1.0), 0.1).item() == 1.0 // 0.1 == 9.0
    assert (la.asarray(-7.5) // 2.0).item() == -7.5 // 2.0
    assert (la.asarray(7.5) % -2.0).item() == 7.5 % -2.0
    r = (la.asarray(-4.0) % 2.0).numpy()
    assert r == 0.0 and not np.signbit(r)                       # NumPy, Python: +0.0
    r = (la.asarray(4.0) % -2.0).numpy()
    assert r == 0.0 and np.signbit(r)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_low_precision_statistics_accumulate_in_float32(dtype, device):
    x = np.full(100_000, 300.0, np.float32)
    x[::2] = 200.0
    t = la.asarray(x).astype(dtype)
    for name, want in (("mean", 250.0), ("var", 2500.0), ("std", 50.0)):
        got = getattr(t, name)()
        assert got.dtype == t.dtype
        assert np.isclose(float(got.numpy().astype(np.float32)), want, rtol=1e-2), name
    assert np.isclose(float(t.mean(axis=0).numpy().astype(np.float32)), 250.0, rtol=1e-2)


@pytest.mark.parametrize("key", [
    (slice(None), np.array([0, 1]), Ellipsis, np.array([0, 1])),
    (slice(None), np.array([0, 1]), Ellipsis, 0),
    (slice(None), 0, Ellipsis, np.array([2, 1])),
    (slice(None), np.array([0, 1]), None, np.array([0, 1])),
    (np.array([0, 1]), Ellipsis, np.array([0, 1])),
    (slice(None), np.array([0, 1]), np.array([1, 2])),
    (Ellipsis, np.array([0, 1]), np.array([0, 2])),
    (0, Ellipsis, np.array([1, 0])),
], ids=str)
@pytest.mark.parametrize("rank", [3, 4])
def test_advanced_index_axes_placed_as_numpy(key, rank, device):
    """An ellipsis between advanced indices moves their dims first, even when it
    expands to no dims."""
    x = np.arange(3 ** rank, dtype=np.float32).reshape((3,) * rank)
    np.testing.assert_array_equal(la.asarray(x)[key].numpy(), x[key])


# float64 values whose conversion to a half float rounds differently when it goes through
# float32 first (round to nearest twice): just above a halfway point, and its negative
HALFWAY = [1 + 2 ** -11 + 2 ** -30, -(1 + 2 ** -11 + 2 ** -30), 1 + 2 ** -8 + 2 ** -40,
           2 ** -24 * 0.5 + 2 ** -60, 65520.0 - 2 ** -20, 1e300, 1e-50, -1e-50]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_float64_to_half_rounds_once_as_numpy(dtype, device):
    """float16 as NumPy (one rounding); bfloat16 as ml_dtypes (through float32)."""
    import ml_dtypes
    a = np.array(HALFWAY + GRID, np.float64)
    with np.errstate(over="ignore"):
        want = a.astype(np.float16 if dtype == "float16" else ml_dtypes.bfloat16)
    got = la.asarray(a, device=device).astype(getattr(la, dtype)).numpy()
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got.astype(np.float32))
                                                            & np.isnan(want.astype(np.float32)))
    assert same.all(), (a[~same], got[~same], want[~same])


@pytest.mark.parametrize("make, want", [
    (lambda: la.mean(la.ones((16384, 16384))), 1.0),              # was 0.984375
    (lambda: la.sum(la.ones((4, 2 ** 25)), axis=1)[0], 2.0 ** 25),
    (lambda: la.var(la.full((16,), 1e20)), 0.0),                   # was 3.1e26
    (lambda: la.std(la.full((3, 16), 1e20), axis=1)[1], 0.0),
    (lambda: la.mean(la.full((16,), 1e20)), float(np.float32(1e20))),
], ids=["mean-of-2**28-ones", "row-sums-of-2**25-ones", "var-of-equal-1e20",
        "row-std-of-equal-1e20", "mean-of-equal-1e20"])
def test_float32_sums_are_exact_where_numpys_pairwise_sum_is(make, want, device):
    """A float32 sum carried in float32 through 2**28 elements stopped growing, and one of
    sixteen 1e20 rounded at every step: full reductions and rows outside the vectorized
    in-cache tier accumulate in float64 (the loads stay float32). (The interpreter, being
    NumPy, would hold the large cases' ones in memory: compiled devices only for them.)"""
    if device == "interpreter" and "ones" in make.__code__.co_names:
        pytest.skip(reason="NumPy itself: the 2**28 ones would be 1 GiB in memory")
    got = make()
    assert got.dtype == la.float32
    assert float(got.numpy()) == want


# a NumPy integer where an op takes an axis, a count or an offset is the int it holds, as
# NumPy takes it (an axis from np.argmax, a shape entry): never lifted into a tensor
NUMPY_INT_AXES = [
    ("sum axis", lambda m, x: m.sum(x, axis=np.int64(1))),
    ("sum positional", lambda m, x: m.sum(x, np.int32(2))),
    ("mean tuple", lambda m, x: m.mean(x, axis=(np.int64(0), np.int64(2)))),
    ("permute_dims", lambda m, x: (m.permute_dims if m is la else np.transpose)(
        x, (np.int64(1), 0, 2))),
    ("moveaxis", lambda m, x: m.moveaxis(x, np.int64(0), -1)),
    ("roll", lambda m, x: m.roll(x, np.int64(1), axis=np.int64(2))),
    ("concat", lambda m, x: (m.concat if m is la else np.concatenate)(
        [x, x], axis=np.int64(1))),
    ("argmax", lambda m, x: m.argmax(x, axis=np.int64(-1))),
    ("cumsum", lambda m, x: m.cumsum(x, axis=np.int64(1))),
]


@pytest.mark.parametrize("name,f", NUMPY_INT_AXES, ids=[n for n, _ in NUMPY_INT_AXES])
def test_numpy_integer_axes_are_ints(name, f):
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(f(la, la.asarray(x)).numpy(), f(np, x))


def test_a_tensor_method_takes_numpy_integer_dims():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = la.asarray(x)
    np.testing.assert_array_equal(t.transpose(np.int64(1), 2).numpy(), x.swapaxes(1, 2))
    np.testing.assert_array_equal(t.sum(np.int64(1)).numpy(), x.sum(1))
