"""Neural-network composites over nodes: activations, normalizations, losses, attention.

Each is a few primitives (so gradients come from the primitives' own VJPs and the whole
thing fuses); none needs an op of its own. Losses take integer labels and build the
one-hot matrix by comparing with an iota, so no gather (and no scatter in the backward
pass) is needed.
"""
from __future__ import annotations

import math
import weakref

import numpy as np
from typing import Any, Optional

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from ..compiler.transforms.autodiff import stop
from ..compiler.transforms.graph_templates import remembered
from .elementwise import (abs, add, divide, equal, erf, exp, greater_equal, less, log, log1p,
                          logical_and, maximum, multiply, negative, rsqrt, sigmoid, subtract,
                          tanh, where)
from . import checks
from .linalg import matmul
from .manipulation import matrix_transpose, reshape
from .promotion import as_node, broadcast_to, convert, normalize_axis, shape_str
from .statistical import max as _max, mean, sum as _sum
from . import autocast

Operand = Any


def _float(op: str, x: Operand) -> Node:
    x = as_node(x)
    if not x.dtype.is_float:
        raise TypeError(f"{op}: needs a floating-point tensor, got {x.dtype.name}"
                        f"{list(x.shape)}; convert with .astype(la.float32)")
    return x


def _float32(op: str, x: Operand) -> Node:
    """_float, widened to float32 under autocast (softmax, normalizations, losses)."""
    return autocast.widen(_float(op, x))


# ---- activations -------------------------------------------------------------------

def relu(x: Operand) -> Node:
    x = as_node(x)
    return maximum(x, 0)


def leaky_relu(x: Operand, negative_slope: float = 0.01) -> Node:
    x = as_node(x)
    return where(apply("compare", x, broadcast_to(as_node(0, x.dtype), x.shape), direction="GT"),
                 x, multiply(x, negative_slope))


def silu(x: Operand) -> Node:
    x = _float("silu", x)
    return multiply(x, sigmoid(x))


def gelu(x: Operand, approximate: str = "none") -> Node:
    """x * Phi(x): the erf form ('none'), or the tanh approximation ('tanh')."""
    return _gelu(x, approximate)


@remembered()
def _gelu(x: Operand, approximate: str) -> Node:
    x = _float("gelu", x)
    if approximate == "none":
        return multiply(multiply(x, 0.5), add(erf(multiply(x, 1 / math.sqrt(2))), 1))
    if approximate == "tanh":
        inner = multiply(add(x, multiply(multiply(multiply(x, x), x), 0.044715)),
                         math.sqrt(2 / math.pi))
        return multiply(multiply(x, 0.5), add(tanh(inner), 1))
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def softplus(x: Operand) -> Node:
    """log(1 + exp(x)), stable for large |x|: max(x, 0) + log1p(exp(-|x|))."""
    x = _float("softplus", x)
    return add(maximum(x, 0), log1p(exp(negative(abs(x)))))


# ---- softmax family ----------------------------------------------------------------

def _shifted(op: str, x: Operand, axis: int) -> tuple:
    """x minus its max along axis (so exp never overflows), and the axis. No gradient
    flows through the max: the results do not depend on the shift, so its gradient is
    zero in exact arithmetic, and computing it costs a backward pass two more row
    reductions (the max's ties and the rounding left of a sum that is zero) per row."""
    x = _float32(op, x)
    axis = normalize_axis(op, axis, x.ndim)
    top = stop(_max(x, axis=axis, keepdims=True))
    return subtract(x, top), axis


def softmax(x: Operand, axis: int = -1) -> Node:
    z, axis = _shifted("softmax", x, axis)
    e = exp(z)
    return divide(e, _sum(e, axis=axis, keepdims=True))


def log_softmax(x: Operand, axis: int = -1) -> Node:
    z, axis = _shifted("log_softmax", x, axis)
    return subtract(z, log(_sum(exp(z), axis=axis, keepdims=True)))


def logsumexp(x: Operand, axis: int = -1, keepdims: bool = False) -> Node:
    x = _float32("logsumexp", x)
    axis = normalize_axis("logsumexp", axis, x.ndim)
    top = stop(_max(x, axis=axis, keepdims=True))     # (no gradient: see _shifted)
    out = add(log(_sum(exp(subtract(x, top)), axis=axis, keepdims=True)), top)
    return out if keepdims else reshape(out, x.shape[:axis] + x.shape[axis + 1:])


# ---- normalization -----------------------------------------------------------------

