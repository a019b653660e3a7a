"""A stand-in for libnccl over the fake CUDA driver (cuda_fake.py), so that the CUDA
device's NCCL path — the binding (nccl_library.Nccl), the communicator, buffers, stream
order — runs under `mpiexec` on machines without a GPU, as cuda_fake's FakeCublas does
for cuBLAS.

It has libnccl's C functions under their names, taking what the binding passes to the
real library (ctypes references, addresses, a stream's handle), and checks what NCCL
checks: every rank passes the same unique id, its own rank and the same number of ranks;
buffers lie in live device allocations; types and operators are NCCL's. A collective is
queued on its stream like a kernel (inside a group, at ncclGroupEnd) and, when the stream
runs it, moves the fake device's host memory between the processes through MPI
(mpi4py), the way NCCL moves GPU memory: so a result read before the stream is waited
for is wrong here as on a GPU.
"""
from __future__ import annotations

import ctypes
import itertools
import os
from typing import Any, Callable, Optional

import numpy as np

from .cuda_fake import FAKE_DRIVER, FakeDriver, FakeError
from ..cuda.nccl_library import RESULTS, TYPES, UNIQUE_ID_BYTES, REDUCE_OPS

FAKE_VERSION = 29900                     # "2.99.0": not a release, so never mistaken for one
_DTYPES = {code: dtype for dtype, code in TYPES.items()}
_OPS = {code: op for op, code in REDUCE_OPS.items()}
_TEXT = ("no error", "unhandled cuda error", "unhandled system error", "internal error",
         "invalid argument", "invalid usage", "remote process exited or there was a network error",
         "NCCL operation in progress", "operation timed out")
INVALID_ARGUMENT, INVALID_USAGE = RESULTS.index("ncclInvalidArgument"), RESULTS.index("ncclInvalidUsage")


def _world_wire() -> Any:
    """The processes the stand-in reaches: its own duplicate of MPI's COMM_WORLD."""
    from mpi4py import MPI
    return MPI.COMM_WORLD.Dup()


