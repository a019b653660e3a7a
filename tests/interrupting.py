"""An executable stand-in for the interrupt tests: it runs the real executable with a
KeyboardInterrupt arriving while the run is under way (as Ctrl-C would)."""
from __future__ import annotations

import _thread
import time
from typing import Any


class Interrupted:
    """The executable, with an interrupt arriving while it runs."""
    kernels_per_run = 0

    def __init__(self, exe: Any) -> None:
        self.exe = exe

    def run(self, args: Any) -> Any:
        _thread.interrupt_main()
        time.sleep(0.01)
        return self.exe.run(args)
