"""The fast paths of a NativeProgram run (devices/cpu/native_program.py): an input given again
skips its checks, a scalar's holder keeps its address, small outputs are new arrays, a
one-chunk program is one native call on the calling thread. Each test changes what the
fast path assumes between runs and checks the results against NumPy and the interpreter."""
from __future__ import annotations

import functools
import gc

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.compiler.primitives import linalg
from lazyarray.devices.cpu import native_pool as NP
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice
from lazyarray.devices.cpu import native_program as NP_PROGRAM
from lazyarray.devices.cpu.native_program import NativeProgram

N = 4096
F32 = D.float32


def _scaled_sum(n: int = N) -> Module:
    """sum(x * s + 1) and max(x): a scalar parameter, an array parameter, two outputs."""
    return Module("scaled_sum", [
        I("parameter", (), (), F32, {"number": 0}),
        I("parameter", (), (n,), F32, {"number": 1}),
        I("broadcast_in_dim", (0,), (n,), F32, {"shape": (n,), "broadcast_dimensions": ()}),
        I("multiply", (1, 2), (n,), F32, {}),
        I("constant", (), (), F32, {"value": Literal(np.float32(1.0))}),
        I("broadcast_in_dim", (4,), (n,), F32, {"shape": (n,), "broadcast_dimensions": ()}),
        I("add", (3, 5), (n,), F32, {}),
        I("reduce", (6,), (), F32, {"axes": (0,), "kind": "sum"}),
        I("reduce", (1,), (), F32, {"axes": (0,), "kind": "max"}),
    ], [7, 8])


def _compile(module: Module, threads: int = 2):
    exe = CPUDevice(lambda: {"cache_dir": "off", "num_threads": threads}).compile(module)
    return exe


@functools.lru_cache(maxsize=None)
def _reference(n: int):
    return InterpreterDevice().compile(_scaled_sum(n))


def _check(exe, args: list) -> list:
    got = exe.run(args)
    want = _reference(len(args[1])).run(args)
    s, x = np.float32(args[0]), np.asarray(args[1], np.float32).astype(np.float64)
    np.testing.assert_allclose(float(got[0]), float((x * s + 1).sum()), rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-5, atol=1e-3)
    assert float(got[1]) == float(x.max()) == float(want[1])
    return got


def _program(exe) -> NativeProgram:
    prog = exe._fast[1] if exe._fast else None
    assert isinstance(prog, NativeProgram), "the run did not take the native program"
    return prog


def test_the_same_input_mutated_between_runs_is_read_again() -> None:
    exe = _compile(_scaled_sum())
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    first = _check(exe, [2.0, x])
    kept = float(first[0])
    x *= 3                                  # same object, new contents
    _check(exe, [2.0, x])
    x[:] = np.arange(N, dtype=np.float32)
    _check(exe, [2.0, x])
    assert float(first[0]) == kept          # an earlier result never changes
    assert _program(exe)._inputs[1].last() is x


def test_a_replaced_input_and_a_new_array_at_a_freed_id_are_rebound() -> None:
    """A dead array's id may be reused by the next one: the weak reference dies with the
    array, so the new one is checked and its address written."""
    exe = _compile(_scaled_sum())
    rng = np.random.default_rng(1)
    reused = 0
    for k in range(30):
        x = rng.standard_normal(N).astype(np.float32) + k
        old = id(x)
        _check(exe, [1.5, x])
        del x                           # freed here (reference counting)
        x = rng.standard_normal(N).astype(np.float32) - k   # often at the same id
        reused += id(x) == old
        _check(exe, [1.5, x])
    # (the id reuse is CPython's choice, not asserted; every result above was checked)
    print("ids reused:", reused)


def _two_products(m: int = 128, k: int = 256) -> Module:
    """sum(max(x @ w, 0) @ w): the first product and its rectified copy are temporaries
    of m * k floats (128 KB, above host_memory.MIN_BYTES), the output one number."""
    dot = {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (), "rhs_batch": ()}
    return Module("two_products", [
        I("parameter", (), (m, k), F32, {"number": 0}),
        I("parameter", (), (k, k), F32, {"number": 1}),
        I("dot_general", (0, 1), (m, k), F32, dot),
        I("constant", (), (), F32, {"value": Literal(np.float32(0.0))}),
        I("broadcast_in_dim", (3,), (m, k), F32, {"shape": (m, k), "broadcast_dimensions": ()}),
        I("maximum", (2, 4), (m, k), F32, {}),
        I("dot_general", (5, 1), (m, k), F32, dot),
        I("reduce", (6,), (), F32, {"axes": (0, 1), "kind": "sum"}),
    ], [7])


