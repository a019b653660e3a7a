"""Set functions over nodes that keep static shapes (the array API's `isin`); the unique
family changes shapes with the data and lives with the graph breaks
(lazyarray/graph_break.py)."""
from __future__ import annotations

from typing import Any

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .manipulation import reshape
from .promotion import as_node, broadcast_to, convert, scalar
from .searching import COUNT_LIMIT, binary_search, compare
from .sorting import sort


def isin(x1: Any, x2: Any, *, invert: bool = False) -> Node:
    """Whether each element of x1 equals some element of x2 (the array API's and NumPy's
    isin; values compared after promotion, NaN is in nothing). Traceable: a short x2 is
    compared with every element; a long one is sorted and binary-searched."""
    a, b = as_node(x1), as_node(x2)
    dtype = D.promote(a.dtype, b.dtype)
    if dtype.is_complex:
        raise TypeError(f"isin: needs real or bool values, got {a.dtype.name} and {b.dtype.name}")
    a, b = convert(a, dtype), reshape(convert(b, dtype), (-1,))
    n = b.shape[0]
    if n == 0:
        found = broadcast_to(scalar(False, D.bool_), a.shape)
    elif n <= COUNT_LIMIT:
        shape = a.shape + (n,)
        each = compare(apply("broadcast_in_dim", a, shape=shape,
                              broadcast_dimensions=tuple(range(a.ndim))),
                        apply("broadcast_in_dim", b, shape=shape, broadcast_dimensions=(a.ndim,)),
                        "EQ")
        found = apply("reduce", each, axes=(a.ndim,), kind="or")
    else:
        s = sort(b)
        at = apply("minimum", binary_search(s, a, "left"), broadcast_to(scalar(n - 1, D.int64), a.shape))
        found = compare(apply("gather", s, at, axis=0), a, "EQ")
    return apply("not", found) if invert else found


__all__ = ["isin"]
