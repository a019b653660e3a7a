"""Loading a C library by ctypes from a list of candidate paths and declaring its
prototypes: what the NCCL and cuFFT bindings share (each keeps its own prototype table,
wrapper class and install hint)."""
from __future__ import annotations

import ctypes
import os
from typing import Any, Callable, Iterable


def bind(lib: Any, prototypes: dict) -> Any:
    """Declare every prototype {name: (restype, argtypes)} on a loaded CDLL (raises
    AttributeError for a missing one)."""
    for name, (restype, argtypes) in prototypes.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def load_first(paths: Iterable[str], prototypes: dict, wrap: Callable[[Any, str], Any],
               what: str, missing: str, install: str) -> tuple:
    """(wrap(bound library, its path), None) for the first path that loads and binds, or
    (None, why none did): every failure is named, then how to install the library."""
    errors = []
    for path in paths:
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        try:
            return wrap(bind(lib, prototypes), path), None
        except AttributeError as e:
            errors.append(f"{path} lacks a function: {e}")
    found = "; ".join(errors) if errors else missing
    return None, f"{what} cannot be loaded ({found}): {install}"
