"""Kernel times on a GPU stream, for a profile: an event is recorded on the stream before
and after each launch, and the elapsed times are read once the run has synchronized (no
extra synchronization per kernel, so the launches stay asynchronous). Written against
the CUDA device's driver interface (cuda-python's `cuEventCreate`, `cuEventRecord`,
`cuEventElapsedTime`)."""
from __future__ import annotations

import re
from typing import Any

from ...compiler.program import LaunchStep, Step

_LAUNCH = re.compile(r"^k(\d+)_")


def kernel_name(step: Step, program: Any) -> str:
    """The plan kernel a Program step belongs to (NVPTX names launches
    k<index>_<kernel>[_<loop>]; a library step names its kernel; `program.kernel_info`
    lists the plan's kernels in order)."""
    names = list(program.kernel_info)
    m = _LAUNCH.match(step.fn) if isinstance(step, LaunchStep) else None
    if m and int(m.group(1)) < len(names):
        return names[int(m.group(1))]
    return step.kernel or "?"


class EventTimer:
    """Pairs of events around the steps of one run, on `device.stream`."""

    def __init__(self, driver: Any, stream: Any) -> None:
        self.cu, self.stream = driver, stream
        self.marks: list = []          # (kernel, kind, start event, end event)

    def _event(self) -> Any:
        err, ev = self.cu.cuEventCreate(0)
        if int(err):
            raise RuntimeError(f"cuEventCreate failed: {err}")
        self.cu.cuEventRecord(ev, self.stream)
        return ev

    def start(self) -> Any:
        return self._event()

    def stop(self, start: Any, kernel: str, kind: str) -> None:
        self.marks.append((kernel, kind, start, self._event()))

    def report(self, rec: Any, program: str) -> None:
        """After the stream synchronized: each step's milliseconds to the profile."""
        for kernel, kind, a, b in self.marks:
            err, ms = self.cu.cuEventElapsedTime(a, b)
            if not int(err):
                rec.gpu_kernel(program, kernel, kind, float(ms))
            self.cu.cuEventDestroy(a)
            self.cu.cuEventDestroy(b)
        self.marks = []
