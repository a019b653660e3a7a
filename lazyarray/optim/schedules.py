"""Learning-rate schedules: callables from the step index (0 for the first step) to a
rate. Pass one as `lr=`; the value enters each step's program as a runtime scalar."""
from __future__ import annotations

import math
from typing import Callable


def constant(lr: float) -> Callable[[int], float]:
    return lambda step: lr


def step_decay(lr: float, every: int, factor: float = 0.1) -> Callable[[int], float]:
    """lr * factor ** (step // every)."""
    def schedule(step: int) -> float:
        return lr * factor ** (step // every)
    return schedule


def cosine(lr: float, total_steps: int, warmup: int = 0,
           final: float = 0.0) -> Callable[[int], float]:
    """Linear warm-up from 0 over `warmup` steps, then cosine decay to `final`."""
    def schedule(step: int) -> float:
        if step < warmup:
            return lr * step / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return final + 0.5 * (lr - final) * (1 + math.cos(math.pi * progress))
    return schedule
