"""The decompositions' cuSOLVER/cuBLAS calls (devices/cuda/cusolver_calls.py) on
the CUDA device, over the fake driver and the routines' stand-ins
(devices/stand_ins/cuda_solver_fake.py): cholesky, solve, eigh, eigvalsh, qr, svd and svdvals in all four dtypes,
small (Jacobi, batched) and large (divide and conquer), against NumPy, with gradients and
the errors; det/slogdet (getrfBatched) and solve_triangular (trsmBatched) read back no
whole matrix; and that the stand-ins refuse what cuSOLVER refuses."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.devices.cuda.cuda_solver import solver_context
from lazyarray.devices.stand_ins.cuda_solver_fake import FakeCusolverDn, SolverError

import gradcheck
from test_linalg import COMPLEX_GRADIENTS, GRADIENTS, _phase_fixed

FAKE = "fakecuda"
L = la.linalg
DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _routines() -> dict:
    ctx = solver_context(runtime.get_device(FAKE).device)
    return {**ctx.cusolver.calls, **ctx.cublas.calls}


def _spent(before: dict) -> dict:
    after = _routines()
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def _hermitian(rng, batch: int, n: int, dtype) -> np.ndarray:
    a = rng.standard_normal((batch, n, n))
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal((batch, n, n))
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def _tol(dtype) -> float:
    return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


@pytest.mark.parametrize("n,method", [(5, "j_batched"), (40, "d")])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_eigh_and_eigvalsh_on_cusolver_match_numpy(dtype, n, method):
    s = _hermitian(np.random.default_rng(n), 3, n, dtype)
    x = la.asarray(s, device=FAKE)
    before = _routines()
    w, v = L.eigh(x)
    values = L.eigvalsh(x)
    la.sync(FAKE)
    kind = ("sy" if np.dtype(dtype).kind == "f" else "he") + "ev" + method
    prefix = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[np.dtype(dtype).name]
    assert _spent(before).get(prefix + kind) == (2 if method == "j_batched" else 6)
    wn, vn = np.linalg.eigh(s)
    scale = np.abs(wn).max()
    w, values, v = w.numpy(), values.numpy(), v.numpy()
    assert w.dtype == values.dtype == wn.dtype and v.dtype == np.dtype(dtype)
    np.testing.assert_allclose(w, wn, rtol=_tol(dtype), atol=_tol(dtype) * scale)
    np.testing.assert_allclose(values, wn, rtol=_tol(dtype), atol=_tol(dtype) * scale)
    np.testing.assert_allclose(_phase_fixed(v), _phase_fixed(vn), atol=_tol(dtype) * 50)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_cholesky_and_solve_on_cusolver_match_numpy(dtype):
    rng = np.random.default_rng(1)
    s = _hermitian(rng, 2, 6, dtype)
    b = (rng.standard_normal((2, 6, 3)) * (1 + 1j if np.dtype(dtype).kind == "c" else 1)).astype(dtype)
    before = _routines()
    c, x = L.cholesky(la.asarray(s, device=FAKE)), L.solve(la.asarray(s, device=FAKE),
                                                           la.asarray(b, device=FAKE))
    la.sync(FAKE)
    spent = _spent(before)
    assert any(k.endswith("potrf_batched") for k in spent) and any(k.endswith("getrs_batched") for k in spent)
    tol = _tol(dtype)
    np.testing.assert_allclose(c.numpy(), np.linalg.cholesky(s), rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(s, b), rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("mode", ["reduced", "complete"])
@pytest.mark.parametrize("shape", [(2, 5, 3), (4, 4), (2, 3, 6)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_qr_on_cusolver_matches_numpy(dtype, shape, mode):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
    a = a.astype(dtype)
    before = _routines()
    q, r = L.qr(la.asarray(a, device=FAKE), mode=mode)
    q, r = q.numpy(), r.numpy()
    batch = int(np.prod(shape[:-2]))
    spent = _spent(before)
    assert sum(v for k, v in spent.items() if k.endswith("geqrf")) == batch
    assert sum(v for k, v in spent.items() if k.endswith(("orgqr", "ungqr"))) == batch
    qn, rn = np.linalg.qr(a, mode=mode)
    tol = _tol(dtype)
    np.testing.assert_allclose(q, qn, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(r, rn, rtol=tol, atol=tol * 10)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("shape", [(2, 5, 3), (3, 5), (4, 4)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_svd_and_svdvals_on_cusolver_match_numpy(dtype, shape, full):
    rng = np.random.default_rng(5)
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
    a = a.astype(dtype)
    x = la.asarray(a, device=FAKE)
    before = _routines()
    u, s, vh = (t.numpy() for t in L.svd(x, full_matrices=full))
    values = L.svdvals(x).numpy()
    spent = _spent(before)
    assert sum(v for name, v in spent.items() if name.endswith("gesvdj")) == 2 * int(np.prod(shape[:-2]))
    un, sn, vhn = np.linalg.svd(a, full_matrices=full)
    k, tol = min(shape[-2:]), _tol(dtype)
    assert u.shape == un.shape and vh.shape == vhn.shape and s.dtype == sn.dtype
    np.testing.assert_allclose(s, sn, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(values, sn, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, rtol=tol,
                               atol=tol * 10)
    for got, want in ((u, un), (np.conj(np.swapaxes(vh, -1, -2)), np.conj(np.swapaxes(vhn, -1, -2)))):
        np.testing.assert_allclose(_phase_fixed(got[..., :k]), _phase_fixed(want[..., :k]),
                                   atol=tol * 50)     # full bases beyond k: any orthonormal


@pytest.mark.parametrize("name", ["eigh_vectors", "eigvalsh", "cholesky", "solve",
                                  "det", "slogdet_sign", "slogdet_logabs", "solve_triangular",
                                  "solve_triangular_right", "qr_q_tall", "qr_r_wide", "svdvals", "svd_u_vh", "svd_u_tall"])
def test_complex_gradients_through_cusolver(name):
    fn, inputs = COMPLEX_GRADIENTS[name]
    before = _routines()
    gradcheck.check_complex_direction(fn, inputs, device=FAKE)
    _assert_on_the_device(name, _spent(before))


@pytest.mark.parametrize("name", ["det", "slogdet", "solve_triangular", "solve_triangular_right"])
def test_real_gradients_through_cublas(name):
    fn, inputs = GRADIENTS[name]
    before = _routines()
    gradcheck.check_complex_direction(fn, inputs, device=FAKE)
    _assert_on_the_device(name, _spent(before))


def _assert_on_the_device(name: str, spent: dict) -> None:
    """det/slogdet read U's diagonal back with cuBLAS copy (solve, in their vjp, does not);
    solve_triangular runs trsmBatched."""
    if name.startswith(("det", "slogdet")):
        assert any(k.endswith("copy") for k in spent), spent
    elif name.startswith("solve_triangular"):
        assert any(k.endswith("trsm_batched") for k in spent), spent


def test_real_eigh_gradient_through_cusolver():
    s = _hermitian(np.random.default_rng(2), 1, 4, np.float64)[0]
    gradcheck.check_complex_direction(lambda a: L.eigh(a).eigenvectors ** 2, [s], device=FAKE)


def test_errors_name_the_op_on_cusolver():
    with pytest.raises(la.runtime.SyncError, match=r"cholesky: a matrix of the input \(3, 3\) "
                                                   "is not positive definite"):
        L.cholesky(la.asarray(-np.eye(3), device=FAKE)).numpy()
    la.device(FAKE).pending.clear()
    with pytest.raises(la.runtime.SyncError, match=r"solve: a matrix of the input"):
        L.inv(la.asarray(np.ones((2, 3, 3)), device=FAKE)).numpy()
    la.device(FAKE).pending.clear()


def test_the_stand_in_refuses_jacobi_batches_beyond_32():
    """So that eigh's switch to syevd for larger matrices is tested."""
    cs = FakeCusolverDn()
    with pytest.raises(SolverError, match="n = 33 > 32"):
        cs.ssyevj_batched_buffer_size(cs.create(), 1, 1, 33, 0, 33, 0, cs.create_syevj_info(), 2)


