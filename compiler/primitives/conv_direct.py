"""direct_convolution: a 2-D convolution of an input already padded, computed by our own
loop (compiler/codegen/conv_direct.py) where it lies in NCHW, with no patch matrix.

    xp (N, C, Hp, Wp), w (O, C, KH, KW) -> out (N, O, Ho, Wo)
    out[n, o, y, x] = sum over c, ky, kx of
                      xp[n, c, y * sy + ky * dy, x * sx + kx * dx] * w[o, c, ky, kx]

Attributes: window_strides (sy, sx), rhs_dilation (dy, dx), out_size (Ho, Wo). The input
must hold `Wo * sx + (KW - 1) * dx` columns at least (a vector of outputs at stride sx
reads sx * V inputs: the pass that makes this op pads the input that far).

The weight gradient `direct_filter_grad(xp, g)` reads the output gradient as the
(Ho, Wo) = g_size window at g_offset of g's rows and columns: where the input gradient
convolves g padded, both read that one padded buffer.

The CPU's pass `direct_convolutions` (compiler/passes/expand_convolution.py) rewrites a
`convolution` it covers (two spatial dimensions, one group, no lhs dilation, float32 or
float64) into pad + this op; other targets keep im2col and their library's product.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..hlo import dtypes as D
from ..transforms import batching as B
from ..graph import builders as A
from ..graph.node import Node
from ..primitive import OPAQUE, Loop, apply, fail, lower_on_cpu, primitive
from .convolution import (_conv_vjp, _filter_grad_vjp, conv_output_size,
                          lhs_cotangent_padding)

ATTRS = ("window_strides", "rhs_dilation", "out_size")
DTYPES = (D.float32, D.float64)


def _infer(operands, window_strides, rhs_dilation, out_size):
    xp, w = operands
    if xp.dtype is not w.dtype or xp.dtype not in DTYPES:
        fail("direct_convolution", operands, "operands must share a dtype, float32 or float64",
             TypeError)
    if xp.ndim != 4 or w.ndim != 4 or xp.shape[1] != w.shape[1]:
        fail("direct_convolution", operands, "expects xp (N, C, H, W) and w (O, C, KH, KW)")
    if len(window_strides) != 2 or len(rhs_dilation) != 2 or len(out_size) != 2 \
            or min(tuple(window_strides) + tuple(rhs_dilation)) < 1 or min(out_size) < 1:
        fail("direct_convolution", operands, "window_strides, rhs_dilation (>= 1) and "
                                             "out_size (>= 1) need 2 entries each")
    (sy, sx), (dy, dx), (ho, wo) = window_strides, rhs_dilation, out_size
    hp, wp = xp.shape[2:]
    kh, kw = w.shape[2:]
    if (ho - 1) * sy + (kh - 1) * dy + 1 > hp or wo * sx + (kw - 1) * dx > wp:
        fail("direct_convolution", operands, f"out_size {tuple(out_size)} reads past the "
                                             f"input (it needs Wo * sx + (KW - 1) * dx columns)")
    return (xp.shape[0], w.shape[0], ho, wo), xp.dtype


_infer.dtypes = DTYPES


def _reference(xp, w, window_strides, rhs_dilation, out_size):
    (sy, sx), (dy, dx), (ho, wo) = window_strides, rhs_dilation, out_size
    x, k = xp.astype(np.float64), w.astype(np.float64)
    out = np.zeros((xp.shape[0], w.shape[0], ho, wo))
    for ky in range(w.shape[2]):
        for kx in range(w.shape[3]):
            y0, x0 = ky * dy, kx * dx
            win = x[:, :, y0:y0 + (ho - 1) * sy + 1:sy, x0:x0 + (wo - 1) * sx + 1:sx]
            out += np.einsum("nchw,oc->nohw", win, k[:, :, ky, kx])
    return out.astype(xp.dtype)


def _vjp(g, out, xp, w, window_strides, rhs_dilation, out_size):
    """The convolution's own rules, over the natural output of the padded input (the
    outputs past out_size read nothing back: their cotangent is zero)."""
    attrs = dict(window_strides=tuple(window_strides), padding_low=(0, 0),
                 padding_high=(0, 0), lhs_dilation=(1, 1), rhs_dilation=tuple(rhs_dilation),
                 feature_group_count=1)
    full = tuple(conv_output_size(n, k, s, 0, 0, 1, d) for n, k, s, d in
                 zip(xp.shape[2:], w.shape[2:], window_strides, rhs_dilation))
    if full != tuple(out_size):
        g = apply("pad", g, A.const(0, g.dtype), edge_padding_low=(0,) * 4,
                  edge_padding_high=(0, 0) + tuple(f - o for f, o in zip(full, out_size)),
                  interior_padding=(0,) * 4)
    return _conv_vjp(g, g, xp, w, **attrs)


def _loops(ins, operands):
    from ..codegen import conv_direct, llvm_target
    xp, w = operands
    wide = llvm_target.has_feature("avx512f")
    blk = conv_direct.blocking(w.shape[0], *ins.shape[2:], ins.dtype.itemsize,
                               64 if wide else 32, 32 if wide else 16)
    shapes = (xp.shape, w.shape, ins.shape)
    a = ins.attrs

    def body(e, out, ptrs, index):
        conv_direct.body(e, out, ptrs, index, shapes, ins.dtype, tuple(a["window_strides"]),
                         tuple(a["rhs_dilation"]), blk)

    per_block = blk.ob * blk.ry * blk.xb * blk.v * w.shape[1] * w.shape[2] * w.shape[3]
    return [Loop((xp.shape[0],) + blk.space, (), body, work=per_block, vector_code=True)]


def _flops(ins, operands):
    n, o, ho, wo = ins.shape
    _, c, kh, kw = operands[1].shape
    return 2 * n * o * ho * wo * c * kh * kw


direct_convolution = primitive(
    "direct_convolution", OPAQUE, _infer, _reference, attrs=ATTRS, vjp=_vjp, emit=_loops,
    flops=_flops, batch=B.loop_over_batch,
    doc="2-D convolution of a padded NCHW input by our own loop (no patch matrix): "
        "xp (N, C, Hp, Wp), w (O, C, KH, KW) -> (N, O, Ho, Wo).")


# ---- the weight gradient ------------------------------------------------------------------

FILTER_ATTRS = ("window_strides", "rhs_dilation", "kernel_size", "g_offset", "g_size")


def _filter_infer(operands, window_strides, rhs_dilation, kernel_size, g_offset, g_size):
    xp, g = operands
    if xp.dtype is not g.dtype or xp.dtype not in DTYPES:
        fail("direct_filter_grad", operands, "operands must share a dtype, float32 or float64",
             TypeError)
    if xp.ndim != 4 or g.ndim != 4 or xp.shape[0] != g.shape[0] or len(kernel_size) != 2 \
            or min(kernel_size) < 1:
        fail("direct_filter_grad", operands, "expects xp (N, C, H, W), g (N, O, Hg, Wg) and "
                                             "kernel_size (KH, KW)")
    if len(g_offset) != 2 or len(g_size) != 2 or min(g_offset) < 0 or min(g_size) < 1 \
            or any(a + n > m for a, n, m in zip(g_offset, g_size, g.shape[2:])):
        fail("direct_filter_grad", operands, f"g_offset {tuple(g_offset)} and g_size "
                                             f"{tuple(g_size)} must lie inside g's rows and "
                                             f"columns")
    (sy, sx), (dy, dx), (kh, kw) = window_strides, rhs_dilation, kernel_size
    ho, wo = g_size
    if (ho - 1) * sy + (kh - 1) * dy + 1 > xp.shape[2] or wo * sx + (kw - 1) * dx > xp.shape[3]:
        fail("direct_filter_grad", operands, "g's rows and columns read past the input (it "
                                             "needs Wo * sx + (KW - 1) * dx columns)")
    return (g.shape[1], xp.shape[1], kh, kw), xp.dtype


_filter_infer.dtypes = DTYPES


def _window(g, g_offset, g_size):
    """The output gradient's (N, O, Ho, Wo) window of g (g itself, or the window of a
    padded g that the input gradient's convolution reads too)."""
    (oy, ox), (ho, wo) = g_offset, g_size
    return g[:, :, oy:oy + ho, ox:ox + wo]