@pytest.mark.parametrize("cap", ["program", "process"])
@pytest.mark.parametrize("kept_bytes", [0, 1 << 17, 8 << 20])
def test_large_temporaries_kept_by_the_program_or_taken_each_run(monkeypatch, cap: str,
                                                                   kept_bytes: int) -> None:
    """Large temporaries are kept by the program up to KEPT_PROGRAM_BYTES of its own and
    what the process's KEPT_SCRATCH_BYTES leaves (no take and release per run), the rest
    taken each run; either way every run's result matches NumPy's, with new inputs and
    after another program ran in between."""
    if cap == "program":
        monkeypatch.setattr(NP_PROGRAM, "KEPT_PROGRAM_BYTES", kept_bytes)
    else:       # the process's budget, less what live programs of other tests keep
        gc.collect()
        monkeypatch.setattr(NP_PROGRAM, "KEPT_SCRATCH_BYTES",
                            NP_PROGRAM.KEPT_SCRATCH.total + kept_bytes)
    exe = _compile(_two_products())
    other = _compile(_two_products())   # planned at its first run, after exe's
    rng = np.random.default_rng(6)
    for k in range(4):
        x = rng.standard_normal((128, 256)).astype(np.float32)
        w = (rng.standard_normal((256, 256)) / 16).astype(np.float32)
        want = (np.maximum(x.astype(np.float64) @ w, 0) @ w).sum()
        np.testing.assert_allclose(float(exe.run([x, w])[0]), want, rtol=1e-4, atol=1e-2)
        other.run([-x, w])
    # two temporaries of 128 KB: taken each run beyond the budget, else kept
    taken = sum(size for _, size, _, output in _program(exe)._fresh if not output)
    assert taken == {0: 2, 1 << 17: 1}.get(kept_bytes, 0) * (1 << 17)
    if cap == "process":      # exe took the process's room: none left for the other
        others = sum(size for _, size, _, output in _program(other)._fresh if not output)
        assert others == (2 << 17 if kept_bytes < (4 << 17) else 0)


def test_kept_scratch_returns_to_the_process_when_a_program_is_freed() -> None:
    gc.collect()              # (earlier tests' programs freed first)
    before = NP_PROGRAM.KEPT_SCRATCH.total
    exe = _compile(_two_products())
    exe.run([np.ones((128, 256), np.float32), np.eye(256, dtype=np.float32)])
    assert NP_PROGRAM.KEPT_SCRATCH.total == before + (2 << 17)
    del exe
    gc.collect()
    assert NP_PROGRAM.KEPT_SCRATCH.total == before


def test_a_scalar_holder_changing_value_and_kind() -> None:
    """A scalar parameter's holder is written each run; the same parameter given a 0-d
    array, a NumPy scalar, an array of another dtype or a Python int goes through the
    checks and back."""
    exe = _compile(_scaled_sum())
    x = np.random.default_rng(2).standard_normal(N).astype(np.float32)
    for s in (2.0, -0.5, 3.25, np.array(4.0, np.float32), np.float64(0.25),
              np.array(7, np.int64), 5, 2.0, np.array(-1.0, np.float32), -1.0):
        _check(exe, [s, x])


def test_inputs_that_need_converting_then_not() -> None:
    """A converted input is never remembered: the next run with the caller's own array
    of the right dtype points the table at that array."""
    exe = _compile(_scaled_sum())
    rng = np.random.default_rng(3)
    x64 = rng.standard_normal(N)
    x32 = rng.standard_normal(N).astype(np.float32)
    strided = rng.standard_normal(2 * N).astype(np.float32)[::2]
    for x in (x64, x32, x64, strided, x32, x32, strided, x64.tolist(), x32):
        _check(exe, [1.25, x])
    assert _program(exe)._inputs[1].last() is x32


def test_small_outputs_are_new_read_only_arrays_each_run() -> None:
    exe = _compile(_scaled_sum())
    rng = np.random.default_rng(4)
    runs = []
    for k in range(5):
        x = rng.standard_normal(N).astype(np.float32)
        runs.append((_check(exe, [float(k), x]), x))
    for (got, x), k in zip(runs, range(5)):   # no later run wrote into an earlier result
        np.testing.assert_allclose(float(got[0]), float((x.astype(np.float64) * k + 1).sum()),
                                   rtol=1e-5, atol=1e-3)
        assert not got[0].flags.writeable and got[0].base is not None
    assert _program(exe)._small_outputs is not None


