"""A loop kept whole for being small is split over the threads inside a native job that
runs on every thread anyway (devices/cpu/run_plan.py, JOB_SPLIT_ELEMENTS), and only
there: a program of small kernels alone stays one call on the calling thread. Results
equal the interpreter's and NumPy's (each chunk computes whole rows)."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.program import LoopStep
from lazyarray.devices.cpu import run_plan
from lazyarray.devices.cpu import native_pool as NP

from native_training import made_programs


def _softmax(x):
    e = la.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _task_chunks(prog) -> list:
    """(step, chunks of its job task) for each loop step, in job order."""
    out = []
    tasks = [int(c) for job, _, _ in prog.segments
             for c in job._tasks.reshape(-1, NP.IR.TASK_WORDS)[:, NP.IR.TASK_CHUNKS]]
    k = 0
    for step in prog.plan.order:
        if isinstance(step, LoopStep):
            out.append((step, tasks[k]))
        k += 2 if getattr(step, "finish", None) else 1
    assert k == len(tasks)
    return out


@pytest.mark.parametrize("rows, cols", [(97, 13), (256, 10), (1025, 3)])
def test_a_small_row_kernel_beside_a_split_one_is_split_too(rows, cols, monkeypatch,
                                                             clean_metrics) -> None:
    made = made_programs(monkeypatch)
    rng = np.random.default_rng(rows)
    big = rng.standard_normal((512, 1024)).astype(np.float32)
    small = rng.standard_normal((rows, cols)).astype(np.float32)
    with la.config.override(device="cpu", num_threads=2):
        b, s = la.asarray(big), la.asarray(small)
        got_big, got_small = la.exp(b) * 2 + 1, _softmax(s)
        la.sync()
        got = (got_big.numpy(), got_small.numpy())
    with la.config.override(device="interpreter"):
        b, s = la.asarray(big), la.asarray(small)
        want = ((la.exp(b) * 2 + 1).numpy(), _softmax(s).numpy())
    e = np.exp(small - small.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got[1], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-7)
    prog = made[-1]
    loops = _task_chunks(prog)
    kept_whole = [(st, n) for st, n in loops if len(prog.exe._split(st, 2)) == 1]
    assert kept_whole, "the softmax's kernels should be small enough to be kept whole"
    assert len(loops) > len(kept_whole)          # (the large kernel is split: a parallel job)
    for st, n in kept_whole:
        big_enough = int(st.extent) * max(1, int(st.work)) >= 2 * run_plan.JOB_SPLIT_ELEMENTS
        assert n == (2 if big_enough else 1), (st.fn, st.extent, st.work, n)
    assert any(n == 2 for _, n in kept_whole) == (rows * cols >= 2 * run_plan.JOB_SPLIT_ELEMENTS)
    from lazyarray import runtime
    runtime.clear_caches()


def test_small_kernels_alone_stay_one_call_on_the_calling_thread(monkeypatch, clean_metrics):
    made = made_programs(monkeypatch)
    small = np.random.default_rng(0).standard_normal((256, 10)).astype(np.float32)
    with la.config.override(device="cpu", num_threads=2):
        out = _softmax(la.asarray(small))
        la.sync()
        got = out.numpy()
    e = np.exp(small - small.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)
    prog = made[-1]
    assert prog._direct is not None          # one job of one chunk a task: no worker woken
    from lazyarray import runtime
    runtime.clear_caches()


def test_only_a_job_split_anyway_splits_its_small_loops() -> None:
    """A partial reduction without a finish phase (argmax's) ends a job: a small loop in
    the next job, whose steps are all whole, stays whole (that job wakes no worker)."""
    import types
    import dataclasses
    from lazyarray.compiler.program import PartialStep
    big = LoopStep(fn="f", args=[], extent=4096, work=64)
    cut = PartialStep(fn="f", args=[], extent=4096, work=64, per_chunk=False, roots=[])
    small = LoopStep(fn="f", args=[], extent=256, work=10)
    chunks = {id(big): 2, id(cut): 2, id(small): 1}
    exe = types.SimpleNamespace(_split=lambda step, threads: [(0, 1)] * chunks[id(step)])
    plan = types.SimpleNamespace(order=[big, cut, small], tiles={})
    wide = run_plan.parallel_jobs(exe, plan, 2)
    assert [wide[id(s)] for s in plan.order] == [True, True, False]
    plan = types.SimpleNamespace(order=[big, small, cut], tiles={})
    wide = run_plan.parallel_jobs(exe, plan, 2)
    assert [wide[id(s)] for s in plan.order] == [True, True, True]
    assert not any(run_plan.parallel_jobs(exe, plan, 1).values())
    assert run_plan.split_in_job(small, [(0, 256)], 2) == [(0, 128), (128, 256)]
    assert run_plan.split_in_job(dataclasses.replace(small, serial=True), [(0, 256)],
                                        2) == [(0, 256)]
    assert run_plan.split_in_job(dataclasses.replace(small, work=1), [(0, 256)],
                                        2) == [(0, 256)]
