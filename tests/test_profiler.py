"""The profiler: per-sync phases, kernels with their ops, bytes, flops and the user's lines,
the table, the Chrome trace, bit-identical results, and nothing done while it is off."""
from __future__ import annotations

import contextlib
import json
import os
import sys

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray import callsite, profiler
from lazyarray.compiler import profile_hooks
from lazyarray.compiler.passes.pipeline import optimize
from lazyarray.compiler.planning.provenance import sources_of
from lazyarray.compiler.graph.trace import capture
from lazyarray.compiler.primitives import linalg

HERE = os.path.basename(__file__)


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


@pytest.fixture(autouse=True)
def on_cpu():
    with la.config.override(device="cpu"):
        yield


def _data(*shape: int, seed: int = 0) -> la.Tensor:
    return la.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _rows(prof: profiler.Profile) -> dict:
    return {r.kernel: r for r in prof.key_averages()}


# ---- kernels: ops, lines, bytes, flops ---------------------------------------------------

def test_kernels_name_their_ops_lines_bytes_and_flops(monkeypatch):
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)     # a library product, however small
    x, w = _data(64, 32), _data(32, 16, seed=1)
    with la.profiler.profile() as prof:
        h = x @ w; mm_line = _line()                              # noqa: E702
        y = la.tanh(h + 1.0).sum(axis=1); red_line = _line()       # noqa: E702
        y.numpy()
    rows = prof.key_averages()
    mm = next(r for r in rows if r.ops == ["dot_general"])
    assert mm.flops == 2 * 64 * 16 * 32
    assert mm.bytes == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert [s for s, _ in mm.sites] == [f"{__file__}:{mm_line}"]
    red = next(r for r in rows if "reduce" in r.ops)
    assert {"tanh", "add", "reduce"} <= set(red.ops)
    assert red.bytes == (64 * 16 + 64) * 4
    assert red.flops >= 3 * 64 * 16            # add, tanh and the sum's combines
    assert [s for s, _ in red.sites] == [f"{__file__}:{red_line}"]
    assert all(r.calls == 1 and r.total > 0 for r in rows)
    assert np.allclose(y.numpy(), np.tanh(x.numpy() @ w.numpy() + 1).sum(axis=1), rtol=1e-5)


def test_gradient_ops_carry_the_forward_line():
    x = la.asarray(_data(32, 8).numpy())
    with la.profiler.profile() as prof:
        with la.GradientTape() as tape:
            tape.watch(x)
            y = la.exp(x); exp_line = _line()                      # noqa: E702
            loss = y.sum()
        (g,) = tape.gradient(loss, [x])
        g.numpy()
    sites = {s for r in prof.key_averages() for s, _ in r.sites}
    assert f"{__file__}:{exp_line}{profiler.GRAD}" in sites
    np.testing.assert_allclose(g.numpy(), np.exp(x.numpy()), rtol=1e-6)


def test_backward_gradients_carry_the_forward_line_too():
    """PyTorch's idiom: .grad is a stopped copy of the gradient, made at the backward()
    line; it keeps the forward op's line."""
    x = la.tensor(_data(32, 8).numpy(), requires_grad=True)
    with la.profiler.profile() as prof:
        loss = la.exp(x).sum(); exp_line = _line()                  # noqa: E702
        loss.backward(); bw_line = _line()                          # noqa: E702
        x.grad.numpy()
    sites = {s for r in prof.key_averages() for s, _ in r.sites}
    assert f"{__file__}:{exp_line}{profiler.GRAD}" in sites
    assert f"{__file__}:{bw_line}" not in sites
    np.testing.assert_allclose(x.grad.numpy(), np.exp(x.numpy()), rtol=1e-6)


def test_ops_recorded_before_the_profile_are_marked_so():
    x = _data(16, 16)
    y = la.sin(x) * 3.0                   # pending when the profile begins
    with la.profiler.profile() as prof:
        z = (y + 1.0).sum(); line = _line()                        # noqa: E702
        z.numpy()
    (row,) = [r for r in prof.key_averages() if "reduce" in r.ops]
    sites = dict(row.sites)
    assert sites[profiler.BEFORE] >= 2    # sine and multiply
    assert f"{__file__}:{line}" in sites


def test_a_split_kernel_reports_its_threads():
    x = _data(512, 512)
    with la.config.override(num_threads=2), la.profiler.profile() as prof:
        y = la.exp(x) * 2.0
        y.numpy()
    (row,) = [r for r in prof.key_averages() if "exponential" in r.ops]
    assert row.threads == 2 and row.calls == 1 and row.total > 0
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()) * 2.0, rtol=1e-6)