def test_a_failed_run_leaves_the_program_correct() -> None:
    exe = _compile(_scaled_sum())
    x = np.random.default_rng(5).standard_normal(N).astype(np.float32)
    y = x[::-1].copy()
    _check(exe, [2.0, x])
    with pytest.raises(ValueError):
        exe.run([2.0, np.ones(N + 1, np.float32)])
    _check(exe, [2.0, x])
    with pytest.raises((ValueError, TypeError)):
        exe.run(["not a number", y])
    _check(exe, [3.0, y])
    _check(exe, [3.0, x])


@pytest.mark.parametrize("threads", [1, 2, 7])
def test_a_tiny_program_is_one_native_call_on_the_calling_thread(threads: int, monkeypatch) -> None:
    """Issue 11: no kernel split finer than it pays. A 4,096-element program is one job
    of one chunk a task, called directly: the pool is never asked, no worker woken."""
    exe = _compile(_scaled_sum(), threads)
    x = np.random.default_rng(6).standard_normal(N).astype(np.float32)
    _check(exe, [2.0, x])
    prog = _program(exe)
    assert len(prog.segments) == 1 and not prog.segments[0][0].parallel
    assert prog._direct is not None
    calls = []
    real = prog._call
    monkeypatch.setattr(prog, "_call", lambda *a: calls.append(a) or real(*a))
    monkeypatch.setattr(NP.NativePool, "run", lambda *a: pytest.fail("the pool was asked"))
    _check(exe, [2.0, x])
    assert len(calls) == 1 and calls[0][0] is None     # no pool state: this thread only


@pytest.mark.parametrize("n,threads", [(1000, 2), (N, 2), (1 << 16, 2), (1 << 16, 1)])
def test_full_reduction_partials_need_no_reset(n: int, threads: int) -> None:
    """A full reduction's chunks store their partials whole ("partials_stored": no reset
    before a run): garbage left in them never reaches a result, on one chunk or many."""
    exe = _compile(_scaled_sum(n), threads)
    assert all(s.partials_stored for s in exe.steps if s.kind == "partial")
    rng = np.random.default_rng(n)
    x = rng.standard_normal(n).astype(np.float32)
    _check(exe, [0.5, x])
    prog = _program(exe)
    assert prog._partials and not any(fills for _, fills, _ in prog.segments)
    for k in range(3):
        for red in prog._partials:
            red.part.fill(np.nan if k % 2 else 1e30)
        _check(exe, [0.5 + k, rng.standard_normal(n).astype(np.float32)])


def test_a_cached_tiny_sync_is_one_native_call_on_the_calling_thread(monkeypatch) -> None:
    """Issue 11 point 6, end to end: `float((x * 2 + 1).sum())` over 4,096 floats, cached,
    on 2 threads makes one native call (its program's one job) and never asks the pool."""
    import lazyarray as la
    data = np.random.default_rng(7).standard_normal(N).astype(np.float32)
    calls: list = []
    direct: list = []
    real = NativeProgram.run

    def counting(self, args):
        calls.append(self)
        return real(self, args)
    monkeypatch.setattr(NativeProgram, "run", counting)
    with la.config.override(num_threads=2):
        for k in range(6):
            if k == 2:                  # compiled, then cached: watch the cached program
                prog = calls[-1]
                assert prog._direct is not None and prog._small_outputs is not None
                call = prog._call
                monkeypatch.setattr(prog, "_call", lambda *a: direct.append(a) or call(*a))
                monkeypatch.setattr(NP.NativePool, "run",
                                    lambda *a: pytest.fail("the pool was asked"))
            x = la.asarray(data + k)
            want = float((data.astype(np.float64) + k) @ np.full(N, 2.0) + N)
            got = float((x * 2 + 1).sum())
            assert abs(got - want) <= 1e-5 * abs(want) + 1e-2
    assert len(direct) == 4 and all(a[0] is None for a in direct)
    assert all(p is prog for p in calls[2:])


def test_threads_sharing_one_program_get_their_own_results() -> None:
    """Four Python threads run one cached program with their own inputs and scalars: the
    remembered input and the scalar holder change hands at every run (under the
    executable's lock) and no thread ever reads another's value. (A short switch
    interval makes the threads interleave between binding and the native call.)"""
    import sys
    import threading
    n = 30000                           # the largest size still run as one chunk
    exe = _compile(_scaled_sum(n), 2)
    rng = np.random.default_rng(8)
    inputs = [(float(k + 1), rng.standard_normal(n).astype(np.float32)) for k in range(4)]
    wants = [(x.astype(np.float64) * s + 1).sum() for s, x in inputs]
    errors: list = []

    def work(k: int) -> None:
        s, x = inputs[k]
        for _ in range(300):
            got = float(exe.run([s, x])[0])
            if abs(got - wants[k]) > 1e-5 * abs(wants[k]) + 1e-1:
                errors.append((k, got, wants[k]))
                return
    exe.run(list(inputs[0]))
    assert _program(exe)._direct is not None
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors[:3]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("batch,m,n,k,trans_b", [(8, 16, 16, 8, True), (3, 5, 7, 4, False),
                                                 (2, 64, 48, 32, True), (1, 3, 3, 2, False)])
