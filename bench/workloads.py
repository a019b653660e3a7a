"""Issue 3's workloads, each written once against an array namespace `xp`."""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def _rows(xp: Any, x: Any, how: str) -> Any:
    """Row-wise max / mean with keepdims, spelled for each namespace."""
    if xp.__name__ == "torch":
        return x.amax(dim=1, keepdim=True) if how == "max" else x.mean(dim=1, keepdim=True)
    return x.max(axis=1, keepdims=True) if how == "max" else x.mean(axis=1, keepdims=True)


def _rowsum(xp: Any, x: Any) -> Any:
    if xp.__name__ == "torch":
        return x.sum(dim=1, keepdim=True)
    return x.sum(axis=1, keepdims=True)


def mean_3x2_plus_y(xp, x, y):
    return (3 * x * x + y).mean()


def sum_x_plus_yz(xp, x, y, z):
    return (x + y * z).sum()


def softmax_rows(xp, x):
    e = xp.exp(x - _rows(xp, x, "max"))
    return e / _rowsum(xp, e)


def layer_norm_rows(xp, x):
    mu = _rows(xp, x, "mean")
    d = x - mu
    var = _rows(xp, d * d, "mean")
    return d / xp.sqrt(var + 1e-5)


def gelu(xp, x):
    return 0.5 * x * (1 + xp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def matmul(xp, a, b):
    return a @ b


def _f32(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


WORKLOADS = {
    # name: (function, input maker, bytes moved at least (for bandwidth))
    "mean(3*x**2+y) 2^24": (mean_3x2_plus_y, lambda r: (_f32(r, 1 << 24), _f32(r, 1 << 24)),
                            2 * 4 << 24),
    "sum(x+y*z) 2^24": (sum_x_plus_yz, lambda r: (_f32(r, 1 << 24), _f32(r, 1 << 24),
                                                  _f32(r, 1 << 24)), 3 * 4 << 24),
    "softmax 4096x1024": (softmax_rows, lambda r: (_f32(r, 4096, 1024),), 2 * 4 * 4096 * 1024),
    "layer norm 4096x1024": (layer_norm_rows, lambda r: (_f32(r, 4096, 1024),),
                             2 * 4 * 4096 * 1024),
    "gelu 4096x4096": (gelu, lambda r: (_f32(r, 4096, 4096),), 2 * 4 * 4096 * 4096),
    "matmul 2048^2": (matmul, lambda r: (_f32(r, 2048, 2048), _f32(r, 2048, 2048)), None),
}
