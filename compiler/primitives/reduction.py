"""Reductions: reduce (sum, prod, max, min, and, or over any set of axes), argmax/argmin
along one axis, and cumulative scans."""
from __future__ import annotations

import numpy as np

from ..transforms import autodiff
from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..passes import algebraic_simplifier as S
from dataclasses import dataclass
from typing import Optional

from ..primitive import (NOT_DIFFERENTIABLE, OPAQUE, PRIMITIVES, REDUCTION, LibraryCall, Loop,
                         apply, fail, primitive, widen_half)

REDUCERS = ("sum", "prod", "max", "min", "and", "or")


def identity(kind: str, dtype: D.DType):
    """The value a reduction starts from (and the result over zero elements)."""
    if kind == "max":
        return D.min_value(dtype)
    if kind == "min":
        return D.max_value(dtype)
    return {"sum": 0, "prod": 1, "and": True, "or": False}[kind]


@dataclass(frozen=True)
class Reducer:
    """How a reduction combines what it reads, as code generation needs it: `kind` (one of
    REDUCERS) combines values; with `arg`, the result is the first index of the best value
    (kind max: argmax; min: argmin), NaN counting as best."""
    kind: str
    arg: bool = False

    def start(self, dtype: D.DType):
        """The accumulator's first value (of the reduced values' dtype)."""
        return identity(self.kind, dtype)


def reducer_of(ins) -> Optional[Reducer]:
    """The Reducer of a reduction instruction, from its stanza; None for other ops."""
    rule = PRIMITIVES[ins.op].reducer
    return rule(ins.attrs) if rule is not None else None


def _check_axes(op, operands, axes, ndim):
    if len(set(axes)) != len(axes) or any(not 0 <= a < ndim for a in axes) or list(axes) != sorted(axes):
        fail(op, operands, f"axes {tuple(axes)} must be distinct, increasing and within rank {ndim}",
             IndexError)


def _reduce_infer(operands, axes, kind):
    (x,) = operands
    if kind not in REDUCERS:
        fail("reduce", operands, f"kind must be one of {REDUCERS}, got {kind!r}")
    if kind in ("and", "or") and x.dtype is not D.bool_:
        fail("reduce", operands, f"reduce {kind} needs bool operands", TypeError)
    if kind not in ("and", "or") and x.dtype is D.bool_:
        fail("reduce", operands, f"reduce {kind} needs numeric operands", TypeError)
    if kind in ("max", "min") and x.dtype.is_complex:
        fail("reduce", operands, f"reduce {kind} needs ordered (real) operands", TypeError)
    _check_axes("reduce", operands, axes, x.ndim)
    return tuple(n for i, n in enumerate(x.shape) if i not in axes), x.dtype


_NP = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "and": np.all, "or": np.any}


def _reduce_ref(x, axes, kind):
    axes = tuple(axes)
    out_shape = tuple(n for i, n in enumerate(x.shape) if i not in axes)
    if any(x.shape[a] == 0 for a in axes):
        return np.full(out_shape, identity(kind, D.from_numpy(x.dtype)), x.dtype)
    wide = widen_half(x)
    if kind in ("sum", "prod"):
        return np.asarray(_NP[kind](wide, axis=axes, dtype=wide.dtype)).astype(x.dtype)
    return np.asarray(_NP[kind](wide, axis=axes)).astype(x.dtype)


# ---- vector-Jacobian products ---------------------------------------------------------

def _kept(x, axes):
    return tuple(d for d in range(x.ndim) if d not in axes)


def _reduce_vjp(g, out, x, axes, kind):
    if kind in ("and", "or"):
        return (None,)
    spread = A.broadcast(g, x.shape, _kept(x, axes))
    if kind == "sum":
        return (spread,)
    if kind == "prod":
        return (_prod_vjp(g, x, axes),)
    # max/min: ties share the gradient equally
    hit = A.convert(A.compare(x, A.broadcast(out, x.shape, _kept(x, axes)), "EQ"), x.dtype)
    count = A.broadcast(A.reduce_sum(hit, axes), x.shape, _kept(x, axes))
    return (A.mul(A.div(spread, count), hit),)


