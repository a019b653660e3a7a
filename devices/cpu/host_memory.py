"""Recycled host memory for the CPU device's output buffers.

A fresh large NumPy array is fresh pages from the kernel: the first write to each page
faults, which for a 16 MB output costs as much as the kernel itself. Outputs are handed to
the caller, so they cannot simply be reused; instead, when the caller drops an output
array its memory comes back here (a weak reference's callback on the array) and serves a
later allocation of the same size, unless some other view of the memory is still alive
(checked by reference count: recycling memory a view still reads would corrupt it).

A program may also be given an output's memory back while the output is still alive (a
donated parameter, see compiler/graph/trace.py): `claim` hands over the memory when that
output array is the only view of it, and cancels the recycling of it.

Memory comes from NumPy's allocator, which asks the kernel for transparent huge pages on
allocations of 4 MB and more (`madvise(MADV_HUGEPAGE)`, needed where THP is in `madvise`
mode): in a VM a 4 KB page fault is costly (a fresh 64 MB buffer's first touch took 75-150
ms with 4 KB pages against 15-40 ms with huge pages on a loaded 2-core EPYC). Huge pages
do not speed up reading memory already mapped: a streaming kernel misses the TLB once per
4 KB against ~200 ns to read those 4 KB (measured equal within noise).
"""
from __future__ import annotations

import collections
import sys
import weakref
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from ...compiler import fork_locks

if TYPE_CHECKING:
    from ...compiler.program import ValueInfo

# blocks kept per size: as many as a run takes at once (a GPT training step's temporaries
# hold 8-15 buffers of one size; with 2 kept, every run took the rest as fresh pages:
# 2,000-14,000 page faults and 8-55 ms of system time a 65 ms step), under KEEP_BYTES
KEEP_PER_SIZE = 16
KEEP_BYTES = 1 << 30
# Memory of a size never asked for again after it came back (a process going through
# shape after shape) is kept on probation: one block per size, PROBATION_BYTES in all, the
# oldest freed first. A size asked for again after some of its memory came back is a
# size in use (a loop's) and is kept under KEEP_BYTES from then on. Without it, distinct
# shapes filled the pool with sizes never used again (RSS +165 KiB a compile for 160 KB
# outputs, toward 1 GiB; issue 33, item 17), and a full pool then kept nothing new.
PROBATION_BYTES = 32 << 20
RECURRING_SIZES = 4096       # sizes remembered as given back (bounded: cleared past it)
MIN_BYTES = 1 << 16          # small arrays come from malloc's own free lists
SMALL_NOTES = 4096           # small outputs noted as claimable (see HostMemory.track)