def _random(rng, shape: tuple, dtype) -> np.ndarray:
    a = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if np.dtype(dtype).kind == "c" else 0)
    return a.astype(dtype)


def _host_reads(monkeypatch) -> list:
    """The byte counts of the device-to-host copies made from now on."""
    cu = runtime.get_device(FAKE).device.cu
    sizes, real = [], cu.cuMemcpyDtoHAsync

    def counted(dst, src, nbytes, stream):
        sizes.append(int(nbytes))
        return real(dst, src, nbytes, stream)
    monkeypatch.setattr(cu, "cuMemcpyDtoHAsync", counted)
    return sizes


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_slogdet_and_det_on_cublas_match_numpy_reading_back_no_matrix(dtype, monkeypatch):
    """Batched, with exactly singular matrices (sign 0, log|det| -inf, no error) and pivots;
    only diagonals and pivots (O(n) per matrix) come back before the result is read."""
    n = 8
    a = _random(np.random.default_rng(7), (2, 3, n, n), dtype)
    a[0, 1, 4] = 0                        # a zero row
    a[1, 2, :, 5] = 0                     # a zero column
    a[1, 0] = a[1, 0][::-1]               # a reversal: an odd number of row swaps
    x = la.asarray(a, device=FAKE)
    la.sync(FAKE)
    before, reads = _routines(), _host_reads(monkeypatch)
    sign, logabs = L.slogdet(x)
    d = L.det(x)
    la.sync(FAKE)
    prefix = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[np.dtype(dtype).name]
    assert _spent(before).get(prefix + "getrf_batched")      # one, or one each
    assert reads and max(reads) < n * n * np.dtype(dtype).itemsize     # no whole matrix
    sn, ln = np.linalg.slogdet(a)
    tol = _tol(dtype)
    sign, logabs = sign.numpy(), logabs.numpy()
    assert sign.dtype == sn.dtype and logabs.dtype == ln.dtype
    finite = np.isfinite(ln)
    assert not finite[0, 1] and not finite[1, 2] and np.all(sign[~finite] == 0)
    np.testing.assert_array_equal(logabs[~finite], ln[~finite])
    np.testing.assert_allclose(sign[finite], sn[finite], rtol=tol, atol=tol)
    np.testing.assert_allclose(logabs[finite], ln[finite], rtol=tol, atol=tol)
    np.testing.assert_allclose(d.numpy(), np.linalg.det(a), rtol=tol * 10,
                               atol=tol * np.abs(np.linalg.det(a)).max())


