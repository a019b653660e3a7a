"""Expand convolution and reduce_window into primitives code generation already knows.

Rules:

- `convolution(x, w)` -> im2col plus one matrix product:
  pad(x) (edge padding and lhs dilation in one pad) -> one strided slice per window tap ->
  concatenate into patches (N, C, taps, *Y) -> transpose/reshape to (G, C/G*taps, N*Y) ->
  dot_general of w reshaped to (G, O/G, C/G*taps) with them -> back to (N, O, *Y). Fusion turns
  the pad/slice/concatenate chain into one kernel that writes the patch matrix; the
  product goes to the library (BLAS, cuBLAS).
- `reduce_window(x)` with windows that tile x (stride == window, no padding) ->
  reshape to (..., Y, window, ...) and `reduce` over the window axes.
- any other `reduce_window(x)` -> pad(x, identity) -> one strided slice per window tap,
  combined with add / maximum / minimum (an elementwise chain that fuses into one kernel).

Each expansion lives in its primitive's stanza (`expand`), written with `apply` on
placeholder nodes (the same graph-building as the gradient rules); this pass splices it
into the module in place of every instruction whose primitive has one.
"""
from __future__ import annotations

from typing import Optional

from ..hlo.module import Instruction, Module
from ..graph.node import Node
from ..graph import builders as A
from ..hlo import dtypes as D
from ..primitive import PRIMITIVES, apply
from .rewrite import Builder, rebuild

DIRECT_DTYPES = (D.float32, D.float64)


def expand_convolution(module: Module) -> Module:
    if not any(PRIMITIVES[i.op].expand is not None for i in module.instructions):
        return module
    return rebuild(module, _rule, "expand_convolution")


def _rule(b: Builder, ins: Instruction) -> Optional[int]:
    expand = PRIMITIVES[ins.op].expand
    if expand is None:
        return None
    holders = [_placeholder(b[o]) for o in ins.operands]
    out = expand(*holders, **ins.attrs)
    return _splice(b, out, dict(zip(map(id, holders), ins.operands)))


def _placeholder(ins: Instruction) -> Node:
    return Node("parameter", (), ins.shape, ins.dtype, {})


def _splice(b: Builder, root: Node, known: dict) -> int:
    """Emit root's graph into the builder; `known` maps placeholder ids to positions."""
    stack = [root]
    while stack:
        node = stack[-1]
        if id(node) in known:
            stack.pop()
            continue
        waiting = [o for o in node.operands if id(o) not in known]
        if waiting:
            stack.extend(waiting)
            continue
        stack.pop()
        if node.op == "constant":
            known[id(node)] = b.constant(node.value.array, node.dtype)
        else:
            known[id(node)] = b.emit(node.op, tuple(known[id(o)] for o in node.operands),
                                     node.shape, node.dtype, dict(node.attrs))
    return known[id(root)]


# ---- the CPU's direct convolutions ------------------------------------------------------

def direct_convolutions(module: Module) -> Module:
    """`convolution(x, w)` -> `direct_convolution(pad(x), w)` and
    `convolution_filter_grad(x, g)` -> `direct_filter_grad(pad(x), g)` wherever the CPU's
    own loops cover them (`direct_covers`): the padding (and any elementwise producer of
    x) is one fused loop, shared by the forward and the weight gradient; the loops read
    it in place: no patch matrix, no product, no transpose of the result. Run for the CPU
    before the pipeline (other targets keep im2col)."""
    ins = module.instructions
    if not any(direct_covers(i, *(ins[o] for o in i.operands)) for i in ins):
        return module
    return rebuild(module, _direct_rule, "direct_convolutions")


DIRECT_OPS = ("convolution", "convolution_filter_grad")


def direct_covers(ins: Instruction, *operands: Instruction) -> bool:
    """A convolution or its weight gradient with two spatial dimensions, one group, no lhs
    dilation, float32/float64 operands, nothing empty."""
    if ins.op not in DIRECT_OPS:
        return False
    a = ins.attrs
    return len(ins.shape) == 4 and a["feature_group_count"] == 1 \
        and all(d == 1 for d in a["lhs_dilation"]) and ins.dtype in DIRECT_DTYPES \
        and 0 not in ins.shape and all(0 not in o.shape for o in operands)


def _direct_rule(b: Builder, ins: Instruction) -> Optional[int]:
    if not direct_covers(ins, *(b[o] for o in ins.operands)):
        return None
    x, other = (_placeholder(b[o]) for o in ins.operands)
    if ins.op == "convolution":
        out = direct_node(x, other, ins.shape[2:], tuple(other.shape[2:]), **ins.attrs)
    else:
        out = direct_filter_node(x, other, **ins.attrs)
    return _splice(b, out, {id(x): ins.operands[0], id(other): ins.operands[1]})


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
                       padding_high, rhs_dilation, **_unused) -> Node:
    xp = padded(x, tuple(g.shape[2:]), tuple(kernel_size), window_strides, padding_low,
                padding_high, rhs_dilation)
    return apply("direct_filter_grad", xp, g, window_strides=tuple(window_strides),
                 rhs_dilation=tuple(rhs_dilation), kernel_size=tuple(kernel_size))
