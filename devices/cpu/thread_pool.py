"""A fixed pool of worker threads that split one kernel's range between them, and the
BLAS library's own threads kept out of its way.

Kernels are called through ctypes, which releases the GIL for the duration of the call,
so the chunks of one kernel really run at the same time. The calling thread runs the
first chunk itself. Idle workers block on a queue (no spinning).

OpenBLAS keeps a thread per core that spin-waits for a while after each call; on a
machine with few cores those spinning threads take the cores the pool's workers need, so
a training step with BLAS at its default thread count ran 4-5x slower than with one BLAS
thread. While a CPU program runs, `blas_single_threaded()` sets BLAS to one thread and the
device splits matrix products over the pool itself (each chunk a single-threaded GEMM);
the user's own NumPy calls outside lazyarray keep BLAS's setting.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

from ...compiler import fork_locks

if TYPE_CHECKING:   # imported when a pool first starts its threads (not by a cache hit)
    from concurrent.futures import ThreadPoolExecutor


@functools.lru_cache(maxsize=None)
def default_threads() -> int:
    """The cores this process may run on (read once: a run asks at every sync)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # not every platform has affinity masks
        return max(1, os.cpu_count() or 1)


def split(extent: int, parts: int) -> list:
    """[start, end) ranges covering [0, extent) in `parts` nearly equal pieces."""
    parts = max(1, min(parts, extent))
    bounds = [extent * k // parts for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(parts)]


class ThreadPool:
    def __init__(self, threads: int = 0) -> None:
        self.threads = threads if threads > 0 else default_threads()
        self._executor: Optional[ThreadPoolExecutor] = None
        _POOLS.add(self)

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            from concurrent.futures import ThreadPoolExecutor
            self._executor = ThreadPoolExecutor(max_workers=max(1, self.threads - 1),
                                                thread_name_prefix="lazyarray-cpu")
        return self._executor

    def run(self, fn: Callable[[int, int, int], None], ranges: list) -> None:
        """fn(chunk, start, end) for every range; returns when all are done. Each thread
        (the calling one included) owns a contiguous block of the chunks and runs them in
        order, so that a balanced run reads each thread's part of memory as one stream;
        a thread whose block is done takes chunks from the end of the largest block left,
        so a worker that starts late (or a core busy with something else) gets less."""
        if len(ranges) == 1:
            fn(0, *ranges[0])
            return
        helpers = min(self.threads, len(ranges)) - 1
        queue = _Blocks(len(ranges), helpers + 1)
        futures: list = []
        try:
            for k in range(helpers):
                futures.append(self._pool().submit(_drain, fn, ranges, queue, k + 1))
            _drain(fn, ranges, queue, 0)
            _wait_all(futures, queue)
        except BaseException:
            # an interrupt (or an error) anywhere above, even between two submits: no new
            # chunk starts, and none still runs when this returns (the caller may then
            # release the buffers the chunks write)
            queue.cancel()
            queue.wait_idle()
            raise

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None


_POOLS: "weakref.WeakSet" = weakref.WeakSet()


def _forget_after_fork() -> None:
    # a forked child has none of its parent's worker threads; an executor that believes
    # it has them would never run a task: make new ones when next needed
    for pool in list(_POOLS):
        pool._executor = None


os.register_at_fork(after_in_child=_forget_after_fork)


class _Blocks:
    """Chunk numbers 0..n-1 dealt out as one contiguous block per thread; which helper
    threads (1..) are running a chunk, so that an abandoned run can wait for them."""

    def __init__(self, n: int, threads: int) -> None:
        self._lock = fork_locks.lock()
        self._idle = threading.Condition(self._lock)
        self._blocks = [list(range(s, e)) for s, e in split(n, threads)]
        self._busy = [False] * threads     # thread 0 (the caller) is never waited for

    def cancel(self) -> None:
        """Hand out no more chunks (the run is abandoned: an interrupt or an error)."""
        with self._lock:
            self._blocks = [[] for _ in self._blocks]

    def take(self, thread: int) -> Optional[int]:
        with self._lock:
            own = self._blocks[thread]
            if own:
                self._busy[thread] = True
                return own.pop(0)
            other = max(self._blocks, key=len)
            if other:
                self._busy[thread] = True
                return other.pop()
            return None

    def finish(self, thread: int) -> None:
        with self._lock:
            self._busy[thread] = False
            self._idle.notify_all()

    def wait_idle(self) -> None:
        """Until no helper runs a chunk; an interrupt meanwhile is dropped (the caller is
        already raising one)."""
        while True:
            try:
                with self._lock:
                    while any(self._busy[1:]):
                        self._idle.wait()
                return
            except KeyboardInterrupt:
                continue


def _wait_all(futures: list, queue: _Blocks) -> None:
    """Return (or raise) only when every worker has finished: until then they may still
    write into buffers the caller would release. An interrupt (or a worker's error)
    while waiting cancels the chunks not yet started and is raised once all are done."""
    import concurrent.futures
    raised: Optional[BaseException] = None
    while True:
        try:
            concurrent.futures.wait(futures)
            break
        except KeyboardInterrupt as e:          # the wait was interrupted: wait again
            raised = raised or e
            queue.cancel()
    for f in futures:
        if raised is None and f.exception() is not None:
            raised = f.exception()               # the worker's own error
    if raised is not None:
        raise raised


def _drain(fn: Callable[[int, int, int], None], ranges: list, queue: _Blocks,
           thread: int) -> None:
    while True:
        k = queue.take(thread)
        if k is None:
            return
        try:
            fn(k, *ranges[k])
        finally:
            queue.finish(thread)


# ---- BLAS threads ----------------------------------------------------------------------

class _BlasThreads:
    """The BLAS libraries loaded in the process (found with threadpoolctl, looked up once);
    an empty list when threadpoolctl is missing (then BLAS keeps its own setting)."""

    def __init__(self) -> None:
        self._libs: Optional[list] = None
        self._controls: Optional[list] = None
        self._lock = fork_locks.lock()
        self._depth = 0
        self._saved: list = []

    def libs(self) -> list:
        if self._libs is None:
            try:
                from threadpoolctl import ThreadpoolController
                self._libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            except Exception:         # threadpoolctl missing or unable to read a library
                self._libs = []
        return self._libs

    def controls(self) -> list:
        """(get, set) of each library's thread count: OpenBLAS's own C functions where
        threadpoolctl finds them (a call costs under a microsecond, threadpoolctl's
        wrappers tens: this runs at every sync of a program with BLAS or LAPACK steps),
        else threadpoolctl's methods."""
        if self._controls is None:
            self._controls = [_control(lib) for lib in self.libs()]
        return self._controls

    def forget(self) -> None:
        """Look the libraries up again at the next use (one was loaded since: SciPy's)."""
        with self._lock:
            if self._depth == 0:
                self._libs = self._controls = None

    def enter(self) -> None:
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                controls = self.controls()
                self._saved = [get() for get, _ in controls]
                for (_, set_), n in zip(controls, self._saved):
                    if n != 1:
                        set_(1)

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                for (_, set_), n in zip(self.controls(), self._saved):
                    if n != 1:
                        set_(n)


def _control(lib: Any) -> tuple:
    """(get, set) for one threadpoolctl library controller."""
    if getattr(lib, "internal_api", "") == "openblas" and \
            getattr(lib, "threading_layer", "") != "openmp":
        get = lib._get_symbol("openblas_get_num_threads")
        set_ = lib._get_symbol("openblas_set_num_threads")
        if get is not None and set_ is not None:
            get.restype = ctypes.c_int
            set_.argtypes = [ctypes.c_int]
            return get, set_
    return lib.get_num_threads, lib.set_num_threads


BLAS_THREADS = _BlasThreads()


@contextlib.contextmanager
def blas_single_threaded() -> Iterator[None]:
    """BLAS runs on the calling thread only, for the duration of the block (nestable, and
    safe when several threads run programs: the setting is restored when the last ends)."""
    BLAS_THREADS.enter()
    try:
        yield
    finally:
        BLAS_THREADS.exit()
