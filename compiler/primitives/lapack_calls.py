"""What each decomposition's stanza calls of LAPACK on the CPU (its `LibraryCall.lapack`):
`fn(k, ins, operands, **attrs) -> work per matrix`, with `k` the LapackKernel being built
(compiler/codegen/lapack_kernels.py). Each emits its prologue (scalars, work space and
LAPACK's work-space queries), then `k.each_matrix(body)` with the calls for one matrix.

Our matrices are row-major; LAPACK reads column-major, where the same memory is the
transpose. Where a factor does not care (a Cholesky factor of A^T = conj(A) is the
conjugate transpose's, a determinant is the transpose's), the routine reads our memory
as it is; elsewhere the matrix is transposed into work space first, so that the routine
sees exactly what NumPy's `numpy.linalg` hands it (same factors, same signs of
eigenvectors and singular vectors, up to rounding).

The returned work (a rough flop count per matrix) decides how the batch is split over
threads.
"""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ir

from ..codegen.llvm_types import F64, I32, I64


def cholesky(k: Any, ins: Any, operands: list) -> int:
    """potrf of the lower triangle: row-major lower = column-major upper of A^T, whose
    upper factor U (U^H U = A^T) read row-major is L = U^T with L L^H = A."""
    n = ins.shape[-1]
    uplo, nn, info = k.char("U"), k.int(n), k.info

    def body(out: Any, a: Any) -> None:
        k.copy(out, a, n * n)
        k.call("potrf", uplo, nn, out, nn, info)
        k.check("is not positive definite")
        _zero_upper(k, out, n)
    k.each_matrix(body)
    return n ** 3 // 3


def _zero_upper(k: Any, ptr: Any, n: int) -> None:
    """The strictly upper triangle of a row-major n x n matrix set to zero."""
    zero = k.zero_value()

    def row(r: Any) -> None:
        def col(c: Any) -> None:
            with k.b.if_then(k.b.icmp_signed(">", c, r)):
                k.b.store(zero, k.at(ptr, k.b.add(k.b.mul(r, ir.Constant(I64, n)), c)))
        k.loop(n, col, "c")
    k.loop(n, row, "r")


def _lu(k: Any, n: int) -> tuple:
    return k.alloc("T", n * n), k.alloc("int", n)


def solve(k: Any, ins: Any, operands: list) -> int:
    """getrf of the row-major memory (column-major A^T = P L U), then getrs with trans='T'
    solves A x = b; the right sides go column-major through work space (one column:
    the same memory)."""
    n, r = ins.shape[-2], ins.shape[-1]
    lu, piv = _lu(k, n)
    rhs = k.alloc("T", n * r) if r > 1 else None
    nn, nr, info, trans = k.int(n), k.int(r), k.info, k.char("T")

    def body(out: Any, a: Any, b: Any) -> None:
        k.copy(lu, a, n * n)
        k.call("getrf", nn, nn, lu, nn, piv, info)
        k.check("is singular")
        target = out if rhs is None else rhs
        if rhs is None:
            k.copy(out, b, n)
        else:
            k.transpose(rhs, b, n, r)
        k.call("getrs", trans, nn, nr, lu, nn, piv, target, nn, info)
        k.check("is singular")
        if rhs is not None:
            k.transpose(out, rhs, r, n)
    k.each_matrix(body)
    return 2 * n ** 3 // 3 + 2 * n * n * r


def triangular_solve(k: Any, ins: Any, operands: list, lower: bool, adjoint: bool) -> int:
    """trtrs on the row-major memory as it is: the lower triangle of A is the column-major
    upper one of A^T, T = U^T. T x = b is trans='T'; T^H x = b is conj(U) x = b, solved
    as U conj(x) = conj(b) (trans='N' on conjugated right sides)."""
    n, r = ins.shape[-2], ins.shape[-1]
    rhs = k.alloc("T", n * r)
    conj = adjoint and k.complex
    uplo, trans, diag = k.char("U" if lower else "L"), k.char("N" if adjoint else "T"), k.char("N")
    nn, nr, info = k.int(n), k.int(r), k.info

    def body(out: Any, a: Any, b: Any) -> None:
        k.transpose(rhs, b, n, r, conj=conj)
        k.call("trtrs", uplo, trans, diag, nn, nr, a, nn, rhs, nn, info)
        k.check("is singular")
        k.transpose(out, rhs, r, n, conj=conj)
    k.each_matrix(body)
    return n * n * r


