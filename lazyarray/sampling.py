"""Sampling from given probabilities: `multinomial` (PyTorch's), lazy and fused, drawn
from the device's counter-based generator (`lazyarray.random`)."""
from __future__ import annotations

from typing import Any

from . import ops
from . import random as _random
from .autograd import stop_gradient
from .creation import asarray
from .lift import lift
from .tensor import Tensor

_cumsum, _sum, _min = lift(ops.cumulative_sum), lift(ops.sum), lift(ops.minimum)
_log, _topk, _expand = lift(ops.log), lift(ops.topk), lift(ops.expand_dims)


def multinomial(input: Any, num_samples: int, replacement: bool = False, *,
                generator: Any = None) -> Tensor:
    """Indices (int64) drawn from the categories of the last axis of `input` (1-D or 2-D,
    non-negative weights, not necessarily normalized), `num_samples` per row.

    With replacement: inverse-CDF sampling (a uniform draw located in the row's cumulative
    weights). Without: the Gumbel-top-k trick (log weight + Gumbel noise, the k largest),
    which draws without replacement with PyTorch's probabilities. The numbers differ from
    PyTorch's generator; the distribution is the same. Weights are not checked for
    negative or all-zero rows (that would need their values: a sync)."""
    if generator is not None:
        raise TypeError("multinomial: generator= is not supported (lazyarray has one "
                        "generator per device; seed it with manual_seed)")
    x = input if type(input) is Tensor else asarray(input)
    if x.ndim not in (1, 2) or not (x.dtype.is_float):
        raise ValueError(f"multinomial: input must be a 1-D or 2-D float tensor of weights, "
                         f"got {x.dtype.name}{tuple(x.shape)}")
    n = x.shape[-1]
    if not isinstance(num_samples, int) or num_samples <= 0:
        raise ValueError(f"multinomial: num_samples must be a positive int, got {num_samples!r}")
    if not replacement and num_samples > n:
        raise ValueError(f"multinomial: cannot draw {num_samples} samples without "
                         f"replacement from {n} categories")
    x = stop_gradient(x)
    rows = x.shape[:-1]
    if replacement:
        cdf = _cumsum(x, axis=-1)
        cdf = cdf / cdf[..., -1:]
        u = _random.uniform(rows + (num_samples,), dtype=x.dtype, device=x.device)
        below = _expand(cdf, -2) <= _expand(u, -1)          # (..., k, n)
        return _min(_sum(below.long(), axis=-1), n - 1)
    u = _random.uniform(rows + (n,), dtype=x.dtype, device=x.device)
    keys = _log(x) - _log(-_log(u))                         # log weight + Gumbel noise
    return _topk(keys, num_samples, axis=-1)[1]


__all__ = ["multinomial"]
