"""Tensors from data: asarray (NumPy arrays, lists, scalars, tensors) and from_dlpack."""
from __future__ import annotations

from typing import Any

import numpy as np

from .compiler import dtypes as D
from . import runtime
from .tensor import Tensor


def _host_array(obj: Any, dtype: Any) -> np.ndarray:
    if dtype is not None:
        return np.asarray(obj, dtype=D.to_dtype(dtype).np)
    if isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
        arr = np.asarray(obj)
    else:
        arr = np.asarray(obj)
        # Python floats and ints default to float32 and int64, as in PyTorch
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
    if arr.dtype.kind not in "biuf" and arr.dtype != D.bfloat16.np:
        raise TypeError(f"asarray: unsupported element type {arr.dtype} "
                        f"(valid: {', '.join(d.name for d in D.ALL)})")
    return arr


def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: Any = None) -> Tensor:
    """A tensor from a tensor, a NumPy array, a (nested) list or a Python scalar."""
    state = runtime.get_device(device) if device is not None else None
    if type(obj) is Tensor:
        t = obj if dtype is None else obj.astype(dtype)
        return t if state is None or state is t._state else t.to(state)
    if hasattr(obj, "__dlpack__") and not isinstance(obj, np.ndarray):
        obj = np.from_dlpack(obj)
    arr = _host_array(obj, dtype)
    return Tensor._from_numpy(arr, state or runtime.get_device(None))


tensor = asarray


def from_dlpack(x: Any, device: Any = None) -> Tensor:
    """A tensor from any DLPack exporter (NumPy, PyTorch). On the CPU devices the buffer is
    shared, not copied."""
    arr = np.from_dlpack(x)
    state = runtime.get_device(device)
    if hasattr(state.device, "wrap_host"):
        buf = state.device.wrap_host(arr)
        from .compiler.node import parameter_leaf
        return Tensor._wrap(parameter_leaf(buf, tuple(arr.shape), D.from_numpy(arr.dtype)), state)
    return Tensor._from_numpy(arr, state)