def slogdet(k: Any, ins: Any, operands: list) -> int:
    """getrf of the row-major memory (det A^T = det A): the sign is the pivots' parity
    times the diagonal's phases, log|det| the sum of log|u_ii|; a zero pivot (info > 0)
    gives sign 0 and -inf, as NumPy."""
    n = operands[0].shape[-1]
    lu, piv = _lu(k, n)
    nn, info = k.int(n), k.info
    b = k.b
    R = k.R

    def body(out: Any, a: Any) -> None:
        k.copy(lu, a, n * n)
        k.call("getrf", nn, nn, lu, nn, piv, info)
        one, zero = ir.Constant(R, 1.0), ir.Constant(R, 0.0)
        carried = [one, zero, zero]            # sign (re, im), log|det|

        def step(j: Any, acc: list) -> list:
            sre, sim, logabs = acc
            d = b.load(k.at(lu, b.mul(j, ir.Constant(I64, n + 1))), typ=k.T)
            if k.complex:
                dre, dim = b.extract_value(d, 0), b.extract_value(d, 1)
                mag = b.call(_hypot(k), [dre, dim])
                safe = b.select(b.fcmp_ordered("==", mag, zero), one, mag)
                pre, pim = b.fdiv(dre, safe), b.fdiv(dim, safe)
                sre, sim = (b.fsub(b.fmul(sre, pre), b.fmul(sim, pim)),
                            b.fadd(b.fmul(sre, pim), b.fmul(sim, pre)))
            else:
                mag = b.call(_intrinsic(k, "llvm.fabs"), [d])
                sre = b.select(b.fcmp_ordered("<", d, zero), b.fneg(sre), sre)
            logabs = b.fadd(logabs, b.call(_intrinsic(k, "llvm.log"), [mag]))
            p = b.load(k.at(piv, j, "int"), typ=I32)
            swapped = b.icmp_signed("!=", b.sext(p, I64), b.add(j, ir.Constant(I64, 1)))
            sre = b.select(swapped, b.fneg(sre), sre)
            sim = b.select(swapped, b.fneg(sim), sim)
            return [sre, sim, logabs]
        sre, sim, logabs = k.fold(n, carried, step)
        singular = b.icmp_signed(">", b.load(info, typ=I32), ir.Constant(I32, 0))
        sre = b.select(singular, zero, sre)
        sim = b.select(singular, zero, sim)
        logabs = b.select(singular, ir.Constant(R, float("-inf")), logabs)
        if k.complex:
            sign = b.insert_value(b.insert_value(ir.Constant(k.T, None), sre, 0), sim, 1)
            log_t = b.insert_value(ir.Constant(k.T, None), logabs, 0)
        else:
            sign, log_t = sre, logabs
        b.store(sign, k.at(out, 0))
        b.store(log_t, k.at(out, 1))
    k.each_matrix(body)
    return 2 * n ** 3 // 3


def eigh(k: Any, ins: Any, operands: list, vectors: bool) -> int:
    """syevd / heevd of A column-major (transposed into work space) with uplo='L', as
    NumPy calls it; the eigenvectors come back column-major and are transposed into rows
    1.. of the packed [w; V]."""
    n = operands[0].shape[-1]
    acm, w = k.alloc("T", n * n), k.alloc("R", n)
    jobz, uplo, nn, info = k.char("V" if vectors else "N"), k.char("L"), k.int(n), k.info
    routine = k.name("syevd", "heevd")
    head = [jobz, uplo, nn, acm, nn, w]
    if k.complex:      # work, lwork, rwork, lrwork, iwork, liwork, info
        sizes = k.query(routine, head + [None] * 6 + [info], {6: "T", 8: "R", 10: "int"})
        work, rwork, iwork = k.alloc("T", sizes[6]), k.alloc("R", sizes[8]), k.alloc("int", sizes[10])
        tail = [work, k.int(sizes[6]), rwork, k.int(sizes[8]), iwork, k.int(sizes[10]), info]
    else:              # work, lwork, iwork, liwork, info
        sizes = k.query(routine, head + [None] * 4 + [info], {6: "R", 8: "int"})
        work, iwork = k.alloc("R", sizes[6]), k.alloc("int", sizes[8])
        tail = [work, k.int(sizes[6]), iwork, k.int(sizes[8]), info]

    def body(out: Any, a: Any) -> None:
        k.transpose(acm, a, n, n)
        k.call(routine, *head, *tail)
        k.check("did not converge")
        if not vectors:
            k.copy(out, w, n, "R")
            return
        k.widen(out, w, n)
        k.transpose(k.at(out, n), acm, n, n)
    k.each_matrix(body)
    return 9 * n ** 3 if vectors else 4 * n ** 3


