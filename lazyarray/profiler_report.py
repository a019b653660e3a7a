"""What a profile shows: kernels averaged over calls (a table, like torch.profiler's
`key_averages().table()`), and the Chrome trace-event JSON that Perfetto
(https://ui.perfetto.dev) and chrome://tracing open.

Trace layout: one process; the thread that synced shows each sync (`sync #n`) holding
its phases (capture, cache lookup or compile with its passes and code generation, run
with binding and the kernels), the `trace` spans between syncs (the user's code recording
ops) and host-to-device copies; a worker thread of the Python pool shows the chunks it
ran (the native pool runs a kernel's chunks in one call: its kernels show as wholes);
GPU kernels, timed by stream events, lie end to end on a "GPU stream" track.
"""
from __future__ import annotations

import collections
import json
import os
from dataclasses import dataclass, field
from typing import Any, Optional

from .compiler import primitive as P
from .peaks import Peaks, host_peaks

GPU_TRACK, USER_TRACK = -1, -2


@dataclass
class KernelStats:
    """One kernel of one program, over every sync that ran it."""
    program: str
    kernel: str
    kind: str = ""
    calls: int = 0                 # syncs that ran it
    total: float = 0.0             # seconds, all calls
    min: float = float("inf")
    max: float = 0.0
    bytes: int = 0                 # read + written, per call
    flops: int = 0                 # per call
    ops: list = field(default_factory=list)
    sites: list = field(default_factory=list)    # [(site, ops recorded there)]
    threads: int = 1               # threads that ran its chunks
    chunk_seconds: float = 0.0     # time inside its chunks, all threads (0: not split)
    gpu: bool = False
    trips: int = 0                 # a loop's iterations, all calls

    @property
    def avg(self) -> float:
        return self.total / max(self.calls, 1)

    @property
    def busy(self) -> float:
        """Of the time its threads spent in the kernel, the fraction they computed (the
        rest: waiting for a thread to start, or for the slowest chunk); 0 if not split."""
        return self.chunk_seconds / (self.total * self.threads) if self.total > 0 else 0.0

    @property
    def gbps(self) -> float:
        return self.bytes * self.calls / self.total / 1e9 if self.total > 0 else 0.0

    @property
    def gflops(self) -> float:
        return self.flops * self.calls / self.total / 1e9 if self.total > 0 else 0.0


def key_averages(prof: Any) -> list:
    rows: dict = {}
    per_call: dict = collections.defaultdict(float)       # (key, sync) -> seconds
    for e in prof.kernel_events():
        key = _key(e)
        r = rows.get(key)
        if r is None:
            a = e.args
            r = rows[key] = KernelStats(key[0], key[1], a.get("kind", ""),
                                        bytes=a.get("bytes_read", 0) + a.get("bytes_written", 0),
                                        flops=a.get("flops", 0), ops=list(a.get("ops", [])),
                                        sites=list(a.get("sites", [])), gpu=e.tid == GPU_TRACK)
        r.total += e.seconds
        r.trips += e.args.get("trips", 0)
        per_call[key, e.args.get("sync", 0)] += e.seconds
    for (key, _sync), seconds in per_call.items():
        r = rows[key]
        r.calls += 1
        r.min, r.max = min(r.min, seconds), max(r.max, seconds)
    _count_threads(prof, rows)
    return sorted(rows.values(), key=lambda r: -r.total)


def _key(e: Any) -> tuple:
    """A row per kernel of the plan (its steps, e.g. a reduction's epilogue, summed)."""
    return (e.args.get("program", ""), e.args.get("plan_kernel", e.name))


def _count_threads(prof: Any, rows: dict) -> None:
    """Threads each kernel ran on: as its device reported it, or those whose chunks fall
    inside its runs."""
    chunks = collections.defaultdict(list)
    for e in prof.events:
        if e.cat == "chunk":
            chunks[e.args["kernel"]].append(e)
    tids = collections.defaultdict(set)
    for e in prof.kernel_events():
        rows[_key(e)].threads = max(rows[_key(e)].threads, int(e.args.get("threads", 1)))
        for c in chunks.get(e.name, ()):
            if e.t0 <= c.t0 and c.t1 <= e.t1:
                tids[_key(e)].add(c.tid)
                rows[_key(e)].chunk_seconds += c.seconds
    for key, ts in tids.items():
        rows[key].threads = max(rows[key].threads, len(ts))


