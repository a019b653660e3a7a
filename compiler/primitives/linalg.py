"""dot_general: the matrix product with batch and contracting dimensions, as XLA defines it.
Compiled code hands it to a library (BLAS on the CPU, cuBLAS on the GPU)."""
from __future__ import annotations

import numpy as np

from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..passes import algebraic_simplifier as S
from ..hlo.shapes import num_elements
from ..primitive import (LIBRARY, LibraryCall, TypedArray, apply, fail, lower_on_cpu, primitive,
                         widen_half)


def free_dims(ndim: int, contracting, batch) -> list:
    return [d for d in range(ndim) if d not in contracting and d not in batch]


def _dot_infer(operands, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch):
    lhs, rhs = operands
    if lhs.dtype is not rhs.dtype or lhs.dtype is D.bool_:
        fail("dot_general", operands, "operands must share a numeric dtype", TypeError)
    if len(lhs_contracting) != len(rhs_contracting) or len(lhs_batch) != len(rhs_batch):
        fail("dot_general", operands, "contracting and batch dimensions must pair up")
    dims = list(lhs_contracting) + list(lhs_batch), list(rhs_contracting) + list(rhs_batch)
    for x, ds in zip(operands, dims):
        if len(set(ds)) != len(ds) or any(not 0 <= d < x.ndim for d in ds):
            fail("dot_general", operands, "dimension numbers out of range or repeated", IndexError)
    for a, b in zip(dims[0], dims[1]):
        if lhs.shape[a] != rhs.shape[b]:
            fail("dot_general", operands,
                 f"lhs dimension {a} (size {lhs.shape[a]}) does not match rhs dimension {b} "
                 f"(size {rhs.shape[b]})")
    shape = tuple(lhs.shape[d] for d in lhs_batch)
    shape += tuple(lhs.shape[d] for d in free_dims(lhs.ndim, lhs_contracting, lhs_batch))
    shape += tuple(rhs.shape[d] for d in free_dims(rhs.ndim, rhs_contracting, rhs_batch))
    return shape, lhs.dtype


def _size(shape, dims) -> int:
    return int(np.prod([shape[d] for d in dims], dtype=np.int64))


def gemm_layout(lhs_shape, rhs_shape, lhs_contracting, rhs_contracting, lhs_batch,
                rhs_batch) -> dict:
    """The product as (batch, m, k) @ (batch, k, n): the operand transpositions that get
    there ("lhs_perm", "rhs_perm") and the sizes. A device's GEMM (and the reference)
    reads the operands through these views."""
    lf = free_dims(len(lhs_shape), lhs_contracting, lhs_batch)
    rf = free_dims(len(rhs_shape), rhs_contracting, rhs_batch)
    return {"lhs_perm": list(lhs_batch) + lf + list(lhs_contracting),
            "rhs_perm": list(rhs_batch) + list(rhs_contracting) + rf,
            "batch": _size(lhs_shape, lhs_batch), "m": _size(lhs_shape, lf),
            "k": _size(lhs_shape, lhs_contracting), "n": _size(rhs_shape, rf)}


def _gemm_args(ins, shapes) -> dict:
    return gemm_layout(*shapes, **{k: tuple(ins.attrs[k]) for k in
                                   ("lhs_contracting", "rhs_contracting", "lhs_batch", "rhs_batch")})


def canonical_operands(lhs, rhs, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch):
    """Transpose and reshape to (batch, m, k) @ (batch, k, n)."""
    g = gemm_layout(lhs.shape, rhs.shape, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch)
    a = np.transpose(lhs, g["lhs_perm"]).reshape(g["batch"], g["m"], g["k"])
    c = np.transpose(rhs, g["rhs_perm"]).reshape(g["batch"], g["k"], g["n"])
    return a, c


def _dot_flops(ins, operands) -> int:
    """2*M*N*K: a multiply and an add for each of the K products of each output element."""
    k = num_elements(tuple(operands[0].shape[d] for d in ins.attrs["lhs_contracting"]))
    return 2 * num_elements(ins.shape) * k


def _dot_ref(lhs, rhs, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch):
    shape, _ = _dot_infer((TypedArray(lhs), TypedArray(rhs)), lhs_contracting, rhs_contracting,
                          lhs_batch, rhs_batch)
    a, c = canonical_operands(lhs, rhs, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch)
    a, c = widen_half(a), widen_half(c)
    return np.matmul(a, c).astype(lhs.dtype).reshape(shape)