def svd(k: Any, ins: Any, operands: list, full_matrices: bool, compute_uv: bool) -> int:
    """gesdd of A column-major (transposed into work space), jobz 'A', 'S' or 'N' as
    NumPy. Vh column-major is conj(V) row-major: gesdd writes it straight into the rows
    of V (leading dimension the packed width), conjugated after; U is transposed out."""
    m, n = operands[0].shape[-2:]
    kk = min(m, n)
    acm, s = k.alloc("T", m * n), k.alloc("R", kk)
    mm, nn, info = k.int(m), k.int(n), k.info
    ucols = (m if full_matrices else kk) if compute_uv else 1
    width = ins.shape[-1] if compute_uv else 1
    u = k.alloc("T", m * ucols) if compute_uv else acm
    ldu = k.int(m if compute_uv else 1)
    ldvt = k.int(width if compute_uv else 1)
    jobz = k.char(("A" if full_matrices else "S") if compute_uv else "N")
    iwork = k.alloc("int", 8 * kk)
    head = [jobz, mm, nn, acm, mm, s, u, ldu, None, ldvt]
    if k.complex:
        lrwork = max(5 * kk * kk + 5 * kk, 2 * max(m, n) * kk + 2 * kk * kk + kk, 7 * kk)
        rwork = k.alloc("R", lrwork)
        q = k.query("gesdd", _with(head, 8, acm) + [None, None, rwork, iwork, info], {10: "T"})
        work = k.alloc("T", q[10])
        tail = [work, k.int(q[10]), rwork, iwork, info]
    else:
        q = k.query("gesdd", _with(head, 8, acm) + [None, None, iwork, info], {10: "R"})
        work = k.alloc("R", q[10])
        tail = [work, k.int(q[10]), iwork, info]

    def body(out: Any, a: Any) -> None:
        k.transpose(acm, a, m, n)
        if not compute_uv:
            k.call("gesdd", *_with(head, 8, acm), *tail)
            k.check("did not converge")
            k.copy(out, s, kk, "R")
            return
        k.zero(out, (m + 1 + n) * width)
        v_rows = k.at(out, (m + 1) * width)
        k.call("gesdd", *_with(head, 8, v_rows), *tail)
        k.check("did not converge")
        k.transpose(out, u, ucols, m, src_ld=m, dst_ld=width)
        k.widen(k.at(out, m * width), s, kk)
        k.conj(v_rows, n * width)
    k.each_matrix(body)
    return 4 * m * n * kk + (8 * kk ** 3 if compute_uv else 0)


def _with(args: list, pos: int, value: Any) -> list:
    out = list(args)
    out[pos] = value
    return out


def qr(k: Any, ins: Any, operands: list, complete: bool) -> int:
    """geqrf, then orgqr / ungqr, of A column-major (transposed into work space), as NumPy.
    Q column-major is Q^T row-major: each column is a row of the packed [Q^T | R]."""
    m, n = operands[0].shape[-2:]
    kk = min(m, n)
    kq = m if complete else kk
    width = m + n
    acm, tau = k.alloc("T", m * max(n, kq)), k.alloc("T", kk)
    mm, nn, nq, nk, info = k.int(m), k.int(n), k.int(kq), k.int(kk), k.info
    orgqr = k.name("orgqr", "ungqr")
    q1 = k.query("geqrf", [mm, nn, acm, mm, tau, None, None, info], {5: "T"})[5]
    q2 = k.query(orgqr, [mm, nq, nk, acm, mm, tau, None, None, info], {6: "T"})[6]
    lwork = k.b.select(k.b.icmp_signed(">", q1, q2), q1, q2)
    work, lw = k.alloc("T", lwork), k.int(lwork)
    b = k.b

    def body(out: Any, a: Any) -> None:
        k.transpose(acm, a, m, n)
        k.call("geqrf", mm, nn, acm, mm, tau, work, lw, info)
        k.check("failed")

        def r_row(i: Any) -> None:          # R's row i: acm[c*m + i] for c >= i, else 0
            def col(c: Any) -> None:
                src = b.load(k.at(acm, b.add(b.mul(c, ir.Constant(I64, m)), i)), typ=k.T)
                v = b.select(b.icmp_signed(">=", c, i), src, k.zero_value())
                b.store(v, k.at(out, b.add(b.mul(i, ir.Constant(I64, width)), b.add(c, ir.Constant(I64, m)))))
            k.loop(n, col, "c")
        k.loop(kq, r_row, "i")
        k.call(orgqr, mm, nq, nk, acm, mm, tau, work, lw, info)
        k.check("failed")

        def q_row(i: Any) -> None:
            k.copy(k.at(out, b.mul(i, ir.Constant(I64, width))),
                   k.at(acm, b.mul(i, ir.Constant(I64, m))), m)
        k.loop(kq, q_row, "i")
    k.each_matrix(body)
    return 4 * m * n * kk


# ---- math the bodies call ----------------------------------------------------------------

def _intrinsic(k: Any, name: str) -> Any:
    return k.llmod.declare_intrinsic(name, [k.R])


def _hypot(k: Any) -> Any:
    name = "hypot" if k.R == F64 else "hypotf"
    try:
        return k.llmod.get_global(name)
    except KeyError:
        return ir.Function(k.llmod, ir.FunctionType(k.R, [k.R, k.R]), name)
