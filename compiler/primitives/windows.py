"""reduce_window: a reduction over sliding windows (pooling).

`reduce_window(x, kind, window_dimensions, window_strides, padding_low, padding_high)`
with one entry per dimension of x (1 for the batch and channel dimensions of a pooling).
The padding (non-negative) holds the identity of `kind` (0 for sum, the lowest value for
max, the highest for min), so a max pool never picks a padding element.

    out[y] = kind over k of xp[y * stride + k],   xp = x padded

Average pooling is a sum divided by the count (see ops/convolution.py). Compiled code never
sees this primitive: `expand_convolution` rewrites it into strided slices combined
elementwise.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..primitive import REDUCTION, TypedArray, apply, fail, primitive, widen_half
from .reduction import identity

WINDOW_KINDS = ("sum", "max", "min")
WINDOW_ATTRS = ("kind", "window_dimensions", "window_strides", "padding_low", "padding_high")


def window_output_size(n: int, w: int, s: int, lo: int, hi: int) -> int:
    span = n + lo + hi - w
    return span // s + 1 if span >= 0 else 0


def _infer(operands, kind, window_dimensions, window_strides, padding_low, padding_high):
    (x,) = operands
    if kind not in WINDOW_KINDS:
        fail("reduce_window", operands, f"kind must be one of {WINDOW_KINDS}, got {kind!r}")
    if x.dtype is D.bool_ or x.dtype.is_complex:
        fail("reduce_window", operands, "needs real numeric operands", TypeError)
    attrs = (window_dimensions, window_strides, padding_low, padding_high)
    if any(len(a) != x.ndim for a in attrs):
        fail("reduce_window", operands, f"window, strides and padding need {x.ndim} entries "
                                        "(one per dimension)")
    if any(w < 1 for w in window_dimensions) or any(s < 1 for s in window_strides):
        fail("reduce_window", operands, "window dimensions and strides must be >= 1")
    if any(p < 0 for p in tuple(padding_low) + tuple(padding_high)):
        fail("reduce_window", operands, "padding must be >= 0")
    return tuple(window_output_size(*a) for a in zip(x.shape, *attrs)), x.dtype


_infer.dtypes = D.NUMERIC

_NP = {"sum": np.sum, "max": np.max, "min": np.min}


def _reference(x, kind, window_dimensions, window_strides, padding_low, padding_high):
    shape, _ = _infer((TypedArray(x),), kind, window_dimensions, window_strides, padding_low,
                      padding_high)
    fill = identity(kind, D.from_numpy(x.dtype))
    wide = widen_half(x)
    xp = np.pad(wide, list(zip(padding_low, padding_high)), constant_values=fill)
    if 0 in shape:
        return np.zeros(shape, x.dtype)
    win = np.lib.stride_tricks.sliding_window_view(xp, tuple(window_dimensions))
    win = win[tuple(slice(None, None, s) for s in window_strides)]
    win = win[tuple(slice(0, n) for n in shape)]
    axes = tuple(range(x.ndim, 2 * x.ndim))
    return np.asarray(_NP[kind](win, axis=axes)).astype(x.dtype)


# ---- the vector-Jacobian product ----------------------------------------------------------

def window_slice(xp, offset, strides, out_shape):
    """The elements that window tap `offset` reads, for every output position."""
    limit = tuple(k + (y - 1) * s + 1 if y else k for k, s, y in zip(offset, strides, out_shape))
    return apply("slice", xp, start_indices=tuple(offset), limit_indices=limit,
                 strides=tuple(strides))


def _sum_vjp(g, x, window_dimensions, window_strides, padding_low):
    """Each input element gets the sum of g over the windows that hold it: g spread out by
    the strides, padded, and summed over windows of the same size."""
    low, high = [], []
    for n, w, s, lo, y in zip(x.shape, window_dimensions, window_strides, padding_low, g.shape):
        low.append(w - 1 - lo)
        high.append(n + lo - (y - 1) * s - 1)
    spread = apply("pad", g, A.const(0, g.dtype), edge_padding_low=tuple(low),
                   edge_padding_high=tuple(high),
                   interior_padding=tuple(s - 1 for s in window_strides))
    return apply("reduce_window", spread, kind="sum", window_dimensions=tuple(window_dimensions),
                 window_strides=(1,) * x.ndim, padding_low=(0,) * x.ndim,
                 padding_high=(0,) * x.ndim)


def tiles(x_shape, window_dimensions, window_strides, padding_low, padding_high) -> bool:
    """Windows that tile x: stride == window and no padding (max_pool2d(2) and the like)."""
    return (tuple(window_dimensions) == tuple(window_strides) and not any(padding_low)
            and not any(padding_high))


def tile_view(x, window_dimensions, out_shape):
    """x cut to whole windows and reshaped to (y0, w0, y1, w1, ...)."""
    used = tuple(y * w for y, w in zip(out_shape, window_dimensions))
    if used != x.shape:
        x = apply("slice", x, start_indices=(0,) * x.ndim, limit_indices=used,
                  strides=(1,) * x.ndim)
    return A.reshape(x, tuple(v for y, w in zip(out_shape, window_dimensions) for v in (y, w)))


def _tiled_choice_vjp(g, out, x, window_dimensions):
    """The reduce max/min rule on the (y, w) view: each window's share of g is split
    between its elements equal to the result."""
    view = tile_view(x, window_dimensions, out.shape)
    outer = tuple(range(0, view.ndim, 2))
    hit = A.convert(A.compare(view, A.broadcast(out, view.shape, outer), "EQ"), x.dtype)
    count = A.reduce_sum(hit, range(1, view.ndim, 2))
    share = A.broadcast(A.div(g, count), view.shape, outer)
    used = tuple(y * w for y, w in zip(out.shape, window_dimensions))
    gx = A.reshape(A.mul(share, hit), used)
    if used == x.shape:
        return gx
    return apply("pad", gx, A.const(0, g.dtype), edge_padding_low=(0,) * x.ndim,
                 edge_padding_high=tuple(n - u for n, u in zip(x.shape, used)),
                 interior_padding=(0,) * x.ndim)


def _choice_vjp(g, out, x, kind, window_dimensions, window_strides, padding_low, padding_high):
    """Each window's g is split between its elements equal to the window's max (min): one
    strided slice per tap, compared with the result, put back in place with a pad."""
    if tiles(x.shape, window_dimensions, window_strides, padding_low, padding_high):
        return _tiled_choice_vjp(g, out, x, window_dimensions)
    fill = A.const(identity(kind, x.dtype), x.dtype)
    xp = apply("pad", x, fill, edge_padding_low=tuple(padding_low),
               edge_padding_high=tuple(padding_high), interior_padding=(0,) * x.ndim)
    offsets = list(itertools.product(*[range(w) for w in window_dimensions]))
    hits = [A.convert(A.compare(window_slice(xp, k, window_strides, out.shape), out, "EQ"),
                      x.dtype) for k in offsets]
    count = hits[0]
    for h in hits[1:]:
        count = A.add(count, h)
    share = A.div(g, count)
    total = None
    for offset, hit in zip(offsets, hits):
        high = tuple(p - (k + (y - 1) * s + 1) for p, k, y, s in
                     zip(xp.shape, offset, out.shape, window_strides))
        placed = apply("pad", A.mul(share, hit), A.const(0, g.dtype),
                       edge_padding_low=tuple(offset), edge_padding_high=high,
                       interior_padding=tuple(s - 1 for s in window_strides))
        total = placed if total is None else A.add(total, placed)
    return apply("slice", total, start_indices=tuple(padding_low),
                 limit_indices=tuple(lo + n for lo, n in zip(padding_low, x.shape)),
                 strides=(1,) * x.ndim)


def _vjp(g, out, x, kind, window_dimensions, window_strides, padding_low, padding_high):
    if not x.dtype.is_float:
        return (None,)
    if 0 in out.shape or 0 in x.shape:
        return (A.zeros_like(x),)
    if kind == "sum":
        return (_sum_vjp(g, x, window_dimensions, window_strides, padding_low),)
    return (_choice_vjp(g, out, x, kind, window_dimensions, window_strides, padding_low,
                        padding_high),)


# ---- the expansion: what code generation sees instead ----------------------------------

_COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}


def _expand(x, kind, window_dimensions, window_strides, padding_low, padding_high):
    """Tiling windows: a reshape and a reduce; others: a pad, one strided slice per window
    tap and an elementwise chain combining them (the pass expand_convolution splices it in)."""
    out_shape = apply("reduce_window", x, kind=kind, window_dimensions=window_dimensions,
                      window_strides=window_strides, padding_low=padding_low,
                      padding_high=padding_high).shape      # recorded only for its shape
    if 0 in out_shape:
        return A.full(0, out_shape, x.dtype)
    if tiles(x.shape, window_dimensions, window_strides, padding_low, padding_high):
        view = tile_view(x, tuple(window_dimensions), out_shape)
        return apply("reduce", view, axes=tuple(range(1, view.ndim, 2)), kind=kind)
    fill = A.const(identity(kind, x.dtype), x.dtype)
    xp = apply("pad", x, fill, edge_padding_low=tuple(padding_low),
               edge_padding_high=tuple(padding_high), interior_padding=(0,) * x.ndim)
    total = None
    for offset in itertools.product(*[range(w) for w in window_dimensions]):
        tap = window_slice(xp, offset, tuple(window_strides), out_shape)
        total = tap if total is None else apply(_COMBINE[kind], total, tap)
    return total


def _batch(node, size, operands, batched):
    a = node.attrs
    return B.same_op(node, operands, window_dimensions=(1,) + tuple(a["window_dimensions"]),
                     window_strides=(1,) + tuple(a["window_strides"]),
                     padding_low=(0,) + tuple(a["padding_low"]),
                     padding_high=(0,) + tuple(a["padding_high"]))


reduce_window = primitive("reduce_window", REDUCTION, _infer, _reference, attrs=WINDOW_ATTRS,
                          vjp=_vjp, expand=_expand, batch=_batch,
                          doc="Sum, max or min over sliding windows; the padding holds the "
                              "identity. The max/min gradient of a window is split between "
                              "its elements equal to the result (as for reduce).")
