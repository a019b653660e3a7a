"""`vmap` through control flow: the batching rules of `while`, `conditional` and
`get_tuple_element` (compiler/primitives/control.py names them).

Every value of a batched loop's state or a batched conditional's operands gets the batch
axis (an unbatched one is broadcast): the sub-computations are batched as whole graphs
(compiler/transforms/batching.py `batch_graph` over the module inlined on placeholders), so the
tuple a batched op yields has the batch axis on every element and `get_tuple_element`'s
rule is the element itself.

- while (JAX's rule for a batched predicate): the loop runs while any lane's condition
  holds; an iteration computes every lane's new state and keeps it only where that
  lane's condition holds (a finished lane's state stays as it was).
- call: the computation batched as a whole graph, called on the batched operands.
- conditional with a batched index: every branch runs on the whole batch and each lane
  takes its branch's results (select); with an unbatched index only the branch taken
  runs, on the batched operands.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..hlo import dtypes as D
from .batching import lift
from ..hlo.computation import build_computation, inline, placeholders
from ..hlo.module import Module
from ..graph.node import Node, kept_constant
from ..primitive import apply


def _all_batched(size: int, operands: Sequence[Node], batched: Sequence[bool]) -> list:
    return [o if b else lift(o, size) for o, b in zip(operands, batched)]


def _batched_graph(module: Module, args: Sequence[Node], size: int) -> list:
    """The module's outputs for the batched `args` (batch axis 0 on each)."""
    from .batching import batch_graph
    per_lane = placeholders([_Type(a.shape[1:], a.dtype) for a in args])
    outs = inline(module, per_lane)
    batched = batch_graph(outs, {id(p): a for p, a in zip(per_lane, args)}, size)
    return [b if b is not None else lift(o, size) for b, o in zip(batched, outs)]


class _Type:
    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = tuple(shape), dtype


def _lanes(pred: Node, like: Node) -> Node:
    """A (size,) predicate broadcast to `like`'s shape (batch axis 0)."""
    return apply("broadcast_in_dim", pred, shape=tuple(like.shape), broadcast_dimensions=(0,))


def _any(pred: Node) -> Node:
    return apply("reduce", pred, axes=(0,), kind="or")


def while_batch(node: Node, size: int, operands: list, batched: list) -> Node:
    cond, body = node.attrs["cond"], node.attrs["body"]
    init = _all_batched(size, operands, batched)
    ph = placeholders(init)
    pred = _batched_graph(cond, ph, size)[0]
    cond_m = build_computation("cond", ph, [_any(pred)])
    ph2 = placeholders(init)
    active = _batched_graph(cond, ph2, size)[0]
    new = _batched_graph(body, ph2, size)
    kept = [apply("select", _lanes(active, n), n, old) for n, old in zip(new, ph2)]
    body_m = build_computation("body", ph2, kept)
    return apply("while", *init, cond=cond_m, body=body_m, scan=None)


def conditional_batch(node: Node, size: int, operands: list, batched: list) -> Node:
    branches = node.attrs["branches"]
    index, args = operands[0], _all_batched(size, operands[1:], batched[1:])
    if not batched[0]:               # one branch for every lane: only it runs
        new = []
        for k, b in enumerate(branches):
            ph = placeholders(args)
            new.append(build_computation(f"branch{k}", ph, _batched_graph(b, ph, size)))
        return apply("conditional", index, *args, branches=tuple(new))
    # a branch per lane: all run, each lane selects its own (index clamped, as HLO's)
    ph = placeholders([index] + args)
    idx, vals = ph[0], ph[1:]
    idx = apply("clamp", _full(0, idx), idx, _full(len(branches) - 1, idx))
    outs = _batched_graph(branches[-1], vals, size)
    for k in range(len(branches) - 2, -1, -1):
        mine = _batched_graph(branches[k], vals, size)
        take = apply("compare", idx, _full(k, idx), direction="EQ")
        outs = [apply("select", _lanes(take, m), m, o) for m, o in zip(mine, outs)]
    one = build_computation("branch0", ph, outs)
    return apply("conditional", kept_constant(0, D.int32), index, *args, branches=(one,))


def _full(value: int, like: Node) -> Node:
    return apply("broadcast_in_dim", kept_constant(value, like.dtype), shape=tuple(like.shape),
                 broadcast_dimensions=())


def get_tuple_element_batch(node: Node, size: int, operands: list, batched: list) -> Node:
    return apply("get_tuple_element", operands[0], index=node.attrs["index"])


def call_batch(node: Node, size: int, operands: list, batched: list) -> Node:
    args = _all_batched(size, operands, batched)
    ph = placeholders(args)
    outs = _batched_graph(node.attrs["computation"], ph, size)
    return apply("call", *args, computation=build_computation("batched", ph, outs))
