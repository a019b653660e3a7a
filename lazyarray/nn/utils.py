"""`la.nn.utils`: PyTorch's in-place gradient clipping over parameters' `.grad`."""
from __future__ import annotations

import math
from typing import Any

from ..optim.clip import clip_grad_norm
from ..tensor import Tensor


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False) -> Tensor:
    """Scale every parameter's `.grad` so that their global 2-norm is at most `max_norm`;
    returns the norm before clipping (a lazy scalar: reading it syncs).
    `error_if_nonfinite=True` reads the norm on the host (a sync) and raises when it is
    nan or inf."""
    if norm_type != 2.0:
        raise ValueError(f"clip_grad_norm_: only norm_type=2 is supported, got {norm_type}")
    params = [parameters] if type(parameters) is Tensor else list(parameters)
    with_grad = [p for p in params if p.grad is not None]
    clipped, norm = clip_grad_norm([p.grad for p in with_grad], max_norm)
    if error_if_nonfinite and not math.isfinite(norm.item()):
        raise RuntimeError(f"clip_grad_norm_: the total norm of the gradients is "
                           f"{norm.item()}; set error_if_nonfinite=False to clip anyway")
    for p, g in zip(with_grad, clipped):
        p.grad = g
    return norm


__all__ = ["clip_grad_norm_"]
