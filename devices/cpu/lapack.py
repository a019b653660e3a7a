"""SciPy's LAPACK for the CPU device's generated decomposition kernels
(compiler/codegen/lapack_kernels.py): the addresses of `scipy.linalg.cython_lapack`'s C
entry points, written into each kernel's routine table when its code is loaded; after a
run, the kernels' failure records turned into errors.

SciPy is optional (the `linalg` extra): without it, or without one of a step's routines,
`addresses` answers None and the device runs the step's NumPy fallback instead.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Any, Optional

import numpy as np

from .blas_threads import BLAS_THREADS

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


@functools.lru_cache(maxsize=None)
def _capsules() -> Optional[dict]:
    """name -> capsule of cython_lapack's C API, or None without SciPy."""
    try:
        from scipy.linalg import cython_lapack
    except ImportError:
        return None
    # SciPy's OpenBLAS is now loaded: the BLAS threads held to one while a program runs
    # (blas_threads.py) must include it
    BLAS_THREADS.forget()
    return dict(cython_lapack.__pyx_capi__)


def available() -> bool:
    return _capsules() is not None


@functools.lru_cache(maxsize=None)
def address(name: str) -> Optional[int]:
    capsules = _capsules()
    capsule = None if capsules is None else capsules.get(name)
    if capsule is None:
        return None
    return _get_pointer(capsule, _get_name(capsule))


def addresses(names: list) -> Optional[list]:
    """The routines' addresses in order, or None if SciPy or one of them is missing."""
    found = [address(n) for n in names]
    return None if any(a is None for a in found) else found


class Bound:
    """A loaded LAPACK step: its table filled, its failure record readable."""

    __slots__ = ("status", "info", "_keep")

    def __init__(self, code: Any, step: Any, found: list) -> None:
        meta = step.lapack
        n = len(found)
        table = (ctypes.c_void_p * n).from_address(code.global_address(meta["table"]))
        table[:] = found
        words = (ctypes.c_int64 * 3).from_address(code.global_address(meta["status"]))
        self.status = np.ctypeslib.as_array(words)
        self.info = meta
        self._keep = code

    def raise_failure(self) -> None:
        """If a matrix failed in the last run: clear the record and raise numpy's
        LinAlgError naming the op, the input's shape and the matrix."""
        if not self.status[0]:
            return
        matrix, info, check = (int(x) for x in self.status)
        self.status[:] = 0
        meta = self.info
        routine, what = meta["checks"][check]
        shape = tuple(meta["shape"])
        if info < 0:
            what = f"failed: LAPACK {routine} rejected its argument {-info}"
        where = ""
        if len(shape) > 2:
            index = tuple(int(i) for i in np.unravel_index(matrix - 1, shape[:-2]))
            where = f"matrix {index}, "
        raise np.linalg.LinAlgError(f"{meta['op']}: a matrix of the input {shape} {what} "
                                    f"({where}LAPACK {routine} info={info})")
