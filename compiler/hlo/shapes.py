"""Shapes: static tuples of dimension sizes."""
from __future__ import annotations


def num_elements(shape: tuple) -> int:
    """How many elements an array of `shape` holds (1 for a scalar's ())."""
    n = 1
    for d in shape:
        n *= int(d)
    return n