# ---- the table --------------------------------------------------------------------

_SORT = {"total": lambda r: -r.total, "avg": lambda r: -r.avg, "calls": lambda r: -r.calls,
         "gbps": lambda r: -r.gbps, "gflops": lambda r: -r.gflops}


def _short_site(site: str) -> str:
    path, _, line = site.rpartition(":")
    return f"{os.path.basename(path)}:{line}" if path else site


_KIND_ORDER = {P.LIBRARY: 0, P.REDUCTION: 1, P.OPAQUE: 2, P.ELEMENTWISE: 3}


def _ops_text(ops: list, width: int = 34) -> str:
    """The fused ops, the ones that compute first (index-moving ops last), with counts."""
    counts = collections.Counter(ops)
    order = sorted(counts, key=lambda op: _KIND_ORDER.get(
        P.PRIMITIVES[op].kind if op in P.PRIMITIVES else "", 4))
    text = ",".join(op if counts[op] == 1 else f"{op}x{counts[op]}" for op in order)
    return text if len(text) <= width else text[:width - 3] + "..."


def _sites_text(sites: list, width: int = 48) -> str:
    text = ", ".join(f"{_short_site(s)} x{n}" for s, n in sites)
    return text if len(text) <= width else text[:width - 3] + "..."


def _peaks_for(prof: Any) -> Optional[Peaks]:
    """Host peaks when a CPU kernel ran (GPU peaks are not measured yet)."""
    if any(e.tid != GPU_TRACK for e in prof.kernel_events()):
        return host_peaks()
    return None


def table(prof: Any, sort_by: str = "total", row_limit: int = 20) -> str:
    if sort_by not in _SORT:
        raise ValueError(f"table(sort_by={sort_by!r}): valid keys are {', '.join(_SORT)}")
    rows = sorted(key_averages(prof), key=_SORT[sort_by])
    if not rows:
        return "(no kernels ran inside the profile: read a value or call la.sync() in the block)"
    peaks = _peaks_for(prof)
    everything = sum(r.total for r in rows)
    head = (f"{'Kernel':<22} {'Program':<10} {'Calls':>5} {'Total ms':>9} {'Avg ms':>8} "
            f"{'%Time':>6} {'GB/s':>7} {'%BW':>5} {'GFLOP/s':>8} {'%GEMM':>6} {'Thr':>3} "
            f"{'Busy':>5}  "
            f"{'Fused ops':<34}  Source lines")
    lines = [head, "-" * len(head)]
    for r in rows[:row_limit]:
        bw = f"{100 * r.gbps / peaks.copy_gbps:5.0f}" if peaks and not r.gpu else f"{'-':>5}"
        fl = f"{100 * r.gflops / peaks.gemm_gflops:6.0f}" if peaks and not r.gpu else f"{'-':>6}"
        busy = f"{100 * r.busy:4.0f}%" if r.chunk_seconds else f"{'-':>5}"
        name = f"{r.kernel} x{r.trips} it" if r.trips else r.kernel    # a loop: iterations
        lines.append(
            f"{name[:22]:<22} {r.program[:10]:<10} {r.calls:>5} {r.total * 1e3:>9.3f} "
            f"{r.avg * 1e3:>8.3f} {100 * r.total / everything:>5.1f}% {r.gbps:>7.2f} {bw} "
            f"{r.gflops:>8.2f} {fl} {r.threads:>3} {busy}  {_ops_text(r.ops):<34}  "
            f"{_sites_text(r.sites)}")
    lines.append("-" * len(head))
    lines.append(_summary(prof, everything, peaks))
    return "\n".join(lines)


@dataclass
class LineStats:
    """Kernel time attributed to one line of the user's code."""
    site: str
    seconds: float = 0.0
    kernels: list = field(default_factory=list)     # names of the kernels it shares


