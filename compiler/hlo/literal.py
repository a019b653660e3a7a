"""A constant value inside the HLO: a NumPy array that hashes by content."""
from __future__ import annotations

import numpy as np


class Literal:
    """Immutable wrapper so that constants can sit in attributes and fingerprints."""

    __slots__ = ("array", "_key")

    def __init__(self, array: np.ndarray) -> None:
        array = np.array(array, copy=True)
        array.setflags(write=False)
        self.array = array
        self._key = (array.dtype.str, array.shape, array.tobytes())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Literal) and self._key == other._key

    def __repr__(self) -> str:
        return f"Literal({self.array.tolist()!r})"
