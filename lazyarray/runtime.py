"""Devices by name, the pending tensors of each, and `sync`: capture, look up, compile, run.

A sync takes every live pending tensor of a device into one module, so that a value read
in a training loop and the new parameters come out of one program.

Donation: when a device supports it, a sync outside any recording tape lets the program
overwrite the buffers of offered leaves (`offer_donation`: an optimizer offers the old
values of the parameters and state it rebinds) that nothing but the graph being computed
still references, so a
training step updates its parameters in place instead of holding two copies. The check is
by reference count (compiler/trace.py); donated nodes then hold a `DonatedBuffer`, which
raises when read. `LAZYARRAY_DONATE=0` (`la.config.donate = False`) turns it off
(tests compare both ways).
"""
from __future__ import annotations

import os
import time
import weakref
from typing import Any, Optional

from . import config
from .callsite import user_site
from .metrics import METRICS, explain_change
from .compiler.trace import DonatedBuffer, capture
from .devices.device import Device


class DeviceState:
    """A device and what lazyarray keeps for it: pending tensors and compiled executables."""

    def __init__(self, device: Device, index: int = 0) -> None:
        self.device = device
        self.index = index
        # weak references to tensors that may be pending: appending is the cheapest record
        # (a WeakSet would compare tensors, and == on tensors records an op)
        self.pending: list = []
        self.compact_at = 4096
        self.executables: dict = {}
        self.names = 0
        self.supports_donation = bool(getattr(device, "supports_donation", False))

    def add_pending(self, tensor: Any) -> None:
        self.pending.append(weakref.ref(tensor))
        if len(self.pending) > self.compact_at:
            self.pending = [r for r in self.pending if r() is not None]
            self.compact_at = max(4096, 2 * len(self.pending))

    def take_pending(self) -> list:
        """The live, still uncomputed tensors, each once; the list is emptied."""
        seen, out = set(), []
        for r in self.pending:
            t = r()
            if t is not None and t._node.buffer is None and id(t) not in seen:
                seen.add(id(t))
                out.append(t)
        self.pending = []
        return out

    def __repr__(self) -> str:
        kind = self.device.name.split(":")[0]
        return f"device(type='{kind}', index={self.index})" if self.index else \
            f"device(type='{kind}')"


_STATES: dict = {}
_FACTORIES: dict = {}
_COUNTS: dict = {}


def register_device(prefix: str, factory: Any, count: Any = None) -> None:
    """Make `factory(name)` the maker of devices called `prefix` or `prefix:N`, where
    0 <= N < count() (one device when `count` is None)."""
    _FACTORIES[prefix] = factory
    _COUNTS[prefix] = count or _one


def _one() -> int:
    return 1


def registered_devices() -> list:
    """The device names (prefixes) that have a factory, e.g. ['cpu', 'interpreter']."""
    return sorted(_FACTORIES)


def get_device(name: Any = None) -> DeviceState:
    if isinstance(name, DeviceState):
        return name
    if name is None:
        name = config.device or default_device_name()
    name = str(name)
    state = _STATES.get(name)
    if state is None:
        prefix, index = _parse_device(name)
        canonical = f"{prefix}:{index}"
        state = _STATES.get(canonical)
        if state is None:
            # the first device of a kind keeps the kind's plain name ('cpu', 'cuda')
            state = DeviceState(_FACTORIES[prefix](canonical if index else prefix), index)
            _STATES[canonical] = state
        _STATES[name] = state
    return state


def _parse_device(name: str) -> tuple:
    """('cpu', 0) for 'cpu' or 'cpu:0'; raises for an unknown kind or index."""
    prefix, _, index = name.partition(":")
    if prefix not in _FACTORIES:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(sorted(_FACTORIES))}")
    count = _COUNTS.get(prefix, _one)()
    if index and not index.isdigit():
        raise ValueError(f"device {name!r}: the index after ':' must be a number, "
                         f"e.g. '{prefix}:0'")
    n = int(index or 0)
    if n >= count:
        hint = " (set LAZYARRAY_CPU_DEVICES=K, or la.config.cpu_devices = K, for K logical " \
               "CPU devices)" if prefix == "cpu" else ""
        raise ValueError(f"unknown device {name!r}: there {'is' if count == 1 else 'are'} "
                         f"{count} {prefix} device{'s' if count != 1 else ''} "
                         f"({', '.join(f'{prefix}:{i}' for i in range(count))}){hint}")
    return prefix, n


