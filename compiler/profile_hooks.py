"""Where the compiler and the devices report what they spend time on, while a profile
records (lazyarray/profiler.py sets `ACTIVE`; neither the compiler nor a device imports
lazyarray).

`ACTIVE` is None when no profile records: the hooks in the pass pipeline, the CPU build
and the devices' run loops check it once and otherwise do no timing at all. While a
profile records it is an object with these methods (times are `time.perf_counter()`
seconds):

    span(category, name, t0, t1, args)        a phase: a pass, code generation, a transfer
    kernel(program, kernel, kind, t0, t1, threads)
                                               one kernel or library call of a program run,
                                               on `threads` threads
    trips(count)                               the loop reported last by `kernel` ran
                                               `count` iterations
    chunk(kernel, chunk, t0, t1)               one chunk of Python work (a host call's
                                               rows) split over the CPU's native pool,
                                               reported by the thread that ran it
    gpu_kernel(program, kernel, kind, ms)      a GPU kernel timed by events on the stream
    backward(node, cotangents)                 nodes a vjp rule made for `node` (autodiff)
    copied(node, copy)                         `copy` is `node`'s op again (autodiff.stop)

and, from lazyarray's runtime, sync_begin / sync_mark / sync_end around each sync.
"""
from __future__ import annotations

import contextlib
import time
from typing import Any, Iterator

ACTIVE: Any = None


@contextlib.contextmanager
def span(category: str, name: str, **args: Any) -> Iterator[None]:
    """Time the block as one phase when a profile records (compile-time paths only: a
    context manager is too slow for a per-kernel hot path)."""
    rec = ACTIVE
    if rec is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        rec.span(category, name, t0, time.perf_counter(), args)


class TimedPool:
    """The CPU's native pool, its chunks of Python work (`run_python`) reporting their time
    and thread to the profile (the CPU device runs a program on one while a profile
    records; native jobs run as they are, timed per step)."""

    def __init__(self, pool: Any, rec: Any) -> None:
        self._pool, self._rec = pool, rec
        self.threads = pool.threads
        self.kernel = ""

    def run_python(self, fn: Any, ranges: list) -> None:
        rec, kernel, clock = self._rec, self.kernel, time.perf_counter

        def timed(k: int, s: int, e: int) -> None:
            t0 = clock()
            try:
                fn(k, s, e)
            finally:
                rec.chunk(kernel, k, t0, clock())
        self._pool.run_python(timed, ranges)

    def __getattr__(self, name: str) -> Any:      # anything else the pool offers
        return getattr(self._pool, name)