def _dot_transpose(g, other, own, own_contracting, other_contracting, own_batch,
                   other_batch, own_first):
    """The cotangent of one operand: contract g with the other operand over the other's
    free dimensions, then lay the result out as the operand."""
    own_free = free_dims(own.ndim, own_contracting, own_batch)
    other_free = free_dims(other.ndim, other_contracting, other_batch)
    nb = len(own_batch)
    # g: batch dims, then the lhs's free dims, then the rhs's
    if own_first:
        g_other = tuple(range(nb + len(own_free), g.ndim))
    else:
        g_other = tuple(range(nb, nb + len(other_free)))
    r = apply("dot_general", g, other, lhs_contracting=g_other, rhs_contracting=tuple(other_free),
              lhs_batch=tuple(range(nb)), rhs_batch=tuple(other_batch))
    # r: batch, own free (from g), then the other's contracting dims in increasing order
    rest = [own_contracting[list(other_contracting).index(d)] for d in sorted(other_contracting)]
    src = list(own_batch) + own_free + rest
    return A.transpose(r, tuple(src.index(d) for d in range(own.ndim)))


def _dot_vjp(g, out, lhs, rhs, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch,
             wanted=(True, True)):
    """Partial: a first layer's input (data) needs no cotangent."""
    if not lhs.dtype.is_inexact:
        return None, None
    glhs = _dot_transpose(g, rhs, lhs, lhs_contracting, rhs_contracting, lhs_batch, rhs_batch,
                          own_first=True) if wanted[0] else None
    grhs = _dot_transpose(g, lhs, rhs, rhs_contracting, lhs_contracting, rhs_batch, lhs_batch,
                          own_first=False) if wanted[1] else None
    return glhs, grhs


def _dot_batch(node, size, operands, batched):
    """Both batched: the batch axis becomes a leading batch dimension of the product.
    One batched: it is a free dimension of that side; the result is moved to the front."""
    a = node.attrs
    lc, rc, lb, rb = (tuple(a[k]) for k in ("lhs_contracting", "rhs_contracting",
                                             "lhs_batch", "rhs_batch"))
    lhs, rhs = operands
    if batched[0] and batched[1]:
        return B.same_op(node, operands, lhs_contracting=B.shifted(lc),
                         rhs_contracting=B.shifted(rc), lhs_batch=(0,) + B.shifted(lb),
                         rhs_batch=(0,) + B.shifted(rb))
    if batched[0]:
        out = B.same_op(node, operands, lhs_contracting=B.shifted(lc), lhs_batch=B.shifted(lb))
        return B.move_to_front(out, len(lb))
    out = B.same_op(node, operands, rhs_contracting=B.shifted(rc), rhs_batch=B.shifted(rb))
    return B.move_to_front(out, len(lb) + lhs.ndim - len(lc) - len(lb))


dot_general = primitive("dot_general", LIBRARY, _dot_infer, _dot_ref,
                        attrs=("lhs_contracting", "rhs_contracting", "lhs_batch", "rhs_batch"),
                        doc="out = batch dims, then lhs free dims, then rhs free dims.",
                        vjp=_dot_vjp, vjp_partial=True, vjp_by_type=True,
                        library=LibraryCall("gemm", _gemm_args),
                        batch=_dot_batch, flops=_dot_flops, simplify=S.dot_transposed_operand)


# A product this small (multiply-adds, no batch dimensions) is computed on the CPU by a
# generated reduction, sum(broadcast(lhs) * broadcast(rhs)) over the contracting axes,
# fused like any other, not by a GEMM tile function: the tile functions are generic
# native code that LLVM builds once per machine (0.13-0.22 s each), and a program whose
# only products are tiny (a CNN's classifier: 32x64 @ 64x10 and its two gradients)
# paid for two of them in its first step with an empty cache. At this size the
# reduction's loop costs microseconds either way.
SMALL_PRODUCT = 1 << 15
# One row times a matrix (a decoder's token, 1x64 @ 64x256) stays a library call: the
# reduction reads the matrix's columns, and the example decoder's compiled loop ran 7x
# slower on it (5.4 -> 39 us a token; bench/bench_generate.py).
_SMALL_PRODUCT_DTYPES = (D.float32, D.float64)


def _small_product(ins, lhs, rhs):
    """dot_general as a reduction where it is small (see SMALL_PRODUCT), else None."""
    a = ins.attrs
    lc, rc = tuple(a["lhs_contracting"]), tuple(a["rhs_contracting"])
    if a["lhs_batch"] or ins.dtype not in _SMALL_PRODUCT_DTYPES \
            or num_elements(ins.shape) * _size(lhs.shape, lc) > SMALL_PRODUCT:
        return None
    lf, rf = free_dims(lhs.ndim, lc, ()), free_dims(rhs.ndim, rc, ())
    if _size(lhs.shape, lf) == 1 and _size(rhs.shape, rf) > 1:
        return None                 # one row times a matrix (see SMALL_PRODUCT)
    out, nc = len(ins.shape), len(lc)
    full = tuple(ins.shape) + tuple(lhs.shape[d] for d in lc)
    contracting = tuple(range(out, out + nc))
    x = A.broadcast(A.transpose(lhs, lf + list(lc)), full, tuple(range(len(lf))) + contracting)
    y = A.broadcast(A.transpose(rhs, rf + list(rc)), full,
                    tuple(range(len(lf), out)) + contracting)
    return A.reduce_sum(A.mul(x, y), contracting)


lower_on_cpu("dot_general", _small_product)
