"""Matrix decompositions and solves over batches of matrices (the last two axes), each a
library call: LAPACK on the CPU (NumPy's `numpy.linalg`, batched in C, is the reference
and what the CPU device runs), cuSOLVER on CUDA (the CUDA runtime registers those calls
for its target: devices/cuda/cusolver_calls.py `CALLS`).

A decomposition with several factors returns them packed in one array (one library call,
one buffer); the layout is part of the stanza and `unpack_*` below read it back:

- eig, eigh: (..., n + 1, n): row 0 the eigenvalues (ascending), rows 1.. the eigenvectors
  (column j belongs to eigenvalue j);
- svd:   (..., m + 1 + n, w): rows :m hold U, row m the singular values (descending),
  rows m+1.. hold V (= Vh^H); w = k = min(m, n), or max(m, n) with full_matrices (each
  factor's own width, zero padded);
- qr:    (..., kq, m + n): columns :m hold Q^T, columns m.. hold R;
- slogdet: (..., 2): sign, then log|det|.

The vector-Jacobian products follow JAX's and PyTorch's derivations, written in
PyTorch's conjugate-Wirtinger convention (a complex cotangent is dL/dx + i dL/dy; the
stanzas are `holomorphic=False`: their vjps conjugate where the math does). eigh and
cholesky read one triangle of their input (as LAPACK does, the diagonal's real part), so
their cotangent is the derivative of exactly that: the Hermitian gradient folded onto the
triangle read. Eigen- and singular vectors of complex matrices are fixed up to a phase
per vector: a loss that depends on the phase has no gradient (as in PyTorch and JAX).
"""
from __future__ import annotations

import numpy as np

from ..graph import builders as A
from ..hlo import dtypes as D
from ..transforms import batching as B
from ..primitive import LIBRARY, LibraryCall, apply, fail, primitive
from . import matrix_graph as M
from . import lapack_calls

# ---- shared rules ------------------------------------------------------------------------

# the CPU calls SciPy's LAPACK from generated code, the stanza's `lapack` (lapack_calls.py);
# without SciPy (and in the CUDA fallback) the NumPy reference runs: numpy.linalg's batched
# LAPACK. Batching (vmap) adds a leading axis, which every stanza here takes as one more
# batch dim
def _lapack(emit) -> LibraryCall:
    return LibraryCall("host", lapack=emit)


def linalg_dtypes() -> tuple:
    """Real and complex floats (LAPACK's s, d, c, z routines)."""
    return (D.float32, D.float64, D.complex64, D.complex128)


def _check_dtype(op: str, operands: tuple) -> D.DType:
    dtype = operands[0].dtype
    if any(o.dtype is not dtype for o in operands) or dtype not in linalg_dtypes():
        fail(op, operands, "needs operands of one dtype among "
             + ", ".join(d.name for d in linalg_dtypes()), TypeError)
    return dtype


def _matrices(op: str, operands: tuple, square: bool = True) -> tuple:
    x = operands[0]
    if x.ndim < 2:
        fail(op, operands, "needs a matrix or a batch of matrices (rank >= 2)")
    if square and x.shape[-1] != x.shape[-2]:
        fail(op, operands, f"needs square matrices, got {x.shape[-2]} x {x.shape[-1]}")
    return x.shape


def _run(op: str, fn, *arrays, **kw):
    """Call NumPy's LAPACK wrapper; a failure names the op and the input's shape."""
    try:
        with np.errstate(all="ignore"):
            return fn(*arrays, **kw)
    except np.linalg.LinAlgError as e:
        why = str(e).lower()
        if "positive" in why:
            detail = "is not positive definite"
        elif "singular" in why:
            detail = "is singular"
        else:
            detail = f"failed: {e}"
        raise np.linalg.LinAlgError(f"{op}: a matrix of the input {tuple(arrays[0].shape)} "
                                    f"{detail}") from None


