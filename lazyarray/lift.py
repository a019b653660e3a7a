"""One mechanism turns every function of `lazyarray.ops` (nodes in, nodes out) into a
public function (tensors in, tensors out): it finds the device, checks that all tensors
share it, and wraps the results."""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import numpy as np

from .compiler.node import Node
from . import runtime
from .tensor import Tensor, raise_mixed_devices


def _find_state(values: Any, state: Optional[runtime.DeviceState]) -> Optional[runtime.DeviceState]:
    for v in values:
        if type(v) is Tensor:
            if state is None:
                state = v._state
            elif v._state is not state:
                raise_mixed_devices(v._state, state)
        elif isinstance(v, (list, tuple)):
            state = _find_state(v, state)
    return state


def _unwrap(v: Any, state: runtime.DeviceState) -> Any:
    if type(v) is Tensor:
        return v._node
    if isinstance(v, np.ndarray) or (isinstance(v, np.generic) and not isinstance(v, np.bool_)):
        return Tensor._from_numpy(np.asarray(v), state)._node
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, (list, tuple)) and any(type(e) is Tensor or isinstance(e, np.ndarray) for e in v):
        return type(v)(_unwrap(e, state) for e in v)
    return v


def wrap(v: Any, state: runtime.DeviceState) -> Any:
    if type(v) is Node or isinstance(v, Node):
        return Tensor._wrap(v, state)
    if isinstance(v, (list, tuple)) and any(isinstance(e, Node) for e in v):
        return type(v)(wrap(e, state) for e in v)
    return v


def lift(fn: Callable) -> Callable:
    @functools.wraps(fn)
    def public(*args: Any, device: Any = None, **kwargs: Any) -> Any:
        if device is None and not kwargs and len(args) == 1 and type(args[0]) is Tensor:
            t = args[0]                       # fast path: f(tensor)
            return wrap(fn(t._node), t._state)
        if device is None and not kwargs and len(args) == 2:
            a, b = args                       # fast path: f(tensor, tensor), one device
            if type(a) is Tensor and type(b) is Tensor and a._state is b._state:
                return wrap(fn(a._node, b._node), a._state)
        state = runtime.get_device(device) if device is not None else None
        state = _find_state(args, state)
        state = _find_state(kwargs.values(), state) or runtime.get_device(None)
        args = tuple(_unwrap(a, state) for a in args)
        kwargs = {k: _unwrap(v, state) for k, v in kwargs.items()}
        return wrap(fn(*args, **kwargs), state)
    public.__wrapped_op__ = fn
    return public
