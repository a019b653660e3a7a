"""Device memory of the CUDA device: buffers, a caching allocator, pinned staging.

The allocator keeps freed blocks in size bins and hands them out again, so a training
loop's buffers are reused across syncs without a driver call (PyTorch's caching
allocator does the same). A bin hands out its lowest address first, so a loop that frees
and allocates the same sizes each step gets the same addresses back every other step
(what lets a CUDA graph replay); `claim` takes one given free block (a graph's layout).
A block may belong to an owner (a CUDA executable that replays graphs: its private pool,
as PyTorch gives each graph one): freed, it waits for that owner only, so other programs'
buffers (an evaluation step between training steps) never take the blocks a graph wrote
into, and the owner's next run finds them where its graph expects them. An owner takes
from the shared cache when its pool has no block of the size, unless told not to (the
pool of results a caller keeps: they would eat the blocks that fresh inputs come back
to). Freed owned blocks are cached memory like the rest: `empty_cache()` returns them
to the driver too (a graph that wanted one is then recaptured), and `release(owner)`
hands an owner's blocks back to everyone. Everything the device does is ordered on one
stream, so a block freed while queued work may still read it can be handed out at once:
whatever uses it next is queued after that work. On an out-of-memory answer the
allocator waits for the stream, returns every cached block to the driver and tries
again; `empty_cache()` returns them on request. `allocated` is what live buffers hold,
`reserved` that plus the cache.

Pinned host memory (page-locked: the GPU copies it asynchronously) stages transfers;
a staging block is reused only after the event recorded behind its copy has completed.
"""
from __future__ import annotations

import heapq
import weakref
from typing import Any, Callable, Optional

import numpy as np

from ...compiler import fork_locks
from .cuda_driver import check

SMALL = 1 << 20            # below: bins of 512 bytes
SMALL_STEP = 512
LARGE_STEPS = 4            # above: 4 bins per power of two (at most 25% unused)


