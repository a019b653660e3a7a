"""A long compile shows its progress: one terminal line that updates in place.

Only when the stream is a terminal and the compile has taken longer than DELAY seconds
(short compiles stay silent; logs and pipes get nothing), the line reads

    [lazyarray] compiling cpu_3: generating 12/49 kernels (0.6 s)

and is erased when the compile ends.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Optional

DELAY = 0.5


class Progress:
    def __init__(self, name: str, stream: Optional[Any] = None, delay: float = DELAY) -> None:
        self.name = name
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.delay = delay
        self.t0 = time.perf_counter()
        self.shown = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.t0
        if not self.shown and elapsed < self.delay:
            return
        self.shown = True
        self.stream.write(f"\r\x1b[K[lazyarray] compiling {self.name}: {stage} {done}/{total} "
                          f"kernels ({elapsed:.1f} s)")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