# ---- phases: trace, capture, lookup, compile with its passes, run ------------------------

def test_a_compile_is_timed_pass_by_pass():
    x = _data(7, 13)
    with la.config.override(cache_dir="off"):
        la.runtime.clear_caches()
        with la.profiler.profile() as prof:
            ((x * x + x * x) / 3.0).max().numpy()
    names = {e.name for e in prof.events}
    assert {"capture", "compile", "algebraic_simplifier", "cse", "dce",
            "fusion", "buffer_assignment", "cpu_kernels", "llvm_optimize", "emit_object"} <= names
    compile_ev = next(e for e in prof.events if e.name == "compile")
    passes = [e for e in prof.events if e.cat in ("pass", "codegen")]
    assert all(compile_ev.t0 <= p.t0 <= p.t1 <= compile_ev.t1 for p in passes)


def test_a_cache_hit_shows_a_lookup_and_no_compile():
    x = _data(5, 3)
    (x + 2.0).numpy()
    with la.profiler.profile() as prof:
        (x + 2.0).numpy()
    names = [e.name for e in prof.events if e.cat == "sync"]
    assert names == ["capture", "cache lookup", "run", "sync #1"]


def test_a_program_from_the_disk_cache_keeps_its_kernel_figures(tmp_path, monkeypatch):
    """The figures come with the Program (compiler/driver.py fills kernel_info), so a
    program loaded from disk, with no compile in this process, still has them."""
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)     # a library product, however small
    from lazyarray.devices.cpu.cpu import CPUDevice
    x, w = _data(24, 16), _data(16, 8, seed=1)
    module = capture([(x @ w)._node]).module("mm")

    def compiled():
        return CPUDevice(lambda: {"cache_dir": str(tmp_path)}).compile(module)

    first, again = compiled(), compiled()
    assert not first.from_disk_cache and again.from_disk_cache
    info = profiler._kernel_info(again)
    assert info == first.program.kernel_info
    (mm,) = [k for k in info.values() if k["ops"] == ["dot_general"]]
    assert mm["flops"] == 2 * 24 * 8 * 16 and mm["sources"]


# ---- table and Chrome trace ------------------------------------------------------------

def test_table_lists_the_top_kernels():
    x = _data(128, 64)
    with la.profiler.profile() as prof:
        for _ in range(3):
            (la.exp(x) @ x.T).sum().numpy()
    text = prof.table(row_limit=5)
    head, rule = text.splitlines()[:2]
    for col in ("Kernel", "Calls", "Total ms", "GB/s", "GFLOP/s", "Fused ops", "Source lines"):
        assert col in head
    body = text.splitlines()[2:]
    assert any("dot_general" in line and HERE in line for line in body)
    assert "measured peaks" in text
    assert all(r.calls == 3 for r in prof.key_averages())
    with pytest.raises(ValueError, match="sort_by"):
        prof.table(sort_by="nonsense")


def _nested(inner: dict, outer: dict) -> bool:
    eps = 1e-3      # microseconds: float rounding of the exported timestamps
    return (inner["tid"] == outer["tid"] and outer["ts"] - eps <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + eps)


def test_chrome_trace_events_nest_and_add_up(tmp_path):
    x, w = _data(256, 128), _data(128, 64, seed=2)
    with la.config.override(num_threads=2), la.profiler.profile() as prof:
        for _ in range(2):
            la.relu(x @ w).mean().item()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    events = doc["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert all({"name", "cat", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0
               for e in spans)
    assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in events)
    syncs = [e for e in spans if e["name"].startswith("sync #")]
    assert len(syncs) == 2
    for sync in syncs:
        phases = [e for e in spans if e["cat"] == "sync" and e is not sync and _nested(e, sync)]
        assert [p["name"] for p in phases] == ["capture", "cache lookup", "run"] or \
            [p["name"] for p in phases] == ["capture", "compile", "run"]
        # the phases are contiguous: they add up to the sync
        assert sum(p["dur"] for p in phases) == pytest.approx(sync["dur"], abs=1.0)
        run = phases[-1]
        kernels = [e for e in spans if e["cat"] == "kernel" and _nested(e, run)]
        assert {"dot_general"} <= {op for k in kernels for op in k["args"]["ops"]}
        assert sum(k["dur"] for k in kernels) <= run["dur"] + 1e-3
        for k in kernels:
            assert k["args"]["sites"] and k["args"]["sites"][0].startswith(__file__)
            assert k["args"]["GB/s"] >= 0
    for k in (e for e in spans if e["cat"] == "kernel"):
        assert any(_nested(k, s) for s in syncs)
    main_chunks = [e for e in spans if e["cat"] == "chunk" and e["tid"] == syncs[0]["tid"]]
    assert all(any(_nested(c, k) for k in spans if k["cat"] == "kernel") for c in main_chunks)


