"""The Python array API 2025.12 namespace (the version lazyarray declares): every name
exists, the smaller functions (dtype functions, creation helpers, manipulation, utility)
agree with NumPy, and so does each addition of 2024.12 (new functions, Python scalars in
binary functions, integer array indexing, complex mean, the `max dimensions` capability)."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la

# the standard's names (2025.12), by section
STANDARD = {
    "constants": "e inf nan newaxis pi",
    "creation": "arange asarray empty empty_like eye from_dlpack full full_like linspace "
                "meshgrid ones ones_like tril triu zeros zeros_like",
    "data type functions": "astype can_cast finfo iinfo isdtype result_type",
    "data types": "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64",
    "elementwise": "abs acos acosh add asin asinh atan atan2 atanh bitwise_and "
                   "bitwise_left_shift bitwise_invert bitwise_or bitwise_right_shift "
                   "bitwise_xor ceil clip conj copysign cos cosh divide equal exp expm1 floor "
                   "floor_divide greater greater_equal hypot imag isfinite isinf isnan less "
                   "less_equal log log1p log2 log10 logaddexp logical_and logical_not "
                   "logical_or logical_xor maximum minimum multiply negative nextafter "
                   "not_equal positive pow real reciprocal remainder round sign signbit sin "
                   "sinh square sqrt subtract tan tanh trunc",
    "indexing": "take take_along_axis",
    "inspection": "__array_namespace_info__",
    "linear algebra": "matmul matrix_transpose tensordot vecdot",
    "manipulation": "broadcast_arrays broadcast_shapes broadcast_to concat expand_dims flip moveaxis "
                    "permute_dims repeat reshape roll squeeze stack tile unstack",
    "searching": "argmax argmin count_nonzero nonzero searchsorted where",
    "set": "isin unique_all unique_counts unique_inverse unique_values",
    "sorting": "argsort sort",
    "statistical": "cumulative_prod cumulative_sum max mean min prod std sum var",
    "utility": "all any diff",
}
NAMES = [(section, n) for section, names in STANDARD.items() for n in names.split()]


@pytest.mark.parametrize("section, name", NAMES, ids=[n for _, n in NAMES])
def test_standard_name_exists(section, name):
    assert hasattr(la, name), f"lazyarray lacks {name} ({section})"


def test_inspection_lists_the_standard_dtypes_only():
    info = la.__array_namespace_info__()
    assert info.default_dtypes()["complex floating"] is la.complex64
    assert set(info.dtypes(kind="complex floating")) == {"complex64", "complex128"}
    names = set(info.dtypes())
    assert names == {"bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                     "uint64", "float32", "float64", "complex64", "complex128"}
    assert la.isdtype(la.complex64, "numeric") and not la.isdtype(la.complex64, "real floating")


def test_version_and_namespace():
    assert la.__array_api_version__ == "2025.12"
    x = la.asarray([1.0])
    assert x.__array_namespace__() is la
    for version in ("2022.12", "2023.12", "2024.12", "2025.12"):
        assert x.__array_namespace__(api_version=version) is la
    with pytest.raises(ValueError, match="api_version"):
        x.__array_namespace__(api_version="2099.12")


def test_namespace_info():
    info = la.__array_namespace_info__()
    caps = info.capabilities()
    assert caps["boolean indexing"] and caps["data-dependent shapes"]
    assert info.default_dtypes()["real floating"] == la.float32
    assert info.default_dtypes()["indexing"] == la.int64
    assert info.default_device() in info.devices() or info.devices()
    assert set(info.dtypes(kind="signed integer")) == {"int8", "int16", "int32", "int64"}
    assert info.dtypes(kind="bool") == {"bool": la.bool}


# ---- data type functions ---------------------------------------------------------------

@pytest.mark.parametrize("a, b, want", [
    (la.int8, la.int16, la.int16), (la.uint8, la.int8, la.int16), (la.float32, la.int64,
                                                                   la.float32),
    (la.bool, la.int32, la.int32), (la.float16, la.float64, la.float64),
])
def test_result_type(a, b, want):
    assert la.result_type(a, b) == want


def test_result_type_with_tensors_and_scalars():
    x = la.asarray([1], dtype="int16")
    assert la.result_type(x, la.int32) == la.int32
    assert la.result_type(x, 1) in (la.int16, la.int64)


@pytest.mark.parametrize("a, b, ok", [
    (la.int8, la.int16, True), (la.int16, la.int8, False), (la.float32, la.float64, True),
    (la.float64, la.float32, False), (la.bool, la.int8, True), (la.int64, la.float32, True),
])
def test_can_cast(a, b, ok):
    assert la.can_cast(a, b) is ok


def test_isdtype():
    assert la.isdtype(la.int8, "signed integer")
    assert la.isdtype(la.uint8, "integral") and not la.isdtype(la.uint8, "signed integer")
    assert la.isdtype(la.float16, ("bool", "real floating"))
    assert not la.isdtype(la.bool, "numeric")
    assert la.isdtype(la.float32, la.float32)
    with pytest.raises(ValueError, match="unknown kind"):
        la.isdtype(la.float32, "floating-ish")


def test_finfo_iinfo():
    f = la.finfo(la.float32)
    assert f.bits == 32 and f.eps == np.finfo(np.float32).eps
    assert f.smallest_normal == np.finfo(np.float32).smallest_normal
    assert f.dtype == la.float32 and f.max == float(np.finfo(np.float32).max)
    assert la.finfo(la.bfloat16).bits == 16
    assert la.finfo(la.asarray([1.0], dtype="float16")).dtype == la.float16
    i = la.iinfo(la.int16)
    assert (i.min, i.max, i.bits) == (-32768, 32767, 16) and i.dtype == la.int16
    with pytest.raises(TypeError, match="iinfo"):
        la.finfo(la.int8)
    with pytest.raises(TypeError, match="finfo"):
        la.iinfo(la.float32)


def test_astype_accepts_copy():
    x = la.asarray([1.5, -2.5])
    y = la.astype(x, la.int32, copy=False)
    assert y.dtype == la.int32
    np.testing.assert_array_equal(y.numpy(), [1, -2])


def test_real_imag_conj(device):
    a = np.array([1.5, -2.0], np.float32)
    x = la.asarray(a)
    np.testing.assert_array_equal(la.real(x).numpy(), a)
    np.testing.assert_array_equal(la.conj(x).numpy(), a)
    np.testing.assert_array_equal(la.imag(x).numpy(), [0, 0])
    assert la.imag(x).dtype == la.float32


# ---- creation and manipulation helpers ----------------------------------------------

def test_empty_like_and_full_like(device):
    x = la.asarray(np.ones((2, 3), np.int16))
    e = la.empty_like(x)
    assert e.shape == (2, 3) and e.dtype == la.int16
    np.testing.assert_array_equal(la.full_like(x, 7).numpy(), np.full((2, 3), 7, np.int16))


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_tril_triu(k, device):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(la.tril(la.asarray(a), k=k).numpy(), np.tril(a, k))
    np.testing.assert_array_equal(la.triu(la.asarray(a), k=k).numpy(), np.triu(a, k))


@pytest.mark.parametrize("indexing", ["xy", "ij"])
def test_meshgrid(indexing, device):
    a, b, c = np.arange(3), np.arange(4) * 10, np.arange(2) * 100
    got = la.meshgrid(la.asarray(a), la.asarray(b), la.asarray(c), indexing=indexing)
    want = np.meshgrid(a, b, c, indexing=indexing)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_unstack_and_broadcast_arrays(device):
    a = np.arange(6).reshape(2, 3)
    parts = la.unstack(la.asarray(a), axis=1)
    assert len(parts) == 3
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(p.numpy(), a[:, i])
    x, y = la.broadcast_arrays(la.asarray(np.ones((3, 1))), la.asarray(np.arange(4)))
    assert x.shape == y.shape == (3, 4)


def test_from_dlpack_roundtrip():
    a = np.arange(5, dtype=np.float32)
    x = la.from_dlpack(a)
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal(np.from_dlpack(x), a)


@pytest.mark.parametrize("axis, n", [(-1, 1), (0, 1), (1, 2), (1, 0)])
def test_diff(axis, n, device):
    a = np.array([[1, 4, 9, 16], [2, 3, 5, 8], [0, 0, 1, 1]], np.int32)
    np.testing.assert_array_equal(la.diff(la.asarray(a), axis=axis, n=n).numpy(),
                                  np.diff(a, axis=axis, n=n))


def test_diff_prepend_append_and_bool(device):
    a = np.array([1.0, 3.0, 6.0], np.float32)
    got = la.diff(la.asarray(a), prepend=la.asarray(0.0), append=la.asarray([10.0]))
    np.testing.assert_allclose(got.numpy(), np.diff(a, prepend=0.0, append=[10.0]))
    m = np.array([True, True, False, True])
    np.testing.assert_array_equal(la.diff(la.asarray(m)).numpy(), np.diff(m))
    with pytest.raises(ValueError, match="rank >= 1"):
        la.diff(la.asarray(1.0))


def test_cumulative_prod(device):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    np.testing.assert_array_equal(la.cumulative_prod(la.asarray(a), axis=1).numpy(),
                                  np.cumprod(a, axis=1))


def test_every_ops_function_is_public():
    from lazyarray import ops
    missing = [n for n in ops.__all__ if not hasattr(la, n)]
    assert not missing


# ---- the linalg extension (traceable part) --------------------------------------------

LA_RNG = np.random.default_rng(3)
MATS = LA_RNG.standard_normal((2, 3, 4)).astype(np.float32)


def test_linalg_namespace_holds_its_functions():
    for name in ("cross", "diagonal", "matmul", "matrix_norm", "matrix_power",
                 "matrix_transpose", "outer", "tensordot", "trace", "vecdot", "vector_norm"):
        assert callable(getattr(la.linalg, name)), name


@pytest.mark.parametrize("offset", [-3, -1, 0, 2, 4, 5])
def test_diagonal_and_trace(offset, device):
    x = la.asarray(MATS)
    np.testing.assert_array_equal(la.linalg.diagonal(x, offset=offset).numpy(),
                                  np.diagonal(MATS, offset, -2, -1))
    np.testing.assert_allclose(la.linalg.trace(x, offset=offset).numpy(),
                               np.trace(MATS, offset, -2, -1), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("ord", [2, 1, np.inf, -np.inf, 0, 3])
def test_vector_norm(ord, device):
    got = la.linalg.vector_norm(la.asarray(MATS), axis=-1, ord=ord)
    np.testing.assert_allclose(got.numpy(), np.linalg.norm(MATS, ord=ord, axis=-1), rtol=1e-5)
    whole = la.linalg.vector_norm(la.asarray(MATS), ord=ord, keepdims=True)
    assert whole.shape == (1, 1, 1)


@pytest.mark.parametrize("ord", ["fro", 1, -1, np.inf, -np.inf])
def test_matrix_norm(ord, device):
    got = la.linalg.matrix_norm(la.asarray(MATS), ord=ord)
    np.testing.assert_allclose(got.numpy(), np.linalg.norm(MATS, ord=ord, axis=(-2, -1)),
                               rtol=1e-5)


def test_matrix_norm_names_the_valid_orders():
    with pytest.raises(ValueError, match="valid: 'fro', 'nuc', 1, -1, 2, -2, inf, -inf"):
        la.linalg.matrix_norm(la.asarray(MATS), ord=3)


def test_cross(device):
    a = LA_RNG.standard_normal((4, 3)).astype(np.float32)
    b = LA_RNG.standard_normal((3,)).astype(np.float32)
    np.testing.assert_allclose(la.linalg.cross(la.asarray(a), la.asarray(b)).numpy(),
                               np.cross(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(la.linalg.cross(la.asarray(a.T), la.asarray(a.T), axis=0).numpy(),
                               np.zeros((3, 4)), atol=1e-6)
    with pytest.raises(ValueError, match="size 3"):
        la.linalg.cross(la.asarray(MATS), la.asarray(MATS))


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_matrix_power(n, device):
    m = LA_RNG.standard_normal((2, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(la.linalg.matrix_power(la.asarray(m), n).numpy(),
                               np.linalg.matrix_power(m, n), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="must be an int"):
        la.linalg.matrix_power(la.asarray(m), 1.5)


# ---- the 2024.12 additions, each against NumPy ----------------------------------------
_F = np.array([1.5, -2.0, 3.0, 0.0], np.float32)
_I = np.array([1, 2, 3, -4], np.int32)
_B = np.array([True, False, True, False])

# binary functions take a Python scalar on either side (gh-862): (name, array, scalar)
SCALAR_BINARY = [(n, _F, 2.0) for n in (
    "add atan2 copysign divide equal floor_divide greater greater_equal hypot less "
    "less_equal logaddexp maximum minimum multiply nextafter not_equal pow remainder "
    "subtract").split()] + [(n, _I, 1) for n in (
        "bitwise_and bitwise_left_shift bitwise_or bitwise_right_shift bitwise_xor").split()
    ] + [(n, _B, True) for n in "logical_and logical_or logical_xor".split()]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name, array, value", SCALAR_BINARY,
                         ids=[n for n, _, _ in SCALAR_BINARY])
def test_binary_functions_take_a_python_scalar(name, array, value, side, device):
    """The scalar is weak: the array's dtype decides, as NumPy 2 with a Python scalar."""
    if name == "bitwise_left_shift" and side == "left":
        array = np.abs(array)
    args = (array, value) if side == "right" else (value, array)
    with np.errstate(all="ignore"):         # 2 / 0 and the like: inf and nan, as here
        want = getattr(np, name)(*args)
    got = getattr(la, name)(*[la.asarray(a) if isinstance(a, np.ndarray) else a
                              for a in args]).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("x1, x2", [(_F, 0.5), (0.5, _F), (-1.0, 2.0), (_I, 7)])
