"""Complex dtypes at the edges the op table does not reach, and the array API's remaining
functions and signatures (nextafter in half precision, __complex__, to_device,
result_type with Python scalars, DLPack of complex tensors)."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la

import gradcheck


def test_promotion_follows_the_array_api():
    assert la.result_type(la.complex64, la.float64) == la.complex128
    assert la.result_type(la.complex64, la.float32) == la.complex64
    assert la.result_type(la.complex64, la.int64) == la.complex64
    assert la.result_type(la.complex128, la.complex64) == la.complex128


@pytest.mark.parametrize("args,want", [
    ((la.float32, 1.0), la.float32), ((la.int8, 1), la.int8), ((la.float32, 1j), la.complex64),
    ((la.float64, 1j), la.complex128), ((la.int32, 2.5), la.float32), ((1, 2.0), la.float32),
    ((True,), la.bool), ((la.uint8, True), la.uint8),
])
def test_result_type_takes_python_scalars_as_weak(args, want):
    assert la.result_type(*args) == want


def test_python_complex_scalars_are_weak():
    x = la.asarray(np.ones(3, np.float32))
    assert (x * 1j).dtype == la.complex64
    assert (la.asarray(np.ones(3)) + 2j).dtype == la.complex128
    assert la.asarray([1j, 2]).dtype == la.complex64


def test_dunder_complex_and_float_of_a_complex():
    assert complex(la.asarray(np.array(1.5 - 2j))) == 1.5 - 2j
    assert complex(la.asarray(3.0)) == 3 + 0j
    with pytest.raises(TypeError):
        float(la.asarray(np.array(1 + 1j)))


def test_to_device_moves(device):
    x = la.asarray([1.0, 2.0]).to_device(device)
    assert x.device == la.device(device)
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])


def test_nextafter_in_half_precision_matches_numpy():
    a = np.array([0.0, 1.0, -1.0, 65504.0, 2.0, np.nan], np.float16)
    b = np.array([1.0, 2.0, -2.0, np.inf, 2.0, 0.0], np.float16)
    got = la.nextafter(la.asarray(a), la.asarray(b)).numpy()
    np.testing.assert_array_equal(got, np.nextafter(a, b))


def test_complex_dlpack_round_trip():
    z = (np.arange(6) + 1j * np.arange(6)).astype(np.complex64).reshape(2, 3)
    t = la.from_dlpack(z)
    assert t.dtype == la.complex64
    back = np.from_dlpack(la.conj(t))
    np.testing.assert_array_equal(back, np.conj(z))


def test_a_fused_complex_expression_matches_numpy(device):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((64, 33)) + 1j * rng.standard_normal((64, 33))).astype(np.complex64)
    x = la.asarray(a, device=device)
    y = la.sum(la.exp(x * 0.5j) / (1 + la.abs(x)), axis=1) + la.conj(x[:, 0])
    want = np.sum(np.exp(a * 0.5j) / (1 + np.abs(a)), axis=1) + np.conj(a[:, 0])
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)


def test_complex_matmul_is_one_gemm_and_matches(device):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((40, 30)) + 1j * rng.standard_normal((40, 30))
    b = rng.standard_normal((30, 20)) + 1j * rng.standard_normal((30, 20))
    got = (la.asarray(a, device=device) @ la.asarray(b, device=device)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_ordering_complex_numbers_is_refused():
    z = la.asarray(np.array([1 + 1j]))
    for fn in (lambda: z < z, lambda: la.max(z), lambda: la.sort(z), lambda: la.argmax(z)):
        with pytest.raises(TypeError, match="complex|ordered|real"):
            fn()


@pytest.mark.parametrize("name,fn", [
    ("abs_squared", lambda z: la.abs(z) ** 2),
    ("mul_conj", lambda z: z * la.conj(z) + z * z),
    ("exp_log", lambda z: la.log(la.exp(z) + 2)),
    ("divide", lambda z: 1 / (z + 3)),
    ("matmul", lambda z: z @ la.matrix_transpose(z)),
    ("real_imag", lambda z: la.real(z) * la.imag(z)),
    ("sum_prod", lambda z: la.sum(z * z, axis=0) * la.prod(z, axis=1)[0]),
])
def test_gradients_follow_the_conjugate_wirtinger_convention(name, fn, device):
    rng = np.random.default_rng(2)
    z = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    gradcheck.check_complex_direction(fn, [z], device=device)


def test_gradient_of_abs_squared_is_twice_z_as_pytorch():
    z = np.array([1 + 2j, -0.5 + 0.25j])
    g = la.grad(lambda t: la.sum(la.abs(t) ** 2))(la.asarray(z))
    np.testing.assert_allclose(g.numpy(), 2 * z)


# ---- special values (C99 Annex G, the array API's tables) --------------------------------

_EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 25.0, -30.0, 1e30, np.inf, -np.inf, np.nan]
_NUMPY_NAMES = {"acos": "arccos", "acosh": "arccosh", "asin": "arcsin", "asinh": "arcsinh",
                "atan": "arctan", "atanh": "arctanh"}
# where C99 leaves the sign of an infinite part unspecified and NumPy picks the other one
_EITHER_SIGN = {"sinh": "real", "sin": "imag"}


def _edge_grid(dtype) -> np.ndarray:
    re, im = np.meshgrid(_EDGE, _EDGE)
    z = np.empty(re.size, dtype)
    z.real, z.imag = re.ravel(), im.ravel()
    return z


def _same(a: np.ndarray, b: np.ndarray, rtol: float) -> np.ndarray:
    both_nan = np.isnan(a) & np.isnan(b)
    return both_nan | np.isclose(a, b, rtol=rtol, atol=0)


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "sin", "cos", "sinh", "cosh", "tanh",
                                  "log1p", "acos", "acosh", "asin", "asinh", "atan", "atanh",
                                  "sign"])
def test_special_values_match_numpy(name, dtype, device):
    """Infinities, NaNs, signed zeros and values past overflow, against NumPy's own loops."""
    z = _edge_grid(dtype)
    with np.errstate(all="ignore"):
        want = getattr(np, _NUMPY_NAMES.get(name, name))(z)
    got = getattr(la, name)(la.asarray(z)).numpy()
    rtol = 1e-5 if dtype == np.complex64 else 1e-12
    for part in ("real", "imag"):
        a, b = getattr(want, part), getattr(got, part)
        if _EITHER_SIGN.get(name) == part:
            a, b = np.where(np.isinf(a), np.abs(a), a), np.where(np.isinf(b), np.abs(b), b)
        bad = ~_same(a, b, rtol)
        assert not bad.any(), f"{name}{part}: at {z[bad][:4]} got {got[bad][:4]}, NumPy {want[bad][:4]}"