# ---- bit-identical, and off costs nothing ----------------------------------------------

class _Net(la.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = la.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = la.nn.Linear(4 * 4 * 4, 3)

    def forward(self, x: la.Tensor) -> la.Tensor:
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(x.reshape(x.shape[0], -1))


def _train(profiled: bool) -> list:
    la.random.seed(3)
    net = _Net()
    opt = la.optim.Adam(net.parameters(), lr=1e-2)
    rng = np.random.default_rng(4)
    xs = [la.asarray(rng.standard_normal((6, 2, 8, 8)).astype(np.float32)) for _ in range(3)]
    ys = [la.asarray(rng.integers(0, 3, 6)) for _ in range(3)]
    losses = []
    for xb, yb in zip(xs, ys):
        with (la.profiler.profile() if profiled else contextlib.nullcontext()) as prof:
            with la.GradientTape() as tape:
                loss = F.cross_entropy(net(xb), yb)
            opt.apply_gradients(tape.gradient(loss, net.parameters()))
            losses.append(loss.item())
        assert not profiled or prof.kernel_events()
    return losses + [p.numpy().copy() for p in net.parameters()]


def test_a_profiled_training_step_is_bit_identical():
    plain, profiled = _train(False), _train(True)
    assert len(plain) == len(profiled)
    for a, b in zip(plain, profiled):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_off_the_hooks_do_nothing(monkeypatch):
    assert profile_hooks.ACTIVE is None and callsite.SITES is None

    def boom(*a, **k):
        raise AssertionError("profiling work done while no profile records")
    monkeypatch.setattr(callsite, "tag", boom)
    monkeypatch.setattr(callsite, "tag_new", boom)
    monkeypatch.setattr(profile_hooks, "TimedPool", boom)
    x = _data(300, 300)
    with la.config.override(num_threads=2):
        with la.GradientTape() as tape:
            tape.watch(x)
            y = (la.exp(x) @ x).sum()
        (g,) = tape.gradient(y, [x])
        g.numpy()


def test_the_profile_ends_cleanly_on_error_and_does_not_nest():
    with pytest.raises(ZeroDivisionError):
        with la.profiler.profile():
            1 / 0
    assert profile_hooks.ACTIVE is None and callsite.SITES is None
    with la.profiler.profile():
        with pytest.raises(RuntimeError, match="do not nest"):
            with la.profiler.profile():
                pass
    assert profile_hooks.ACTIVE is None


def test_an_empty_profile_says_so():
    with la.profiler.profile() as prof:
        pass
    assert "no kernels ran" in prof.table()


# ---- provenance through the passes -------------------------------------------------------

def test_sources_follow_instructions_through_the_passes():
    x = la.asarray(np.ones((4, 4), np.float32))
    a = x * x
    b = x * x                  # CSE merges it with a
    c = (a + b) + 0.0          # the simplifier drops + 0
    cap = capture([c._node])
    module = cap.module("m")
    opt = optimize(module)
    sources = sources_of(opt)
    pos = {n: p for p, n in enumerate(cap.order)}
    muls = [pos[a._node], pos[b._node]]
    merged = [s for s, ins in zip(sources, opt.instructions) if ins.op == "multiply"]
    assert len(merged) == 1 and set(muls) <= set(merged[0])
    root = sources[opt.outputs[0]]
    assert pos[c._node] in root          # the dropped add stands behind its replacement


# ---- GPU: stream events (the driver is a stand-in; the launches and plan are real) -------

class _FakeEvents:
    """cuda-python's event calls, answering each elapsed time from a table."""

    def __init__(self, ms: list) -> None:
        self.ms, self.recorded, self.destroyed = list(ms), [], 0

    def cuEventCreate(self, flags):
        return 0, object()

    def cuEventRecord(self, ev, stream):
        self.recorded.append((ev, stream))
        return (0,)

    def cuEventElapsedTime(self, a, b):
        return 0, self.ms.pop(0)

    def cuEventDestroy(self, ev):
        self.destroyed += 1
        return (0,)


def test_gpu_kernels_timed_by_stream_events_land_in_the_profile():
    from lazyarray.compiler import compile as compile_program
    from lazyarray.devices.cuda import gpu_timer
    x = _data(64, 48)
    with la.profiler.profile() as prof:
        y = (la.exp(x) @ x.T).sum(axis=1); line = _line()          # noqa: E702
        cap = capture([y._node])
        program = compile_program(cap.module("gpu_m"), "sm_80")
        steps = program.steps
        fake = _FakeEvents([0.5 * (k + 1) for k in range(len(steps))])
        timer = gpu_timer.EventTimer(fake, stream="s")
        rec = profile_hooks.ACTIVE

        class Exe:          # what the profiler reads of a CUDA executable
            name = "gpu_m"

        Exe.program = program
        rec.sync_begin(type("S", (), {"device": type("D", (), {"name": "cuda"})})(), "here", 1)
        rec.sync_mark("capture")
        rec.sync_mark("lookup")
        for step in steps:                 # as CudaExecutable.run brackets each step
            mark = timer.start()
            timer.stop(mark, gpu_timer.kernel_name(step, program), "gpu")
        timer.report(rec, "gpu_m")
        rec.sync_end(Exe(), cap)
    assert any(s.kind == "launch" for s in steps)
    assert fake.destroyed == 2 * len(steps)
    gpu = [e for e in prof.kernel_events() if e.tid == profiler.GPU_TRACK]
    assert [round(e.seconds * 1e3, 6) for e in gpu] == [0.5 * (k + 1) for k in range(len(gpu))]
    assert {e.args["plan_kernel"] for e in gpu} <= set(program.kernel_info)
    run = next(e for e in prof.events if e.name == "run")
    assert gpu[0].t0 == run.t0 and all(a.t1 == b.t0 for a, b in zip(gpu, gpu[1:]))
    mm = next(r for r in prof.key_averages() if r.ops == ["dot_general"])
    assert mm.gpu and mm.flops == 2 * 64 * 64 * 48
    assert [s for s, _ in mm.sites] == [f"{__file__}:{line}"]


def test_the_cnn_example_prints_the_table_and_writes_the_trace(tmp_path, monkeypatch, capsys):
    import runpy
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "profile_cnn.py")
    trace = tmp_path / "cnn.json"
    monkeypatch.setattr(sys, "argv", ["profile_cnn.py", "--steps", "1", "--batch", "2",
                                      "--trace", str(trace)])
    runpy.run_path(path, run_name="__main__")
    out = capsys.readouterr().out
    assert "Fused ops" in out and "profile_cnn.py:" in out and "(grad)" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)


