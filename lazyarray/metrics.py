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
    compiles: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    disk_hits: int = 0
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    kernels_launched: int = 0
    donated_buffers: int = 0
    graph_breaks: int = 0
    executable_evictions: int = 0    # compiled programs dropped by the in-memory LRU bound
    graph_size_syncs: int = 0        # syncs forced by a pending graph past max_graph_ops
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
    peak_bytes: dict = field(default_factory=dict)          # module name -> bytes
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
COUNTERS = ("transfer_seconds", "bytes_to_device", "bytes_from_device", "graph_captures",
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


def explain_change(old: tuple, new: tuple) -> str:
    """Say in words why two structural keys differ (a changed input first, else the first
    difference): an input whose shape or dtype changed is named as such ("input 0 changed
    shape: s64[2, 8] -> s64[2, 16]"), so a loop that recompiles says what to bucket."""
    sizes = "" if len(old) == len(new) else f" (the graph has {len(new) - 1} nodes, " \
                                            f"before {len(old) - 1})"
    changed = [i for i, (a, b) in enumerate(zip(old, new)) if a != b]
    # an input that changed explains the nodes computed from it: name it first
    inputs = [i for i in changed if _is_input(old[i]) and _is_input(new[i])]
    for i in (inputs or changed)[:1]:
        return _difference(i, old[i], new[i], new) + sizes
    if sizes:
        return sizes.strip(" ()")
    return "identical structure (compiled again after the cache was cleared)"


def _is_input(entry: Any) -> bool:
    return isinstance(entry, tuple) and bool(entry) and entry[0] in ("P", "S")


def _difference(i: int, a: Any, b: Any, key: tuple) -> str:
    if _is_input(a) and _is_input(b) and a[0] == b[0] == "P":
        number = sum(1 for e in key[:i] if _is_input(e))
        what = "shape" if a[2] == b[2] else ("dtype" if a[1] == b[1] else "shape and dtype")
        return (f"input {number} changed {what}: {a[2]}{list(a[1])} -> {b[2]}{list(b[1])}")
    op_a = a[0][0] if isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple) else None
    op_b = b[0][0] if isinstance(b, tuple) and len(b) == 2 and isinstance(b[0], tuple) else None
    if op_a is not None and op_a == op_b and a[0][1] != b[0][1]:
        return (f"node {i} ({op_a}) changed shape: {a[0][2]}{list(a[0][1])} -> "
                f"{b[0][2]}{list(b[0][1])}")
    return f"node {i} changed: {_describe(a)} -> {_describe(b)}"


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
