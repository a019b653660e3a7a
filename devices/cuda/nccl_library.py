"""NCCL, the collective library of NVIDIA GPUs, through ctypes: libnccl.so.2 from the
`nvidia-nccl-cu12` wheel (its `nvidia/nccl/lib`), else wherever the system's loader finds
it. `Nccl` wraps the few C functions the CUDA device's collective path calls (unique id,
communicator set-up, all-reduce, broadcast, all-gather, groups) and turns a failed call's
ncclResult_t into an `NcclError` that names the call, the result and NCCL's own words.

`Nccl` calls its functions through any object that has them under their C names: the
loaded library, or the host-memory stand-in of nccl_fake.py (for the fake CUDA driver),
so that this wrapper is the same code on both.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
from contextlib import contextmanager
from typing import Any, Iterator, Optional

import numpy as np

from ...compiler.hlo import dtypes as D
from .. import ctypes_library
from ..ctypes_library import load_first

UNIQUE_ID_BYTES = 128


class UniqueId(ctypes.Structure):
    """ncclUniqueId: the 128 opaque bytes every rank passes to ncclCommInitRank."""
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


# ncclResult_t, in order; what each usually means for a user, said after NCCL's words
RESULTS = ("ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
           "ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress",
           "ncclTimeout")
HINTS = {
    1: "a CUDA call inside NCCL failed: each process needs its own GPU (its local rank's)",
    2: "a system call failed (sockets, shared memory: see NCCL_SOCKET_IFNAME, /dev/shm)",
    4: "an argument was rejected (a pointer not on this communicator's GPU, a bad type)",
    5: "the processes disagree (a different unique id, rank or number of processes)",
    6: "another process exited or its connection was lost",
}

# ncclRedOp_t and ncclDataType_t
REDUCE_OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3}
TYPES = {np.dtype(np.int8): 0, np.dtype(np.uint8): 1, np.dtype(np.int32): 2,
         np.dtype(np.uint32): 3, np.dtype(np.int64): 4, np.dtype(np.uint64): 5,
         np.dtype(np.float16): 6, np.dtype(np.float32): 7, np.dtype(np.float64): 8,
         np.dtype(D.bfloat16.np): 9}
TYPE_NAMES = ("ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64",
              "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16")
_COMPLEX_PARTS = {np.dtype(np.complex64): np.dtype(np.float32),
                  np.dtype(np.complex128): np.dtype(np.float64)}

_INT, _PTR, _SIZE = ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
# every function the binding calls: (result type, argument types); all must resolve
PROTOTYPES = {
    "ncclGetVersion": (_INT, [ctypes.POINTER(_INT)]),
    "ncclGetUniqueId": (_INT, [ctypes.POINTER(UniqueId)]),
    "ncclCommInitRank": (_INT, [ctypes.POINTER(_PTR), _INT, UniqueId, _INT]),
    "ncclCommDestroy": (_INT, [_PTR]),
    "ncclCommAbort": (_INT, [_PTR]),
    "ncclCommGetAsyncError": (_INT, [_PTR, ctypes.POINTER(_INT)]),
    "ncclCommCount": (_INT, [_PTR, ctypes.POINTER(_INT)]),
    "ncclCommUserRank": (_INT, [_PTR, ctypes.POINTER(_INT)]),
    "ncclAllReduce": (_INT, [_PTR, _PTR, _SIZE, _INT, _INT, _PTR, _PTR]),
    "ncclBroadcast": (_INT, [_PTR, _PTR, _SIZE, _INT, _INT, _PTR, _PTR]),
    "ncclAllGather": (_INT, [_PTR, _PTR, _SIZE, _INT, _PTR, _PTR]),
    "ncclGroupStart": (_INT, []),
    "ncclGroupEnd": (_INT, []),
    "ncclGetErrorString": (ctypes.c_char_p, [_INT]),
    "ncclGetLastError": (ctypes.c_char_p, [_PTR]),
}

INSTALL = "pip install 'lazyarray[distributed-gpu]' (the nvidia-nccl-cu12 wheel)"


class NcclError(RuntimeError):
    """A failed NCCL call: `call`, `code` (ncclResult_t) and `name` ('ncclInvalidUsage')."""

    def __init__(self, call: str, code: int, text: str, detail: str = "") -> None:
        self.call, self.code = call, int(code)
        self.name = RESULTS[code] if 0 <= code < len(RESULTS) else f"ncclResult {code}"
        message = f"{call} failed: {self.name} ({code}): {text}"
        if detail:
            message += f"; NCCL says: {detail}"
        if code in HINTS:
            message += f"; likely: {HINTS[code]}"
        super().__init__(message)


# ---- finding and loading the library ---------------------------------------------------

def candidate_paths() -> list:
    """Where libnccl.so.2 is looked for: the nvidia-nccl wheel's lib folder first (found
    without importing anything), then the bare name for the system's loader."""
    paths = []
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        paths.append(os.path.join(folder, "lib", "libnccl.so.2"))
    paths.append(ctypes.util.find_library("nccl") or "libnccl.so.2")
    return paths


_LOADED: list = []          # [(Nccl or None, why not)] once looked for


def load() -> tuple:
    """(the library wrapped in `Nccl`, None), or (None, why it could not be loaded)."""
    if not _LOADED:
        _LOADED.append(_load())
    return _LOADED[0]


