"""Adam and AdamW, following PyTorch's update formulas (with its AMSGrad variant)."""
from __future__ import annotations

import math
from typing import Any, Iterable

from .. import ops
from ..compiler.transforms.graph_templates import remembered
from ..compiler.graph.node import Node, scalar_leaf
from ..compiler.primitive import apply
from .optimizer import LearningRate, Optimizer
from .same_type import recorder


class Adam(Optimizer):
    """m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
    p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    `weight_decay` adds wd * p to g (L2, as torch.optim.Adam); `amsgrad` divides by the
    running maximum of v instead of v (kept as the state `max_exp_avg_sq`)."""

    state_names = ("exp_avg", "exp_avg_sq")
    decoupled = False

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 amsgrad: bool = False, *, maximize: bool = False) -> None:
        # this step's scalars per (group, dtype) and their broadcasts per (group, shape,
        # dtype), each with the last step's (see `_scalars`)
        self._made: dict = {}
        self._spread: dict = {}
        self._renewed: dict = {}
        super().__init__(params, lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                         amsgrad=bool(amsgrad), maximize=maximize)

    def check_group(self, group: dict) -> None:
        (b1, b2), eps, wd = group["betas"], group["eps"], group["weight_decay"]
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0) or eps < 0 or wd < 0:
            raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), eps and "
                             f"weight_decay non-negative; got betas={group['betas']}, "
                             f"eps={eps}, weight_decay={wd}")

    def state_names_for(self, group: dict) -> tuple:
        return self.state_names + (("max_exp_avg_sq",) if group["amsgrad"] else ())

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        group = self.group
        wd = group["weight_decay"]
        if wd and self.decoupled:
            decay = self.scalar("decay", 1.0 - lr * wd, param)
        elif wd:
            decay = self.scalar("weight_decay", wd, param)
        else:
            decay = None
        if group["amsgrad"]:
            return _amsgrad(param, grad, state, self._scalars(param, lr), decay,
                            bool(group["maximize"]), self.decoupled)
        new, m, v = _adam_nodes(param, grad, state["exp_avg"], state["exp_avg_sq"],
                                *self._scalars(param, lr), decay, bool(group["maximize"]),
                                self.decoupled)
        return new, {"exp_avg": m, "exp_avg_sq": v}

    def step_scalars(self, pairs: list, group_of: list, lrs: list) -> "tuple | None":
        """This step's scalars of each (group, dtype), in the pairs' order, and each
        group's `maximize`: all an update without weight decay reads besides the types
        (weight decay's scalar comes from `Hypers`: recorded as written). None for a
        subclass with an update of its own (it may read anything)."""
        if type(self).update is not Adam.update:
            return None
        leaves: list = []
        flags: list = []
        for gi, dtype, group in self._group_dtypes(pairs, group_of):
            if group["weight_decay"] or group["amsgrad"]:
                return None
            leaves.extend(self._step_leaves(dtype, lrs[gi]))
            flags.append((gi, dtype, bool(group["maximize"])))
        return tuple(leaves), tuple(flags)

    def _scalars(self, like: Node, lr: float) -> tuple:
        """This step's runtime scalars broadcast to `like`: b1, 1-b1, b2, 1-b2,
        1/sqrt(1-b2^t), eps, lr/(1-b1^t); made once per (group, shape, dtype) in a step.
        As `Hypers` does for any role: one scalar per role and step, shared by every
        parameter, and the last step's nodes taken back for the roles whose value did
        not change, once its program has run (Adam's own loop: a few per step)."""
        shape, dtype = like.shape, like.dtype
        leaves = self._step_leaves(dtype, lr)
        if not shape:
            return leaves
        key = (self._gi, shape, dtype)
        entry = self._spread.get(key)
        if entry is not None and entry[0] is leaves:
            return entry[1]                         # this step's, made for another parameter
        if entry is not None and self.last_computed:
            # the last step's broadcast of each scalar taken back, a new one (with the
            # same attributes) for a scalar that changed
            renewed = self._renewed.get(key[::2])
            if renewed is not None and renewed[0] is entry[0] and renewed[1] is leaves:
                # made from the last step's scalars: only those that changed are new
                wides = list(entry[1])
                for i in renewed[2]:
                    wides[i] = apply("broadcast_in_dim", leaves[i], **wides[i].attrs)
                wides = tuple(wides)
            else:
                wides = tuple([w if w.operands[0] is leaf and w.buffer is None else
                               apply("broadcast_in_dim", leaf, **w.attrs)
                               for leaf, w in zip(leaves, entry[1])])
        else:
            wides = tuple([apply("broadcast_in_dim", leaf, shape=shape, broadcast_dimensions=())
                           for leaf in leaves])
        self._spread[key] = (leaves, wides)
        return wides

    def _step_leaves(self, dtype: Any, lr: float) -> tuple:
        """The runtime scalars of this step for the current group, 0-d."""
        key = (self._gi, dtype)
        made = self._made
        entry = made.get(key)
        if entry is not None and entry[0] is self.hyper:     # made in this step
            return entry[1]
        b1, b2 = self.group["betas"]
        t = self.steps
        values = (b1, 1.0 - b1, b2, 1.0 - b2, 1.0 / math.sqrt(1.0 - b2 ** t),
                  self.group["eps"], lr / (1.0 - b1 ** t))
        old = entry[1] if entry is not None and self.last_computed else (None,) * len(values)
        leaves = tuple([o if o is not None and o.value == float(v) else
                        scalar_leaf(float(v), dtype) for o, v in zip(old, values)])
        made[key] = (self.hyper, leaves)
        # (the last step's scalars, this step's, where they differ): a broadcast made from
        # the former needs renewing only there (see `_scalars`)
        self._renewed[key] = (old, leaves, tuple([i for i, (o, n) in enumerate(zip(old, leaves))
                                                 if o is not n]))
        return leaves


