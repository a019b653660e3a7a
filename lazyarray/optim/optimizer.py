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

from typing import Any, Callable, Iterable, Iterator, Union

import numpy as np

from ..compiler.graph.template import Cache
from ..compiler.transforms.graph_templates import Template
from ..compiler.graph.node import Node, scalar_leaf
from ..compiler.primitive import apply
from .. import runtime
from ..tensor import Tensor

LearningRate = Union[float, Callable[[int], float]]

# whether a step may take back the last step's runtime scalars (see `Hypers`); tests turn
# it off to compare with fresh nodes
REUSE_LAST_STEP = [True]
# whether a step of the structure of an earlier one copies that step's update graph (see
# `Optimizer._copied_step`); tests turn it off to compare with the update as written
STEP_TEMPLATES = [True]
_MAX_STEP_TEMPLATES = 16    # structures kept per optimizer (a loop has one or two)
STEP_STATS = {"copies": 0, "made": 0}


def hyper(value: float, like: Node) -> Node:
    """A runtime scalar of `like`'s dtype: data, not structure (no recompile when it changes)."""
    return scalar_leaf(float(value), like.dtype)


class Hypers:
    """The runtime scalars of one step, one per (role, dtype) and shared by every parameter:
    a step's program takes a handful of scalar inputs, not several per parameter. Shared by
    role, never by value, so the program's structure cannot depend on two values happening
    to be equal.

    `previous`: the last step's, given when that step's program has been computed (so no
    pending graph holds its nodes): a role whose value did not change takes its scalar
    and broadcasts back instead of new ones. The nodes are the same kind, shared the same
    way, so this step's program is the one fresh nodes would give."""

    def __init__(self, previous: "Hypers | None" = None) -> None:
        self.made: dict = {}
        self.spread: dict = {}
        # what an optimizer derives from this step's scalars, per (group, shape, dtype):
        # every parameter of one shape in one group reads the same (see Adam.update)
        self.per_shape: dict = {}
        self.previous = (previous.made, previous.spread) if previous is not None else None

    def __call__(self, role: str, value: float, like: Node) -> Node:
        """The scalar, already broadcast to `like`'s shape: the update's elementwise ops
        then take the cheap equal-shapes path, and parameters of one shape share it."""
        shape, dtype = like.shape, like.dtype
        value = float(value)
        wide = self.spread.get((role, dtype, shape))
        if wide is not None and wide.operands[0].value == value:
            return wide
        node = self.leaf(role, value, dtype)
        if not shape:
            return node
        out = self._again_wide((role, dtype, shape), node)
        if out is None:
            out = apply("broadcast_in_dim", node, shape=shape, broadcast_dimensions=())
        self.spread[(role, dtype, shape)] = out
        return out

    def leaf(self, role: str, value: float, dtype: Any) -> Node:
        """The 0-d scalar of `role` in `dtype` this step (made at its first use)."""
        key = (role, dtype)
        node = self.made.get(key)
        if node is None:
            node = self.made[key] = self._again(key, value) or scalar_leaf(value, dtype)
        elif node.value != value:
            raise ValueError(f"optimizer: hyper-parameter {role!r} has two values in one step "
                             f"({node.value} and {value})")
        return node

    def _again(self, key: tuple, value: float) -> "Node | None":
        """The last step's scalar of this role, if it had this value."""
        if self.previous is None:
            return None
        node = self.previous[0].get(key)
        return node if node is not None and node.value == value else None

    def _again_wide(self, key: tuple, node: Node) -> "Node | None":
        """The last step's broadcast of `node` (the scalar taken back) to this shape."""
        if self.previous is None:
            return None
        wide = self.previous[1].get(key)
        return wide if wide is not None and wide.operands[0] is node \
            and wide.buffer is None else None


