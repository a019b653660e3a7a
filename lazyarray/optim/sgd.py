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
            momentum = self.scalar("momentum", group["momentum"], param)
            buf = ops.add(ops.multiply(state["momentum_buffer"], momentum),
                          ops.multiply(g, self.scalar("gradient_weight",
                                                      self._gradient_weight(), param)))
            new_state["momentum_buffer"] = buf
            g = ops.add(g, ops.multiply(buf, momentum)) if group["nesterov"] else buf
        return ops.subtract(param, ops.multiply(g, self.scalar("lr", lr, param))), new_state

    def _gradient_weight(self) -> float:
        # PyTorch starts the buffer at g: the first step weighs g by 1, later ones by
        # (1 - dampening); a runtime scalar, so the first step compiles like the rest
        return 1.0 if self.steps == 1 else 1.0 - self.group["dampening"]

    def step_scalars(self, pairs: list, group_of: list, lrs: list) -> "tuple | None":
        """This step's runtime scalars of each (group, dtype) in the pairs' order -- the
        ones `update` takes from `Hypers`, made here first so that the update reads these
        same nodes -- and each group's flags that shape the graph: all the update reads
        besides the types, so a training loop copies the first step's update graph
        (Optimizer._copied_step). None for a subclass with an update of its own."""
        if type(self).update is not SGD.update:
            return None
        leaves: list = []
        flags: list = []
        hyper = self.hyper
        for gi, dtype, group in self._group_dtypes(pairs, group_of):
            roles = [("lr", lrs[gi])]
            if group["weight_decay"]:
                roles.append(("weight_decay", group["weight_decay"]))
            if group["momentum"]:
                roles += [("momentum", group["momentum"]),
                          ("gradient_weight", self._gradient_weight())]
            suffix = f"#{gi}" if gi else ""
            leaves.extend(hyper.leaf(role + suffix, float(value), dtype)
                          for role, value in roles)
            flags.append((gi, dtype, bool(group["maximize"]), bool(group["weight_decay"]),
                          bool(group["momentum"]), bool(group["nesterov"])))
        return tuple(leaves), tuple(flags)
