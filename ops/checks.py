"""Argument checks shared by ops: sizes, counts and shapes are checked where the op is
recorded (the user's line), never left for the compiler or the run to trip over."""
from __future__ import annotations

from typing import Any

import numpy as np


def is_int(v: Any) -> bool:
    """An int, a NumPy integer; not a bool (True is not a size)."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def size(op: str, what: str, v: Any) -> int:
    """A non-negative int argument (a size, a count), as an int."""
    if not is_int(v):
        raise TypeError(f"{op}: {what} must be a non-negative int, got "
                        f"{type(v).__name__} {v!r}")
    if v < 0:
        raise ValueError(f"{op}: {what} must be a non-negative int, got {v}")
    return int(v)


def integer(op: str, what: str, v: Any) -> int:
    """Any int argument (an offset, a diagonal), as an int."""
    if not is_int(v):
        raise TypeError(f"{op}: {what} must be an int, got {type(v).__name__} {v!r}")
    return int(v)


def shape(op: str, dims: Any) -> tuple:
    """A shape given as an int or a sequence of non-negative ints."""
    if is_int(dims):
        dims = (dims,)
    elif not isinstance(dims, (tuple, list)):
        try:
            dims = tuple(dims)
        except TypeError:
            raise TypeError(f"{op}: a shape is an int or a sequence of ints, got "
                            f"{type(dims).__name__} {dims!r}") from None
    out = []
    for d in dims:
        if not is_int(d):
            raise TypeError(f"{op}: shape {tuple(dims)} has {type(d).__name__} {d!r}; "
                            "sizes must be non-negative ints")
        if d < 0:
            raise ValueError(f"{op}: negative dimensions are not allowed, got shape "
                             f"{tuple(int(x) for x in dims)}")
        out.append(int(d))
    return tuple(out)