def _rhs(op: str, operands: tuple) -> tuple:
    a, b = operands
    _check_dtype(op, operands)
    _matrices(op, operands)
    if b.ndim != a.ndim or b.shape[:-2] != a.shape[:-2] or b.shape[-2] != a.shape[-1]:
        fail(op, operands, f"the right side must be (..., {a.shape[-1]}, k) with the matrix's "
                           "batch dims")
    return b.shape, a.dtype


# ---- cholesky ----------------------------------------------------------------------------

def _cholesky_infer(operands):
    _check_dtype("cholesky", operands)
    return _matrices("cholesky", operands), operands[0].dtype


def real_diagonal(x):
    """x with its diagonal's imaginary parts dropped (x itself when real)."""
    if not x.dtype.is_complex:
        return x
    return A.select(M.eye_mask(x.shape), A.convert(M.real_part(x), x.dtype), x)


def fold_lower(g):
    """The gradient of a function that reads the lower triangle of a Hermitian matrix
    (the diagonal's real part), from its gradient g as a function of the whole matrix:
    tril(g) + tril(g^H, -1), the diagonal real."""
    return real_diagonal(A.add(M.tril(g), M.tril(M.mH(g), -1)))


def _cholesky_vjp(g, out, a):
    L = out
    phi = M.tril(M.matmul(M.mH(L), g))
    phi = A.scale(A.add(phi, M.mH(M.tril(phi, -1))), 0.5)        # Hermitian
    s = apply("triangular_solve", L, phi, lower=True, adjoint=True)           # L^-H phi
    s = M.mH(apply("triangular_solve", L, M.mH(s), lower=True, adjoint=True))  # ... L^-1
    return (fold_lower(s),)


cholesky = primitive("cholesky", LIBRARY, _cholesky_infer,
                     lambda a: _run("cholesky", np.linalg.cholesky, a),
                     doc="L with a = L L^H, L lower; reads a's lower triangle.",
                     vjp=_cholesky_vjp, library=_lapack(lapack_calls.cholesky), holomorphic=False, batch=B.elementwise)

# ---- triangular_solve ----------------------------------------------------------------------


def _trsolve_infer(operands, lower, adjoint):
    return _rhs("triangular_solve", operands)


def _trsolve_ref(a, b, lower, adjoint):
    t = np.tril(a) if lower else np.triu(a)
    if adjoint:
        t = np.conj(np.swapaxes(t, -1, -2))
    return _run("triangular_solve", np.linalg.solve, t, b).astype(b.dtype)


def _trsolve_vjp(g, out, a, b, lower, adjoint):
    gb = apply("triangular_solve", a, g, lower=lower, adjoint=not adjoint)
    if adjoint:     # a^H x = b
        ga = A.neg(M.matmul(out, M.mH(gb)))
    else:           # a x = b
        ga = A.neg(M.matmul(gb, M.mH(out)))
    return (M.tril(ga) if lower else M.triu(ga)), gb


triangular_solve = primitive(
    "triangular_solve", LIBRARY, _trsolve_infer, _trsolve_ref, attrs=("lower", "adjoint"),
    doc="x with op(t) x = b, t the lower or upper triangle of a, op(t) = t or t^H.",
    vjp=_trsolve_vjp, library=_lapack(lapack_calls.triangular_solve), holomorphic=False, batch=B.elementwise)

# ---- solve ------------------------------------------------------------------------------


def _solve_infer(operands):
    return _rhs("solve", operands)


def _solve_vjp(g, out, a, b):
    gb = apply("solve", M.mH(a), g)
    return A.neg(M.matmul(gb, M.mH(out))), gb


solve = primitive("solve", LIBRARY, _solve_infer,
                  lambda a, b: _run("solve", np.linalg.solve, a, b).astype(b.dtype),
                  doc="x with a x = b (LU with partial pivoting).", vjp=_solve_vjp, library=_lapack(lapack_calls.solve), holomorphic=False, batch=B.elementwise)

# ---- slogdet ------------------------------------------------------------------------------


