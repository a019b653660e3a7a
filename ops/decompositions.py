"""The array API's linalg extension beyond products: solves, inverses, determinants and
decompositions (compiler/primitives/decompositions.py), batched over leading axes, plus
what is built from them (pinv, lstsq, matrix_rank, spectral and nuclear norms;
cond is in linalg.py, beside the norms it divides).

Integer and bool inputs compute in the default float (float32), float16 and bfloat16 in
float32 and round back, as lazyarray's other float functions do. Shapes are checked here,
at the caller's line; a singular or indefinite matrix is found when the program runs and
raises `numpy.linalg.LinAlgError` (a ValueError) naming the op and the shape.
"""
from __future__ import annotations

from typing import Any

from ..compiler.graph import builders as A
from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from ..compiler.primitives import decompositions as P
from ..compiler.primitives import matrix_graph as M
from .matrix_inputs import back as _back, back_real as _back_real
from .matrix_inputs import check_matrix as _matrix, floating as _floating
from .promotion import as_node, broadcast_shapes, broadcast_to, convert, shape_str

# ---- solves and inverses -------------------------------------------------------------------

def _right_side(op: str, a: Node, b: Node) -> tuple:
    """b as (..., n, k) with a's batch dims broadcast; whether b was a vector."""
    vector = b.ndim == 1
    if vector:
        b = A.reshape(b, (b.shape[0], 1))
    if b.shape[-2] != a.shape[-1]:
        raise ValueError(f"{op}: the right side {shape_str(b.shape[:1] if vector else b.shape)} "
                         f"does not match the matrix {shape_str(a.shape)}: needs "
                         f"{a.shape[-1]} rows")
    batch = broadcast_shapes(op, a.shape[:-2], b.shape[:-2])
    return (broadcast_to(a, batch + a.shape[-2:]), broadcast_to(b, batch + b.shape[-2:]),
            vector)


def solve(x1: Any, x2: Any) -> Node:
    """x with x1 @ x = x2; x2 is a vector only when it is 1-D (the array API's rule)."""
    (a, b), dtype = _floating("solve", x1, x2)
    _matrix("solve", a)
    a, b, vector = _right_side("solve", a, b)
    out = apply("solve", a, b)
    if vector:
        out = A.reshape(out, out.shape[:-1])
    return _back(out, dtype)


