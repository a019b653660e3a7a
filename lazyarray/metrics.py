"""Counters of what the runtime did: syncs, compiles, cache hits, graph breaks."""
from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any


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


def reset() -> None:
    fresh = Metrics()
    METRICS.__dict__.update(fresh.__dict__)


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
        return f"constant {entry[1]} {entry[2]!r}"
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], tuple):
        (op, shape, dtype, attrs), operands = entry
        return f"{op} {dtype}{list(shape)} {dict(attrs)} of {list(operands)}"
    return repr(entry)
