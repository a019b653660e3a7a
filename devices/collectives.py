"""The communicators that carry collectives between processes.

`MPICommunicator` runs them on MPI through mpi4py (for CPU processes; a CUDA device's
collective steps reach it through host buffers, with a note). It implements the protocol
in compiler/primitives/process_group.py; `lazyarray.distributed.init()` installs it, or the NCCL one of
nccl_communicator.py, which sends host arrays here and CUDA buffers to NCCL.
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..compiler.hlo import dtypes as D

# MPI has no float16/bfloat16 reductions everywhere: they travel as float32, and bool as
# uint8 (max/min are then logical or/and)
_WIDENED = {np.dtype(np.float16): np.float32, np.dtype(D.bfloat16.np): np.float32,
            np.dtype(np.bool_): np.uint8}


_NOTED: set = set()


def note(text: str) -> None:
    """Say once per process that a collective takes the slower path, and why."""
    if text not in _NOTED:
        _NOTED.add(text)
        warnings.warn(text, RuntimeWarning, stacklevel=3)


class MPICommunicator:
    backend = "mpi"

    def __init__(self, comm: Any = None) -> None:
        from mpi4py import MPI
        self._mpi = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self._ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
        self.counts = {"nccl": 0, "host": 0}     # collectives run, by path

    def local_rank(self) -> tuple:
        """(this process's rank among those on its host, how many there are)."""
        local = self.comm.Split_type(self._mpi.COMM_TYPE_SHARED)
        try:
            return local.Get_rank(), local.Get_size()
        finally:
            local.Free()

    def run_on_cuda(self, device: Any, ins: Any, out: Any, operands: list) -> bool:
        """Never on the GPU here: the CUDA device copies the operand to the host for MPI."""
        note(f"distributed: {ins.op} of a tensor on {device.name} goes through host memory "
             f"on MPI (backend 'mpi'); init(backend='nccl') keeps it on the GPU")
        return False

    def all_reduce(self, x: np.ndarray, kind: str) -> np.ndarray:
        self.counts["host"] += 1
        send = _wire(x)
        out = np.empty_like(send)
        self.comm.Allreduce(send, out, op=self._ops[kind])
        return out.astype(x.dtype, copy=False).reshape(x.shape)

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray:
        if not 0 <= root < self.size:
            raise ValueError(f"broadcast: root {root} is not a rank of this group of "
                             f"{self.size} processes")
        self.counts["host"] += 1
        buf = np.array(_wire(x), copy=True)
        self.comm.Bcast(buf, root=root)
        return buf.astype(x.dtype, copy=False).reshape(x.shape)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        self.counts["host"] += 1
        send = _wire(x)
        out = np.empty((self.size,) + send.shape, send.dtype)
        self.comm.Allgather(send, out)
        return out.astype(x.dtype, copy=False)

    def barrier(self) -> None:
        self.comm.Barrier()


def _wire(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    wide = _WIDENED.get(x.dtype)
    return np.ascontiguousarray(x if wide is None else x.astype(wide))
