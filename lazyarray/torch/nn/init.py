"""`torch.nn.init`: PyTorch's in-place initializers (each rebinds the tensor to fresh
values drawn from the device's generator; the numbers differ from PyTorch's, the
distributions are the same)."""
from __future__ import annotations

import math
from typing import Any

import lazyarray as _la
from lazyarray.nn.init import (fans as _fans, normal_, ones_, uniform_,  # noqa: F401
                               xavier_normal_, xavier_uniform_, zeros_)
from lazyarray.tensor import Tensor

_GAINS = {"linear": 1.0, "conv1d": 1.0, "conv2d": 1.0, "conv3d": 1.0, "sigmoid": 1.0,
          "tanh": 5.0 / 3, "relu": math.sqrt(2.0), "selu": 3.0 / 4}


def calculate_gain(nonlinearity: str, param: Any = None) -> float:
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity not in _GAINS:
        raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")
    return _GAINS[nonlinearity]


def _fan(t: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fans(tuple(t.shape))
    return fan_in if mode == "fan_in" else fan_out


def _set(t: Tensor, fresh: Tensor) -> Tensor:
    t._assign(fresh.astype(t.dtype)._node)
    return t


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _set(tensor, _la.full(tuple(tensor.shape), val, dtype=tensor.dtype,
                                 device=tensor.device))


def eye_(tensor: Tensor) -> Tensor:
    if tensor.ndim != 2:
        raise ValueError(f"eye_: needs a matrix, got {tensor.ndim} dims")
    return _set(tensor, _la.eye(*tensor.shape, dtype=tensor.dtype, device=tensor.device))


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu") -> Tensor:
    bound = math.sqrt(3.0) * calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu") -> Tensor:
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std)


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0,
                  b: float = 2.0) -> Tensor:
    """Normal(mean, std) restricted to [a, b], by the inverse CDF of a uniform draw."""
    lo = 0.5 * (1 + math.erf((a - mean) / (std * math.sqrt(2))))
    hi = 0.5 * (1 + math.erf((b - mean) / (std * math.sqrt(2))))
    u = _la.random.uniform(tuple(tensor.shape), 2 * lo - 1, 2 * hi - 1, dtype=_la.float64,
                           device=tensor.device)
    x = _erfinv(u) * (std * math.sqrt(2.0)) + mean
    return _set(tensor, _la.clip(x, a, b))


def _erfinv(y: Tensor) -> Tensor:
    """erf^-1 by Giles' approximation refined with two Newton steps on erf."""
    w = -_la.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws, wl = _la.where(small, w - 2.5, 0.0), _la.sqrt(_la.where(small, 5.0, w)) - 3.0
    p1 = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):
        p1 = c + p1 * ws
    p2 = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):
        p2 = c + p2 * wl
    x = _la.where(small, p1, p2) * y
    for _ in range(2):
        x = x - (_la.erf(x) - y) / (2.0 / math.sqrt(math.pi) * _la.exp(-x * x))
    return x


def orthogonal_(tensor: Tensor, gain: float = 1.0) -> Tensor:
    rows = tensor.shape[0]
    cols = int(tensor.size // rows)
    flat = _la.random.normal((max(rows, cols), min(rows, cols)), dtype=_la.float64,
                             device=tensor.device)
    q, r = _la.linalg.qr(flat)
    q = q * _la.sign(_la.diagonal(r))[None, :]
    if rows < cols:
        q = q.T
    return _set(tensor, (gain * q).reshape(tuple(tensor.shape)))
