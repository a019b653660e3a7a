"""A persistent native worker pool: compiled kernels split over every core with no Python
between the chunks.

The pool is LLVM IR of our own (devices/cpu/pool_ir.py) JIT-compiled once per process, over
the C library's pthreads. A run is one call into native code (`lzp_run`): the calling
thread publishes a job, wakes the workers, takes chunks itself and returns only when
every chunk is done and every worker that joined has left the job. So Python sees a run
as one ctypes call (which releases the GIL): a KeyboardInterrupt can only arrive before
or after it, never while a worker still writes.

- A job is a list of tasks run in order with a barrier between them (none after a task
  marked to go on: the next one is independent of it); a task is one kernel over its
  chunks (`Job`). One job per step and thread count is built once and reused: a run
  only rewrites the buffer pointers.
- A job whose tasks all have one chunk runs on the calling thread without waking
  anyone (a tiny kernel costs a ctypes call).
- Threads are started on the first parallel run, named `lazyarray-cpu<N>`, spin briefly
  after a job (so the next kernel of a sync finds them awake) and then sleep on a
  condition variable. `close_all()` stops and joins them; it runs at exit; in a forked
  child every pool forgets its parent's threads (they do not exist there) and starts
  its own at its next parallel run.
- Two Python threads never share a pool at once: the second runs its job on its own
  thread (still natively) instead of waiting.
- Python work splits over the same threads (`NativePool.run_python`: a host call's NumPy
  reference by rows): each chunk is a call from native code back into Python, which
  takes the GIL and lets it go inside NumPy's loops, so the chunks' loops run at once.
  The process has one pool of threads for everything it runs.
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import sys
import weakref
from typing import Callable, Optional, Sequence

import llvmlite.binding as llvm
import numpy as np

from ...compiler import fork_locks
from ...compiler.program import LibraryStep, LoopStep, PartialStep
from . import pool_ir
from .object_code import LoadedCode
from .runtime_objects import prefetch as runtime_prefetch, runtime_object

SPIN_ROUNDS = 2000      # `pause` rounds a worker spins before sleeping: ~50-150 us, longer
                        # than the Python between two kernels of one sync, short enough not
                        # to take a shared core from others for long

IR = pool_ir.LAYOUT          # word offsets shared with the generated code
_LIBC = ctypes.CDLL(None, use_errno=True)
_PTHREAD_SYMBOLS = ("pthread_mutex_lock", "pthread_mutex_unlock", "pthread_cond_wait",
                    "pthread_cond_broadcast", "sched_yield")
_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
_PY_CHUNK = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)   # a kernel of no buffers


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


class _Code:
    """The pool's compiled code and the kernel trampolines, loaded once per process."""

    def __init__(self) -> None:
        for name in _PTHREAD_SYMBOLS:       # resolved from the C library already loaded
            llvm.add_symbol(name, ctypes.cast(getattr(_LIBC, name), ctypes.c_void_p).value)
        self._loaded = [LoadedCode(runtime_object("pool"))]
        self.run = _RUN(self._loaded[0].address("lzp_run"))
        self.worker = self._loaded[0].address("lzp_worker")
        self._tramps: dict = {}
        self._lock = fork_locks.lock()

    def trampoline(self, nargs: int, npartials: int, ncounts: int = 0) -> int:
        return self.trampolines([(nargs, npartials, ncounts)])[0]

    def trampolines(self, keys: Sequence[tuple]) -> list:
        """The addresses of the trampolines of `keys` ((nargs, npartials, ncounts) each);
        those not built yet are built together, in one object: a new program's jobs
        (`resolve_pending`) then pay LLVM's cost per module once, not per signature."""
        missing = [k for k in dict.fromkeys(keys) if k not in self._tramps]
        if missing:
            with self._lock:
                self._take_prefetched(missing)
                # sorted: the same set is the same disk cache entry in the next process
                missing = sorted(k for k in missing if k not in self._tramps)
                if len(missing) == 1:
                    code = LoadedCode(runtime_object("trampoline", *missing[0]))
                    self._tramps[missing[0]] = code.address(IR.TRAMPOLINE)
                elif missing:
                    code = LoadedCode(runtime_object("trampolines", *sum(missing, ())))
                    for k in missing:
                        self._tramps[k] = code.address(pool_ir.trampoline_name(k))
                if missing:
                    self._loaded.append(code)
        return [self._tramps[k] for k in keys]

    def _take_prefetched(self, missing: list) -> None:
        """Load the prefetched trampolines (`prefetch_trampolines`) of any of `missing`."""
        with _PREFETCHED_LOCK:
            taken = [keys for keys in _PREFETCHED if any(k in keys for k in missing)]
            for keys in taken:
                _PREFETCHED.remove(keys)
        for keys in taken:
            code = LoadedCode(runtime_object("trampolines", *sum(keys, ())))
            for k in keys:
                self._tramps[k] = code.address(pool_ir.trampoline_name(k))
            self._loaded.append(code)


