"""convolution: the N-d convolution of deep learning (a cross-correlation: the window is
not flipped), in one fixed layout.

Layout (NCHW / OIHW for two spatial dimensions, any number of them):
    lhs (N, C, *spatial), rhs (O, C // G, *window), out (N, O, *spatial_out)
with G = feature_group_count: output channel o reads the input channels of its group
(o // (O // G)). Attributes, one entry per spatial dimension:

- window_strides: the step between windows;
- padding_low / padding_high: zeros added before / after (negative crops);
- lhs_dilation: holes of d - 1 zeros between input elements (transposed convolutions);
- rhs_dilation: holes between window taps (atrous convolution).

    out[n, o, y] = sum over c, k of
                   xp[n, g(o) * C/G + c, y * stride + k * rhs_dilation] * rhs[o, c, k]

where xp is the input dilated by lhs_dilation, then padded. Compiled code never sees this
primitive: the pass `expand_convolution` rewrites it into pads, slices and a dot_general.
"""
from __future__ import annotations

import itertools
import string
from typing import Optional

import numpy as np

from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from ..primitive import LIBRARY, TypedArray, apply, fail, primitive

CONV_ATTRS = ("window_strides", "padding_low", "padding_high", "lhs_dilation", "rhs_dilation",
              "feature_group_count")


def dilated(size: int, dilation: int) -> int:
    return 0 if size == 0 else (size - 1) * dilation + 1


def conv_output_size(n: int, k: int, stride: int, lo: int, hi: int, ld: int, rd: int) -> int:
    span = dilated(n, ld) + lo + hi - dilated(k, rd)
    return span // stride + 1 if span >= 0 else 0


def _check_attrs(operands, nsp, window_strides, padding_low, padding_high, lhs_dilation,
                 rhs_dilation):
    for name, v in (("window_strides", window_strides), ("padding_low", padding_low),
                    ("padding_high", padding_high), ("lhs_dilation", lhs_dilation),
                    ("rhs_dilation", rhs_dilation)):
        if len(v) != nsp:
            fail("convolution", operands, f"{name} needs {nsp} entries (one per spatial "
                                          f"dimension), got {tuple(v)}")
    for name, v in (("window_strides", window_strides), ("lhs_dilation", lhs_dilation),
                    ("rhs_dilation", rhs_dilation)):
        if any(int(s) < 1 for s in v):
            fail("convolution", operands, f"{name} must be >= 1, got {tuple(v)}")


def _conv_infer(operands, window_strides, padding_low, padding_high, lhs_dilation,
                rhs_dilation, feature_group_count):
    lhs, rhs = operands
    if lhs.dtype is not rhs.dtype or lhs.dtype is D.bool_ or lhs.dtype.is_complex:
        fail("convolution", operands, "operands must share a numeric dtype", TypeError)
    if lhs.ndim < 3 or rhs.ndim != lhs.ndim:
        fail("convolution", operands, "expects lhs (N, C, *spatial) and rhs (O, C/groups, "
                                      "*window) of the same rank >= 3")
    nsp = lhs.ndim - 2
    _check_attrs(operands, nsp, window_strides, padding_low, padding_high, lhs_dilation,
                 rhs_dilation)
    g = feature_group_count
    n, c = lhs.shape[:2]
    o, cg = rhs.shape[:2]
    if g < 1 or c % g or o % g or cg * g != c:
        fail("convolution", operands, f"with feature_group_count={g}, needs C % G == 0, "
                                      f"O % G == 0 and rhs.shape[1] == C / G")
    spatial = []
    for i in range(nsp):
        span = dilated(lhs.shape[2 + i], lhs_dilation[i]) + padding_low[i] + padding_high[i]
        if span < 0:
            fail("convolution", operands, f"padding crops spatial dimension {i} below zero")
        spatial.append(conv_output_size(lhs.shape[2 + i], rhs.shape[2 + i], window_strides[i],
                                        padding_low[i], padding_high[i], lhs_dilation[i],
                                        rhs_dilation[i]))
    return (n, o) + tuple(spatial), lhs.dtype


_conv_infer.dtypes = D.NUMERIC


# ---- the NumPy reference ----------------------------------------------------------------

