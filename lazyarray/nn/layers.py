"""The layers: each holds its parameters and calls `la.nn.functional` in `forward`."""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from .. import api
from ..tensor import Tensor
from . import functional as F
from . import init
from .module import Module, Parameter
from ..compiler.hlo import dtypes as _D
from ..compiler.graph.node import kept_constant
from ..compiler.primitive import apply
from ..ops import convolution as _ops_conv, nn as _ops_nn
from ..ops.nn import linear_direct


def _pair(v: Any) -> tuple:
    return tuple(v) if isinstance(v, (tuple, list)) else (int(v), int(v))


def _single(v: Any) -> int:
    return int(v[0]) if isinstance(v, (tuple, list)) else int(v)


# ---- containers and activations ----------------------------------------------------

class Sequential(Module):
    """Calls its layers in order."""

    def __init__(self, *layers: Module) -> None:
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], OrderedDict):
            for name, layer in layers[0].items():
                self.add_module(name, layer)
        else:
            for i, layer in enumerate(layers):
                self.add_module(str(i), layer)

    def forward(self, x: Any) -> Any:
        for layer in self._modules.values():
            x = layer(x)
        return x

    def __getitem__(self, i: int) -> Module:
        return list(self._modules.values())[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class Identity(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class ReLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        if type(x) is Tensor:
            node = x._node
            if node.dtype in _RELU_DIRECT and node.shape:
                # F.relu's nodes, maximum(x, broadcast(0)), made directly (a float tensor:
                # nothing to promote or check)
                zero = apply("broadcast_in_dim", _RELU_DIRECT[node.dtype], shape=node.shape,
                             broadcast_dimensions=())
                return Tensor._wrap(apply("maximum", node, zero), x._state)
        return F.relu(x)


# the float dtypes ReLU records directly, each with its shared 0 (`kept_constant`)
_RELU_DIRECT = {d: kept_constant(0, d) for d in (_D.float16, _D.bfloat16, _D.float32, _D.float64)}


class GELU(Module):
    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


class Softmax(Module):
    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)


class Flatten(Module):
    """Flattens all dimensions from `start_dim` on."""

    def __init__(self, start_dim: int = 1) -> None:
        super().__init__()
        self.start_dim = start_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[:self.start_dim] + (-1,))


class Dropout(Module):
    """Zeroes elements with probability p in training mode; the identity in eval mode."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


# ---- parameterized layers ----------------------------------------------------------

class Linear(Module):
    """y = x @ weight.T + bias; weight (out_features, in_features), PyTorch's init."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(init.kaiming_uniform((out_features, in_features), dtype=dtype,
                                                     device=device))
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.bias = Parameter(init.uniform((out_features,), -bound, bound, dtype, device)) \
            if bias else None

    def forward(self, x: Tensor) -> Tensor:
        params = self._parameters          # read directly: no attribute miss per call
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        if type(x) is Tensor and type(weight) is Tensor and x._state is weight._state and \
                (bias is None or type(bias) is Tensor and bias._state is x._state):
            # the nodes F.linear would record for rows of one float dtype, made directly;
            # any other input (a batch of sequences) goes to ops.nn.linear's remembered
            # composite the same way, without F.linear's search for the device
            b = None if bias is None else bias._node
            out = linear_direct(x._node, weight._node, b)
            if out is None:
                out = _ops_nn.linear(x._node, weight._node, b)
            return Tensor._wrap(out, x._state)
        return F.linear(x, weight, bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


class Conv2d(Module):
    """2-D convolution over (N, C, H, W); weight (out, in/groups, kH, kW)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: channels ({in_channels} in, {out_channels} out) must be "
                             f"divisible by groups={groups}")
        kh, kw = _pair(kernel_size)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = (kh, kw), _pair(stride)
        self.padding, self.dilation, self.groups = _pair(padding), _pair(dilation), groups
        shape = (out_channels, in_channels // groups, kh, kw)
        self.weight = Parameter(init.kaiming_uniform(shape, dtype=dtype, device=device))
        bound = 1 / math.sqrt(init.fans(shape)[0])
        self.bias = Parameter(init.uniform((out_channels,), -bound, bound, dtype, device)) \
            if bias else None

    def forward(self, x: Tensor) -> Tensor:
        direct = _conv_direct(self, _ops_conv.conv2d, x)
        if direct is not None:
            return direct
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
               f"stride={self.stride}, padding={self.padding}"


class Conv1d(Module):
    """1-D convolution over (N, C, L); weight (out, in/groups, k)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: Any, stride: Any = 1,
                 padding: Any = 0, dilation: Any = 1, groups: int = 1, bias: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1d: channels ({in_channels} in, {out_channels} out) must be "
                             f"divisible by groups={groups}")
        k = _single(kernel_size)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride = (k,), (_single(stride),)
        self.padding = padding if isinstance(padding, str) else (_single(padding),)
        self.dilation, self.groups = (_single(dilation),), groups
        shape = (out_channels, in_channels // groups, k)
        self.weight = Parameter(init.kaiming_uniform(shape, dtype=dtype, device=device))
        bound = 1 / math.sqrt(init.fans(shape)[0])
        self.bias = Parameter(init.uniform((out_channels,), -bound, bound, dtype, device)) \
            if bias else None

    def forward(self, x: Tensor) -> Tensor:
        direct = _conv_direct(self, _ops_conv.conv1d, x)
        if direct is not None:
            return direct
        return F.conv1d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


def _conv_direct(layer: Module, conv: Any, x: Any) -> "Tensor | None":
    """What F.conv1d/conv2d record for tensors of one device, the nodes passed straight to
    the op (every convolution of a CNN at every step: no search for the device); None
    for anything else (the general path)."""
    params = layer._parameters            # read directly: no attribute miss per call
    weight = params["weight"] if "weight" in params else layer.weight
    bias = params["bias"] if "bias" in params else layer.bias
    if type(x) is not Tensor or type(weight) is not Tensor or weight._state is not x._state \
            or not _same_device(bias, x):
        return None
    return Tensor._wrap(conv(x._node, weight._node, None if bias is None else bias._node,
                             layer.stride, layer.padding, layer.dilation, layer.groups),
                        x._state)

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
               f"stride={self.stride}, padding={self.padding}"


class MaxPool2d(Module):
    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)