def _exclusive_products(rows):
    """For rows (R, K): out[r, k] = prod of rows[r, j] for j != k, with no division (so a
    zero factor is handled): the product of what is before times what is after."""
    r, k = rows.shape
    one = A.const(1, rows.dtype)
    before = apply("cumulative", rows, axis=1, kind="prod", reverse=False)
    before = apply("pad", before, one, edge_padding_low=(0, 1), edge_padding_high=(0, -1),
                   interior_padding=(0, 0))
    after = apply("cumulative", rows, axis=1, kind="prod", reverse=True)
    after = apply("pad", after, one, edge_padding_low=(0, -1), edge_padding_high=(0, 1),
                  interior_padding=(0, 0))
    return A.mul(before, after)


def _prod_vjp(g, x, axes):
    kept = _kept(x, axes)
    perm = kept + tuple(axes)
    moved = A.transpose(x, perm)
    r = int(np.prod([x.shape[d] for d in kept], dtype=np.int64))
    k = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))
    if k == 0:
        return A.zeros_like(x)
    others = _exclusive_products(A.reshape(moved, (r, k)))
    grow = A.broadcast(A.reshape(g, (r,)), (r, k), (0,))
    gmoved = A.reshape(A.mul(grow, others), moved.shape)
    return A.transpose(gmoved, A.inverse_permutation(perm))


def _cumulative_vjp(g, out, x, axis, kind, reverse):
    if kind == "sum":
        return (apply("cumulative", g, axis=axis, kind="sum", reverse=not reverse),)
    if kind == "prod":
        return (_cumulative_prod_vjp(g, x, axis, reverse),)
    return (_running_extreme_vjp(g, out, x, axis, reverse),)


def _shifted_in(y, axis, shift, fill):
    """y moved `shift` places along `axis` (toward the end), `fill` coming in."""
    n = y.shape[axis]
    limit = list(y.shape)
    limit[axis] = n - shift
    kept = apply("slice", y, start_indices=(0,) * y.ndim, limit_indices=tuple(limit),
                 strides=(1,) * y.ndim)
    low = [0] * y.ndim
    low[axis] = shift
    return apply("pad", kept, A.const(fill, y.dtype), edge_padding_low=tuple(low),
                 edge_padding_high=(0,) * y.ndim, interior_padding=(0,) * y.ndim)


def _scan_products(x, axis):
    """The inclusive product scan written as log2(n) shifted multiplies (Hillis-Steele)."""
    y, shift = x, 1
    while shift < x.shape[axis]:
        y = A.mul(y, _shifted_in(y, axis, shift, 1))
        shift *= 2
    return y


def _cumulative_prod_vjp(g, x, axis, reverse):
    """Differentiate the scan written with multiplies: exact where x has zeros too (no
    division), O(n log n) fusable work."""
    if x.shape[axis] == 0:
        return A.zeros_like(x)
    src = apply("reverse", x, dimensions=(axis,)) if reverse else x
    seed = apply("reverse", g, dimensions=(axis,)) if reverse else g
    (gx,) = autodiff.vjp_graph(_scan_products(src, axis), [src], seed, through_sources=False)
    if gx is None:
        return A.zeros_like(x)
    return apply("reverse", gx, dimensions=(axis,)) if reverse else gx


def _running_extreme_vjp(g, out, x, axis, reverse):
    """out_i is x at the latest position (toward i) where x reached the running max/min;
    g_i goes there."""
    n = x.shape[axis]
    where = A.iota(x.shape, D.int64, axis)
    attained = A.compare(x, out, "EQ")
    if reverse:
        pos = A.select(attained, where, A.full(n, x.shape, D.int64))
        source = apply("cumulative", pos, axis=axis, kind="min", reverse=True)
    else:
        pos = A.select(attained, where, A.full(-1, x.shape, D.int64))
        source = apply("cumulative", pos, axis=axis, kind="max", reverse=False)
    return A.scatter_add_along_axis(x.shape, source, g, axis)


reduce = primitive("reduce", REDUCTION, _reduce_infer, _reduce_ref, attrs=("axes", "kind"),
                   doc="Combine elements over `axes` with `kind`; the result drops those axes. "
                       "Max and min propagate NaN; their gradient is shared by ties.",
                   vjp=_reduce_vjp, vjp_by_type=True, emit=lambda e, ins, index: e.reduce_at(ins, index),
                   batch=lambda node, size, ops, _: B.same_op(node, ops,
                                                             axes=B.shifted(node.attrs["axes"])),
                   reduced_axes=lambda attrs: tuple(attrs["axes"]),
                   reducer=lambda attrs: Reducer(attrs["kind"]), simplify=S.reduce_no_axes)