def _load() -> tuple:
    return load_first(candidate_paths(), PROTOTYPES, Nccl, "NCCL", "libnccl.so.2 was not found",
                      INSTALL)


def bind(lib: Any) -> Any:
    """Declare every prototype on a loaded CDLL (raises AttributeError for a missing one)."""
    return ctypes_library.bind(lib, PROTOTYPES)


def wire_type(dtype: Any, reduce: Optional[str] = None) -> Optional[tuple]:
    """(ncclDataType_t, elements per value) to carry `dtype`, or None when NCCL cannot.
    Moving bytes (broadcast, gather) takes any dtype as uint8; a reduction needs NCCL's
    own type, or for complex sums the float of its two parts."""
    dtype = np.dtype(dtype)
    if reduce is None:
        return (TYPES[dtype], 1) if dtype in TYPES else (TYPES[np.dtype(np.uint8)], dtype.itemsize)
    if dtype in TYPES:
        return TYPES[dtype], 1
    if dtype in _COMPLEX_PARTS and reduce == "sum":
        return TYPES[_COMPLEX_PARTS[dtype]], 2
    return None


# ---- the wrapper ---------------------------------------------------------------------

class Nccl:
    """NCCL's functions as the communicator uses them; each raises NcclError on failure.
    Buffers and streams are raw addresses (ints); a communicator is an opaque handle."""

    def __init__(self, lib: Any, path: str = "") -> None:
        self.lib, self.path = lib, path

    def check(self, result: int, call: str, comm: Any = None) -> None:
        code = int(result)
        if code != 0:
            raise NcclError(call, code, self.error_string(code), self.last_error(comm))

    def error_string(self, code: int) -> str:
        text = self.lib.ncclGetErrorString(int(code))
        return text.decode(errors="replace") if text else ""

    def last_error(self, comm: Any = None) -> str:
        text = self.lib.ncclGetLastError(comm)
        return text.decode(errors="replace").strip() if text else ""

    def version(self) -> tuple:
        """(major, minor, patch): NCCL 2.x encodes it as major*10000 + minor*100 + patch."""
        code = _INT()
        self.check(self.lib.ncclGetVersion(ctypes.byref(code)), "ncclGetVersion")
        v = code.value
        return (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)

    def unique_id(self) -> bytes:
        uid = UniqueId()
        self.check(self.lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
        return ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES)

    def init_rank(self, nranks: int, uid: bytes, rank: int) -> Any:
        """A communicator of `nranks` processes, this one `rank`; every rank must call it
        with the same `uid` (blocks until all have)."""
        if len(uid) != UNIQUE_ID_BYTES:
            raise ValueError(f"ncclCommInitRank: a unique id has {UNIQUE_ID_BYTES} bytes, "
                             f"got {len(uid)}")
        handle = _PTR()
        ident = UniqueId.from_buffer_copy(uid)
        self.check(self.lib.ncclCommInitRank(ctypes.byref(handle), int(nranks), ident, int(rank)),
                   "ncclCommInitRank")
        return handle.value

    def count(self, comm: Any) -> int:
        n = _INT()
        self.check(self.lib.ncclCommCount(comm, ctypes.byref(n)), "ncclCommCount", comm)
        return n.value

    def user_rank(self, comm: Any) -> int:
        n = _INT()
        self.check(self.lib.ncclCommUserRank(comm, ctypes.byref(n)), "ncclCommUserRank", comm)
        return n.value

    def async_error(self, comm: Any) -> int:
        """The ncclResult_t of the communicator's asynchronous work so far (0: none)."""
        code = _INT()
        self.check(self.lib.ncclCommGetAsyncError(comm, ctypes.byref(code)),
                   "ncclCommGetAsyncError", comm)
        return code.value

    def all_reduce(self, send: int, recv: int, count: int, dtype: int, op: str, comm: Any,
                   stream: int) -> None:
        self.check(self.lib.ncclAllReduce(send, recv, count, dtype, REDUCE_OPS[op], comm, stream),
                   "ncclAllReduce", comm)

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, comm: Any,
                  stream: int) -> None:
        self.check(self.lib.ncclBroadcast(send, recv, count, dtype, int(root), comm, stream),
                   "ncclBroadcast", comm)

    def all_gather(self, send: int, recv: int, count: int, dtype: int, comm: Any,
                   stream: int) -> None:
        """`count` elements from each rank's `send`, in rank order into `recv`."""
        self.check(self.lib.ncclAllGather(send, recv, count, dtype, comm, stream),
                   "ncclAllGather", comm)

    @contextmanager
    def group(self) -> Iterator[None]:
        """ncclGroupStart/End around the calls made inside: NCCL launches them together
        at the end (their operands must not depend on each other)."""
        self.check(self.lib.ncclGroupStart(), "ncclGroupStart")
        try:
            yield
        finally:
            self.check(self.lib.ncclGroupEnd(), "ncclGroupEnd")

    def destroy(self, comm: Any) -> None:
        self.check(self.lib.ncclCommDestroy(comm), "ncclCommDestroy", comm)

    def abort(self, comm: Any) -> None:
        self.check(self.lib.ncclCommAbort(comm), "ncclCommAbort", comm)
