"""`la.nn.functional`: the composites of `lazyarray.ops.nn` (and the convolution and
pooling ops) lifted to tensors, plus dropout, which draws its bits from `la.random`."""
from __future__ import annotations

from typing import Any

from .. import ops as _ops
from ..ops import nn as _nn
from ..lift import lift
from .. import random as _random
from ..tensor import Tensor

for _name in _nn.__all__:
    globals()[_name] = lift(getattr(_nn, _name))

sigmoid = lift(_ops.sigmoid)
tanh = lift(_ops.tanh)


def _convolution_op(name: str) -> Any:
    """An op of `lazyarray.ops.convolution`, which another part of the project provides."""
    try:
        from ..ops import convolution
    except ImportError as e:           # not merged yet: say what is missing
        raise NotImplementedError(f"{name}: lazyarray.ops.convolution is not available") from e
    fn = getattr(convolution, name, None)
    if fn is None:
        raise NotImplementedError(f"{name}: lazyarray.ops.convolution has no {name}")
    return lift(fn)


def conv2d(x: Tensor, weight: Tensor, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D convolution of (N, C, H, W) input with (O, C/groups, kH, kW) weights."""
    return _convolution_op("conv2d")(x, weight, bias, stride=stride, padding=padding,
                                     dilation=dilation, groups=groups)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return _convolution_op("max_pool2d")(x, kernel_size, stride=stride, padding=padding)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return _convolution_op("avg_pool2d")(x, kernel_size, stride=stride, padding=padding)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only).
    The mask comes from the device's random key, advanced inside the graph."""
    if not training or p == 0.0:
        return x
    bits = _random.next_bits_node(x._state, x.shape)
    return Tensor._wrap(_nn.dropout(x._node, bits, float(p)), x._state)