def _filter_reference(xp, g, window_strides, rhs_dilation, kernel_size, g_offset, g_size):
    (sy, sx), (dy, dx) = window_strides, rhs_dilation
    ho, wo = g_size
    x, gg = xp.astype(np.float64), _window(g, g_offset, g_size).astype(np.float64)
    out = np.zeros((g.shape[1], xp.shape[1]) + tuple(kernel_size))
    for ky in range(kernel_size[0]):
        for kx in range(kernel_size[1]):
            y0, x0 = ky * dy, kx * dx
            win = x[:, :, y0:y0 + (ho - 1) * sy + 1:sy, x0:x0 + (wo - 1) * sx + 1:sx]
            out[:, :, ky, kx] = np.einsum("nchw,nohw->oc", win, gg)
    return out.astype(xp.dtype)


def _filter_vjp(ct, out, xp, g, window_strides, rhs_dilation, kernel_size, g_offset, g_size):
    """convolution_filter_grad's rules over the padded input and g's window, g zero past
    its columns; g's cotangent is zero outside the window."""
    attrs = dict(window_strides=tuple(window_strides), padding_low=(0, 0),
                 padding_high=(0, 0), lhs_dilation=(1, 1), rhs_dilation=tuple(rhs_dilation),
                 feature_group_count=1)
    full = tuple(conv_output_size(n, k, s, 0, 0, 1, d) for n, k, s, d in
                 zip(xp.shape[2:], kernel_size, window_strides, rhs_dilation))
    size = (g.shape[0], g.shape[1]) + tuple(g_size)
    windowed = tuple(g_offset) != (0, 0) or tuple(g_size) != tuple(g.shape[2:])
    gw = g
    if windowed:
        gw = apply("slice", g, start_indices=(0, 0) + tuple(g_offset),
                   limit_indices=(size[0], size[1]) + tuple(a + n for a, n in
                                                            zip(g_offset, g_size)),
                   strides=(1,) * 4)
    gf = gw
    if full != tuple(g_size):
        gf = apply("pad", gw, A.const(0, g.dtype), edge_padding_low=(0,) * 4,
                   edge_padding_high=(0, 0) + tuple(f - o for f, o in zip(full, g_size)),
                   interior_padding=(0,) * 4)
    dx_, dg = _filter_grad_vjp(ct, out, xp, gf, tuple(kernel_size), **attrs)
    if gf is not gw:
        dg = apply("slice", dg, start_indices=(0,) * 4, limit_indices=size, strides=(1,) * 4)
    if windowed:
        dg = apply("pad", dg, A.const(0, g.dtype), edge_padding_low=(0, 0) + tuple(g_offset),
                   edge_padding_high=(0, 0) + tuple(m - a - n for m, a, n in
                                                    zip(g.shape[2:], g_offset, g_size)),
                   interior_padding=(0,) * 4)
    return dx_, dg


