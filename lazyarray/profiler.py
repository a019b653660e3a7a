"""A profiler that ties every kernel to the user's code.

    with la.profiler.profile() as prof:
        loss = train_step(xb, yb)
        loss.item()                       # the sync happens inside the block
    print(prof.table())                   # the top kernels, like torch.profiler's table
    print(prof.table(group_by="line"))    # the user's lines by the kernel time behind them
    prof.export_chrome_trace("step.json") # open in https://ui.perfetto.dev

While the block runs, each sync records its phases: trace (the Python between syncs:
the user's code recording ops), capture, cache lookup or compile (each pass, code
generation, the disk cache), binding and transfers, and the run of every kernel and
library call (CPU: wall time per kernel and the threads it ran on: while a profile
records, a program runs step by step instead of as one native job; CUDA: events on the
stream). Each kernel carries its bytes read and written, its flops, the HLO
ops it fused and the user's lines those ops were recorded at.

Off, it costs nothing but a check of one module-level variable at each hook: the
compiler and the devices test `compiler.profile_hooks.ACTIVE`, recording an op tests
`callsite.SITES`. On, the programs run are the same ones (no separately compiled
variant: timers go around the steps), so results are bit-identical.
"""
from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from . import callsite, profiler_report
from .compiler import fork_locks, profile_hooks
from .metrics import METRICS
from .runtime import live_states

BEFORE = "(recorded before the profile began)"
GPU_TRACK = -1          # the tid of GPU stream events in a trace
USER_TRACK = -2         # the tid of the user's own spans (`record`)
GRAD = " (grad)"        # a site's suffix for the gradient ops of the ops recorded there


@dataclass
class Event:
    """One timed span: `t0`/`t1` in perf_counter seconds, on thread `tid`."""
    name: str
    cat: str
    t0: float
    t1: float
    tid: int
    args: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0


class Profile:
    """What one `profile()` block recorded; see `table`, `key_averages` and
    `export_chrome_trace`. Methods not starting with an underscore that are not listed
    there are the recorder's hooks (compiler/profile_hooks.py)."""

    def __init__(self) -> None:
        self.events: list = []
        self.start = self.end = time.perf_counter()
        self.main_tid = threading.get_ident()
        self._open: Optional[dict] = None        # the sync being recorded
        self._last_sync_end = self.start
        self._kernels: list = []                 # kernel events of the open sync
        self._gpu: list = []                     # (program, kernel, kind, ms) of it
        self._syncs = 0

    # ---- hooks (called by the runtime, the compiler and the devices) ----------------

    def span(self, cat: str, name: str, t0: float, t1: float, args: dict) -> None:
        self.events.append(Event(name, cat, t0, t1, threading.get_ident(), dict(args)))

    def kernel(self, program: str, kernel: str, kind: str, t0: float, t1: float,
               threads: int = 1) -> None:
        ev = Event(kernel, "kernel", t0, t1, threading.get_ident(),
                   {"program": program, "kind": kind, "threads": threads})
        self.events.append(ev)
        self._kernels.append(ev)

    def trips(self, count: int) -> None:
        """The loop whose kernel event came last ran `count` iterations (its body's
        kernels are events of their own program, "body")."""
        if self._kernels:
            self._kernels[-1].args["trips"] = count

    def chunk(self, kernel: str, chunk: int, t0: float, t1: float) -> None:
        self.events.append(Event(f"{kernel}[{chunk}]", "chunk", t0, t1,
                                 threading.get_ident(), {"kernel": kernel}))

    def gpu_kernel(self, program: str, kernel: str, kind: str, ms: float) -> None:
        self._gpu.append((program, kernel, kind, ms))

    def backward(self, node: Any, cotangents: Any) -> None:
        """Gradient nodes made by `node`'s vector-Jacobian product: they get its line
        (marked as its gradient) instead of the line that asked for the gradient."""
        sites = callsite.SITES
        site = sites.get(node) if sites is not None else None
        if site is not None and site != BEFORE:
            callsite.tag_new(sites, cotangents, site if site.endswith(GRAD) else site + GRAD)

    def copied(self, node: Any, copy: Any) -> None:
        """`copy` is `node`'s op again (a gradient handed out as `.grad` is a stopped
        copy): it keeps `node`'s line rather than the line that made the copy."""
        sites = callsite.SITES
        site = sites.get(node) if sites is not None else None
        if site is not None:
            sites[copy] = site

    def sync_begin(self, state: Any, site: str, outputs: int) -> None:
        now = time.perf_counter()
        if now > self._last_sync_end:
            self.span("trace", "trace", self._last_sync_end, now,
                      {"what": "the Python since the last sync: your code recording ops"})
        self._syncs += 1
        self._open = {"t0": now, "mark": now, "site": site, "outputs": outputs,
                      "device": state.device.name, "misses": METRICS.cache_misses}
        self._kernels, self._gpu = [], []

    def sync_mark(self, phase: str) -> None:
        s, now = self._open, time.perf_counter()
        if s is None:
            return
        if phase == "lookup":
            phase = "compile" if METRICS.cache_misses > s["misses"] else "cache lookup"
            s["compiled"] = phase == "compile"
        self.span("sync", phase, s["mark"], now, {})
        s["mark"] = now

    def sync_end(self, exe: Any, cap: Any) -> None:
        s, now = self._open, time.perf_counter()
        if s is None:
            return
        self._open = None
        self.span("sync", "run", s["mark"], now, {})
        self._place_gpu_events(s["mark"], now)
        info = _kernel_info(exe)
        sites = _sites_of(cap, info)
        for ev in self._kernels:
            name = _plan_kernel(info, ev.name)
            ev.args.update(_describe(info.get(name), sites.get(name, ())))
            ev.args["plan_kernel"] = name
            ev.args["sync"] = self._syncs
        program = getattr(exe, "name", "") or getattr(getattr(exe, "program", None), "name", "")
        self.span("sync", f"sync #{self._syncs}", s["t0"], now, {
            "site": s["site"], "outputs": s["outputs"], "device": s["device"],
            "program": program, "compiled": s.get("compiled", False)})
        self._last_sync_end = now

    def _place_gpu_events(self, t0: float, t1: float) -> None:
        """GPU times come as durations only: lay them end to end on a GPU track from the
        start of the run (their order is the stream's)."""
        at = t0
        for program, kernel, kind, ms in self._gpu:
            ev = Event(kernel, "kernel", at, at + ms / 1e3, GPU_TRACK,
                       {"program": program, "kind": kind})
            self.events.append(ev)
            self._kernels.append(ev)
            at += ms / 1e3

    # ---- results --------------------------------------------------------------------

    def kernel_events(self) -> list:
        return [e for e in self.events if e.cat == "kernel"]

    def key_averages(self) -> list:
        """One row per kernel of each program (calls aggregated), by total time."""
        return profiler_report.key_averages(self)

    def phases(self) -> dict:
        """Seconds per phase over the whole profile: trace, capture, cache lookup,
        compile, each pass, transfers, run, kernels."""
        out: dict = collections.defaultdict(float)
        for e in self.events:
            if e.cat in ("trace", "sync", "pass", "codegen", "cache", "transfer") \
                    and not e.name.startswith("sync #"):
                out[e.name] += e.seconds
        out["kernels"] = sum(e.seconds for e in self.kernel_events())
        return dict(out)

    def table(self, sort_by: str = "total", row_limit: int = 20, group_by: str = "kernel") -> str:
        """The top kernels as text (like torch.profiler's key_averages().table());
        `group_by="line"`: the user's lines by the kernel time behind them."""
        if group_by == "line":
            return profiler_report.line_table(self, row_limit)
        if group_by != "kernel":
            raise ValueError(f"table(group_by={group_by!r}): valid are 'kernel' and 'line'")
        return profiler_report.table(self, sort_by, row_limit)

    def export_chrome_trace(self, path: str) -> None:
        """Write the Chrome trace-event JSON that Perfetto and chrome://tracing open."""
        profiler_report.export_chrome_trace(self, path)


