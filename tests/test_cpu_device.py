"""The CPU device's runtime: work split over threads gives the 1-thread result, kernels
run with the GIL released, outputs never alias the caller's inputs, BLAS products."""
from __future__ import annotations

import ctypes
import os
import threading

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.devices.cpu.cpu import CPUDevice


def _device(threads: int, debug: int = 0) -> CPUDevice:
    return CPUDevice(lambda: {"cache_dir": "off", "num_threads": threads, "debug": debug})


def _sum_module(shape: tuple, axes: tuple, dtype: D.DType) -> Module:
    out = tuple(n for d, n in enumerate(shape) if d not in axes)
    return Module("sums", [
        I("parameter", (), shape, dtype, {"number": 0}),
        I("multiply", (0, 0), shape, dtype, {}),
        I("reduce", (1,), out, dtype, {"axes": axes, "kind": "sum"}),
        I("reduce", (0,), out, dtype, {"axes": axes, "kind": "max"}),
    ], [2, 3])


@pytest.mark.parametrize("axes", [(0, 1), (1,), (0,)], ids=["full", "rows", "columns"])
def test_threads_give_the_one_thread_result(axes: tuple) -> None:
    shape = (300, 257)
    x = np.random.default_rng(0).integers(-50, 50, shape).astype(np.int64)
    m = _sum_module(shape, axes, D.int64)
    one = _device(1).compile(m)
    four = _device(4).compile(m)
    assert any(len(four._ranges(s)) == 4 for s in four.steps), "nothing was split"
    for a, b, want in zip(one.run([x]), four.run([x]), [(x * x).sum(axis=axes), x.max(axis=axes)]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, want)


def test_float_full_sum_over_threads_is_close() -> None:
    x = np.random.default_rng(1).standard_normal(1 << 18).astype(np.float32)
    m = _sum_module(x.shape, (0,), D.float32)
    s1, _ = _device(1).compile(m).run([x])
    s4, _ = _device(4).compile(m).run([x])
    np.testing.assert_allclose(s4, s1, rtol=1e-5)
    np.testing.assert_allclose(s4, (x.astype(np.float64) ** 2).sum(), rtol=1e-5)


def test_kernels_are_called_with_the_gil_released() -> None:
    m = _sum_module((64, 64), (1,), D.float32)
    exe = _device(2).compile(m)
    for fn in exe._fns.values():
        assert not fn._flags_ & ctypes._FUNCFLAG_PYTHONAPI      # CFUNCTYPE releases the GIL
    x = np.ones((64, 64), np.float32)
    results: list = []
    threads = [threading.Thread(target=lambda: results.append(exe.run([x])[0]))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(np.array_equal(r, np.full(64, 64.0)) for r in results)


def test_outputs_do_not_alias_inputs() -> None:
    m = Module("alias", [I("parameter", (), (16,), D.float32, {"number": 0}),
                         I("negate", (0,), (16,), D.float32, {})], [0, 1, 1])
    x = np.arange(16, dtype=np.float32)
    exe = _device(2).compile(m)
    a, b, c = exe.run([x])
    assert not np.shares_memory(a, x) and not np.shares_memory(b, x)
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, -x)
    a2, b2, _ = exe.run([x])
    assert not np.shares_memory(b2, b), "a second run overwrote the first run's output"


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.int32, D.float16])
def test_dot_general_batched_and_transposed(dtype: D.DType) -> None:
    rng = np.random.default_rng(2)
    lhs = rng.integers(-3, 3, (4, 5, 3)).astype(dtype.np)      # batch 0, contract 1
    rhs = rng.integers(-3, 3, (6, 4, 5)).astype(dtype.np)      # batch 1, contract 2
    attrs = {"lhs_contracting": (1,), "rhs_contracting": (2,), "lhs_batch": (0,), "rhs_batch": (1,)}
    m = Module("dot", [I("parameter", (), lhs.shape, dtype, {"number": 0}),
                       I("parameter", (), rhs.shape, dtype, {"number": 1}),
                       I("dot_general", (0, 1), (4, 3, 6), dtype, attrs)], [2])
    got = _device(2).compile(m).run([lhs, rhs])[0]
    want = np.einsum("bkm,nbk->bmn", lhs.astype(np.float64), rhs.astype(np.float64))
    np.testing.assert_allclose(got.astype(np.float64), want)


