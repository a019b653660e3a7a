"""Devices by name, the pending tensors of each, and `sync`: capture, look up, compile, run.

A sync takes every live pending tensor of a device into one module, so that a value read
in a training loop and the new parameters come out of one program.

Donation: when a device supports it, a sync outside any recording tape lets the program
overwrite the buffers of offered leaves (`offer_donation`: an optimizer offers the old
values of the parameters and state it rebinds) that nothing but the graph being computed
still references, so a
training step updates its parameters in place instead of holding two copies. The check is
by reference count (compiler/graph/trace.py); donated nodes then hold a `DonatedBuffer`, which
raises when read. `LAZYARRAY_DONATE=0` (`la.config.donate = False`) turns it off
(tests compare both ways).
"""
from __future__ import annotations

import collections
import os
import threading
import time
import warnings
import weakref
from typing import Any, Optional

from . import config
from .callsite import format_frame, user_frame, user_site
from .metrics import METRICS, explain_change, register_source
from .compiler import fork_locks, profile_hooks
from .compiler.codegen.interrupts import InterruptsDeferred
from .compiler.hlo.printer import type_text
from .compiler.hlo.replay import save_inputs, scalar_comments
from .compiler.graph.trace import Capture, DonatedBuffer, Template, capture, describe_key, donation_safe
from .devices.device import Device
from .devices.runtime_builds import TOTALS as RUNTIME_BUILDS

register_source(lambda: {"runtime_builds": RUNTIME_BUILDS[0], "runtime_loads": RUNTIME_BUILDS[1],
                         "runtime_build_seconds": RUNTIME_BUILDS[2]})


class ExecutableCache:
    """Compiled programs by structural key, least recently used dropped first past
    `executable_cache_max` programs or `executable_cache_max_mb` of code and constants
    (a program's `nbytes`, where the device reports it)."""

    def __init__(self) -> None:
        self._items: "collections.OrderedDict" = collections.OrderedDict()
        self.nbytes = 0
        self.evictions = 0
        # call site -> (key, program) of the last hit there: a loop syncing at one line
        # finds its program by comparing keys, without hashing one (a key is a long tuple
        # made afresh at every sync: hashing it walks all of it, comparing equal keys
        # mostly meets the same objects)
        self._by_site: dict = {}

    def get(self, key: Any, site: Any = None, cap: Any = None) -> Any:
        """The program of `key`, or None. With `site` (the user's line that synced) and
        its capture `cap`: the second hit in a row of one key at one site makes a
        template of the capture, which the next syncs there try first (`_by_site[site]`:
        [key, program, template], see `_run_template`)."""
        last = self._by_site.get(site)
        if last is not None and last[0] == key:
            if last[2] is None and cap is not None:
                last[2] = Template(cap)
            return last[1]
        exe = self._items.get(key)
        if exe is not None:
            self._items.move_to_end(key)
            if site is not None:
                if len(self._by_site) > 1024:     # sites made at run time: stay bounded
                    self._by_site.clear()
                self._by_site[site] = [key, exe, None]
        return exe

    def put(self, key: Any, exe: Any) -> None:
        # the programs found by site are in use: refresh them before dropping the least
        # recently used (a hit by site does not reorder)
        for used, _, _ in self._by_site.values():
            if used in self._items:
                self._items.move_to_end(used)
        self._by_site.clear()
        old = self._items.pop(key, None)
        if old is not None:
            self.nbytes -= _size(old)
        self._items[key] = exe
        self.nbytes += _size(exe)
        most, cap = _VALUES["executable_cache_max"], _VALUES["executable_cache_max_mb"] << 20
        while len(self._items) > 1 and (len(self._items) > most or self.nbytes > cap):
            _, dropped = self._items.popitem(last=False)
            self.nbytes -= _size(dropped)
            self.evictions += 1
            METRICS.executable_evictions += 1

    def clear(self) -> None:
        self._items.clear()
        self._by_site.clear()
        self.nbytes = 0

    def __contains__(self, key: Any) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)


def _size(exe: Any) -> int:
    return int(getattr(exe, "nbytes", 0))


