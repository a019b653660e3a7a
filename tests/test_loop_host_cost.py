"""What a cached loop call costs on the host: a `fori_loop` called again from the same
line takes the sync's template (no capture), recomputes nothing of what its body closed
over but the tensors' current values, and its body's small kernels are optimized (they
run at every iteration). Results are checked against the interpreter."""
from __future__ import annotations

import re

import numpy as np

import lazyarray as la
from lazyarray import runtime, trace_cache
from lazyarray.compiler import compile
from lazyarray.compiler.graph.trace import capture


def _loop(x, w):
    return la.fori_loop(0, 4, lambda i, v: la.tanh(v @ w) * 0.5 + 1.25, x)


def _inputs(device="cpu"):
    rng = np.random.default_rng(1)
    return (la.asarray(rng.standard_normal((1, 8)).astype(np.float32), device=device),
            la.asarray(rng.standard_normal((8, 8)).astype(np.float32), device=device))


def test_a_loop_synced_again_at_one_line_takes_the_template(monkeypatch):
    """The while node's tuple types are one object from call to call, so the sync's
    template (compared by identity) accepts the graph: no capture after the second call."""
    calls = []
    real = runtime.capture
    monkeypatch.setattr(runtime, "capture", lambda *a, **k: calls.append(1) or real(*a, **k))
    want = _loop(*_inputs("interpreter")).numpy()
    seen = []
    for _ in range(5):
        x, w = _inputs()
        got = _loop(x, w).numpy()
        seen.append(len(calls))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert seen[-1] == seen[-3]          # the last calls: the template, no capture


def test_scalars_the_body_broadcasts_are_not_recomputed_per_call():
    """A Python scalar of the body (0.5, 1.25) broadcast to the state's shape is a value
    fixed when the body was traced: later calls pass the broadcast itself, so the
    module that recomputes the captured values holds parameters alone."""
    trace_cache.clear()
    for _ in range(2):
        _loop(*_inputs()).numpy()
    (entry,) = trace_cache._CACHE.values()
    assert {i.op for i in entry.pre.instructions} == {"parameter"}


def _unoptimized(llvm: str) -> int:
    """How many functions of an LLVM module carry `optnone`."""
    groups = dict(re.findall(r"^attributes (#\d+) = \{(.*)\}", llvm, re.M))
    defined = re.findall(r"^define .*(#\d+) \{", llvm, re.M)
    return sum("optnone" in groups.get(g, "") for g in defined)


def test_a_loop_body_s_small_kernels_are_optimized():
    """A kernel of a few elements is left unoptimized in a program run once (its
    compile would cost more than it saves), but not in a loop's body, which runs it at
    every iteration (the counter's one-element kernel aside)."""
    x, w = _inputs()
    module = capture([(la.tanh(x @ w) * 0.5 + 1.25)._node]).module()
    once = compile(module, "cpu", dumps=True)
    body = compile(module, "cpu", dumps=True, carried={})
    assert _unoptimized(once.dumps["llvm"]) >= 1
    assert _unoptimized(body.dumps["llvm"]) == 0
    program = compile(capture([_loop(x, w)._node]).module(), "cpu", dumps=True)
    assert _unoptimized(program.dumps["sub.body.llvm"]) <= 1


def _attention_loop(x, k):
    """A decoding step's attention in a loop: products batched over 4 heads of one row
    each (q @ k.T, p @ v), far too small to split over threads."""
    def body(i, q):
        s = la.softmax(q @ la.matrix_transpose(k), axis=-1)
        return la.tanh(s @ k) + q
    return la.fori_loop(0, 6, body, x)


def test_a_loop_body_too_small_to_split_runs_on_the_calling_thread():
    """Its small batched products (a tile per head) do not make its job parallel: every
    job of the body runs on the thread that runs the loop, no worker woken, no barrier
    met per task at every iteration. Results match the interpreter on 2 threads."""
    from lazyarray.compiler.program import WhileStep
    from lazyarray.devices.cpu import native_control, native_program, run_plan
    from lazyarray.devices.cpu.cpu import CPUDevice, CPUExecutable
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 1, 16)).astype(np.float32)
    k = rng.standard_normal((4, 64, 16)).astype(np.float32)
    with la.config.override(num_threads=2):
        got = _attention_loop(la.asarray(x), la.asarray(k)).numpy()
    want = _attention_loop(la.asarray(x, device="interpreter"),
                           la.asarray(k, device="interpreter")).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    out = _attention_loop(la.asarray(x), la.asarray(k))
    exe = CPUExecutable(compile(capture([out._node]).module(), "cpu"),
                        CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2}))
    (step,) = [s for s in exe.steps if isinstance(s, WhileStep)]
    body = exe._subs[id(step)][1]
    prog = native_program.NativeProgram(body, 2)
    assert not any(run_plan.parallel_jobs(body, prog.plan, 2).values())
    ops, _ = native_control.program_ops(prog)
    jobs = [op for op in ops if op[0] == native_control.CTL.OP_JOB]
    assert jobs and all(op[2] == 0 for op in jobs)
