"""lazyarray.linalg: every function against numpy.linalg (through the op harness), every
decomposition's gradient against float64 finite differences, and the errors."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from harness import OpCase, check_case

import gradcheck

L = la.linalg
NL = np.linalg
F = (D.float32, D.float64)


def _spd_la(a):
    n = a.shape[-1]
    return a @ a.mT + n * la.asarray(np.eye(n), device=a.device).astype(a.dtype)


def _spd_np(a):
    n = a.shape[-1]
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=a.dtype)


def _wc_la(a):
    n = a.shape[-1]
    return a + n * la.asarray(np.eye(n), device=a.device).astype(a.dtype)


def _wc_np(a):
    return a + a.shape[-1] * np.eye(a.shape[-1], dtype=a.dtype)


def _abs(pair):
    """Eigen- and singular vectors are fixed up to sign: compare magnitudes."""
    return tuple(np.abs(x) if i != 1 else x for i, x in enumerate(pair))


SQ = [((3, 3),), ((2, 4, 4),), ((0, 2, 2),)]
RECT = [((4, 3),), ((2, 3, 5),), ((3, 3),)]

CASES = [
    OpCase("solve", lambda a, b: NL.solve(_wc_np(a), b), fn=lambda a, b: L.solve(_wc_la(a), b),
           pairs=[(((3, 3), (3, 2)), {}), (((2, 3, 3), (2, 3, 1)), {}), (((3, 3), (3,)), {}),
                  (((2, 3, 3), (3, 4)), {}), (((1, 3, 3), (4, 3, 2)), {}),
                  (((3, 3), (4, 2)), {})], dtypes=F + (D.int32,), float_result=True, tol=50),
    OpCase("inv", lambda a: NL.inv(_wc_np(a)), fn=lambda a: L.inv(_wc_la(a)), shapes=SQ,
           dtypes=F + (D.float16,), tol=50),
    OpCase("det", lambda a: NL.det(_wc_np(a)), fn=lambda a: L.det(_wc_la(a)), shapes=SQ,
           dtypes=F, tol=50),
    OpCase("slogdet", lambda a: tuple(NL.slogdet(a)), fn=lambda a: tuple(L.slogdet(a)),
           shapes=SQ, dtypes=F, tol=50),
    OpCase("cholesky", lambda a, upper: NL.cholesky(_spd_np(a), upper=upper),
           fn=lambda a, upper: L.cholesky(_spd_la(a), upper=upper), shapes=SQ,
           kwargs=[{"upper": False}, {"upper": True}], dtypes=F, tol=50),
    OpCase("eigvalsh", lambda a: NL.eigvalsh(_spd_np(a)), fn=lambda a: L.eigvalsh(_spd_la(a)),
           shapes=SQ, dtypes=F, tol=100),
    OpCase("eigh", lambda a: _abs(tuple(NL.eigh(_spd_np(a)))),
           fn=lambda a: _abs_la(tuple(L.eigh(_spd_la(a)))), shapes=SQ[:2], dtypes=F, tol=200),
    OpCase("svdvals", lambda a: NL.svd(a, compute_uv=False), fn=lambda a: L.svdvals(a),
           shapes=RECT, dtypes=F, tol=50),
    OpCase("svd", lambda a, full_matrices: _abs(tuple(NL.svd(a, full_matrices=full_matrices))),
           fn=lambda a, full_matrices: _abs_la(tuple(L.svd(a, full_matrices=full_matrices))),
           shapes=RECT, kwargs=[{"full_matrices": False}, {"full_matrices": True}], dtypes=F,
           tol=200),
    OpCase("qr", lambda a, mode: tuple(NL.qr(_wc_np(a), mode=mode)) if mode != "r" else NL.qr(_wc_np(a), mode="r"),
           fn=lambda a, mode: _tuple(L.qr(_wc_la(a), mode=mode)), shapes=RECT,
           kwargs=[{"mode": "reduced"}, {"mode": "complete"}, {"mode": "r"}], dtypes=F, tol=50),
    OpCase("pinv", NL.pinv, fn=L.pinv, shapes=RECT, dtypes=F, tol=100),
    OpCase("matrix_rank", lambda a: NL.matrix_rank(a), fn=L.matrix_rank,
           shapes=RECT + [((3, 3),)], dtypes=F),
    OpCase("matrix_norm", lambda a, ord: NL.matrix_norm(a, ord=ord),
           fn=lambda a, ord: L.matrix_norm(a, ord=ord), shapes=RECT,
           kwargs=[{"ord": 2}, {"ord": -2}, {"ord": "nuc"}], dtypes=F, tol=50),
    OpCase("matrix_power", lambda a, n: NL.matrix_power(_wc_np(a), n),
           fn=lambda a, n: L.matrix_power(_wc_la(a), n), shapes=SQ[:2],
           kwargs=[{"n": -1}, {"n": -3}], dtypes=F, tol=100),
    OpCase("cond", lambda a: NL.cond(a), fn=L.cond, shapes=RECT, dtypes=F, tol=100),
    OpCase("multi_dot", lambda a, b, c: NL.multi_dot([a, b, c]),
           fn=lambda a, b, c: L.multi_dot([a, b, c]),
           shapes=[((3,), (3, 5), (5, 2)), ((2, 3), (3, 5), (5,)), ((4, 2), (2, 6), (6, 3))],
           dtypes=F, tol=10),
]


def _abs_la(pair):
    return tuple(la.abs(x) if i != 1 else x for i, x in enumerate(pair))


def _tuple(x):
    return tuple(x) if isinstance(x, tuple) else x


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_matches_numpy_linalg(case, device):
    check_case(case, case.dtypes, device)


def test_lstsq_matches_numpy():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((6, 3)), rng.standard_normal((6, 2))
    got = L.lstsq(la.asarray(a), la.asarray(b))
    x, resid, rank, s = NL.lstsq(a, b, rcond=None)
    np.testing.assert_allclose(got.solution.numpy(), x, rtol=1e-10)
    np.testing.assert_allclose(got.residuals.numpy(), resid, rtol=1e-10)
    assert int(got.rank.numpy()) == rank
    np.testing.assert_allclose(got.singular_values.numpy(), s, rtol=1e-12)
    vec = L.lstsq(la.asarray(a), la.asarray(b[:, 0])).solution
    np.testing.assert_allclose(vec.numpy(), x[:, 0], rtol=1e-10)


def test_results_are_named_tuples():
    a = la.asarray(np.eye(3) * 2.0)
    assert L.eigh(a).eigenvalues.shape == (3,)
    assert L.svd(a).Vh.shape == (3, 3)
    assert L.qr(a).R.shape == (3, 3)
    assert float(L.slogdet(a).logabsdet) == pytest.approx(3 * np.log(2.0))


def test_solve_triangular_matches_scipy_semantics():
    rng = np.random.default_rng(4)
    a = np.tril(rng.standard_normal((2, 4, 4))) + 4 * np.eye(4)
    b = rng.standard_normal((2, 4, 3))
    got = L.solve_triangular(la.asarray(a), la.asarray(b), upper=False).numpy()
    np.testing.assert_allclose(a @ got, b, atol=1e-12)
    u = np.swapaxes(a, -1, -2)
    bt = np.swapaxes(b, -1, -2)
    right = L.solve_triangular(la.asarray(u), la.asarray(bt), upper=True, left=False).numpy()
    np.testing.assert_allclose(right @ u, bt, atol=1e-12)
    unit = L.solve_triangular(la.asarray(a), la.asarray(b), upper=False, unitriangular=True)
    ones = np.tril(a, -1) + np.eye(4)
    np.testing.assert_allclose(ones @ unit.numpy(), b, atol=1e-12)


# ---- gradients -----------------------------------------------------------------------------

_rng = np.random.default_rng(0)
_A = _rng.standard_normal((2, 3, 3)) + 3 * np.eye(3)
_S = _A @ np.swapaxes(_A, -1, -2)
_B = _rng.standard_normal((2, 3, 2))
_TALL = _rng.standard_normal((2, 4, 3))
_WIDE = _rng.standard_normal((2, 3, 4))

# eigen- and singular vectors are fixed up to sign: differentiate their squares
GRADIENTS = {
    "solve": (lambda a, b: L.solve(a, b), [_A, _B]),
    "solve_vector": (lambda a, b: L.solve(a, b), [_A[0], _B[0, :, 0]]),
    "inv": (L.inv, [_A]),
    "det": (L.det, [_A]),
    "slogdet": (lambda a: L.slogdet(a).logabsdet, [_A]),
    "cholesky": (L.cholesky, [_S]),
    "cholesky_upper": (lambda a: L.cholesky(a, upper=True), [_S]),
    "solve_triangular": (lambda a, b: L.solve_triangular(a, b, upper=False), [_A, _B]),
    "solve_triangular_right": (lambda a, b: L.solve_triangular(a, b, upper=True, left=False),
                               [_A, np.swapaxes(_B, -1, -2)]),
    "eigvalsh": (L.eigvalsh, [_S]),
    "eigh_values": (lambda a: L.eigh(a).eigenvalues, [_S]),
    "eigh_vectors": (lambda a: L.eigh(a).eigenvectors ** 2, [_S]),
    "eigh_upper": (lambda a: L.eigh(a, UPLO="U").eigenvectors ** 2, [_S]),
    "eigvals": (lambda a: la.abs(L.eigvals(a)) ** 2 + la.real(L.eigvals(a)), [_A]),
    "eig_vectors": (lambda a: la.abs(L.eig(a).eigenvectors) ** 2, [_A]),
    "svdvals": (L.svdvals, [_TALL]),
    "svd_u_tall": (lambda a: L.svd(a, full_matrices=False).U ** 2, [_TALL]),
    "svd_vh_tall": (lambda a: L.svd(a, full_matrices=False).Vh ** 2, [_TALL]),
    "svd_u_wide": (lambda a: L.svd(a, full_matrices=False).U ** 2, [_WIDE]),
    "svd_vh_wide": (lambda a: L.svd(a, full_matrices=False).Vh ** 2, [_WIDE]),
    "svd_square_full": (lambda a: L.svd(a).Vh ** 2, [_A]),
    "qr_tall": (lambda a: L.qr(a).Q + 0.5 * L.qr(a).R[..., :1, :].sum(), [_TALL]),
    "qr_r_tall": (lambda a: L.qr(a).R, [_TALL]),
    "qr_wide": (lambda a: L.qr(a).Q, [_WIDE]),
    "qr_r_wide": (lambda a: L.qr(a).R, [_WIDE]),
    "pinv": (L.pinv, [_TALL]),
    "matrix_norm_2": (lambda a: L.matrix_norm(a, ord=2), [_TALL]),
    "matrix_norm_nuc": (lambda a: L.matrix_norm(a, ord="nuc"), [_WIDE]),
    "lstsq": (lambda a, b: L.lstsq(a, b).solution, [_rng.standard_normal((5, 3)),
                                                    _rng.standard_normal((5, 2))]),
    "matrix_power_negative": (lambda a: L.matrix_power(a, -2), [_A]),
}


@pytest.mark.parametrize("name", sorted(GRADIENTS))
def test_gradient_full_finite_differences(name):
    fn, inputs = GRADIENTS[name]
    gradcheck.check_full(fn, inputs, device="interpreter")


@pytest.mark.parametrize("name", ["solve", "cholesky", "eigh_vectors", "svd_u_tall", "qr_tall",
                                  "slogdet"])
def test_gradient_direction_compiled(name, device):
    fn, inputs = GRADIENTS[name]
    gradcheck.check_direction(fn, inputs, device=device)


def test_gradient_of_a_tall_full_svd_refuses_as_jax():
    x = la.asarray(_TALL)
    with la.GradientTape() as tape:
        tape.watch(x)
        y = la.sum(L.svd(x, full_matrices=True).U)
    with pytest.raises(ValueError, match="full_matrices=True needs square"):
        tape.gradient(y, x)


def test_triangle_read_gradient_matches_the_function_numpy_computes():
    """eigh and cholesky read the lower triangle: the upper one gets no gradient."""
    g = la.grad(lambda a: la.sum(L.eigvalsh(a) * la.asarray(np.arange(3.0))))(la.asarray(_S[0]))
    assert np.all(np.triu(g.numpy(), 1) == 0)


# ---- errors --------------------------------------------------------------------------------

@pytest.mark.parametrize("fn,shape,match", [
    (L.inv, (2, 3), r"inv: needs square matrices, got shape \(2, 3\)"),
    (L.det, (3,), r"det: needs a matrix or a stack of matrices"),
    (L.cholesky, (2, 2, 3), "cholesky: needs square"),
    (L.eigh, (4, 5), "eigh: needs square"),
    (L.svd, (5,), "svd: needs a matrix"),
])
def test_bad_shapes_are_refused_at_the_call(fn, shape, match):
    with pytest.raises(ValueError, match=match):
        fn(la.ones(shape))


def test_solve_checks_the_right_side():
    with pytest.raises(ValueError, match=r"solve: the right side \(4, 2\) does not match"):
        L.solve(la.ones((3, 3)), la.ones((4, 2)))


def test_singular_input_names_the_op_and_shape_and_leaves_tensors_intact(device):
    a = la.asarray(np.ones((2, 3, 3)), device=device)
    ok = la.asarray(np.eye(3), device=device) * 2.0
    x = L.inv(a)
    # the sync's error names the op, the shape and the user's line; LAPACK's is its cause
    with pytest.raises(la.runtime.SyncError, match=r"solve: a matrix of the input \(2, 3, 3\) "
                                                   "is singular") as err:
        x.numpy()
    assert isinstance(err.value.__cause__, np.linalg.LinAlgError)
    la.device(device).pending.clear()
    np.testing.assert_array_equal(a.numpy(), np.ones((2, 3, 3)))
    np.testing.assert_allclose(L.inv(ok).numpy(), np.eye(3) / 2)


def test_indefinite_input_names_cholesky(device):
    a = la.asarray(-np.eye(3), device=device)
    with pytest.raises(la.runtime.SyncError, match=r"cholesky: a matrix of the input \(3, 3\) "
                                                   "is not positive definite"):
        L.cholesky(a).numpy()
    la.device(device).pending.clear()


def test_linalg_errors_are_value_errors():
    assert issubclass(np.linalg.LinAlgError, ValueError)


# ---- complex matrices ----------------------------------------------------------------------

_crng = np.random.default_rng(11)


def _cn(*shape):
    return _crng.standard_normal(shape) + 1j * _crng.standard_normal(shape)


_CA = _cn(2, 3, 3) + 3 * np.eye(3)
_CS = _CA @ np.conj(np.swapaxes(_CA, -1, -2))
_CB = _cn(2, 3, 2)
_CT, _CW = _cn(2, 4, 3), _cn(2, 3, 4)


def _phase_fixed(x, axis=-2):
    """Vectors fixed up to a phase: each turned positive real at its largest entry."""
    idx = np.expand_dims(np.argmax(np.abs(x), axis=axis), axis)
    p = np.take_along_axis(x, idx, axis=axis)
    return x / (p / np.abs(p))


# name -> (lazyarray fn, numpy fn, inputs): every result compared with NumPy's
COMPLEX_FORWARD = {
    "solve": (L.solve, NL.solve, [_CA, _CB]),
    "inv": (L.inv, NL.inv, [_CA]),
    "det": (L.det, NL.det, [_CA]),
    "slogdet": (lambda a: tuple(L.slogdet(a)), lambda a: tuple(NL.slogdet(a)), [_CA]),
    "cholesky": (L.cholesky, NL.cholesky, [_CS]),
    "eigvalsh": (L.eigvalsh, NL.eigvalsh, [_CS]),
    "eigh": (lambda a: (L.eigh(a)[0], _phase_fixed(L.eigh(a)[1].numpy())),
             lambda a: (NL.eigh(a)[0], _phase_fixed(NL.eigh(a)[1])), [_CS]),
    "svdvals": (L.svdvals, lambda a: NL.svd(a, compute_uv=False), [_CT]),
    "svd_us": (lambda a: (_phase_fixed(L.svd(a, full_matrices=False).U.numpy()), L.svd(a).S),
               lambda a: (_phase_fixed(NL.svd(a, full_matrices=False)[0]), NL.svd(a)[1]), [_CT]),
    "svd_product": (lambda a: (lambda r: (r.U * r.S[..., None, :]) @ r.Vh)(L.svd(a, False)),
                    lambda a: a, [_CW]),
    "qr": (lambda a: tuple(L.qr(a)), lambda a: tuple(NL.qr(a)), [_CT]),
    "qr_complete": (lambda a: tuple(L.qr(a, mode="complete")),
                    lambda a: tuple(NL.qr(a, mode="complete")), [_CW]),
    "solve_triangular": (lambda a, b: L.solve_triangular(a, b, upper=True),
                         lambda a, b: NL.solve(np.triu(a), b), [_CA, _CB]),
    "pinv": (L.pinv, NL.pinv, [_CT]),
}


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("name", sorted(COMPLEX_FORWARD))
def test_complex_matches_numpy_linalg(name, dtype, device):
    fn, ref, inputs = COMPLEX_FORWARD[name]
    inputs = [x.astype(dtype) for x in inputs]
    got = fn(*[la.asarray(x, device=device) for x in inputs])
    want = ref(*inputs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    tol = 1e-4 if dtype == np.complex64 else 1e-10
    for g, w in zip(got, want):
        g = g if isinstance(g, np.ndarray) else g.numpy()
        assert g.dtype == np.asarray(w).dtype, (g.dtype, np.asarray(w).dtype)
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_eig_matches_numpy_and_is_always_complex(dtype, device):
    """eig/eigvals of general matrices: complex results (the array API, torch.linalg.eig),
    the same eigenvalues as NumPy's, and A V = V diag(w) with unit columns."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 4, 4))
    a = (a + 1j * rng.standard_normal(a.shape) if np.dtype(dtype).kind == "c" else a).astype(dtype)
    w, v = L.eig(la.asarray(a, device=device))
    w, v = w.numpy(), v.numpy()
    want = np.result_type(dtype, np.complex64)
    assert w.dtype == want and v.dtype == want
    tol = 1e-4 if want == np.complex64 else 1e-10
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=tol * 10)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, atol=tol)
    key = lambda z: np.sort_complex(np.round(z, 3))     # noqa: E731
    np.testing.assert_allclose(key(L.eigvals(la.asarray(a, device=device)).numpy()),
                               key(np.linalg.eigvals(a)), atol=tol * 10)