def _filter_loops(ins, operands):
    from ..codegen import conv_direct, llvm_target
    xp, g = operands
    wide = llvm_target.has_feature("avx512f")
    plane = int(np.prod(xp.shape[1:])) * ins.dtype.itemsize
    blk = conv_direct.filter_blocking(g.shape[1], tuple(ins.attrs["kernel_size"]),
                                      *ins.attrs["g_size"], ins.dtype.itemsize,
                                      64 if wide else 32, 32 if wide else 16,
                                      xp.shape[0], plane,
                                      int(np.prod(g.shape)) * ins.dtype.itemsize,
                                      xp.shape[1])
    shapes = (xp.shape, g.shape, ins.shape)
    a = ins.attrs
    loops = []
    for taps in blk.taps:
        def body(e, out, ptrs, index, taps=taps):
            conv_direct.filter_body(e, out, ptrs, index, shapes, ins.dtype,
                                    tuple(a["window_strides"]), tuple(a["rhs_dilation"]), blk,
                                    taps, tuple(a["g_offset"]), tuple(a["g_size"]),
                                    32 if wide else 16)
        images = blk.nt or g.shape[0]
        work = blk.ob * len(taps) * images * int(np.prod(a["g_size"]))
        space = tuple(xp.shape[1] if d is None else d for d in blk.space)
        loops.append(Loop(space, (1,) if blk.nt else (), body, work=work, vector_code=True))
    return loops


def _filter_flops(ins, operands):
    n, o = operands[1].shape[:2]
    return 2 * n * o * int(np.prod(ins.attrs["g_size"])) * int(np.prod(ins.shape[1:]))


direct_filter_grad = primitive(
    "direct_filter_grad", OPAQUE, _filter_infer, _filter_reference, attrs=FILTER_ATTRS,
    vjp=_filter_vjp, emit=_filter_loops, flops=_filter_flops, batch=B.loop_over_batch,
    doc="The weight gradient of a 2-D convolution of a padded NCHW input by our own loop: "
        "xp (N, C, Hp, Wp), g (N, O, Hg, Wg) whose (Ho, Wo) = g_size window at g_offset "
        "is the output gradient -> (O, C, KH, KW).")


# ---- the CPU lowering of convolution and its weight gradient (driver: direct_convolutions)

