"""Stochastic gradient descent with momentum, Nesterov momentum and weight decay,
following PyTorch's `torch.optim.SGD` update exactly."""
from __future__ import annotations

from typing import Any, Iterable

from .. import ops
from ..compiler.node import Node
from .optimizer import LearningRate, Optimizer


class SGD(Optimizer):
    """g += wd * p; buf = momentum * buf + (1 - dampening) * g (buf = g at the first step);
    p -= lr * (g + momentum * buf if nesterov else buf)."""

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
                 maximize: bool = False) -> None:
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")
        if momentum < 0 or weight_decay < 0:
            raise ValueError(f"SGD: momentum ({momentum}) and weight_decay ({weight_decay}) "
                             "must be non-negative")
        self.state_names = ("momentum_buffer",) if momentum else ()
        self.momentum, self.dampening = momentum, dampening
        self.weight_decay, self.nesterov, self.maximize = weight_decay, nesterov, maximize
        super().__init__(params, lr)

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        g = ops.negative(grad) if self.maximize else grad
        if self.weight_decay:
            decay = self.hyper("weight_decay", self.weight_decay, param)
            g = ops.add(g, ops.multiply(param, decay))
        new_state = {}
        if self.momentum:
            # PyTorch starts the buffer at g: the first step weighs g by 1, later ones by
            # (1 - dampening); a runtime scalar, so the first step compiles like the rest
            g_weight = 1.0 if self.steps == 1 else 1.0 - self.dampening
            momentum = self.hyper("momentum", self.momentum, param)
            buf = ops.add(ops.multiply(state["momentum_buffer"], momentum),
                          ops.multiply(g, self.hyper("gradient_weight", g_weight, param)))
            new_state["momentum_buffer"] = buf
            g = ops.add(g, ops.multiply(buf, momentum)) if self.nesterov \
                else buf
        return ops.subtract(param, ops.multiply(g, self.hyper("lr", lr, param))), new_state
