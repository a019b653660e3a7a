"""Convolution and pooling over nodes, PyTorch-style (NCHW input, OIHW weights).

`conv1d`, `conv2d`: stride, padding (an int, a tuple, "valid" or "same"), dilation,
groups, optional bias. `max_pool2d`, `avg_pool2d`: kernel_size, stride (default: the
kernel size), zero padding (never picked by max; counted by average, as PyTorch's
count_include_pad=True). All record the `convolution` and `reduce_window` primitives.
"""
from __future__ import annotations

from typing import Any, Optional

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from ..compiler.transforms.graph_templates import remembered
from . import autocast
from .promotion import as_node, convert, shape_str

Operand = Any


def _tuple(op: str, name: str, value: Any, n: int, minimum: int) -> tuple:
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or any(not isinstance(v, int) or v < minimum for v in values):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or {n} of them, got {value!r}")
    return values


def _padding(op: str, padding: Any, n: int, kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    """(low, high) per spatial dimension."""
    if padding == "valid":
        return (0,) * n, (0,) * n
    if padding == "same":
        if any(s != 1 for s in stride):
            raise ValueError(f"{op}: padding='same' needs stride 1, got {stride}")
        total = [(k - 1) * d for k, d in zip(kernel, dilation)]
        return tuple(t // 2 for t in total), tuple(t - t // 2 for t in total)
    pads = _tuple(op, "padding", padding, n, 0)
    return pads, pads


def _float_pair(op: str, x: Operand, w: Operand) -> tuple:
    x, w = as_node(x), as_node(w)
    dtype = D.promote(x.dtype, w.dtype)
    if not dtype.is_float:
        raise TypeError(f"{op}: needs floating-point input and weight, got {x.dtype.name} and "
                        f"{w.dtype.name}")
    return convert(x, dtype), convert(w, dtype)


def _conv(op: str, n: int, x: Operand, weight: Operand, bias: Optional[Operand], stride: Any,
          padding: Any, dilation: Any, groups: int) -> Node:
    x, weight = _float_pair(op, x, weight)
    x, weight = autocast.lower(x), autocast.lower(weight)
    if x.ndim != n + 2 or weight.ndim != n + 2:
        raise ValueError(f"{op}: expects input (N, C, {'L' if n == 1 else 'H, W'}) and weight "
                         f"(O, C/groups, *kernel) of rank {n + 2}, got {shape_str(x.shape)} and "
                         f"{shape_str(weight.shape)}")
    if not isinstance(groups, int) or groups < 1 or x.shape[1] != weight.shape[1] * groups \
            or weight.shape[0] % groups:
        raise ValueError(f"{op}: input {shape_str(x.shape)} and weight {shape_str(weight.shape)} "
                         f"do not fit groups={groups}: needs C == weight.shape[1] * groups and "
                         f"O % groups == 0")
    stride = _tuple(op, "stride", stride, n, 1)
    dilation = _tuple(op, "dilation", dilation, n, 1)
    low, high = _padding(op, padding, n, weight.shape[2:], dilation, stride)
    out = apply("convolution", x, weight, window_strides=stride, padding_low=low,
                padding_high=high, lhs_dilation=(1,) * n, rhs_dilation=dilation,
                feature_group_count=groups)
    if bias is not None:
        b = convert(as_node(bias), out.dtype)
        if b.shape != (out.shape[1],):
            raise ValueError(f"{op}: bias must have shape ({out.shape[1]},), got "
                             f"{shape_str(b.shape)}")
        out = apply("add", out, apply("broadcast_in_dim", b, shape=out.shape,
                                      broadcast_dimensions=(1,)))
    return out


# a convolution of nodes is a function of their types, the static arguments and autocast:
# a model's layers, called at every step, copy the first call's nodes (graph_templates.py)
# instead of checking and working out the attributes again
_conv_of_nodes = remembered(context=autocast.current)(_conv)


def _conv_nodes(x: Operand, weight: Operand, bias: Optional[Operand]) -> bool:
    return type(x) is Node and type(weight) is Node and (bias is None or type(bias) is Node)


def conv1d(x: Operand, weight: Operand, bias: Optional[Operand] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Node:
    """1-D convolution of (N, C, L) with (O, C/groups, K) weights."""
    conv = _conv_of_nodes if _conv_nodes(x, weight, bias) else _conv
    return conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x: Operand, weight: Operand, bias: Optional[Operand] = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Node:
    """2-D convolution of (N, C, H, W) with (O, C/groups, kH, kW) weights."""
    conv = _conv_of_nodes if _conv_nodes(x, weight, bias) else _conv
    return conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


def _pool(op: str, kind: str, x: Operand, kernel_size: Any, stride: Any, padding: Any) -> Node:
    x = as_node(x)
    if x.ndim != 4:
        raise ValueError(f"{op}: expects (N, C, H, W), got {shape_str(x.shape)}")
    if x.dtype is D.bool_:
        raise TypeError(f"{op}: needs a numeric tensor, got bool")
    kernel = _tuple(op, "kernel_size", kernel_size, 2, 1)
    strides = kernel if stride is None else _tuple(op, "stride", stride, 2, 1)
    pads = _tuple(op, "padding", padding, 2, 0)
    if any(2 * p > k for p, k in zip(pads, kernel)):
        raise ValueError(f"{op}: padding {pads} must be at most half the kernel {kernel}")
    return apply("reduce_window", x, kind=kind, window_dimensions=(1, 1) + kernel,
                 window_strides=(1, 1) + strides, padding_low=(0, 0) + pads,
                 padding_high=(0, 0) + pads)


def max_pool2d(x: Operand, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Node:
    """The max over each window of (N, C, H, W); padding is never picked."""
    return _pool("max_pool2d", "max", x, kernel_size, stride, padding)


def avg_pool2d(x: Operand, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Node:
    """The mean over each window of (N, C, H, W), padding counted as zeros."""
    x = as_node(x)
    if not x.dtype.is_float:
        x = convert(x, D.DEFAULT_FLOAT)
    total = _pool("avg_pool2d", "sum", x, kernel_size, stride, padding)
    kernel = _tuple("avg_pool2d", "kernel_size", kernel_size, 2, 1)
    count = apply("broadcast_in_dim", as_node(float(kernel[0] * kernel[1]), total.dtype),
                  shape=total.shape, broadcast_dimensions=())
    return apply("divide", total, count)


__all__ = ["conv1d", "conv2d", "max_pool2d", "avg_pool2d"]
