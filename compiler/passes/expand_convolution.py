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
from ..primitive import PRIMITIVES
from .rewrite import Builder, rebuild


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


# ---- the CPU's own lowerings ------------------------------------------------------------

def direct_convolutions(module: Module) -> Module:
    """Each instruction whose primitive has a CPU lowering (its stanza's `cpu_lowering`:
    `convolution(x, w)` -> `direct_convolution(pad(x), w)`, `convolution_filter_grad(x, g)`
    -> `direct_filter_grad(pad(x), g)`, compiler/primitives/conv_direct.py) replaced by
    it where it covers the instruction: the padding (and any elementwise producer of x)
    is one fused loop, shared by the forward and the weight gradient; the loops read it
    in place: no patch matrix, no product, no transpose of the result. Run for the CPU
    before the pipeline (other targets keep im2col)."""
    if not any(PRIMITIVES[i.op].cpu_lowering is not None for i in module.instructions):
        return module
    return rebuild(module, _lowering_rule, "direct_convolutions")


def _lowering_rule(b: Builder, ins: Instruction) -> Optional[int]:
    lower = PRIMITIVES[ins.op].cpu_lowering
    if lower is None:
        return None
    holders = [_placeholder(b[o]) for o in ins.operands]
    out = lower(ins, *holders)
    if out is None:
        return None
    return _splice(b, out, dict(zip(map(id, holders), ins.operands)))