def test_batched_products_run_in_the_native_program(threads, batch, m, n, k, trans_b) -> None:
    """A batched product (attention's q @ k.T and p @ v: batch dimensions leading, the
    right operand read transposed or not) is a task of the program's native job, not a
    reason to run the program step by step; the results are the interpreter's and
    NumPy's, with the batch split over the threads or each element in tiles."""
    rhs = (2, batch, n, k) if trans_b else (2, batch, k, n)
    module = Module("bmm", [
        I("parameter", (), (2, batch, m, k), F32, {"number": 0}),
        I("parameter", (), rhs, F32, {"number": 1}),
        I("dot_general", (0, 1), (2, batch, m, n), F32,
          {"lhs_contracting": (3,), "rhs_contracting": (3 if trans_b else 2,),
           "lhs_batch": (0, 1), "rhs_batch": (0, 1)}),
        I("exponential", (2,), (2, batch, m, n), F32, {}),
    ], [3])
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, batch, m, k)).astype(np.float32) * 0.3
    b = rng.standard_normal(rhs).astype(np.float32) * 0.3
    exe = _compile(module, threads)
    got = exe.run([a, b])[0]
    _program(exe)
    want = InterpreterDevice().compile(module).run([a, b])[0]
    bt = np.swapaxes(b, -1, -2) if trans_b else b
    np.testing.assert_allclose(got, np.exp(a.astype(np.float64) @ bt), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lhs,rhs,dims", [
    # x @ W.T on (B, T, C): one (B*T, C) matrix, W read transposed
    ((2, 16, 32), (96, 32), ((2,), (1,), (), ())),
    # a weight gradient g.T @ x contracting batch and sequence: both (B*T, .) matrices
    ((2, 16, 96), (2, 16, 32), ((0, 1), (0, 1), (), ())),
    # heads split out of the width, batch dimensions leading: (B, H, T, D) @ (B, H, D, T)
    ((2, 3, 8, 4), (2, 3, 4, 8), ((3,), (2,), (0, 1), (0, 1))),
    # a batch dimension in the middle of the lhs: rows ld = 2 * 32 apart
    ((16, 2, 32), (2, 32, 8), ((2,), (1,), (1,), (0,))),
    # the lhs's free dimensions around its contracted one: its rows do not merge into
    # one stride (not covered: the general path copies it)
    ((4, 3, 8), (3, 5), ((1,), (0,), (), ())),
    # groups of several dimensions, each contiguous: (B, T) rows against W or W.T, a
    # contraction over (B, T), one over the leading dimension, a batched (B, T, D) @ W
    ((2, 3, 4), (5, 4), ((2,), (1,), (), ())),
    ((2, 3, 4), (4, 5), ((2,), (0,), (), ())),
    ((2, 3, 4), (2, 3, 5), ((0, 1), (0, 1), (), ())),
    ((6, 2, 3), (6, 4), ((0,), (0,), (), ())),
    ((2, 3, 4, 5), (2, 5, 6), ((3,), (1,), (0,), (0,))),
])
def test_products_of_operands_read_in_place_run_in_the_native_program(threads, lhs, rhs,
                                                                       dims, monkeypatch) -> None:
    """dot_general whose operands read as (batch of) matrices without a copy (their
    dimensions merged, transposed or not) is a task of the native job; the results are
    the interpreter's. One that does not read so runs from NumPy between two jobs."""
    # the layouts are what is tested: products this small run as library calls here,
    # not as generated reductions (linalg.SMALL_PRODUCT; a device of its own, no cache)
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)
    lc, rc, lb, rb = dims
    attrs = {"lhs_contracting": lc, "rhs_contracting": rc, "lhs_batch": lb, "rhs_batch": rb}
    out = tuple(lhs[d] for d in lb) + tuple(lhs[d] for d in range(len(lhs)) if d not in lc + lb) \
        + tuple(rhs[d] for d in range(len(rhs)) if d not in rc + rb)
    module = Module("mm3", [
        I("parameter", (), lhs, F32, {"number": 0}),
        I("parameter", (), rhs, F32, {"number": 1}),
        I("dot_general", (0, 1), out, F32, attrs),
        I("exponential", (2,), out, F32, {}),
    ], [3])
    rng = np.random.default_rng(1)
    a = rng.standard_normal(lhs).astype(np.float32) * 0.2
    b = rng.standard_normal(rhs).astype(np.float32) * 0.2
    exe = _compile(module, threads)
    got = exe.run([a, b])[0]
    want = InterpreterDevice().compile(module).run([a, b])[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    kinds = [type(job).__name__ for job, _, _ in _program(exe).segments]
    if lc == (1,) and not lb:     # not read in place: NumPy's matmul between two jobs
        assert "_LibraryCall" in kinds, kinds
    else:
        assert "_LibraryCall" not in kinds, kinds


def _sort_between_kernels() -> Module:
    """exp(x) sorted along its rows (a host step: NumPy's reference), then a sum."""
    return Module("sorted", [
        I("parameter", (), (64, 33), F32, {"number": 0}),
        I("exponential", (0,), (64, 33), F32, {}),
        I("sort", (1,), (64, 33), F32, {"dimension": 1, "descending": False}),
        I("multiply", (2, 0), (64, 33), F32, {}),
    ], [3, 2])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_host_step_runs_between_the_jobs_of_the_native_program(threads) -> None:
    """A host step (a sort) no longer sends the program down the general path: the
    native program runs it between two jobs, over the buffers its table names; the
    results are the interpreter's, run after run."""
    module = _sort_between_kernels()
    exe = _compile(module, threads)
    ref = InterpreterDevice().compile(module)
    rng = np.random.default_rng(threads)
    for _ in range(3):
        x = rng.standard_normal((64, 33)).astype(np.float32)
        got, want = exe.run([x]), ref.run([x])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    kinds = [type(job).__name__ for job, _, _ in _program(exe).segments]
    assert "HostStep" in kinds and "Job" in kinds, kinds


def test_a_failing_host_step_raises_and_the_next_run_is_right(monkeypatch) -> None:
    from lazyarray.devices.cpu import host_calls
    module = _sort_between_kernels()
    exe = _compile(module, 2)
    x = np.random.default_rng(3).standard_normal((64, 33)).astype(np.float32)
    want = InterpreterDevice().compile(module).run([x])
    exe.run([x])
    real = host_calls.host_call

    def failing(*args):
        raise KeyboardInterrupt       # as an interrupt arriving inside the call would
    monkeypatch.setattr(host_calls, "host_call", failing)
    with pytest.raises(KeyboardInterrupt):
        exe.run([x])
    monkeypatch.setattr(host_calls, "host_call", real)
    for g, w in zip(exe.run([x]), want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    _program(exe)


def test_memory_given_back_while_python_shuts_down(monkeypatch):
    """A handed-out output freed during the interpreter's shutdown gives its memory back
    after the module's globals (`sys`) are gone: no AttributeError printed at exit."""
    from lazyarray.devices.cpu import host_memory
    mem = np.empty(host_memory.MIN_BYTES, np.uint8)
    monkeypatch.setattr(host_memory, "sys", None)        # as module teardown leaves it
    host_memory.HOST_MEMORY._give_back(mem)
    # (the bounds of what is kept, None by then too: test_cpu_device.py
    # test_memory_given_back_at_interpreter_shutdown_is_dropped)


@pytest.mark.parametrize("with_kernel", [True, False], ids=["a kernel beside", "no step"])
def test_outputs_that_are_a_parameter_or_a_constant_are_copies(with_kernel: bool) -> None:
    """A program whose outputs include a parameter and a constant (or are only those: no
    step at all) runs as a native program like any other; those outputs are read-only
    copies, so changing the given array afterwards changes no result."""
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    ins = [I("parameter", (), (2, 3), F32, {"number": 0}),
           I("constant", (), (2, 3), F32, {"value": Literal(c)})]
    outs = [0, 1]
    if with_kernel:
        ins.append(I("exponential", (0,), (2, 3), F32, {}))
        outs.append(2)
    module = Module("given", ins, outs)
    exe = _compile(module)
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for _ in range(2):
        got = exe.run([x])
        want = InterpreterDevice().compile(module).run([x])
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)
            assert not g.flags.writeable
        assert not np.shares_memory(got[0], x)
    _program(exe)
    before = x.copy()
    x += 1.0
    np.testing.assert_array_equal(got[0], before)
