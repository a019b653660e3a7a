"""Host calls: a primitive's NumPy reference run on the CPU device (sorts, FFTs, the
decompositions' fallbacks), written into the planned buffer.

The general path calls `host_call` with NumPy arrays; a native program runs a host step
between two of its native jobs (`HostStep`), on the calling thread (a collective's
communicator, NumPy's error state and the config are the caller's), over the buffers its
address table names. Either way a large call's rows split over the native pool
(`NativePool.run_python`: NumPy lets the GIL go in its loops).
"""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ...compiler.primitive import PRIMITIVES
from ...compiler.program import LibraryStep, ValueInfo
from .native_pool import split

HOST_SPLIT_BYTES = 1 << 20     # a host call's result this large is split over the pool


def host_call(step: LibraryStep, v: ValueInfo, operands: list, out: np.ndarray,
              pool: Any) -> None:
    """The primitive's NumPy reference (from its stanza), written into the planned buffer:
    by the stanza's `into` where it has one (straight into `out`, a large batch split
    over the pool: NumPy's loops release the GIL), else computed and copied."""
    call = PRIMITIVES[v.op].library
    with np.errstate(all="ignore"):
        if call is not None and call.into is not None:
            _host_into(call, v, operands, out, pool)
            return
        result = PRIMITIVES[v.op].reference(*operands, **v.attrs)
    out[...] = np.asarray(result).astype(out.dtype, copy=False).reshape(out.shape)


def _host_into(call: Any, v: ValueInfo, operands: list, out: np.ndarray, pool: Any) -> None:
    rows = _split_rows(call, v, operands, pool.threads)
    if rows <= 1:
        call.into(out, *operands, **v.attrs)
        return

    def block(_: int, s: int, e: int) -> None:
        with np.errstate(all="ignore"):
            call.into(out[s:e], *[o[s:e] for o in operands], **v.attrs)
    pool.run_python(block, split(rows, min(rows, pool.threads)))


def _split_rows(call: Any, v: ValueInfo, operands: list, threads: int) -> int:
    """The rows of the result a call may be split by over `threads` threads (axis 0 a
    batch axis, the result large), else 0."""
    rows = v.shape[0] if v.shape else 0
    if threads <= 1 or call is None or call.into is None or call.batch_axis0 is None \
            or rows <= 1 or v.nbytes < HOST_SPLIT_BYTES:
        return 0
    return rows if call.batch_axis0(*operands, **v.attrs) else 0


def calls_lapack(step: LibraryStep) -> bool:
    """Whether a host step is a decomposition's fallback (NumPy's LAPACK)."""
    return PRIMITIVES[step.op].library.lapack is not None


def _array_at(address: int, v: ValueInfo) -> np.ndarray:
    """The array of value `v` over the memory at `address`."""
    if not v.nbytes or not address:
        return np.empty(v.shape, v.dtype.np)
    memory = (ctypes.c_char * v.nbytes).from_address(address)
    return np.frombuffer(memory, v.dtype.np).reshape(v.shape)


class HostStep:
    """A step a native program runs from Python between two of its jobs: `call` (a host
    call, or library_calls.py's product for one the native tiles do not cover) over the
    buffers at `indices` of the program's address table (set for the run before it
    starts)."""

    def __init__(self, values: dict, step: LibraryStep, indices: list, table: np.ndarray,
                 call: Any = None) -> None:
        self.step, self.value, self.indices, self.table = step, values[step.pos], indices, table
        self.operand_values = [values[o] for o in step.operands]
        self.call = call                  # None: `host_call` (looked up at each run)

    def run(self, pool: Any) -> None:
        at = self.table.item
        operands = [_array_at(at(i), v) for i, v in zip(self.indices, self.operand_values)]
        call = self.call or host_call
        call(self.step, self.value, operands, _array_at(at(self.indices[-1]), self.value), pool)
