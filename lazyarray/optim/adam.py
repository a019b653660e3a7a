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
        super().__init__(params, lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                         maximize=maximize)

    def check_group(self, group: dict) -> None:
        (b1, b2), eps, wd = group["betas"], group["eps"], group["weight_decay"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0) or eps < 0 or wd < 0:
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), eps and "
                             f"weight_decay non-negative; got betas={group['betas']}, "
                             f"eps={eps}, weight_decay={wd}")

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        group = self.group
        b1, b2 = group["betas"]
        t = self.steps
        wd, eps = group["weight_decay"], group["eps"]
        g = ops.negative(grad) if group["maximize"] else grad
        if wd and self.decoupled:
            shrink = self.scalar("decay", 1.0 - lr * wd, param)
            param = ops.multiply(param, shrink)
        elif wd:
            decay = self.scalar("weight_decay", wd, param)
            g = ops.add(g, ops.multiply(param, decay))
        m = ops.add(ops.multiply(state["exp_avg"], self.scalar("beta1", b1, param)),
                    ops.multiply(g, self.scalar("1-beta1", 1.0 - b1, param)))
        v = ops.add(ops.multiply(state["exp_avg_sq"], self.scalar("beta2", b2, param)),
                    ops.multiply(ops.square(g), self.scalar("1-beta2", 1.0 - b2, param)))
        step_size = lr / (1.0 - b1 ** t)
        inv_bc2 = 1.0 / math.sqrt(1.0 - b2 ** t)
        denom = ops.add(ops.multiply(ops.sqrt(v), self.scalar("1/sqrt(bc2)", inv_bc2, param)),
                        self.scalar("eps", eps, param))
        step = self.scalar("lr/bc1", step_size, param)
        new = ops.subtract(param, ops.multiply(ops.divide(m, denom), step))
        return new, {"exp_avg": m, "exp_avg_sq": v}


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, maximize)