def bin_size(nbytes: int) -> int:
    """The size of the block that serves a request of `nbytes` (its bin)."""
    n = max(int(nbytes), 1)
    if n <= SMALL:
        return -(-n // SMALL_STEP) * SMALL_STEP
    step = 1 << (n.bit_length() - 1 - (LARGE_STEPS.bit_length() - 1))
    return -(-n // step) * step


class CachingAllocator:
    """Size-binned blocks of device memory, kept when freed and reused (see module doc)."""

    def __init__(self, driver: Callable[[], Any], stream: Any) -> None:
        self._driver, self._stream = driver, stream
        self._free: dict = {}          # bin size -> [pointers]
        self._size_of: dict = {}       # pointer -> bin size (every block we hold)
        self._owner_of: dict = {}      # pointer -> owner, for blocks in a private pool
        self._owned_free: dict = {}    # owner -> bin size -> [pointers] (its freed blocks)
        self._ended: list = []         # owners released, their pools not yet dissolved
        self._lock = fork_locks.lock()
        self.allocated = 0             # bytes in live buffers
        self.reserved = 0              # bytes taken from the driver (live + cached)
        self.driver_allocs = 0         # calls that reached the driver
        self.cache_hits = 0
        self.releases = 0              # times the cache was returned to the driver

    def alloc(self, nbytes: int, owner: Optional[int] = None, shared: bool = True) -> int:
        """A block for `nbytes`; with `owner`, from its pool first, then (when `shared`)
        from the shared cache, else a new one; the block joins the owner's pool."""
        size = bin_size(nbytes)
        with self._lock:
            if self._ended:
                self._dissolve()
            pools = [self._owned_free.get(owner, {})] if owner is not None else []
            pools += [self._free] if shared or owner is None else []
            for pool in pools:
                blocks = pool.get(size)
                if blocks:
                    ptr = heapq.heappop(blocks)
                    self.cache_hits += 1
                    self.allocated += size
                    if owner is not None:
                        self._owner_of[ptr] = owner
                    return ptr
        ptr = self._driver_alloc(size, nbytes)
        with self._lock:
            self._size_of[ptr] = size
            self.allocated += size
            self.reserved += size
            self.driver_allocs += 1
            if owner is not None:
                self._owner_of[ptr] = owner
        return ptr

    def _driver_alloc(self, size: int, wanted: int) -> int:
        cu = self._driver()
        err, ptr = cu.cuMemAlloc(size)
        if int(err) == int(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY):
            self.empty_cache()          # memory pressure: give back what is cached, retry
            err, ptr = cu.cuMemAlloc(size)
            if int(err) == int(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY):
                free, total = check(cu.cuMemGetInfo(), "cuMemGetInfo")
                raise MemoryError(f"cuda: out of memory allocating {wanted:,} bytes "
                                  f"({free:,} of {total:,} bytes free on the GPU; "
                                  f"{self.allocated:,} bytes held by live tensors)")
        check((err,), "cuMemAlloc")
        return int(ptr)

    def claim(self, ptr: int, nbytes: int, owner: Optional[int] = None) -> bool:
        """Take the cached block at `ptr` for a request of `nbytes` (with `owner`, into its
        pool); False when it is not free (a live buffer holds it), of another bin, or in
        another owner's pool."""
        size = bin_size(nbytes)
        with self._lock:
            held = self._owner_of.get(ptr)
            if held is not None and held != owner:
                return False
            pool = self._owned_free.get(held, {}) if held is not None else self._free
            blocks = pool.get(size)
            if not blocks or self._size_of.get(ptr) != size:
                return False
            try:
                blocks.remove(ptr)
            except ValueError:
                return False
            heapq.heapify(blocks)
            self.allocated += size
            if owner is not None:
                self._owner_of[ptr] = owner
            return True

    def owner(self, ptr: int) -> Optional[int]:
        """The pool the block at `ptr` belongs to (None: the shared cache)."""
        return self._owner_of.get(ptr)

    def free(self, ptr: int) -> None:
        """Give a block back to the cache, or to its owner's pool (stream-ordered reuse;
        see module doc)."""
        with self._lock:
            size = self._size_of.get(ptr)
            if size is None:
                return
            owner = self._owner_of.get(ptr)
            pool = self._free if owner is None else self._owned_free.setdefault(owner, {})
            heapq.heappush(pool.setdefault(size, []), ptr)
            self.allocated -= size

    def release(self, owner: int) -> None:
        """End `owner`'s pool: its free blocks go back to the cache, its live ones will
        when freed. Done at the next allocation: this runs from a finalizer, which the
        garbage collector may call inside any locked section of this thread."""
        self._ended.append(owner)

    def _dissolve(self) -> None:
        ended = set()
        while self._ended:                 # (pop: a release landing meanwhile is kept)
            owner = self._ended.pop()
            ended.add(owner)
            for size, blocks in self._owned_free.pop(owner, {}).items():
                for ptr in blocks:
                    heapq.heappush(self._free.setdefault(size, []), ptr)
        for ptr in [p for p, o in self._owner_of.items() if o in ended]:
            del self._owner_of[ptr]

    def empty_cache(self) -> int:
        """Return every cached (unused) block to the driver; the bytes released."""
        with self._lock:
            pools = [self._free, *self._owned_free.values()]
            blocks = [(p, s) for pool in pools for s, ps in pool.items() for p in ps]
            self._free = {}
            self._owned_free = {}
            for ptr, _ in blocks:
                self._owner_of.pop(ptr, None)
        if not blocks:
            return 0
        cu = self._driver()
        check(cu.cuStreamSynchronize(self._stream), "cuStreamSynchronize")
        released = 0
        for ptr, size in blocks:
            check(cu.cuMemFree(ptr), "cuMemFree")
            released += size
        with self._lock:
            for ptr, _ in blocks:
                del self._size_of[ptr]
            self.reserved -= released
            self.releases += 1
        return released

    def stats(self) -> dict:
        return {"allocated_bytes": self.allocated, "reserved_bytes": self.reserved,
                "driver_allocs": self.driver_allocs, "allocator_hits": self.cache_hits}


class CudaBuffer:
    """Device memory holding one array; its block returns to the allocator when the buffer
    is unreachable."""

    __slots__ = ("ptr", "nbytes", "shape", "dtype", "device", "_finalizer", "__weakref__")

    def __init__(self, device: Any, ptr: int, nbytes: int, shape: tuple, dtype: np.dtype,
                 owned: bool = True) -> None:
        self.ptr, self.nbytes, self.shape, self.dtype, self.device = ptr, nbytes, shape, dtype, device
        self._finalizer = weakref.finalize(self, device.allocator.free, ptr) if owned else None

    def __repr__(self) -> str:
        return f"<CudaBuffer {self.device.name} {self.dtype}{list(self.shape)} at {self.ptr:#x}>"


class PinnedBlock:
    __slots__ = ("ptr", "size", "event")

    def __init__(self, ptr: int, size: int, event: Any) -> None:
        self.ptr, self.size, self.event = ptr, size, event


class PinnedStaging:
    """Pinned host blocks for transfers, binned like device blocks, each with an event; a
    block is reused once the event recorded after its last copy has completed (never
    while a copy may still read or write it)."""

    KEEP_BYTES = 256 << 20     # pinned memory kept for reuse; beyond it blocks are freed

    def __init__(self, driver: Callable[[], Any]) -> None:
        self._driver = driver
        self._free: dict = {}          # bin size -> [PinnedBlock]
        self._kept = 0
        self._lock = fork_locks.lock()

    def take(self, nbytes: int) -> PinnedBlock:
        """A pinned block of at least `nbytes` that no queued copy uses."""
        size = bin_size(nbytes)
        cu = self._driver()
        with self._lock:
            blocks = self._free.get(size, [])
            for i, block in enumerate(blocks):
                if int(cu.cuEventQuery(block.event)[0]) == 0:
                    self._kept -= size
                    return blocks.pop(i)
        ptr = int(check(cu.cuMemHostAlloc(size, 0), "cuMemHostAlloc"))
        return PinnedBlock(ptr, size, check(cu.cuEventCreate(2), "cuEventCreate"))  # 2: no timing

    def give(self, block: PinnedBlock, stream: Optional[Any] = None) -> None:
        """Return a block; with `stream`, the copies queued there may still use it."""
        cu = self._driver()
        if stream is not None:
            check(cu.cuEventRecord(block.event, stream), "cuEventRecord")
        with self._lock:
            if self._kept + block.size <= self.KEEP_BYTES:
                self._free.setdefault(block.size, []).append(block)
                self._kept += block.size
                return
        check(cu.cuEventSynchronize(block.event), "cuEventSynchronize")
        check(cu.cuMemFreeHost(block.ptr), "cuMemFreeHost")