def solve_triangular(x1: Any, x2: Any, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> Node:
    """PyTorch's torch.linalg.solve_triangular: x with x1 @ x = x2 (left) or x @ x1 = x2,
    reading x1's upper or lower triangle (its diagonal taken as ones if unitriangular)."""
    (a, b), dtype = _floating("solve_triangular", x1, x2)
    _matrix("solve_triangular", a)
    if b.ndim < 2:
        raise ValueError(f"solve_triangular: the right side must be a matrix, got shape "
                         f"{shape_str(b.shape)}")
    if unitriangular:
        a = A.select(M.eye_mask(a.shape), A.full(1, a.shape, a.dtype), a)
    if left:
        a, b, _ = _right_side("solve_triangular", a, b)
        return _back(apply("triangular_solve", a, b, lower=not upper, adjoint=False), dtype)
    # x a = b  <=>  a^H x^H = b^H
    bh = M.mH(b)
    a, bh, _ = _right_side("solve_triangular", a, bh)
    return _back(M.mH(apply("triangular_solve", a, bh, lower=not upper, adjoint=True)), dtype)


def inv(x: Any) -> Node:
    """The inverse of each square matrix (a solve against the identity)."""
    (a,), dtype = _floating("inv", x)
    _matrix("inv", a)
    return _back(apply("solve", a, M.eye(a.shape, a.dtype)), dtype)


def slogdet(x: Any) -> tuple:
    """(sign, log|det|): the sign is 0 and log|det| -inf for a singular matrix."""
    (a,), dtype = _floating("slogdet", x)
    _matrix("slogdet", a)
    packed = apply("slogdet", a)
    sign = A.reshape(M.cols_of(packed, 0, 1), a.shape[:-2])
    logabs = M.real_part(A.reshape(M.cols_of(packed, 1, 2), a.shape[:-2]))
    return _back(sign, dtype), _back_real(logabs, dtype)


def det(x: Any) -> Node:
    """sign * exp(log|det|), from one LU factorization."""
    (a,), dtype = _floating("det", x)
    _matrix("det", a)
    sign, logabs = slogdet(a)
    return _back(A.mul(sign, A.convert(apply("exponential", logabs), sign.dtype)), dtype)


# ---- decompositions ------------------------------------------------------------------------

def cholesky(x: Any, upper: bool = False) -> Node:
    """L (lower) with x = L L^H, from x's lower triangle; upper=True gives L^H."""
    (a,), dtype = _floating("cholesky", x)
    _matrix("cholesky", a)
    out = apply("cholesky", a)
    return _back(M.mH(out) if upper else out, dtype)


def _uplo(op: str, a: Node, UPLO: str) -> Node:
    if UPLO not in ("L", "U"):
        raise ValueError(f"{op}: UPLO must be 'L' or 'U', got {UPLO!r}")
    return a if UPLO == "L" else M.mH(a)


def eigh(x: Any, UPLO: str = "L") -> tuple:
    """(eigenvalues ascending, eigenvectors as columns) of Hermitian matrices, read from
    the lower (UPLO='L') or upper triangle."""
    (a,), dtype = _floating("eigh", x)
    _matrix("eigh", a)
    w, v = P.unpack_eigh(apply("eigh", _uplo("eigh", a, UPLO), vectors=True))
    w = A.reshape(w, a.shape[:-1])
    return _back_real(w, dtype), _back(v, dtype)


def eigvalsh(x: Any, UPLO: str = "L") -> Node:
    (a,), dtype = _floating("eigvalsh", x)
    _matrix("eigvalsh", a)
    return _back_real(apply("eigh", _uplo("eigvalsh", a, UPLO), vectors=False), dtype)


def _complex_input(op: str, x: Any) -> Node:
    (a,), dtype = _floating(op, x)
    _matrix(op, a)
    if not dtype.is_complex:
        a = convert(a, D.complex128 if a.dtype is D.float64 else D.complex64)
    return a


def eig(x: Any) -> tuple:
    """(eigenvalues, eigenvectors as unit columns) of general square matrices, always
    complex (as the array API and torch.linalg.eig; NumPy returns real arrays when every
    eigenvalue is real). Unordered, as LAPACK gives them."""
    a = _complex_input("eig", x)
    w, v = P.unpack_eig(apply("eig", a, vectors=True))
    return A.reshape(w, a.shape[:-1]), v


def eigvals(x: Any) -> Node:
    """The eigenvalues of general square matrices (complex; see eig)."""
    return apply("eig", _complex_input("eigvals", x), vectors=False)


def svd(x: Any, full_matrices: bool = True) -> tuple:
    """(U, S, Vh) with x = U diag(S) Vh, S descending (the array API's default is
    full_matrices=True, as NumPy's)."""
    (a,), dtype = _floating("svd", x)
    _matrix("svd", a, square=False)
    m, n = a.shape[-2:]
    full = bool(full_matrices) and m != n
    u, s, v = P.unpack_svd(apply("svd", a, full_matrices=full, compute_uv=True), m, n, full)
    s = A.reshape(s, a.shape[:-2] + (min(m, n),))
    return _back(u, dtype), _back_real(s, dtype), _back(M.mH(v), dtype)


def svdvals(x: Any) -> Node:
    (a,), dtype = _floating("svdvals", x)
    _matrix("svdvals", a, square=False)
    return _back_real(apply("svd", a, full_matrices=False, compute_uv=False), dtype)


def qr(x: Any, mode: str = "reduced") -> Any:
    """(Q, R) with x = Q R; mode 'reduced', 'complete', or 'r' (R alone)."""
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    (a,), dtype = _floating("qr", x)
    _matrix("qr", a, square=False)
    q, r = P.unpack_qr(apply("qr", a, complete=mode == "complete"), a.shape[-2])
    if mode == "r":
        return _back(r, dtype)
    return _back(q, dtype), _back(r, dtype)


# ---- built from the SVD --------------------------------------------------------------------

def _cutoff(op: str, s: Node, batch: tuple, m: int, n: int, rtol: Any) -> Node:
    """rtol * max(s) per matrix (rtol defaults to max(m, n) * eps, as the array API); an
    array rtol is shaped like the stack of matrices, x[..., 0, 0], as in NumPy."""
    real = s.dtype
    if rtol is None:
        rtol = max(m, n) * float(D.finfo(real).eps)
    top = apply("reduce", s, axes=(s.ndim - 1,), kind="max") if s.shape[-1] else \
        A.full(0, s.shape[:-1], real)
    if isinstance(rtol, Node):
        # top is the batch shape, or the batch shape and 1 where s comes as (..., 1, k)
        rtol = A.reshape(broadcast_to(convert(rtol, real), batch), top.shape)
        return A.broadcast(A.mul(top, rtol), s.shape, tuple(range(s.ndim - 1)))
    return A.broadcast(A.scale(top, float(rtol)), s.shape, tuple(range(s.ndim - 1)))


def pinv(x: Any, rtol: Any = None, hermitian: bool = False) -> Node:
    """The Moore-Penrose pseudo-inverse: V diag(1/s) U^H over the singular values above
    rtol * max(s)."""
    (a,), dtype = _floating("pinv", x)
    _matrix("pinv", a, square=False)
    m, n = a.shape[-2:]
    u, s, v = P.unpack_svd(apply("svd", a, full_matrices=False, compute_uv=True), m, n, False)
    keep = A.compare(s, _cutoff("pinv", s, a.shape[:-2], m, n, _node_or(rtol)), "GT")
    safe = A.select(keep, s, A.full(1, s.shape, s.dtype))
    inv_s = A.where_else_zero(keep, A.div(A.full(1, s.shape, s.dtype), safe))
    scaled = A.mul(v, A.broadcast(A.convert(inv_s, a.dtype), v.shape))
    return _back(M.matmul(scaled, M.mH(u)), dtype)


def _node_or(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float)) else as_node(value)


