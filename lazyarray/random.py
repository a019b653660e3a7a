"""`la.random`: seeded random tensors whose key is a device tensor advanced lazily.

Each device has one generator state tensor (uint32[3]: a Threefry key and a call
counter). A call reads stream `counter` of the key and advances the counter inside the
graph: the advanced state is rebound to the same tensor (still pending). So a training step
that draws dropout masks records the same graph every step, and the state is one more
output of the step's program: it compiles once. Call n after a seed reads stream n whether
or not syncs happened in between. The generator (`lazyarray.ops.random`, Threefry-2x32) is
integer HLO, so one seed gives the same numbers on every device.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from .compiler.primitive import apply
from .ops import checks
from .ops import random as _gen
from . import runtime
from .tensor import Tensor

DEFAULT_SEED = 0

_seed = [DEFAULT_SEED]
_states: dict = {}          # DeviceState -> Tensor holding that device's generator state


def seed(value: int) -> None:
    """Restart every device's generator from `value` (any int; 64 bits are used)."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TypeError(f"seed: needs an int, got {type(value).__name__}")
    _seed[0] = int(value) & 0xFFFFFFFFFFFFFFFF
    _states.clear()


manual_seed = seed


def state_words(value: int) -> np.ndarray:
    """The generator state a seed stands for: its Threefry key words and call counter 0."""
    value &= 0xFFFFFFFFFFFFFFFF
    return np.array([value >> 32, value & 0xFFFFFFFF, 0], np.uint32)


def key(device: Any = None) -> Tensor:
    """The generator state tensor of `device` (uint32[3]: key words, call counter)."""
    state = runtime.get_device(device)
    t = _states.get(state)
    if t is None:
        t = _states[state] = Tensor._from_numpy(state_words(_seed[0]), state)
    return t


def _next_key(device: Any) -> tuple:
    """Advance the device's generator by one call in the graph; return (key, counter) for
    this call and the device state."""
    t = key(device)
    k, counter, advanced = _gen.advance(t._node)
    t._assign(advanced)
    return (k, counter), t._state


def _shape(shape: Any) -> tuple:
    if shape is None:
        return ()
    return checks.shape("random", shape)


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
    (k, n), state = _next_key(device)
    return Tensor._wrap(_gen.uniform(k, _shape(shape), float(low), float(high), dtype,
                                     n), state)


def normal(shape: Any = (), mean: float = 0.0, std: float = 1.0, dtype: Any = None,
           device: Any = None) -> Tensor:
    """Normal with `mean` and standard deviation `std`."""
    (k, n), state = _next_key(device)
    return Tensor._wrap(_gen.normal(k, _shape(shape), float(mean), float(std), dtype,
                                    n), state)


def randint(low: int, high: Optional[int] = None, shape: Any = (), dtype: Any = None,
            device: Any = None) -> Tensor:
    """Integers in [low, high) (or [0, low) when high is None)."""
    if high is None:
        low, high = 0, low
    (k, n), state = _next_key(device)
    return Tensor._wrap(_gen.randint(k, _shape(shape), low, high, dtype, n), state)


def bernoulli(p: Any = 0.5, shape: Any = None, device: Any = None) -> Tensor:
    """Bools, True with probability `p` (a float, or a tensor of probabilities)."""
    if type(p) is Tensor:
        (k, n), state = _next_key(p._state)
        size = p.shape if shape is None else _shape(shape)
        return Tensor._wrap(_gen.bernoulli(k, p._node, size, n), state)
    (k, n), state = _next_key(device)
    return Tensor._wrap(_gen.bernoulli(k, float(p), _shape(shape), n), state)


def permutation(x: Any, device: Any = None) -> Tensor:
    """A random permutation of range(x) for an int, or of a tensor's first axis."""
    if type(x) is Tensor:
        (k, n), state = _next_key(x._state)
        order = _gen.permutation(k, x.shape[0], n)
        return Tensor._wrap(apply("gather", x._node, order, axis=0), state)
    (k, n), state = _next_key(device)
    return Tensor._wrap(_gen.permutation(k, int(x), n), state)


def bits(shape: Any = (), device: Any = None) -> Tensor:
    """Raw uint32 random bits (what dropout consumes)."""
    (k, n), state = _next_key(device)
    return Tensor._wrap(_gen.bits(k, _shape(shape), n), state)


def next_bits_node(state: runtime.DeviceState, shape: tuple) -> Any:
    """For layers: a uint32 node of random bits drawn from `state`'s key."""
    (k, n), _ = _next_key(state)
    return _gen.bits(k, tuple(shape), n)


__all__ = ["seed", "manual_seed", "key", "rand", "randn", "uniform", "normal", "randint",
           "bernoulli", "permutation", "bits"]