def test_lazyarray_uses_cpu_by_default_and_counts_kernels() -> None:
    import lazyarray as la
    la.debug.reset_metrics()
    with la.config.override(device="", cache_dir="off"):
        x = la.asarray(np.arange(6, dtype=np.float32))
        y = (x * 2 + 1).sum()
        assert y.device.device.name == "cpu"
        assert float(y) == 36.0
    m = la.debug.metrics()
    assert m.kernels_launched >= 1 and m.peak_bytes


def test_debug_ir_stages() -> None:
    import lazyarray as la
    with la.config.override(device="cpu"):
        x = la.asarray(np.ones((4, 8), np.float32))
        y = la.exp(x).sum(axis=1)
        assert "define" in la.debug.ir(y, "llvm")
        assert "digraph" in la.debug.ir(y, "dot")
        assert "reduce" in la.debug.ir(y, "optimized_hlo")
        assert "ret" in la.debug.ir(y, "asm")


@pytest.mark.parametrize("mode", ["set", "add"])
def test_scatter_duplicates_and_out_of_range_indices(mode: str) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    idx = np.array([1, 5, 1, -1, 0], np.int32)           # 5 and -1 are skipped
    upd = np.arange(15, dtype=np.float32).reshape(3, 5) + 100
    m = Module("scatter", [I("parameter", (), x.shape, D.float32, {"number": 0}),
                           I("parameter", (), idx.shape, D.int32, {"number": 1}),
                           I("parameter", (), upd.shape, D.float32, {"number": 2}),
                           I("scatter", (0, 1, 2), x.shape, D.float32, {"axis": 1, "mode": mode})],
               [3])
    want = x.copy()
    for j, k in enumerate(idx):
        if 0 <= k < 4:
            want[:, k] = upd[:, j] + (want[:, k] if mode == "add" else 0)
    np.testing.assert_array_equal(_device(2).compile(m).run([x, idx, upd])[0], want)


@pytest.mark.parametrize("axis,reverse", [(0, False), (1, True)])
def test_cumulative_is_generated_and_matches_numpy(axis: int, reverse: bool) -> None:
    x = np.random.default_rng(3).integers(-5, 5, (300, 200)).astype(np.int32)
    m = Module("scan", [I("parameter", (), x.shape, D.int32, {"number": 0}),
                        I("cumulative", (0,), x.shape, D.int32,
                          {"axis": axis, "kind": "sum", "reverse": reverse})], [1])
    exe = _device(2).compile(m)
    assert all(s.kind == "loop" for s in exe.steps), "cumulative fell back to a library step"
    flip = (lambda a: np.flip(a, axis)) if reverse else (lambda a: a)
    np.testing.assert_array_equal(exe.run([x])[0], flip(np.cumsum(flip(x), axis=axis)))


def test_dump_writes_every_stage_and_debug_prints(tmp_path, capsys) -> None:
    import lazyarray as la
    with la.config.override(device="cpu", dump=str(tmp_path), debug=2, cache_dir="off"):
        x = la.asarray(np.ones((4, 8), np.float32))
        float(la.tanh(x * 3.5).sum())
    names = os.listdir(tmp_path)
    for suffix in (".optimized.hlo", ".fusion.txt", ".dot", ".ll", ".s"):
        assert any(n.endswith(suffix) for n in names), (suffix, names)
    asm = next(n for n in names if n.endswith(".s"))
    assert "ret" in open(tmp_path / asm).read()
    out = capsys.readouterr().out
    assert "cpu compile" in out and "disk cache miss" in out and " ms" in out
    assert "(loop)" in out or "(partial)" in out         # debug=2: each kernel's time


def test_leading_size_one_dimensions_still_split_over_threads() -> None:
    x = np.random.default_rng(4).integers(-9, 9, (1, 1, 70000)).astype(np.int64)
    for axes in [(2,), (0, 1, 2)]:
        m = _sum_module(x.shape, axes, D.int64)
        exe = _device(2).compile(m)
        assert any(len(exe._ranges(s)) == 2 for s in exe.steps), (axes, exe.steps)
        got = exe.run([x])
        np.testing.assert_array_equal(got[0], (x * x).sum(axis=axes))
        np.testing.assert_array_equal(got[1], x.max(axis=axes))


def test_output_memory_is_recycled_only_when_no_view_remains() -> None:
    from lazyarray.devices.cpu.host_memory import HostMemory
    pool = HostMemory()
    mem = pool.take(1 << 20)
    out = mem[:].view(np.float32)
    pool.track(out, mem)
    keep = out[10:20]                     # the caller still reads part of it
    del mem, out
    fresh = pool.take(1 << 20)
    assert not np.shares_memory(fresh, keep), "memory still viewed was handed out again"
    mem2 = fresh
    out2 = mem2[:].view(np.float32)
    pool.track(out2, mem2)
    address = mem2.ctypes.data
    del mem2, fresh
    del out2                              # the last reference: its memory comes back
    assert pool.take(1 << 20).ctypes.data == address, "dropped output memory was not reused"