def _slogdet_infer(operands):
    _check_dtype("slogdet", operands)
    return _matrices("slogdet", operands)[:-2] + (2,), operands[0].dtype


def _slogdet_ref(a):
    sign, logabs = _run("slogdet", np.linalg.slogdet, a)
    return np.stack([sign.astype(a.dtype), logabs.astype(a.dtype)], axis=-1)


def _slogdet_vjp(g, out, a):
    """c a^-H with c = g_log (real), plus for complex i Im(conj(sign) g_sign): the sign
    e^{i theta} moves with theta = Im tr(a^-1 da), log|det| with its real part."""
    glog = M.real_part(M.cols_of(g, 1, 2))                    # (..., 1)
    c = A.convert(glog, a.dtype)
    if a.dtype.is_complex:
        turn = apply("imag", A.mul(M.conj(M.cols_of(out, 0, 1)), M.cols_of(g, 0, 1)))
        c = A.add(c, apply("complex", A.full(0, turn.shape, turn.dtype), turn))
    inv_h = apply("solve", M.mH(a), M.eye(a.shape, a.dtype))  # a^-H
    scale = A.broadcast(A.reshape(c, a.shape[:-2]), a.shape, tuple(range(a.ndim - 2)))
    return (A.mul(scale, inv_h),)


slogdet = primitive("slogdet", LIBRARY, _slogdet_infer, _slogdet_ref,
                    doc="(..., 2): the sign of det(a) (0 when singular), then log|det(a)|.",
                    vjp=_slogdet_vjp, library=_lapack(lapack_calls.slogdet), holomorphic=False, batch=B.elementwise)

# ---- eigh -------------------------------------------------------------------------------


def _eigh_infer(operands, vectors):
    _check_dtype("eigh", operands)
    shape = _matrices("eigh", operands)
    n = shape[-1]
    real = D.from_numpy(np.zeros(0, operands[0].dtype.np).real.dtype)
    if vectors:
        return shape[:-2] + (n + 1, n), operands[0].dtype
    return shape[:-1], real


def _eigh_ref(a, vectors):
    if not vectors:
        return _run("eigvalsh", np.linalg.eigvalsh, a)
    w, v = _run("eigh", np.linalg.eigh, a)
    return np.concatenate([w[..., None, :].astype(a.dtype), v], axis=-2)


def unpack_eigh(out):
    n = out.shape[-1]
    return M.real_part(M.rows_of(out, 0, 1)), M.rows_of(out, 1, n + 1)


def _eigh_vjp(g, out, a, vectors):
    if not vectors:
        full = apply("eigh", a, vectors=True)
        w, v = unpack_eigh(full)
        gw = A.reshape(g, g.shape[:-1] + (1, g.shape[-1]))
        inner = M.diag_embed(A.reshape(A.convert(gw, a.dtype), g.shape))
        return (fold_lower(M.matmul(M.matmul(v, inner), M.mH(v))),)
    w, v = unpack_eigh(out)
    gw, gv = unpack_eigh(g)
    n = a.shape[-1]
    shape = a.shape
    wr = A.broadcast(A.reshape(w, w.shape[:-2] + (n,)), shape,
                     tuple(range(a.ndim - 2)) + (a.ndim - 1,))      # w_j at [i, j]
    wc = M.mT(wr)                                                   # w_i at [i, j]
    eye = M.eye_mask(shape)
    gap = A.select(eye, A.full(1, shape, w.dtype), A.sub(wr, wc))
    f = A.select(eye, A.full(0, shape, w.dtype), A.div(A.full(1, shape, w.dtype), gap))
    inner = A.mul(A.convert(f, a.dtype), M.matmul(M.mH(v), gv))
    inner = A.add(inner, M.diag_embed(A.reshape(A.convert(gw, a.dtype), a.shape[:-1])))
    return (fold_lower(M.matmul(M.matmul(v, inner), M.mH(v))),)