def layer_norm(x: Operand, normalized_shape: Any, weight: Optional[Node] = None,
               bias: Optional[Node] = None, eps: float = 1e-5) -> Node:
    """Normalize over the trailing dimensions `normalized_shape` (biased variance)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _layer_norm(x, tuple(normalized_shape), weight, bias, eps)


# the graphs of the composites a model records at every step (every token of a decoding
# loop) are functions of their arguments' types and static values: copied from the first
# call's (compiler/transforms/graph_templates.py), none of their front ends' work redone
@remembered(context=autocast.current)
def _layer_norm(x: Operand, normalized_shape: tuple, weight: Optional[Node],
                bias: Optional[Node], eps: float) -> Node:
    x = _float32("layer_norm", x)
    k = len(normalized_shape)
    if k == 0 or x.shape[x.ndim - k:] != normalized_shape:
        raise ValueError(f"layer_norm: normalized_shape {normalized_shape} must be the trailing "
                         f"dimensions of the input {shape_str(x.shape)}")
    axes = tuple(range(x.ndim - k, x.ndim))
    # One pass over shifted data: var = E[(x-s)^2] - E[x-s]^2 holds for any shift s, and with
    # s = the row's first element it keeps the precision of the two-pass form in practice.
    # Both means read x over the same space, so they fuse into one kernel (two in all).
    if 0 in x.shape:
        d = x
    else:
        first = apply("slice", x, start_indices=(0,) * x.ndim,
                      limit_indices=x.shape[:x.ndim - k] + (1,) * k, strides=(1,) * x.ndim)
        d = subtract(x, broadcast_to(first, x.shape))
    m1 = mean(d, axis=axes, keepdims=True)
    m2 = mean(multiply(d, d), axis=axes, keepdims=True)
    var = maximum(subtract(m2, multiply(m1, m1)), 0.0)
    out = multiply(subtract(d, m1), rsqrt(add(var, eps)))
    if weight is not None:
        out = multiply(out, weight)
    if bias is not None:
        out = add(out, bias)
    return out


def _per_channel(v: Node, x: Node) -> Node:
    """A (C,) vector broadcast along axis 1 of x (N, C, ...)."""
    return apply("broadcast_in_dim", convert(v, x.dtype), shape=x.shape, broadcast_dimensions=(1,))


def batch_norm(x: Operand, mean_: Node, var: Node, weight: Optional[Node] = None,
               bias: Optional[Node] = None, eps: float = 1e-5) -> Node:
    """(x - mean) / sqrt(var + eps) * weight + bias, with per-channel statistics (channels
    on axis 1, as in PyTorch)."""
    if type(x) is Node and type(eps) is float:
        # of nodes (a CNN in eval: every layer at every call), a function of their types,
        # eps and autocast: the first call's graph copied (graph_templates.py)
        return _batch_norm_of_nodes(x, mean_, var, weight, bias, eps)
    return _batch_norm(x, mean_, var, weight, bias, eps)


def _batch_norm(x: Operand, mean_: Node, var: Node, weight: Optional[Node],
                bias: Optional[Node], eps: float) -> Node:
    x = _float32("batch_norm", x)
    if x.ndim < 2 or any(v is not None and v.shape != (x.shape[1],)
                         for v in (mean_, var, weight, bias)):
        raise ValueError(f"batch_norm: needs (N, C, ...) input and (C,) statistics and "
                         f"affine parameters, got input {shape_str(x.shape)}")
    out = multiply(subtract(x, _per_channel(mean_, x)), _per_channel(rsqrt(add(var, eps)), x))
    if weight is not None:
        out = multiply(out, _per_channel(weight, x))
    if bias is not None:
        out = add(out, _per_channel(bias, x))
    return out


_batch_norm_of_nodes = remembered(context=autocast.current)(_batch_norm)


def batch_stats(x: Operand) -> tuple:
    """Per-channel mean and biased variance of (N, C, ...) input, over all axes but 1."""
    x = _float32("batch_norm", x)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: needs (N, C, ...) input, got {shape_str(x.shape)}")
    axes = (0,) + tuple(range(2, x.ndim))
    if 0 in x.shape:
        mu = mean(x, axis=axes)
        centered = subtract(x, _per_channel(mu, x))
        return mu, mean(multiply(centered, centered), axis=axes)
    # One pass over shifted data, as layer_norm: var = E[(x-s)^2] - E[x-s]^2 for any
    # per-channel shift s; s = the channel's first element keeps the two-pass precision in
    # practice. s is held constant for gradients (the statistics do not depend on it), so
    # the backward pass has no reduction that waits for another: two passes in all.
    first = apply("slice", x, start_indices=(0,) * x.ndim,
                  limit_indices=(1, x.shape[1]) + (1,) * (x.ndim - 2), strides=(1,) * x.ndim)
    shift = stop(reshape(first, (x.shape[1],)))
    d = subtract(x, _per_channel(shift, x))
    m1 = mean(d, axis=axes)
    m2 = mean(multiply(d, d), axis=axes)
    return add(m1, shift), maximum(subtract(m2, multiply(m1, m1)), 0.0)


def batch_norm_training(x: Node, weight: Optional[Node], bias: Optional[Node],
                        running_mean: Node, running_var: Node, num_batches: Node,
                        eps: float, momentum: float) -> tuple:
    """BatchNorm in training with running statistics, as PyTorch's layer computes it:
    (output normalized by the batch's statistics, the new running mean and variance --
    `running * (1 - momentum) + batch * momentum`, the variance unbiased -- and the batch
    count plus one). One composite for the layer (every BatchNorm of a CNN at every step):
    its graph is a function of the types and `eps`, `momentum`, so a training loop copies
    the first step's (graph_templates.py) instead of recording thirty ops one by one."""
    return _batch_norm_training(x, weight, bias, running_mean, running_var, num_batches,
                                float(eps), float(momentum))


