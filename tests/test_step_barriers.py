"""Steps of a program's native job that need no barrier after them
(devices/cpu/step_barriers.py): a step follows without one only when it touches no memory
written since the last barrier and writes none read since; memory is compared by slot (a
dead value's reused memory, an in-place output's parameter), and a training step run so
gives the interpreter's parameters at 1 and 2 threads."""
from __future__ import annotations

import types

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.program import LibraryStep, LoopStep
from lazyarray.devices.cpu import native_gemm, run_plan, step_barriers
from lazyarray.devices.cpu import native_pool as NP

from native_training import made_programs, train_mlp


def _exe(steps: list, slot_of: dict = None, params: list = (0, 1, 2), aliases: list = ()):
    """A stand-in for a CPUExecutable: what the planner reads of one."""
    return types.SimpleNamespace(steps=steps, slot_of=dict(slot_of or {}),
                                 params=[(p, k) for k, p in enumerate(params)],
                                 _const_arrays={}, _aliases=list(aliases))


def _loop(*args: int) -> LoopStep:
    """A loop step writing args[0] from the rest."""
    return LoopStep(fn="f", args=list(args), extent=1, work=1)


def _free(exe, go_on: set = frozenset(), own: set = frozenset()) -> list:
    """Index of each step (in program order) followed by no barrier."""
    ids = step_barriers.free_steps(exe, exe.steps, set(go_on), set(own), run_plan.used)
    return [k for k, s in enumerate(exe.steps) if id(s) in ids]


def test_steps_sharing_no_memory_follow_each_other_without_a_barrier() -> None:
    exe = _exe([_loop(10, 0), _loop(11, 1), _loop(12, 2)], {10: 0, 11: 1, 12: 2})
    assert _free(exe) == [0, 1]


def test_a_step_reading_what_the_one_before_wrote_waits() -> None:
    exe = _exe([_loop(10, 0), _loop(11, 10), _loop(12, 2)], {10: 0, 11: 1, 12: 2})
    assert _free(exe) == [1]


def test_a_step_writing_memory_the_one_before_reads_waits() -> None:
    # 10 is dead after step 1 reads it: step 2 writes 12 into the same slot
    exe = _exe([_loop(10, 0), _loop(11, 10), _loop(12, 2)], {10: 0, 11: 1, 12: 0})
    assert _free(exe) == []
    # ... unless that value was given memory of its own
    assert _free(exe, own={12}) == [1]


def test_an_in_place_output_is_its_parameters_memory() -> None:
    # step 0 updates parameter 0 in place (output 10 in its slot); step 1 reads parameter 0
    exe = _exe([_loop(10, 0, 1), _loop(11, 0)], {0: 5, 10: 5, 11: 1}, aliases=[(10, 0)])
    assert _free(exe) == []
    exe = _exe([_loop(10, 0, 1), _loop(11, 2)], {0: 5, 10: 5, 11: 1}, aliases=[(10, 0)])
    assert _free(exe) == [0]


def test_a_step_waits_for_every_task_since_the_last_barrier() -> None:
    # step 2 is free of step 1 but reads what step 0 wrote, which may still be running
    exe = _exe([_loop(10, 0), _loop(11, 1), _loop(12, 10)], {10: 0, 11: 1, 12: 2})
    assert _free(exe) == [0]


def test_no_step_is_chained_into_a_pair_of_products_side_by_side() -> None:
    prod = lambda a, b, out: LibraryStep(call="gemm", op="dot_general", operands=[a, b], pos=out)  # noqa: E731
    steps = [_loop(10, 0), prod(1, 2, 11), prod(2, 1, 12), _loop(13, 0)]
    exe = _exe(steps, {10: 0, 11: 1, 12: 2, 13: 3})
    assert _free(exe, go_on={id(steps[1])}) == [2]    # after the pair: free of both


def _job_flags(prog) -> list:
    return [(job._tasks.reshape(-1, NP.IR.TASK_WORDS)[:, NP.IR.TASK_GO_ON].tolist(),
             job._tasks.reshape(-1, NP.IR.TASK_WORDS)[:, NP.IR.TASK_CHUNKS].tolist())
            for job, _, _ in prog.segments]


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("sizes, batch", [((784, 512, 512, 10), 256), ((300, 130, 70, 3), 97)])
def test_a_training_step_with_unbarred_steps_matches_the_interpreter(
        sizes: tuple, batch: int, threads: int, monkeypatch: pytest.MonkeyPatch,
        clean_metrics) -> None:
    made = made_programs(monkeypatch)   # (clean_metrics: no program cached earlier)
    with la.config.override(device="cpu", num_threads=threads):
        got = train_mlp(sizes, batch, 3)
    with la.config.override(device="interpreter"):
        want = train_mlp(sizes, batch, 3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-5)
    step = max(made, key=lambda p: len(p.exe.steps))
    paired = len(step.plan.go_on)
    flags = _job_flags(step)
    unbarred = sum(sum(f) for f, _ in flags) - paired
    parallel = any(c > 1 for _, chunks in flags for c in chunks)
    if parallel:      # the momentum updates of different parameters share nothing
        assert unbarred >= len(sizes) - 1
    else:             # a job on the calling thread alone keeps its barriers (no worker woken)
        assert unbarred == 0
    for f, _ in flags:
        assert f[-1] == 0                 # the last task of a job never goes on
    from lazyarray import runtime
    runtime.clear_caches()                # (a later test's spy sees its programs made)


def test_a_kernel_of_several_steps_writes_its_value_in_each() -> None:
    # a scatter: step 0 copies its operand into 10, step 1 (the same kernel) writes the
    # updates into 10; step 2 reads 10 and must wait for step 1, not only for step 0
    steps = [_loop(10, 0), _loop(10, 1), _loop(11, 10)]
    for s in steps[:2]:
        s.kernel = "scatter_7"
    steps[2].kernel = "reduce_8"
    exe = _exe(steps, {10: 0, 11: 1})
    assert _free(exe) == []
    assert step_barriers.writers(exe, run_plan.used)[10] == {id(s) for s in steps[:2]}


def _tied_embedding(w, tokens):
    """A tied embedding's gradient (a scatter-add of the lookup plus the head's product)
    and its squared norm (a reduction reading the scatter's result): the pattern of a GPT
    step's gradient clipping."""
    with la.GradientTape() as tape:
        tape.watch(w)
        h = la.nn.functional.embedding(tokens, w)
        loss = la.tanh(h @ w.T).sum()
    (g,) = tape.gradient(loss, [w])
    return (g * g).sum().numpy(), (w - g * (g * g).sum()).numpy()


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
def test_a_reduction_after_a_scatter_waits_for_it_run_after_run(monkeypatch) -> None:
    """Repeated runs on 2 threads against the interpreter: a reduction free to run beside
    the scatter's update step read its result half written (run to run differences)."""
    made = made_programs(monkeypatch)
    rng = np.random.default_rng(5)
    w = la.asarray(rng.standard_normal((1024, 64)).astype(np.float32) * 0.1)
    tokens = la.asarray(rng.integers(0, 1024, (8, 64)))
    with la.config.override(device="interpreter"):
        want = _tied_embedding(w, tokens)
    with la.config.override(device="cpu", num_threads=2):
        for _ in range(30):
            got = _tied_embedding(w, tokens)
            np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    assert made, "the step did not run as a native program"
    from lazyarray import runtime
    runtime.clear_caches()
