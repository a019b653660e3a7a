"""The BLAS library's own threads kept out of the native pool's way.

OpenBLAS keeps a thread per core that spin-waits for a while after each call; on a
machine with few cores those spinning threads take the cores the pool's workers need, so
a training step with BLAS at its default thread count ran 4-5x slower than with one BLAS
thread. While a CPU program runs, `blas_single_threaded()` sets BLAS to one thread and the
device splits matrix products over the native pool itself (each tile a single-threaded
GEMM, devices/cpu/native_gemm.py); the user's own NumPy calls outside lazyarray keep
BLAS's setting.
"""
from __future__ import annotations

import contextlib
import ctypes
from typing import Any, Iterator, Optional

from ...compiler import fork_locks


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
        # (every sync of a program with BLAS steps comes here: the saved counts are kept
        # as (set, count) pairs of the libraries not at one thread, so that `exit`
        # restores only those, with no lookups)
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                controls = self._controls
                if controls is None:
                    controls = self.controls()
                saved = []
                for get, set_ in controls:
                    n = get()
                    if n != 1:
                        set_(1)
                        saved.append((set_, n))
                self._saved = saved

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                for set_, n in self._saved:
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
