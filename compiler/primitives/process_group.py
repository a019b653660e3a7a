"""Where the collective primitives (compiler/primitives/collectives.py) find the group of
processes they combine values across.

The compiler only defines what a collective computes; the communicator that moves the
bytes (MPI through mpi4py, see devices/collectives.py) is installed at run time by
`lazyarray.distributed.init()`. Until then every program runs as a group of one process,
where each collective is the identity: the same code runs with and without a launcher.
"""
from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class Communicator(Protocol):
    rank: int
    size: int

    def all_reduce(self, x: np.ndarray, kind: str) -> np.ndarray: ...

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray: ...

    def all_gather(self, x: np.ndarray) -> np.ndarray: ...


class SingleProcess:
    """The group of one: what every collective means without a launcher."""

    rank, size = 0, 1

    def all_reduce(self, x: np.ndarray, kind: str) -> np.ndarray:
        return np.array(x, copy=True)

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray:
        return np.array(x, copy=True)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        return np.array(x, copy=True)[None]


_CURRENT: list = [SingleProcess()]


def communicator() -> Any:
    return _CURRENT[0]


def run_on_cuda(device: Any, ins: Any, out: Any, operands: list) -> bool:
    """A collective step on a CUDA device's own buffers and stream, where the group's
    communicator can (NCCL: devices/cuda/nccl_communicator.py); False: the device runs the
    primitive's reference on the host instead (MPI, or the identity in a group of one)."""
    run = getattr(_CURRENT[0], "run_on_cuda", None)
    return bool(run is not None and run(device, ins, out, operands))


def set_communicator(comm: Any) -> None:
    _CURRENT[0] = comm if comm is not None else SingleProcess()
