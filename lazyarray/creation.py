"""Tensors from data: asarray (NumPy arrays, lists, scalars, tensors, DLPack exporters),
from_dlpack, and PyTorch's spellings of the creation functions (`zeros(3, 4)`,
`requires_grad=`).

Sharing. `asarray(array)` with `copy=None` (the default) or `copy=False` uses a NumPy
array's memory as the tensor's buffer when it can (a C-contiguous array of a supported
dtype, on the CPU devices), as `torch.from_numpy` does; `from_dlpack` shares the same way.
lazyarray never writes into such a buffer (it is never donated to a program), and ops
recorded on the tensor read the memory when they run, at the next sync: a write to the
array made before that sync is seen by them. Pass `copy=True` to take a snapshot.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

import numpy as np

from .compiler.hlo import dtypes as D
from .compiler.graph.node import parameter_leaf
from . import dlpack, runtime
from .tensor import Tensor, host_array


def _share(arr: np.ndarray, state: runtime.DeviceState) -> Optional[Tensor]:
    """A tensor on `arr`'s own memory, or None when the device cannot use host memory."""
    if not hasattr(state.device, "wrap_host") or not arr.flags.c_contiguous:
        return None
    view = arr.view()                   # a read-only view: lazyarray never writes the memory
    view.setflags(write=False)
    buf = state.device.wrap_host(view)
    return Tensor._wrap(parameter_leaf(buf, tuple(arr.shape), D.from_numpy(arr.dtype)), state)


def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: Optional[bool] = None,
            requires_grad: bool = False) -> Tensor:
    """A tensor from a tensor, a NumPy array, a DLPack exporter, a (nested) list or a
    Python scalar. `copy`: True always copies; None shares a NumPy array's memory when it
    can; False shares or raises (array API)."""
    state = runtime.get_device(device) if device is not None else None
    if type(obj) is Tensor:
        t = _from_tensor(obj, dtype, state, copy)
    else:
        t = _from_host(obj, dtype, state or runtime.get_device(None), copy)
    if requires_grad:
        t.requires_grad_(True)
    return t


def _from_tensor(t: Tensor, dtype: Any, state: Any, copy: Optional[bool]) -> Tensor:
    moves = state is not None and state is not t._state
    casts = dtype is not None and D.to_dtype(dtype) is not t.dtype
    if copy is False and (moves or casts):
        raise ValueError("asarray(copy=False): the tensor would need a copy to change "
                         f"{'its device' if moves else 'its dtype'}")
    out = t.to(device=state, dtype=dtype if casts else None)
    # a tensor never shares updates with another (they are functional): a new handle on
    # the same value is a copy
    return Tensor._wrap(out._node, out._state) if copy and out is t else out


def _from_host(obj: Any, dtype: Any, state: runtime.DeviceState, copy: Optional[bool]) -> Tensor:
    if hasattr(obj, "__dlpack__") and not isinstance(obj, (np.ndarray, np.generic)):
        obj = dlpack.to_numpy(obj)
    if isinstance(obj, np.ndarray) and not copy:
        arr = host_array(obj, dtype)
        shared = _share(arr, state) if arr is obj else None
        if shared is not None:
            return shared
    if copy is False:
        raise ValueError(f"asarray(copy=False): a {type(obj).__name__} cannot be shared "
                         "without a copy (it is not a C-contiguous NumPy array of the "
                         "requested dtype on a CPU device); pass copy=None or copy=True")
    return Tensor._from_numpy(host_array(obj, dtype), state)


def tensor(data: Any, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (PyTorch's `torch.tensor`)."""
    return asarray(data, dtype=dtype, device=device, copy=True, requires_grad=requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing `array`'s memory (PyTorch's `torch.from_numpy`; see `asarray`)."""
    return asarray(array, copy=False)


def from_dlpack(x: Any, device: Any = None, copy: Optional[bool] = None) -> Tensor:
    """A tensor from any DLPack exporter (NumPy, PyTorch), bfloat16 included. On the CPU
    devices the buffer is shared (see `asarray`), unless `copy=True`."""
    arr = dlpack.to_numpy(x, copy=copy)
    state = runtime.get_device(device)
    shared = _share(arr, state)
    return shared if shared is not None else Tensor._from_numpy(arr, state)


# ---- PyTorch's spellings of the creation functions ---------------------------------------

def shape_args(shape: tuple) -> tuple:
    """`f(3, 4)` or `f((3, 4))` or `f([3, 4])` -> (3, 4)."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def sized(fn: Callable) -> Callable:
    """A lifted creation function taking the shape first, as the array API does
    (`zeros((3, 4))`), or as separate sizes, as PyTorch does (`zeros(3, 4)`), and
    `requires_grad=`."""
    @functools.wraps(fn)
    def create(*shape: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False, **kwargs: Any) -> Tensor:
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        elif "shape" in kwargs:
            shape = kwargs.pop("shape")
        t = fn(tuple(shape) if isinstance(shape, (list, tuple)) else shape, dtype=dtype,
               device=device, **kwargs)
        return t.requires_grad_(True) if requires_grad else t
    return create


def grad_option(fn: Callable) -> Callable:
    """A lifted function that also takes PyTorch's `requires_grad=`."""
    @functools.wraps(fn)
    def create(*args: Any, requires_grad: bool = False, **kwargs: Any) -> Tensor:
        t = fn(*args, **kwargs)
        return t.requires_grad_(True) if requires_grad else t
    return create


# ---- device= in the signatures (the array API's creation functions, astype, fftfreq) ----

def show_device_keyword(fn: Callable, requires_grad: bool = False) -> Callable:
    """Make `fn`'s signature (its op's, through `__wrapped__`) list the keywords it takes
    besides the op's: `device=` (every lifted function takes it) and, for the creation
    functions, PyTorch's `requires_grad=`. The array API's conformance suite reads it."""
    sig = inspect.signature(fn)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    extra = [("device", None)] + ([("requires_grad", False)] if requires_grad else [])
    for name, default in extra:
        if name not in sig.parameters:
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    fn.__signature__ = sig.replace(parameters=params)
    return fn


def like_on_device(fn: Callable, empty: Callable) -> Callable:
    """A *_like function whose `device=` may differ from x's: only x's shape and dtype are
    read, so x is replaced by an uninitialized tensor of them on that device (no copy)."""
    @functools.wraps(fn)
    def create(x: Any, *args: Any, device: Any = None, **kwargs: Any) -> Tensor:
        if device is not None and type(x) is Tensor and x._state is not runtime.get_device(device):
            x = empty(x.shape, dtype=x.dtype, device=device)
        return fn(x, *args, device=device, **kwargs)
    return create


def astype_on_device(lifted_astype: Callable) -> Callable:
    """astype(x, dtype, *, copy=True, device=None): the converted tensor, moved to
    `device` when given (the array API's signature). `copy` changes nothing (a converted
    lazy value never shares memory), so the call stays on lift's two-operand fast path."""
    @functools.wraps(lifted_astype)
    def astype(x: Any, dtype: Any, *, copy: bool = True, device: Any = None) -> Tensor:
        t = lifted_astype(x, dtype)
        return t if device is None else t.to(device)
    del astype.__wrapped__              # its own signature is the one to show
    return astype