class DeviceState:
    """A device and what lazyarray keeps for it: pending tensors and compiled executables."""

    def __init__(self, device: Device, index: int = 0) -> None:
        self.device = device
        self.index = index
        # weak references to tensors that may be pending: appending is the cheapest record
        # (a WeakSet would compare tensors, and == on tensors records an op)
        self.pending: list = []
        self.compact_at = 4096
        self.executables = ExecutableCache()
        self.names = 0
        self.supports_donation = bool(getattr(device, "supports_donation", False))
        # one sync at a time per device: a sync takes every pending tensor, so another
        # thread reading one of them must wait until it holds its buffer
        self.lock = fork_locks.rlock()
        self.recorded = 0         # ops recorded since the last sync (bounds the graph)

    def add_pending(self, tensor: Any, listed: bool = False, site: Any = None) -> None:
        """Note a newly recorded tensor (`listed`: already appended to `pending` by a
        caller that lists it before it holds its node, see `Tensor._assign`); past
        `max_graph_ops` records since the last sync, compute what is pending first (see
        `_graph_too_big`). `Tensor._wrap`, where every op ends, does the same inline.
        `site`: the user's frame when the caller found it (once for many tensors)."""
        if not listed:
            self.pending.append(weakref.ref(tensor))
        tensor._node.site = user_frame() if site is None else site
        self.recorded += 1
        if NO_GRAD:
            note_no_grad(tensor)
        if len(self.pending) > self.compact_at or self.recorded > _VALUES["max_graph_ops"] > 0:
            self.tidy_pending()

    def tidy_pending(self) -> None:
        """Drop the dead entries of a long pending list; past `max_graph_ops` records
        since the last sync, compute what is pending."""
        if len(self.pending) > self.compact_at:
            self.pending = [r for r in self.pending if r() is not None]
            self.compact_at = max(4096, 2 * len(self.pending))
        if self.recorded > _VALUES["max_graph_ops"] > 0:
            _graph_too_big(self)

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

    @property
    def type(self) -> str:
        """'cpu', 'cuda', 'interpreter' (PyTorch's `x.device.type`)."""
        return self.device.name.split(":")[0]

    def __repr__(self) -> str:
        kind = self.type
        return f"device(type='{kind}', index={self.index})" if self.index else \
            f"device(type='{kind}')"


_VALUES = config._values        # read at every recorded op: the dict, not the attribute
_WARNED_GRAPH: list = []


def _graph_too_big(state: DeviceState) -> None:
    """Materialize a pending graph that grew past `max_graph_ops` (a loop with no step
    boundary that never reads a value): compile time and memory grow with the graph."""
    METRICS.graph_size_syncs += 1
    if not _WARNED_GRAPH:
        _WARNED_GRAPH.append(True)
        limit = _VALUES["max_graph_ops"]
        where = user_site()
        file, _, line = where.rpartition(":")
        warnings.warn_explicit(
            f"lazyarray: more than {limit} ops recorded on {state.device.name!r} without a "
            f"step boundary (at {where}); computing what is pending now. A training step "
            "ends at optimizer.step() (unless la.config.step_sync is off) or la.sync(); a "
            "loop without an optimizer should call la.sync() once per iteration (or read "
            "a value). Raise LAZYARRAY_MAX_GRAPH_OPS (0: no limit) for one larger graph. "
            "Warned once.", RuntimeWarning, file, int(line) if line.isdigit() else 0)
    _sync_one(state)


def step_boundary(states: list) -> None:
    """The end of a training step (`Optimizer.step`/`apply_gradients` call it): compute
    what is pending on `states` (the parameters' devices), as PyTorch/XLA's
    `optimizer_step` marks a step, so that a loop that never reads a value runs one
    program per step, the same one each step, and no graph spans two steps. Not while a
    tape records (its graph is being differentiated: the step is part of it) nor with
    `la.config.step_sync` off. Raises what the step's program raised."""
    if not _VALUES["step_sync"] or TAPE_DEPTH[0]:
        return
    METRICS.step_boundaries += 1
    errors: list = []
    for s in states:
        if s.pending:
            errors += _sync_one(s)
    if errors:
        raise errors[0]


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


