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

    out[n, o, y] = sum over c, k of xp[n, g(o) * C/G + c, y * stride + k * rhs_dilation] * rhs[o, c, k]

where xp is the input dilated by lhs_dilation, then padded. Compiled code never sees this
primitive: the pass `expand_convolution` rewrites it into pads, slices and a dot_general.
"""
from __future__ import annotations

import string

import numpy as np

from .. import autodiff as A
from .. import dtypes as D
from ..primitive import LIBRARY, apply, fail, primitive

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
    if lhs.dtype is not rhs.dtype or lhs.dtype is D.bool_:
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
    out_shape, _ = _conv_infer((_View(lhs), _View(rhs)), window_strides, padding_low,
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


class _View:
    def __init__(self, a):
        self.shape, self.dtype, self.ndim = a.shape, D.from_numpy(a.dtype), a.ndim


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
    nsp = lhs.ndim - 2
    low, high = [], []
    for i in range(nsp):
        n, k, y = lhs.shape[2 + i], rhs.shape[2 + i], g.shape[2 + i]
        ld, kd = dilated(n, a["lhs_dilation"][i]), dilated(k, a["rhs_dilation"][i])
        before = kd - 1 - a["padding_low"][i]
        low.append(before)
        high.append(ld + kd - 1 - dilated(y, a["window_strides"][i]) - before)
    return apply("convolution", g, _flip_kernel(rhs, a["feature_group_count"]),
                 window_strides=tuple(a["lhs_dilation"]), padding_low=tuple(low),
                 padding_high=tuple(high), lhs_dilation=tuple(a["window_strides"]),
                 rhs_dilation=tuple(a["rhs_dilation"]),
                 feature_group_count=a["feature_group_count"])


def _channels(x, start, stop):
    lo = (0, start) + (0,) * (x.ndim - 2)
    hi = (x.shape[0], stop) + tuple(x.shape[2:])
    if start == 0 and stop == x.shape[1]:
        return x
    return apply("slice", x, start_indices=lo, limit_indices=hi, strides=(1,) * x.ndim)


def _rhs_cotangent(g, lhs, rhs, a):
    """Correlate the input with the output gradient, batch as the contraction: one
    convolution per group, (C/G, O/G, *K) each."""
    nsp = lhs.ndim - 2
    groups = a["feature_group_count"]
    c, o = lhs.shape[1], rhs.shape[0]
    high = []
    for i in range(nsp):
        n, k, y = lhs.shape[2 + i], rhs.shape[2 + i], g.shape[2 + i]
        used = dilated(y, a["window_strides"][i]) + dilated(k, a["rhs_dilation"][i]) - 1
        high.append(used - dilated(n, a["lhs_dilation"][i]) - a["padding_low"][i])
    swap = (1, 0) + tuple(range(2, 2 + nsp))
    parts = []
    for grp in range(groups):
        x = A.transpose(_channels(lhs, grp * c // groups, (grp + 1) * c // groups), swap)
        k = A.transpose(_channels(g, grp * o // groups, (grp + 1) * o // groups), swap)
        r = apply("convolution", x, k, window_strides=tuple(a["rhs_dilation"]),
                  padding_low=tuple(a["padding_low"]), padding_high=tuple(high),
                  lhs_dilation=tuple(a["lhs_dilation"]), rhs_dilation=tuple(a["window_strides"]),
                  feature_group_count=1)
        parts.append(A.transpose(r, swap))
    return parts[0] if groups == 1 else apply("concatenate", *parts, dimension=0)


def _conv_vjp(g, out, lhs, rhs, **attrs):
    if not lhs.dtype.is_float:
        return None, None
    if 0 in out.shape or 0 in lhs.shape:
        return A.zeros_like(lhs), A.zeros_like(rhs)
    return _lhs_cotangent(g, lhs, rhs, attrs), _rhs_cotangent(g, lhs, rhs, attrs)


convolution = primitive("convolution", LIBRARY, _conv_infer, _conv_ref, attrs=CONV_ATTRS,
                        vjp=_conv_vjp,
                        doc="N-d cross-correlation, lhs (N, C, *S), rhs (O, C/G, *K) -> "
                            "(N, O, *S'), with strides, padding, lhs/rhs dilation and groups.")