def by_line(prof: Any) -> list:
    """Lines by the kernel time behind them. A kernel fusing ops of several lines splits
    its time between them by their share of its ops (an estimate: ops differ in cost)."""
    lines: dict = {}
    for r in key_averages(prof):
        ops = sum(n for _, n in r.sites)
        for site, n in r.sites:
            row = lines.setdefault(site, LineStats(site))
            row.seconds += r.total * n / ops
            row.kernels.append(r.kernel)
    return sorted(lines.values(), key=lambda r: -r.seconds)


def line_table(prof: Any, row_limit: int = 20) -> str:
    rows = by_line(prof)
    everything = sum(r.seconds for r in rows) or 1.0
    head = f"{'Source line':<48} {'Kernel ms':>10} {'%':>6}  Kernels"
    out = [head, "-" * len(head)]
    for r in rows[:row_limit]:
        site = _short_site(r.site)
        out.append(f"{site[:48]:<48} {r.seconds * 1e3:>10.3f} {100 * r.seconds / everything:>5.1f}%"
                   f"  {', '.join(r.kernels[:6])}{' ...' if len(r.kernels) > 6 else ''}")
    return "\n".join(out)


def _summary(prof: Any, kernels: float, peaks: Optional[Peaks]) -> str:
    ph = prof.phases()
    syncs = sum(1 for e in prof.events if e.cat == "sync" and e.name.startswith("sync #"))
    parts = [f"{syncs} syncs", f"kernels {kernels * 1e3:.3f} ms"]
    for name in ("trace", "capture", "cache lookup", "compile", "bind buffers",
                 "host_to_device", "device_to_host"):
        if name in ph:
            parts.append(f"{name} {ph[name] * 1e3:.3f} ms")
    text = "; ".join(parts)
    if peaks is not None:
        text += (f"\nmeasured peaks of this machine: copy {peaks.copy_gbps:.1f} GB/s, "
                 f"float32 GEMM {peaks.gemm_gflops:.1f} GFLOP/s")
    return text


# ---- the Chrome trace -----------------------------------------------------------------

def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


def _kernel_args(e: Any) -> dict:
    args = dict(e.args)
    moved = args.get("bytes_read", 0) + args.get("bytes_written", 0)
    if e.seconds > 0:
        args["GB/s"] = round(moved / e.seconds / 1e9, 3)
        args["GFLOP/s"] = round(args.get("flops", 0) / e.seconds / 1e9, 3)
    args["sites"] = [f"{s} ({n} ops)" for s, n in args.get("sites", [])]
    return args


def trace_events(prof: Any) -> list:
    """The trace events (dicts), timestamps in microseconds from the profile's start."""
    tids: dict = {prof.main_tid: 0}
    out: list = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                  "args": {"name": "lazyarray"}}]
    for e in sorted(prof.events, key=lambda e: (e.t0, -(e.t1 - e.t0))):
        if e.tid not in tids:
            tids[e.tid] = {GPU_TRACK: 1000, USER_TRACK: 1001}.get(e.tid, len(tids))
        args = _kernel_args(e) if e.cat == "kernel" else e.args
        out.append({"name": e.name, "cat": e.cat, "ph": "X", "pid": 1, "tid": tids[e.tid],
                    "ts": (e.t0 - prof.start) * 1e6, "dur": max(e.t1 - e.t0, 0.0) * 1e6,
                    "args": _jsonable(args)})
    for tid, n in tids.items():
        name = ("python (syncs)" if tid == prof.main_tid else "GPU stream" if tid == GPU_TRACK
                else "your annotations" if tid == USER_TRACK else f"worker {n}")
        out.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": n, "args": {"name": name}})
    return out


def export_chrome_trace(prof: Any, path: str) -> None:
    doc = {"traceEvents": trace_events(prof), "displayTimeUnit": "ms",
           "otherData": {"producer": "lazyarray.profiler"}}
    with open(path, "w") as f:
        json.dump(doc, f)