def test_where_takes_python_scalars(x1, x2, device):
    wrap = lambda a: la.asarray(a) if isinstance(a, np.ndarray) else a    # noqa: E731
    got = la.where(la.asarray(_B), wrap(x1), wrap(x2)).numpy()
    want = np.where(_B, x1, x2)
    if not any(isinstance(a, np.ndarray) for a in (x1, x2)):
        want = want.astype(np.float32)     # two Python floats: the default float
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_result_type_takes_python_scalars():
    assert la.result_type(la.float32, 1.0) == la.float32
    assert la.result_type(la.int16, 1) == la.int16
    assert la.result_type(la.int32, 1.0) == la.float32
    assert la.result_type(la.float64, 1j) == la.complex128


ADDITIONS = [
    ("nextafter", lambda m: m.nextafter(m.asarray(_F), m.asarray(np.zeros(4, np.float32)))),
    ("nextafter_up", lambda m: m.nextafter(m.asarray(_F), m.asarray(np.full(4, 9, np.float32)))),
    ("reciprocal", lambda m: m.reciprocal(m.asarray(_F[:3]))),
    ("count_nonzero", lambda m: m.count_nonzero(m.asarray(_I * (_I > 1)))),
    ("count_nonzero_axis", lambda m: m.count_nonzero(m.asarray(np.eye(3, 4)), axis=1,
                                                     keepdims=True)),
    ("cumulative_prod", lambda m: m.cumulative_prod(m.asarray(_F), include_initial=True)),
    ("cumulative_prod_axis", lambda m: m.cumulative_prod(m.asarray(_I.reshape(2, 2)), axis=0)),
    ("diff", lambda m: m.diff(m.asarray(_F), n=2)),
    ("take_along_axis", lambda m: m.take_along_axis(m.asarray(_F.reshape(2, 2)),
                                                    m.asarray(np.array([[1, 0], [0, 0]])),
                                                    axis=1)),
    ("take_negative", lambda m: m.take(m.asarray(_F), m.asarray(np.array([-1, 0])))),
    ("searchsorted_right", lambda m: m.searchsorted(m.asarray(np.array([1.0, 2, 2, 3])),
                                                    m.asarray(np.array([2.0, 2.5])),
                                                    side="right")),
    ("clip_scalars", lambda m: m.clip(m.asarray(_F), -1.0, 2.0)),
    ("conj_real", lambda m: m.conj(m.asarray(_F))),
    ("real_real", lambda m: m.real(m.asarray(_F))),
    ("mean_complex", lambda m: m.mean(m.asarray(np.array([[1 + 1j, 3 - 1j], [2j, 1]])),
                                      axis=0)),
    ("mean_complex64", lambda m: m.mean(m.asarray(np.array([1 + 1j, 3 - 2j], np.complex64)))),
    ("complex_scalar_with_float", lambda m: m.asarray(_F) * 1j),
    ("int_array_index", lambda m: m.asarray(np.arange(12).reshape(3, 4))[
        m.asarray(np.array([0, 2])), m.asarray(np.array([1, -1]))]),
    ("int_array_index_broadcast", lambda m: m.asarray(np.arange(12).reshape(3, 4))[
        m.asarray(np.array([[0], [2]])), m.asarray(np.array([1, 3]))]),
    ("int_array_index_and_slice", lambda m: m.asarray(np.arange(12).reshape(3, 4))[
        m.asarray(np.array([0, 2])), 1:3]),
]