# thread id -> the tensors that thread recorded inside its innermost `no_grad()` block
# (lazyarray/backward.py), for the threads inside one: grad mode is per thread, as in
# PyTorch, and `pending` is shared, so what a block recorded is noted as it is recorded.
# Empty (one truth test per recorded op) while no thread is in such a block.
NO_GRAD: dict = {}


class Recorded(list):
    """Weak references to the tensors one thread recorded in a `no_grad()` block; `ids`:
    the ids of those reference objects (each alive in the list, so its id is its own).
    A tensor's plain weak reference is one object: the one in `pending` is among them."""

    compact_at = 4096
    plain = False        # noted since a plain `set_grad_enabled(False)` (lazyarray/backward.py)

    def __init__(self) -> None:
        super().__init__()
        self.ids: set = set()

    def compact(self) -> None:
        """Drop the references of dead tensors (a long inference loop inside one block)."""
        self[:] = [r for r in self if r() is not None]
        self.ids = {id(r) for r in self}
        self.compact_at = max(4096, 2 * len(self))


def note_no_grad(tensor: Any) -> None:
    """Note a tensor recorded now, if this thread is in a `no_grad()` block (`Tensor._wrap`
    does the same inline)."""
    noted = NO_GRAD.get(threading.get_ident())
    if noted is not None:
        ref = weakref.ref(tensor)
        noted.append(ref)
        noted.ids.add(id(ref))
        if len(noted) > noted.compact_at:
            noted.compact()


# tapes that are recording keep the graph behind materialized nodes alive
TAPE_DEPTH = [0]
# nodes materialized while a tape held the graph: released when the last tape ends
HELD: list = []
# set by lazyarray.backward: keeps_graph(order, positions, roots) is true when a sync's
# graph (its nodes `order`; `positions`, a dict keyed by them, or None; `roots`, the
# nodes it computes) reaches a tensor that requires grad, whose later backward() needs
# the graph behind the outputs
KEEPS_GRAPH: list = [None]
# leaves whose owner replaced them: candidates for donation (weak: offering keeps nothing alive)
OFFERED: "weakref.WeakSet" = weakref.WeakSet()


def offer_donation(node: Any) -> None:
    """`node` (a materialized value) is being replaced by its owner: a later sync may give
    its buffer to the program, if by then nothing else references it."""
    if node.buffer is not None:
        OFFERED.add(node)


def offer_donations(nodes: list) -> None:
    """`offer_donation` of each node (an optimizer's step offers every old parameter and
    state at once)."""
    add = OFFERED.add
    for node in nodes:
        if node.buffer is not None:
            add(node)


class SyncError(RuntimeError):
    """A value could not be computed: names the op that failed and the user's line where
    it was recorded; the original error is its __cause__."""


class FailedValue(DonatedBuffer):
    """Stands in for the buffer of a node whose computation failed: reading it (or
    computing anything from it) raises the stored error again."""

    __slots__ = ("error",)

    def __init__(self, shape: tuple, dtype: Any, error: BaseException) -> None:
        super().__init__(shape, dtype)
        self.error = error

    def _fail(self) -> None:
        # a fresh exception each time: raising one object again would grow its traceback
        raise type(self.error)(*self.error.args) from self.error.__cause__

    def __repr__(self) -> str:
        return f"<failed value {self.dtype.short}{list(self.shape)}: {self.error}>"


def sync(state: Optional[DeviceState] = None) -> None:
    """Compute every live pending tensor of `state`'s device (of every device if None).
    Raises the first error stored during it (the other tensors are computed)."""
    errors: list = []
    for s in ([state] if state is not None else live_states()):
        errors += _sync_one(s)
    if errors:
        raise errors[0]


# values read so far (`value`): a module call that reads one is not replayed
# (lazyarray/nn/module_reuse.py)
READS = [0]