def test_expm1_special_values_follow_c99_where_numpy_does_not(device):
    """NumPy's complex expm1 gives inf + NaN i for expm1(inf + 0i); the array API (and
    exp(z) - 1) give inf + 0i, -1 + 0i for -inf + i inf, NaN + 0i for NaN + 0i."""
    inf, nan = np.inf, np.nan
    cases = [(complex(0, 0), (0, 0)), (complex(inf, 0), (inf, 0)), (complex(-inf, inf), (-1, 0)),
             (complex(-inf, nan), (-1, 0)), (complex(inf, inf), (inf, nan)),
             (complex(nan, 0), (nan, 0)), (complex(1, inf), (nan, nan)),
             (complex(1e-9, 2e-9), (1e-9 - 1.5e-18, 2e-9 + 2e-18))]
    z = np.array([c for c, _ in cases])
    got = la.expm1(la.asarray(z)).numpy()
    want = np.array([complex(*w) for _, w in cases])
    assert _same(got.real, want.real, 1e-6).all() and _same(got.imag, want.imag, 1e-6).all(), got


@pytest.mark.parametrize("name", ["acos", "acosh", "asin", "asinh", "atan", "atanh", "expm1",
                                  "log1p", "tanh", "sign"])
def test_complex_math_gradients(name, device):
    rng = np.random.default_rng(5)
    z = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    gradcheck.check_complex_direction(lambda t: getattr(la, name)(t), [z], device=device)


# ---- the array API's remaining signatures and results ------------------------------------

def test_finfo_of_complex_is_its_parts_as_numpy():
    for dtype, part in ((la.complex64, np.float32), (la.complex128, np.float64)):
        f, want = la.finfo(dtype), np.finfo(np.dtype(dtype.name))
        assert f.dtype == la.float32 if part is np.float32 else f.dtype == la.float64
        assert (f.bits, f.eps, f.max) == (int(want.bits), float(want.eps), float(want.max))


def test_vecdot_conjugates_its_first_argument_as_numpy(device):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    b = rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))
    for fn in (la.vecdot, la.linalg.vecdot):
        np.testing.assert_allclose(fn(la.asarray(a), la.asarray(b)).numpy(), np.vecdot(a, b))
    # the gradient of re(<a, b>) in a is b (conjugate-Wirtinger)
    g = la.grad(lambda t: la.real(la.sum(la.vecdot(t, la.asarray(b)))))(la.asarray(a))
    np.testing.assert_allclose(g.numpy(), b)
    gradcheck.check_complex_direction(lambda s, t: la.vecdot(s, t), [a, b], device=device)


