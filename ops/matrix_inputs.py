"""How a matrix function that computes through a library takes its inputs and gives its
results back: integer and bool inputs compute in the default float, float16 and bfloat16
in float32 and round back; the rank and squareness its inputs need, checked at the
caller's line. Shared by the decompositions and by what linalg builds on them (cond)."""
from __future__ import annotations

from typing import Any

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from .promotion import as_node, convert, shape_str

HALF = (D.float16, D.bfloat16)


def is_complex(d: D.DType) -> bool:
    return getattr(d, "is_complex", False)


def floating(op: str, *xs: Any) -> tuple:
    """(nodes in the dtype the library computes in, the dtype results come back in)."""
    nodes = [as_node(x) for x in xs]
    dtype = D.result_type(*[x.dtype for x in nodes])
    if dtype is D.bool_ or dtype.is_int:
        dtype = D.DEFAULT_FLOAT
    work = D.float32 if dtype in HALF else dtype
    return [convert(x, work) for x in nodes], dtype


def back(x: Node, dtype: D.DType) -> Node:
    """A result (in the library's dtype) in the input's dtype `dtype`."""
    return convert(x, dtype) if x.dtype is not dtype and not is_complex(x.dtype) else x


def back_real(x: Node, dtype: D.DType) -> Node:
    """A real result (eigenvalues, singular values) of an input in `dtype`."""
    return convert(x, dtype) if dtype in HALF else x


def check_matrix(op: str, x: Node, square: bool = True) -> None:
    if x.ndim < 2:
        raise ValueError(f"{op}: needs a matrix or a stack of matrices (rank >= 2), got "
                         f"shape {shape_str(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ValueError(f"{op}: needs square matrices, got shape {shape_str(x.shape)} "
                         f"({x.shape[-2]} x {x.shape[-1]})")