@remembered(context=autocast.current)
def _batch_norm_training(x: Node, weight: Optional[Node], bias: Optional[Node],
                         running_mean: Node, running_var: Node, num_batches: Node,
                         eps: float, momentum: float) -> tuple:
    mean_, var = batch_stats(x)
    count = math.prod(x.shape) // x.shape[1]
    unbiased = multiply(var, count / max(count - 1, 1))
    new_mean = add(multiply(running_mean, 1 - momentum), multiply(mean_, momentum))
    new_var = add(multiply(running_var, 1 - momentum), multiply(unbiased, momentum))
    return (batch_norm(x, mean_, var, weight, bias, eps), new_mean, new_var,
            add(num_batches, 1))


# ---- layers as functions -----------------------------------------------------------

def linear(x: Operand, weight: Node, bias: Optional[Node] = None) -> Node:
    """x @ weight.T + bias, with weight of shape (out_features, in_features)."""
    fast = linear_direct(x, weight, bias)
    if fast is not None:
        return fast
    return _linear(x, weight, bias)


@remembered(context=autocast.current)
def _linear(x: Operand, weight: Node, bias: Optional[Node]) -> Node:
    x = as_node(x)
    if weight.ndim != 2 or x.shape[-1:] != weight.shape[1:]:
        raise ValueError(f"linear: input {shape_str(x.shape)} does not match weight "
                         f"{shape_str(weight.shape)} (out_features, in_features)")
    out = matmul(x, matrix_transpose(weight))
    return add(out, bias) if bias is not None else out


_LINEAR_FAST = frozenset((D.float32, D.float64))


def linear_direct(x: Any, weight: Any, bias: Any) -> Optional[Node]:
    """The nodes `linear` records for a batch of rows (N, in) @ (out, in).T + (out,), all
    of one float dtype and no autocast, made directly (every layer of a training step
    records it; what the general path's checks could not fail on). None otherwise."""
    if type(x) is not Node or type(weight) is not Node or autocast.current() is not None:
        return None
    dtype = x.dtype
    if dtype not in _LINEAR_FAST or weight.dtype is not dtype or len(x.shape) != 2 \
            or len(weight.shape) != 2 or x.shape[1] != weight.shape[1]:
        return None
    if bias is not None and (type(bias) is not Node or bias.dtype is not dtype
                             or bias.shape != weight.shape[:1]):
        return None
    out = apply("dot_general", x, apply("transpose", weight, permutation=(1, 0)),
                lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(), rhs_batch=())
    if bias is None:
        return out
    return apply("add", out, apply("broadcast_in_dim", bias, shape=out.shape,
                                   broadcast_dimensions=(1,)))


def embedding(indices: Operand, weight: Node) -> Node:
    """Rows of `weight` (num_embeddings, dim) picked by integer `indices`."""
    indices = as_node(indices)
    if not indices.dtype.is_int:
        raise TypeError(f"embedding: indices must be integers, got {indices.dtype.name}")
    return apply("gather", weight, indices, axis=0)


def one_hot(labels: Operand, num_classes: int, dtype: Any = None) -> Node:
    """labels (...) -> (..., num_classes): compare with an iota, no gather."""
    labels = as_node(labels)
    if not labels.dtype.is_int:
        raise TypeError(f"one_hot: labels must be integers, got {labels.dtype.name}")
    num_classes = checks.size("one_hot", "num_classes", num_classes)
    shape = labels.shape + (num_classes,)
    classes = apply("iota", shape=shape, dtype=labels.dtype, dimension=len(shape) - 1)
    wide = apply("broadcast_in_dim", labels, shape=shape,
                 broadcast_dimensions=tuple(range(labels.ndim)))
    hot = equal(wide, classes)
    return convert(hot, D.to_dtype(dtype) if dtype is not None else D.DEFAULT_FLOAT)


