"""Creation and random functions with PyTorch's signatures (sizes as separate arguments
or one sequence; `dtype=`, `device=`, `requires_grad=`), over lazyarray's."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

import lazyarray as _la
from lazyarray import random as _random
from lazyarray.creation import shape_args as _shape_args
from lazyarray.sampling import multinomial  # noqa: F401
from lazyarray.tensor import Tensor

_SEED = [0]


def _size(size: tuple) -> tuple:
    return tuple(_shape_args(size))


def _grad(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_(True) if requires_grad else t


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
           pin_memory: bool = False) -> Tensor:
    """A copy of `data` (Python floats become float32, ints int64, as in PyTorch)."""
    if type(data) is Tensor:
        data = data.detach()
    return _la.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    return _la.asarray(data, dtype=dtype, device=device)


from_numpy = _la.from_numpy


def _filled(name: str) -> Any:
    fn = getattr(_la, name)

    def create(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
               out: Any = None, layout: Any = None, pin_memory: bool = False) -> Tensor:
        if out is not None:
            raise TypeError(f"{name}: out= is not supported (assign the result)")
        return _grad(fn(_size(size), dtype=dtype, device=device), requires_grad)
    create.__name__ = name
    create.__doc__ = f"torch.{name}(*size, dtype=None, device=None, requires_grad=False)"
    return create


zeros, ones, empty = _filled("zeros"), _filled("ones"), _filled("empty")


def full(size: Any, fill_value: Any, *, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    return _grad(_la.full(tuple(size) if not isinstance(size, int) else (size,), fill_value,
                          dtype=dtype, device=device), requires_grad)


def _like(name: str) -> Any:
    fn = getattr(_la, name)

    def create(input: Tensor, *args: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False, memory_format: Any = None) -> Tensor:
        return _grad(fn(input, *args, dtype=dtype, device=device), requires_grad)
    create.__name__ = name
    return create


zeros_like, ones_like = _like("zeros_like"), _like("ones_like")
empty_like, full_like = _like("empty_like"), _like("full_like")


def arange(start: Any, end: Any = None, step: Any = 1, *, dtype: Any = None,
           device: Any = None, requires_grad: bool = False) -> Tensor:
    return _grad(_la.arange(start, end, step, dtype=dtype, device=device), requires_grad)


def linspace(start: Any, end: Any, steps: int, *, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    return _grad(_la.linspace(start, end, steps, dtype=dtype, device=device), requires_grad)


def eye(n: int, m: Optional[int] = None, *, dtype: Any = None, device: Any = None,
        requires_grad: bool = False) -> Tensor:
    return _grad(_la.eye(n, m, dtype=dtype, device=device), requires_grad)


def rand(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
         generator: Any = None) -> Tensor:
    _no_generator("rand", generator)
    return _grad(_random.rand(*_size(size), dtype=dtype, device=device), requires_grad)


def randn(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False,
          generator: Any = None) -> Tensor:
    _no_generator("randn", generator)
    return _grad(_random.randn(*_size(size), dtype=dtype, device=device), requires_grad)


def randint(*args: Any, size: Any = None, dtype: Any = None, device: Any = None,
            requires_grad: bool = False, generator: Any = None) -> Tensor:
    """randint(high, size) or randint(low, high, size): int64 in [low, high)."""
    _no_generator("randint", generator)
    if size is None:
        *bounds, size = args
    else:
        bounds = list(args)
    low, high = (0, bounds[0]) if len(bounds) == 1 else bounds
    return _random.randint(low, high, tuple(size), dtype=dtype or _la.int64, device=device)


def rand_like(input: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    return rand(*input.shape, dtype=dtype or input.dtype, device=device or input.device)


def randn_like(input: Tensor, *, dtype: Any = None, device: Any = None) -> Tensor:
    return randn(*input.shape, dtype=dtype or input.dtype, device=device or input.device)


def randint_like(input: Tensor, low: int = 0, high: Optional[int] = None, *,
                 dtype: Any = None, device: Any = None) -> Tensor:
    if high is None:
        low, high = 0, low
    out = _random.randint(low, high, input.shape, device=device or input.device)
    return out.astype(dtype or input.dtype)


def randperm(n: int, *, dtype: Any = None, device: Any = None,
             generator: Any = None) -> Tensor:
    _no_generator("randperm", generator)
    return _la.randperm(n, dtype=dtype, device=device)


def normal(mean: Any = 0.0, std: Any = 1.0, size: Any = None, *, generator: Any = None,
           dtype: Any = None, device: Any = None) -> Tensor:
    """normal(mean, std, size) with floats, or tensors of means and stds (their shape)."""
    _no_generator("normal", generator)
    if size is not None:
        return _random.normal(tuple(size), float(mean), float(std), dtype=dtype,
                              device=device)
    like = mean if type(mean) is Tensor else std
    if type(like) is not Tensor:
        raise TypeError("normal: give size= for float mean and std")
    return mean + std * _random.randn(*like.shape, dtype=like.dtype, device=like.device)


def bernoulli(input: Tensor, p: Any = None, *, generator: Any = None) -> Tensor:
    """0/1 draws (input's dtype) with the probabilities in `input` (or `p`)."""
    _no_generator("bernoulli", generator)
    probs = input if p is None else _la.full_like(input, p)
    return _random.bernoulli(probs).astype(input.dtype)


def _no_generator(name: str, generator: Any) -> None:
    if generator is not None:
        raise TypeError(f"{name}: generator= is not supported: lazyarray has one generator "
                        "per device (seed it with torch.manual_seed)")


def manual_seed(seed: int) -> None:
    """Seed every device's generator (the numbers differ from PyTorch's for a seed)."""
    _SEED[0] = int(seed)
    _la.manual_seed(int(seed))


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2 ** 63))
    manual_seed(s)
    return s


def initial_seed() -> int:
    return _SEED[0]
