"""The optimizer base: parameters, per-parameter state, the learning rate, and
`apply_gradients`.

An update is a lazy expression over nodes: nothing runs until the next sync, when the
forward pass, the backward pass and every parameter's update are one program. Parameters
and state are rebound in place (`Tensor._assign`), so the tensors a model holds keep their
identity. Every hyper-parameter that may change between steps (the learning rate, Adam's
bias corrections) enters the graph as a runtime scalar parameter, never as a constant, so a
schedule never causes a recompile, not even when it passes through 0 or 1.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Union

import numpy as np

from ..compiler.node import Node, scalar_leaf
from ..compiler.primitive import apply
from .. import runtime
from ..tensor import Tensor

LearningRate = Union[float, Callable[[int], float]]


def hyper(value: float, like: Node) -> Node:
    """A runtime scalar of `like`'s dtype: data, not structure (no recompile when it changes)."""
    return scalar_leaf(float(value), like.dtype)


class Hypers:
    """The runtime scalars of one step, one per (role, dtype) and shared by every parameter:
    a step's program takes a handful of scalar inputs, not several per parameter. Shared by
    role, never by value, so the program's structure cannot depend on two values happening
    to be equal."""

    def __init__(self) -> None:
        self.made: dict = {}
        self.spread: dict = {}

    def __call__(self, role: str, value: float, like: Node) -> Node:
        """The scalar, already broadcast to `like`'s shape: the update's elementwise ops
        then take the cheap equal-shapes path, and parameters of one shape share it."""
        key = (role, like.dtype)
        node = self.made.get(key)
        if node is None:
            node = self.made[key] = hyper(value, like)
        elif node.value != float(value):
            raise ValueError(f"optimizer: hyper-parameter {role!r} has two values in one step "
                             f"({node.value} and {value})")
        if not like.shape:
            return node
        wide = self.spread.get((key, like.shape))
        if wide is None:
            wide = self.spread[(key, like.shape)] = apply(
                "broadcast_in_dim", node, shape=like.shape, broadcast_dimensions=())
        return wide


class Optimizer:
    """Holds parameters (Tensors) and their state; subclasses define `update`."""

    state_names: tuple = ()

    def __init__(self, params: Iterable[Tensor], lr: LearningRate) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        for i, p in enumerate(self.params):
            if type(p) is not Tensor or not p.dtype.is_float:
                raise TypeError(f"{type(self).__name__}: parameter {i} must be a floating-point "
                                f"Tensor, got {getattr(p, 'dtype', type(p).__name__)}")
        if not callable(lr) and lr < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {lr}")
        self.lr = lr
        self.steps = 0
        self.state = [{name: _zeros_like(p) for name in self.state_names} for p in self.params]
        # parameters still being initialized lazily are computed now, so that the first
        # training step's program reads them as inputs just as every later step does
        for s in {id(p._state): p._state for p in self.params}.values():
            runtime.sync(s)

    # ---- the learning rate --------------------------------------------------------

    def current_lr(self) -> float:
        """The rate for the step about to be taken (a schedule is called with its index)."""
        return float(self.lr(self.steps)) if callable(self.lr) else float(self.lr)

    # ---- stepping -------------------------------------------------------------------

    def apply_gradients(self, grads: Any) -> None:
        """Update every parameter from its gradient. `grads`: one per parameter, in the
        order of `self.params` (None skips a parameter), or (grad, param) pairs."""
        pairs = self._pairs(grads)
        lr = self.current_lr()
        self.steps += 1
        self.hyper = Hypers()
        for index, g in pairs:
            p = self.params[index]
            if g._state is not p._state:
                raise ValueError(f"{type(self).__name__}: the gradient of parameter {index} is on "
                                 f"{g._state.device.name!r}, the parameter on "
                                 f"{p._state.device.name!r}")
            if g.shape != p.shape:
                raise ValueError(f"{type(self).__name__}: gradient of shape {g.shape} for "
                                 f"parameter {index} of shape {p.shape}")
            grad = g._node if g.dtype is p.dtype else g.astype(p.dtype)._node
            self._follow(index)
            state = {k: t._node for k, t in self.state[index].items()}
            new_param, new_state = self.update(p._node, grad, state, lr)
            # the old values may be updated in place (if nothing else holds them at sync)
            runtime.offer_donation(p._node)
            p._assign(new_param)
            for k, node in new_state.items():
                runtime.offer_donation(self.state[index][k]._node)
                self.state[index][k]._assign(node)

    step = apply_gradients

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        """(new parameter node, {state name: new node}) for one parameter; scalars that may
        change between steps come from `self.hyper(role, value, like)`."""
        raise NotImplementedError

    def _follow(self, index: int) -> None:
        """Keep a parameter's state on its device and dtype (the model may have been moved
        with `.to()` after the optimizer was made)."""
        p = self.params[index]
        for t in self.state[index].values():
            if t._state is not p._state or t.dtype is not p.dtype:
                moved = t.to(device=p._state, dtype=p.dtype)
                t._state = moved._state
                t._assign(moved._node)

    def _pairs(self, grads: Any) -> list:
        grads = list(grads.values()) if isinstance(grads, dict) else list(grads)
        if grads and all(isinstance(x, tuple) and len(x) == 2 for x in grads):
            where = {id(p): i for i, p in enumerate(self.params)}
            out = []
            for g, p in grads:
                if id(p) not in where:
                    raise ValueError(f"{type(self).__name__}: a (grad, param) pair names a "
                                     "tensor that is not one of this optimizer's parameters")
                if g is not None:
                    out.append((where[id(p)], g))
            return out
        if len(grads) != len(self.params):
            raise ValueError(f"{type(self).__name__}: got {len(grads)} gradients for "
                             f"{len(self.params)} parameters; pass one per parameter (None to "
                             "skip) or (grad, param) pairs")
        return [(i, g) for i, g in enumerate(grads) if g is not None]

    def zero_grad(self) -> None:
        """Gradients are returned by the tape, not stored: nothing to clear."""

    # ---- saving -------------------------------------------------------------------------

    def state_dict(self) -> dict:
        runtime.sync()
        return {"steps": self.steps,
                "state": [{k: t.numpy() for k, t in s.items()} for s in self.state]}

    def load_state_dict(self, saved: dict) -> None:
        self.steps = int(saved["steps"])
        for mine, theirs in zip(self.state, saved["state"]):
            for k, t in mine.items():
                t._assign(Tensor._from_numpy(np.asarray(theirs[k], t.dtype.np), t._state)._node)


def _zeros_like(p: Tensor) -> Tensor:
    """Zeros already on the device (no compile needed to create optimizer state)."""
    return Tensor._from_numpy(np.zeros(p.shape, p.dtype.np), p._state)


__all__ = ["Optimizer", "Hypers", "hyper", "LearningRate"]