@pytest.mark.parametrize("name", [n for n, _ in ADDITIONS])
def test_2024_12_additions_match_numpy(name, device):
    fn = dict(ADDITIONS)[name]
    got, want = fn(la).numpy(), np.asarray(fn(np))
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_fftfreq_takes_a_dtype():
    for fn, args in ((la.fft.fftfreq, (4,)), (la.fft.rfftfreq, (5, 0.5))):
        got = fn(*args, dtype=la.float64)
        assert got.dtype == la.float64
        np.testing.assert_allclose(got.numpy(), getattr(np.fft, fn.__name__)(*args))


def test_max_dimensions_capability():
    assert "max dimensions" in la.__array_namespace_info__().capabilities()


@pytest.mark.parametrize("n, m, k", [(0, None, 2 ** 63), (3, 4, 2 ** 63), (3, 4, -2 ** 70),
                                     (3, 4, 4), (3, 4, -3), (3, 4, 3), (3, 4, -2), (2, 2, 0)])
def test_eye_takes_any_diagonal_offset(n, m, k, device):
    """A diagonal off the matrix is empty, whatever the Python int (the array API suite
    draws k = 2**63)."""
    np.testing.assert_array_equal(la.eye(n, m, k=k).numpy(), np.eye(n, m, k=k, dtype=np.float32))


