"""The batching transform behind `la.vmap`, and the helpers the primitives' batching
rules share.

`batch_graph(outputs, inputs, size)` walks forward from the given input nodes to the
outputs and rebuilds every node that depends on an input with one more, leading axis of
length `size`. A node that depends on no input is left as it is (it is shared by every
batch element). Each primitive says in its stanza how it is batched (`batch=`):

- a rule `rule(node, size, operands, batched) -> Node`: `node` is the unbatched
  instruction (its op, attributes and shape), `operands` its operands after batching and
  `batched[i]` whether operand i now carries the batch axis (always axis 0). The rule
  returns a node computing all `size` results at once, batch axis first;
- `LOOP_OVER_BATCH`, the explicit fallback: the primitive is applied once per batch
  element and the results are concatenated (correct for any primitive, but the graph
  grows with the batch size).

Like the reverse-mode transform, the result is made of primitives applied to nodes: a
batched computation is as lazy as any other, fuses, and can be differentiated.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..hlo import dtypes as D
from ..hlo.computation import forward_order
from ..hlo.literal import Literal
from ..graph.node import Node, constant_leaf
from ..primitive import PRIMITIVES, apply

LOOP_OVER_BATCH = "loop over the batch"


class BatchedArgument:
    """The buffer of a stand-in for one batch element of a vmapped argument: the function
    is traced on stand-ins, so reading one's value is an error that says why."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            f"vmap: the value of a batched argument ({self.dtype.short}{list(self.shape)} per "
            "element) cannot be read inside the vmapped function: it is traced once for the "
            "whole batch. Use la.where instead of Python `if` on a value, or read the "
            "result after vmap returns")

    # a runtime reads a buffer as an array, or a 0-d one as a Python number
    __array__ = __float__ = __int__ = __index__ = __complex__ = _fail

    def __repr__(self) -> str:
        return f"<batched argument {self.dtype.short}{list(self.shape)}>"


def batch_graph(outputs: Sequence[Node], inputs: dict, size: int) -> list:
    """Per output, its batched node (batch axis 0), or None when it depends on no input.
    `inputs` maps id(stand-in node) -> the node holding the whole batch (axis 0)."""
    done: dict = {}          # id(node) -> (node, batched)
    for node in forward_order(outputs, inputs):
        k = id(node)
        if k in inputs:
            done[k] = (inputs[k], True)
            continue
        pairs = [done[id(o)] for o in node.operands]
        if not any(b for _, b in pairs):
            done[k] = (node, False)
            continue
        operands = [n for n, _ in pairs]
        batched = [b for _, b in pairs]
        done[k] = (batch_node(node, size, operands, batched), True)
    return [done[id(o)][0] if done[id(o)][1] else None for o in outputs]


def batch_node(node: Node, size: int, operands: list, batched: list) -> Node:
    rule = PRIMITIVES[node.op].batch
    if rule is None:
        raise NotImplementedError(f"vmap: primitive {node.op!r} has no batching rule")
    if rule == LOOP_OVER_BATCH:
        return loop_over_batch(node, size, operands, batched)
    out = rule(node, size, operands, batched)
    if isinstance(node.dtype, tuple):        # a while's or conditional's tuple
        assert out.shape == tuple((size,) + tuple(s) for s in node.shape), (node.op, out.shape)
    else:
        assert out.shape == (size,) + node.shape, (node.op, out.shape, node.shape)
    return out


def depends_on(node: Node, inputs: dict, memo: dict) -> bool:
    """Whether `node`'s value depends on one of `inputs` (ids), memoized across calls."""
    stack = [node]
    while stack:
        n = stack[-1]
        k = id(n)
        if k in memo:
            stack.pop()
            continue
        if k in inputs:
            memo[k] = True
            stack.pop()
            continue
        todo = [o for o in n.operands if id(o) not in memo] if n.buffer is None else []
        if todo:
            stack.extend(todo)
            continue
        memo[k] = n.buffer is None and any(memo[id(o)] for o in n.operands)
        stack.pop()
    return memo[id(node)]


# ---- helpers the rules share -----------------------------------------------------------

def lift(x: Node, size: int) -> Node:
    """An unbatched operand repeated along a new leading batch axis."""
    return apply("broadcast_in_dim", x, shape=(size,) + tuple(x.shape),
                 broadcast_dimensions=tuple(range(1, len(x.shape) + 1)))


def lift_all(size: int, operands: Sequence[Node], batched: Sequence[bool]) -> list:
    return [o if b else lift(o, size) for o, b in zip(operands, batched)]


def shifted(dims: Sequence[int], by: int = 1) -> tuple:
    return tuple(int(d) + by for d in dims)


def move_to_front(x: Node, axis: int) -> Node:
    if axis == 0:
        return x
    perm = (axis,) + tuple(d for d in range(len(x.shape)) if d != axis)
    return apply("transpose", x, permutation=perm)


def same_op(node: Node, operands: Sequence[Node], **attrs: Any) -> Node:
    """`node`'s primitive on new operands, with some attributes replaced."""
    return apply(node.op, *operands, **{**node.attrs, **attrs})


def elementwise(node: Node, size: int, operands: list, batched: list) -> Node:
    """out[b, i] = f(a[b, i], ...): every operand gets the batch axis."""
    return same_op(node, lift_all(size, operands, batched))


def first_operand_only(rule: Callable) -> Callable:
    """A rule for an op whose extra operands (scalars, indices) must stay unbatched: when
    one of them is batched, the op is applied per batch element."""
    def checked(node: Node, size: int, operands: list, batched: list) -> Node:
        if any(batched[1:]):
            return loop_over_batch(node, size, operands, batched)
        return rule(node, size, operands, batched)
    return checked


def loop_over_batch(node: Node, size: int, operands: list, batched: list) -> Node:
    """The explicit fallback: one application per batch element, concatenated."""
    if size == 0:
        zero = constant_leaf(Literal(np.zeros((), node.dtype.np)), node.dtype)
        return apply("broadcast_in_dim", zero, shape=(0,) + tuple(node.shape),
                     broadcast_dimensions=())
    rows = []
    for b in range(size):
        args = [element(o, b) if f else o for o, f in zip(operands, batched)]
        y = same_op(node, args)
        rows.append(apply("reshape", y, shape=(1,) + tuple(y.shape)))
    return rows[0] if size == 1 else apply("concatenate", *rows, dimension=0)


def element(x: Node, b: int) -> Node:
    """Batch element `b` of a batched node (the batch axis dropped)."""
    n = len(x.shape)
    row = apply("slice", x, start_indices=(b,) + (0,) * (n - 1),
                limit_indices=(b + 1,) + tuple(x.shape[1:]), strides=(1,) * n)
    return apply("reshape", row, shape=tuple(x.shape[1:]))


def zero_index(starts: Sequence[Node]) -> Node:
    """A scalar 0 of the start operands' dtype: the start along the batch axis."""
    dtype = starts[0].dtype if starts else D.int32
    return constant_leaf(Literal(np.zeros((), dtype.np)), dtype)


