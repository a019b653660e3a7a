"""cuSOLVER / cuBLAS calls for the decompositions' stanzas on the CUDA target: `CALLS`
(primitive name -> call) is what the CUDA device tries before a stanza's host reference,
registered here for this target as JAX registers a lowering per platform (the compiler
knows nothing of them).

UNVERIFIED on a GPU: written against nvmath-python's `nvmath.bindings.cusolverDn` and
`nvmath.bindings.cublas` (cuSOLVER's and cuBLAS's C APIs one to one); no GPU has run them.
Without a GPU they run against the stand-ins of devices/stand_ins/cuda_solver_fake.py (same names
and arguments, NumPy on the fake driver's memory; tests/test_cuda_solver.py). A stanza without an entry, or a call that returns False,
runs its NumPy reference on host copies (what the CUDA device does for library ops).

A call is `fn(ctx, ins, out, operands) -> bool`. `ctx` is lent by the CUDA device
(devices/cuda/cuda_solver.py): `cusolver`, `cusolver_handle`, `cublas`, `cublas_handle`,
`zeros(shape, np_dtype)` and `put(array)` (device buffers with `.ptr`), `get(buffer)`,
`copy(src, dst)` (device to device), `synchronize()`. `ins` is the instruction, `out`
and `operands` device buffers.

Row-major data read column-major is the transpose: a row-major lower triangle is the
column-major upper one; cuBLAS's geam (C = alpha op(A) + beta op(B)) transposes.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...compiler.hlo import dtypes as D

FILL_LOWER, FILL_UPPER = 0, 1           # cublasFillMode_t
OP_N, OP_T, OP_C = 0, 1, 2              # cublasOperation_t
EIG_MODE_NOVECTOR, EIG_MODE_VECTOR = 0, 1   # cusolverEigMode_t

_PREFIX = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}


def _fn(lib: Any, name: str, dtype: Any) -> Any:
    """lib.<prefix><name>, e.g. cusolverDn.dpotrf_batched (`dtype` a dtype or its name)."""
    return getattr(lib, _PREFIX[getattr(dtype, "name", dtype)] + name)


def _batch(shape: tuple) -> int:
    return int(np.prod(shape[:-2], dtype=np.int64))


def _pointers(ctx: Any, base: int, count: int, stride: int) -> Any:
    return ctx.put(np.array([base + i * stride for i in range(count)], np.uint64))


def _check_info(ctx: Any, info: Any, op: str, shape: tuple, what: str) -> None:
    if np.any(np.asarray(ctx.get(info)).reshape(-1) != 0):
        raise np.linalg.LinAlgError(f"{op}: a matrix of the input {shape} {what}")


def _scalars(dtype: Any) -> tuple:
    return np.ones((), dtype.np), np.zeros((), dtype.np)


def _transpose(ctx: Any, dtype: Any, src: int, dst: int, rows: int, cols: int,
               ld_dst: int = 0, op: int = OP_T) -> None:
    """dst (column-major cols x rows, leading dim ld_dst) = src^T (src^H with op=OP_C), src
    column-major rows x cols: the row-major reading of each is the other's transpose."""
    one, zero = _scalars(dtype)
    _fn(ctx.cublas, "geam", dtype)(ctx.cublas_handle, op, OP_N, cols, rows, one.ctypes.data,
                                   src, rows, zero.ctypes.data, dst, ld_dst or cols, dst,
                                   ld_dst or cols)        # C = B in place: ldb = ldc


