"""A fixed pool of worker threads that split one kernel's range between them.

Kernels are called through ctypes, which releases the GIL for the duration of the call,
so the chunks of one kernel really run at the same time. The calling thread runs the
first chunk itself.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional


def default_threads() -> int:
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

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=max(1, self.threads - 1),
                                                thread_name_prefix="lazyarray-cpu")
        return self._executor

    def run(self, fn: Callable[[int, int, int], None], ranges: list) -> None:
        """fn(chunk, start, end) for every range; returns when all are done. The calling
        thread and the workers take chunks from one queue, so a worker that starts late
        (or a core busy with something else) gets less of the work."""
        if len(ranges) == 1:
            fn(0, *ranges[0])
            return
        chunks = iter(enumerate(ranges))
        lock = threading.Lock()

        def drain() -> None:
            while True:
                with lock:
                    item = next(chunks, None)
                if item is None:
                    return
                k, (s, e) = item
                fn(k, s, e)

        helpers = min(self.threads, len(ranges)) - 1
        futures = [self._pool().submit(drain) for _ in range(helpers)]
        drain()
        for f in futures:
            f.result()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
