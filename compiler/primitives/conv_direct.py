"""direct_convolution: a 2-D convolution of an input already padded, computed by our own
loop (compiler/codegen/conv_direct.py) where it lies in NCHW, with no patch matrix.

    xp (N, C, Hp, Wp), w (O, C, KH, KW) -> out (N, O, Ho, Wo)
    out[n, o, y, x] = sum over c, ky, kx of
                      xp[n, c, y * sy + ky * dy, x * sx + kx * dx] * w[o, c, ky, kx]

Attributes: window_strides (sy, sx), rhs_dilation (dy, dx), out_size (Ho, Wo). The input
must hold `Wo * sx + (KW - 1) * dx` columns at least (a vector of outputs at stride sx
reads sx * V inputs: the pass that makes this op pads the input that far).

The CPU's pass `direct_convolutions` (compiler/passes/expand_convolution.py) rewrites a
`convolution` it covers (two spatial dimensions, one group, no lhs dilation, float32 or
float64) into pad + this op; other targets keep im2col and their library's product.
"""
from __future__ import annotations

import numpy as np

from ..hlo import dtypes as D
from ..transforms import batching as B
from ..graph import builders as A
from ..primitive import OPAQUE, Loop, apply, fail, primitive
from .convolution import _conv_vjp, conv_output_size

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
    return [Loop((xp.shape[0],) + blk.space, (), body, work=per_block)]


def _flops(ins, operands):
    n, o, ho, wo = ins.shape
    _, c, kh, kw = operands[1].shape
    return 2 * n * o * ho * wo * c * kh * kw


direct_convolution = primitive(
    "direct_convolution", OPAQUE, _infer, _reference, attrs=ATTRS, vjp=_vjp, emit=_loops,
    flops=_flops, batch=B.loop_over_batch,
    doc="2-D convolution of a padded NCHW input by our own loop (no patch matrix): "
        "xp (N, C, Hp, Wp), w (O, C, KH, KW) -> (N, O, Ho, Wo).")