_CODE: Optional[_Code] = None
_CODE_LOCK = fork_locks.lock()


# sorted tuples of trampoline keys being built on prefetch threads, each one object
_PREFETCHED: list = []
_PREFETCHED_LOCK = fork_locks.lock()
os.register_at_fork(after_in_child=_PREFETCHED.clear)


def trampoline_keys(steps: list) -> list:
    """The trampoline keys (nargs, npartials, ncounts) of a program's tasks, as the CPU
    executable and native_program make them: a loop's, a partial reduction's and its
    finish's (which takes the chunk count), a product's (its buffers and descriptor)."""
    keys = []
    for s in steps:
        if isinstance(s, LoopStep):
            keys.append((len(s.args), 0, 0))
        elif isinstance(s, PartialStep):
            keys.append((len(s.args), len(s.roots), 0))
            if s.finish:
                keys.append((len(s.finish_args), len(s.roots), 1))
        elif isinstance(s, LibraryStep) and s.call == "gemm":
            keys.append((len(s.operands) + 2, 0, 0))
    return keys


def prefetch_trampolines(keys: list) -> None:
    """Start building, on a thread of its own, one object with the trampolines of `keys`
    that are neither loaded nor on the way: a program's, predicted from its steps
    (`trampoline_keys`) when they are planned, so its first run finds them built rather
    than building them one job at a time (~0.1 s of a training step's first run). A key
    predicted wrongly costs a trampoline built for nothing; one not predicted is built
    when its job needs it, as before."""
    have = _CODE._tramps if _CODE is not None else {}
    with _PREFETCHED_LOCK:
        wanted = sorted(k for k in set(keys) if k not in have
                        and not any(k in p for p in _PREFETCHED))
        if not wanted:
            return
        _PREFETCHED.append(tuple(wanted))
    runtime_prefetch("trampolines", *sum(wanted, ()))


def prefetch() -> None:
    """Start building the pool's code on a thread of its own (runtime_objects.prefetch)
    when this process has not loaded it yet: a first program's compile runs meanwhile."""
    if _CODE is None:
        runtime_prefetch("pool")


def code() -> _Code:
    global _CODE
    if _CODE is None:
        with _CODE_LOCK:
            if _CODE is None:
                _CODE = _Code()
    return _CODE


# ---- buffer addresses -------------------------------------------------------------------

def _data_offset() -> int:
    """Where an ndarray object keeps its data pointer (right after the object header in
    NumPy's array struct), checked on a few arrays; 0 when that does not hold."""
    off = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)
    base = np.arange(64, dtype=np.float64)
    probes = [base, base[3:], base[::2], np.empty((), np.float32), np.zeros((2, 3), np.int8).T]
    ok = all(ctypes.c_void_p.from_address(id(a) + off).value == a.ctypes.data for a in probes)
    return off if ok else 0


_DATA_OFFSET = _data_offset()
_word_at = ctypes.c_void_p.from_address


def address(array: np.ndarray) -> int:
    """The address of an ndarray's first element (10x cheaper than `array.ctypes.data`,
    which builds a ctypes helper object each time)."""
    if _DATA_OFFSET:
        return _word_at(id(array) + _DATA_OFFSET).value or 0
    return array.ctypes.data


# ---- jobs ------------------------------------------------------------------------------

