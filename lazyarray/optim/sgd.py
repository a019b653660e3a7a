"""Stochastic gradient descent with momentum, Nesterov momentum and weight decay,
following PyTorch's `torch.optim.SGD` update exactly."""
from __future__ import annotations

from typing import Any, Iterable

from .. import ops
from ..compiler.graph.node import Node
from .optimizer import LearningRate, Optimizer


class SGD(Optimizer):
    """g += wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g at the first step);
    p -= lr * (g + momentum * buf if nesterov else buf). Every option may differ per
    parameter group."""

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 maximize: bool = False) -> None:
        super().__init__(params, lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov, maximize=maximize)

    def check_group(self, group: dict) -> None:
        momentum, dampening = group["momentum"], group["dampening"]
        if group["nesterov"] and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        if momentum < 0 or group["weight_decay"] < 0:
            raise ValueError(f"SGD: momentum ({momentum}) and weight_decay "
                             f"({group['weight_decay']}) must be non-negative")

    def state_names_for(self, group: dict) -> tuple:
        return ("momentum_buffer",) if group["momentum"] else ()

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        group = self.group
        g = ops.negative(grad) if group["maximize"] else grad
        if group["weight_decay"]:
            decay = self.scalar("weight_decay", group["weight_decay"], param)
            g = ops.add(g, ops.multiply(param, decay))
        new_state = {}
        if group["momentum"]:
            # PyTorch starts the buffer at g: the first step weighs g by 1, later ones by
            # (1 - dampening); a runtime scalar, so the first step compiles like the rest
            g_weight = 1.0 if self.steps == 1 else 1.0 - group["dampening"]
            momentum = self.scalar("momentum", group["momentum"], param)
            buf = ops.add(ops.multiply(state["momentum_buffer"], momentum),
                          ops.multiply(g, self.scalar("gradient_weight", g_weight, param)))
            new_state["momentum_buffer"] = buf
            g = ops.add(g, ops.multiply(buf, momentum)) if group["nesterov"] else buf
        return ops.subtract(param, ops.multiply(g, self.scalar("lr", lr, param))), new_state
