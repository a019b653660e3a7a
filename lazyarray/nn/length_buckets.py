"""Sequence lengths in buckets, chosen by lazyarray (`la.config.length_buckets = True`).

A model called on batches of many sequence lengths would compile one program per length.
With the setting on, calling a module whose `forward` takes a key padding mask (PyTorch's
`key_padding_mask`, `src_key_padding_mask` or `padding_mask`) pads its first argument
along the sequence axis to the length's bucket (8, 16, 32, ...: `la.bucket_size`), passes
the mask of the padded positions (True = padding, PyTorch's meaning; a mask the caller
gave is padded with True), and slices every output that has the bucket's length along
that axis back to the real length. The program then depends on the bucket only: a handful
of programs for any number of lengths, results equal to the unpadded ones.

Outputs through which no gradient can flow (inference under `la.no_grad()`, or a model
with no trainable parameter) are sliced as data, so no program depends on the length;
otherwise they are sliced in the graph, so that `backward()` reaches the padded forward
(the step's program then follows the length: for training, keep the batch padded with
`la.pad_to_bucket` and mask the loss). The contract is the mask's: every op of the module that mixes positions (attention,
pooling over the sequence) must honour it, as PyTorch's own padded batches require;
position-wise layers (embeddings, linear layers, layer norms) are unaffected by padding.
The sequence axis is 1 (batch first) unless the module says `batch_first = False`. Only the
outermost such call pads (the layers inside see the padded batch). A materialized input
or a host array is padded on the host (the program sees only the bucket's shape); a
pending one, or one that requires grad, is padded in the graph (gradients flow).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable

import numpy as np

from .. import api, backward, runtime
from ..buckets import bucket_size
from ..creation import asarray
from ..graph_break import host_value
from ..tensor import Tensor

MASK_NAMES = ("key_padding_mask", "src_key_padding_mask", "padding_mask")

_MASK_PARAMETER: dict = {}      # module class -> the name of its forward's mask, or None
_ACTIVE = [False]               # inside a padded call: the layers within do not pad again


def mask_parameter(cls: type) -> Any:
    """The name of the key padding mask `cls.forward` takes, or None (cached per class)."""
    try:
        return _MASK_PARAMETER[cls]
    except KeyError:
        pass
    try:
        names = inspect.signature(cls.forward).parameters
    except (TypeError, ValueError):
        names = {}
    found = next((n for n in MASK_NAMES if n in names), None)
    _MASK_PARAMETER[cls] = found
    return found


def applies(module: Any) -> bool:
    return not _ACTIVE[0] and mask_parameter(type(module)) is not None


def call(module: Any, forward: Callable, args: tuple, kwargs: dict) -> Any:
    """`forward(*args, **kwargs)` on the batch padded to its length's bucket (see above)."""
    name = mask_parameter(type(module))
    if not args or kwargs.get(name) is not None and not _is_mask(kwargs[name]):
        return forward(*args, **kwargs)
    axis = 1 if getattr(module, "batch_first", True) else 0
    x = args[0]
    shape = tuple(getattr(x, "shape", np.shape(x)))
    if len(shape) <= max(axis, 1 if axis == 0 else 0):
        return forward(*args, **kwargs)        # unbatched: nothing to pad
    length = shape[axis]
    size = bucket_size(length)
    if size == length and kwargs.get(name) is not None:
        return forward(*args, **kwargs)
    padded = _pad(x, axis, size)
    kwargs = dict(kwargs)
    kwargs[name] = _padding_mask(kwargs.get(name), shape, axis, length, size, padded)
    _ACTIVE[0] = True
    try:
        out = forward(padded, *args[1:], **kwargs)
    finally:
        _ACTIVE[0] = False
    return _cut(out, axis, length, size, _needs_no_gradient(module, padded))


def _needs_no_gradient(module: Any, x: Any) -> bool:
    """Whether no gradient can flow through the call's outputs: gradients are off
    (`la.no_grad()`), or nothing it reads is trainable, and no tape records."""
    if runtime.TAPE_DEPTH[0]:
        return False
    if not backward.is_grad_enabled():
        return True
    return not (backward.requires_grad(x) if isinstance(x, Tensor) else False) and \
        not any(backward.requires_grad(p) for p in module.parameters())


def _is_mask(value: Any) -> bool:
    return isinstance(value, (Tensor, np.ndarray))


def _pad(x: Any, axis: int, size: int) -> Any:
    """x padded with zeros along `axis` to `size`: on the host for data, in the graph for a
    pending tensor or one that requires grad."""
    if isinstance(x, Tensor) and (not x.is_materialized or x.requires_grad):
        fill = list(x.shape)
        fill[axis] = size - x.shape[axis]
        zeros = api.zeros(tuple(fill), dtype=x.dtype, device=x._state)
        return api.concat([x, zeros], axis=axis)
    host = x.numpy() if isinstance(x, Tensor) else np.asarray(x)
    widths = [(0, 0)] * host.ndim
    widths[axis] = (0, size - host.shape[axis])
    return asarray(np.pad(host, widths), device=x._state if isinstance(x, Tensor) else None)


def _padding_mask(given: Any, shape: tuple, axis: int, length: int, size: int,
                  padded: Any) -> Tensor:
    """(N, size) bool, True at padding; a mask the caller gave keeps its Trues."""
    host = np.zeros((shape[1 - axis], size), bool)     # (N, S) whichever axis is N
    host[:, length:] = True
    if given is not None:
        given = given.numpy() if isinstance(given, Tensor) else np.asarray(given)
        host[:, :length] |= given.astype(bool)
    return asarray(host, device=padded._state)


def _cut(out: Any, axis: int, length: int, size: int, as_data: bool) -> Any:
    """Every tensor in `out` (also in tuples and lists) with `size` along `axis`, sliced
    back to `length`. `as_data` (no gradient can flow): computed at the bucket's shape (its
    program one per bucket) and sliced as data, a graph break (a slice in the graph would
    make every length a program again); else sliced in the graph, so that a backward
    pass reaches the padded forward."""
    if isinstance(out, Tensor):
        if out.ndim <= axis or out.shape[axis] != size:
            return out
        index = (slice(None),) * axis + (slice(0, length),)
        if not as_data:
            return out[index]
        host = host_value("length bucket slice", out)
        return asarray(np.ascontiguousarray(host[index]), device=out._state)
    if type(out) in (tuple, list):
        return type(out)(_cut(o, axis, length, size, as_data) for o in out)
    return out


__all__: list = []      # reached through Module.__call__ with la.config.length_buckets on