def matrix_rank(x: Any, rtol: Any = None, *, tol: Any = None, hermitian: bool = False) -> Node:
    """How many singular values exceed rtol * max(s) (or the absolute `tol`)."""
    (a,), _ = _floating("matrix_rank", x)
    _matrix("matrix_rank", a, square=False)
    m, n = a.shape[-2:]
    s = apply("svd", a, full_matrices=False, compute_uv=False)
    if tol is not None:
        cut = A.broadcast(convert(as_node(tol), s.dtype), s.shape) if not isinstance(
            tol, (int, float)) else A.full(float(tol), s.shape, s.dtype)
    else:
        cut = _cutoff("matrix_rank", s, a.shape[:-2], m, n, _node_or(rtol))
    return apply("reduce", A.convert(A.compare(s, cut, "GT"), D.int64), axes=(s.ndim - 1,),
                 kind="sum")


def lstsq(a: Any, b: Any, rcond: Any = None) -> tuple:
    """PyTorch's torch.linalg.lstsq: (solution, residuals, rank, singular_values) of
    min |a x - b|, through the pseudo-inverse; b may be a vector (1-D with 2-D a).
    residuals: the squared residual norms per column when m > n, else empty."""
    (a, b), dtype = _floating("lstsq", a, b)
    _matrix("lstsq", a, square=False)
    m, n = a.shape[-2:]
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape[-1] == m)
    if vector:
        b = A.reshape(b, b.shape + (1,))
    if b.shape[-2] != m:
        raise ValueError(f"lstsq: the right side {shape_str(b.shape)} needs {m} rows to match "
                         f"{shape_str(a.shape)}")
    batch = broadcast_shapes("lstsq", a.shape[:-2], b.shape[:-2])
    a, b = broadcast_to(a, batch + a.shape[-2:]), broadcast_to(b, batch + b.shape[-2:])
    x = M.matmul(pinv(a, rtol=rcond), b)
    s = apply("svd", a, full_matrices=False, compute_uv=False)
    rank = matrix_rank(a, rtol=rcond)
    if m > n:
        r = A.sub(M.matmul(a, x), b)
        resid = A.reduce_sum(A.mul(r, M.conj(r)), (r.ndim - 2,))
        resid = M.real_part(resid)
    else:
        resid = A.full(0, batch + (0,), s.dtype)
    if vector:
        x = A.reshape(x, x.shape[:-1])
        resid = A.reshape(resid, resid.shape[:-1]) if m > n else resid
    return _back(x, dtype), _back_real(resid, dtype), rank, _back_real(s, dtype)


def singular_norm(x: Node, ord: Any, keepdims: bool) -> Node:
    """matrix_norm's ord 2 (largest singular value), -2 (smallest) and 'nuc' (their sum)."""
    (a,), dtype = _floating("matrix_norm", x)
    s = apply("svd", a, full_matrices=False, compute_uv=False)
    kind = {2: "max", -2: "min", "nuc": "sum"}[ord]
    out = apply("reduce", s, axes=(s.ndim - 1,), kind=kind)
    if keepdims:
        out = A.reshape(out, out.shape + (1, 1))
    return _back_real(out, dtype)


DECOMPOSITIONS = ("cholesky", "det", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "matrix_rank",
                  "pinv", "qr", "slogdet", "solve", "solve_triangular", "svd", "svdvals")
__all__: list = []     # none of these is a top-level name: they live in lazyarray.linalg
