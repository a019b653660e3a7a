"""Counters of what the runtime did: syncs, compiles, cache hits, graph breaks."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Metrics:
    syncs: int = 0
    sync_sites: collections.Counter = field(default_factory=collections.Counter)
    # compiles: programs compiled (the passes and LLVM ran); disk_hits: programs loaded
    # from the on-disk cache instead (not compiles); cache_misses = compiles + disk_hits
    compiles: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    disk_hits: int = 0
    compile_seconds: float = 0.0
    disk_load_seconds: float = 0.0
    # the run time of programs; the runtime's own native code (worker pool, trampolines,
    # GEMM tile functions) built or loaded on a first run is counted apart, below
    run_seconds: float = 0.0
    runtime_builds: int = 0
    runtime_loads: int = 0
    runtime_build_seconds: float = 0.0
    kernels_launched: int = 0
    donated_buffers: int = 0
    graph_breaks: int = 0
    executable_evictions: int = 0    # compiled programs dropped by the in-memory LRU bound
    graph_size_syncs: int = 0        # syncs forced by a pending graph past max_graph_ops
    step_boundaries: int = 0         # training steps ended by an optimizer's step()
    graph_break_sites: collections.Counter = field(default_factory=collections.Counter)
    # host time of syncs besides compile_seconds and run_seconds: tracing the graph into
    # a module and looking it up, and (devices that copy) host<->device transfers
    trace_seconds: float = 0.0
    transfer_seconds: float = 0.0
    bytes_to_device: int = 0
    bytes_from_device: int = 0
    # the CUDA device: graph replays of cached programs, its allocator's bytes now
    graph_captures: int = 0
    graph_replays: int = 0
    graph_fallbacks: int = 0
    device_allocated_bytes: int = 0
    device_reserved_bytes: int = 0
    # per compiled program (named "program 3 (cpu)": the third compiled for that device):
    # the peak bytes of its buffer plan (temporaries and outputs)
    peak_bytes: dict = field(default_factory=dict)
    recompiles: list = field(default_factory=list)          # (site, reason)
    # call site -> the last key compiled there, to explain a recompile
    _last_key: dict = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict:
        return {k: (dict(v) if isinstance(v, collections.Counter) else v)
                for k, v in self.__dict__.items() if not k.startswith("_")}

    def __str__(self) -> str:
        lines = [f"{k}: {v}" for k, v in self.as_dict().items()]
        return "\n".join(lines)


METRICS = Metrics()

# Devices count some things themselves (devices do not import lazyarray): a source is a
# function returning such counters, cumulative except the GAUGES, which are read as they
# are now. `refresh` folds them into METRICS, relative to the last `reset`.
_SOURCES: list = []
_BASELINE: dict = {}
GAUGES = {"allocated_bytes": "device_allocated_bytes", "reserved_bytes": "device_reserved_bytes"}
COUNTERS = ("runtime_builds", "runtime_loads", "runtime_build_seconds",
            "transfer_seconds", "bytes_to_device", "bytes_from_device", "graph_captures",
            "graph_replays", "graph_fallbacks")


def register_source(source: Any) -> None:
    _SOURCES.append(source)


def _read_sources() -> dict:
    total: dict = {}
    for source in _SOURCES:
        for k, v in source().items():
            total[k] = total.get(k, 0) + v
    return total


def refresh() -> None:
    now = _read_sources()
    for k in COUNTERS:
        setattr(METRICS, k, now.get(k, 0) - _BASELINE.get(k, 0))
    for k, name in GAUGES.items():
        setattr(METRICS, name, now.get(k, 0))


def reset() -> None:
    fresh = Metrics()
    METRICS.__dict__.update(fresh.__dict__)
    _BASELINE.clear()
    _BASELINE.update(_read_sources())


def explain_change(old: tuple, new: tuple, old_device: str = "", new_device: str = "") -> str:
    """Say in words why a call site compiled again: the device it ran on, else the first
    input that changed, named by its number (the `parameter(), number=N` of the traced
    program) and kind, with what changed: shape, dtype, or a Python scalar that became a
    constant kept in the program (0, 1, -1 ... simplify it) or the other way. E.g.
    "input 0 (tensor) changed dtype: f32[4] -> f64[4]". Else the first node that
    differs."""
    if old_device != new_device:
        return (f"device {old_device} -> {new_device}: each device compiles its own "
                "programs")
    sizes = "" if len(old) == len(new) else f" (the graph has {len(new) - 1} nodes, " \
                                            f"before {len(old) - 1})"
    old_inputs, new_inputs = _inputs(old), _inputs(new)
    # parameters (tensors, runtime scalars) first, by number, tensors before scalars: a
    # tensor's changed dtype explains the weak scalars, constants and ops that follow it
    old_params = [e for e in old_inputs if e[0] != "C"]
    new_params = [e for e in new_inputs if e[0] != "C"]
    old_tensors = [(n, e) for n, e in enumerate(old_params) if e[0] == "P"]
    new_tensors = [(n, e) for n, e in enumerate(new_params) if e[0] == "P"]
    if len(old_tensors) == len(new_tensors):
        for (_, a), (number, b) in zip(old_tensors, new_tensors):
            if a != b:
                return _input_change(number, a, b) + sizes
    if len(old_params) != len(new_params) or len(old_inputs) != len(new_inputs):
        return _count_change(old_inputs, new_inputs) + sizes
    for number, (a, b) in enumerate(zip(old_params, new_params)):
        if a != b:
            return _input_change(number, a, b) + sizes
    for a, b in zip(old_inputs, new_inputs):
        if a != b:
            return _input_change(None, a, b) + sizes
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    for i in changed[:1]:
        return _node_change(i, old[i], new[i]) + sizes
    if sizes:
        return sizes.strip(" ()")
    return "identical structure (compiled again after the cache was cleared)"


def _is_input(entry: Any) -> bool:
    return isinstance(entry, tuple) and bool(entry) and entry[0] in ("P", "S", "C")


def _inputs(key: tuple) -> list:
    """The leaves a program reads, in parameter order (kept constants too: a Python
    scalar that became one is an input that changed)."""
    return [e for e in key if _is_input(e)]


def _input_kind(entry: tuple) -> str:
    return {"P": "tensor", "S": "Python scalar", "C": "kept constant"}[entry[0]]


def _input_type(entry: tuple) -> str:
    if entry[0] == "P":
        return f"{entry[2]}{list(entry[1])}"
    if entry[0] == "S":
        return f"{entry[1]}"
    return _describe(entry)


def _input_list(inputs: list) -> str:
    return ", ".join(f"{_input_kind(e)} {_input_type(e)}" for e in inputs) or "none"


def _count_change(old: list, new: list) -> str:
    """Inputs added or gone: a Python scalar that became a kept constant (or back), else
    the lists."""
    old_c = [e for e in old if e[0] == "C"]
    new_c = [e for e in new if e[0] == "C"]
    if len(old) - len(old_c) == len(new) - len(new_c) + 1 and len(new_c) > len(old_c):
        gained = [e for e in new_c if e not in old_c] or new_c
        return _static(f"a runtime scalar -> the {_describe(gained[0])}")
    if len(new) - len(new_c) == len(old) - len(old_c) + 1 and len(old_c) > len(new_c):
        lost = [e for e in old_c if e not in new_c] or old_c
        return _static(f"the {_describe(lost[0])} -> a runtime scalar")
    return (f"{len(new) - len(new_c)} inputs, before {len(old) - len(old_c)}: "
            f"{_input_list(new)} (before {_input_list(old)})")


def _static(change: str) -> str:
    return (f"a Python scalar's static value: {change} (0, 1, -1 and a few others are kept "
            "in the program, which they simplify; any other value is a runtime scalar "
            "that never recompiles)")


def _input_change(number: Any, a: tuple, b: tuple) -> str:
    if a[0] == b[0] == "P":
        what = "shape" if a[2] == b[2] else ("dtype" if a[1] == b[1] else "shape and dtype")
        return (f"input {number} (tensor) changed {what}: {_input_type(a)} -> {_input_type(b)}"
                + _length_hint(a[1], b[1]))
    if a[0] == b[0] == "S":
        return f"input {number} (Python scalar) changed dtype: {a[1]} -> {b[1]}"
    if a[0] == b[0] == "C":
        if a[1] != b[1]:
            return f"a kept constant's dtype: {_describe(a)} -> {_describe(b)}"
        return _static(f"the {_describe(a)} -> the {_describe(b)}")
    return (f"input {number} {_input_kind(a)} {_input_type(a)} -> "
            f"{_input_kind(b)} {_input_type(b)}")


def _node_change(i: int, a: Any, b: Any) -> str:
    op_a = a[0][0] if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple) else None
    op_b = b[0][0] if isinstance(b, tuple) and len(b) == 2 and isinstance(b[0], tuple) else None
    if op_a is not None and op_a == op_b and a[0][1] != b[0][1]:
        return (f"node {i} ({op_a}) changed shape: {a[0][2]}{list(a[0][1])} -> "
                f"{b[0][2]}{list(b[0][1])}")
    return f"node {i} changed: {_describe(a)} -> {_describe(b)}"


def _length_hint(old: tuple, new: tuple) -> str:
    """For a shape that changed along one axis only (a sequence length, most often): the
    setting that compiles once per bucket of lengths instead of once per length."""
    if len(old) != len(new) or sum(x != y for x, y in zip(old, new)) != 1:
        return ""
    axis = next(i for i, (x, y) in enumerate(zip(old, new)) if x != y)
    return (f"; if axis {axis} is a sequence length that varies, la.config.length_buckets "
            "= True (LAZYARRAY_LENGTH_BUCKETS=1) pads it to a few bucket sizes for modules "
            "taking a key padding mask, or pad by hand with la.pad_to_bucket")


def _describe(entry: Any) -> str:
    if isinstance(entry, tuple) and entry and entry[0] == "P":
        return f"parameter {entry[2]}{list(entry[1])}"
    if isinstance(entry, tuple) and entry and entry[0] == "S":
        return f"scalar {entry[1]}"
    if isinstance(entry, tuple) and entry and entry[0] == "C":
        value = entry[2]
        if isinstance(value, tuple) and len(value) == 3 and isinstance(value[2], bytes):
            kind, shape, data = value        # a literal's content key (compiler/graph/trace.py)
            try:
                value = np.frombuffer(data, np.dtype(kind)).reshape(shape).tolist()
            except (TypeError, ValueError):  # a dtype NumPy names only by size (bfloat16)
                value = f"{len(data)} bytes of {list(shape)}"
        return f"constant {entry[1]} {value!r}"
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], tuple):
        (op, shape, dtype, attrs), operands = entry
        return f"{op} {dtype}{list(shape)} {dict(attrs)} of {list(operands)}"
    return repr(entry)
