"""`torch.nn.utils`: gradient clipping over parameters' `.grad`."""
from __future__ import annotations

from typing import Any

import lazyarray as _la
from lazyarray.nn.utils import clip_grad_norm_  # noqa: F401
from lazyarray.tensor import Tensor


def clip_grad_value_(parameters: Any, clip_value: float) -> None:
    params = [parameters] if type(parameters) is Tensor else list(parameters)
    for p in params:
        if p.grad is not None:
            p.grad = _la.clip(p.grad, -clip_value, clip_value)


def parameters_to_vector(parameters: Any) -> Tensor:
    return _la.concat([_la.reshape(p, (-1,)) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Any) -> None:
    start = 0
    for p in parameters:
        n = p.numel()
        p.copy_(vec[start:start + n].reshape(p.shape))
        start += n