eigh = primitive("eigh", LIBRARY, _eigh_infer, _eigh_ref, attrs=("vectors",),
                 doc="Eigen-decomposition of Hermitian matrices from their lower triangle; "
                     "packed as [w; V] (vectors) or w alone.",
                 vjp=_eigh_vjp, library=_lapack(lapack_calls.eigh), holomorphic=False, batch=B.elementwise)

# ---- eig --------------------------------------------------------------------------------
# general (non-Hermitian) matrices, complex only: ops/ converts real input first, so the
# cotangent's real part reaches a real input through that convert


def _eig_infer(operands, vectors):
    dtype = _check_dtype("eig", operands)
    if not dtype.is_complex:
        fail("eig", operands, "needs complex64 or complex128 (a real matrix is converted first)",
             TypeError)
    shape = _matrices("eig", operands)
    n = shape[-1]
    return (shape[:-2] + (n + 1, n) if vectors else shape[:-1]), dtype


def _eig_ref(a, vectors):
    if not vectors:
        return _run("eigvals", np.linalg.eigvals, a).astype(a.dtype)
    w, v = _run("eig", np.linalg.eig, a)
    return np.concatenate([w[..., None, :], v], axis=-2).astype(a.dtype)


def unpack_eig(out):
    """(eigenvalues as (..., 1, n), eigenvectors as columns) from [w; V]."""
    n = out.shape[-1]
    return M.rows_of(out, 0, 1), M.rows_of(out, 1, n + 1)


def _eig_vjp(g, out, a, vectors):
    """From A V = V diag(w) with unit columns: dV = V C, C_ki = (V^-1 dA V)_ki / (w_i - w_k)
    off the diagonal, Re C_ii fixed by the unit norm (the phase is free: a loss that depends
    on it has no gradient). Hence
    gA = V^-H (diag(gw) + conj(E) * (W - V^H V diag(Re diag W))) V^H, W = V^H gV,
    E_ki = 1 / (w_i - w_k) off the diagonal, 0 on it."""
    n = a.shape[-1]
    shape = a.shape
    if vectors:
        w, v = unpack_eig(out)
        gw, gv = unpack_eig(g)
    else:
        w, v = unpack_eig(apply("eig", a, vectors=True))
        gw, gv = A.reshape(g, g.shape[:-1] + (1, n)), None
    batch = tuple(range(a.ndim - 2))
    w_col = A.broadcast(A.reshape(w, w.shape[:-2] + (n,)), shape, batch + (a.ndim - 1,))
    eye = M.eye_mask(shape)
    inner = M.diag_embed(A.reshape(gw, shape[:-1]))
    vh = M.mH(v)
    if gv is not None:
        gap = A.select(eye, A.full(1, shape, a.dtype), A.sub(w_col, M.mT(w_col)))
        e = A.select(eye, A.full(0, shape, a.dtype), A.div(A.full(1, shape, a.dtype), gap))
        big_w = M.matmul(vh, gv)
        re_diag = A.convert(M.real_part(M.diagonal(big_w)), a.dtype)
        fixed = A.sub(big_w, M.matmul(M.matmul(vh, v), M.diag_embed(re_diag)))
        inner = A.add(inner, A.mul(M.conj(e), fixed))
    return (apply("solve", vh, M.matmul(inner, vh)),)


eig = primitive("eig", LIBRARY, _eig_infer, _eig_ref, attrs=("vectors",),
                doc="Eigen-decomposition of general complex matrices (LAPACK geev through "
                    "NumPy); packed as [w; V] (vectors, unit columns) or w alone.",
                vjp=_eig_vjp, library=LibraryCall("host"), holomorphic=False, batch=B.elementwise)

# ---- svd --------------------------------------------------------------------------------


def svd_width(m: int, n: int, full_matrices: bool) -> int:
    return max(m, n) if full_matrices else min(m, n)


