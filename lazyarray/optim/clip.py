"""Gradient clipping by global norm, lazily (the norm is never read on the host)."""
from __future__ import annotations

from typing import Any, Sequence

from .. import ops
from ..compiler.graph.node import scalar_leaf
from ..tensor import Tensor


def global_norm(grads: Sequence[Any]) -> Tensor:
    """sqrt(sum of every gradient's squares), in float32 or wider."""
    present = [g for g in grads if g is not None]
    if not present:
        raise ValueError("global_norm: no gradients (all None)")
    total = None
    for g in present:
        node = g._node if g.dtype.bits >= 32 else g.astype("float32")._node
        sq = ops.sum(ops.multiply(node, node))
        total = sq if total is None else ops.add(total, sq)
    return Tensor._wrap(ops.sqrt(total), present[0]._state)


def clip_grad_norm(grads: Sequence[Any], max_norm: float, eps: float = 1e-6) -> tuple:
    """Scale the gradients so that their global norm is at most `max_norm`.
    Returns (the clipped gradients, in order, None kept; the norm before clipping)."""
    if max_norm <= 0:
        raise ValueError(f"clip_grad_norm: max_norm must be positive, got {max_norm}")
    norm = global_norm(grads)
    limit = scalar_leaf(float(max_norm), norm.dtype)
    factor = ops.minimum(ops.divide(limit, ops.add(norm._node, scalar_leaf(eps, norm.dtype))), 1.0)
    out = []
    for g in grads:
        if g is None:
            out.append(None)
            continue
        f = factor if g.dtype is factor.dtype else ops.astype(factor, g.dtype)
        out.append(Tensor._wrap(ops.multiply(g._node, f), g._state))
    return out, norm
