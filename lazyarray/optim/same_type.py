"""Elementwise arithmetic over nodes that all share one shape and one floating dtype,
recorded as graph nodes directly.

An optimizer's update is a chain of a dozen elementwise ops per parameter over operands of
the parameter's own shape and dtype (its gradient, its state, and hyper-parameters already
broadcast to its shape). `ops` would record each of them after checks that cannot fail
there; `SameType` records the same primitives with the same operands, so the graph (and
the compiled program) is the one `ops` gives, at a fraction of the host time. It offers
the names of `ops` that the updates use, so an update is written once over either
recorder (see `recorder`); tests/test_optim.py checks that both give the same graph.
"""
from __future__ import annotations

from typing import Any

from .. import ops
from ..compiler.graph.node import Node
from ..compiler.primitive import apply


class SameType:
    """`ops`'s add, subtract, multiply, divide, negative, square and sqrt for operands of
    one shape and one dtype (the caller guarantees it: see `recorder`)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape = shape
        self.dtype = dtype

    def add(self, a: Node, b: Node) -> Node:
        return apply("add", a, b)

    def subtract(self, a: Node, b: Node) -> Node:
        return apply("subtract", a, b)

    def multiply(self, a: Node, b: Node) -> Node:
        return apply("multiply", a, b)

    def divide(self, a: Node, b: Node) -> Node:
        return apply("divide", a, b)

    def negative(self, a: Node) -> Node:
        return apply("negate", a)

    def square(self, a: Node) -> Node:
        return apply("multiply", a, a)

    def sqrt(self, a: Node) -> Node:
        return apply("sqrt", a)


def recorder(param: Node, *others: Node) -> Any:
    """`SameType` for `param`'s shape and dtype when every node of `others` has both and
    the dtype is floating point (where `ops` records exactly these nodes with no promotion
    or broadcast); `ops` itself otherwise (a state tensor loaded with another shape: its
    checks then raise or broadcast as they would anyway)."""
    shape, dtype = param.shape, param.dtype
    if not dtype.is_float:
        return ops
    for o in others:
        if o.dtype is not dtype or o.shape != shape:
            return ops
    return SameType(shape, dtype)
