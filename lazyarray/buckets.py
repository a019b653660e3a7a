"""Shape buckets: pad a batch to one of a few sizes so that a model compiles once per
bucket, not once per length (the advice XLA's users follow for variable-length text).

    tokens, mask = la.pad_to_bucket(batch_tokens, buckets=(16, 32, 64, 128))
    out = encoder(tokens, key_padding_mask=~mask)   # one program per bucket, any length

The padding is done on the host, before tracing: the padded tensor and its mask are new
data tensors (a pending input is computed first), so the traced program sees only the
bucket's shape. The length itself never enters the program.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from .creation import asarray
from .tensor import Tensor

SMALLEST = 8        # the default buckets: 8, 16, 32, ... (powers of two)


def bucket_size(n: int, buckets: Optional[Sequence[int]] = None) -> int:
    """The smallest bucket that holds `n` (default buckets: powers of two from 8)."""
    if buckets is None:
        size = SMALLEST
        while size < n:
            size *= 2
        return size
    fitting = [int(b) for b in buckets if int(b) >= n]
    if not fitting:
        raise ValueError(f"pad_to_bucket: length {n} exceeds the largest bucket "
                         f"{max(int(b) for b in buckets)} of {tuple(buckets)}; add a larger "
                         "bucket (or leave buckets=None for powers of two)")
    return min(fitting)


def pad_to_bucket(x: Any, buckets: Optional[Sequence[int]] = None, axis: int = -1,
                  value: Any = 0) -> tuple:
    """(x padded with `value` along `axis` up to its bucket size, mask) where mask is a
    bool tensor of the padded shape up to `axis` (tokens (N, L) -> mask (N, bucket)),
    True at the original positions (`~mask` is PyTorch's `key_padding_mask`)."""
    device = x._state if isinstance(x, Tensor) else None
    host = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    if host.ndim == 0:
        raise ValueError("pad_to_bucket: a 0-d value has no axis to pad; give a batch "
                         "(e.g. tokens of shape (N, L))")
    if not -host.ndim <= axis < host.ndim:
        raise ValueError(f"pad_to_bucket: axis {axis} is out of range for shape "
                         f"{tuple(host.shape)} (valid: {-host.ndim}..{host.ndim - 1})")
    axis %= host.ndim
    n = host.shape[axis]
    size = bucket_size(n, buckets)
    widths = [(0, 0)] * host.ndim
    widths[axis] = (0, size - n)
    padded = np.pad(host, widths, constant_values=value)
    mask = np.zeros(padded.shape[:axis + 1], dtype=bool)
    mask[(slice(None),) * axis + (slice(0, n),)] = True
    return asarray(padded, device=device), asarray(mask, device=device)


__all__ = ["pad_to_bucket", "bucket_size"]