class Optimizer:
    """Holds parameter groups (PyTorch's `param_groups`: dicts with "params" and the
    hyper-parameters) and per-parameter state; subclasses define `update`.

    Two ways to step: `step()` (PyTorch's idiom) reads each parameter's `.grad`, filled by
    `loss.backward()`; `apply_gradients(grads)` takes the gradients a tape returned.
    """

    state_names: tuple = ()

    def __init__(self, params: Iterable[Any], lr: LearningRate = 1e-3, **defaults: Any) -> None:
        self.defaults = {"lr": lr, **defaults}
        self.param_groups: list = []
        items = list(params)
        if not items:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        self.params: list = []
        self.state: list = []
        self.steps = 0
        # step key -> Template, or False (see below)
        self._step_templates = Cache(_MAX_STEP_TEMPLATES)
        for g in groups:
            self.add_param_group(g)

    def add_param_group(self, group: dict) -> None:
        """A group of parameters with its own hyper-parameters (the rest from defaults)."""
        params = group["params"]
        params = [params] if type(params) is Tensor else list(params)
        first = len(self.params)
        for i, p in enumerate(params):
            if type(p) is not Tensor or not p.dtype.is_float:
                raise TypeError(f"{type(self).__name__}: parameter {first + i} must be a "
                                f"floating-point Tensor, got "
                                f"{getattr(p, 'dtype', type(p).__name__)}")
            if any(p is q for q in self.params):
                raise ValueError(f"{type(self).__name__}: parameter {first + i} appears in "
                                 "more than one parameter group")
        full = {**self.defaults, **group, "params": params}
        lr = full["lr"]
        if not callable(lr) and lr < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {lr}")
        self.check_group(full)
        full.setdefault("initial_lr", lr)
        self.param_groups.append(full)
        self.params.extend(params)
        self.state.extend({name: _zeros_like(p) for name in self.state_names_for(full)}
                          for p in params)
        # parameters still being initialized lazily are computed now, so that the first
        # training step's program reads them as inputs just as every later step does
        for s in {id(p._state): p._state for p in params}.values():
            runtime.sync(s)

    def check_group(self, group: dict) -> None:
        """Subclasses validate a group's hyper-parameters."""

    def state_names_for(self, group: dict) -> tuple:
        return self.state_names

    # ---- the learning rate --------------------------------------------------------

    @property
    def lr(self) -> LearningRate:
        """The first group's learning rate (a number, or a schedule of the step index)."""
        return self.param_groups[0]["lr"]

    @lr.setter
    def lr(self, value: LearningRate) -> None:
        for g in self.param_groups:
            g["lr"] = value

    def current_lr(self, group: Any = None) -> float:
        """The rate for the step about to be taken (a schedule is called with its index)."""
        lr = (group or self.param_groups[0])["lr"]
        return float(lr(self.steps)) if callable(lr) else float(lr)

    # ---- stepping -------------------------------------------------------------------

    def step(self, closure: Any = None) -> Any:
        """Update every parameter that has a `.grad` (PyTorch's `optimizer.step()`).
        `closure`, if given, recomputes the loss (and its backward) first and is returned."""
        loss = closure() if closure is not None else None
        # (index, gradient) pairs, as `_pairs` would make of (grad, param) pairs
        pairs = [(i, g) for i, p in enumerate(self.params) if (g := p.grad) is not None]
        if pairs:
            self._update_pairs(pairs)
            del pairs               # the step's program may then take the old buffers
            self._end_step()
        return loss

    def apply_gradients(self, grads: Any) -> None:
        """Update every parameter from its gradient. `grads`: one per parameter, in the
        order of `self.params` (None skips a parameter), or (grad, param) pairs. Ends the
        training step, as `step()` does (see `_end_step`)."""
        self._update_all(grads)
        del grads
        self._end_step()

    def _end_step(self) -> None:
        """A step boundary: what is pending on the parameters' devices is computed now,
        one program per step, the same each step (PyTorch/XLA's `optimizer_step`; off
        with `la.config.step_sync = False`). Called once the update's frame is gone, so
        that only the graph references the old parameters and the program may update
        them in place."""
        runtime.step_boundary(list({id(p._state): p._state for p in self.params}.values()))

    def _update_all(self, grads: Any) -> None:
        """Record the update of every parameter from its gradient (apply_gradients
        without the step boundary)."""
        self._update_pairs(self._pairs(grads))

    def _update_pairs(self, pairs: list) -> None:
        """`_update_all` of (parameter index, gradient) pairs."""
        group_of = self._group_index()
        lrs = [self.current_lr(g) for g in self.param_groups]
        self.steps += 1
        last = getattr(self, "_hypers", None)
        # the last step's scalars are taken back only once its program has run: its new
        # parameters then hold values (a sync computes all that is pending on a device)
        self.last_computed = REUSE_LAST_STEP[0] and all(
            p._node.buffer is not None for p in self.params)
        self._hypers = Hypers(last if last is not None and self.last_computed else None)
        step = self._step_args(pairs, group_of, lrs) if STEP_TEMPLATES[0] else None
        if step is not None and self._copied_step(step):
            return
        # the old values may be updated in place (if nothing else holds them at sync):
        # offered together at the end
        offered: list = []
        # every tensor is rebound at the end, together (the user's line found once); a
        # parameter given twice rebinds what came before it first, so that its second
        # update reads the first one's result
        targets: list = []
        nodes: list = []
        seen: set = set()
        for index, g in pairs:
            if index in seen:
                Tensor._assign_all(targets, nodes)
                targets, nodes, seen = [], [], set()
            seen.add(index)
            p = self.params[index]
            pnode, gnode = p._node, g._node
            if g._state is not p._state:
                raise ValueError(f"{type(self).__name__}: the gradient of parameter {index} is on "
                                 f"{g._state.device.name!r}, the parameter on "
                                 f"{p._state.device.name!r}")
            if gnode.shape != pnode.shape:
                raise ValueError(f"{type(self).__name__}: gradient of shape {g.shape} for "
                                 f"parameter {index} of shape {p.shape}")
            grad = gnode if gnode.dtype is pnode.dtype else g.astype(p.dtype)._node
            self._gi = gi = group_of[index]
            self.group = self.param_groups[gi]
            tensors = self.state[index]
            state = self._state_nodes(index, tensors)
            new_param, new_state = self.update(pnode, grad, state, lrs[gi])
            offered.append(pnode)
            targets.append(p)
            nodes.append(new_param)
            for k, node in new_state.items():
                offered.append(state[k])
                targets.append(tensors[k])
                nodes.append(node)
        if step is not None:
            self._remember_step(step, targets, nodes)
        runtime.offer_donations(offered)
        Tensor._assign_all(targets, nodes)

    # ---- a step of a known structure: its update graph copied ---------------------------
    #
    # A training loop updates the same parameters, of the same types, from gradients of
    # the same types at every step, and an update reads nothing else but this step's
    # runtime scalars: its graph is then a function of those types and the scalars' roles.
    # The first step of a structure records its update as written and keeps it as a
    # template (compiler/transforms/graph_templates.py) over the parameters', gradients', states' and
    # scalars' nodes; a later step whose key (every pair's index, group and types, the
    # groups' flags) is the same copies it: one `Node` per node, no rule run, the same
    # graph (so the same program). Anything else records as written.

    def step_scalars(self, pairs: list, group_of: list, lrs: list) -> "tuple | None":
        """(this step's runtime scalars that the update of `pairs` reads, as leaf nodes in
        an order fixed by the pairs' groups and dtypes; the groups' flags that shape the
        graph besides the types), or None when the update may read anything else (then
        each step records it as written). Subclasses that can say so override this."""
        return None

    def _group_dtypes(self, pairs: list, group_of: list) -> Iterator[tuple]:
        """(group index, dtype, group) of each (group, dtype) the pairs' parameters
        have, once each, in the pairs' order: what `step_scalars` makes scalars for; the
        optimizer's current group (`_gi`, `group`) set to it while the caller's turn runs."""
        seen: set = set()
        params, groups = self.params, self.param_groups
        for index, _ in pairs:
            gi = group_of[index]
            dtype = params[index]._node.dtype
            if (gi, dtype) in seen:
                continue
            seen.add((gi, dtype))
            self._gi, self.group = gi, groups[gi]
            yield gi, dtype, self.group

    def _step_args(self, pairs: list, group_of: list, lrs: list) -> "tuple | None":
        """(key, template arguments, offered old nodes, rebound tensors) of this step, or
        None when it cannot be copied: a parameter given twice, a gradient or a state of
        another device, dtype or shape (the update as written checks, converts, follows or
        raises there)."""
        if len({index for index, _ in pairs}) != len(pairs):
            return None
        made = self.step_scalars(pairs, group_of, lrs)
        if made is None:
            return None
        scalars, flags = made
        params, state = self.params, self.state
        key: list = [flags]
        args: list = []
        offered: list = []
        targets: list = []
        for index, g in pairs:
            p = params[index]
            pnode, gnode = p._node, g._node
            where, dtype = p._state, pnode.dtype
            if g._state is not where or gnode.dtype is not dtype or gnode.shape != pnode.shape:
                return None
            args.append(pnode)
            args.append(gnode)
            offered.append(pnode)
            targets.append(p)
            shapes = []
            for t in state[index].values():
                node = t._node
                if t._state is not where or node.dtype is not dtype:
                    return None
                args.append(node)
                offered.append(node)
                targets.append(t)
                shapes.append(node.shape)
            key.append((index, group_of[index], pnode.shape, dtype, tuple(shapes)))
        args.extend(scalars)
        return tuple(key), tuple(args), offered, targets

    def _copied_step(self, step: tuple) -> bool:
        """Record this step as a copy of the template of its key; False when there is none
        (nothing done)."""
        key, args, offered, targets = step
        template = self._step_templates.get(key)
        if not template:
            return False
        nodes = template.build(args)
        STEP_STATS["copies"] += 1
        runtime.offer_donations(offered)
        Tensor._assign_all(targets, list(nodes))
        return True

    def _remember_step(self, step: tuple, targets: list, nodes: list) -> None:
        """Keep the update just recorded as the template of its key (False: not
        copyable: it read a scalar of its own, or rebinds other tensors)."""
        key, args, _, expected = step
        templates = self._step_templates
        if key in templates:
            return
        template = None
        if len(targets) == len(expected) and all(a is b for a, b in zip(targets, expected)):
            template = Template.make(tuple(nodes), args)
        if template is not None and any(op == "scalar" for op, *_ in template.steps):
            template = None                 # a scalar made afresh with the first value
        templates.put(key, template or False)
        STEP_STATS["made"] += template is not None

    def _state_nodes(self, index: int, tensors: dict) -> dict:
        """{state name: node} of parameter `index`, its state first moved to the
        parameter's device and dtype if the model was moved since (`_follow`)."""
        p = self.params[index]
        pstate, dtype = p._state, p._node.dtype
        out = {}
        for k, t in tensors.items():
            node = out[k] = t._node
            if t._state is not pstate or node.dtype is not dtype:
                self._follow(index)
                return {k: t._node for k, t in tensors.items()}
        return out

    @property
    def hyper(self) -> "Hypers":
        """The runtime scalars of the current step (shared by role and group)."""
        return self._hypers

    def scalar(self, role: str, value: float, like: Node) -> Node:
        """A hyper-parameter of the current group as a runtime scalar broadcast to
        `like`: data, not structure, so changing it never recompiles."""
        return self._hypers(role if not self._gi else f"{role}#{self._gi}", value, like)

    def _group_index(self) -> list:
        out = []
        for gi, g in enumerate(self.param_groups):
            out.extend([gi] * len(g["params"]))
        return out

    def update(self, param: Node, grad: Node, state: dict, lr: float) -> tuple:
        """(new parameter node, {state name: new node}) for one parameter; `self.group` is
        its group; scalars that may change between steps come from `self.scalar`."""
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

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's `.grad` (PyTorch's idiom; the tape needs nothing)."""
        for p in self.params:
            if p.grad is not None:
                p.grad = None if set_to_none else p.grad * 0

    # ---- saving -------------------------------------------------------------------------

    def state_dict(self) -> dict:
        runtime.sync()
        groups = [{k: v for k, v in g.items() if k != "params" and not callable(v)}
                  for g in self.param_groups]
        return {"steps": self.steps, "param_groups": groups,
                "state": [{k: t.numpy() for k, t in s.items()} for s in self.state]}

    def load_state_dict(self, saved: dict) -> None:
        self.steps = int(saved["steps"])
        for mine, theirs in zip(self.param_groups, saved.get("param_groups", ())):
            mine.update({k: v for k, v in theirs.items() if k != "params"})
        for mine, theirs in zip(self.state, saved["state"]):
            for k, t in mine.items():
                t._assign(Tensor._from_numpy(np.asarray(theirs[k], t.dtype.np), t._state)._node)


def _zeros_like(p: Tensor) -> Tensor:
    """Zeros already on the device (no compile needed to create optimizer state)."""
    return Tensor._from_numpy(np.zeros(p.shape, p.dtype.np), p._state)


__all__ = ["Optimizer", "Hypers", "hyper", "LearningRate"]