def cholesky(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """potrfBatched on a copy (row-major lower = column-major upper), then each factor's
    triangle moved into zeroed memory through the packed format (trttp / tpttr)."""
    (a,) = operands
    n, batch, item = ins.shape[-1], _batch(ins.shape), ins.dtype.itemsize
    if n == 0 or batch == 0:
        return False
    work = ctx.zeros(ins.shape, ins.dtype.np)
    ctx.copy(a, work)
    ptrs = _pointers(ctx, work.ptr, batch, n * n * item)
    info = ctx.zeros((batch,), np.int32)
    _fn(ctx.cusolver, "potrf_batched", ins.dtype)(ctx.cusolver_handle, FILL_UPPER, n, ptrs.ptr,
                                                  n, info.ptr, batch)
    _check_info(ctx, info, "cholesky", ins.shape, "is not positive definite")
    zero = ctx.zeros(ins.shape, ins.dtype.np)
    ctx.copy(zero, out)
    packed = ctx.zeros((n * (n + 1) // 2,), ins.dtype.np)
    for i in range(batch):
        off = i * n * n * item
        _fn(ctx.cublas, "trttp", ins.dtype)(ctx.cublas_handle, FILL_UPPER, n, work.ptr + off, n,
                                            packed.ptr)
        _fn(ctx.cublas, "tpttr", ins.dtype)(ctx.cublas_handle, FILL_UPPER, n, packed.ptr,
                                            out.ptr + off, n)
    ctx.synchronize()
    return True


def solve(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """cuBLAS's batched LU (getrfBatched, getrsBatched). Column-major we hold a^T: getrs
    with trans=T solves a x = b; the right sides are made column-major (b^T per matrix)
    and the solution transposed back."""
    a, b = operands
    n, k, batch, item = ins.shape[-2], ins.shape[-1], _batch(ins.shape), ins.dtype.itemsize
    if n == 0 or k == 0 or batch == 0:
        return False
    lu = ctx.zeros(ins.shape[:-2] + (n, n), ins.dtype.np)
    ctx.copy(a, lu)
    rhs = ctx.zeros(ins.shape, ins.dtype.np)
    for i in range(batch):           # row-major n x k -> column-major n x k
        _transpose(ctx, ins.dtype, b.ptr + i * n * k * item, rhs.ptr + i * n * k * item, k, n)
    lu_ptrs = _pointers(ctx, lu.ptr, batch, n * n * item)
    rhs_ptrs = _pointers(ctx, rhs.ptr, batch, n * k * item)
    pivots = ctx.zeros((batch, n), np.int32)
    info = ctx.zeros((batch,), np.int32)
    _fn(ctx.cublas, "getrf_batched", ins.dtype)(ctx.cublas_handle, n, lu_ptrs.ptr, n,
                                                pivots.ptr, info.ptr, batch)
    _check_info(ctx, info, "solve", ins.shape, "is singular")
    host_info = np.zeros((), np.int32)
    _fn(ctx.cublas, "getrs_batched", ins.dtype)(ctx.cublas_handle, OP_T, n, k, lu_ptrs.ptr, n,
                                                pivots.ptr, rhs_ptrs.ptr, n,
                                                host_info.ctypes.data, batch)
    for i in range(batch):           # column-major n x k -> row-major n x k
        _transpose(ctx, ins.dtype, rhs.ptr + i * n * k * item, out.ptr + i * n * k * item, n, k)
    ctx.synchronize()
    return True


def eigh(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """Real symmetric (syev*) or complex Hermitian (heev*) on a copy: Jacobi for a batch of
    matrices up to 32 x 32 (syevjBatched / heevjBatched, which refuse larger ones), else
    divide and conquer (syevd / heevd) one matrix at a time. Column-major the copy is
    a^T = conj(a); its upper triangle is the row-major lower one, which NumPy reads. The
    eigenvectors M of conj(a) come back column-major; a's are conj(M), whose row-major form
    is M^H column-major (M^T for reals): one geam into rows 1.. of the packed [w; V]."""
    (a,) = operands
    vectors = bool(ins.attrs["vectors"])
    dtype = D.from_numpy(a.dtype)        # the matrices' (eigvalsh's result is the real one)
    n = a.shape[-1]
    batch, item = _batch(a.shape), dtype.itemsize
    if n == 0 or batch == 0:
        return False
    herm = dtype.is_complex
    real = np.zeros(0, dtype.np).real.dtype
    v = ctx.zeros((batch, n, n), dtype.np)
    ctx.copy(a, v)
    w = ctx.zeros((batch, n), real) if vectors else out      # eigvalsh: w is the result
    info = ctx.zeros((batch,), np.int32)
    mode = EIG_MODE_VECTOR if vectors else EIG_MODE_NOVECTOR
    solve = _eig_jacobi_batched if n <= SYEVJ_BATCHED_MAX_N else _eig_divide_and_conquer
    solve(ctx, dtype, "heev" if herm else "syev", mode, n, batch, v, w, info)
    _check_info(ctx, info, "eigh", a.shape, "did not converge")
    if vectors:
        _pack(ctx, dtype, n, batch, v, w, out)
    ctx.synchronize()
    return True


def _pack(ctx: Any, dtype: Any, n: int, batch: int, v: Any, w: Any, out: Any) -> None:
    """out[i] = [w_i; V_i]: w in the matrix dtype (zero imaginary parts) and V from the
    column-major eigenvectors."""
    item, ritem = dtype.itemsize, np.zeros(0, dtype.np).real.itemsize
    herm = dtype.is_complex
    for i in range(batch):
        row = out.ptr + i * (n + 1) * n * item
        if herm:
            ctx.memset_bytes(row, n * item)
            _fn(ctx.cublas, "copy", _REAL_OF[dtype.name])(
                ctx.cublas_handle, n, w.ptr + i * n * ritem, 1, row, 2)
        else:
            ctx.copy_bytes(w.ptr + i * n * item, row, n * item)
        _transpose(ctx, dtype, v.ptr + i * n * n * item, row + n * item, n, n,
                   op=OP_C if herm else OP_T)


SYEVJ_BATCHED_MAX_N = 32                # cuSOLVER's syevjBatched/heevjBatched limit
_REAL_OF = {"complex64": "float32", "complex128": "float64"}


def _eig_jacobi_batched(ctx: Any, dtype: Any, kind: str, mode: int, n: int, batch: int, v: Any,
                        w: Any, info: Any) -> None:
    cs, h = ctx.cusolver, ctx.cusolver_handle
    params = cs.create_syevj_info()
    try:
        lwork = _fn(cs, kind + "j_batched_buffer_size", dtype)(
            h, mode, FILL_UPPER, n, v.ptr, n, w.ptr, params, batch)
        work = ctx.zeros((max(int(lwork), 1),), dtype.np)
        _fn(cs, kind + "j_batched", dtype)(h, mode, FILL_UPPER, n, v.ptr, n,
                                                w.ptr, work.ptr, lwork, info.ptr, params, batch)
    finally:
        cs.destroy_syevj_info(params)


def _eig_divide_and_conquer(ctx: Any, dtype: Any, kind: str, mode: int, n: int, batch: int,
                            v: Any, w: Any, info: Any) -> None:
    cs, h = ctx.cusolver, ctx.cusolver_handle
    item, ritem = dtype.itemsize, np.zeros(0, dtype.np).real.dtype.itemsize
    lwork = _fn(cs, kind + "d_buffer_size", dtype)(h, mode, FILL_UPPER, n, v.ptr,
                                                       n, w.ptr)
    work = ctx.zeros((max(int(lwork), 1),), dtype.np)
    for i in range(batch):
        _fn(cs, kind + "d", dtype)(h, mode, FILL_UPPER, n, v.ptr + i * n * n * item,
                                        n, w.ptr + i * n * ritem, work.ptr, lwork,
                                        info.ptr + 4 * i)


def qr(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """geqrf then orgqr / ungqr, one matrix at a time (cuSOLVER has no batched geqrf), on
    a column-major copy of each matrix (a geam transposes the row-major input). R is the
    upper triangle of geqrf's result, moved through the packed format into a zeroed
    buffer (the reflectors below it stay behind); Q is what orgqr makes of the
    reflectors, in a buffer wide enough for mode="complete"'s m columns. Out is packed
    [Q^T | R] row-major: read column-major with leading dimension m + n its rows are the
    columns Q's and R^T's column-major forms hold."""
    (a,) = operands
    m, n = a.shape[-2:]
    k, kq = min(m, n), ins.shape[-2]
    batch, dtype = _batch(a.shape), D.from_numpy(a.dtype)
    if k == 0 or batch == 0:
        return False
    item, width = dtype.itemsize, max(n, kq)
    cs, h = ctx.cusolver, ctx.cusolver_handle
    work_a = ctx.zeros((width, m), dtype.np)            # column-major m x width
    tri = ctx.zeros((n, kq), dtype.np)                  # column-major kq x n: R
    packed = ctx.zeros((k * (k + 1) // 2,), dtype.np)
    tau = ctx.zeros((k,), dtype.np)
    info = ctx.zeros((2 * batch,), np.int32)
    orgqr = "ungqr" if dtype.is_complex else "orgqr"
    lwork = max(int(_fn(cs, "geqrf_buffer_size", dtype)(h, m, n, work_a.ptr, m)),
                int(_fn(cs, orgqr + "_buffer_size", dtype)(h, m, kq, k, work_a.ptr, m, tau.ptr)), 1)
    work = ctx.zeros((lwork,), dtype.np)
    row = (m + n) * item
    for i in range(batch):
        dst = out.ptr + i * kq * row
        _transpose(ctx, dtype, a.ptr + i * m * n * item, work_a.ptr, n, m, ld_dst=m)
        _fn(cs, "geqrf", dtype)(h, m, n, work_a.ptr, m, tau.ptr, work.ptr, lwork,
                                info.ptr + 8 * i)
        ctx.memset_bytes(tri.ptr, n * kq * item)
        _fn(ctx.cublas, "trttp", dtype)(ctx.cublas_handle, FILL_UPPER, k, work_a.ptr, m, packed.ptr)
        _fn(ctx.cublas, "tpttr", dtype)(ctx.cublas_handle, FILL_UPPER, k, packed.ptr, tri.ptr, kq)
        if n > k:           # a wide matrix: R's columns right of the square are dense
            _copy_matrix(ctx, dtype, work_a.ptr + k * m * item, m, tri.ptr + k * kq * item, kq,
                         k, n - k)
        _transpose(ctx, dtype, tri.ptr, dst + m * item, kq, n, ld_dst=m + n)   # R^T
        _fn(cs, orgqr, dtype)(h, m, kq, k, work_a.ptr, m, tau.ptr, work.ptr, lwork,
                              info.ptr + 8 * i + 4)
        _copy_matrix(ctx, dtype, work_a.ptr, m, dst, m + n, m, kq)            # Q^T rows
    _check_info(ctx, info, "qr", a.shape, "could not be factored")
    ctx.synchronize()
    return True


def _copy_matrix(ctx: Any, dtype: Any, src: int, ld_src: int, dst: int, ld_dst: int,
                 rows: int, cols: int) -> None:
    """dst = src, both column-major rows x cols with their own leading dimensions."""
    one, zero = _scalars(dtype)
    _fn(ctx.cublas, "geam", dtype)(ctx.cublas_handle, OP_N, OP_N, rows, cols, one.ctypes.data,
                                   src, ld_src, zero.ctypes.data, dst, ld_dst, dst, ld_dst)


def svd(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """gesvdj (Jacobi) one matrix at a time, of each matrix's column-major reading b = a^T
    (the row-major bytes as they are, copied: gesvdj overwrites its input). From
    b = Ub S Vb^H: a = conj(Vb) S conj(Ub)^H, so U = conj(Vb) and V = conj(Ub), whose
    row-major forms are Vb^H and Ub^H column-major: one geam each into the packed
    [U; s; V] (or s alone for svdvals)."""
    (a,) = operands
    m, n = a.shape[-2:]
    k, batch, dtype = min(m, n), _batch(a.shape), D.from_numpy(a.dtype)
    if k == 0 or batch == 0:
        return False
    vectors, full = bool(ins.attrs["compute_uv"]), bool(ins.attrs["full_matrices"])
    item = dtype.itemsize
    real = np.zeros(0, dtype.np).real.dtype
    cu, cv = (m, n) if full else (k, k)              # columns of U and V
    cs, h = ctx.cusolver, ctx.cusolver_handle
    b = ctx.zeros((m, n), dtype.np)
    ub, vb = ctx.zeros((cv, n), dtype.np), ctx.zeros((cu, m), dtype.np)   # column-major
    s = ctx.zeros((k,), real) if vectors else None
    info = ctx.zeros((batch,), np.int32)
    mode, econ = (EIG_MODE_VECTOR if vectors else EIG_MODE_NOVECTOR), int(not full)
    params = cs.create_gesvdj_info()
    try:
        lwork = max(int(_fn(cs, "gesvdj_buffer_size", dtype)(
            h, mode, econ, n, m, b.ptr, n, (s or out).ptr, ub.ptr, n, vb.ptr, m, params)), 1)
        work = ctx.zeros((lwork,), dtype.np)
        for i in range(batch):
            ctx.copy_bytes(a.ptr + i * m * n * item, b.ptr, m * n * item)
            values = s.ptr if vectors else out.ptr + i * k * real.itemsize
            _fn(cs, "gesvdj", dtype)(h, mode, econ, n, m, b.ptr, n, values, ub.ptr, n, vb.ptr, m,
                                     work.ptr, lwork, info.ptr + 4 * i, params)
            if vectors:
                _pack_svd(ctx, dtype, m, n, (cu, cv), out.ptr + i * ins.shape[-2] * ins.shape[-1] * item,
                          ins.shape[-1], ub, vb, s)
    finally:
        cs.destroy_gesvdj_info(params)
    _check_info(ctx, info, "svd", a.shape, "did not converge")
    ctx.synchronize()
    return True


def _pack_svd(ctx: Any, dtype: Any, m: int, n: int, columns: tuple, dst: int, width: int,
              ub: Any, vb: Any, s: Any) -> None:
    """dst (row-major (m + 1 + n) x width) = [U; s; V] zero-padded."""
    item, k = dtype.itemsize, min(m, n)
    cu, cv = columns
    ctx.memset_bytes(dst, (m + 1 + n) * width * item)
    _transpose(ctx, dtype, vb.ptr, dst, m, cu, ld_dst=width, op=OP_C)                 # U
    _transpose(ctx, dtype, ub.ptr, dst + (m + 1) * width * item, n, cv, ld_dst=width,
               op=OP_C)                                                              # V
    row = dst + m * width * item
    if dtype.is_complex:
        _fn(ctx.cublas, "copy", _REAL_OF[dtype.name])(ctx.cublas_handle, k, s.ptr, 1, row, 2)
    else:
        ctx.copy_bytes(s.ptr, row, k * item)


def _diagonals(ctx: Any, dtype: Any, src: Any, n: int, batch: int) -> np.ndarray:
    """Each matrix's diagonal read back (batch x n): a strided copy (incx = n + 1) into a
    small device buffer, then O(n) per matrix crosses to the host, never a whole matrix."""
    item = dtype.itemsize
    diag = ctx.zeros((batch, n), dtype.np)
    for i in range(batch):
        _fn(ctx.cublas, "copy", dtype)(ctx.cublas_handle, n, src.ptr + i * n * n * item, n + 1,
                                       diag.ptr + i * n * item, 1)
    return np.asarray(ctx.get(diag)).reshape(batch, n)


def slogdet(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """getrfBatched on a device copy (column-major it holds a^T, and det(a^T) = det(a): no
    transpose, no conjugation). The O(n^3) factorization runs on the device; only U's
    diagonal and the pivots (O(n) per matrix) cross to the host, where NumPy makes the
    sign (pivot parity times the diagonal's phases) and log|det| (sum of log|u_ii|), and
    the (..., 2) result goes back. A zero pivot (info > 0) gives sign 0 and log|det| -inf,
    as NumPy: not an error."""
    (a,) = operands
    dtype = D.from_numpy(a.dtype)
    n, batch, item = a.shape[-1], _batch(a.shape), dtype.itemsize
    if n == 0 or batch == 0:
        return False
    lu = ctx.zeros((batch, n, n), dtype.np)
    ctx.copy(a, lu)
    ptrs = _pointers(ctx, lu.ptr, batch, n * n * item)
    pivots = ctx.zeros((batch, n), np.int32)
    info = ctx.zeros((batch,), np.int32)
    _fn(ctx.cublas, "getrf_batched", dtype)(ctx.cublas_handle, n, ptrs.ptr, n, pivots.ptr,
                                            info.ptr, batch)
    diag = _diagonals(ctx, dtype, lu, n, batch)
    piv = np.asarray(ctx.get(pivots)).reshape(batch, n)
    ctx.copy(ctx.put(_sign_and_log(diag, piv).astype(dtype.np)), out)
    ctx.synchronize()
    return True


def _sign_and_log(diag: np.ndarray, piv: np.ndarray) -> np.ndarray:
    """(batch, 2): the sign and log|det| of P L U from U's diagonal and getrf's 1-based pivots."""
    swaps = np.count_nonzero(piv != np.arange(1, piv.shape[-1] + 1), axis=-1)
    size = np.abs(diag)
    singular = np.any(size == 0, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        logabs = np.sum(np.log(size), axis=-1)
        phase = np.prod(np.where(size == 0, 1, diag / np.where(size == 0, 1, size)), axis=-1)
    sign = np.where(singular, 0, np.where(swaps % 2, -phase, phase))
    logabs = np.where(singular, -np.inf, logabs)
    return np.stack([sign, logabs.astype(sign.dtype)], axis=-1)


SIDE_LEFT, SIDE_RIGHT = 0, 1            # cublasSideMode_t
DIAG_NON_UNIT = 0                       # cublasDiagType_t


def triangular_solve(ctx: Any, ins: Any, out: Any, operands: list) -> bool:
    """trsmBatched in place on a copy of b. Column-major, a reads as A = a^T and b (n x k)
    as B = b^T (k x n): op(t) x = b is X op(t)^T = B with X = x^T, a right-side solve.
    t^T is A's upper triangle when t is a's lower one, and (t^H)^T = conj(t) = (t^T)^H:
    op = C for the adjoint. No transposes. A zero on t's diagonal is refused (as LAPACK's
    trtrs and NumPy): the diagonals, O(n) per matrix, are read back to check."""
    a, b = operands
    lower, adjoint = bool(ins.attrs["lower"]), bool(ins.attrs["adjoint"])
    dtype = D.from_numpy(a.dtype)
    n, k, batch, item = ins.shape[-2], ins.shape[-1], _batch(ins.shape), dtype.itemsize
    if n == 0 or k == 0 or batch == 0:
        return False
    if np.any(_diagonals(ctx, dtype, a, n, batch) == 0):
        raise np.linalg.LinAlgError(f"triangular_solve: a matrix of the input "
                                    f"{tuple(a.shape)} is singular")
    ctx.copy(b, out)
    a_ptrs = _pointers(ctx, a.ptr, batch, n * n * item)
    b_ptrs = _pointers(ctx, out.ptr, batch, n * k * item)
    one, _ = _scalars(dtype)
    _fn(ctx.cublas, "trsm_batched", dtype)(
        ctx.cublas_handle, SIDE_RIGHT, FILL_UPPER if lower else FILL_LOWER,
        OP_C if adjoint else OP_N, DIAG_NON_UNIT, k, n, one.ctypes.data, a_ptrs.ptr, n,
        b_ptrs.ptr, k, batch)
    ctx.synchronize()
    return True


# primitive -> its call on this target (the CUDA device's `_library` tries it first)
CALLS = {"cholesky": cholesky, "triangular_solve": triangular_solve, "solve": solve,
         "slogdet": slogdet, "eigh": eigh, "svd": svd, "qr": qr}
