"""Gradients for users: `GradientTape`, `grad`, `value_and_grad`, `stop_gradient`.

What a tape records. Every op is already recorded in the lazy graph, so a tape adds
little: while it is alive it keeps the operands of the nodes that syncs materialize
(`runtime.TAPE_DEPTH`), so that `tape.gradient` can walk back through values that were
computed in the meantime (`loss.item()` inside the tape). `tape.gradient(target,
sources)` then walks back from the target's node with `compiler.autodiff.vjp_graph`.

Consequences, by design (as in JAX rather than TensorFlow):

- any tensor connected to the target is differentiable, watched or not, including
  tensors created before the tape; `watch` pins the value a tensor had when it was
  watched (a later in-place update of that tensor does not move the source);
  `watch_accessed_variables=False` restricts gradients to the watched tensors;
- the graph behind a value materialized while no tape was alive is forgotten: such a
  value is a constant for later gradients (a value materialized while a tape was alive
  keeps its graph until the last alive tape ends);
- the gradient is itself a lazy graph of primitives, so it fuses with the forward pass
  and the optimizer update, and an outer tape can differentiate it (nested tapes).

A tape holds the graph from `__enter__` until its gradient is taken (non-persistent) or
until it is deleted (persistent, or never used).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence, Union

from . import runtime
from .compiler.transforms import autodiff
from .compiler.graph import builders
from .creation import asarray
from .tensor import Tensor

_UNCONNECTED = ("none", "zero")


class GradientTape:
    """`with la.GradientTape() as tape: ...` then `tape.gradient(loss, params)`."""

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True) -> None:
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self._watched: dict = {}      # id(tensor) -> (tensor, its node when watched)
        self._holding = False
        self._used = False

    # ---- recording --------------------------------------------------------------------

    def __enter__(self) -> "GradientTape":
        if self._used:
            raise RuntimeError("GradientTape: this non-persistent tape was already used; "
                               "make a new tape (or pass persistent=True)")
        self._hold()
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is not None:
            self._release()

    def _hold(self) -> None:
        if not self._holding:
            runtime.TAPE_DEPTH[0] += 1
            self._holding = True

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            runtime.TAPE_DEPTH[0] -= 1
            if not runtime.TAPE_DEPTH[0]:
                forget_held_history()

    def __del__(self) -> None:
        self._release()

    def watch(self, tensors: Any) -> None:
        """Mark tensors (a tensor, or a list, tuple or dict of them) as sources."""
        for t in _flatten(tensors, "GradientTape.watch")[0]:
            self._watched[id(t)] = (t, t._node)

    def watched_variables(self) -> list:
        return [t for t, _ in self._watched.values()]

    # ---- gradients --------------------------------------------------------------------

    def gradient(self, target: Tensor, sources: Any, output_gradients: Optional[Any] = None,
                 unconnected_gradients: str = "none") -> Any:
        """d target / d sources, shaped like `sources` (a tensor, list, tuple or dict).

        `target` must be a scalar unless `output_gradients` (its cotangent) is given.
        Sources the target does not depend on get None, or zeros with
        `unconnected_gradients="zero"`.
        """
        if self._used:
            raise RuntimeError("GradientTape.gradient: a non-persistent tape can compute "
                               "gradients once; use GradientTape(persistent=True) to call "
                               "gradient several times")
        if unconnected_gradients not in _UNCONNECTED:
            raise ValueError(f"GradientTape.gradient: unconnected_gradients must be one of "
                             f"{_UNCONNECTED}, got {unconnected_gradients!r}")
        if not isinstance(target, Tensor):
            raise TypeError(f"GradientTape.gradient: the target must be a tensor, got "
                            f"{type(target).__name__}")
        leaves, rebuild = _flatten(sources, "GradientTape.gradient")
        for t in leaves:
            if t._state is not target._state:
                raise ValueError(f"GradientTape.gradient: a source lives on "
                                 f"{t._state.device.name!r} but the target on "
                                 f"{target._state.device.name!r}")
        seed = _seed(target, output_gradients)
        if self._watched or not self.watch_accessed_variables:
            nodes = [self._source_node(t) for t in leaves]
        else:
            nodes = [t._node for t in leaves]
        cts = autodiff.vjp_graph(target._node, nodes, seed)
        if not self.persistent:
            self._used = True
            self._release()
        if unconnected_gradients == "zero":
            cts = [builders.zeros_like(t._node) if c is None else c
                   for c, t in zip(cts, leaves)]
        # every source is on the target's device (checked above)
        return rebuild(Tensor._wrap_all(cts, target._state))

    def _source_node(self, t: Tensor) -> Any:
        entry = self._watched.get(id(t))
        if entry is not None and entry[0] is t:
            return entry[1]
        if not self.watch_accessed_variables:
            return None
        return t._node


def _seed(target: Tensor, output_gradients: Any, where: str = "GradientTape.gradient",
          given: str = "output_gradients") -> Any:
    node = target._node
    if output_gradients is None:
        if node.shape != ():
            raise ValueError(f"{where}: the target has shape {node.shape}; "
                             f"reduce it to a scalar or pass {given} of that shape")
        if not node.dtype.is_float:
            raise TypeError(f"{where}: the target is {node.dtype.name}; only "
                            "floating-point targets have gradients")
        return builders.full(1, (), node.dtype)
    seed = output_gradients if isinstance(output_gradients, Tensor) else \
        asarray(output_gradients, dtype=node.dtype, device=target._state)
    if seed.shape != node.shape:
        raise ValueError(f"{where}: {given} has shape {seed.shape}, the target {node.shape}")
    return builders.convert(seed._node, node.dtype)


def forget_held_history() -> None:
    """No tape is left: drop the operands of the nodes materialized while one was, as a
    sync outside any tape does at once (so a loop's history does not pile up)."""
    held, runtime.HELD[:] = list(runtime.HELD), []
    for ref in held:
        node = ref()
        if node is not None:
            node.release()


# ---- structures of tensors --------------------------------------------------------------

def _flatten(tree: Any, where: str) -> tuple:
    """Tensors of a tensor / list / tuple / dict (nested), and a function that puts a list
    of the same length back into the same structure."""
    kind = type(tree)
    if (kind is list or kind is tuple) and all([type(t) is Tensor for t in tree]):
        return list(tree), kind          # a flat list of tensors (a model's parameters)
    if isinstance(tree, Tensor):
        return [tree], lambda xs: xs[0]
    if isinstance(tree, dict):
        keys = list(tree)
        parts = [_flatten(tree[k], where) for k in keys]
        return _concat(parts, lambda outs: dict(zip(keys, outs)))
    if isinstance(tree, (list, tuple)):
        parts = [_flatten(v, where) for v in tree]
        kind = type(tree) if type(tree) in (list, tuple) else list
        return _concat(parts, kind)
    raise TypeError(f"{where}: expected a tensor or a list, tuple or dict of tensors, got "
                    f"{type(tree).__name__}")


def _concat(parts: list, build: Callable) -> tuple:
    leaves, sizes = [], []
    for flat, _ in parts:
        leaves.extend(flat)
        sizes.append(len(flat))

    def rebuild(xs: list) -> Any:
        outs, i = [], 0
        for (_, sub), n in zip(parts, sizes):
            outs.append(sub(xs[i:i + n]))
            i += n
        return build(outs)
    return leaves, rebuild


# ---- the functional form ----------------------------------------------------------------

def stop_gradient(x: Any) -> Any:
    """x's value, through which no gradient flows (a constant for every tape)."""
    if isinstance(x, Tensor):
        return Tensor._wrap(autodiff.stop(x._node), x._state)
    if isinstance(x, (list, tuple, dict)):
        leaves, rebuild = _flatten(x, "stop_gradient")
        return rebuild([stop_gradient(t) for t in leaves])
    return x


def _as_input(x: Any) -> Any:
    if isinstance(x, (Tensor, list, tuple, dict)):
        return x
    return asarray(x)


def value_and_grad(f: Callable, argnums: Union[int, Sequence[int]] = 0,
                   has_aux: bool = False) -> Callable:
    """A function returning (f(*args), gradient of f with respect to args[argnums]).

    f must return a scalar tensor (or (scalar, aux) with has_aux). The gradient has the
    structure of the argument (a tensor, or a list/tuple/dict of tensors); with a tuple of
    argnums, a tuple of those. Arguments f does not depend on get zeros, as in JAX.
    """
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        args = list(args)
        for i in nums:
            if i >= len(args):
                raise ValueError(f"value_and_grad: argnums {i} but only {len(args)} "
                                 "positional arguments were given")
            args[i] = _as_input(args[i])
        with GradientTape() as tape:
            out = f(*args, **kwargs)
        value, aux = _split_aux(out, has_aux)
        grads = tape.gradient(value, [args[i] for i in nums], unconnected_gradients="zero")
        g = grads[0] if isinstance(argnums, int) else tuple(grads)
        return ((value, aux), g) if has_aux else (value, g)
    return wrapped


def _split_aux(out: Any, has_aux: bool) -> tuple:
    if not has_aux:
        return out, None
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError("value_and_grad(has_aux=True): f must return a pair (value, aux)")
    return out[0], out[1]


def grad(f: Callable, argnums: Union[int, Sequence[int]] = 0, has_aux: bool = False) -> Callable:
    """A function returning the gradient of scalar f with respect to args[argnums]."""
    vg = value_and_grad(f, argnums, has_aux)

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        (value_or_pair, g) = vg(*args, **kwargs)
        return (g, value_or_pair[1]) if has_aux else g
    return wrapped
