"""Expand convolution and reduce_window into primitives code generation already knows.

Rules:

- `convolution(x, w)` -> im2col plus one matrix product:
  pad(x) (edge padding and lhs dilation in one pad) -> one strided slice per window tap ->
  concatenate into patches (N, C, taps, *Y) -> transpose/reshape to (G, N*Y, C/G*taps) ->
  dot_general with w reshaped to (G, O/G, C/G*taps) -> back to (N, O, *Y). Fusion turns
  the pad/slice/concatenate chain into one kernel that writes the patch matrix; the
  product goes to the library (BLAS, cuBLAS).
- `reduce_window(x)` with windows that tile x (stride == window, no padding) ->
  reshape to (..., Y, window, ...) and `reduce` over the window axes.
- any other `reduce_window(x)` -> pad(x, identity) -> one strided slice per window tap,
  combined with add / maximum / minimum (an elementwise chain that fuses into one kernel).

The expansions are written with `apply` on placeholder nodes (the same graph-building
as the gradient rules), then spliced into the module.
"""
from __future__ import annotations

import itertools
from typing import Optional

from .. import autodiff as A
from ..module import Instruction, Module
from ..node import Node
from ..primitive import apply
from ..primitives.convolution import group_dot, im2col
from ..primitives.reduction import identity
from ..primitives.windows import tile_view, tiles, window_slice
from .rewrite import Builder, rebuild

_COMBINE = {"sum": "add", "max": "maximum", "min": "minimum"}


def expand_convolution(module: Module) -> Module:
    if not any(i.op in ("convolution", "reduce_window") for i in module.instructions):
        return module
    return rebuild(module, _rule, "expand_convolution")


def _rule(b: Builder, ins: Instruction) -> Optional[int]:
    if ins.op not in ("convolution", "reduce_window"):
        return None
    holders = [_placeholder(b[o]) for o in ins.operands]
    if ins.op == "convolution":
        out = expand_conv(*holders, **ins.attrs)
    else:
        out = expand_window(*holders, **ins.attrs)
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



# ---- convolution ---------------------------------------------------------------------------

def expand_conv(x: Node, w: Node, **a) -> Node:
    out_shape = apply("convolution", x, w, **a).shape      # recorded only for its shape
    if 0 in out_shape or 0 in x.shape or 0 in w.shape:
        return A.full(0, out_shape, x.dtype)
    n, o = out_shape[:2]
    out_spatial = tuple(out_shape[2:])
    g = a["feature_group_count"]
    patches = im2col(x, tuple(w.shape[2:]), out_spatial, a)            # (G, N*Y, Cg*T)
    rhs = A.reshape(w, (g, o // g, patches.shape[2]))                  # (G, Og, Cg*T)
    prod = group_dot(patches, rhs, 2, 2)                               # (G, N*Y, Og)
    nsp = len(out_spatial)
    back = A.reshape(prod, (g, n) + out_spatial + (o // g,))           # (G, N, *Y, Og)
    moved = A.transpose(back, (1, 0, 2 + nsp) + tuple(range(2, 2 + nsp)))  # (N, G, Og, *Y)
    return A.reshape(moved, out_shape)


# ---- reduce_window ---------------------------------------------------------------------------

def expand_window(x: Node, kind: str, window_dimensions, window_strides, padding_low,
                  padding_high) -> Node:
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
