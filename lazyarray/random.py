"""`la.random`: seeded random tensors whose key is a device tensor advanced lazily.

Each device has one key tensor (uint32[2]). A call splits the key inside the graph: the
new key is rebound to the same tensor (still pending) and the call's numbers come from the
other half of the split. So a training step that draws dropout masks records the same
graph every step, and the key is just one more output of the step's program: it compiles
once. The generator (`lazyarray.ops.random`, Threefry-2x32) is integer HLO, so one seed
gives the same numbers on every device.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .compiler import dtypes as D
from .ops import random as _gen
from . import runtime
from .tensor import Tensor

DEFAULT_SEED = 0

_seed = [DEFAULT_SEED]
_keys: dict = {}          # DeviceState -> Tensor holding that device's key


def seed(value: int) -> None:
    """Restart every device's generator from `value` (any int; 64 bits are used)."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"seed: needs an int, got {type(value).__name__}")
    _seed[0] = int(value) & 0xFFFFFFFFFFFFFFFF
    _keys.clear()


manual_seed = seed


def key_words(value: int) -> np.ndarray:
    """The uint32[2] key a seed stands for."""
    value &= 0xFFFFFFFFFFFFFFFF
    return np.array([value >> 32, value & 0xFFFFFFFF], np.uint32)


def key(device: Any = None) -> Tensor:
    """The generator's key tensor on `device` (the default device if None)."""
    state = runtime.get_device(device)
    t = _keys.get(state)
    if t is None:
        t = _keys[state] = Tensor._from_numpy(key_words(_seed[0]), state)
    return t


def _next_key(device: Any) -> tuple:
    """Advance the device's key in the graph; return (the key for this call, the state)."""
    k = key(device)
    new, sub = _gen.split(k._node)
    k._assign(new)
    return sub, k._state


def _shape(shape: Any) -> tuple:
    if shape is None:
        return ()
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"random: negative dimensions are not allowed, got shape {shape}")
    return shape


def rand(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Uniform on [0, 1) (PyTorch's spelling: sizes as separate arguments)."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    return uniform(shape, dtype=dtype, device=device)


def randn(*shape: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """Standard normal (PyTorch's spelling)."""
    if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
        shape = shape[0]
    return normal(shape, dtype=dtype, device=device)


def uniform(shape: Any = (), low: float = 0.0, high: float = 1.0, dtype: Any = None,
            device: Any = None) -> Tensor:
    """Uniform on [low, high)."""
    sub, state = _next_key(device)
    return Tensor._wrap(_gen.uniform(sub, _shape(shape), float(low), float(high), dtype), state)


def normal(shape: Any = (), mean: float = 0.0, std: float = 1.0, dtype: Any = None,
           device: Any = None) -> Tensor:
    """Normal with `mean` and standard deviation `std`."""
    sub, state = _next_key(device)
    return Tensor._wrap(_gen.normal(sub, _shape(shape), float(mean), float(std), dtype), state)


def randint(low: int, high: Optional[int] = None, shape: Any = (), dtype: Any = None,
            device: Any = None) -> Tensor:
    """Integers in [low, high) (or [0, low) when high is None)."""
    if high is None:
        low, high = 0, low
    sub, state = _next_key(device)
    return Tensor._wrap(_gen.randint(sub, _shape(shape), low, high, dtype), state)


def bernoulli(p: Any = 0.5, shape: Any = None, device: Any = None) -> Tensor:
    """Bools, True with probability `p` (a float, or a tensor of probabilities)."""
    if type(p) is Tensor:
        sub, state = _next_key(p._state)
        return Tensor._wrap(_gen.bernoulli(sub, p._node, p.shape if shape is None
                                           else _shape(shape)), state)
    sub, state = _next_key(device)
    return Tensor._wrap(_gen.bernoulli(sub, float(p), _shape(shape)), state)


def permutation(x: Any, device: Any = None) -> Tensor:
    """A random permutation of range(x) for an int, or of a tensor's first axis."""
    if type(x) is Tensor:
        sub, state = _next_key(x._state)
        order = _gen.permutation(sub, x.shape[0])
        from .compiler.primitive import apply
        return Tensor._wrap(apply("gather", x._node, order, axis=0), state)
    sub, state = _next_key(device)
    return Tensor._wrap(_gen.permutation(sub, int(x)), state)


def bits(shape: Any = (), device: Any = None) -> Tensor:
    """Raw uint32 random bits (what dropout consumes)."""
    sub, state = _next_key(device)
    return Tensor._wrap(_gen.bits(sub, _shape(shape)), state)


def next_bits_node(state: runtime.DeviceState, shape: tuple) -> Any:
    """For layers: a uint32 node of random bits drawn from `state`'s key."""
    sub, _ = _next_key(state)
    return _gen.bits(sub, tuple(shape))


__all__ = ["seed", "manual_seed", "key", "rand", "randn", "uniform", "normal", "randint",
           "bernoulli", "permutation", "bits"]
