"""Adam and AdamW, following PyTorch's update formulas (no amsgrad)."""
from __future__ import annotations

import math
from typing import Any, Iterable

from ..compiler.node import Node
from .optimizer import LearningRate, Optimizer
from .same_type import recorder


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
        m0, v0 = state["exp_avg"], state["exp_avg_sq"]
        E = recorder(param, grad, m0, v0)
        wd = group["weight_decay"]
        g = E.negative(grad) if group["maximize"] else grad
        if wd and self.decoupled:
            param = E.multiply(param, self.scalar("decay", 1.0 - lr * wd, param))
        elif wd:
            g = E.add(g, E.multiply(param, self.scalar("weight_decay", wd, param)))
        b1, omb1, b2, omb2, inv_bc2, eps, step = self._scalars(param, lr)
        m = E.add(E.multiply(m0, b1), E.multiply(g, omb1))
        v = E.add(E.multiply(v0, b2), E.multiply(E.square(g), omb2))
        denom = E.add(E.multiply(E.sqrt(v), inv_bc2), eps)
        new = E.subtract(param, E.multiply(E.divide(m, denom), step))
        return new, {"exp_avg": m, "exp_avg_sq": v}

    def _scalars(self, like: Node, lr: float) -> tuple:
        """This step's runtime scalars broadcast to `like`: b1, 1-b1, b2, 1-b2,
        1/sqrt(1-b2^t), eps, lr/(1-b1^t); made once per (group, shape, dtype) in a step."""
        key = (self._gi, like.shape, like.dtype)
        per_shape = self.hyper.per_shape
        found = per_shape.get(key)
        if found is None:
            b1, b2 = self.group["betas"]
            t = self.steps
            found = per_shape[key] = self.scalars(
                _ROLES, (b1, 1.0 - b1, b2, 1.0 - b2, 1.0 / math.sqrt(1.0 - b2 ** t),
                         self.group["eps"], lr / (1.0 - b1 ** t)), like)
        return found


_ROLES = ("beta1", "1-beta1", "beta2", "1-beta2", "1/sqrt(bc2)", "eps", "lr/bc1")


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, maximize)
