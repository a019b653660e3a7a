"""The code-shape choices made for speed: interleaved reduction loops, exp's scaling step,
and the thread pool's contiguous blocks of chunks (correctness only, never timing)."""
from __future__ import annotations

import threading

import llvmlite.ir as ir
import numpy as np
import pytest

from lazyarray.compiler.codegen import llvm_target, loops
from lazyarray.devices.cpu.thread_pool import ThreadPool, _Blocks, split


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


def test_blocks_deal_contiguous_runs_then_steal_from_the_largest_end():
    q = _Blocks(8, 2)
    assert [q.take(0) for _ in range(4)] == [0, 1, 2, 3]
    assert q.take(0) == 7            # its own block is done: the other's last chunk
    assert [q.take(1) for _ in range(3)] == [4, 5, 6]
    assert q.take(1) is None and q.take(0) is None


@pytest.mark.parametrize("threads,extent,parts", [(2, 100, 8), (3, 10, 10), (2, 5, 2), (4, 7, 3)])
def test_pool_runs_every_chunk_once(threads, extent, parts):
    pool = ThreadPool(threads)
    seen: list = []
    lock = threading.Lock()

    def fn(k, s, e):
        with lock:
            seen.append((k, s, e))
    ranges = split(extent, parts)
    pool.run(fn, ranges)
    pool.close()
    assert sorted(seen) == [(k, s, e) for k, (s, e) in enumerate(ranges)]