class Job:
    """Tasks to run in order, each a kernel over [start, end) chunks, reading and writing
    buffers named by their index in the job's buffer table. Build once; per run write
    the buffers' addresses into `table` and call `NativePool.run`."""

    def __init__(self, tasks: Sequence[tuple], buffers: int,
                 table: Optional[np.ndarray] = None, go_on: Sequence[int] = ()) -> None:
        """tasks: (kernel address, buffer indices of its arguments, buffer indices of its
        partials, byte strides of its partials per chunk (0: shared), chunk ranges[,
        indices of the integers passed after the partials]). `table`: an int64 array of
        at least `buffers` entries to share with other jobs. `go_on`: the tasks with no
        barrier after them (the next task does not read what they write; the next
        barrier waits for them too), never the last."""
        n = len(tasks)
        self.header = np.zeros(4, np.int64)
        self.table = np.zeros(max(1, buffers), np.int64) if table is None else table
        self._tasks = np.zeros(n * IR.TASK_WORDS, np.int64)
        self.counters = np.zeros(2 * n, np.int64)
        self._keep: list = []            # the arrays the task words point into
        self.parallel = False
        self.chunks = 0                  # over all tasks
        self._pending: list = []         # (task, trampoline key) with no trampoline yet
        for t, (fn, args, partials, strides, ranges, *counts) in enumerate(tasks):
            counts = list(counts[0]) if counts else []
            words = [np.asarray(list(v) or [0], np.int64)
                     for v in (list(args) + counts, partials, strides)]
            rng = np.asarray(ranges, np.int64).reshape(-1)
            row = self._tasks[t * IR.TASK_WORDS:(t + 1) * IR.TASK_WORDS]
            # the trampoline's address is filled in when the job's address is first
            # read (`address`): by then a new program has made all its jobs, whose
            # trampolines are then built in one object
            self._pending.append((t, (len(args), len(partials), len(counts))))
            row[IR.TASK_FN] = fn
            row[IR.TASK_ARGV] = words[0].ctypes.data
            row[IR.TASK_PARTIALS] = words[1].ctypes.data
            row[IR.TASK_STRIDES] = words[2].ctypes.data
            row[IR.TASK_RANGES] = rng.ctypes.data
            row[IR.TASK_CHUNKS] = len(rng) // 2
            self._keep.extend(words + [rng])
            self.parallel = self.parallel or len(rng) > 2
            self.chunks += len(rng) // 2
        for t in go_on:
            if not 0 <= t < n - 1:
                raise ValueError(f"lazyarray: a job's task {t} of {n} cannot go on without a "
                                 "barrier (only a task with another after it can)")
            self._tasks[t * IR.TASK_WORDS + IR.TASK_GO_ON] = 1
            self.parallel = True        # its chunks and the next task's run side by side
        self.header[:] = (n, self._tasks.ctypes.data, self.counters.ctypes.data,
                          self.table.ctypes.data)
        self._address = self.header.ctypes.data
        _PENDING.add(self)

    @property
    def address(self) -> int:
        """The job's address for the native runner; every task's trampoline is built
        (with those of every other job still waiting for theirs) before it is given."""
        if self._pending:
            resolve_pending()
        return self._address


_PENDING: "weakref.WeakSet[Job]" = weakref.WeakSet()    # jobs with trampolines to fill in
_PENDING_LOCK = fork_locks.lock()


def resolve_pending() -> None:
    """Fill in the trampolines of every job made since the last call, built together."""
    with _PENDING_LOCK:
        jobs = [j for j in list(_PENDING) if j._pending]
        keys = [key for j in jobs for _, key in j._pending]
        addresses = iter(code().trampolines(keys))
        for j in jobs:
            for t, _ in j._pending:
                j._tasks[t * IR.TASK_WORDS + IR.TASK_TRAMP] = next(addresses)
            j._pending = []
            _PENDING.discard(j)


# ---- pools -----------------------------------------------------------------------------