def test_memory_given_back_at_interpreter_shutdown_is_dropped(monkeypatch) -> None:
    """At shutdown a weak reference's callback can give memory back after the module's
    globals became None: it is dropped, no TypeError ("Exception ignored" at exit)."""
    from lazyarray.devices.cpu import host_memory
    pool = host_memory.HostMemory()
    monkeypatch.setattr(host_memory, "KEEP_PER_SIZE", None)
    monkeypatch.setattr(host_memory, "KEEP_BYTES", None)
    pool.release(np.empty(host_memory.MIN_BYTES, np.uint8))
    assert pool._bytes == 0


@pytest.mark.parametrize("lc,rc", [(1, 0), (0, 0), (1, 1), (0, 1)])
def test_dot_general_2d_transposes(lc: int, rc: int) -> None:
    rng = np.random.default_rng(5)
    lhs = rng.standard_normal((3, 4) if lc == 1 else (4, 3))
    rhs = rng.standard_normal((4, 5) if rc == 0 else (5, 4))
    attrs = {"lhs_contracting": (lc,), "rhs_contracting": (rc,), "lhs_batch": (), "rhs_batch": ()}
    m = Module("dot2", [I("parameter", (), lhs.shape, D.float64, {"number": 0}),
                        I("parameter", (), rhs.shape, D.float64, {"number": 1}),
                        I("dot_general", (0, 1), (3, 5), D.float64, attrs)], [2])
    a = lhs if lc == 1 else lhs.T
    c = rhs if rc == 0 else rhs.T
    np.testing.assert_allclose(_device(1).compile(m).run([lhs, rhs])[0], a @ c, rtol=1e-12)


def test_transposed_reads_run_in_tiles_and_match() -> None:
    x = np.random.default_rng(6).standard_normal((2, 130, 97)).astype(np.float32)
    y = np.random.default_rng(7).standard_normal((2, 97, 130)).astype(np.float32)
    m = Module("tiles", [I("parameter", (), x.shape, D.float32, {"number": 0}),
                         I("parameter", (), y.shape, D.float32, {"number": 1}),
                         I("transpose", (0,), y.shape, D.float32, {"permutation": (0, 2, 1)}),
                         I("add", (2, 1), y.shape, D.float32, {})], [3])
    dev = _device(2)
    assert "ti.body" in dev.stage(m, "llvm") or "bi" in dev.stage(m, "llvm")
    np.testing.assert_array_equal(dev.compile(m).run([x, y])[0], np.transpose(x, (0, 2, 1)) + y)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reductions_over_a_leading_axis(op: str) -> None:
    x = np.random.default_rng(8).standard_normal((300, 70)).astype(np.float32)
    x[5, 7] = x[9, 7] = np.nan
    x[:, 6] = 0.0
    m = Module("argcols", [I("parameter", (), x.shape, D.float32, {"number": 0}),
                           I(op, (0,), (70,), D.int32, {"axis": 0, "index_dtype": D.int32})], [1])
    exe = _device(2).compile(m)
    assert exe.steps[0].kind == "partial"
    np.testing.assert_array_equal(exe.run([x])[0], getattr(np, op)(x, axis=0))


def _matmul_module(lhs: tuple, rhs: tuple, dims: dict) -> Module:
    out = (lhs[0], rhs[1]) if len(lhs) == 2 else (lhs[0], lhs[1], rhs[2])
    return Module("mm", [
        I("parameter", (), lhs, D.float32, {"number": 0}),
        I("parameter", (), rhs, D.float32, {"number": 1}),
        I("dot_general", (0, 1), out, D.float32, dims),
    ], [2])


