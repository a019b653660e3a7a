"""What NumPy's own functions do with tensors (`np.sum(t)`, `np.std(t, ddof=1)`, ...).

A NumPy function computes with NumPy, as it does for any array-like (a list, a memoryview):
each tensor among its arguments is read as the array it holds (a sync, as `np.asarray(t)`),
and the result is NumPy's (an ndarray or a NumPy scalar), every keyword (`axis`, `dtype`,
`keepdims`, `out`, `ddof`, ...) meaning what it means in NumPy. This is the behaviour
NumPy's ufuncs already have with tensors (`np.exp(t)` goes through `__array__`), so
`np.sum(t)` and `np.add(t, 1)` agree. Code that should stay lazy calls lazyarray's
functions (`la.sum(t)`) or the operators (`array + t` is a tensor: `__array_priority__`).

Without `__array_function__` NumPy would call the tensor's methods with NumPy's keywords
(`t.sum(axis=None, dtype=None, out=None)`), whose meanings are lazyarray's: that raised.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

# functions of a tensor's metadata: answered without reading (syncing) its value
_METADATA: dict = {np.shape: lambda t: tuple(t.shape), np.ndim: lambda t: len(t.shape),
                   np.size: lambda t: math.prod(t.shape)}


def _host(value: Any, tensor_type: type) -> Any:
    """value with each tensor in it (also inside lists, tuples and dicts) as an ndarray."""
    if type(value) is tensor_type:
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        converted = [_host(v, tensor_type) for v in value]
        return type(value)(converted) if type(value) in (list, tuple) else value
    if isinstance(value, dict):
        return {k: _host(v, tensor_type) for k, v in value.items()}
    return value


def _refuse_tensor_out(func: Callable, out: Any, tensor_type: type) -> None:
    outs = out if isinstance(out, tuple) else (out,)
    if any(type(o) is tensor_type for o in outs):
        raise TypeError(f"np.{func.__name__}(..., out=<Tensor>): NumPy's functions write into "
                        "NumPy arrays, and a tensor's value is not host memory NumPy may "
                        "write; pass a NumPy array as out, or call la."
                        f"{func.__name__} to stay lazy")


def call(func: Callable, args: tuple, kwargs: dict, tensor_type: type) -> Any:
    """`func(*args, **kwargs)` with tensors read as their arrays; NumPy's result."""
    if func in _METADATA and len(args) == 1 and not kwargs and type(args[0]) is tensor_type:
        return _METADATA[func](args[0])
    if "out" in kwargs:
        _refuse_tensor_out(func, kwargs["out"], tensor_type)
    return func(*_host(args, tensor_type), **_host(kwargs, tensor_type))


__all__: list = []      # reached through Tensor.__array_function__
