"""Adam and AdamW, following PyTorch's update formulas (no amsgrad)."""
from __future__ import annotations

import math
from typing import Any, Iterable

from .. import ops
from ..compiler.node import Node
from .optimizer import LearningRate, Optimizer


class Adam(Optimizer):
    """m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    `weight_decay` adds wd * p to g (L2, as torch.optim.Adam)."""

    state_names = ("exp_avg", "exp_avg_sq")
    decoupled = False

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 maximize: bool = False) -> None:
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0) or eps < 0 or weight_decay < 0:
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), eps and "
                             f"weight_decay non-negative; got betas={betas}, eps={eps}, "
                             f"weight_decay={weight_decay}")
        self.betas, self.eps = (b1, b2), eps
        self.weight_decay, self.maximize = weight_decay, maximize
        super().__init__(params, lr)

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        b1, b2 = self.betas
        t = self.steps
        g = ops.negative(grad) if self.maximize else grad
        if self.weight_decay and self.decoupled:
            shrink = self.hyper("decay", 1.0 - lr * self.weight_decay, param)
            param = ops.multiply(param, shrink)
        elif self.weight_decay:
            decay = self.hyper("weight_decay", self.weight_decay, param)
            g = ops.add(g, ops.multiply(param, decay))
        m = ops.add(ops.multiply(state["exp_avg"], self.hyper("beta1", b1, param)),
                    ops.multiply(g, self.hyper("1-beta1", 1.0 - b1, param)))
        v = ops.add(ops.multiply(state["exp_avg_sq"], self.hyper("beta2", b2, param)),
                    ops.multiply(ops.square(g), self.hyper("1-beta2", 1.0 - b2, param)))
        step_size = lr / (1.0 - b1 ** t)
        inv_bc2 = 1.0 / math.sqrt(1.0 - b2 ** t)
        denom = ops.add(ops.multiply(ops.sqrt(v), self.hyper("1/sqrt(bc2)", inv_bc2, param)),
                        self.hyper("eps", self.eps, param))
        step = self.hyper("lr/bc1", step_size, param)
        new = ops.subtract(param, ops.multiply(ops.divide(m, denom), step))
        return new, {"exp_avg": m, "exp_avg_sq": v}


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, maximize)