@pytest.mark.parametrize("upper,left", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_solve_triangular_on_cublas_matches_numpy_reading_back_no_matrix(dtype, upper, left,
                                                                        monkeypatch):
    n, k = 6, 3
    rng = np.random.default_rng(11)
    a = _random(rng, (2, n, n), dtype) + 3 * np.eye(n, dtype=dtype)
    b = _random(rng, (2, n, k) if left else (2, k, n), dtype)
    xa, xb = la.asarray(a, device=FAKE), la.asarray(b, device=FAKE)
    la.sync(FAKE)
    before, reads = _routines(), _host_reads(monkeypatch)
    x = L.solve_triangular(xa, xb, upper=upper, left=left)
    la.sync(FAKE)
    prefix = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}[np.dtype(dtype).name]
    assert _spent(before).get(prefix + "trsm_batched") == 1
    assert max(reads, default=0) < n * n * np.dtype(dtype).itemsize    # diagonals at most
    t = np.triu(a) if upper else np.tril(a)
    want = np.linalg.solve(t, b) if left else np.swapaxes(
        np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
    tol = _tol(dtype)
    np.testing.assert_allclose(x.numpy(), want, rtol=tol, atol=tol * 10)


def test_singular_triangular_solve_names_the_op_on_cublas():
    a = np.triu(np.ones((3, 3)))
    a[1, 1] = 0
    before = _routines()
    with pytest.raises(la.runtime.SyncError, match=r"triangular_solve: a matrix of the input "
                                                   r"\(3, 3\) is singular"):
        L.solve_triangular(la.asarray(a, device=FAKE), la.asarray(np.ones((3, 2)), device=FAKE),
                           upper=True).numpy()
    la.device(FAKE).pending.clear()
    assert _spent(before).get("dcopy") == 1          # refused from the diagonal, on the device
