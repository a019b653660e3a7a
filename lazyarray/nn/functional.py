"""`la.nn.functional`: the composites of `lazyarray.ops.nn` (and the convolution and
pooling ops) lifted to tensors, plus dropout, which draws its bits from `la.random`."""
from __future__ import annotations

import math
from typing import Any

from .. import api
from .. import ops as _ops
from ..autograd import stop_gradient
from ..compiler.hlo import dtypes as _D
from ..compiler.transforms.graph_templates import remembered
from ..compiler.graph.node import Node as _Node
from ..ops import autocast as _autocast, convolution as _conv
from ..ops import nn as _nn
from ..lift import lift
from .. import random as _random
from ..tensor import Tensor

for _name in _nn.__all__:
    globals()[_name] = lift(getattr(_nn, _name))

_conv1d, _conv2d = lift(_conv.conv1d), lift(_conv.conv2d)
_max_pool2d, _avg_pool2d = lift(_conv.max_pool2d), lift(_conv.avg_pool2d)
_where, _moveaxis = lift(_ops.where), lift(_ops.moveaxis)
_soft_cross_entropy = lift(_nn.soft_cross_entropy)
_per_class_loss = {"cross_entropy": lift(_nn.cross_entropy), "nll_loss": lift(_nn.nll_loss)}
sigmoid = lift(_ops.sigmoid)
tanh = lift(_ops.tanh)