def _svd_infer(operands, full_matrices, compute_uv):
    _check_dtype("svd", operands)
    shape = _matrices("svd", operands, square=False)
    m, n = shape[-2:]
    if not compute_uv:
        real = D.from_numpy(np.zeros(0, operands[0].dtype.np).real.dtype)
        return shape[:-2] + (min(m, n),), real
    return shape[:-2] + (m + 1 + n, svd_width(m, n, full_matrices)), operands[0].dtype


def _svd_ref(a, full_matrices, compute_uv):
    if not compute_uv:
        return _run("svdvals", np.linalg.svd, a, compute_uv=False)
    m, n = a.shape[-2:]
    u, s, vh = _run("svd", np.linalg.svd, a, full_matrices=full_matrices)
    w = svd_width(m, n, full_matrices)
    out = np.zeros(a.shape[:-2] + (m + 1 + n, w), a.dtype)
    out[..., :m, :u.shape[-1]] = u
    out[..., m, :s.shape[-1]] = s
    out[..., m + 1:, :vh.shape[-2]] = np.conj(np.swapaxes(vh, -1, -2))
    return out


def unpack_svd(out, m: int, n: int, full_matrices: bool):
    """(U, s as (..., 1, k), V) from the packed layout."""
    k = min(m, n)
    u = M.cols_of(M.rows_of(out, 0, m), 0, m if full_matrices else k)
    s = M.cols_of(M.rows_of(out, m, m + 1), 0, k)
    v = M.cols_of(M.rows_of(out, m + 1, m + 1 + n), 0, n if full_matrices else k)
    return u, M.real_part(s), v


def _svd_vjp(g, out, a, full_matrices, compute_uv):
    m, n = a.shape[-2:]
    k = min(m, n)
    if not compute_uv:
        u, _, v = unpack_svd(apply("svd", a, full_matrices=False, compute_uv=True), m, n, False)
        gs = A.reshape(A.convert(g, a.dtype), g.shape[:-1] + (1, k))
        return (M.matmul(A.mul(u, A.broadcast(gs, u.shape)), M.mH(v)),)
    if full_matrices and m != n:
        raise ValueError(f"svd: the gradient of full_matrices=True needs square matrices, got "
                         f"{m} x {n} (as JAX; use full_matrices=False)")
    u, s, v = unpack_svd(out, m, n, full_matrices)
    gu, gs, gv = unpack_svd(g, m, n, full_matrices)
    return (_svd_cotangent(u, s, v, gu, gs, gv, a),)


def _svd_cotangent(u, s, v, gu, gs, gv, a):
    """PyTorch's svd_backward (real and complex), written with primitives."""
    m, n = a.shape[-2:]
    k = min(m, n)
    kk = a.shape[:-2] + (k, k)
    sr = A.broadcast(s, kk)                         # s_j at [i, j]
    sc = M.mT(sr)                                   # s_i at [i, j]
    skew = lambda x: A.sub(x, M.mH(x))              # noqa: E731
    uhgu = skew(M.matmul(M.mH(u), gu))
    vhgv = skew(M.matmul(M.mH(v), gv))
    eye = M.eye_mask(kk)
    e = A.select(eye, A.full(1, kk, s.dtype), A.sub(A.mul(sr, sr), A.mul(sc, sc)))
    srd, scd, ed = (A.convert(x, a.dtype) for x in (sr, sc, e))
    ga = A.div(A.add(A.mul(uhgu, srd), A.mul(scd, vhgv)), ed)
    ga = A.add(ga, M.diag_embed(A.reshape(A.convert(gs, a.dtype), a.shape[:-2] + (k,))))
    if a.dtype.is_complex:
        # the pair (u_j, v_j) turns by a common phase freely; what the loss sees of their
        # relative phase is i Im(u_j^H gu_j) / s_j (PyTorch's svd_backward)
        im = apply("imag", M.diagonal(uhgu))                            # (..., k)
        s_vec = A.reshape(s, s.shape[:-2] + (k,))
        turn = A.div(im, A.scale(s_vec, 2.0))
        ga = A.add(ga, M.diag_embed(apply("complex", A.full(0, turn.shape, turn.dtype), turn)))
    vh = M.mH(v)
    if m > k:
        inv_s = A.broadcast(A.div(A.full(1, s.shape, s.dtype), s), gu.shape)
        gu_s = A.mul(gu, A.convert(inv_s, a.dtype))
        ga = A.add(M.matmul(u, ga), A.sub(gu_s, M.matmul(u, M.matmul(M.mH(u), gu_s))))
        return M.matmul(ga, vh)
    if n > k:
        inv_s = A.broadcast(A.div(A.full(1, s.shape, s.dtype), s), gv.shape)
        gv_s = A.mul(gv, A.convert(inv_s, a.dtype))
        ga = A.add(M.matmul(ga, vh), M.mH(A.sub(gv_s, M.matmul(v, M.matmul(vh, gv_s)))))
        return M.matmul(u, ga)
    return M.matmul(M.matmul(u, ga), vh)


