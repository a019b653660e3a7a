"""`torch.nn.functional` with PyTorch's signatures, over `lazyarray.nn.functional`."""
from __future__ import annotations

from ..missing import missing as _missing

import math
from typing import Any, Optional

import lazyarray as _la
from lazyarray.nn import functional as _F
from lazyarray.tensor import Tensor

relu, silu, sigmoid, tanh = _F.relu, _F.silu, _F.sigmoid, _F.tanh
conv1d, conv2d, max_pool2d, avg_pool2d = _F.conv1d, _F.conv2d, _F.max_pool2d, _F.avg_pool2d
embedding, scaled_dot_product_attention = _F.embedding, _F.scaled_dot_product_attention


def _no(name: str, **given: Any) -> None:
    for key, value in given.items():
        if value is not None:
            raise NotImplementedError(f"{name}: {key}= is not supported by lazyarray.torch")


def _t(x: Any) -> Tensor:
    return x if type(x) is Tensor else _la.asarray(x)


def _reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    """PyTorch's deprecated size_average/reduce pair, as it maps them."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "mean" if size_average in (None, True) else "sum"


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    return _la.clip(input, 0.0, 6.0)


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    return _F.gelu(input, approximate=approximate)


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return _F.leaky_relu(input, negative_slope)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return _la.where(input > 0, input, alpha * _la.expm1(_la.minimum(input, 0.0)))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    if beta == 1.0:
        return _la.where(input > threshold, input, _F.softplus(input))
    return _la.where(input * beta > threshold, input, _F.softplus(input * beta) / beta)


def logsigmoid(input: Tensor) -> Tensor:
    return -_F.softplus(-input)


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0,
             inplace: bool = False) -> Tensor:
    return _la.clip(input, min_val, max_val)


def softmax(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3,
            dtype: Any = None) -> Tensor:
    x = input if dtype is None else input.astype(dtype)
    return _F.softmax(x, -1 if dim is None else dim)


def log_softmax(input: Tensor, dim: Optional[int] = None, _stacklevel: int = 3,
                dtype: Any = None) -> Tensor:
    x = input if dtype is None else input.astype(dtype)
    return _F.log_softmax(x, -1 if dim is None else dim)


def dropout(input: Tensor, p: float = 0.5, training: bool = True,
            inplace: bool = False) -> Tensor:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    return _F.dropout(input, p, training)


def linear(input: Tensor, weight: Tensor, bias: Any = None) -> Tensor:
    return _F.linear(input, weight, bias)


def layer_norm(input: Tensor, normalized_shape: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> Tensor:
    return _F.layer_norm(input, tuple(normalized_shape), weight, bias, eps)


def batch_norm(input: Tensor, running_mean: Any, running_var: Any, weight: Any = None,
               bias: Any = None, training: bool = False, momentum: float = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Normalized with the batch's statistics (training) or the running ones; in training
    the running statistics are updated in place, as PyTorch's."""
    x = _t(input)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean = _la.mean(x, axis=axes)
        var = _la.var(x, axis=axes)
        if running_mean is not None:
            n = x.size // x.shape[1]
            running_mean.copy_((1 - momentum) * running_mean + momentum * mean)
            running_var.copy_((1 - momentum) * running_var + momentum * var * n / max(n - 1, 1))
    else:
        mean, var = running_mean, running_var
    y = (x - mean.reshape(shape)) / _la.sqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """int64 one-hot rows; num_classes=-1 reads the largest label (a sync)."""
    if num_classes < 0:
        num_classes = int(_la.max(tensor).item()) + 1
    return _F.one_hot(tensor, num_classes, dtype=_la.int64)


