"""Stand-ins for the cuBLAS and cuSOLVER routines the decompositions' CUDA calls use
(devices/cuda/cusolver_calls.py), over the fake CUDA driver (cuda_fake.py), so that
those calls run on machines without a GPU against NumPy, as nccl_fake.py and
cuda_fft_fake.py do for NCCL and cuFFT.

They have the names and arguments of nvmath-python's `nvmath.bindings.cublas` and
`nvmath.bindings.cusolverDn` (cuBLAS's and cuSOLVER's C functions one to one: a prefix
s/d/c/z, addresses as ints, a buffer size returned), read matrices column-major as the
libraries do, run queued on the handle's stream (pointer arrays and matrices are read
when the stream runs), and refuse what the libraries refuse where the calls could get it
wrong: a size syevjBatched does not take (n > 32), a work area smaller than asked for,
memory outside a live allocation. A refused call raises `SolverError`, as nvmath's
bindings raise on a failed status.
"""
from __future__ import annotations

import ctypes
import itertools
from typing import Any

import numpy as np

from .cuda_fake import FAKE_DRIVER, FakeDriver

_DTYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
SYEVJ_BATCHED_MAX_N = 32
OP_N, OP_T, OP_C = 0, 1, 2
FILL_LOWER, FILL_UPPER = 0, 1
SIDE_LEFT, SIDE_RIGHT = 0, 1
DIAG_NON_UNIT, DIAG_UNIT = 0, 1


class SolverError(RuntimeError):
    """A call the real library would refuse (nvmath raises cuSOLVERError/cuBLASError)."""