class HostMemory:
    def __init__(self) -> None:
        self._free: dict = {}
        self._bytes = 0
        # size -> bytes kept on probation (oldest first), their total, the sizes whose
        # memory came back at least once, and the sizes asked for again after that
        self._probation: "collections.OrderedDict" = collections.OrderedDict()
        self._probation_bytes = 0
        self._returned: set = set()
        self._recurring: set = set()
        self._lock = fork_locks.lock()
        self._baseline = 0
        # id(array handed out) -> (a weak reference to it, its memory); a weak reference's
        # callback (not weakref.finalize: several times dearer to make, and a training
        # step hands out and claims several arrays) gives the memory back when it dies
        self._tracked: dict = {}
        # id(raw memory of a small output handed out) -> a weak reference to it: only
        # memory registered here is claimed untracked (never a user's shared array)
        self._small: dict = {}
        self._baseline = self._probe()
        self._claim_baseline = self._probe_claim()
        self._small_baseline = self._probe_small()

    def _probe(self) -> int:
        """The reference count `_give_back` sees for memory whose only view just died."""
        self._seen: list = []
        mem = np.empty(MIN_BYTES, np.uint8)
        view = mem[:]
        self.track(view, mem)
        del mem
        del view
        return self._seen.pop()

    def take(self, nbytes: int) -> np.ndarray:
        """Raw memory of exactly `nbytes` (uint8), recycled when possible."""
        if nbytes >= MIN_BYTES:
            with self._lock:
                if nbytes in self._returned:
                    self._recur(nbytes)
                stack = self._free.get(nbytes)
                if stack:
                    self._bytes -= nbytes
                    return stack.pop()
        return np.empty(max(nbytes, 1), np.uint8)

    def _recur(self, nbytes: int) -> None:
        """`nbytes` is asked for again after its memory came back: a size in use, whose
        memory on probation (if any) now counts as kept."""
        if len(self._recurring) >= RECURRING_SIZES:
            self._recurring.clear()
        self._recurring.add(nbytes)
        held = self._probation.pop(nbytes, 0)
        self._probation_bytes -= held
        self._bytes += held

    def _probe_claim(self) -> int:
        """The reference count `claim` sees for memory viewed only by the tracked array."""
        mem = np.empty(MIN_BYTES, np.uint8)
        view = mem[:]
        self.track(view, mem)
        del mem
        count = self._mem_refs(view)
        del self._tracked[id(view)]      # (its weak reference goes with it: no callback)
        return count

    def _mem_refs(self, array: np.ndarray) -> int:
        entry = self._tracked.get(id(array))
        if entry is None or entry[0]() is not array:
            return -1
        return sys.getrefcount(entry[1])

    def track(self, array: np.ndarray, mem: np.ndarray) -> None:
        """Give `mem` back when `array` (a view of it handed to the caller) dies; below
        MIN_BYTES (not recycled) only note `mem` as ours, for `claim`."""
        if mem.nbytes >= MIN_BYTES:
            key = id(array)
            self._tracked[key] = (_weak(array, lambda _, key=key: self._give_back_tracked(key)),
                                  mem)
            return
        small = self._small
        if len(small) > SMALL_NOTES:      # (dead ones mostly: a weak reference tells)
            small.clear()
        small[id(mem)] = _weak(mem)

    def claim(self, array: np.ndarray) -> "np.ndarray | None":
        """The writable memory under `array` (an output handed out by `track`) when no
        other view of it exists, no longer to be recycled when `array` dies; else None.
        A small output (not tracked: its memory is never recycled) is claimed alike when
        its memory is raw memory of its own (see `_small_refs`)."""
        if id(array) not in self._tracked:
            if self._small_refs(array) != self._small_baseline:
                return None
            mem = array.base
            self._small.pop(id(mem), None)
            return mem
        if self._mem_refs(array) != self._claim_baseline:
            return None
        # (dropping the entry drops its weak reference: its callback never comes)
        return self._tracked.pop(id(array))[1]

    def reclaim(self, array: np.ndarray) -> "np.ndarray | None":
        """`claim` for a program that writes `array`'s memory in place and hands `array`
        itself out again as the new value (a donated parameter updated in place, step
        after step): the memory when no other view of it exists, its tracking (or note)
        left as it is, since `array` lives on as an output; else None."""
        if id(array) in self._tracked:
            if self._mem_refs(array) != self._claim_baseline:
                return None
            return self._tracked[id(array)][1]
        if self._small_refs(array) != self._small_baseline:
            return None
        return array.base

    def _small_refs(self, array: np.ndarray) -> int:
        """The reference count of the memory under `array` when it is raw memory of a
        small output that `track` noted (a 1-D, writable uint8 array owning its bytes,
        a view of nothing), else -1. Only such memory is claimed untracked: its one
        view, the program's output, is all that can read it when the count says so (a
        user's array shared by `asarray` is never noted: never written)."""
        mem = array.base
        if type(mem) is not np.ndarray:
            return -1
        note = self._small.get(id(mem))
        if note is None or note() is not mem or mem.base is not None or mem.ndim != 1 \
                or (mem.dtype is not _UINT8 and mem.dtype != _UINT8):
            return -1
        flags = mem.flags
        if not (flags.owndata and flags.writeable):
            return -1
        return sys.getrefcount(mem)

    def _probe_small(self) -> int:
        """The count `_small_refs` sees for raw memory viewed only by one handed-out
        output (made as native_program.py makes it: a view of a view of the memory)."""
        mem = np.empty(64, np.uint8)
        view = np.ndarray((16,), np.float32, mem).view()
        self.track(view, mem)
        del mem
        count = self._small_refs(view)
        del self._small[id(view.base)]
        return count

    def _give_back_tracked(self, key: int) -> None:
        entry = self._tracked.pop(key, None)
        if entry is not None:
            mem = entry[1]
            del entry
            self._give_back(mem)

    def release(self, mem: np.ndarray) -> None:
        """Take back memory that nothing references any more (a run's temporaries)."""
        if mem.nbytes >= MIN_BYTES:
            self._keep(mem)

    def _keep(self, mem: np.ndarray) -> None:
        # (a weak reference's callback at the interpreter's shutdown finds this module's
        # globals set to None: then nothing is kept)
        per_size, limit = KEEP_PER_SIZE, KEEP_BYTES
        if per_size is None or limit is None:
            return
        nbytes = mem.nbytes
        with self._lock:
            if nbytes not in self._recurring:
                self._on_probation(mem)
                return
            stack = self._free.setdefault(nbytes, [])
            if len(stack) < per_size and self._bytes + nbytes <= limit:
                stack.append(mem)
                self._bytes += nbytes

    def _on_probation(self, mem: np.ndarray) -> None:
        nbytes = mem.nbytes
        if len(self._returned) >= RECURRING_SIZES:
            self._returned = set(self._probation)      # (what is on probation stays known)
        self._returned.add(nbytes)
        if nbytes in self._probation or self._free.get(nbytes) or nbytes > PROBATION_BYTES:
            return                  # (kept already: one block a size on probation)
        self._free[nbytes] = [mem]
        self._probation[nbytes] = nbytes
        self._probation_bytes += nbytes
        while self._probation_bytes > PROBATION_BYTES:
            old, held = self._probation.popitem(last=False)
            self._probation_bytes -= held
            del self._free[old]

    def _give_back(self, mem: np.ndarray, _refs: Any = sys.getrefcount) -> None:
        # (`_refs` bound at definition: a weak reference's callback can run during the
        # interpreter's shutdown, after this module's globals, `sys` among them, are gone)
        if not self._baseline:
            self._seen.append(_refs(mem))
            return
        if _refs(mem) > self._baseline:
            return                   # another view still reads it: let NumPy free it later
        self._keep(mem)


_weak = weakref.ref
_UINT8 = np.dtype(np.uint8)


HOST_MEMORY = HostMemory()


def claim_memory(given: Any, v: ValueInfo) -> Optional[np.ndarray]:
    """Writable raw memory (uint8) under a donated argument, or None when it cannot be
    written safely: a buffer that needs converting, memory another array also views."""
    if not isinstance(given, np.ndarray) or given.dtype != v.dtype.np \
            or not given.flags.c_contiguous or given.nbytes != v.nbytes:
        return None
    if given.base is None and given.flags.owndata:      # made by put(): the node held it alone
        given.setflags(write=True)
        return given.reshape(-1).view(np.uint8)
    return HOST_MEMORY.claim(given)                      # an earlier program's output
