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
    minimum: int = 0     # the least value an int setting takes

    def check(self, value: Any) -> Any:
        """The value to store for `value`, or a ValueError/TypeError that names the
        setting, what was given and what is valid (raised where the user set it)."""
        kind = type(self.default)
        if kind is bool:
            if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
                return bool(value)
            raise TypeError(f"config.{self.name} takes True or False, not {value!r}")
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"config.{self.name} takes an int >= {self.minimum}, "
                                f"not {value!r}")
            if value < self.minimum:
                raise ValueError(f"config.{self.name} takes an int >= {self.minimum}, "
                                 f"not {value}")
            return value
        if not isinstance(value, str):
            raise TypeError(f"config.{self.name} takes a string, not {value!r}")
        return value

    def from_env(self, raw: str) -> Any:
        try:
            return self.check(self.parse(raw))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{self.env}={raw!r} is not valid: {e}") from None

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
    Flag("cpu_devices", 1, _int, minimum=1, help=
         "Number of logical CPU devices, 'cpu:0' ... 'cpu:K-1' (as JAX's host device count): "
         "each has its own pending tensors and compiled programs; 'cpu' is 'cpu:0'."),
    Flag("cache_dir", "", _str,
         "On-disk compile cache directory; empty means ~/.cache/lazyarray. "
         "Set to 'off' to disable the disk cache."),
    Flag("cache_max_mb", 1024, _int,
         "Size cap of the on-disk compile cache in MiB; past it, the least recently used "
         "entries are removed."),
    Flag("executable_cache_max", 512, _int,
         "Most compiled programs each device keeps in memory; past it (or past "
         "executable_cache_max_mb) the least recently used is dropped (and recompiled, "
         "or read from the disk cache, if needed again).", minimum=1),
    Flag("executable_cache_max_mb", 1024, _int,
         "Size cap in MiB of the compiled programs each device keeps in memory (their "
         "code and constants).", minimum=1),
    Flag("max_graph_ops", 20000, _int,
         "Ops recorded on a device since its last sync past which the next op first "
         "computes what is pending: a safety net for a loop that has no step boundary "
         "(see step_sync) and reads no value, whose graph, and compile time, would "
         "otherwise grow without bound; 0: no limit."),
    Flag("length_buckets", False, _bool,
         "Calling a module whose forward takes a key padding mask (key_padding_mask, "
         "src_key_padding_mask, padding_mask) pads its input's sequence axis to a bucket "
         "(8, 16, 32, ...), masks the padding and slices the outputs back: a model fed "
         "many sequence lengths compiles once per bucket (lazyarray/nn/length_buckets.py)."),
    Flag("module_reuse", True, _bool,
         "Replay an nn.Module call (with no gradient to flow) whose module tree and "
         "argument types are those of a call remembered before as one recorded node "
         "instead of running forward op by op; forward's Python is skipped, so a call "
         "that reads a value, prints, draws random numbers or changes what it reads is "
         "never replayed (docs/module_reuse.md). False: every call runs forward."),
    Flag("step_sync", True, _bool,
         "An optimizer's step() (and apply_gradients) ends the training step: it computes "
         "what is pending on its parameters' devices, as PyTorch/XLA's optimizer_step "
         "marks a step, so a loop that never reads a value runs one program per step, "
         "the same program each step. False: steps stay pending until a value is read."),
    Flag("compiled_control_flow", True, _bool,
         "Record la.while_loop, la.fori_loop, la.scan and la.cond as HLO while/conditional "
         "(one program whatever the trip count). False: the fallback, traced into the "
         "ordinary graph (cond selects between both branches, fori_loop/scan unroll, "
         "while_loop reads its condition on the host each iteration)."),
    Flag("test_devices", "", _str,
         "Comma-separated devices the test suite runs on; empty means every device present "
         "('cuda' there with fake_cuda set runs the suite on the host-memory stand-in)."),
    Flag("fake_cuda", False, _bool,
         "Serve the 'cuda' device from a stand-in for the CUDA driver backed by host memory "
         "(devices/stand_ins/cuda_fake.py), its kernels run by the CPU target's code of the same "
         "fusion plan: the CUDA runtime (buffers, transfers, launches, graphs, cuBLAS calls) "
         "runs and is tested without a GPU. Read when the 'cuda' device is first made."),
    Flag("cuda_graphs", True, _bool,
         "Let the 'cuda' device capture a cached program whose buffers are the same as in "
         "earlier runs as a CUDA graph and replay it in one launch."),
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
            self._values[name] = FLAGS[name].check(value)
        else:
            super().__setattr__(name, value)

    @contextlib.contextmanager
    def override(self, **values: Any) -> Iterator[None]:
        unknown = set(values) - set(FLAGS)
        if unknown:
            raise AttributeError(f"unknown settings {sorted(unknown)}; settings: {', '.join(FLAGS)}")
        checked = {k: FLAGS[k].check(v) for k, v in values.items()}
        old = {k: self._values[k] for k in values}
        self._values.update(checked)
        try:
            yield
        finally:
            self._values.update(old)

    def reload(self) -> None:
        """Read every setting from the environment again."""
        for f in FLAGS.values():
            raw = os.environ.get(f.env)
            self._values[f.name] = f.default if raw is None else f.from_env(raw)

    def describe(self) -> str:
        return "\n".join(f"{f.env} (now {self._values[f.name]!r}): {f.help}" for f in FLAGS.values())


sys.modules[__name__].__class__ = _Config
sys.modules[__name__]._values = {}
sys.modules[__name__].reload()