class _Library:
    """Handles bound to fake streams; memory seen through the fake driver."""

    def __init__(self, driver: FakeDriver = FAKE_DRIVER) -> None:
        self.driver = driver
        self.streams: dict = {}
        self._ids = itertools.count(0x5000)
        self.calls: dict = {}             # routine -> count (tests read it)

    def create(self) -> int:
        handle = next(self._ids)
        self.streams[handle] = None
        return handle

    def set_stream(self, handle: int, stream: int) -> None:
        found = [s for s in self.driver._streams if int(s) == int(stream)]
        if not found:
            raise SolverError(f"set_stream: {stream} is not a stream")
        self.streams[handle] = found[0]

    def _queue(self, handle: int, name: str, work: Any) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        stream = self.streams.get(handle)
        if stream is None:
            raise SolverError(f"{name}: the handle has no stream (the device binds its own)")
        self.driver._enqueue(stream, name, work)

    def _matrix(self, ptr: int, dtype: Any, ld: int, rows: int, cols: int, what: str) -> np.ndarray:
        """The column-major rows x cols matrix at `ptr` (leading dimension `ld`), writable."""
        item = np.dtype(dtype).itemsize
        if ld < max(1, rows):
            raise SolverError(f"{what}: leading dimension {ld} < {rows} rows")
        nbytes = ((cols - 1) * ld + rows) * item if rows and cols else 0
        if nbytes:
            self.driver._check_device(ptr, nbytes, what)
        flat = np.frombuffer((ctypes.c_char * max(nbytes, 1)).from_address(ptr), dtype,
                             count=nbytes // item)
        return np.lib.stride_tricks.as_strided(flat, (rows, cols), (item, ld * item))

    def _vector(self, ptr: int, dtype: Any, count: int, what: str, step: int = 1) -> np.ndarray:
        item = np.dtype(dtype).itemsize
        nbytes = ((count - 1) * step + 1) * item if count else 0
        if nbytes:
            self.driver._check_device(ptr, nbytes, what)
        flat = np.frombuffer((ctypes.c_char * max(nbytes, 1)).from_address(ptr), dtype,
                             count=nbytes // item)
        return flat[::step]

    def _pointers(self, ptr: int, count: int, what: str) -> list:
        return [int(p) for p in self._vector(ptr, np.uint64, count, what)]


def _op(m: np.ndarray, trans: int) -> np.ndarray:
    return m if trans == OP_N else (m.T if trans == OP_T else np.conj(m.T))


def _hermitian(m: np.ndarray, uplo: int) -> np.ndarray:
    """The Hermitian matrix whose `uplo` triangle `m` holds (the other is not read)."""
    tri = np.triu(m) if uplo == FILL_UPPER else np.tril(m)
    off = np.triu(m, 1) if uplo == FILL_UPPER else np.tril(m, -1)
    return tri + np.conj(off.T)


def _packed_index(n: int, uplo: int) -> tuple:
    """(rows, cols) of a triangle in cuBLAS's column-major packed order."""
    if uplo == FILL_UPPER:
        pairs = [(i, j) for j in range(n) for i in range(j + 1)]
    else:
        pairs = [(i, j) for j in range(n) for i in range(j, n)]
    return tuple(np.array(p, np.intp) for p in zip(*pairs)) if pairs else (np.zeros(0, np.intp),) * 2


class FakeCublasRoutines(_Library):
    """nvmath.bindings.cublas's geam, trttp, tpttr, getrfBatched, getrsBatched, trsmBatched
    and copy."""

    def _geam(self, dtype: Any, name: str, handle: int, transa: int, transb: int, m: int,
              n: int, alpha: int, a: int, lda: int, beta: int, b: int, ldb: int, c: int,
              ldc: int) -> None:
        al, be = (np.frombuffer(ctypes.string_at(p, np.dtype(dtype).itemsize), dtype)[0]
                  for p in (alpha, beta))
        shape_a = (m, n) if transa == OP_N else (n, m)
        shape_b = (m, n) if transb == OP_N else (n, m)

        def run() -> None:
            out = al * _op(self._matrix(a, dtype, lda, *shape_a, name), transa)
            if be != 0:
                out = out + be * _op(self._matrix(b, dtype, ldb, *shape_b, name), transb)
            self._matrix(c, dtype, ldc, m, n, name)[...] = out
        self._queue(handle, name, run)

    def _trttp(self, dtype: Any, name: str, handle: int, uplo: int, n: int, a: int, lda: int,
               ap: int) -> None:
        def run() -> None:
            self._vector(ap, dtype, n * (n + 1) // 2, name)[...] = \
                self._matrix(a, dtype, lda, n, n, name)[_packed_index(n, uplo)]
        self._queue(handle, name, run)

    def _tpttr(self, dtype: Any, name: str, handle: int, uplo: int, n: int, ap: int, a: int,
               lda: int) -> None:
        def run() -> None:
            self._matrix(a, dtype, lda, n, n, name)[_packed_index(n, uplo)] = \
                self._vector(ap, dtype, n * (n + 1) // 2, name)
        self._queue(handle, name, run)

    def _getrf_batched(self, dtype: Any, name: str, handle: int, n: int, a_array: int, lda: int,
                       pivots: int, info: int, batch: int) -> None:
        def run() -> None:
            for i, ptr in enumerate(self._pointers(a_array, batch, name)):
                m = self._matrix(ptr, dtype, lda, n, n, name)
                piv, bad = _lu_in_place(m)
                self._vector(pivots + i * n * 4, np.int32, n, name)[...] = piv
                self._vector(info + i * 4, np.int32, 1, name)[0] = bad
        self._queue(handle, name, run)

    def _getrs_batched(self, dtype: Any, name: str, handle: int, trans: int, n: int, nrhs: int,
                       a_array: int, lda: int, pivots: int, b_array: int, ldb: int,
                       info: int, batch: int) -> None:
        ctypes.c_int.from_address(info).value = 0          # argument check: on the host, now

        def run() -> None:
            lus = self._pointers(a_array, batch, name)
            rhs = self._pointers(b_array, batch, name)
            for i, (pa, pb) in enumerate(zip(lus, rhs)):
                a = _lu_product(self._matrix(pa, dtype, lda, n, n, name),
                                self._vector(pivots + i * n * 4, np.int32, n, name))
                b = self._matrix(pb, dtype, ldb, n, nrhs, name)
                b[...] = np.linalg.solve(_op(a, trans), b)
        self._queue(handle, name, run)

    def _trsm_batched(self, dtype: Any, name: str, handle: int, side: int, uplo: int,
                      trans: int, diag: int, m: int, n: int, alpha: int, a_array: int,
                      lda: int, b_array: int, ldb: int, batch: int) -> None:
        """op(A) X = alpha B (left) or X op(A) = alpha B (right), X over B; A's `uplo`
        triangle (the other is not read), its diagonal ones if diag is unit."""
        al = np.frombuffer(ctypes.string_at(alpha, np.dtype(dtype).itemsize), dtype)[0]
        size = m if side == SIDE_LEFT else n

        def run() -> None:
            for pa, pb in zip(self._pointers(a_array, batch, name),
                              self._pointers(b_array, batch, name)):
                m_a = self._matrix(pa, dtype, lda, size, size, name)
                t = np.triu(m_a) if uplo == FILL_UPPER else np.tril(m_a)
                if diag == DIAG_UNIT:
                    np.fill_diagonal(t, 1)
                t = _op(t, trans)
                rhs = self._matrix(pb, dtype, ldb, m, n, name)
                with np.errstate(all="ignore"):     # a zero pivot gives inf/nan, as cuBLAS
                    x = (np.linalg.solve(t, al * rhs) if side == SIDE_LEFT
                         else np.linalg.solve(t.T, (al * rhs).T).T)
                rhs[...] = x
        self._queue(handle, name, run)

    def _copy(self, dtype: Any, name: str, handle: int, n: int, x: int, incx: int, y: int,
              incy: int) -> None:
        def run() -> None:
            self._vector(y, dtype, n, name, incy)[...] = self._vector(x, dtype, n, name, incx)
        self._queue(handle, name, run)


class FakeCusolverDn(_Library):
    """nvmath.bindings.cusolverDn's potrfBatched, syevjBatched/heevjBatched, syevd/heevd,
    geqrf, orgqr/ungqr and gesvdj."""

    def create_syevj_info(self) -> int:
        return next(self._ids)

    def destroy_syevj_info(self, params: int) -> None:
        pass

    create_gesvdj_info, destroy_gesvdj_info = create_syevj_info, destroy_syevj_info

    def _potrf_batched(self, dtype: Any, name: str, handle: int, uplo: int, n: int,
                       a_array: int, lda: int, info: int, batch: int) -> None:
        def run() -> None:
            for i, ptr in enumerate(self._pointers(a_array, batch, name)):
                m = self._matrix(ptr, dtype, lda, n, n, name)
                bad = _first_not_definite(_hermitian(m, uplo))
                self._vector(info + i * 4, np.int32, 1, name)[0] = bad
                if not bad:
                    low = np.linalg.cholesky(_hermitian(m, uplo))
                    tri = np.triu_indices(n) if uplo == FILL_UPPER else np.tril_indices(n)
                    m[tri] = (np.conj(low.T) if uplo == FILL_UPPER else low)[tri]
        self._queue(handle, name, run)

    def _evj_batched_buffer_size(self, dtype: Any, name: str, handle: int, jobz: int,
                                 uplo: int, n: int, a: int, lda: int, w: int, params: int,
                                 batch: int) -> int:
        if n > SYEVJ_BATCHED_MAX_N:
            raise SolverError(f"{name}: n = {n} > {SYEVJ_BATCHED_MAX_N} (CUSOLVER_STATUS_INVALID_VALUE)")
        return 2 * n * n * batch

    def _evj_batched(self, dtype: Any, name: str, handle: int, jobz: int, uplo: int, n: int,
                     a: int, lda: int, w: int, work: int, lwork: int, info: int, params: int,
                     batch: int) -> None:
        need = self._evj_batched_buffer_size(dtype, name, handle, jobz, uplo, n, a, lda, w,
                                             params, batch)
        self._eig(dtype, name, handle, jobz, uplo, n, a, lda, w, work, lwork, info, batch, need)

    def _evd_buffer_size(self, dtype: Any, name: str, handle: int, jobz: int, uplo: int, n: int,
                         a: int, lda: int, w: int) -> int:
        return 2 * n * n + 1

    def _evd(self, dtype: Any, name: str, handle: int, jobz: int, uplo: int, n: int, a: int,
             lda: int, w: int, work: int, lwork: int, info: int) -> None:
        self._eig(dtype, name, handle, jobz, uplo, n, a, lda, w, work, lwork, info, 1,
                  2 * n * n + 1)

    def _eig(self, dtype: Any, name: str, handle: int, jobz: int, uplo: int, n: int, a: int,
             lda: int, w: int, work: int, lwork: int, info: int, batch: int, need: int) -> None:
        if lwork < need:
            raise SolverError(f"{name}: lwork {lwork} < {need} (CUSOLVER_STATUS_INVALID_VALUE)")
        real = np.zeros(0, dtype).real.dtype

        def run() -> None:
            self._vector(work, dtype, need, f"{name} work")        # the work area is live
            for i in range(batch):
                m = self._matrix(a + i * lda * n * np.dtype(dtype).itemsize, dtype, lda, n, n, name)
                vals, vecs = np.linalg.eigh(_hermitian(m, uplo))
                self._vector(w + i * n * real.itemsize, real, n, name)[...] = vals
                if jobz:
                    m[...] = vecs
                self._vector(info + i * 4, np.int32, 1, name)[0] = 0
        self._queue(handle, name, run)



    def _geqrf_buffer_size(self, dtype: Any, name: str, handle: int, m: int, n: int, a: int,
                           lda: int) -> int:
        return max(1, n)


    def _geqrf(self, dtype: Any, name: str, handle: int, m: int, n: int, a: int, lda: int,
               tau: int, work: int, lwork: int, info: int) -> None:
        if lwork < max(1, n):
            raise SolverError(f"{name}: lwork {lwork} < {n}")

        def run() -> None:
            self._vector(work, dtype, lwork, f"{name} work")
            mat = self._matrix(a, dtype, lda, m, n, name)
            self._vector(tau, dtype, min(m, n), name)[...] = _householder_qr(mat)
            self._vector(info, np.int32, 1, name)[0] = 0
        self._queue(handle, name, run)


    def _orgqr_buffer_size(self, dtype: Any, name: str, handle: int, m: int, n: int, k: int,
                           a: int, lda: int, tau: int) -> int:
        return max(1, n)


    def _orgqr(self, dtype: Any, name: str, handle: int, m: int, n: int, k: int, a: int,
               lda: int, tau: int, work: int, lwork: int, info: int) -> None:
        if not m >= n >= k >= 0 or lwork < max(1, n):
            raise SolverError(f"{name}: needs m >= n >= k and lwork >= n (got {m}, {n}, {k}, {lwork})")

        def run() -> None:
            self._vector(work, dtype, lwork, f"{name} work")
            mat = self._matrix(a, dtype, lda, m, n, name)
            _householder_q(mat, np.array(self._vector(tau, dtype, k, name)), n)
            self._vector(info, np.int32, 1, name)[0] = 0
        self._queue(handle, name, run)


    def _gesvdj_buffer_size(self, dtype: Any, name: str, handle: int, jobz: int, econ: int,
                            m: int, n: int, a: int, lda: int, s: int, u: int, ldu: int, v: int,
                            ldv: int, params: int) -> int:
        return max(1, m * n)


    def _gesvdj(self, dtype: Any, name: str, handle: int, jobz: int, econ: int, m: int, n: int,
                a: int, lda: int, s: int, u: int, ldu: int, v: int, ldv: int, work: int, lwork: int,
                info: int, params: int) -> None:
        """A = U S V^H (V, not V^H, as gesvdj returns it); econ: min(m, n) columns each."""
        if lwork < max(1, m * n):
            raise SolverError(f"{name}: lwork {lwork} < {m * n}")
        real = np.zeros(0, dtype).real.dtype
        k = min(m, n)

        def run() -> None:
            self._vector(work, dtype, lwork, f"{name} work")
            mat = np.array(self._matrix(a, dtype, lda, m, n, name))
            uu, ss, vh = np.linalg.svd(mat, full_matrices=not econ)
            self._vector(s, real, k, name)[...] = ss
            if jobz:
                self._matrix(u, dtype, ldu, m, uu.shape[1], name)[...] = uu
                self._matrix(v, dtype, ldv, n, vh.shape[0], name)[...] = np.conj(vh.T)
            self._vector(info, np.int32, 1, name)[0] = 0
        self._queue(handle, name, run)


def _bind(cls: type, routine: str, impl: str, prefixes: str) -> None:
    """cls.<prefix><routine> for each prefix: `impl` with the prefix's dtype and name."""
    def make(prefix: str) -> Any:
        dtype, name = _DTYPES[prefix], prefix + routine
        return lambda self, *args: getattr(self, impl)(dtype, name, *args)
    for prefix in prefixes:
        setattr(cls, prefix + routine, make(prefix))


for _routine, _impl in (("geam", "_geam"), ("trttp", "_trttp"), ("tpttr", "_tpttr"),
                        ("getrf_batched", "_getrf_batched"), ("getrs_batched", "_getrs_batched"),
                        ("trsm_batched", "_trsm_batched"), ("copy", "_copy")):
    _bind(FakeCublasRoutines, _routine, _impl, "sdcz")
_bind(FakeCusolverDn, "potrf_batched", "_potrf_batched", "sdcz")
for _kind, _prefixes in (("syev", "sd"), ("heev", "cz")):
    _bind(FakeCusolverDn, _kind + "j_batched_buffer_size", "_evj_batched_buffer_size", _prefixes)
    _bind(FakeCusolverDn, _kind + "j_batched", "_evj_batched", _prefixes)
    _bind(FakeCusolverDn, _kind + "d_buffer_size", "_evd_buffer_size", _prefixes)
    _bind(FakeCusolverDn, _kind + "d", "_evd", _prefixes)

_bind(FakeCusolverDn, "geqrf_buffer_size", "_geqrf_buffer_size", "sdcz")
_bind(FakeCusolverDn, "geqrf", "_geqrf", "sdcz")
_bind(FakeCusolverDn, "gesvdj_buffer_size", "_gesvdj_buffer_size", "sdcz")
_bind(FakeCusolverDn, "gesvdj", "_gesvdj", "sdcz")
for _kind, _prefixes in (("or", "sd"), ("un", "cz")):
    _bind(FakeCusolverDn, _kind + "gqr_buffer_size", "_orgqr_buffer_size", _prefixes)
    _bind(FakeCusolverDn, _kind + "gqr", "_orgqr", _prefixes)

# ---- the factorizations, in NumPy --------------------------------------------------------

def _lu_in_place(m: np.ndarray) -> tuple:
    """LAPACK's getrf on `m` in place: (1-based pivots, info: first zero pivot or 0)."""
    n = m.shape[0]
    piv = np.zeros(n, np.int32)
    bad = 0
    for k in range(n):
        p = k + int(np.argmax(np.abs(m[k:, k])))
        piv[k] = p + 1
        if p != k:
            m[[k, p], :] = m[[p, k], :]
        if m[k, k] == 0:
            bad = bad or k + 1
            continue
        m[k + 1:, k] /= m[k, k]
        m[k + 1:, k + 1:] -= np.outer(m[k + 1:, k], m[k, k + 1:])
    return piv, bad


def _lu_product(lu: np.ndarray, piv: np.ndarray) -> np.ndarray:
    """The matrix getrf factored: P L U, the row swaps undone in reverse order."""
    a = (np.tril(lu, -1) + np.eye(lu.shape[0], dtype=lu.dtype)) @ np.triu(lu)
    for k in range(lu.shape[0] - 1, -1, -1):
        p = int(piv[k]) - 1
        if p != k:
            a[[k, p], :] = a[[p, k], :]
    return a


def _first_not_definite(a: np.ndarray) -> int:
    """potrf's info: the order of the first leading minor that is not positive definite."""
    try:
        np.linalg.cholesky(a)
        return 0
    except np.linalg.LinAlgError:
        pass
    for k in range(1, a.shape[0] + 1):
        try:
            np.linalg.cholesky(a[:k, :k])
        except np.linalg.LinAlgError:
            return k
    return 0


def _householder_qr(a: np.ndarray) -> np.ndarray:
    """LAPACK's geqrf on `a` (m x n) in place: R on and above the diagonal, the reflectors'
    vectors below it (v_0 = 1 implied); returns tau. H_i = I - tau_i v v^H, and
    Q = H_0 H_1 ... H_{k-1}, as zlarfg defines them (R's diagonal is real)."""
    m, n = a.shape
    tau = np.zeros(min(m, n), a.dtype)
    for i in range(min(m, n)):
        alpha, x = a[i, i], a[i + 1:, i]
        xnorm = np.linalg.norm(x)
        if xnorm == 0 and np.imag(alpha) == 0:
            continue                                   # H = I
        beta = -np.copysign(np.linalg.norm(np.r_[alpha, x]), np.real(alpha))
        tau[i] = (beta - alpha) / beta
        a[i + 1:, i] = x / (alpha - beta)
        a[i, i] = beta
        v = np.r_[np.ones(1, a.dtype), a[i + 1:, i]]
        rest = a[i:, i + 1:]                           # apply H^H from the left
        rest -= np.conj(tau[i]) * np.outer(v, np.conj(v) @ rest)
    return tau


def _householder_q(a: np.ndarray, tau: np.ndarray, cols: int) -> None:
    """LAPACK's orgqr / ungqr: the first `cols` columns of Q from geqrf's reflectors."""
    m = a.shape[0]
    q = np.eye(m, cols, dtype=a.dtype)
    for i in range(len(tau) - 1, -1, -1):
        v = np.r_[np.zeros(i, a.dtype), np.ones(1, a.dtype), a[i + 1:, i]]
        q -= tau[i] * np.outer(v, np.conj(v) @ q)
    a[:, :cols] = q