@contextlib.contextmanager
def record(name: str) -> Iterator[None]:
    """A span of the user's own (e.g. "data loading") in the profile and its trace, like
    torch.profiler.record_function; does nothing when no profile records."""
    rec = profile_hooks.ACTIVE
    if rec is None:
        yield
        return
    t0 = time.perf_counter()
    try:
        yield
    finally:
        # on a track of its own: it may begin or end in the middle of a trace or sync span
        rec.events.append(Event(name, "user", t0, time.perf_counter(), USER_TRACK))


# ---- turning a run's kernels into rows with ops and lines --------------------------

def _kernel_info(exe: Any) -> dict:
    """kernel name -> static figures (compiler/planning/kernel_cost.py), which the compiler puts in
    the Program an executable runs (so they come with a disk-cached program too)."""
    return getattr(getattr(exe, "program", None), "kernel_info", None) or {}


def _plan_kernel(info: dict, step_kernel: str) -> str:
    """The plan kernel a step belongs to: a step may run part of one under a longer name
    (a reduction's `<kernel>_epilogue`)."""
    if step_kernel in info:
        return step_kernel
    parts = [k for k in info if step_kernel.startswith(k + "_")]
    return max(parts, key=len) if parts else step_kernel


def _sites_of(cap: Any, info: dict) -> dict:
    """kernel name -> [(site, ops recorded there)], most ops first: the captured nodes
    each kernel stands for, looked up in the lines noted while recording."""
    sites = callsite.SITES
    if sites is None:
        return {}
    order = cap.order
    out = {}
    for name, k in info.items():
        count: collections.Counter = collections.Counter()
        for p in k.get("sources", ()):
            if p < len(order):
                site = sites.get(order[p])
                if site is not None:
                    count[site] += 1
        out[name] = count.most_common()
    return out


def _describe(info: Optional[dict], sites: Any) -> dict:
    if info is None:
        return {"ops": [], "sites": list(sites)}
    return {"ops": list(info["ops"]), "sites": list(sites), "kind": info["kind"],
            "bytes_read": info["bytes_read"], "bytes_written": info["bytes_written"],
            "flops": info["flops"]}


# ---- turning it on and off ---------------------------------------------------------

_LOCK = fork_locks.lock()


def _mark_pending_before() -> None:
    """Ops recorded before the profile began get the BEFORE line (not the line of the
    first op recorded after, whose walk would otherwise reach them)."""
    for state in live_states():
        for r in list(state.pending):
            t = r()
            if t is not None and t._node.buffer is None:
                _mark(t._node)


def _mark(node: Any) -> None:
    callsite.tag_new(callsite.SITES, [node], BEFORE)


@contextlib.contextmanager
def profile() -> Iterator[Profile]:
    """Record what lazyarray does inside the block; yields the `Profile`. Only the
    syncs that happen inside the block are recorded (read a value or call `la.sync()`
    before it ends). One profile at a time."""
    with _LOCK:
        if profile_hooks.ACTIVE is not None:
            raise RuntimeError("la.profiler.profile(): a profile is already recording "
                               "(profiles do not nest)")
        prof = Profile()
        callsite.SITES = weakref.WeakKeyDictionary()
        _mark_pending_before()
        profile_hooks.ACTIVE = prof
    try:
        yield prof
    finally:
        with _LOCK:
            profile_hooks.ACTIVE = None
            callsite.SITES = None
            prof.end = time.perf_counter()