def _arg_infer(op):
    def infer(operands, axis, index_dtype):
        (x,) = operands
        if not 0 <= axis < x.ndim:
            fail(op, operands, f"axis {axis} out of range", IndexError)
        if x.shape[axis] == 0:
            fail(op, operands, f"{op} of an empty axis has no answer")
        if x.dtype is D.bool_ or x.dtype.is_complex:
            fail(op, operands, "needs real numeric operands", TypeError)
        return x.shape[:axis] + x.shape[axis + 1:], D.to_dtype(index_dtype)
    return infer


def _arg_axes(attrs: dict) -> tuple:
    return (attrs["axis"],)


def _arg_ref(fn):
    def ref(x, axis, index_dtype):
        wide = widen_half(x)
        return fn(wide, axis=axis).astype(D.to_dtype(index_dtype).np)
    return ref


def _axis_batch(node, size, operands, batched):
    return B.same_op(node, operands, axis=node.attrs["axis"] + 1)


argmax = primitive("argmax", REDUCTION, _arg_infer("argmax"), _arg_ref(np.argmax),
                   attrs=("axis", "index_dtype"), doc="The first index of the largest value "
                                                       "(NaN counts as largest).",
                   vjp=NOT_DIFFERENTIABLE, emit=lambda e, ins, index: e.arg_at(ins, index),
                   reduced_axes=_arg_axes, reducer=lambda attrs: Reducer("max", arg=True),
                   batch=_axis_batch)
argmin = primitive("argmin", REDUCTION, _arg_infer("argmin"), _arg_ref(np.argmin),
                   attrs=("axis", "index_dtype"), doc="The first index of the smallest value.",
                   vjp=NOT_DIFFERENTIABLE, emit=lambda e, ins, index: e.arg_at(ins, index),
                   reduced_axes=_arg_axes, reducer=lambda attrs: Reducer("min", arg=True),
                   batch=_axis_batch)


def _cumulative_infer(operands, axis, kind, reverse):
    (x,) = operands
    if kind not in ("sum", "prod", "max", "min"):
        fail("cumulative", operands, f"kind must be sum, prod, max or min, got {kind!r}")
    if not 0 <= axis < x.ndim:
        fail("cumulative", operands, f"axis {axis} out of range", IndexError)
    if x.dtype is D.bool_ or (x.dtype.is_complex and kind in ("max", "min")):
        fail("cumulative", operands, f"cumulative {kind} needs real numeric operands", TypeError)
    return x.shape, x.dtype


_SCAN = {"sum": np.cumsum, "prod": np.cumprod,
         "max": np.maximum.accumulate, "min": np.minimum.accumulate}


def _cumulative_ref(x, axis, kind, reverse):
    wide = widen_half(x)
    if reverse:
        wide = np.flip(wide, axis)
    out = _SCAN[kind](wide, axis=axis)
    if reverse:
        out = np.flip(out, axis)
    return np.asarray(out).astype(x.dtype)


def _cumulative_loops(ins, operands):
    """out[i] = out[i - 1] (kind) x[i] along the axis, in row-major order (a loop over a
    later, contiguous dimension still vectorizes). Half floats go to the library call:
    the reference accumulates them in float32 and rounds once."""
    if ins.dtype in (D.float16, D.bfloat16):
        return None
    axis, kind, rev = ins.attrs["axis"], ins.attrs["kind"], ins.attrs["reverse"]
    shape, dtype, n = ins.shape, ins.dtype, ins.shape[ins.attrs["axis"]]

    def flip(e, i):
        return e.b.sub(e.const(n - 1), i) if rev else i

    def body(e, out, operands, index):
        i = index[axis]
        at = list(index)
        at[axis] = flip(e, i)
        v = e.load(operands[0], shape, dtype, at)
        prev = list(index)
        prev[axis] = flip(e, e.clamp_index(e.b.sub(i, e.const(1)), 0, n - 1))
        acc = e.combine(kind, e.load(out, shape, dtype, prev), v)
        first = e.b.icmp_signed("==", i, e.const(0))
        e.store(out, shape, e.select(e.boolean(first), v, acc), at)

    return [Loop(shape, (axis,), body)]


cumulative = primitive("cumulative", OPAQUE, _cumulative_infer, _cumulative_ref,
                       attrs=("axis", "kind", "reverse"),
                       doc="Inclusive scan along `axis` (from the end when `reverse`).",
                       vjp=_cumulative_vjp, emit=_cumulative_loops, library=LibraryCall("host"),
                       batch=_axis_batch,
                       holomorphic=False)   # its vjp differentiates a graph: already
                                            # in the conjugate-Wirtinger convention