class FakeNccl:
    """libnccl's functions (the subset nccl_library binds) over the fake driver's memory."""

    def __init__(self, driver: FakeDriver = FAKE_DRIVER,
                 wire: Callable[[], Any] = _world_wire) -> None:
        self.driver = driver
        self._wire = wire
        self.comms: dict = {}            # handle -> MPICommunicator over its wire
        self._ids = itertools.count(0x7000)
        self._group_depth = 0
        self._grouped: list = []         # (stream, what, work) until ncclGroupEnd
        self._last = ""
        self.calls: dict = {}            # function name -> count (tests read it)

    def _fail(self, code: int, text: str) -> int:
        self._last = text
        return code

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    # ---- set-up ----------------------------------------------------------------------

    def ncclGetVersion(self, ref: Any) -> int:
        ref._obj.value = FAKE_VERSION
        return 0

    def ncclGetUniqueId(self, ref: Any) -> int:
        ctypes.memmove(ctypes.addressof(ref._obj), os.urandom(UNIQUE_ID_BYTES), UNIQUE_ID_BYTES)
        return 0

    def ncclCommInitRank(self, ref: Any, nranks: int, uid: Any, rank: int) -> int:
        from ..collectives import MPICommunicator
        self._count("ncclCommInitRank")
        wire = self._wire()
        if nranks != wire.Get_size() or rank != wire.Get_rank():
            return self._fail(INVALID_ARGUMENT,
                              f"rank {rank} of {nranks}, but this process is rank "
                              f"{wire.Get_rank()} of {wire.Get_size()}")
        ids = wire.allgather(bytes(uid))
        if any(i != ids[0] for i in ids):
            return self._fail(INVALID_USAGE, "the ranks passed different unique ids "
                                             "(rank 0's must reach every rank)")
        handle = next(self._ids)
        self.comms[handle] = MPICommunicator(wire)
        ref._obj.value = handle
        return 0

    def _comm(self, handle: Any) -> Optional[Any]:
        return self.comms.get(int(handle or 0))

    def ncclCommDestroy(self, handle: Any) -> int:
        comm = self.comms.pop(int(handle or 0), None)
        if comm is None:
            return self._fail(INVALID_ARGUMENT, "not a live communicator")
        self.driver._flush_all()         # NCCL waits for the communicator's work
        comm.comm.Free()
        return 0

    ncclCommAbort = ncclCommDestroy

    def ncclCommGetAsyncError(self, handle: Any, ref: Any) -> int:
        if self._comm(handle) is None:
            return self._fail(INVALID_ARGUMENT, "not a live communicator")
        ref._obj.value = 0
        return 0

    def ncclCommCount(self, handle: Any, ref: Any) -> int:
        comm = self._comm(handle)
        if comm is None:
            return self._fail(INVALID_ARGUMENT, "not a live communicator")
        ref._obj.value = comm.size
        return 0

    def ncclCommUserRank(self, handle: Any, ref: Any) -> int:
        comm = self._comm(handle)
        if comm is None:
            return self._fail(INVALID_ARGUMENT, "not a live communicator")
        ref._obj.value = comm.rank
        return 0

    def ncclGetErrorString(self, code: int) -> bytes:
        return (_TEXT[code] if 0 <= code < len(_TEXT) else "unknown result code").encode()

    def ncclGetLastError(self, handle: Any) -> bytes:
        return self._last.encode()

    # ---- groups ----------------------------------------------------------------------

    def ncclGroupStart(self) -> int:
        self._group_depth += 1
        return 0

    def ncclGroupEnd(self) -> int:
        if self._group_depth == 0:
            return self._fail(INVALID_USAGE, "ncclGroupEnd without ncclGroupStart")
        self._group_depth -= 1
        if self._group_depth == 0:
            grouped, self._grouped = self._grouped, []
            for stream, what, work in grouped:
                self.driver._enqueue(stream, what, work)
        return 0

    # ---- collectives -----------------------------------------------------------------

    def ncclAllReduce(self, send: int, recv: int, count: int, dtype: int, op: int,
                      handle: Any, stream: Any) -> int:
        if op not in _OPS:
            return self._fail(INVALID_ARGUMENT, f"ncclAllReduce: {op} is not a reduction operator")
        return self._collective("ncclAllReduce", send, recv, count, count, dtype, handle, stream,
                                lambda comm, x: comm.all_reduce(x, _OPS[op]))

    def ncclBroadcast(self, send: int, recv: int, count: int, dtype: int, root: int,
                      handle: Any, stream: Any) -> int:
        comm = self._comm(handle)
        if comm is not None and not 0 <= root < comm.size:
            return self._fail(INVALID_ARGUMENT, f"ncclBroadcast: root {root} is not a rank")
        return self._collective("ncclBroadcast", send, recv, count, count, dtype, handle, stream,
                                lambda comm, x: comm.broadcast(x, root))

    def ncclAllGather(self, send: int, recv: int, count: int, dtype: int, handle: Any,
                      stream: Any) -> int:
        comm = self._comm(handle)
        size = comm.size if comm is not None else 1
        return self._collective("ncclAllGather", send, recv, count, count * size, dtype, handle,
                                stream, lambda comm, x: comm.all_gather(x))

    def _collective(self, name: str, send: int, recv: int, count: int, recv_count: int,
                    dtype: int, handle: Any, stream: Any, move: Callable) -> int:
        self._count(name)
        comm = self._comm(handle)
        if comm is None:
            return self._fail(INVALID_ARGUMENT, f"{name}: not a live communicator")
        if dtype not in _DTYPES:
            return self._fail(INVALID_ARGUMENT, f"{name}: {dtype} is not an NCCL data type")
        queue = self._stream(stream)
        if queue is None:
            return self._fail(INVALID_ARGUMENT, f"{name}: {stream} is not a stream")
        np_type = _DTYPES[dtype]
        try:                              # NCCL checks the pointers at the call
            for ptr, n, what in ((send, count, "sendbuff"), (recv, recv_count, "recvbuff")):
                if n:
                    self.driver._check_device(int(ptr or 0), n * np_type.itemsize, f"{name} {what}")
        except FakeError as e:
            return self._fail(INVALID_ARGUMENT, str(e))
        send, recv = int(send or 0), int(recv or 0)

        def work() -> None:
            if not count:
                return
            x = np.frombuffer(ctypes.string_at(send, count * np_type.itemsize), np_type)
            out = np.ascontiguousarray(move(comm, x), np_type)
            ctypes.memmove(recv, out.ctypes.data, recv_count * np_type.itemsize)
        if self._group_depth:
            self._grouped.append((queue, name, work))
        else:
            self.driver._enqueue(queue, name, work)
        return 0

    def _stream(self, stream: Any) -> Optional[Any]:
        for s in self.driver._streams:
            if int(s) == int(stream or 0):
                return s
        return None