def dilate_and_pad(x: np.ndarray, first: int, dilation, low, high, value=0) -> np.ndarray:
    """Dilate then pad (negative crops) the axes first, first + 1, ... of x."""
    for i, (d, lo, hi) in enumerate(zip(dilation, low, high)):
        ax = first + i
        n = x.shape[ax]
        shape = list(x.shape)
        shape[ax] = dilated(n, d) + max(lo, 0) + max(hi, 0)
        y = np.full(shape, value, x.dtype)
        idx = [slice(None)] * x.ndim
        idx[ax] = slice(max(lo, 0), max(lo, 0) + dilated(n, d), d)
        y[tuple(idx)] = x
        crop = [slice(None)] * x.ndim
        crop[ax] = slice(-min(lo, 0), shape[ax] + min(hi, 0))
        x = y[tuple(crop)]
    return x


def _conv_ref(lhs, rhs, window_strides, padding_low, padding_high, lhs_dilation, rhs_dilation,
              feature_group_count):
    nsp = lhs.ndim - 2
    wide = np.float64 if lhs.dtype.kind == "f" else np.int64
    x = dilate_and_pad(lhs.astype(wide), 2, lhs_dilation, padding_low, padding_high)
    w = dilate_and_pad(rhs.astype(wide), 2, rhs_dilation, (0,) * nsp, (0,) * nsp)
    spatial = tuple(range(2, 2 + nsp))
    out_shape, _ = _conv_infer((TypedArray(lhs), TypedArray(rhs)), window_strides, padding_low,
                               padding_high, lhs_dilation, rhs_dilation, feature_group_count)
    if 0 in out_shape or 0 in lhs.shape[1:2]:
        return np.zeros(out_shape, lhs.dtype)
    win = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=spatial)
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in window_strides)]
    g = feature_group_count
    n, c = lhs.shape[:2]
    o = rhs.shape[0]
    win = win.reshape((n, g, c // g) + win.shape[2:])
    w = w.reshape((g, o // g, c // g) + w.shape[2:])
    ys = string.ascii_letters[:nsp]
    ks = string.ascii_letters[nsp:2 * nsp]
    out = np.einsum(f"NGC{ys}{ks},GOC{ks}->NGO{ys}", win, w)
    return out.reshape(out_shape).astype(lhs.dtype)


# ---- im2col: shared by the weight gradient and the expansion pass -------------------------

def _taps(x, kernel, out_spatial, a):
    """(N, C, taps, *Y): the input element each window tap reads, for every output. The
    edge padding and the lhs dilation are one pad; each tap is one strided slice."""
    xp = apply("pad", x, A.const(0, x.dtype), edge_padding_low=(0, 0) + tuple(a["padding_low"]),
               edge_padding_high=(0, 0) + tuple(a["padding_high"]),
               interior_padding=(0, 0) + tuple(d - 1 for d in a["lhs_dilation"]))
    n, c = x.shape[:2]
    taps = []
    for k in itertools.product(*[range(size) for size in kernel]):
        start = (0, 0) + tuple(ki * d for ki, d in zip(k, a["rhs_dilation"]))
        limit = (n, c) + tuple(s + (y - 1) * st + 1 if y else s for s, y, st in
                               zip(start[2:], out_spatial, a["window_strides"]))
        tap = apply("slice", xp, start_indices=start, limit_indices=limit,
                    strides=(1, 1) + tuple(a["window_strides"]))
        taps.append(A.reshape(tap, (n, c, 1) + tuple(out_spatial)))
    return taps[0] if len(taps) == 1 else apply("concatenate", *taps, dimension=2)


def im2col(x, kernel, out_spatial, a):
    """The patch matrix of x, one per group: (G, C/G * prod(K), N * prod(Y)), rows in
    (c, *k) order (the weight's own layout), columns in (n, *y) order. Each row is one
    tap of one channel over the whole batch, so the kernel that writes it copies runs of
    the input's rows (contiguous for stride 1) instead of gathering one element per tap,
    and the product is weight (Og, Cg*T) @ patches: no transposed operand."""
    n, c = x.shape[:2]
    g = a["feature_group_count"]
    t = int(np.prod(kernel, dtype=np.int64))
    y = int(np.prod(out_spatial, dtype=np.int64))
    split = A.reshape(_taps(x, kernel, out_spatial, a), (n, g, c // g, t) + tuple(out_spatial))
    ys = tuple(range(4, 4 + len(kernel)))
    cols = A.transpose(split, (1, 2, 3, 0) + ys)                       # (G, Cg, T, N, *Y)
    return A.reshape(cols, (g, (c // g) * t, n * y))


def grouped_cols(z, groups):
    """(N, O, *Y) -> (G, O/G, N * prod(Y)), columns in (n, *y) order."""
    n, o = z.shape[:2]
    sp = tuple(z.shape[2:])
    y = int(np.prod(sp, dtype=np.int64))
    split = A.reshape(z, (n, groups, o // groups) + sp)
    moved = A.transpose(split, (1, 2, 0) + tuple(range(3, 3 + len(sp))))
    return A.reshape(moved, (groups, o // groups, n * y))


def group_dot(lhs, rhs, lhs_contracting: int, rhs_contracting: int):
    """dot_general of two (G, a, b) operands batched over G, contracting one dimension
    each; with one group, a plain matrix product (libraries run those fastest)."""
    if lhs.shape[0] != 1:
        return apply("dot_general", lhs, rhs, lhs_contracting=(lhs_contracting,),
                     rhs_contracting=(rhs_contracting,), lhs_batch=(0,), rhs_batch=(0,))
    a, b = A.reshape(lhs, lhs.shape[1:]), A.reshape(rhs, rhs.shape[1:])
    out = apply("dot_general", a, b, lhs_contracting=(lhs_contracting - 1,),
                rhs_contracting=(rhs_contracting - 1,), lhs_batch=(), rhs_batch=())
    return A.reshape(out, (1,) + out.shape)


# ---- the vector-Jacobian product ----------------------------------------------------------

def _flip_kernel(rhs, groups):
    """(O, C/G, *K) -> (C, O/G, *K) with the window reversed: the kernel that carries the
    output gradient back to the input."""
    o, cg = rhs.shape[:2]
    ks = rhs.shape[2:]
    split = A.reshape(rhs, (groups, o // groups, cg) + ks)
    swapped = A.transpose(split, (0, 2, 1) + tuple(range(3, 3 + len(ks))))
    merged = A.reshape(swapped, (groups * cg, o // groups) + ks)
    return apply("reverse", merged, dimensions=tuple(range(2, 2 + len(ks))))


def _lhs_cotangent(g, lhs, rhs, a):
    if any(s > 1 for s in a["window_strides"]):
        if all(d == 1 for d in a["lhs_dilation"]):
            return _phase_cotangent(g, lhs, rhs, a)
        return _col2im_cotangent(g, lhs, rhs, a)
    low, high = lhs_cotangent_padding(lhs.shape, rhs.shape[2:], g.shape, a)
    return apply("convolution", g, _flip_kernel(rhs, a["feature_group_count"]),
                 window_strides=tuple(a["lhs_dilation"]), padding_low=tuple(low),
                 padding_high=tuple(high), lhs_dilation=tuple(a["window_strides"]),
                 rhs_dilation=tuple(a["rhs_dilation"]),
                 feature_group_count=a["feature_group_count"])


def lhs_cotangent_padding(lhs_shape: tuple, kernel: tuple, g_shape: tuple, a: dict) -> tuple:
    """(low, high): the padding of g in the convolution that carries it back to the input
    (a convolution without window strides). The CPU's weight gradient reads g from that
    same padded buffer (compiler/primitives/conv_direct.py)."""
    low, high = [], []
    for i in range(len(kernel)):
        n, k, y = lhs_shape[2 + i], kernel[i], g_shape[2 + i]
        ld, kd = dilated(n, a["lhs_dilation"][i]), dilated(k, a["rhs_dilation"][i])
        before = kd - 1 - a["padding_low"][i]
        low.append(before)
        high.append(ld + kd - 1 - dilated(y, a["window_strides"][i]) - before)
    return tuple(low), tuple(high)


def _phase_taps(k: int, s: int, d: int, r: int, size: int, y: int, lo: int,
                n: int) -> Optional[tuple]:
    """Along one dimension, the input gradient at the positions p = s * q + r of the
    padded input (`size` long, the input at [lo, lo + n)) that hold an input element, as a
    stride-1 convolution of g (`y` long): (first tap, tap step, taps, dilation, padding
    low, padding high, positions, first input index), or None when no tap reaches them.
    Tap t reaches p when t * d = r (mod s), from g[q - (t * d - r) / s]."""
    taps = [t for t in range(k) if (t * d) % s == r]
    first, end = max(lo, 0), min(lo + n, size)          # padded positions of the input
    q0, q1 = -(-(first - r) // s), -(-(end - r) // s)   # its q of this phase: [q0, q1)
    if not taps or q1 <= q0:
        return None
    step = taps[1] - taps[0] if len(taps) > 1 else 1
    dil = step * d // s if len(taps) > 1 else 1
    reach = (len(taps) - 1) * dil
    low = (taps[0] * d - r) // s + reach - q0
    high = (q1 - q0) - y - low + reach
    return taps[0], step, len(taps), dil, low, high, q1 - q0, s * q0 + r - lo


def _phase_cotangent(g, lhs, rhs, a):
    """The input gradient of a strided convolution, one stride-1 convolution per phase:
    the padded input's positions p = s * q + r (per dimension) receive g through the taps
    t with t * d = r (mod s) only, a smaller kernel (reversed, channels swapped) read at
    every q. Each phase is a plain convolution (the CPU's direct loop; elsewhere im2col
    and a product over no holes) over the input's own positions only (not the padding:
    its rows are as long as g's, not one longer), and the phases interleave into the
    input (`_interleaved`; pads with holes, one add each, where the padding crops)."""
    groups, nsp = a["feature_group_count"], lhs.ndim - 2
    kernel, strides, dil = tuple(rhs.shape[2:]), a["window_strides"], a["rhs_dilation"]
    sizes = tuple(lhs.shape[2:])
    grid = tuple(sizes[i] + a["padding_low"][i] + a["padding_high"][i] for i in range(nsp))
    parts = []                  # (phase's dims, its convolution)
    for phase in itertools.product(*[range(st) for st in strides]):
        dims = [_phase_taps(kernel[i], strides[i], dil[i], phase[i], grid[i], g.shape[2 + i],
                            a["padding_low"][i], sizes[i]) for i in range(nsp)]
        if any(d is None for d in dims):
            continue
        sub = apply("slice", rhs, start_indices=(0, 0) + tuple(d[0] for d in dims),
                    limit_indices=tuple(rhs.shape[:2]) + tuple(d[0] + (d[2] - 1) * d[1] + 1
                                                              for d in dims),
                    strides=(1, 1) + tuple(d[1] for d in dims))
        part = apply("convolution", g, _flip_kernel(sub, groups), window_strides=(1,) * nsp,
                     padding_low=tuple(d[4] for d in dims),
                     padding_high=tuple(d[5] for d in dims), lhs_dilation=(1,) * nsp,
                     rhs_dilation=tuple(d[3] for d in dims), feature_group_count=groups)
        parts.append((dims, part))
    if not parts:
        return A.zeros_like(lhs)
    if all(lo >= 0 for lo in a["padding_low"]) and all(
            d[7] < st for dims, _ in parts for d, st in zip(dims, strides)):
        return _interleaved(parts, lhs, strides)
    zero = A.const(0, g.dtype)
    total = None
    for dims, part in parts:
        placed = apply("pad", part, zero, edge_padding_low=(0, 0) + tuple(d[7] for d in dims),
                       edge_padding_high=(0, 0) + tuple(
                           size - d[7] - (d[6] - 1) * st - 1
                           for size, d, st in zip(sizes, dims, strides)),
                       interior_padding=(0, 0) + tuple(st - 1 for st in strides))
        total = placed if total is None else A.add(total, placed)
    return total


def _interleaved(parts: list, lhs, strides: tuple):
    """The phases' gradients woven into the input's shape: along each dimension, the
    phase whose first input position is j < s fills positions j, j + s, ... Each part,
    padded at its end to m = ceil(n / s) positions, is one block of a
    (N, C, m0, s0, m1, s1, ...) stack (concatenates along the s axes, padded with zeros
    for phases that no tap reaches), reshaped to (N, C, m0 * s0, ...) and cut to the
    input's size. A reader of the result loads one part per element (selects between
    the parts), where pads with holes, summed, computed each part's index, test and
    clamp per element."""
    n, c = lhs.shape[:2]
    sizes = tuple(lhs.shape[2:])
    m = tuple(-(-size // st) for size, st in zip(sizes, strides))
    block = (n, c) + tuple(x for mi in m for x in (mi, 1))
    zero = A.const(0, lhs.dtype)
    by_start = {}
    for dims, part in parts:
        short = (0, 0) + tuple(mi - d[6] for mi, d in zip(m, dims))
        if any(short):
            part = apply("pad", part, zero, edge_padding_low=(0,) * part.ndim,
                         edge_padding_high=short, interior_padding=(0,) * part.ndim)
        by_start[tuple(d[7] for d in dims)] = A.reshape(part, block)

    # (a module-level recursion: a nested recursive function is a reference cycle that
    # keeps the step's nodes, and so its tensors' buffers, alive until the cyclic
    # collector runs, and a buffer still referenced is not donated to the next step)
    woven = A.reshape(_stack(by_start, strides, zero, (), 0),
                      (n, c) + tuple(mi * st for mi, st in zip(m, strides)))
    if woven.shape == lhs.shape:
        return woven
    return apply("slice", woven, start_indices=(0,) * lhs.ndim, limit_indices=lhs.shape,
                 strides=(1,) * lhs.ndim)


def _stack(by_start: dict, strides: tuple, zero, prefix: tuple, axis: int):
    """The (..., m_i, s_i, ...) stack of the phases starting at prefix + (j, ...) (None if
    none does); each run of present phases one concatenate, padded with zeros along the
    s axis where phases are missing (no tap reaches them)."""
    if axis == len(strides):
        return by_start.get(prefix, None)
    pieces = [_stack(by_start, strides, zero, prefix + (j,), axis + 1)
              for j in range(strides[axis])]
    dim, total = 3 + 2 * axis, None
    for first, end in _runs(pieces):
        run = pieces[first:end]
        part = run[0] if len(run) == 1 else apply("concatenate", *run, dimension=dim)
        if end - first < strides[axis]:
            low = [0] * part.ndim
            high = [0] * part.ndim
            low[dim], high[dim] = first, strides[axis] - end
            part = apply("pad", part, zero, edge_padding_low=tuple(low),
                         edge_padding_high=tuple(high), interior_padding=(0,) * part.ndim)
        total = part if total is None else A.add(total, part)
    return total


def _runs(pieces: list) -> list:
    """[first, end) of each run of consecutive pieces that are not None."""
    runs, first = [], None
    for j, p in enumerate(pieces + [None]):
        if p is not None and first is None:
            first = j
        elif p is None and first is not None:
            runs.append((first, j))
            first = None
    return runs


def _col2im_cotangent(g, lhs, rhs, a):
    """The input gradient of a strided convolution as one matrix product and col2im:
    cols = rhs^T @ g (one row per channel and tap, one column per output), then each tap's
    rows are spread back onto the padded input grid (a pad with `stride - 1` holes) and
    the taps summed (pads and adds: one fused kernel). As a convolution it would run over
    g dilated by the stride: for stride 2, three quarters of its patch matrix and of its
    product are zeros."""
    groups = a["feature_group_count"]
    n, c = lhs.shape[:2]
    o, cg = rhs.shape[:2]
    kernel, out_sp = tuple(rhs.shape[2:]), tuple(g.shape[2:])
    nsp, taps = len(kernel), int(np.prod(kernel, dtype=np.int64))
    w = A.reshape(rhs, (groups, o // groups, cg * taps))                 # (G, Og, Cg*T)
    cols = group_dot(w, grouped_cols(g, groups), 1, 1)                   # (G, Cg*T, NY)
    split = A.reshape(cols, (groups, cg, taps, n) + out_sp)
    moved = A.reshape(A.transpose(split, (3, 0, 1, 2) + tuple(range(4, 4 + nsp))),
                      (n, c, taps) + out_sp)                             # (N, C, T, *Y)
    grid = tuple(dilated(lhs.shape[2 + i], a["lhs_dilation"][i]) + a["padding_low"][i]
                 + a["padding_high"][i] for i in range(nsp))            # the padded input
    zero = A.const(0, g.dtype)
    total = None
    for j, k in enumerate(itertools.product(*[range(size) for size in kernel])):
        tap = A.reshape(apply("slice", moved, start_indices=(0, 0, j) + (0,) * nsp,
                              limit_indices=(n, c, j + 1) + out_sp, strides=(1,) * (nsp + 3)),
                        (n, c) + out_sp)
        low = tuple(ki * d for ki, d in zip(k, a["rhs_dilation"]))
        high = tuple(size - lo - dilated(y, s) for size, lo, y, s in
                     zip(grid, low, out_sp, a["window_strides"]))
        placed = apply("pad", tap, zero, edge_padding_low=(0, 0) + low,
                       edge_padding_high=(0, 0) + high,
                       interior_padding=(0, 0) + tuple(s - 1 for s in a["window_strides"]))
        total = placed if total is None else A.add(total, placed)
    # back from the padded, dilated grid to the input: undo the padding, then the holes
    unpadded = apply("pad", total, zero, edge_padding_low=(0, 0) + tuple(-p for p in a["padding_low"]),
                     edge_padding_high=(0, 0) + tuple(-p for p in a["padding_high"]),
                     interior_padding=(0,) * (nsp + 2))
    ld = tuple(a["lhs_dilation"])
    if all(d == 1 for d in ld):
        return unpadded
    return apply("slice", unpadded, start_indices=(0,) * (nsp + 2),
                 limit_indices=unpadded.shape, strides=(1, 1) + ld)


def _rhs_cotangent(g, lhs, rhs, a):
    """The weight gradient: one `convolution_filter_grad` (the CPU computes it by its own
    loop; its expansion elsewhere is im2col and a product)."""
    return apply("convolution_filter_grad", lhs, g, kernel_size=tuple(rhs.shape[2:]), **a)


def _conv_vjp(g, out, lhs, rhs, **attrs):
    if not lhs.dtype.is_float:
        return None, None
    if 0 in out.shape or 0 in lhs.shape:
        return A.zeros_like(lhs), A.zeros_like(rhs)
    return _lhs_cotangent(g, lhs, rhs, attrs), _rhs_cotangent(g, lhs, rhs, attrs)


# ---- the weight gradient, one primitive ------------------------------------------------

class _Shaped:
    """A weight's shape and dtype, for the convolution's shape rule (no data)."""
    def __init__(self, shape: tuple, dtype) -> None:
        self.shape, self.dtype, self.ndim = shape, dtype, len(shape)


def _filter_grad_infer(operands, kernel_size, **a):
    """lhs (N, C, *S), g (N, O, *Y) -> (O, C/G, *kernel_size), Y the convolution's output."""
    lhs, g = operands
    if lhs.dtype is not g.dtype or not lhs.dtype.is_float or lhs.dtype.is_complex:
        fail("convolution_filter_grad", operands, "operands must share a real float dtype",
             TypeError)
    nsp = lhs.ndim - 2
    if g.ndim != lhs.ndim or len(kernel_size) != nsp or g.shape[0] != lhs.shape[0]:
        fail("convolution_filter_grad", operands, "expects lhs (N, C, *S), g (N, O, *Y) and "
                                                  "one kernel size per spatial dimension")
    w = _Shaped((g.shape[1], lhs.shape[1] // max(1, a["feature_group_count"]))
                + tuple(kernel_size), lhs.dtype)
    out, _ = _conv_infer((lhs, w), **a)
    if tuple(out) != tuple(g.shape):
        fail("convolution_filter_grad", operands, f"g must have the convolution's output "
                                                  f"shape {tuple(out)}")
    return tuple(w.shape), lhs.dtype


_filter_grad_infer.dtypes = D.FLOATS


def _filter_grad_ref(lhs, g, kernel_size, window_strides, padding_low, padding_high,
                     lhs_dilation, rhs_dilation, feature_group_count):
    nsp = lhs.ndim - 2
    x = dilate_and_pad(lhs.astype(np.float64), 2, lhs_dilation, padding_low, padding_high)
    groups = feature_group_count
    n, c = lhs.shape[:2]
    o = g.shape[1]
    out = np.zeros((o, c // groups) + tuple(kernel_size))
    gg = g.astype(np.float64).reshape((n, groups, o // groups) + g.shape[2:])
    ys = g.shape[2:]
    for k in itertools.product(*[range(size) for size in kernel_size]):
        idx = tuple(slice(ki * d, ki * d + (y - 1) * s + 1, s) for ki, d, y, s in
                    zip(k, rhs_dilation, ys, window_strides))
        tap = x[(slice(None), slice(None)) + idx].reshape((n, groups, c // groups) + ys)
        sp = string.ascii_letters[:nsp]
        part = np.einsum(f"NGC{sp},NGO{sp}->GOC", tap, gg)
        out[(slice(None), slice(None)) + tuple(k)] = part.reshape(o, c // groups)
    return out.astype(lhs.dtype)


def _filter_grad_vjp(ct, out, lhs, g, kernel_size, **a):
    """Bilinear in lhs and g: <ct, gW> = <g, conv(lhs, ct)>."""
    return _lhs_cotangent(g, lhs, ct, a), apply("convolution", lhs, ct, **a)


def _filter_grad_expand(lhs, g, kernel_size, **a):
    """im2col and one (batched over groups) matrix product:
    gW[o, c, k] = sum over n, y of g[n, o, y] * patches[n, c, k, y]. (As a convolution
    it would have a window as large as the output: one tap per output element.)"""
    groups = a["feature_group_count"]
    o, cg = g.shape[1], lhs.shape[1] // groups
    patches = im2col(lhs, tuple(kernel_size), tuple(g.shape[2:]), a)     # (G, Cg*T, NY)
    cols = grouped_cols(g, groups)                                       # (G, Og, NY)
    prod = group_dot(cols, patches, 2, 2)                                # (G, Og, Cg*T)
    return A.reshape(prod, (o, cg) + tuple(kernel_size))


def _filter_grad_flops(ins, operands):
    return 2 * int(np.prod(operands[1].shape, dtype=np.int64)) * \
        int(np.prod(ins.shape[1:], dtype=np.int64))


convolution_filter_grad = primitive(
    "convolution_filter_grad", LIBRARY, _filter_grad_infer, _filter_grad_ref,
    attrs=("kernel_size",) + CONV_ATTRS, vjp=_filter_grad_vjp, expand=_filter_grad_expand,
    flops=_filter_grad_flops, batch=B.loop_over_batch,
    doc="The weight gradient of convolution: lhs (N, C, *S) and the output's cotangent "
        "g (N, O, *Y) -> (O, C/G, *kernel_size).")


# ---- the expansion: what code generation sees instead ----------------------------------

def _expand(x, w, **a):
    """im2col plus one matrix product (the pass expand_convolution splices it in)."""
    out_shape = apply("convolution", x, w, **a).shape      # recorded only for its shape
    if 0 in out_shape or 0 in x.shape or 0 in w.shape:
        return A.full(0, out_shape, x.dtype)
    n, o = out_shape[:2]
    out_spatial = tuple(out_shape[2:])
    g = a["feature_group_count"]
    patches = im2col(x, tuple(w.shape[2:]), out_spatial, a)            # (G, Cg*T, N*Y)
    lhs = A.reshape(w, (g, o // g, patches.shape[1]))                  # (G, Og, Cg*T)
    prod = group_dot(lhs, patches, 2, 1)                               # (G, Og, N*Y)
    nsp = len(out_spatial)
    back = A.reshape(prod, (g, o // g, n) + out_spatial)               # (G, Og, N, *Y)
    moved = A.transpose(back, (2, 0, 1) + tuple(range(3, 3 + nsp)))    # (N, G, Og, *Y)
    return A.reshape(moved, out_shape)


def _conv_batch(node, size, operands, batched):
    """A batched image stack folds into the images' own batch dimension; per-element
    kernels are convolved one element at a time."""
    if batched[1]:
        return B.loop_over_batch(node, size, operands, batched)
    lhs, rhs = operands
    folded = apply("reshape", lhs, shape=(size * lhs.shape[1],) + tuple(lhs.shape[2:]))
    out = B.same_op(node, [folded, rhs])
    return apply("reshape", out, shape=(size,) + tuple(node.shape))


convolution = primitive("convolution", LIBRARY, _conv_infer, _conv_ref, attrs=CONV_ATTRS,
                        vjp=_conv_vjp, vjp_by_type=True, expand=_expand, batch=_conv_batch,
                        doc="N-d cross-correlation, lhs (N, C, *S), rhs (O, C/G, *K) -> "
                            "(N, O, *S'), with strides, padding, lhs/rhs dilation and groups.")
