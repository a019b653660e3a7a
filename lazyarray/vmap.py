"""`la.vmap`: vectorize a function over a leading (or any) axis of its arguments.

The function is traced once on stand-ins of one batch element each (tensors whose value
cannot be read); the traced graph is then rebuilt with a batch axis by each primitive's
batching rule (compiler/transforms/batching.py). Nothing runs until a value is needed, like any other
lazy computation, and the batched graph composes with `grad` both ways.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence, Union

from .compiler.transforms import batching
from .compiler.graph.node import Node
from .compiler.primitive import apply
from .pytree import tree_flatten
from .tensor import Tensor
from .creation import asarray

Axes = Union[int, None, Sequence[Any]]

# how many vmapped functions are being traced now: inside one, la.cond/fori_loop/scan
# trace as their fallback, which batching rules cover (lazyarray/control_flow.py)
DEPTH = [0]


def vmap(fun: Callable, in_axes: Axes = 0, out_axes: Axes = 0) -> Callable:
    """JAX's `vmap`: `vmap(f)(xs)` stacks `f(x)` over the leading axis of `xs`.

    `in_axes`: an int (the batch axis of every argument), None (not batched), or a
    tuple with one entry per positional argument (each an int, None, or a nested
    structure matching that argument). `out_axes`: where the batch axis goes in each
    output (an int, or a tuple matching the outputs; None for an output that does not
    depend on the batched arguments).
    """
    @functools.wraps(fun)
    def batched(*args: Any) -> Any:
        return _call(fun, args, in_axes, out_axes)
    return batched


def _call(fun: Callable, args: tuple, in_axes: Axes, out_axes: Axes) -> Any:
    if isinstance(in_axes, (list, tuple)) and len(in_axes) != len(args):
        raise ValueError(f"vmap: in_axes has {len(in_axes)} entries but the function got "
                         f"{len(args)} positional arguments")
    per_arg = in_axes if isinstance(in_axes, (list, tuple)) else (in_axes,) * len(args)
    leaves: list = []              # (path-free) (tensor, axis) per batched leaf
    stand_ins = [_stand_in_tree(a, ax, leaves) for a, ax in zip(args, per_arg)]
    if not leaves:
        raise ValueError("vmap: no argument is batched (every in_axes entry is None or "
                         "the arguments hold no arrays)")
    size = _batch_size(leaves)
    inputs = {id(s._node): batching.move_to_front(t._node, ax) for t, ax, s in leaves}
    state = leaves[0][0]._state
    DEPTH[0] += 1
    try:
        out = fun(*stand_ins)
    finally:
        DEPTH[0] -= 1
        _forget_traced(state, inputs)
    flat_out, rebuild = tree_flatten(out)
    if not all(isinstance(t, Tensor) for t in flat_out):
        raise TypeError("vmap: the function must return tensors (or lists, tuples and dicts "
                        f"of them), got {type(out).__name__}")
    nodes = batching.batch_graph([t._node for t in flat_out], inputs, size)
    axes = _out_axes(out_axes, len(flat_out))
    results = [_place(t, n, size, ax) for t, n, ax in zip(flat_out, nodes, axes)]
    return rebuild(results)


# ---- arguments ----------------------------------------------------------------------------

def _stand_in_tree(arg: Any, axis: Any, leaves: list) -> Any:
    if isinstance(arg, (list, tuple)):
        sub = axis if isinstance(axis, (list, tuple)) else (axis,) * len(arg)
        if len(sub) != len(arg):
            raise ValueError(f"vmap: in_axes entry {axis} does not match an argument of "
                             f"{len(arg)} items")
        return type(arg)(_stand_in_tree(a, x, leaves) for a, x in zip(arg, sub))
    if isinstance(arg, dict):
        sub = axis if isinstance(axis, dict) else {k: axis for k in arg}
        return {k: _stand_in_tree(v, sub[k], leaves) for k, v in arg.items()}
    if axis is None:
        return arg
    if not isinstance(axis, int):
        raise TypeError(f"vmap: an in_axes entry must be an int or None, got {axis!r}")
    t = arg if isinstance(arg, Tensor) else asarray(arg)
    if t.ndim == 0:
        raise ValueError(f"vmap: in_axes={axis} given for a 0-d argument: a batched "
                         "argument needs the batch axis")
    if not -t.ndim <= axis < t.ndim:
        raise ValueError(f"vmap: in_axes={axis} is out of range for an argument of shape "
                         f"{t.shape}")
    axis %= t.ndim
    shape = t.shape[:axis] + t.shape[axis + 1:]
    node = Node("parameter", (), shape, t.dtype, {},
                buffer=batching.BatchedArgument(shape, t.dtype))
    stand_in = Tensor._wrap(node, t._state)
    leaves.append((t, axis, stand_in))
    return stand_in


def _batch_size(leaves: list) -> int:
    sizes = {t.shape[ax] for t, ax, _ in leaves}
    if len(sizes) != 1:
        described = ", ".join(f"shape {t.shape} axis {ax}" for t, ax, _ in leaves)
        raise ValueError(f"vmap: the batched arguments disagree on the batch size "
                         f"({described}); every batched axis must have the same length")
    devices = {id(t._state) for t, _, _ in leaves}
    if len(devices) != 1:
        raise ValueError("vmap: the batched arguments live on different devices; move them "
                         "to one with .to(device)")
    return sizes.pop()


def _forget_traced(state: Any, inputs: dict) -> None:
    """Tensors made while tracing that depend on a stand-in can never be computed: take
    them off the device's pending list (the batched results replace them). The whole list
    is filtered: a sync inside the function may have emptied and refilled it."""
    memo: dict = {}
    state.pending = [ref for ref in state.pending if (t := ref()) is not None
                     and not batching.depends_on(t._node, inputs, memo)]


# ---- results ------------------------------------------------------------------------------

def _out_axes(out_axes: Axes, n: int) -> list:
    if isinstance(out_axes, (list, tuple)):
        if len(out_axes) != n:
            raise ValueError(f"vmap: out_axes has {len(out_axes)} entries for {n} outputs")
        return list(out_axes)
    return [out_axes] * n


def _place(traced: Tensor, node: Any, size: int, axis: Any) -> Tensor:
    if axis is None:
        if node is not None:
            raise ValueError("vmap: out_axes=None for an output that depends on the batched "
                             "arguments (it differs per batch element)")
        return traced
    if node is None:       # the same for every element: repeated, as JAX does
        node = batching.lift(traced._node, size)
    ndim = len(node.shape)
    if not -ndim <= axis < ndim:
        raise ValueError(f"vmap: out_axes={axis} is out of range for a result of rank {ndim}")
    axis %= ndim
    if axis:
        perm = list(range(1, ndim))
        perm.insert(axis, 0)
        node = apply("transpose", node, permutation=tuple(perm))
    return Tensor._wrap(node, traced._state)

