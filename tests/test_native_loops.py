"""Loops and branches run in native code (devices/native_control.py): a `while` or a
`conditional` of a compiled CPU program is one call of the control runner, with no Python
per iteration. Each case runs compiled (natively: checked by counting the Python-driven
loop's entries, which must stay at zero) and on the reference interpreter, and against
NumPy; an interrupt stops a native loop between iterations with nothing lost."""
from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler import program as program_module
from lazyarray.devices.cpu import native_control, native_program


@pytest.fixture
def python_loops(monkeypatch):
    """Counts the loops and branches driven from Python (the fallback)."""
    count = {"while": 0, "branch": 0}
    real_while, real_branch = program_module.run_while, program_module.branch_index

    def run_while(*a, **k):
        count["while"] += 1
        return real_while(*a, **k)

    def branch_index(*a, **k):
        count["branch"] += 1
        return real_branch(*a, **k)
    monkeypatch.setattr(native_program, "run_while", run_while)
    monkeypatch.setattr(native_program, "branch_index", branch_index)
    return count


def _counted(x, w):
    return la.fori_loop(0, 7, lambda i, v: la.tanh(v @ w) + i * 0.5, x)


def _data_dependent(x, w):
    n, v = la.while_loop(lambda s: s[1].sum() < 1e3,
                         lambda s: (s[0] + 1, s[1] * 1.5 + la.abs(w).sum(axis=0)),
                         ((x[0, 0] * 0).astype(la.int32), x[0]))
    return v * n


def _zero_trips(x, w):
    return la.while_loop(lambda v: v.sum() < -1.0, lambda v: v * 2.0, x)


def _swapping_state(x, w):
    """The body writes state 0 from state 1 and back: the double buffers must not alias."""
    a, b = la.fori_loop(0, 5, lambda i, s: (s[1] + 1.0, s[0] * 2.0), (x, x[::-1]))
    return a - b


def _reductions_and_batched_products(x, w):
    """A softmax (reductions: their partials reset every iteration) over batched
    products (attention's q @ k.T)."""
    k3 = la.reshape(w, (2, 2, 4))

    def body(i, v):
        q = la.reshape(v, (2, 2, 4))
        s = q @ la.matrix_transpose(k3)
        p = la.exp(s - s.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        return la.reshape(p @ k3, (4, 4)) + v * 0.5
    return la.fori_loop(0, 6, body, x)


def _cond_in_loop(x, w):
    def body(i, v):
        return la.cond(i % 3 == 0, lambda u: u @ w, lambda u: u * 0.9 - 0.1, v)
    return la.fori_loop(0, 8, body, x)


def _loop_in_loop(x, w):
    def outer(i, v):
        return la.fori_loop(0, i, lambda j, u: u * 0.8 + j, v) + 1.0
    return la.fori_loop(0, 4, outer, x)


def _switch(x, w):
    idx = (x.sum() > 0).astype(la.int32) * 5 - 1        # -1 or 4: clamped to 0 or 2
    return la.switch(idx, [lambda v: v + 1.0, lambda v: v * 100.0, lambda v: v @ w], x)


def _large_state(x, w):
    """State big enough for the pool to split the body's kernels over threads."""
    big = la.broadcast_to(la.reshape(x, (1, 16)), (4096, 16))
    return la.fori_loop(0, 3, lambda i, v: la.sin(v) * 0.5 + i, big).sum(axis=0)


def _in_a_stepwise_program(x, w):
    """The program around the loop has a sort (a host call): run between the jobs, the
    loop still as one native call of its own."""
    s = la.reshape(la.sort(la.reshape(x, (16,))), (4, 4))
    return la.fori_loop(0, 4, lambda i, v: v @ w + 1.0, s)


def _linear_on_tokens(x, w):
    """A linear layer on a (batch, tokens, width) state, as a decoding step's (1, 1, 4):
    its product (..., m, k) @ (k, n) runs as the 2-D product of its rows."""
    return la.fori_loop(0, 5, lambda i, v: la.tanh(v @ w) + 0.25,
                        la.reshape(x, (2, 2, 4))[:1, :1])


CASES = [_in_a_stepwise_program, _counted, _linear_on_tokens, _data_dependent, _zero_trips, _swapping_state,
         _reductions_and_batched_products, _cond_in_loop, _loop_in_loop, _switch, _large_state]


def _inputs(dtype):
    rng = np.random.default_rng(3)
    return rng.standard_normal((4, 4)).astype(dtype), (rng.standard_normal((4, 4)) * 0.5).astype(dtype)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=lambda f: f.__name__[1:])
def test_native_loops_and_branches_match_the_interpreter(case, dtype, threads, python_loops):
    x, w = _inputs(dtype)
    if case is _large_state:
        x = x.reshape(16)
    with la.config.override(num_threads=threads):
        got = [case(la.asarray(x), la.asarray(w)).numpy() for _ in range(2)]   # run twice
    want = case(la.asarray(x, device="interpreter"), la.asarray(w, device="interpreter")).numpy()
    tol = 1e-4 if dtype == np.float32 else 1e-12     # (sums over 4096 rows in float32)
    for g in got:
        np.testing.assert_allclose(g, want, rtol=tol, atol=tol)
    assert python_loops == {"while": 0, "branch": 0}


def test_trip_counts_change_between_runs_of_one_program(python_loops):
    """Odd and even trip counts (the double buffers end on either side), zero, and a
    larger count again: one program, each against NumPy."""
    runtime.clear_caches()
    x = np.arange(5, dtype=np.float32)
    for n in (3, 4, 0, 9, 1):
        got = la.fori_loop(0, n, lambda i, v: v * 1.25 + i, la.asarray(x)).numpy()
        want = x.copy()
        for i in range(n):
            want = want * np.float32(1.25) + np.float32(i)
        np.testing.assert_allclose(got, want, rtol=1e-6)
    assert python_loops["while"] == 0