# ---- 2025.12 additions, each against NumPy itself -----------------------------------------

@pytest.mark.parametrize("axis", [(0, 2), (-1, 0), (1,), (0, 1, 2, 3), 1, -1])
def test_expand_dims_takes_a_tuple_of_positions(axis, device):
    x = np.arange(6.0).reshape(2, 3)
    got = la.expand_dims(la.asarray(x, device=device), axis=axis)
    want = np.expand_dims(x, axis)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("axis", [(0, 0), (0, -4), (4,)])
def test_expand_dims_refuses_repeated_or_out_of_range_positions(axis):
    with pytest.raises((ValueError, IndexError), match="expand_dims"):
        la.expand_dims(la.ones((2, 3)), axis=axis)


def test_meshgrid_and_broadcast_arrays_return_tuples():
    a, b = la.asarray(np.arange(3.0)), la.asarray(np.arange(2.0))
    assert type(la.meshgrid(a, b)) is tuple
    assert type(la.broadcast_arrays(a, la.ones((2, 1)))) is tuple


@pytest.mark.parametrize("shapes", [((2, 1), (3,)), (), ((0, 1), (1, 5)), ((4,),),
                                    ((1, 2, 1), (3, 1, 4), (1,))])
def test_broadcast_shapes_matches_numpy(shapes):
    assert la.broadcast_shapes(*shapes) == np.broadcast_shapes(*shapes)