DIRECT_DTYPES = (D.float32, D.float64)


def direct_covers(ins: Any, *operands: Any) -> bool:
    """A convolution or its weight gradient with two spatial dimensions, one group, no lhs
    dilation, float32/float64 operands, nothing empty."""
    a = ins.attrs
    return len(ins.shape) == 4 and a["feature_group_count"] == 1 \
        and all(d == 1 for d in a["lhs_dilation"]) and ins.dtype in DIRECT_DTYPES \
        and 0 not in ins.shape and all(0 not in o.shape for o in operands)


def _lower_convolution(ins: Any, x: Any, w: Any) -> Any:
    if not direct_covers(ins, x, w):
        return None
    return direct_node(x, w, ins.shape[2:], tuple(w.shape[2:]), **ins.attrs)


def _lower_filter_grad(ins: Any, x: Any, g: Any) -> Any:
    if not direct_covers(ins, x, g):
        return None
    return direct_filter_node(x, g, **ins.attrs)


def padded(x: Node, out_spatial: tuple, kernel: tuple, window_strides, padding_low,
           padding_high, rhs_dilation) -> Node:
    """x padded for the direct loops: its own padding, and the right edge far enough for
    the vector reads of the last outputs at a stride (`Wo * sx + (KW - 1) * dx` columns)."""
    wo, sx, dx = out_spatial[1], window_strides[1], rhs_dilation[1]
    need = wo * sx + (kernel[1] - 1) * dx - x.shape[3] - padding_low[1]
    high = (padding_high[0], max(padding_high[1], need))
    return apply("pad", x, A.const(0, x.dtype), edge_padding_low=(0, 0) + tuple(padding_low),
                 edge_padding_high=(0, 0) + high, interior_padding=(0,) * 4)


def direct_node(x: Node, w: Node, out_spatial: tuple, kernel: tuple, window_strides,
                padding_low, padding_high, rhs_dilation, **_unused) -> Node:
    xp = padded(x, out_spatial, kernel, window_strides, padding_low, padding_high, rhs_dilation)
    return apply("direct_convolution", xp, w, window_strides=tuple(window_strides),
                 rhs_dilation=tuple(rhs_dilation), out_size=tuple(out_spatial))


def direct_filter_node(x: Node, g: Node, kernel_size, window_strides, padding_low,
                       padding_high, rhs_dilation, lhs_dilation=(1, 1), **_unused) -> Node:
    xp = padded(x, tuple(g.shape[2:]), tuple(kernel_size), window_strides, padding_low,
                padding_high, rhs_dilation)
    gp, offset = _shared_g(x, g, tuple(kernel_size), window_strides, padding_low,
                           padding_high, rhs_dilation, lhs_dilation)
    return apply("direct_filter_grad", xp, gp, window_strides=tuple(window_strides),
                 rhs_dilation=tuple(rhs_dilation), kernel_size=tuple(kernel_size),
                 g_offset=offset, g_size=tuple(g.shape[2:]))


def _shared_g(x: Node, g: Node, kernel: tuple, window_strides, padding_low, padding_high,
              rhs_dilation, lhs_dilation) -> tuple:
    """(g as the weight gradient reads it, where its window starts). Without window
    strides the input gradient is a direct_convolution of g padded (`padded` of
    lhs_cotangent_padding): the weight gradient reads that same buffer, its window at the
    padding's low corner, so that g's producer writes g once, padded, in its own fused
    loop (no second kernel that reads g to pad it). With strides (the input gradient
    runs per phase, each padded its own way) or padding that crops, g as it is; and
    for rows narrower than a 64-byte vector, which the loop packs several to a vector
    (one load of consecutive rows unpadded, a load per row and a shuffle padded: the
    CNN's 8x8 weight gradients took 5-13% longer reading the padded g)."""
    if any(s != 1 for s in window_strides) or g.shape[3] * g.dtype.itemsize < 64:
        return g, (0, 0)
    a = dict(window_strides=tuple(window_strides), padding_low=tuple(padding_low),
             padding_high=tuple(padding_high), lhs_dilation=tuple(lhs_dilation),
             rhs_dilation=tuple(rhs_dilation))
    low, high = lhs_cotangent_padding(x.shape, kernel, g.shape, a)
    if min(low + high) < 0:
        return g, (0, 0)
    return padded(g, tuple(x.shape[2:]), kernel, (1, 1), low, high, rhs_dilation), low


lower_on_cpu("convolution", _lower_convolution)
lower_on_cpu("convolution_filter_grad", _lower_filter_grad)
