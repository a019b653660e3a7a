"""Every LAZYARRAY_* setting, declared once with its help text.

Read one as an attribute (`la.config.strict`), set it (`la.config.strict = True`), or
override it for a block (`with la.config.override(strict=True): ...`). The environment
variable gives the starting value.
"""
from __future__ import annotations

import contextlib
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator


@dataclass
class Flag:
    name: str            # attribute name; the variable is LAZYARRAY_<NAME>
    default: Any
    parse: Callable[[str], Any]
    help: str

    @property
    def env(self) -> str:
        return "LAZYARRAY_" + self.name.upper()


def _bool(s: str) -> bool:
    return s.strip().lower() not in ("", "0", "false", "no", "off")


def _int(s: str) -> int:
    return int(s)


def _str(s: str) -> str:
    return s


FLAGS = {f.name: f for f in [
    Flag("device", "", _str,
         "Default device for new tensors: 'cpu', 'cuda', 'cuda:N' or 'interpreter'. "
         "Empty: 'cpu' when the CPU compiler is available, else 'interpreter'."),
    Flag("strict", False, _bool,
         "Make every graph break (an op whose output shape depends on data) an error that "
         "names the op and the user's line."),
    Flag("dump", "", _str,
         "Directory to write each compiled module into (HLO text and later stages)."),
    Flag("debug", 0, _int,
         "Verbosity: 1 prints one line per compile, 2 adds each kernel's run time, "
         "3 and 4 print more of the compiler's work."),
    Flag("donate", True, _bool,
         "Let a sync give the buffers of values their owner replaced (an optimizer's old "
         "parameters and state) to the program, when nothing else references them."),
    Flag("verify", False, _bool, "Run the HLO verifier after every compiler pass."),
    Flag("num_threads", 0, _int, "Threads of the CPU device's pool; 0 means all cores."),
    Flag("cpu_devices", 1, _int,
         "Number of logical CPU devices, 'cpu:0' ... 'cpu:K-1' (as JAX's host device count): "
         "each has its own pending tensors and compiled programs; 'cpu' is 'cpu:0'."),
    Flag("cache_dir", "", _str,
         "On-disk compile cache directory; empty means ~/.cache/lazyarray. "
         "Set to 'off' to disable the disk cache."),
    Flag("test_devices", "", _str,
         "Comma-separated devices the test suite runs on; empty means every device present."),
]}


class _Config(types.ModuleType):
    """The module object itself, so that `config.strict = True` goes through validation."""

    _values: dict = {}

    def __getattr__(self, name: str) -> Any:
        if name in FLAGS:
            return self._values[name]
        raise AttributeError(f"lazyarray.config has no setting {name!r}; "
                             f"settings: {', '.join(FLAGS)}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in FLAGS:
            self._values[name] = value
        else:
            super().__setattr__(name, value)

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        unknown = set(values) - set(FLAGS)
        if unknown:
            raise AttributeError(f"unknown settings {sorted(unknown)}; settings: {', '.join(FLAGS)}")
        old = {k: self._values[k] for k in values}
        self._values.update(values)
        try:
            yield
        finally:
            self._values.update(old)

    def reload(self) -> None:
        """Read every setting from the environment again."""
        for f in FLAGS.values():
            raw = os.environ.get(f.env)
            self._values[f.name] = f.default if raw is None else f.parse(raw)

    def describe(self) -> str:
        return "\n".join(f"{f.env} (now {self._values[f.name]!r}): {f.help}" for f in FLAGS.values())


sys.modules[__name__].__class__ = _Config
sys.modules[__name__]._values = {}
sys.modules[__name__].reload()