def cross_entropy(input: Tensor, target: Any, weight: Any = None, size_average: Any = None,
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Class indices or class probabilities (a float target of input's shape)."""
    _no("cross_entropy", weight=weight)
    return _F.cross_entropy(input, target, _reduction(size_average, reduce, reduction),
                            label_smoothing, ignore_index)


def nll_loss(input: Tensor, target: Any, weight: Any = None, size_average: Any = None,
             ignore_index: int = -100, reduce: Any = None, reduction: str = "mean") -> Tensor:
    _no("nll_loss", weight=weight)
    return _F.nll_loss(input, target, _reduction(size_average, reduce, reduction),
                       ignore_index)


def mse_loss(input: Tensor, target: Any, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean") -> Tensor:
    return _F.mse_loss(input, target, _reduction(size_average, reduce, reduction))


def l1_loss(input: Tensor, target: Any, size_average: Any = None, reduce: Any = None,
            reduction: str = "mean") -> Tensor:
    return _F.l1_loss(input, target, _reduction(size_average, reduce, reduction))


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return _la.mean(loss)
    if reduction == "sum":
        return _la.sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def smooth_l1_loss(input: Tensor, target: Any, size_average: Any = None, reduce: Any = None,
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    d = _la.abs(input - target)
    loss = _la.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta) if beta > 0 else d
    return _reduce(loss, _reduction(size_average, reduce, reduction))


def huber_loss(input: Tensor, target: Any, reduction: str = "mean",
               delta: float = 1.0) -> Tensor:
    d = _la.abs(input - target)
    return _reduce(_la.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Any, weight: Any = None,
                                     size_average: Any = None, reduce: Any = None,
                                     reduction: str = "mean", pos_weight: Any = None) -> Tensor:
    red = _reduction(size_average, reduce, reduction)
    if weight is None and pos_weight is None:
        return _F.binary_cross_entropy_with_logits(input, target, red)
    # (1 + (pw - 1) y) softplus(-x) + (1 - y) x, times weight
    t = _t(target)
    log_w = 1.0 if pos_weight is None else 1.0 + (pos_weight - 1.0) * t
    loss = log_w * _F.softplus(-input) + (1.0 - t) * input
    return _reduce(loss if weight is None else loss * weight, red)


def binary_cross_entropy(input: Tensor, target: Any, weight: Any = None,
                         size_average: Any = None, reduce: Any = None,
                         reduction: str = "mean") -> Tensor:
    """-(y log p + (1 - y) log(1 - p)), each log clamped at -100 (as PyTorch's)."""
    t = _t(target)
    loss = -(t * _la.maximum(_la.log(input), -100.0)
             + (1 - t) * _la.maximum(_la.log1p(-input), -100.0))
    return _reduce(loss if weight is None else loss * weight,
                   _reduction(size_average, reduce, reduction))


def kl_div(input: Tensor, target: Any, size_average: Any = None, reduce: Any = None,
           reduction: str = "mean", log_target: bool = False) -> Tensor:
    t = _t(target)
    loss = _la.exp(t) * (t - input) if log_target else \
        _la.where(t > 0, t * (_la.log(_la.where(t > 0, t, 1.0)) - input), 0.0)
    red = _reduction(size_average, reduce, reduction)
    if red == "batchmean":
        return _la.sum(loss) / input.shape[0]
    return _reduce(loss, red)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    n = _la.linalg.vector_norm(input, axis=dim, keepdims=True, ord=p)
    return input / _la.maximum(n, eps)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    n1 = _la.linalg.vector_norm(x1, axis=dim)
    n2 = _la.linalg.vector_norm(x2, axis=dim)
    return _la.sum(x1 * x2, axis=dim) / _la.maximum(n1 * n2, eps)


def pad(input: Tensor, pad: Any, mode: str = "constant", value: Any = None) -> Tensor:
    """Pad the last dims: (left, right) of the last, then of the one before, ...
    ("constant" only)."""
    if mode != "constant":
        raise NotImplementedError(f"pad: mode {mode!r} is not supported (only 'constant')")
    x = _t(input)
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: {len(pad)} pad values for a tensor of {x.ndim} dims (two "
                         "per padded dim)")
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        if lo < 0 or hi < 0:
            sl = [slice(None)] * x.ndim
            sl[d] = slice(-lo if lo < 0 else 0, x.shape[d] + hi if hi < 0 else None)
            x = x[tuple(sl)]
            lo, hi = max(lo, 0), max(hi, 0)
        parts = []
        for n in (lo, None, hi):
            if n is None:
                parts.append(x)
            elif n:
                shape = list(x.shape)
                shape[d] = n
                parts.append(_la.full(tuple(shape), 0 if value is None else value,
                                      dtype=x.dtype, device=x.device))
        x = _la.concat(parts, axis=d) if len(parts) > 1 else x
    return x


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:
    """Average pooling to `output_size`; each size must divide the input's (or be 1)."""
    x = _t(input)
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    h, w = x.shape[-2], x.shape[-1]
    oh, ow = oh or h, ow or w
    if h % oh or w % ow:
        raise NotImplementedError(f"adaptive_avg_pool2d: output {(oh, ow)} must divide the "
                                  f"input {(h, w)} (uneven windows are not supported)")
    y = x.reshape(*x.shape[:-2], oh, h // oh, ow, w // ow)
    return _la.mean(y, axis=(-3, -1))


def logsumexp(input: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    return _F.logsumexp(input, dim, keepdim)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    a, b = _la.chunk(input, 2, axis=dim)
    return a * _la.sigmoid(b)



def __getattr__(name: str) -> "Any":
    if name.startswith("__"):
        raise AttributeError(name)
    raise _missing("lazyarray.torch.nn.functional", name)