class NativePool:
    """`threads` threads in all: the caller and threads - 1 workers (started lazily)."""

    def __init__(self, threads: int = 0) -> None:
        self.threads = threads if threads > 0 else default_threads()
        self.state: Optional[np.ndarray] = None
        self._workers: list = []
        self._busy = fork_locks.lock()       # one run at a time uses the workers
        self.runs_shared = 0                # runs that used the workers (tests read it)
        _ALL.add(self)

    @property
    def started(self) -> int:
        """How many worker threads are running."""
        return len(self._workers)

    def _start(self) -> None:
        state = np.zeros(IR.STATE_WORDS, np.int64)
        base = state.ctypes.data
        if _LIBC.pthread_mutex_init(ctypes.c_void_p(base + 8 * IR.STATE_MUTEX), None) or \
                _LIBC.pthread_cond_init(ctypes.c_void_p(base + 8 * IR.STATE_COND), None):
            raise OSError("lazyarray: could not set up the native pool's mutex")
        state[IR.STATE_SPIN] = SPIN_ROUNDS
        self.state = state
        worker = code().worker
        for k in range(self.threads - 1):
            tid = ctypes.c_uint64()
            err = _LIBC.pthread_create(ctypes.byref(tid), None, ctypes.c_void_p(worker),
                                       ctypes.c_void_p(base))
            if err:
                break               # fewer workers than asked: the others still share the work
            self._workers.append(tid.value)
            _name(tid.value, f"lazyarray-cpu{k + 1}")

    def run(self, job: Job) -> None:
        """Every chunk of every task of `job`, done when this returns."""
        c = code()
        if self.threads <= 1 or not job.parallel or not self._busy.acquire(blocking=False):
            c.run(None, job.address, 0)
            return
        try:
            if self.state is None:
                self._start()
            if not self._workers:
                c.run(None, job.address, 0)
                return
            self.runs_shared += 1
            c.run(self.state.ctypes.data, job.address, 1)
        finally:
            self._busy.release()

    def run_python(self, fn: Callable[[int, int, int], None], ranges: list) -> None:
        """fn(chunk, start, end) for every range, on this pool's threads; returns when all
        are done. Each chunk is a call back into Python from the pool's native code (it
        takes the GIL: worth it where fn spends its time in code that lets it go, as
        NumPy's loops do). The first exception a chunk raises (an interrupt on the
        calling thread included) is raised here once no chunk runs; none starts after
        it."""
        if len(ranges) == 1 or self.threads <= 1:
            for k, (s, e) in enumerate(ranges):
                fn(k, s, e)
            return
        failed: list = []
        chunk_of = {s: k for k, (s, _) in enumerate(ranges)}

        def chunk(s: int, e: int) -> None:
            if failed:
                return
            try:
                fn(chunk_of[s], s, e)
            except BaseException as err:     # (ctypes would print it and go on)
                failed.append(err)
        callback = _PY_CHUNK(chunk)          # alive until the run returns
        address = ctypes.cast(callback, ctypes.c_void_p).value
        self.run(Job([(address, [], [], [], ranges)], 0))
        if failed:
            raise failed[0]

    def _forget(self) -> None:
        """In a forked child: the parent's workers do not exist here, and the mutex and
        the lock may have been held by one of them; start afresh (lazily)."""
        self.state, self._workers, self._busy = None, [], fork_locks.lock()

    def close(self) -> None:
        """Stop the workers and wait for them (none is inside a job: runs hold `_busy`)."""
        if self.state is None:
            return
        with self._busy:
            base = self.state.ctypes.data
            mutex = ctypes.c_void_p(base + 8 * IR.STATE_MUTEX)
            _LIBC.pthread_mutex_lock(mutex)
            self.state[IR.STATE_SHUTDOWN] = 1
            _LIBC.pthread_cond_broadcast(ctypes.c_void_p(base + 8 * IR.STATE_COND))
            _LIBC.pthread_mutex_unlock(mutex)
            for tid in self._workers:
                _LIBC.pthread_join(ctypes.c_uint64(tid), None)
            self._workers = []
            self.state = None


def _name(tid: int, name: str) -> None:
    """Name a thread (Linux: seen in top -H, gdb, py-spy); elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        _LIBC.pthread_setname_np(ctypes.c_uint64(tid), name.encode()[:15])


_POOLS: dict = {}
_POOLS_LOCK = fork_locks.lock()


def get_pool(threads: int = 0) -> NativePool:
    """The process's pool of `threads` threads (0: one per core this process may use)."""
    n = threads if threads > 0 else default_threads()
    pool = _POOLS.get(n)
    if pool is None:
        with _POOLS_LOCK:
            pool = _POOLS.get(n)
            if pool is None:
                pool = _POOLS[n] = NativePool(n)
    return pool


def close_all() -> None:
    """Stop every pool's workers (at exit; a later run starts them again)."""
    for pool in list(_POOLS.values()):
        pool.close()


_ALL: "weakref.WeakSet" = weakref.WeakSet()     # every pool, for the fork handler


def _forget_after_fork() -> None:
    # the child has only the forking thread: every pool (also those held by compiled
    # programs) forgets its workers and starts new ones at its next parallel run
    global _POOLS_LOCK
    _POOLS_LOCK = fork_locks.lock()
    for pool in list(_ALL):
        pool._forget()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_after_fork)
