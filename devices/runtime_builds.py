"""What building the runtime's own native code cost this process (the worker pool, kernel
trampolines, GEMM tile functions: devices/runtime_objects.py): builds (LLVM ran), loads
(object code from the disk cache) and the seconds of both. The frontend reads them to
count these apart from compiling the user's programs and from running them (a first run
that builds a tile function is not 0.3 s of run time). Plain counters, no imports: read
on every first run of a program."""
from __future__ import annotations

# [builds, loads, seconds]
TOTALS = [0, 0, 0.0]


def record(built: bool, seconds: float) -> None:
    TOTALS[0 if built else 1] += 1
    TOTALS[2] += seconds