def value(tensor: Any) -> Any:
    """The buffer of `tensor`, computing its device's pending work first if needed;
    raises the stored error of a value that failed or was donated."""
    READS[0] += 1
    while True:
        node = tensor._node
        if node.buffer is None:
            state = tensor._state
            with state.lock:
                if node.buffer is None:
                    # pending again: another thread's sync may have taken it and given it
                    # back. The node read above is what is computed, even when another
                    # thread gives the tensor a new value meanwhile (an optimizer's step)
                    pin = _Pin(node)
                    state.pending.append(weakref.ref(pin))
                    # the user's line, looked for above our caller (a Tensor method: ours)
                    _sync_locked(state, user_site(3))
        buf = node.buffer
        if isinstance(buf, DonatedBuffer):
            if type(buf) is DonatedBuffer and tensor._node is not node:
                continue    # another thread replaced the value (and donated the old): read the new one
            buf._fail()
        return buf


class _Pin:
    """Holds one node for a sync, as a tensor would (`value`)."""

    __slots__ = ("_node", "__weakref__")

    def __init__(self, node: Any) -> None:
        self._node = node


def _sync_one(state: DeviceState, site: Optional[str] = None) -> list:
    """Compute what is pending on `state`; the errors stored on failed tensors (empty
    when all were computed). A KeyboardInterrupt leaves them pending and is raised.
    `site`: the user's line that asked (found here when None)."""
    with state.lock:
        return _sync_locked(state, site)


def _sync_locked(state: DeviceState, site: Optional[str]) -> list:
    """`_sync_one` with `state.lock` held (by a caller that took it already: one lock)."""
    refs = state.pending
    try:
        # emptied inside the try: an interrupt from here on gives the references back
        # (a live uncomputed tensor missing from `pending` would be computed only as an
        # intermediate of later programs, and a leaf under it could be donated; one
        # listed twice is taken once)
        state.pending = []
        nodes, seen = [], set()          # the live, uncomputed nodes, each once
        # inside no_grad() blocks (and no tape): whether every value to compute was
        # recorded in one (a tensor noted there; a `.numpy()`'s pin of such a tensor)
        noted = [rec.ids for rec in NO_GRAD.values()] if NO_GRAD and not TAPE_DEPTH[0] \
            else None
        quiet, pins = set(), []
        for r in refs:
            t = r()
            if t is not None:
                n = t._node
                if n.buffer is None:
                    if n not in seen:
                        seen.add(n)
                        nodes.append(n)
                    if noted is None:
                        continue
                    if type(t) is _Pin:
                        pins.append(n)
                    elif any(id(r) in ids for ids in noted):
                        quiet.add(n)
                    else:
                        noted = None     # one recorded with gradients on: keep as before
        state.recorded = 0
        if not nodes:
            return []
        if site is None:
            site = user_site()
        METRICS.syncs += 1
        METRICS.sync_sites[site] += 1
        # (the weak set's own set and the config's dict: read at every sync)
        donate = len(OFFERED.data) and _VALUES["donate"] and not TAPE_DEPTH[0] \
            and state.supports_donation
        # every value to compute was recorded inside no_grad(): no backward() can walk
        # back through them, so they forget their graphs now rather than when the block
        # ends (a Python loop decoding under no_grad kept every step's graph alive: a
        # GPT's 64 steps, 35,000 nodes, and the collector's full passes over them). The
        # run gives them their buffers so (`_give`), with no look for trainable tensors
        # in their graph (a decoding step's graph reaches every weight)
        outer = getattr(_QUIET, "on", False)
        _QUIET.on = noted is not None and all(n in quiet for n in pins)
        try:
            _compute(state, nodes, bool(donate), site)
        except Exception as error:
            return _isolate(state, nodes, error)
        finally:
            _QUIET.on = outer
    except BaseException:
        # interrupted: nothing was lost (inputs intact, see _compute), so the tensors
        # not computed stay pending for a later sync (the computed and the dead ones
        # among the references are skipped by the next sync)
        if state.pending is not refs:
            state.pending.extend(refs)
        raise
    return []


# per thread: whether the sync this thread runs computes only values recorded inside
# no_grad() (and no tape): the computed nodes forget their graphs as they get their
# buffers, with no look for trainable tensors in the graph first (`_sync_locked`)
_QUIET = threading.local()