def test_eig_refuses_what_numpy_refuses():
    with pytest.raises(ValueError, match=r"eig: needs square matrices, got shape \(2, 3\)"):
        L.eig(la.ones((2, 3)))


def _abs2(x):
    return la.abs(x) ** 2


# phase-invariant losses of eigen- and singular vectors (|v|^2, U S Vh, U Vh)
COMPLEX_GRADIENTS = {
    "solve": (lambda a, b: L.solve(a, b), [_CA, _CB]),
    "inv": (L.inv, [_CA]),
    "det": (L.det, [_CA]),
    "slogdet_sign": (lambda a: L.slogdet(a).sign, [_CA]),
    "slogdet_logabs": (lambda a: L.slogdet(a).logabsdet, [_CA]),
    "cholesky": (L.cholesky, [_CS]),
    "cholesky_upper": (lambda a: L.cholesky(a, upper=True), [_CS]),
    "solve_triangular": (lambda a, b: L.solve_triangular(a, b, upper=False), [_CA, _CB]),
    "solve_triangular_right": (lambda a, b: L.solve_triangular(a, b, upper=True, left=False),
                               [_CA, np.swapaxes(_CB, -1, -2)]),
    "eigvalsh": (L.eigvalsh, [_CS]),
    "eigh_vectors": (lambda a: _abs2(L.eigh(a).eigenvectors), [_CS]),
    "eigvals": (L.eigvals, [_CA]),
    "eig_vectors": (lambda a: _abs2(L.eig(a).eigenvectors), [_CA]),
    "svdvals": (L.svdvals, [_CT]),
    "svd_u_tall": (lambda a: _abs2(L.svd(a, full_matrices=False).U), [_CT]),
    "svd_vh_wide": (lambda a: _abs2(L.svd(a, full_matrices=False).Vh), [_CW]),
    "svd_u_vh": (lambda a: (lambda r: r.U @ r.Vh)(L.svd(a, full_matrices=False)), [_CW]),
    "qr_q_tall": (lambda a: L.qr(a).Q, [_CT]),
    "qr_r_tall": (lambda a: L.qr(a).R, [_CT]),
    "qr_q_wide": (lambda a: L.qr(a).Q, [_CW]),
    "qr_r_wide": (lambda a: L.qr(a).R, [_CW]),
    "pinv": (L.pinv, [_CT]),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_GRADIENTS))
