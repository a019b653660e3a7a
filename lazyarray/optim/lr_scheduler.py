"""PyTorch's learning-rate schedulers (`torch.optim.lr_scheduler`): each `step()` sets the
`lr` of every parameter group of its optimizer. The rate enters the next training step's
program as a runtime scalar, so a schedule never recompiles.

(`la.optim.schedules` offers the other form: a callable passed as `lr=`.)
"""
from __future__ import annotations

import math
from typing import Callable, Sequence, Union

from .optimizer import Optimizer


class LRScheduler:
    """Base: `get_lr(epoch, base_lr)` is the closed form of the schedule."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: expected an optimizer, got "
                            f"{type(optimizer).__name__}")
        for g in optimizer.param_groups:
            if callable(g["lr"]):
                raise TypeError(f"{type(self).__name__}: the optimizer's lr is already a "
                                "schedule (a callable); give it a number")
            g.setdefault("initial_lr", g["lr"])
        self.optimizer = optimizer
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def get_lr(self, epoch: int, base_lr: float) -> float:
        raise NotImplementedError

    def step(self) -> None:
        self.last_epoch += 1
        self._last_lr = []
        for g, base in zip(self.optimizer.param_groups, self.base_lrs):
            g["lr"] = self.get_lr(self.last_epoch, base)
            self._last_lr.append(g["lr"])

    def get_last_lr(self) -> list:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"
                and not callable(v)}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


class LambdaLR(LRScheduler):
    """lr = base_lr * lr_lambda(epoch)."""

    def __init__(self, optimizer: Optimizer, lr_lambda: Union[Callable, Sequence[Callable]],
                 last_epoch: int = -1) -> None:
        n = len(optimizer.param_groups)
        self.lr_lambdas = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) \
            else [lr_lambda] * n
        if len(self.lr_lambdas) != n:
            raise ValueError(f"LambdaLR: {len(self.lr_lambdas)} lambdas for {n} groups")
        super().__init__(optimizer, last_epoch)

    def step(self) -> None:
        self.last_epoch += 1
        self._last_lr = []
        for g, base, fn in zip(self.optimizer.param_groups, self.base_lrs, self.lr_lambdas):
            g["lr"] = base * fn(self.last_epoch)
            self._last_lr.append(g["lr"])


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        if step_size < 1:
            raise ValueError(f"StepLR: step_size must be >= 1, got {step_size}")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self, epoch: int, base_lr: float) -> float:
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """lr = base_lr * gamma ** (number of milestones <= epoch)."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self, epoch: int, base_lr: float) -> float:
        return base_lr * self.gamma ** sum(1 for m in self.milestones if m <= epoch)


class ExponentialLR(LRScheduler):
    """lr = base_lr * gamma ** epoch."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self, epoch: int, base_lr: float) -> float:
        return base_lr * self.gamma ** epoch


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self, epoch: int, base_lr: float) -> float:
        return self.eta_min + (base_lr - self.eta_min) * \
            (1 + math.cos(math.pi * epoch / self.T_max)) / 2


class LinearLR(LRScheduler):
    """The factor goes linearly from start_factor to end_factor over total_iters epochs."""

    def __init__(self, optimizer: Optimizer, start_factor: float = 1.0 / 3,
                 end_factor: float = 1.0, total_iters: int = 5, last_epoch: int = -1) -> None:
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1], end_factor in [0, 1]")
        self.start_factor, self.end_factor = start_factor, end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self, epoch: int, base_lr: float) -> float:
        t = min(epoch, self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t)


__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR",
           "CosineAnnealingLR", "LinearLR"]