def _compute(state: DeviceState, nodes: list, donate: bool, site: str = "") -> None:
    """Compile (or look up) and run one program computing `nodes`, and give each its
    buffer. Until the run starts nothing is changed. A program that overwrites donated
    inputs runs to its end even when interrupted (the interrupt is raised once its
    results are in place): stopping it half way would lose both the old and new values.

    A cache hit is the path every step of a loop takes: capture (one walk), one dict
    lookup, the run; the timers and counters on it are a few attribute updates."""
    rec = profile_hooks.ACTIVE      # a profile records: mark the phases (lazyarray/profiler.py)
    if rec:
        rec.sync_begin(state, site or user_site(), len(nodes))
    t0 = _clock()
    if not rec and site:
        # a loop's sync: the graph matched against the last one synced at this line
        # (donating exactly as the capture below would, or not at all)
        last = state.executables._by_site.get(site)
        if last is not None and last[2] is not None and \
                _run_template(last, nodes, donate, t0):
            return
    cap = capture(nodes, OFFERED if donate else None)
    if cap.donated_nodes and not donation_safe(cap):
        cap = capture(nodes, None)
    if rec:
        rec.sync_mark("capture")
    exe = state.executables.get(cap.key, site or None, cap)
    if exe is not None:
        METRICS.cache_hits += 1
        METRICS.trace_seconds += _clock() - t0
    else:
        METRICS.trace_seconds += _clock() - t0
        exe = _compile(state, cap, site or user_site())
    if rec:
        rec.sync_mark("lookup")
    if cap.donated_nodes:
        with InterruptsDeferred():
            _run(exe, cap, nodes)
    else:
        _run(exe, cap, nodes)
    if rec:
        rec.sync_end(exe, cap)


_clock = time.perf_counter


def _run_template(last: list, nodes: list, donate: bool, t0: float) -> bool:
    """Run the program of `last` ([key, program, template], a site's last hit) for
    `nodes` when the template accepts their graph; False (nothing done) when it does
    not. The path of every cached sync in a loop: the check, the run, the results."""
    exe, template = last[1], last[2]
    if donate or template.donated:
        # may donate: the template's checks answer for capture's (see Template.bind)
        bound = template.bind(nodes, OFFERED.data if donate else None)
        if bound is None:
            return False
        METRICS.cache_hits += 1
        METRICS.trace_seconds += _clock() - t0
        if bound.donated_nodes:
            with InterruptsDeferred():
                _run(exe, bound, nodes)
        else:
            _run(exe, bound, nodes)
        return True
    try:
        found = template.check(nodes)
    except ValueError:                # another number of roots or operands somewhere
        return False
    if found is None:
        return False
    order, args = found
    METRICS.cache_hits += 1
    t1 = _clock()
    METRICS.trace_seconds += t1 - t0
    outs = exe.run(args)
    METRICS.run_seconds += _clock() - t1
    METRICS.kernels_launched += getattr(exe, "kernels_per_run", 0)
    keeps = KEEPS_GRAPH[0]             # (_give written out)
    if not getattr(_QUIET, "on", False) and (
            TAPE_DEPTH[0] or (keeps is not None and keeps(order, None, nodes))):
        _hold(nodes, outs)
        return True
    for n, buf in zip(nodes, outs):
        n.buffer = buf
        n.operands = ()                # (Node.release)
    return True


def _run(exe: Any, cap: Any, nodes: list) -> None:
    t0 = _clock()
    built = RUNTIME_BUILDS[2]
    if cap.donated_nodes and getattr(exe, "may_fail", False):
        # a program that can fail on its data (a singular matrix) writes into copies of
        # the donated inputs: a failed run leaves every tensor as it was, and the
        # originals are let go only after it succeeded
        args = list(cap.args)
        for number in cap.donated:
            args[number] = args[number].copy()     # (host arrays: only the CPU sets may_fail)
        outs = exe.run(args)
        _invalidate(cap.donated_nodes)
    elif cap.donated_nodes:
        try:
            outs = exe.run(cap.args)
        finally:
            _invalidate(cap.donated_nodes)   # even a failed run may have written into them
    else:
        outs = exe.run(cap.args)
    # a first run may build the runtime's own code (a GEMM tile function): not run time
    METRICS.run_seconds += _clock() - t0 - (RUNTIME_BUILDS[2] - built)
    METRICS.kernels_launched += getattr(exe, "kernels_per_run", 0)
    # (a capture's positions are there already; a template's Bound would make them)
    _give(nodes, outs, cap.order, cap.positions if type(cap) is Capture else None)