def test_complex_gradient_conjugate_wirtinger(name, device):
    """PyTorch's convention (the cotangent of z = x + iy is dL/dx + i dL/dy), against a
    central difference in complex128 along a random complex direction."""
    fn, inputs = COMPLEX_GRADIENTS[name]
    gradcheck.check_complex_direction(fn, inputs, device=device)


@pytest.mark.parametrize("shape", [(2, 2, 3), (3, 4, 4), (2, 0, 3), (0, 0, 1)])
def test_pinv_and_matrix_rank_take_an_rtol_per_matrix_of_the_stack(shape):
    """An array rtol is shaped like x[..., 0, 0] (the array API; NumPy adds the axis)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    rtol = np.linspace(0.05, 0.6, shape[0], dtype=np.float32)
    got = L.pinv(la.asarray(a), rtol=la.asarray(rtol)).numpy()
    want = NL.pinv(a, rtol=rtol)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert (L.matrix_rank(la.asarray(a), rtol=la.asarray(rtol)).numpy()
            == NL.matrix_rank(a, rtol=rtol)).all()


# ---- norms of complex input, numpy.linalg.norm, vecdot's contracted axis ---------------
_Z = (np.arange(24).reshape(2, 3, 4) % 7 - 3) + 1j * (np.arange(24).reshape(2, 3, 4) % 5 - 2)

NORMS = [
    ("vector_2", lambda m, a: m.vector_norm(a) if m is L else NL.norm(a.ravel())),
    ("vector_1_axis", lambda m, a: m.vector_norm(a, axis=1, ord=1) if m is L
     else NL.norm(a, ord=1, axis=1)),
    ("vector_inf", lambda m, a: m.vector_norm(a, axis=-1, ord=np.inf) if m is L
     else NL.norm(a, ord=np.inf, axis=-1)),
    ("vector_0", lambda m, a: m.vector_norm(a, axis=0, ord=0) if m is L
     else NL.norm(a, ord=0, axis=0)),
    ("vector_3_keep", lambda m, a: m.vector_norm(a, axis=2, ord=3, keepdims=True) if m is L
     else NL.norm(a, ord=3, axis=2, keepdims=True)),
] + [(f"matrix_{o}", (lambda o: lambda m, a: m.matrix_norm(a, ord=o) if m is L
                      else NL.norm(a, ord=o, axis=(-2, -1)))(o))
     for o in ("fro", 1, -1, np.inf, -np.inf, 2, -2, "nuc")] + [
    ("norm_none", lambda m, a: m.norm(a)),
    ("norm_axis", lambda m, a: m.norm(a, axis=1)),
    ("norm_axis_ord", lambda m, a: m.norm(a, ord=1, axis=-1, keepdims=True)),
    ("norm_matrix_axes", lambda m, a: m.norm(a, ord=1, axis=(2, 0))),
    ("norm_matrix_keep", lambda m, a: m.norm(a, ord="fro", axis=(0, 2), keepdims=True)),
    ("norm_2d_ord", lambda m, a: m.norm(a[0], ord=np.inf)),
    ("norm_1d_ord", lambda m, a: m.norm(a[0, 0], ord=3)),
]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, np.float64, np.float32])
@pytest.mark.parametrize("name", [n for n, _ in NORMS])
def test_norms_of_complex_and_real_input_match_numpy(name, dtype, device):
    """A complex x gives the norm of its magnitudes in the matching real dtype
    (complex128 -> float64), as numpy.linalg.norm."""
    fn = dict(NORMS)[name]
    a = (_Z if np.dtype(dtype).kind == "c" else _Z.real).astype(dtype)
    got = fn(L, la.asarray(a, device=device)).numpy()
    want = np.asarray(fn(NL, a))
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    tol = 1e-5 if want.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_vector_norm_of_complex_values_is_their_modulus():
    got = L.vector_norm(la.asarray(np.array([3 + 4j, 1j])))
    assert got.dtype == la.float64
    np.testing.assert_allclose(got.numpy(), np.sqrt(26.0), rtol=1e-15)


@pytest.mark.parametrize("a, b, axis", [((3,), (1,), -1), ((2, 3), (2, 1), -1),
                                        ((4, 3), (1, 3), 0), ((3,), (3, 1), -2)])
def test_vecdot_never_broadcasts_the_contracted_axis(a, b, axis):
    """As the array API standard and NumPy (whose gufunc raises for the same pairs)."""
    with pytest.raises(ValueError):
        np.vecdot(np.ones(a), np.ones(b), axis=axis)
    with pytest.raises(ValueError, match="vecdot"):
        la.vecdot(la.ones(a), la.ones(b), axis=axis)


@pytest.mark.parametrize("a, b, axis", [((2, 3), (3,), -1), ((4, 1, 3), (2, 3), -1),
                                        ((3, 2), (3, 1), 0), ((3, 2), (3, 2), -2)])
def test_vecdot_broadcasts_the_other_axes_as_numpy(a, b, axis):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(a), rng.standard_normal(b)
    np.testing.assert_allclose(la.vecdot(la.asarray(x), la.asarray(y), axis=axis).numpy(),
                               np.vecdot(x, y, axis=axis), rtol=1e-12)
