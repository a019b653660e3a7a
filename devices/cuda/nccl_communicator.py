"""The communicator of a process that drives a GPU: the collectives of CUDA buffers on its
device run on NCCL, queued on the device's stream like its kernels (no wait, no copy
through the host); host arrays (CPU tensors) and the set-up go through MPI
(collectives.py), which also carries NCCL's unique id from rank 0 to every rank.

The CUDA device asks `run_on_cuda` at each collective step of a program; a step NCCL
cannot take (a dtype it cannot reduce, a tensor on another GPU) returns False, with a
note, and the device runs it on the host through MPI instead.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import nccl_library
from ..collectives import MPICommunicator, note
from .nccl_library import Nccl

BACKENDS = ("auto", "nccl", "mpi")


def select_backend(requested: str, cuda_missing: Optional[str],
                   nccl_missing: Optional[str]) -> tuple:
    """(the backend to use, a note to give or None), as torch.distributed chooses: 'auto'
    is NCCL where a CUDA device and NCCL are both usable, else MPI; 'nccl' where one of
    them is missing is an error saying which."""
    if requested not in BACKENDS:
        raise ValueError(f"distributed.init: backend must be one of {BACKENDS}, got "
                         f"{requested!r}")
    if requested == "mpi":
        return "mpi", None
    if requested == "nccl":
        if cuda_missing:
            raise RuntimeError(f"distributed.init(backend='nccl'): no CUDA device: "
                               f"{cuda_missing}; use backend='mpi' for CPU processes")
        if nccl_missing:
            raise RuntimeError(f"distributed.init(backend='nccl'): {nccl_missing}")
        return "nccl", None
    if cuda_missing:
        return "mpi", None
    if nccl_missing:
        return "mpi", (f"distributed.init: CUDA tensors will reduce through host memory on "
                       f"MPI: {nccl_missing}")
    return "nccl", None


class NcclCommunicator:
    """NCCL for the CUDA buffers of `device`, MPI (`host`) for everything else."""

    backend = "nccl"

    def __init__(self, host: MPICommunicator, device: Any, nccl: Nccl) -> None:
        self.host, self.device, self.nccl = host, device, nccl
        self.rank, self.size = host.rank, host.size
        self.counts = host.counts
        uid = nccl.unique_id() if self.rank == 0 else None
        uid = host.comm.bcast(uid, root=0)
        device.activate()                   # NCCL binds the communicator to this GPU
        self.handle = nccl.init_rank(self.size, uid, self.rank)

    # host arrays: the primitives' references (CPU tensors, and the fallback)
    def all_reduce(self, x: np.ndarray, kind: str) -> np.ndarray:
        return self.host.all_reduce(x, kind)

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray:
        return self.host.broadcast(x, root)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        return self.host.all_gather(x)

    def local_rank(self) -> tuple:
        return self.host.local_rank()

    def barrier(self) -> None:
        """Every rank here, with its queued GPU work (collectives included) done."""
        self.device.synchronize()
        self.host.barrier()

    def close(self) -> None:
        self.device.synchronize()
        self.nccl.destroy(self.handle)
        self.handle = None

    def run_on_cuda(self, device: Any, ins: Any, out: Any, operands: list) -> bool:
        """Queue the collective step `ins` on the device's stream: `operands[0]` in,
        `out` (a buffer of the step's shape) written. False, with a note, when NCCL
        cannot run it (then the device runs it on the host through MPI)."""
        if self.handle is None:
            raise RuntimeError("distributed: the NCCL communicator was closed (shutdown)")
        if device is not self.device:
            note(f"distributed: {ins.op} of a tensor on {device.name} goes through host "
                 f"memory on MPI: this process's NCCL communicator is on {self.device.name}")
            return False
        (x,) = operands
        kind = ins.attrs["kind"] if ins.op == "all_reduce" else None
        wire = nccl_library.wire_type(x.dtype, kind)
        if wire is None:
            note(f"distributed: NCCL cannot all_reduce {x.dtype} with {kind!r}; such "
                 f"all_reduce steps go through host memory on MPI")
            return False
        nccl_type, per_value = wire
        count = int(np.prod(x.shape, dtype=np.int64)) * per_value
        if count:                    # (every rank has the same shape: all skip together)
            self._issue(ins, x.ptr, out.ptr, count, nccl_type, kind, int(device.stream))
        self.counts["nccl"] += 1
        return True

    def _issue(self, ins: Any, send: int, recv: int, count: int, nccl_type: int,
               kind: Optional[str], stream: int) -> None:
        if ins.op == "all_reduce":
            self.nccl.all_reduce(send, recv, count, nccl_type, kind, self.handle, stream)
        elif ins.op == "broadcast":
            self.nccl.broadcast(send, recv, count, nccl_type, int(ins.attrs["root"]),
                                self.handle, stream)
        elif ins.op == "all_gather":
            if int(ins.attrs["size"]) != self.size:
                raise ValueError(f"all_gather was recorded for a group of "
                                 f"{ins.attrs['size']} processes; this one has {self.size}")
            self.nccl.all_gather(send, recv, count, nccl_type, self.handle, stream)
        else:
            raise ValueError(f"distributed: {ins.op!r} is not a collective")