class AvgPool2d(MaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


class LayerNorm(Module):
    def __init__(self, normalized_shape: Any, eps: float = 1e-5, elementwise_affine: bool = True,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) \
            else tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        if elementwise_affine:
            self.weight = Parameter(api.ones(shape, dtype=dtype, device=device))
            self.bias = Parameter(api.zeros(shape, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None

    def forward(self, x: Tensor) -> Tensor:
        params = self._parameters          # read directly: no attribute miss per call
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        if type(x) is Tensor and _same_device(weight, x) and _same_device(bias, x):
            # what F.layer_norm does for tensors of one device, without its search for
            # the device and the nodes (every block of a model, at every token)
            return Tensor._wrap(_ops_nn.layer_norm(
                x._node, self.normalized_shape, None if weight is None else weight._node,
                None if bias is None else bias._node, self.eps), x._state)
        return F.layer_norm(x, self.normalized_shape, weight, bias, self.eps)


def _same_device(p: Any, x: Tensor) -> bool:
    """Whether an optional parameter is absent or a tensor on x's device."""
    return p is None or (type(p) is Tensor and p._state is x._state)


class _BatchNorm(Module):
    """Normalizes each channel (axis 1) by batch statistics in training and by running
    statistics in eval. The running statistics are buffers updated functionally: the new
    value is a lazy expression rebound to the same tensor, computed with the step."""

    ranks: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.track_running_stats = track_running_stats
        shape = (num_features,)
        if affine:
            self.weight = Parameter(api.ones(shape, dtype=dtype, device=device))
            self.bias = Parameter(api.zeros(shape, dtype=dtype, device=device))
        else:
            self.weight = self.bias = None
        if track_running_stats:
            self.register_buffer("running_mean", api.zeros(shape, dtype=dtype, device=device))
            self.register_buffer("running_var", api.ones(shape, dtype=dtype, device=device))
            self.register_buffer("num_batches_tracked",
                                 api.asarray(np.zeros((), np.int64), device=device))

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.ranks or x.shape[1] != self.num_features:
            raise ValueError(f"{type(self).__name__}({self.num_features}): expected input of "
                             f"rank {' or '.join(map(str, self.ranks))} with "
                             f"{self.num_features} channels on axis 1, got shape {x.shape}")
        if self.training and self.track_running_stats and self.momentum is not None \
                and type(self)._update_running is _BatchNorm._update_running:
            # (a subclass with an update of its own takes the general path, which calls it)
            direct = self._train_direct(x)
            if direct is not None:
                return direct
        if self.training or not self.track_running_stats:
            mean, var = F.batch_stats(x)
            if self.training and self.track_running_stats:
                self._update_running(mean, var, x.size // x.shape[1])
        else:
            mean, var = self.running_mean, self.running_var
            if type(x) is Tensor and type(mean) is Tensor and type(var) is Tensor and \
                    mean._state is x._state and var._state is x._state and \
                    _same_device(self.weight, x) and _same_device(self.bias, x):
                # eval for tensors of one device: the nodes straight to the op (its
                # remembered composite), without F.batch_norm's search for the device
                weight, bias = self.weight, self.bias
                return Tensor._wrap(_ops_nn.batch_norm(
                    x._node, mean._node, var._node, None if weight is None else weight._node,
                    None if bias is None else bias._node, float(self.eps)), x._state)
        return F.batch_norm(x, mean, var, self.weight, self.bias, self.eps)

    def _train_direct(self, x: Tensor) -> "Tensor | None":
        """The training step's layer for tensors of one device: one composite
        (`ops.nn.batch_norm_training`, copied from the first step's graph at every step
        after) giving the output and the new running statistics, rebound to the buffers.
        None when a tensor is not a plain one of x's device (the general path)."""
        params, buffers = self._parameters, self._buffers    # read directly (no misses)
        weight = params["weight"] if "weight" in params else self.weight
        bias = params["bias"] if "bias" in params else self.bias
        mean, var = buffers.get("running_mean"), buffers.get("running_var")
        count = buffers.get("num_batches_tracked")
        if type(x) is not Tensor or not (_same_device(weight, x) and _same_device(bias, x)
                                         and _same_device(mean, x) and _same_device(var, x)
                                         and _same_device(count, x)) \
                or mean is None or var is None or count is None:
            return None
        out, new_mean, new_var, new_count = _ops_nn.batch_norm_training(
            x._node, None if weight is None else weight._node,
            None if bias is None else bias._node, mean._node, var._node, count._node,
            self.eps, self.momentum)
        Tensor._assign_all([mean, var, count], [new_mean, new_var, new_count])
        return Tensor._wrap(out, x._state)

    def _update_running(self, mean: Tensor, var: Tensor, count: int) -> None:
        self.num_batches_tracked += 1
        # momentum None: PyTorch's cumulative average, 1/n for the n-th batch (n read from
        # the host copy kept beside the buffer, so the factor is a runtime scalar)
        if self.momentum is None:
            self._tracked = getattr(self, "_tracked", 0) + 1
            m = 1.0 / self._tracked
        else:
            m = self.momentum
        unbiased = var * (count / max(count - 1, 1))
        self.running_mean._assign((self.running_mean * (1 - m) + mean * m)._node)
        self.running_var._assign((self.running_var * (1 - m) + unbiased * m)._node)


class BatchNorm1d(_BatchNorm):
    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    ranks = (4,)


class Embedding(Module):
    """A lookup table of `num_embeddings` vectors of size `embedding_dim`, N(0, 1) init.

    `padding_idx` (PyTorch's): that row starts at zeros and gets no gradient (it stays
    what it is through training); `_weight` starts from given values."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Any = None,
                 max_norm: Any = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
                 sparse: bool = False, _weight: Any = None, _freeze: bool = False,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if max_norm is not None or scale_grad_by_freq or sparse:
            raise NotImplementedError("Embedding: max_norm, scale_grad_by_freq and sparse "
                                      "are not supported (the table is dense and not "
                                      "renormalized)")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is not a row of "
                                 f"{num_embeddings}")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            w = init.normal((num_embeddings, embedding_dim), dtype=dtype, device=device)
            if padding_idx is not None:
                w = api.where(api.arange(num_embeddings, device=w.device)[:, None] ==
                              padding_idx, 0.0, w)
        else:
            w = api.asarray(_weight, dtype=dtype, device=device)
            if tuple(w.shape) != (num_embeddings, embedding_dim):
                raise ValueError(f"Embedding: _weight has shape {tuple(w.shape)}, expected "
                                 f"{(num_embeddings, embedding_dim)}")
        self.weight = Parameter(w, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings: Any, freeze: bool = True, padding_idx: Any = None,
                        **kwargs: Any) -> "Embedding":
        rows, dim = embeddings.shape
        return cls(rows, dim, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze,
                   **kwargs)

    def forward(self, indices: Any) -> Tensor:
        params = self._parameters          # read directly: no attribute miss per call
        weight = params["weight"] if "weight" in params else self.weight
        if self.padding_idx is None and type(indices) is Tensor and type(weight) is Tensor \
                and indices._state is weight._state:
            # F.embedding's rows for tensors of one device, without its search for the
            # device (a decoder's token and position tables, at every token)
            return Tensor._wrap(_ops_nn.embedding(indices._node, weight._node), weight._state)
        return F.embedding(indices, weight, self.padding_idx)


def count_parameters(module: Module) -> int:
    return int(sum(np.prod(p.shape, dtype=np.int64) for p in module.parameters()))
