"""Weight initializers. Each returns a new tensor; the `_`-suffixed forms (PyTorch's
names) rebind the given tensor to it and return the tensor. Draws come from `la.random`,
so they are lazy and reproducible under `la.random.seed`."""
from __future__ import annotations

import math
from typing import Any

from .. import random as _random
from ..tensor import Tensor


def fans(shape: tuple) -> tuple:
    """(fan_in, fan_out) of a weight: (out, in) for linear, (out, in, *kernel) for conv."""
    if len(shape) < 2:
        raise ValueError(f"fans: a weight needs rank >= 2, got shape {shape}")
    receptive = 1
    for s in shape[2:]:
        receptive *= s
    return shape[1] * receptive, shape[0] * receptive


def uniform(shape: tuple, low: float, high: float, dtype: Any = None, device: Any = None) -> Tensor:
    return _random.uniform(shape, low, high, dtype=dtype, device=device)


def normal(shape: tuple, mean: float = 0.0, std: float = 1.0, dtype: Any = None,
           device: Any = None) -> Tensor:
    return _random.normal(shape, mean, std, dtype=dtype, device=device)


def kaiming_uniform(shape: tuple, a: float = math.sqrt(5), dtype: Any = None,
                    device: Any = None) -> Tensor:
    """He uniform for leaky-ReLU slope `a`; a = sqrt(5) gives PyTorch's Linear default,
    U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    fan_in, _ = fans(shape)
    gain = math.sqrt(2.0 / (1 + a * a))
    bound = gain * math.sqrt(3.0 / fan_in)
    return uniform(shape, -bound, bound, dtype, device)


def xavier_uniform(shape: tuple, gain: float = 1.0, dtype: Any = None,
                   device: Any = None) -> Tensor:
    fan_in, fan_out = fans(shape)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform(shape, -bound, bound, dtype, device)


def xavier_normal(shape: tuple, gain: float = 1.0, dtype: Any = None, device: Any = None) -> Tensor:
    fan_in, fan_out = fans(shape)
    return normal(shape, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), dtype, device)


def _in_place(t: Tensor, fresh: Tensor) -> Tensor:
    t._assign(fresh.astype(t.dtype)._node)
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    return _in_place(t, uniform(t.shape, a, b, device=t.device))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    return _in_place(t, normal(t.shape, mean, std, device=t.device))


def kaiming_uniform_(t: Tensor, a: float = math.sqrt(5)) -> Tensor:
    return _in_place(t, kaiming_uniform(t.shape, a, device=t.device))


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    return _in_place(t, xavier_uniform(t.shape, gain, device=t.device))


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    return _in_place(t, xavier_normal(t.shape, gain, device=t.device))


def zeros_(t: Tensor) -> Tensor:
    return _in_place(t, t * 0)


def ones_(t: Tensor) -> Tensor:
    return _in_place(t, t * 0 + 1)