def _give(nodes: list, outs: list, order: Any, positions: Any) -> None:
    """Each computed node gets its buffer and forgets its operands, unless a tape (or a
    later backward(), see `KEEPS_GRAPH`) needs the graph behind it: then it is held.
    `order`: the sync's nodes; `positions`: a dict keyed by them, when there is one.
    In a quiet sync (`_QUIET`) no backward() can need it: no look for trainable tensors
    in the graph."""
    keeps = KEEPS_GRAPH[0]
    if not getattr(_QUIET, "on", False) and (
            TAPE_DEPTH[0] or (keeps is not None and keeps(order, positions, nodes))):
        _hold(nodes, outs)
        return
    for n, buf in zip(nodes, outs):
        n.buffer = buf
        n.operands = ()                # (Node.release)


def _hold(nodes: list, outs: list) -> None:
    """Each computed node gets its buffer and keeps its graph, held until the tapes end
    (see `HELD`)."""
    for n, buf in zip(nodes, outs):
        n.buffer = buf
        HELD.append(weakref.ref(n))


# ---- errors: stored on the tensors that depend on the failing op ---------------------

ISOLATE_BUDGET = 24        # programs tried to find the failing op of one tensor


def _isolate(state: DeviceState, nodes: list, error: Exception) -> list:
    """After a failed sync of `nodes`: compute each on its own; each that fails gets the
    error of the op found to fail, stored on it. Returns the errors stored."""
    if len(nodes) == 1:
        return [_blame(state, nodes[0], error)]
    errors = []
    for n in nodes:
        if n.buffer is not None:          # computed on the way by another's search
            continue
        try:
            _compute(state, [n], donate=False)
        except Exception as e:
            errors.append(_blame(state, n, e))
    return errors


def _blame(state: DeviceState, node: Any, error: Exception) -> SyncError:
    """Find the op under `node` that fails (descending to an operand that fails on its
    own, within a budget of programs), store the error on it and on `node`."""
    culprit, site, budget = node, node.site, ISOLATE_BUDGET
    while budget > 0 and not isinstance(error, SyncError):
        deeper = None
        for o in {id(o): o for o in culprit.operands}.values():
            if o.buffer is not None or not o.operands or budget <= 0 \
                    or type(o.dtype) is tuple:       # a while's tuple: not a value alone
                continue
            budget -= 1
            try:
                _compute(state, [o], donate=False)
            except Exception as e:
                deeper, error = o, e
                break
        if deeper is None:
            break
        culprit = deeper
        site = culprit.site or site      # an op's inner nodes: the line of the op
    stored = error if isinstance(error, SyncError) else _sync_error(culprit, site, error)
    for n in (culprit, node):
        if n.buffer is None:
            n.buffer = FailedValue(n.shape, n.dtype, stored)
            n.release()
    return stored


def _op_text(node: Any) -> str:
    """The failing op's name; a replayed module call's result (lazyarray/nn/module_reuse.py)
    by its module, the op inside it being out of sight."""
    for made_by in node.operands[:1]:       # (an element of the call's tuple)
        caller = getattr((made_by.attrs or {}).get("computation"), "caller", None)
        if caller:
            return (f"{caller}.forward (replayed as one call: LAZYARRAY_MODULE_REUSE=0 "
                    "names the op in it)")
    return node.op


def _sync_error(node: Any, site: Any, error: BaseException) -> SyncError:
    e = _error_class(type(error))(
        f"{_op_text(node)} -> {type_text(node.shape, node.dtype)}, recorded at "  # a tuple too
        f"{format_frame(site)}, could not be computed: {type(error).__name__}: {error}")
    e.__cause__ = error
    return e


_ERROR_CLASSES: dict = {}