def _one_type(param: Node, grad: Node, m0: Node, v0: Node, *rest: Any) -> Any:
    """The key of `_adam_nodes` when the gradient and state have the parameter's shape and
    dtype (unless loaded otherwise, they do; the scalars and `decay` are broadcast to the
    parameter by the caller): then the graph is fixed by that type, whether there is a
    decay and the flags. None otherwise (the update is recorded through `ops`, not
    copied)."""
    shape, dtype = param.shape, param.dtype
    if grad.dtype is not dtype or m0.dtype is not dtype or v0.dtype is not dtype \
            or grad.shape != shape or m0.shape != shape or v0.shape != shape:
        return None
    return shape, dtype, rest[-3] is None, rest[-2], rest[-1]


@remembered(key=_one_type)
def _adam_nodes(param: Node, grad: Node, m0: Node, v0: Node, b1: Node, omb1: Node, b2: Node,
                omb2: Node, inv_bc2: Node, eps: Node, step: Node, decay: Any, maximize: bool,
                decoupled: bool) -> tuple:
    """(new parameter, m, v) of one Adam step, the scalars already broadcast; `decay`: the
    weight decay's scalar (decoupled: 1 - lr*wd; else wd) or None. A function of its
    arguments' types and flags alone, so a parameter type's graph is built once and
    copied at every later step (compiler/transforms/graph_templates.py)."""
    E = recorder(param, grad, m0, v0)
    g = E.negative(grad) if maximize else grad
    if decay is not None and decoupled:
        param = E.multiply(param, decay)
    elif decay is not None:
        g = E.add(g, E.multiply(param, decay))
    m = E.add(E.multiply(m0, b1), E.multiply(g, omb1))
    v = E.add(E.multiply(v0, b2), E.multiply(E.square(g), omb2))
    denom = E.add(E.multiply(E.sqrt(v), inv_bc2), eps)
    new = E.subtract(param, E.multiply(E.divide(m, denom), step))
    return new, m, v


def _amsgrad(param: Node, grad: Node, state: dict, scalars: tuple, decay: Any, maximize: bool,
             decoupled: bool) -> tuple:
    """(new parameter, state) of an AMSGrad step: as `_adam_nodes`, but the denominator
    reads max(v_max, v) (PyTorch's `max_exp_avg_sq`). Recorded as written each step."""
    b1, omb1, b2, omb2, inv_bc2, eps, step = scalars
    g = ops.negative(grad) if maximize else grad
    if decay is not None and decoupled:
        param = ops.multiply(param, decay)
    elif decay is not None:
        g = ops.add(g, ops.multiply(param, decay))
    m = ops.add(ops.multiply(state["exp_avg"], b1), ops.multiply(g, omb1))
    v = ops.add(ops.multiply(state["exp_avg_sq"], b2), ops.multiply(ops.square(g), omb2))
    v_max = ops.maximum(state["max_exp_avg_sq"], v)
    denom = ops.add(ops.multiply(ops.sqrt(v_max), inv_bc2), eps)
    new = ops.subtract(param, ops.multiply(ops.divide(m, denom), step))
    return new, {"exp_avg": m, "exp_avg_sq": v, "max_exp_avg_sq": v_max}


class AdamW(Adam):
    """Adam with decoupled weight decay: p *= 1 - lr * wd before the Adam step."""

    decoupled = True

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3,
                 betas: tuple = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize)
