"""Mixed precision: `la.autocast` and `la.amp.GradScaler`, as PyTorch's `torch.autocast`
and `torch.amp.GradScaler`.

Under `with la.autocast("bfloat16"):` matrix products and convolutions run in bfloat16
(accumulating in float32), while reductions, softmax, normalizations and losses widen
their inputs to float32 (the lists are in `lazyarray.ops.autocast`). Gradients flow back
through the conversions, so float32 parameters get float32 gradients. float16 has a narrow
range: scale the loss with a `GradScaler` so that small gradients do not flush to zero.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

from .compiler.hlo import dtypes as D
from .ops import autocast as _policy
from .tensor import Tensor
from . import api

_DEVICE_DEFAULTS = {"cpu": D.bfloat16, "cuda": D.float16}


@contextlib.contextmanager
def autocast(mode: Any = None, dtype: Any = None, enabled: bool = True, *,
             device_type: Optional[str] = None) -> Iterator[None]:
    """Record the block's ops with mixed precision: `la.autocast("bfloat16")`,
    `la.autocast(la.float16)`, or PyTorch's form `la.autocast("cuda", dtype=la.float16)` /
    `la.autocast(device_type="cpu")` (default dtype: bfloat16 on the CPU, float16 on CUDA).
    `enabled=False` turns it off for the block."""
    if isinstance(mode, str) and mode.split(":")[0] in _DEVICE_DEFAULTS:
        device_type = mode
    elif mode is not None:
        if dtype is not None:
            raise TypeError(f"autocast: dtype given twice ({mode!r} and {dtype!r})")
        dtype = mode
    if dtype is None:
        dtype = _DEVICE_DEFAULTS[(device_type or "cpu").split(":")[0]]
    previous = _policy.set_current(D.to_dtype(dtype) if enabled else None)
    try:
        yield
    finally:
        _policy.set_current(previous)


class GradScaler:
    """Loss scaling for float16 training (PyTorch's GradScaler): `scale(loss)` multiplies
    the loss by the current scale; `step(optimizer, grads)` unscales the gradients and
    steps only when all of them are finite; `update()` halves the scale after an overflow
    and doubles it after `growth_interval` clean steps. The scale is a runtime scalar: a
    changing scale does not recompile."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True) -> None:
        if not growth_factor > 1 or not 0 < backoff_factor < 1 or init_scale <= 0:
            raise ValueError("GradScaler: needs init_scale > 0, growth_factor > 1 and "
                             f"0 < backoff_factor < 1, got {init_scale}, {growth_factor}, "
                             f"{backoff_factor}")
        self._scale = float(init_scale)
        self.growth_factor, self.backoff_factor = growth_factor, backoff_factor
        self.growth_interval, self.enabled = int(growth_interval), enabled
        self._clean_steps = 0
        self._found_inf: Optional[bool] = None

    def get_scale(self) -> float:
        return self._scale if self.enabled else 1.0

    def scale(self, loss: Tensor) -> Tensor:
        return loss * self._scale if self.enabled else loss

    def unscale(self, grads: Any) -> list:
        inv = 1.0 / self.get_scale()
        return [None if g is None else g * inv for g in grads]

    def step(self, optimizer: Any, grads: Any = None) -> bool:
        """Unscale and apply `grads` (one per parameter, as `apply_gradients` takes them;
        None: the parameters' `.grad`, PyTorch style). Returns whether the step was taken.
        Checking for overflow reads one flag on the host, as PyTorch's scaler does."""
        torch_style = grads is None
        if torch_style:
            grads = [getattr(p, "grad", None) for p in optimizer.params]
        grads = self.unscale(grads)
        finite = self._all_finite([g for g in grads if g is not None])
        self._found_inf = not finite
        if finite:
            if torch_style:
                for p, g in zip(optimizer.params, grads):
                    p.grad = g
                optimizer.step()
            else:
                optimizer.apply_gradients(grads)
        return finite

    def _all_finite(self, grads: list) -> bool:
        if not self.enabled or not grads:
            return True
        flag = api.all(api.isfinite(grads[0]))
        for g in grads[1:]:
            flag = api.logical_and(flag, api.all(api.isfinite(g)))
        return bool(flag)

    def update(self) -> None:
        if not self.enabled or self._found_inf is None:
            return
        if self._found_inf:
            self._scale *= self.backoff_factor
            self._clean_steps = 0
        else:
            self._clean_steps += 1
            if self._clean_steps >= self.growth_interval:
                self._scale *= self.growth_factor
                self._clean_steps = 0
        self._found_inf = None