def _error_class(kind: type) -> type:
    """A SyncError that is also of the original error's type, so that `except
    np.linalg.LinAlgError` (or ValueError, ...) still catches a failed value where a
    NumPy user expects it; plain SyncError where the two cannot be combined."""
    cls = _ERROR_CLASSES.get(kind)
    if cls is None:
        try:
            cls = type(f"SyncError[{kind.__name__}]", (SyncError, kind), {}) \
                if issubclass(kind, Exception) and not issubclass(kind, SyncError) else SyncError
            str(cls("a message"))     # an error type that wants other arguments cannot join
        except Exception:             # (incompatible layouts, NumPy's memory error, ...)
            cls = SyncError
        _ERROR_CLASSES[kind] = cls
    return cls




def _invalidate(nodes: tuple) -> None:
    for n in nodes:
        n.buffer = DonatedBuffer(n.shape, n.dtype)
    METRICS.donated_buffers += len(nodes)


# the metrics that list each compile keep the latest this many (a process compiling
# shape after shape must not grow by one entry a compile for good)
RECENT = 1000


def _recent(entries: list, entry: Any) -> None:
    entries.append(entry)
    if len(entries) > RECENT:
        del entries[:len(entries) - RECENT]


def _compile(state: DeviceState, cap: Any, site: str) -> Any:
    """Compile `cap` on a cache miss (the in-memory cache; the device looks in its disk
    cache), counting it and saying what changed since the last compile at `site`."""
    METRICS.cache_misses += 1
    last = METRICS._last_key.get(site)
    device = state.device.name
    if last is not None:
        _recent(METRICS.recompiles, (site, explain_change(
            describe_key(last[1]), describe_key(cap.key), last[0], device)))
    METRICS._last_key[site] = (device, cap.key)
    state.names += 1
    # "cpu_program_3": the third program of that device (never to be read as a device name)
    module = cap.module(f"{state.device.platform}_program_{state.names}")
    _dump(module, cap.args, state.device)
    t0 = time.perf_counter()
    built = RUNTIME_BUILDS[2]
    exe = state.device.compile(module, donated=cap.donated) if cap.donated \
        else state.device.compile(module)
    # the runtime's own code built meanwhile is counted apart (metrics.runtime_builds)
    seconds = time.perf_counter() - t0 - (RUNTIME_BUILDS[2] - built)
    if getattr(exe, "from_disk_cache", False):
        METRICS.disk_hits += 1              # loaded, not compiled
        METRICS.disk_load_seconds += seconds
    else:
        METRICS.compiles += 1
        METRICS.compile_seconds += seconds
    if hasattr(exe, "peak_bytes"):
        METRICS.peak_bytes[module.name] = exe.peak_bytes
        if len(METRICS.peak_bytes) > RECENT:
            del METRICS.peak_bytes[next(iter(METRICS.peak_bytes))]
    if config.debug >= 1:
        how = "loaded from the disk cache" if getattr(exe, "from_disk_cache", False) \
            else "compiled"
        print(f"[lazyarray] {how} {module.name}: {len(module.instructions)} instructions, "
              f"{seconds * 1e3:.1f} ms (cache miss, from {site})")
    state.executables.put(cap.key, exe)
    if config.dump:
        _scalars_into_optimized(module.name, cap.args)
    return exe


def _dump(module: Any, args: list, device: Any) -> None:
    """The module as text, its runtime scalars' values in comment lines, and (when small)
    every input in `<name>.inputs.npz` (device buffers read back): `run_hlo` replays the
    dump exactly. The device writes the later stages (devices/dump_files.py)."""
    if not config.dump:
        return
    os.makedirs(config.dump, exist_ok=True)
    base = os.path.join(config.dump, module.name)
    with open(base + ".hlo", "w") as f:
        f.write(scalar_comments(args) + str(module))
    save_inputs(base + ".inputs.npz", args, getattr(device, "get", None))


def _scalars_into_optimized(name: str, args: list) -> None:
    """The runtime scalars' comment lines at the head of the device's `.optimized.hlo` too
    (its parameters keep their numbers), so that it replays as the `.hlo` does."""
    path = os.path.join(config.dump, name + ".optimized.hlo")
    comments = scalar_comments(args)
    if not comments or not os.path.exists(path):
        return
    with open(path) as f:
        text = f.read()
    if not text.startswith(comments):
        with open(path, "w") as f:
            f.write(comments + text)


def clear_caches() -> None:
    for s in live_states():
        s.executables.clear()