svd = primitive("svd", LIBRARY, _svd_infer, _svd_ref, attrs=("full_matrices", "compute_uv"),
                doc="Singular value decomposition a = U diag(s) V^H; packed as [U; s; V], "
                    "or s alone.",
                vjp=_svd_vjp, library=_lapack(lapack_calls.svd), holomorphic=False, batch=B.elementwise)

# ---- qr ---------------------------------------------------------------------------------


def _qr_infer(operands, complete):
    _check_dtype("qr", operands)
    shape = _matrices("qr", operands, square=False)
    m, n = shape[-2:]
    kq = m if complete else min(m, n)
    return shape[:-2] + (kq, m + n), operands[0].dtype


def _qr_ref(a, complete):
    q, r = _run("qr", np.linalg.qr, a, mode="complete" if complete else "reduced")
    return np.concatenate([np.swapaxes(q, -1, -2), r], axis=-1).astype(a.dtype)


def unpack_qr(out, m: int):
    return M.mT(M.cols_of(out, 0, m)), M.cols_of(out, m, out.shape[-1])


def _qr_vjp(g, out, a, complete):
    m, n = a.shape[-2:]
    if complete and m > n:
        raise ValueError(f"qr: the gradient of mode='complete' needs m <= n, got {m} x {n} "
                         "(as JAX; use mode='reduced')")
    q, r = unpack_qr(out, m)
    gq, gr = unpack_qr(g, m)
    if m >= n:
        return (_qr_tall_cotangent(q, r, gq, gr),)
    # a = [x | y] with x square: q r_x = x, r_y = q^H y
    rx, ry = M.cols_of(r, 0, m), M.cols_of(r, m, n)
    grx, gry = M.cols_of(gr, 0, m), M.cols_of(gr, m, n)
    y = M.cols_of(a, m, n)
    gx = _qr_tall_cotangent(q, rx, A.add(gq, M.matmul(y, M.mH(gry))), grx)
    return (M.concat([gx, M.matmul(q, gry)], a.ndim - 1),)


def _qr_tall_cotangent(q, r, gq, gr):
    """m >= n: (gq + q copyltu(m)) r^-H with m = r gr^H - gq^H q."""
    mm = A.sub(M.matmul(r, M.mH(gr)), M.matmul(M.mH(gq), q))
    # R's diagonal is real (LAPACK's Householder reflections): its real part only
    copyltu = real_diagonal(A.add(M.tril(mm), M.mH(M.tril(mm, -1))))
    rhs = A.add(gq, M.matmul(q, copyltu))
    # x r^H = rhs  <=>  r x^H = rhs^H
    return M.mH(apply("triangular_solve", r, M.mH(rhs), lower=False, adjoint=False))


qr = primitive("qr", LIBRARY, _qr_infer, _qr_ref, attrs=("complete",),
               doc="a = Q R (Householder); packed as [Q^T | R] along the last axis.",
               vjp=_qr_vjp, library=_lapack(lapack_calls.qr), holomorphic=False, batch=B.elementwise)