def test_broadcast_shapes_refuses_what_numpy_refuses():
    with pytest.raises(ValueError, match=r"broadcast_shapes: shapes \(2,\), \(3,\) cannot"):
        la.broadcast_shapes((2,), (3,))
    with pytest.raises(TypeError, match="tuple of non-negative ints"):
        la.broadcast_shapes((2, -1))


# 3 and 64 elements: compared with each; 65 and 300: sorted and binary-searched
@pytest.mark.parametrize("n", [0, 3, 64, 65, 300])
@pytest.mark.parametrize("dtype", [np.int8, np.uint64, np.float32, np.bool_])
@pytest.mark.parametrize("invert", [False, True])
def test_isin_matches_numpy(n, dtype, invert, device):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 40, (5, 7)).astype(dtype)
    y = rng.integers(0, 40, n).astype(dtype)
    if dtype == np.float32 and n:
        x[0, 0] = y[0] = np.nan                     # NaN is in nothing
    got = la.isin(la.asarray(x, device=device), la.asarray(y, device=device), invert=invert)
    assert got.dtype == la.bool
    np.testing.assert_array_equal(got.numpy(), np.isin(x, y, invert=invert))


def test_isin_takes_python_scalars():
    np.testing.assert_array_equal(la.isin(la.asarray([1, 2, 3]), 2).numpy(), [False, True, False])
    assert bool(la.isin(2.0, la.asarray([1, 2])))
