"""The CPU's decompositions as generated calls of SciPy's LAPACK (compiler/codegen/
lapack_kernels.py, devices/cpu/lapack.py): each stanza's kernel against NumPy's own
numpy.linalg (the stanza's reference packs NumPy's results), batched and split over
threads, its failures as errors naming the op, shape and matrix, and the NumPy fallback
when SciPy is absent (simulated)."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.compiler.program import LibraryStep
from lazyarray.compiler.primitive import PRIMITIVES
from lazyarray.devices.cpu import lapack
from lazyarray.devices.cpu.cpu import CPUDevice

pytest.importorskip("scipy.linalg.cython_lapack", reason="SciPy (the linalg extra) is not "
                    "installed: decompositions run on NumPy's LAPACK (tested below)")

DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
rng = np.random.default_rng(7)


def _device(threads: int = 2) -> CPUDevice:
    return CPUDevice(lambda: {"num_threads": threads, "cache_dir": "off"})


def _spd(batch: tuple, n: int, dtype) -> np.ndarray:
    a = _normal(batch + (n, n), dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


def _lower_read(batch: tuple, n: int, dtype) -> np.ndarray:
    """Hermitian positive definite in its lower triangle, noise above it: cholesky and
    eigh read the lower triangle only (NumPy's reference does the same)."""
    return (_spd(batch, n, dtype) + np.triu(_normal(batch + (n, n), dtype), 1)).astype(dtype)


def _normal(shape: tuple, dtype) -> np.ndarray:
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


def _general(batch: tuple, n: int, dtype) -> np.ndarray:
    return (_normal(batch + (n, n), dtype) + n * np.eye(n)).astype(dtype)


# op -> (attrs, inputs(batch, dtype))
CASES = {
    "cholesky": [({}, lambda b, t: [_lower_read(b, 5, t)])],
    "solve": [({}, lambda b, t: [_general(b, 4, t), _normal(b + (4, 3), t)]),
              ({}, lambda b, t: [_general(b, 4, t), _normal(b + (4, 1), t)])],
    "triangular_solve": [({"lower": lo, "adjoint": adj},
                          lambda b, t: [_general(b, 4, t), _normal(b + (4, 2), t)])
                         for lo in (True, False) for adj in (False, True)],
    "slogdet": [({}, lambda b, t: [_general(b, 4, t) * -1])],
    "eigh": [({"vectors": v}, lambda b, t: [_lower_read(b, 5, t)]) for v in (True, False)],
    "svd": [({"full_matrices": f, "compute_uv": c}, lambda b, t, s=s: [_normal(b + s, t)])
            for s in ((5, 3), (3, 5), (4, 4)) for f, c in ((False, True), (True, True),
                                                          (False, False))],
    "qr": [({"complete": c}, lambda b, t, s=s: [_normal(b + s, t)])
           for s in ((5, 3), (3, 5)) for c in (False, True)],
}
PARAMS = [(op, k) for op, cases in CASES.items() for k in range(len(cases))]


def _module(op: str, attrs: dict, inputs: list) -> Module:
    params = [I("parameter", (), x.shape, D.from_numpy(x.dtype), {"number": k})
              for k, x in enumerate(inputs)]
    shape, dtype = PRIMITIVES[op].infer(tuple(params), **attrs)
    return Module(op, params + [I(op, tuple(range(len(inputs))), shape, dtype, attrs)],
                  [len(inputs)])


def _phases(cols: np.ndarray) -> np.ndarray:
    """Each column's phase (sign, for reals) at its largest entry."""
    idx = np.argmax(np.abs(cols), axis=-2)[..., None, :]
    p = np.take_along_axis(cols, idx, axis=-2)
    return p / np.where(np.abs(p) == 0, 1, np.abs(p))


def _canonical(op: str, attrs: dict, packed: np.ndarray, inputs: list) -> list:
    """Eigen- and singular vectors are unique up to a phase per column (two LAPACK builds
    may pick other signs): each column turned positive at its largest entry (a singular
    pair together); a full U's or V's extra columns, any basis of a complement, compared
    as their projector."""
    x = np.array(packed)
    out = []
    if op == "eigh" and attrs["vectors"]:
        x[..., 1:, :] /= _phases(x[..., 1:, :])
    if op == "svd" and attrs["compute_uv"]:
        m, n = inputs[0].shape[-2:]
        k = min(m, n)
        ph = _phases(x[..., :m, :k])
        x[..., :m, :k] /= ph
        x[..., m + 1:, :k] /= ph
        for lo, hi in ((0, m), (m + 1, m + 1 + n)):
            extra = x[..., lo:hi, k:]
            out.append(extra @ np.conj(np.swapaxes(extra, -1, -2)))
            x[..., lo:hi, k:] = 0
    return [x] + out


def _tolerance(dtype) -> float:
    return 2e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10


def _check(op: str, k: int, batch: tuple, dtype, threads: int = 2, lapack_steps: bool = True):
    attrs, make = CASES[op][k]
    inputs = make(batch, dtype)
    exe = _device(threads).compile(_module(op, attrs, inputs))
    assert (len(exe._lapack) == 1) == lapack_steps, exe.steps
    got = exe.run(inputs)[0]
    want = PRIMITIVES[op].reference(*inputs, **attrs)      # numpy.linalg's results, packed
    assert got.dtype == want.dtype and got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    for g, w in zip(_canonical(op, attrs, got, inputs), _canonical(op, attrs, want, inputs)):
        np.testing.assert_allclose(g, w, rtol=0, atol=_tolerance(dtype) * scale,
                                   err_msg=f"{op} {attrs} batch {batch}")
    return exe


@pytest.mark.parametrize("op,k", PARAMS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_lapack_kernel_matches_numpy(op: str, k: int, dtype) -> None:
    for batch in ((), (3,), (2, 2)):
        _check(op, k, batch, dtype)


@pytest.mark.parametrize("op,attrs", [("cholesky", {}), ("eigh", {"vectors": True}),
                                      ("svd", {"full_matrices": False, "compute_uv": True})])
def test_a_large_batch_splits_over_threads_and_matches(op: str, attrs: dict) -> None:
    a = _spd((96,), 16, np.float64)
    exe = _device(3).compile(_module(op, attrs, [a]))
    step = next(s for s in exe.steps if getattr(s, "lapack", None) is not None)
    assert len(exe._split(step, 3)) > 1, "the batch was not split"
    got, want = exe.run([a])[0], PRIMITIVES[op].reference(a, **attrs)
    for g, w in zip(_canonical(op, attrs, got, [a]), _canonical(op, attrs, want, [a])):
        np.testing.assert_allclose(g, w, atol=1e-9)


def test_without_scipy_numpy_serves_the_same_ops(monkeypatch) -> None:
    monkeypatch.setattr(lapack, "addresses", lambda names: None)
    for op, k in PARAMS:
        _check(op, k, (2,), np.float64, lapack_steps=False)


def test_singular_matrix_in_a_batch_names_op_shape_and_matrix() -> None:
    a = _general((2, 3), 4, np.float64)
    a[1, 2] = 0.0                       # matrix (1, 2) is singular
    b = _normal((2, 3, 4, 2), np.float64)
    exe = _device().compile(_module("solve", {}, [a, b]))
    with pytest.raises(np.linalg.LinAlgError, match=r"solve: a matrix of the input \(2, 3, 4, "
                                                    r"4\) is singular \(matrix \(1, 2\), "
                                                    r"LAPACK dgetrf info=1\)"):
        exe.run([a, b])
    good = _general((2, 3), 4, np.float64)          # the record is cleared by the raise
    np.testing.assert_allclose(exe.run([good, b])[0], np.linalg.solve(good, b), atol=1e-10)


def test_indefinite_matrix_names_cholesky() -> None:
    a = -np.eye(3)[None].repeat(2, 0)
    exe = _device().compile(_module("cholesky", {}, [a]))
    with pytest.raises(np.linalg.LinAlgError, match=r"cholesky: a matrix of the input \(2, 3, 3\) "
                                                    "is not positive definite"):
        exe.run([a])


def test_singular_slogdet_is_sign_zero_and_minus_infinity_as_numpy() -> None:
    a = np.stack([np.ones((3, 3)), np.eye(3) * -2])
    got = _device().compile(_module("slogdet", {}, [a])).run([a])[0]
    sign, logabs = np.linalg.slogdet(a)
    np.testing.assert_array_equal(got[:, 0], sign)
    np.testing.assert_allclose(got[:, 1], logabs)


def test_routines_are_scipy_cython_lapack_entry_points() -> None:
    from scipy.linalg import cython_lapack
    assert lapack.address("dpotrf") and lapack.address("zgesdd")
    assert lapack.addresses(["dpotrf", "no_such_routine"]) is None
    assert "dpotrf" in cython_lapack.__pyx_capi__


def test_blas_is_held_to_one_thread_while_a_lapack_program_runs_then_restored() -> None:
    from lazyarray.devices.cpu.cpu import calls_blas
    from lazyarray.devices.cpu.blas_threads import BLAS_THREADS, blas_single_threaded
    assert lapack.available()                  # SciPy's OpenBLAS loaded and looked up
    controls = BLAS_THREADS.controls()
    before = [get() for get, _ in controls]
    with blas_single_threaded():
        assert [get() for get, _ in controls] == [1] * len(controls)
    assert [get() for get, _ in controls] == before
    a = _spd((2,), 4, np.float64)
    exe = _device().compile(_module("cholesky", {}, [a]))
    assert exe._uses_blas and all(calls_blas(s) for s in exe.steps)
    fft = LibraryStep(call="host", op="fft", pos=1, operands=[0])
    assert not calls_blas(fft)                 # pocketfft: BLAS keeps its threads


def test_a_program_from_the_disk_cache_binds_its_lapack_tables_again(tmp_path) -> None:
    """Object code in the cache holds no address: the loading device fills the tables."""
    a = _general((3,), 5, np.complex128)
    b = _normal((3, 5, 2), np.complex128)
    device = CPUDevice(lambda: {"num_threads": 1, "cache_dir": str(tmp_path)})
    first = device.compile(_module("solve", {}, [a, b]))
    again = device.compile(_module("solve", {}, [a, b]))
    assert not first.from_disk_cache and again.from_disk_cache and len(again._lapack) == 1
    np.testing.assert_allclose(again.run([a, b])[0], np.linalg.solve(a, b), atol=1e-10)
