"""The code-shape choices made for speed: interleaved reduction loops, exp's scaling step,
and Python work split over the native pool (correctness only, never timing)."""
from __future__ import annotations

import threading

import llvmlite.ir as ir
import numpy as np
import pytest

from lazyarray.compiler.codegen import llvm_target, loops
from lazyarray.devices.cpu.native_pool import NativePool, split


def _sum_loop_ir() -> str:
    mod = ir.Module("t")
    fn = ir.Function(mod, ir.FunctionType(ir.FloatType(), [ir.PointerType(), loops.I64]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))

    def body(i, acc):
        v = b.load(b.gep(fn.args[0], [i], source_etype=ir.FloatType()), typ=ir.FloatType())
        return [b.fadd(acc[0], v, flags=("reassoc",))]
    (total,) = loops.counted_loop(b, loops.const(0), fn.args[1], [ir.Constant(ir.FloatType(), 0.0)], body)
    b.ret(total)
    return str(mod)


def test_reduction_loop_carries_an_interleave_hint_that_llvm_accepts():
    text = _sum_loop_ir()
    assert "llvm.loop.interleave.count" in text
    optimized = str(llvm_target.optimize(text, "t"))   # verifies the self-referencing loop id
    assert "define" in optimized


def test_loop_without_carried_values_has_no_hint():
    mod = ir.Module("t")
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [loops.I64]), "g")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    loops.counted_loop(b, loops.const(0), fn.args[0], [], lambda i, c: [])
    b.ret_void()
    assert "llvm.loop" not in str(mod)


@pytest.mark.parametrize("x", [-110.0, -103.5, -90.0, -87.5, -1e-3, 0.0, 1.5, 88.7, 88.8])
def test_exp_scaling_exact_into_the_subnormals(x):
    import lazyarray as la
    v = np.linspace(x - 0.5, x + 0.5, 4097, dtype=np.float32)
    got = np.asarray(la.exp(la.asarray(v))).astype(np.float64)
    with np.errstate(over="ignore"):
        ref = np.exp(v.astype(np.float64)).astype(np.float32).astype(np.float64)
    finite = np.isfinite(ref)
    assert np.array_equal(np.isinf(got), np.isinf(ref))
    ulp = np.abs(got[finite] - ref[finite]) / np.spacing(np.abs(ref[finite]).astype(np.float32))
    assert ulp.max(initial=0) <= 2


@pytest.mark.parametrize("threads,extent,parts", [(2, 100, 8), (3, 10, 10), (2, 5, 2), (4, 7, 3),
                                                  (1, 9, 3)])
def test_python_chunks_on_the_native_pool_run_every_chunk_once(threads, extent, parts):
    pool = NativePool(threads)
    seen: list = []
    lock = threading.Lock()

    def fn(k, s, e):
        with lock:
            seen.append((k, s, e, threading.get_ident()))
    ranges = split(extent, parts)
    try:
        pool.run_python(fn, ranges)
    finally:
        pool.close()
    assert sorted(c[:3] for c in seen) == [(k, s, e) for k, (s, e) in enumerate(ranges)]


def test_python_chunks_run_on_the_pools_threads_at_once():
    """Two chunks that each wait for the other to start: they can only both finish when
    they run on two threads at the same time (NumPy's loops let the GIL go so); also in
    the run that starts the pool's worker (it joins the job already published)."""
    pool = NativePool(2)
    started = [threading.Event(), threading.Event()]
    met = []

    def fn(k, s, e):
        started[k].set()
        met.append(started[1 - k].wait(timeout=10))
    try:
        pool.run_python(fn, [(0, 1), (1, 2)])
    finally:
        pool.close()
    assert met == [True, True]


def test_an_error_in_a_python_chunk_is_raised_and_no_chunk_starts_after_it():
    pool = NativePool(2)
    ran: list = []

    def fn(k, s, e):
        ran.append(k)
        if k == 0:
            raise KeyboardInterrupt        # as an interrupt arriving in a chunk would
    try:
        with pytest.raises(KeyboardInterrupt):
            pool.run_python(fn, split(64, 64))
        pool.run_python(lambda k, s, e: ran.append(-1), split(4, 2))   # usable after
    finally:
        pool.close()
    assert ran.count(-1) == 2 and len(ran) < 64 + 2