@pytest.mark.parametrize("stepwise", [False, True], ids=["program", "step by step"])
@pytest.mark.parametrize("batched", [False, True], ids=["2d", "batched"])
def test_products_split_over_the_native_pool_match_one_call(batched: bool, stepwise: bool,
                                                             monkeypatch) -> None:
    """A product runs as tiles on the native pool, in a native program and step by step
    (a stepwise plan, debug >= 2: the same task): a batched one a tile per product (4 on 3
    threads), a 2-D one in a tile per thread."""
    from lazyarray.devices.cpu import native_gemm, native_pool
    if not native_gemm.available():
        pytest.skip(reason="NumPy's BLAS is not its ILP64 OpenBLAS")
    rng = np.random.default_rng(3)
    if batched:
        a, b = rng.standard_normal((4, 96, 80), np.float32), rng.standard_normal((4, 80, 70), np.float32)
        dims = {"lhs_contracting": (2,), "rhs_contracting": (1,), "lhs_batch": (0,), "rhs_batch": (0,)}
    else:
        a, b = rng.standard_normal((300, 200), np.float32), rng.standard_normal((200, 150), np.float32)
        dims = {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (), "rhs_batch": ()}
    calls = []
    real = native_pool.NativePool.run

    def counting(self, job):
        calls.append(job.chunks)
        return real(self, job)
    monkeypatch.setattr(native_gemm, "SPLIT_WORK", 1)
    monkeypatch.setattr(native_pool.NativePool, "run", counting)
    got = _device(3, 2 * stepwise).compile(_matmul_module(a.shape, b.shape, dims)).run([a, b])[0]
    assert calls and calls[0] == (4 if batched else 3), "the product was not split over the pool"
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-4, atol=1e-4)


def test_an_integer_product_splits_over_the_native_pool(monkeypatch) -> None:
    """An integer product (NumPy's matmul, not BLAS tiles) splits by batches over the
    native pool's threads (`run_python`), with NumPy's result."""
    from lazyarray.devices.cpu import library_calls, native_pool
    rng = np.random.default_rng(4)
    a, b = rng.integers(-5, 5, (4, 96, 80)), rng.integers(-5, 5, (4, 80, 70))
    dims = {"lhs_contracting": (2,), "rhs_contracting": (1,), "lhs_batch": (0,), "rhs_batch": (0,)}
    module = Module("mm", [
        I("parameter", (), a.shape, D.int64, {"number": 0}),
        I("parameter", (), b.shape, D.int64, {"number": 1}),
        I("dot_general", (0, 1), (4, 96, 70), D.int64, dims),
    ], [2])
    monkeypatch.setattr(library_calls, "SPLIT_FLOPS", 1)
    chunks: list = []
    real = native_pool.NativePool.run_python

    def spying(self, fn, ranges):
        chunks.extend(ranges)
        return real(self, fn, ranges)
    monkeypatch.setattr(native_pool.NativePool, "run_python", spying)
    got = _device(2).compile(module).run([a, b])[0]
    assert chunks == [(0, 2), (2, 4)], "the product was not split over the pool"
    np.testing.assert_array_equal(got, np.matmul(a, b))


@pytest.mark.parametrize("stepwise", [False, True], ids=["native program", "step by step"])
def test_a_large_host_call_splits_its_rows_over_the_native_pool(stepwise: bool) -> None:
    """An FFT's rows (a host call: NumPy's reference) run on the pool's threads in two
    chunks, as a task of the native program or step by step (debug >= 2), with NumPy's
    result."""
    from lazyarray.compiler.primitive import PRIMITIVES
    x = np.random.default_rng(4).standard_normal((512, 512))
    module = Module("rfft", [
        I("parameter", (), x.shape, D.float64, {"number": 0}),
        I("fft", (0,), (512, 257), D.complex128, {"fft_type": "RFFT", "fft_length": (512,)}),
    ], [1])
    call = PRIMITIVES["fft"].library
    real = call.into
    seen: list = []

    def into(out, *args, **kw):
        seen.append((out.shape[0], threading.get_ident()))
        real(out, *args, **kw)
    object.__setattr__(call, "into", into)     # (a frozen stanza: restored below)
    try:
        exe = _device(2, 2 * stepwise).compile(module)
        got = exe.run([x])[0]
    finally:
        object.__setattr__(call, "into", real)
    assert sorted(n for n, _ in seen) == [256, 256], seen
    assert exe._fast[1].stepwise == stepwise
    np.testing.assert_allclose(got, np.fft.rfft(x, axis=-1), rtol=1e-12, atol=1e-9)


def test_blas_runs_single_threaded_inside_a_program_and_is_restored() -> None:
    from lazyarray.devices.cpu.blas_threads import BLAS_THREADS, blas_single_threaded
    libs = BLAS_THREADS.libs()
    if not libs:
        pytest.skip(reason="threadpoolctl found no BLAS library to control")
    before = [lib.get_num_threads() for lib in libs]
    seen = []
    with blas_single_threaded():
        with blas_single_threaded():          # nested: still one thread
            seen.append([lib.get_num_threads() for lib in libs])
        seen.append([lib.get_num_threads() for lib in libs])
    assert seen == [[1] * len(libs)] * 2
    assert [lib.get_num_threads() for lib in libs] == before