def test_the_loop_never_writes_its_operands():
    """The state starts as a copy: the input tensor (which later syncs read again) is
    unchanged after a loop that rewrote the state many times."""
    x = la.asarray(np.ones(8, np.float32))
    y = la.fori_loop(0, 5, lambda i, v: v * 3.0, x)
    assert y.numpy().tolist() == [243.0] * 8
    assert x.numpy().tolist() == [1.0] * 8
    assert (x + 0.0).numpy().tolist() == [1.0] * 8


def test_what_cannot_run_natively_falls_back_to_the_python_driven_loop(python_loops):
    """A body with an argmax copied out in NumPy (or a host call) runs from Python, with
    the same results."""
    x = np.array([3.0, 1.0, 2.0], np.float32)

    def body(i, v):
        return v + la.argmax(la.sort(v)).astype(la.float32)
    got = la.fori_loop(0, 3, body, la.asarray(x)).numpy()
    want = x.copy()
    for _ in range(3):
        want = want + np.float32(np.argmax(np.sort(want)))
    np.testing.assert_allclose(got, want)
    assert python_loops["while"] == 1


def _long(start, iterations: int):
    """A loop of `iterations` iterations (a runtime value: one program for any count)."""
    limit = la.asarray(np.int64(iterations))
    return la.while_loop(lambda s: s[0] < limit, lambda s: (s[0] + 1, s[1] + 1e-30),
                         (la.asarray(np.int64(0)), start))


@pytest.fixture
def python_sigint(monkeypatch):
    """Python's own SIGINT handler (a process started in the background inherits SIGINT
    ignored, and Python then installs none)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


@pytest.mark.parametrize("threads", [1, 2])
def test_an_interrupt_stops_a_native_loop_between_iterations(threads, python_sigint):
    """Ctrl-C (a real SIGINT) while a practically endless native loop runs: it stops, the
    KeyboardInterrupt reaches the caller, every tensor computed before is intact, the
    loop's own tensors are still pending, Python's handler is back in place, and the
    same program runs again with other inputs."""
    before = la.asarray(np.arange(4, dtype=np.float32)) * 2.0
    before.numpy()
    start = la.asarray(np.zeros(4, np.float32))
    with la.config.override(num_threads=threads):
        assert _long(start, 0)[0].item() == 0      # compiled
        n, v = _long(start, 10 ** 8)              # ~30 s (the interrupt comes after 0.3 s)
        timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                n.numpy()
        finally:
            timer.cancel()
        assert not n.is_materialized and not v.is_materialized
        assert before.numpy().tolist() == [0.0, 2.0, 4.0, 6.0]
        assert start.numpy().tolist() == [0.0] * 4
        assert native_control._WATCH._depth == 0
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        n2, v2 = _long(start, 1)
        assert n2.item() == 1 and (v2.numpy() == np.float32(1e-30)).all()


def test_a_loop_run_from_another_thread_releases_the_gil():
    """The runner runs without the GIL: a Python thread makes progress while a loop runs
    on another (the loop is stopped by its condition, the other thread by a flag)."""
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)
    start = la.asarray(np.zeros(4, np.float32))
    _long(start, 0)[0].item()          # compiled
    n, _ = _long(start, 10 ** 6)
    t = threading.Thread(target=tick)
    t.start()
    try:
        time.sleep(0.01)
        seen = len(ticks)
        count = n.item()
        during = len(ticks) - seen
    finally:
        stop.set()
        t.join()
    assert count == 10 ** 6
    assert during > 0


def test_the_runner_is_the_native_control_runner():
    """The control runner's code loads and carries its op kinds (a stale cache entry of
    another layout would fail here)."""
    r = native_control.runner()
    assert r.exec is not None and r.handler and r.flag and r.chain
    assert native_control.CTL.OP_IF == 8


def test_the_profile_shows_a_loop_with_its_iterations_and_its_body_kernels():
    x = la.asarray(np.arange(8, dtype=np.float32))
    w = la.asarray(np.eye(8, dtype=np.float32) * 0.5)
    la.fori_loop(0, 5, lambda i, v: la.tanh(v @ w) + i, x).numpy()      # compiled
    with la.profiler.profile() as prof:
        la.fori_loop(0, 5, lambda i, v: la.tanh(v @ w) + i, x).numpy()
    rows = prof.key_averages()
    loops = [r for r in rows if r.trips]
    assert len(loops) == 1 and loops[0].trips == 5
    assert any(r.program == "body" for r in rows)
    assert " x5 it" in prof.table()


def test_the_dump_writes_the_condition_the_body_and_the_branches(tmp_path):
    runtime.clear_caches()
    with la.config.override(dump=str(tmp_path), cache_dir="off"):
        x = la.asarray(np.arange(4, dtype=np.float32))
        la.fori_loop(0, 3, lambda i, v: la.cond(i > 1, lambda u: u * 2.0, lambda u: u + 1.0, v),
                     x).numpy()
    names = {p.name for p in tmp_path.iterdir()}
    program = next(n[:-len(".optimized.hlo")] for n in names
                   if n.endswith(".optimized.hlo") and n.count(".") == 2)
    for sub in ("cond", "body", "body.branch0", "body.branch1"):
        text = (tmp_path / f"{program}.{sub}.optimized.hlo").read_text()
        assert text.startswith("HloModule") or "ENTRY" in text or "%" in text
        assert (tmp_path / f"{program}.{sub}.ll").read_text()