def default_device_name() -> str:
    return "cpu" if "cpu" in _FACTORIES else "interpreter"


def live_states() -> list:
    seen, out = set(), []
    for s in _STATES.values():
        if id(s) not in seen:
            seen.add(id(s))
            out.append(s)
    return out


# tapes that are recording keep the graph behind materialized nodes alive
TAPE_DEPTH = [0]
# nodes materialized while a tape held the graph: released when the last tape ends
HELD: list = []
# set by lazyarray.backward: keeps_graph(capture) is true when a sync's graph reaches a
# tensor that requires grad, whose later backward() needs the graph behind the outputs
KEEPS_GRAPH: list = [None]
# leaves whose owner replaced them: candidates for donation (weak: offering keeps nothing alive)
OFFERED: "weakref.WeakSet" = weakref.WeakSet()


def offer_donation(node: Any) -> None:
    """`node` (a materialized value) is being replaced by its owner: a later sync may give
    its buffer to the program, if by then nothing else references it."""
    if node.buffer is not None:
        OFFERED.add(node)


def sync(state: Optional[DeviceState] = None) -> None:
    """Compute every live pending tensor of `state`'s device (of every device if None)."""
    for s in ([state] if state is not None else live_states()):
        _sync_one(s)


def _sync_one(state: DeviceState) -> None:
    tensors = state.take_pending()
    if not tensors:
        return
    nodes = list({id(t._node): t._node for t in tensors}.values())
    site = user_site()
    METRICS.syncs += 1
    METRICS.sync_sites[site] += 1
    donate = config.donate and not TAPE_DEPTH[0] and state.supports_donation and len(OFFERED)
    try:
        cap = capture(nodes, OFFERED if donate else None)
        exe = _executable(state, cap, site)
        t0 = time.perf_counter()
        try:
            outs = exe.run(cap.args)
        finally:
            _invalidate(cap.donated_nodes)   # even a failed run may have written into them
        METRICS.run_seconds += time.perf_counter() - t0
        METRICS.kernels_launched += getattr(exe, "kernels_per_run", 0)
    except BaseException:
        for t in tensors:                    # nothing computed: they stay pending
            state.add_pending(t)
        raise
    keep = TAPE_DEPTH[0] or (KEEPS_GRAPH[0] is not None and KEEPS_GRAPH[0](cap))
    for n, buf in zip(nodes, outs):
        n.buffer = buf
        if not keep:
            n.release()
        else:
            HELD.append(weakref.ref(n))


def _invalidate(nodes: tuple) -> None:
    for n in nodes:
        n.buffer = DonatedBuffer(n.shape, n.dtype)
    METRICS.donated_buffers += len(nodes)


def _executable(state: DeviceState, cap: Any, site: str) -> Any:
    exe = state.executables.get(cap.key)
    if exe is not None:
        METRICS.cache_hits += 1
        return exe
    METRICS.cache_misses += 1
    last = METRICS._last_key.get(site)
    if last is not None:
        METRICS.recompiles.append((site, explain_change(last, cap.key)))
    METRICS._last_key[site] = cap.key
    state.names += 1
    module = cap.module(f"{state.device.platform}_{state.names}")
    _dump(module)
    t0 = time.perf_counter()
    exe = state.device.compile(module, donated=cap.donated) if cap.donated \
        else state.device.compile(module)
    seconds = time.perf_counter() - t0
    METRICS.compiles += 1
    METRICS.compile_seconds += seconds
    METRICS.disk_hits += int(getattr(exe, "from_disk_cache", False))
    if hasattr(exe, "peak_bytes"):
        METRICS.peak_bytes[module.name] = exe.peak_bytes
    if config.debug >= 1:
        print(f"[lazyarray] compiled {module.name}: {len(module.instructions)} instructions, "
              f"{seconds * 1e3:.1f} ms (cache miss, from {site})")
    state.executables[cap.key] = exe
    return exe


def _dump(module: Any) -> None:
    if not config.dump:
        return
    os.makedirs(config.dump, exist_ok=True)
    with open(os.path.join(config.dump, module.name + ".hlo"), "w") as f:
        f.write(str(module))


def clear_caches() -> None:
    for s in live_states():
        s.executables.clear()