def test_time_by_line_adds_up_to_the_kernels():
    from lazyarray.profiler_report import by_line
    x, w = _data(96, 64), _data(64, 64, seed=5)
    with la.profiler.profile() as prof:
        h = x @ w; mm_line = _line()                               # noqa: E702
        y = la.exp(h).mean(); exp_line = _line()                   # noqa: E702
        y.numpy()
    rows = by_line(prof)
    sites = {r.site for r in rows}
    assert {f"{__file__}:{mm_line}", f"{__file__}:{exp_line}"} <= sites
    kernels = sum(r.total for r in prof.key_averages())
    assert sum(r.seconds for r in rows) == pytest.approx(kernels, rel=1e-9)
    text = prof.table(group_by="line")
    assert f"{HERE}:{mm_line}" in text and "Kernel ms" in text
    with pytest.raises(ValueError, match="group_by"):
        prof.table(group_by="file")


def test_user_spans_have_their_own_track(tmp_path):
    with la.profiler.record("outside"):       # no profile: nothing recorded, no error
        pass
    x = _data(8, 8)
    with la.profiler.profile() as prof:
        with la.profiler.record("my step"):
            (x * 2.0).sum().numpy()
    (ev,) = [e for e in prof.events if e.cat == "user"]
    sync = next(e for e in prof.events if e.name.startswith("sync #"))
    assert ev.name == "my step" and ev.t0 <= sync.t0 <= sync.t1 <= ev.t1
    path = tmp_path / "t.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    (user,) = [e for e in events if e.get("cat") == "user"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[user["tid"]] == "your annotations"


def test_after_the_profile_programs_return_to_the_fast_path(monkeypatch):
    """A profile runs programs step by step (timed); once it ends they take the native
    whole-program path again (the choice made while profiling is not kept)."""
    from lazyarray.devices.cpu import native_program
    slow = []
    plain_run = native_program.NativeProgram._run_timed

    def counted(self, fresh):
        slow.append(self.name)
        return plain_run(self, fresh)
    monkeypatch.setattr(native_program.NativeProgram, "_run_timed", counted)
    x = _data(64, 64)

    def step() -> np.ndarray:
        return (la.exp(x) * 2.0 + 1.0).sum(axis=0).numpy()
    first = step()
    assert slow == []                 # the fast path before any profile
    with la.profiler.profile():
        during = step()
    assert slow                       # stepped and timed while profiling
    slow.clear()
    after = [step() for _ in range(3)]
    assert slow == []                 # back on the fast path after the block
    for r in [during] + after:
        assert np.array_equal(r, first)