def test_unique_results_are_named_as_the_array_api():
    x = la.asarray(np.array([[3, 1], [3, 2]]))
    u = la.unique_all(x)
    assert u._fields == ("values", "indices", "inverse_indices", "counts")
    np.testing.assert_array_equal(u.values.numpy(), [1, 2, 3])
    assert u.inverse_indices.shape == (2, 2)
    np.testing.assert_array_equal(la.unique_counts(x).counts.numpy(), [1, 1, 2])
    inv = la.unique_inverse(x)
    assert inv._fields == ("values", "inverse_indices")
    np.testing.assert_array_equal(inv.inverse_indices.numpy(), [[2, 0], [2, 1]])


_DEVICE_FUNCTIONS = {
    "zeros": lambda d: la.zeros((2, 3), device=d), "ones": lambda d: la.ones(2, device=d),
    "empty": lambda d: la.empty((2,), device=d), "full": lambda d: la.full((2,), 7, device=d),
    "arange": lambda d: la.arange(3, device=d), "eye": lambda d: la.eye(2, device=d),
    "linspace": lambda d: la.linspace(0, 1, 3, device=d),
    "zeros_like": lambda d: la.zeros_like(la.ones(2, device="cpu"), device=d),
    "ones_like": lambda d: la.ones_like(la.ones(2, device="cpu"), device=d),
    "empty_like": lambda d: la.empty_like(la.ones(2, device="cpu"), device=d),
    "full_like": lambda d: la.full_like(la.ones(2, device="cpu"), 5, device=d),
    "astype": lambda d: la.astype(la.ones(2, device="cpu"), la.float64, device=d),
    "fft.fftfreq": lambda d: la.fft.fftfreq(4, device=d),
    "fft.rfftfreq": lambda d: la.fft.rfftfreq(4, device=d),
}


@pytest.mark.parametrize("name", sorted(_DEVICE_FUNCTIONS))
def test_creation_functions_take_device_and_say_so(name):
    import inspect
    fn = la
    for part in name.split("."):
        fn = getattr(fn, part)
    assert "device" in inspect.signature(fn).parameters
    for target in ("interpreter", la.device("interpreter")):
        t = _DEVICE_FUNCTIONS[name](target)
        assert t.device == la.device("interpreter")
        t.numpy()


def test_qr_and_svd_signatures_name_their_options():
    import inspect
    assert "mode" in inspect.signature(la.linalg.qr).parameters
    assert "full_matrices" in inspect.signature(la.linalg.svd).parameters
    a = np.random.default_rng(0).standard_normal((4, 2))
    assert la.linalg.svd(la.asarray(a), full_matrices=False).U.shape == (4, 2)
    assert la.linalg.qr(la.asarray(a), mode="complete").Q.shape == (4, 4)


def test_repeat_with_an_array_of_repeats_matches_numpy(device):
    x = np.arange(6.0).reshape(2, 3)
    for reps, axis in (([1, 0, 2], 1), ([2], 0), ([1, 2, 1, 1, 0, 3], None), ([3, 1], 0)):
        got = la.repeat(la.asarray(x), la.asarray(np.array(reps)), axis=axis)
        np.testing.assert_array_equal(got.numpy(), np.repeat(x, reps, axis=axis))
    with pytest.raises(ValueError, match=r"repeat: .*length 1 or 3 .*\(2, 3\)"):
        la.repeat(la.asarray(x), la.asarray(np.array([1, 2])), axis=1)
    with pytest.raises(ValueError, match="non-negative"):
        la.repeat(la.asarray(x), np.array([1, -1, 2]), axis=1)


def test_repeat_with_a_tensor_of_repeats_is_a_graph_break_in_strict_mode():
    x = la.asarray(np.arange(3.0))
    with la.config.override(strict=True):
        with pytest.raises(Exception, match="repeat"):
            la.repeat(x, la.asarray(np.array([1, 2, 3])))
        assert la.repeat(x, 2).shape == (6,)


def test_setitem_takes_python_and_numpy_complex_values_into_a_complex_tensor():
    x = la.zeros((4,), dtype=la.complex128)
    x[1] = 1.5j
    x[0] = np.complex64(2 + 1j)
    x[2:] = np.array([3 - 1j, 1j])
    want = np.array([2 + 1j, 1.5j, 3 - 1j, 1j])
    np.testing.assert_array_equal(x.numpy(), want)
    with pytest.raises(TypeError, match="complex values need a complex tensor"):
        la.zeros((2,))[0] = 1j