def dropout(x: Operand, bits: Node, p: float) -> Node:
    """Zero each element with probability p, scale the rest by 1/(1-p). `bits` are uint32
    random words of x's shape (from `lazyarray.ops.random.bits`)."""
    x = _float("dropout", x)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    if bits.shape != x.shape or bits.dtype is not D.uint32:
        raise ValueError(f"dropout: bits must be uint32{list(x.shape)}, got "
                         f"{bits.dtype.name}{list(bits.shape)}")
    if p == 0.0:
        return x
    threshold = min(int(round(p * 2.0 ** 32)), 2 ** 32 - 1)
    keep = apply("compare", bits, broadcast_to(as_node(threshold, D.uint32), x.shape),
                 direction="GE")
    return where(keep, multiply(x, 1.0 / (1.0 - p)), 0.0)


# ---- losses ------------------------------------------------------------------------

REDUCTIONS = ("mean", "sum", "none")


def _reduce_loss(op: str, loss: Node, reduction: str) -> Node:
    if reduction == "mean":
        return mean(loss)
    if reduction == "sum":
        return _sum(loss)
    if reduction == "none":
        return loss
    raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


def cross_entropy(logits: Operand, labels: Operand, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Node:
    """Softmax cross-entropy of logits (N, C) (or (C,)) against integer labels (N,)."""
    logits = _float32("cross_entropy", logits)
    labels = as_node(labels)
    if not labels.dtype.is_int:
        raise TypeError(f"cross_entropy: labels must be integer class indices, got "
                        f"{labels.dtype.name}; for probabilities use soft_cross_entropy")
    if logits.ndim < 1 or labels.shape != logits.shape[:-1]:
        raise ValueError(f"cross_entropy: logits {shape_str(logits.shape)} need labels of shape "
                         f"{shape_str(logits.shape[:-1])}, got {shape_str(labels.shape)}")
    n_classes = logits.shape[-1]
    in_range = check_labels("cross_entropy", labels, n_classes)
    target = one_hot(labels, n_classes, logits.dtype)
    if label_smoothing:
        target = add(multiply(target, 1.0 - label_smoothing), label_smoothing / n_classes)
    per_row = soft_cross_entropy(logits, target, "none")
    if not in_range:
        per_row = _nan_where_out_of_range(per_row, labels, n_classes)
    return _reduce_loss("cross_entropy", per_row, reduction)


def check_labels(op: str, labels: Node, n_classes: int, ignore_index: Any = None) -> bool:
    """Labels outside [0, n_classes) (other than `ignore_index`) are an error where the op
    is recorded when their values are already on the host (a computed CPU tensor, a NumPy
    array); elsewhere the loss of their rows is NaN (see `_nan_where_out_of_range`),
    never a silent 0. True when every label is thus known to be in range (values on the
    host, no `ignore_index`): the loss then needs no NaN guard (a training step records
    six nodes fewer)."""
    data = labels.buffer
    if not isinstance(data, np.ndarray) or not data.size:
        return False
    # a training loop passes the same labels tensor at every step: its values, which
    # never change while its node holds them, are checked once per (classes, ignore_index)
    seen = _LABELS_CHECKED.get(labels)
    if seen is None or seen[0] is not data:
        seen = _LABELS_CHECKED[labels] = (data, set())
    bounds = (n_classes, ignore_index)
    plain = type(ignore_index) is int or ignore_index is None
    if plain and bounds in seen[1]:
        return ignore_index is None
    if ignore_index is not None:
        data = data[data != ignore_index]
    if data.size:
        lo, hi = int(data.min()), int(data.max())
        if lo < 0 or hi >= n_classes:
            bad = lo if lo < 0 else hi
            raise ValueError(f"{op}: label {bad} is out of range for {n_classes} classes "
                             f"(valid: 0..{n_classes - 1})")
    if plain:
        seen[1].add(bounds)
    return ignore_index is None


# labels node -> (its buffer, the (n_classes, ignore_index) its values were found within)
_LABELS_CHECKED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def labels_without(labels: Node, value: Any) -> bool:
    """True when the labels' values are on the host and none of them is `value` (an
    `ignore_index` that then masks nothing); False when unknown. Checked once per labels
    node and value, as `check_labels` does (a node's values never change)."""
    data = labels.buffer
    if not isinstance(data, np.ndarray) or type(value) is not int:
        return False
    entry = _LABELS_WITHOUT.get(labels)
    if entry is None or entry[0] is not data:
        entry = _LABELS_WITHOUT[labels] = (data, {})
    found = entry[1].get(value)
    if found is None:
        found = entry[1][value] = not bool((data == value).any())
    return found


# labels node -> (its buffer, {value: whether no label equals it})
_LABELS_WITHOUT: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _nan_where_out_of_range(per_row: Node, labels: Node, n_classes: int) -> Node:
    valid = logical_and(greater_equal(labels, 0), less(labels, n_classes))
    return where(valid, per_row, float("nan"))


def soft_cross_entropy(logits: Operand, target: Operand, reduction: str = "mean") -> Node:
    """Cross-entropy against a probability distribution over the last axis."""
    logits = _float32("cross_entropy", logits)
    per_row = negative(_sum(multiply(as_node(target), log_softmax(logits, -1)), axis=-1))
    return _reduce_loss("cross_entropy", per_row, reduction)


def nll_loss(log_probs: Operand, labels: Operand, reduction: str = "mean") -> Node:
    log_probs = _float32("nll_loss", log_probs)
    labels = as_node(labels)
    n_classes = log_probs.shape[-1]
    in_range = check_labels("nll_loss", labels, n_classes)
    target = one_hot(labels, n_classes, log_probs.dtype)
    per_row = negative(_sum(multiply(target, log_probs), axis=-1))
    if not in_range:
        per_row = _nan_where_out_of_range(per_row, labels, n_classes)
    return _reduce_loss("nll_loss", per_row, reduction)


def mse_loss(prediction: Operand, target: Operand, reduction: str = "mean") -> Node:
    d = subtract(_float32("mse_loss", prediction), target)
    return _reduce_loss("mse_loss", multiply(d, d), reduction)


def l1_loss(prediction: Operand, target: Operand, reduction: str = "mean") -> Node:
    return _reduce_loss("l1_loss", abs(subtract(_float32("l1_loss", prediction), target)),
                        reduction)


def binary_cross_entropy_with_logits(logits: Operand, target: Operand,
                                     reduction: str = "mean") -> Node:
    """max(x, 0) - x*y + log(1 + exp(-|x|)): never overflows."""
    x = _float32("binary_cross_entropy_with_logits", logits)
    target = as_node(target)
    if target.shape != x.shape:
        raise ValueError(f"binary_cross_entropy_with_logits: target {shape_str(target.shape)} "
                         f"must match logits {shape_str(x.shape)}")
    loss = add(subtract(maximum(x, 0), multiply(x, target)), log1p(exp(negative(abs(x)))))
    return _reduce_loss("binary_cross_entropy_with_logits", loss, reduction)


# ---- attention ---------------------------------------------------------------------

def scaled_dot_product_attention(q: Operand, k: Operand, v: Operand, mask: Optional[Node] = None,
                                 is_causal: bool = False, scale: Optional[float] = None) -> Node:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries and (..., S, E) keys.

    `mask`: bool (True = attend) or float (added to the scores), broadcastable to (..., L, S).
    """
    return _attention(q, k, v, mask, is_causal, scale)


@remembered(context=autocast.current)
def _attention(q: Operand, k: Operand, v: Operand, mask: Optional[Node], is_causal: bool,
               scale: Optional[float]) -> Node:
    q, k, v = _float("attention", q), _float("attention", k), _float("attention", v)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(f"scaled_dot_product_attention: q {shape_str(q.shape)}, k "
                         f"{shape_str(k.shape)}, v {shape_str(v.shape)}: need q (..., L, E), "
                         "k (..., S, E), v (..., S, Ev)")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = multiply(matmul(q, matrix_transpose(k)), scale)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        rows = apply("iota", shape=(L, S), dtype=D.int64, dimension=0)
        cols = apply("iota", shape=(L, S), dtype=D.int64, dimension=1)
        causal = apply("compare", cols, rows, direction="LE")
        scores = where(causal, scores, -math.inf)
    if mask is not None:
        mask = as_node(mask)
        if mask.dtype is D.bool_:
            scores = where(mask, scores, -math.inf)
        else:
            scores = add(scores, mask)
    return matmul(softmax(scores, -1), v)


__all__ = ["relu", "leaky_relu", "silu", "gelu", "softplus", "softmax", "log_softmax",
           "logsumexp", "layer_norm", "batch_norm", "batch_stats", "linear", "embedding",
           "one_hot", "dropout", "cross_entropy", "soft_cross_entropy", "nll_loss", "mse_loss",
           "l1_loss", "binary_cross_entropy_with_logits", "scaled_dot_product_attention"]