def conv1d(x: Tensor, weight: Tensor, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """1-D convolution of (N, C, L) input with (O, C/groups, K) weights."""
    return _conv1d(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                   groups=groups)


def conv2d(x: Tensor, weight: Tensor, bias: Any = None, stride: Any = 1, padding: Any = 0,
           dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D convolution of (N, C, H, W) input with (O, C/groups, kH, kW) weights."""
    return _conv2d(x, weight, bias, stride=stride, padding=padding,
                                     dilation=dilation, groups=groups)


def max_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return _max_pool2d(x, kernel_size, stride=stride, padding=padding)


def avg_pool2d(x: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    return _avg_pool2d(x, kernel_size, stride=stride, padding=padding)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only).
    The mask comes from the device's random key, advanced inside the graph."""
    if not training or p == 0.0:
        return x
    bits = _random.next_bits_node(x._state, x.shape)
    return Tensor._wrap(_nn.dropout(x._node, bits, float(p)), x._state)


# ---- losses over class indices, as PyTorch defines them ---------------------------------

def _class_loss(name: str, x: Tensor, target: Any, reduction: str, ignore_index: int,
                **kw: Any) -> Tensor:
    """Classes on axis 1 of (N, C, d1, ...) inputs (or the only axis of (C,)); targets equal
    to `ignore_index` count neither in the loss nor in the mean's denominator."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    input_shape = getattr(x, "shape", None)
    if type(x) is Tensor and x.ndim > 2:
        x = _moveaxis(x, 1, -1)
    if type(target) is Tensor and target.dtype.is_float and name == "cross_entropy":
        # probabilities over the classes (PyTorch's second form of target)
        if target.shape != input_shape:
            raise ValueError(f"cross_entropy: a float target gives probabilities and needs "
                             f"a target of the input's shape {input_shape}, got "
                             f"{target.shape} (class indices must be integers)")
        if target.ndim > 2:
            target = _moveaxis(target, 1, -1)
        if kw.get("label_smoothing"):
            n = x.shape[-1]
            target = target * (1.0 - kw["label_smoothing"]) + kw["label_smoothing"] / n
        return _soft_cross_entropy(x, target, reduction=reduction)
    if type(target) is not Tensor:
        return _per_class_loss[name](x, target, reduction=reduction, **kw)
    if target.dtype.is_int and getattr(x, "ndim", 0):
        # out-of-range classes raise here when the labels' values are known (the `where`
        # below would hide them from the op's own check)
        _nn.check_labels(name, target._node, x.shape[-1], ignore_index)
        if _nn.labels_without(target._node, ignore_index) and _counts_exactly(x, target):
            # no label is ignored: the mask below would keep every item (the same values
            # and gradients, recorded with six ops fewer)
            if type(x) is Tensor and x._state is target._state:
                return Tensor._wrap(_all_counted(name, x._node, target._node, reduction,
                                                 kw.get("label_smoothing", 0.0)), x._state)
            per_item = _per_class_loss[name](x, target, reduction="none", **kw)
            if reduction == "none":
                return per_item
            total = per_item.sum()
            return total if reduction == "sum" else total / float(math.prod(target.shape))
    keep = target != ignore_index
    per_item = _per_class_loss[name](x, _where(keep, target, 0), reduction="none", **kw)
    per_item = _where(keep, per_item, 0.0)
    if reduction == "none":
        return per_item
    total = per_item.sum()
    return total if reduction == "sum" else total / keep.astype(per_item.dtype).sum()


@remembered(context=_autocast.current)
def _all_counted(name: str, x: _Node, target: _Node, reduction: str,
                 label_smoothing: float) -> _Node:
    """`_class_loss` where every label counts (their values were checked in range by the
    caller, so the op's own check of them passes): the graph is a function of the types
    and arguments alone, so a training loop copies it from the first step's."""
    kw = {"label_smoothing": label_smoothing} if name == "cross_entropy" else {}
    per_item = getattr(_nn, name)(x, target, reduction="none", **kw)
    if reduction == "none":
        return per_item
    total = _ops.sum(per_item)
    return total if reduction == "sum" else _ops.divide(total, float(math.prod(target.shape)))


def _counts_exactly(x: Any, target: Tensor) -> bool:
    """Whether the item count, as the sum of ones in the loss's dtype that the masked form
    divides by, is exactly the number of items (float32 and float64, up to 2^24 items)."""
    dtype = getattr(x, "dtype", None)
    return dtype in (_D.float32, _D.float64) and math.prod(target.shape) <= 1 << 24


def cross_entropy(input: Tensor, target: Any, reduction: str = "mean",
                  label_smoothing: float = 0.0, ignore_index: int = -100) -> Tensor:
    """Softmax cross-entropy of logits (N, C) or (N, C, d1, ...) against class indices
    (N,) or (N, d1, ...), as torch.nn.functional.cross_entropy."""
    return _class_loss("cross_entropy", input, target, reduction, ignore_index,
                       label_smoothing=label_smoothing)


def nll_loss(input: Tensor, target: Any, reduction: str = "mean",
             ignore_index: int = -100) -> Tensor:
    """Negative log-likelihood of log-probabilities (N, C) or (N, C, d1, ...)."""
    return _class_loss("nll_loss", input, target, reduction, ignore_index)


_embedding, _sdpa = lift(_nn.embedding), lift(_nn.scaled_dot_product_attention)
_softmax, _matmul = lift(_nn.softmax), lift(_ops.matmul)


def embedding(input: Any, weight: Tensor, padding_idx: Any = None, max_norm: Any = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> Tensor:
    """Rows of `weight` picked by integer `input`; the row `padding_idx` gets no gradient
    (PyTorch's)."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are "
                                  "not supported")
    out = _embedding(input, weight)
    if padding_idx is None:
        return out
    idx = input if type(input) is Tensor else api.asarray(input, device=weight.device)
    pad = padding_idx % weight.shape[0]
    return _where(api.expand_dims(idx == pad, -1), stop_gradient(out), out)


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor,
                                 attn_mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Any = None,
                                 enable_gqa: bool = False, *, mask: Any = None) -> Tensor:
    """softmax(q k^T * scale + mask) v, PyTorch's keywords: `attn_mask` bool (True =
    attend) or float (added), broadcastable to (..., L, S); `is_causal` (the top-left
    aligned lower triangle); `scale` (default 1/sqrt(E)); `dropout_p` on the attention
    weights (always applied, as PyTorch's function does: pass 0.0 in eval);
    `enable_gqa`: key/value heads (dim -3) shared by groups of query heads. `mask=` is
    lazyarray's older name of `attn_mask`."""
    if mask is not None:
        if attn_mask is not None:
            raise TypeError("scaled_dot_product_attention: got both attn_mask= and mask=")
        attn_mask = mask
    if is_causal and attn_mask is not None:
        raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not "
                         "both (PyTorch refuses the pair too)")
    if enable_gqa:
        key, value = _grouped(query, key), _grouped(query, value)
    if not dropout_p:
        if type(query) is Tensor and type(key) is Tensor and type(value) is Tensor and \
                key._state is query._state and value._state is query._state and (
                    attn_mask is None or type(attn_mask) is Tensor
                    and attn_mask._state is query._state):
            # tensors of one device (a model's every layer): the nodes straight to the
            # composite, without _sdpa's search for the device
            return Tensor._wrap(_nn.scaled_dot_product_attention(
                query._node, key._node, value._node,
                None if attn_mask is None else attn_mask._node, is_causal, scale),
                query._state)
        return _sdpa(query, key, value, attn_mask, is_causal=is_causal, scale=scale)
    # dropout needs the weights: the same graph, written out with the weights in the middle
    e = query.shape[-1]
    s = 1.0 / math.sqrt(e) if scale is None else scale
    scores = _matmul(query, api.matrix_transpose(key)) * s
    if is_causal:
        L, S = query.shape[-2], key.shape[-2]
        attn_mask = api.tril(api.ones((L, S), dtype=api.bool, device=query.device))
    if attn_mask is not None:
        if type(attn_mask) is not Tensor:
            attn_mask = api.asarray(attn_mask, device=query.device)
        scores = _where(attn_mask, scores, -math.inf) if attn_mask.dtype is _D.bool_ \
            else scores + attn_mask
    weights = dropout(_softmax(scores, -1), dropout_p, True)
    return _matmul(weights, value)


def _grouped(query: Tensor, kv: Tensor) -> Tensor:
    hq, hk = query.shape[-3], kv.shape[-3]
    if hq % hk:
        raise ValueError(f"scaled_dot_product_attention(enable_gqa=True): {hq} query heads "
                         f"are not a multiple of {hk} key/value heads")
    return api.repeat(kv, hq // hk, axis=-3)
