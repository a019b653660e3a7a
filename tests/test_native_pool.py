"""The native worker pool (devices/cpu/native_pool.py): every chunk of every task runs exactly
once, tasks see what the task before wrote, partials land per chunk, threads start
lazily and by name, tiny jobs stay on the caller's thread, the pool survives fork and
exit, and compiled programs give the interpreter's results on any thread count."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import llvmlite.ir as ir
import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.codegen import llvm_target
from lazyarray.compiler.codegen.loops import counted_loop
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.devices.cpu import native_gemm
from lazyarray.devices.cpu import native_pool as NP
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice
from lazyarray.devices.cpu.native_program import NativeProgram
from lazyarray.devices.cpu.object_code import LoadedCode
from lazyarray.devices.cpu.native_pool import split

I64 = ir.IntType(64)
PTR = ir.PointerType()


def _kernels() -> LoadedCode:
    """Test kernels with the CPU codegen's signature:
    inc(out, s, e): out[i] += 1;  rev(src, dst, n_ptr, s, e): dst[i] = src[n-1-i];
    chunk_sum(x, s, e, part): part[0] += sum(x[s:e])."""
    mod = ir.Module("pool_test_kernels")
    mod.triple = llvm_target.host()[0]

    def kernel(name: str, nbuf: int, nparts: int, body) -> None:
        f = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR] * nbuf + [I64, I64] + [PTR] * nparts), name)
        b = ir.IRBuilder(f.append_basic_block())
        bufs, (s, e), parts = f.args[:nbuf], f.args[nbuf:nbuf + 2], f.args[nbuf + 2:]
        body(b, bufs, s, e, parts)
        b.ret_void()

    def at(b, p, i):
        return b.gep(p, [i], source_etype=I64)

    def inc(b, bufs, s, e, parts):
        def step(i, _):
            p = at(b, bufs[0], i)
            b.store(b.add(b.load(p, typ=I64), ir.Constant(I64, 1)), p)
            return []
        counted_loop(b, s, e, [], step)

    def rev(b, bufs, s, e, parts):
        n = b.load(bufs[2], typ=I64)
        def step(i, _):
            j = b.sub(b.sub(n, ir.Constant(I64, 1)), i)
            b.store(b.load(at(b, bufs[0], j), typ=I64), at(b, bufs[1], i))
            return []
        counted_loop(b, s, e, [], step)

    def chunk_sum(b, bufs, s, e, parts):
        def step(i, acc):
            return [b.add(acc[0], b.load(at(b, bufs[0], i), typ=I64))]
        total, = counted_loop(b, s, e, [ir.Constant(I64, 0)], step)
        b.store(b.add(b.load(parts[0], typ=I64), total), parts[0])

    kernel("inc", 1, 0, inc)
    kernel("rev", 3, 0, rev)
    kernel("chunk_sum", 1, 1, chunk_sum)
    return LoadedCode(llvm_target.emit_object(llvm_target.optimize(str(mod), "t")))


KERNELS = _kernels()


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_every_chunk_of_every_task_runs_exactly_once(threads: int) -> None:
    n = 100_003
    out = np.zeros(n, np.int64)
    pool = NP.NativePool(threads)
    inc = KERNELS.address("inc")
    job = NP.Job([(inc, [0], [], [], split(n, 7)), (inc, [0], [], [], split(n, 64)),
                  (inc, [0], [], [], split(n, 1))], 1)
    job.table[0] = out.ctypes.data
    try:
        for _ in range(50):
            pool.run(job)
        np.testing.assert_array_equal(out, np.full(n, 150))
        assert pool.started == threads - 1
    finally:
        pool.close()
    assert pool.started == 0


def test_a_task_reads_what_the_task_before_it_wrote() -> None:
    n = 1 << 16
    src = np.zeros(n, np.int64)
    dst = np.zeros(n, np.int64)
    length = np.array([n], np.int64)
    pool = NP.NativePool(4)
    job = NP.Job([(KERNELS.address("inc"), [0], [], [], split(n, 16)),
                  (KERNELS.address("rev"), [0, 1, 2], [], [], split(n, 16))], 3)
    job.table[:] = (src.ctypes.data, dst.ctypes.data, length.ctypes.data)
    try:
        for k in range(1, 30):       # each run: src += 1 everywhere, then dst reversed src
            pool.run(job)
            assert (dst == k).all(), f"run {k}: a reversed read saw an unfinished chunk"
    finally:
        pool.close()


@pytest.mark.parametrize("shared", [False, True])
def test_partials_land_in_their_chunk_row(shared: bool) -> None:
    n, chunks = 10_000, 12
    x = np.arange(n, dtype=np.int64)
    ranges = split(n, chunks)
    part = np.zeros(1 if shared else chunks, np.int64)
    # a shared partial (stride 0) is read-modify-written by each chunk without atomics: the
    # code generator uses it only where the chunks run one after another (one chunk, or
    # one thread), so the shared case runs on one thread (on three it would race)
    pool = NP.NativePool(1 if shared else 3)
    job = NP.Job([(KERNELS.address("chunk_sum"), [0], [1], [0 if shared else 8], ranges)], 2)
    job.table[:] = (x.ctypes.data, part.ctypes.data)
    try:
        pool.run(job)
    finally:
        pool.close()
    if shared:
        assert part[0] == x.sum()
    else:
        np.testing.assert_array_equal(part, [x[s:e].sum() for s, e in ranges])


def test_threads_start_lazily_named_and_tiny_jobs_stay_on_the_caller() -> None:
    out = np.zeros(64, np.int64)
    pool = NP.NativePool(3)
    tiny = NP.Job([(KERNELS.address("inc"), [0], [], [], [(0, 64)]), ], 1)
    tiny.table[0] = out.ctypes.data
    pool.run(tiny)
    assert pool.started == 0 and pool.runs_shared == 0, "a one-chunk job woke the pool"
    big = NP.Job([(KERNELS.address("inc"), [0], [], [], split(64, 8))], 1)
    big.table[0] = out.ctypes.data
    try:
        pool.run(big)
        assert pool.started == 2 and pool.runs_shared == 1
        if sys.platform.startswith("linux"):
            names = [open(f"/proc/self/task/{t}/comm").read().strip()
                     for t in os.listdir("/proc/self/task")]
            assert "lazyarray-cpu1" in names and "lazyarray-cpu2" in names, names
    finally:
        pool.close()
    np.testing.assert_array_equal(out, 2)


def test_two_python_threads_share_a_pool_safely() -> None:
    n = 50_000
    pool = NP.NativePool(2)
    outs = [np.zeros(n, np.int64) for _ in range(4)]
    jobs = []
    for out in outs:
        job = NP.Job([(KERNELS.address("inc"), [0], [], [], split(n, 8))], 1)
        job.table[0] = out.ctypes.data
        jobs.append(job)

    def work(job) -> None:
        for _ in range(200):
            pool.run(job)

    threads = [threading.Thread(target=work, args=(j,)) for j in jobs]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        pool.close()
    for out in outs:
        np.testing.assert_array_equal(out, 200)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_gets_its_own_pool() -> None:
    n = 1 << 15
    inc = KERNELS.address("inc")
    parent_pool = NP.get_pool(3)
    out = np.zeros(n, np.int64)
    job = NP.Job([(inc, [0], [], [], split(n, 8))], 1)
    job.table[0] = out.ctypes.data
    parent_pool.run(job)
    assert parent_pool.started == 2
    pid = os.fork()
    if pid == 0:                             # the child: its parent's workers do not exist here
        code = 1
        try:
            # the same pool object (compiled programs hold theirs): it forgot its
            # parent's threads and starts its own
            child_pool = NP.get_pool(3)
            ok = child_pool is parent_pool and child_pool.started == 0
            for _ in range(10):
                child_pool.run(job)
            ok = ok and child_pool.started == 2 and (out == 11).all()
            NP.close_all()
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    parent_pool.run(job)                     # the parent's pool still works
    np.testing.assert_array_equal(out, 2)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_syncs_on_all_threads() -> None:
    """The device end to end: a program compiled and run in the parent runs again in a
    forked child (the same cached executable and pools) and gives the same result."""
    import lazyarray as la
    x = la.asarray(np.arange(1 << 18, dtype=np.float32))
    with la.config.override(num_threads=3):
        want = float((x * 2 + 1).sum())
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                got = float((x * 2 + 1).sum())
                code = 0 if got == want else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_exit_with_running_workers_is_clean() -> None:
    script = textwrap.dedent("""
        import numpy as np, lazyarray as la
        x = la.asarray(np.ones(1 << 20, np.float32))
        print(float((x * 2 + 1).sum()))
        from lazyarray.devices.cpu import native_pool
        assert any(p.started for p in native_pool._POOLS.values()), "no worker ran"
    """)
    env = dict(os.environ, LAZYARRAY_NUM_THREADS="4", LAZYARRAY_CACHE_DIR="off")
    for _ in range(3):
        r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert float(r.stdout) == 3 * (1 << 20)


# ---- compiled programs on the pool, against the interpreter ----------------------------

def _programs() -> dict:
    f32 = D.float32
    return {
        # mean(3 x^2 + y): one full-reduction partial step
        "full": (Module("full", [
            I("parameter", (), (1 << 17,), f32, {"number": 0}),
            I("parameter", (), (1 << 17,), f32, {"number": 1}),
            I("multiply", (0, 0), (1 << 17,), f32, {}),
            I("add", (2, 1), (1 << 17,), f32, {}),
            I("reduce", (3,), (), f32, {"axes": (0,), "kind": "sum"}),
        ], [4]), [(1 << 17,), (1 << 17,)]),
        # column sums (per-chunk partials) and an elementwise output read by nothing
        "columns": (Module("columns", [
            I("parameter", (), (512, 300), f32, {"number": 0}),
            I("exponential", (0,), (512, 300), f32, {}),
            I("reduce", (1,), (300,), f32, {"axes": (0,), "kind": "sum"}),
            I("reduce", (0,), (300,), f32, {"axes": (0,), "kind": "max"}),
            I("negate", (0,), (512, 300), f32, {}),
        ], [2, 3, 4]), [(512, 300)]),
        # a row reduction feeding an elementwise step (two steps, one after the other)
        "rows": (Module("rows", [
            I("parameter", (), (1024, 256), f32, {"number": 0}),
            I("reduce", (0,), (1024,), f32, {"axes": (1,), "kind": "max"}),
            I("broadcast_in_dim", (1,), (1024, 256), f32,
              {"shape": (1024, 256), "broadcast_dimensions": (0,)}),
            I("subtract", (0, 2), (1024, 256), f32, {}),
            I("exponential", (3,), (1024, 256), f32, {}),
        ], [4]), [(1024, 256)]),
        # a layer's forward (x @ w.T + b, relu) and a weight gradient (x.T @ g): products
        # as tasks of the program's job, between generated kernels
        "layer": (Module("layer", [
            I("parameter", (), (256, 200), f32, {"number": 0}),
            I("parameter", (), (128, 200), f32, {"number": 1}),
            I("parameter", (), (128,), f32, {"number": 2}),
            I("dot_general", (0, 1), (256, 128), f32, {"lhs_contracting": (1,), "rhs_contracting": (1,),
                                                       "lhs_batch": (), "rhs_batch": ()}),
            I("broadcast_in_dim", (2,), (256, 128), f32,
              {"shape": (256, 128), "broadcast_dimensions": (1,)}),
            I("add", (3, 4), (256, 128), f32, {}),
            I("negate", (5,), (256, 128), f32, {}),
            I("maximum", (5, 6), (256, 128), f32, {}),
            I("dot_general", (0, 7), (200, 128), f32, {"lhs_contracting": (0,), "rhs_contracting": (0,),
                                                       "lhs_batch": (), "rhs_batch": ()}),
        ], [7, 8]), [(256, 200), (128, 200), (128,)]),
    }


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize("name", list(_programs()))
def test_programs_match_the_interpreter(name: str, threads: int) -> None:
    if name == "layer" and not native_gemm.available():
        pytest.skip(reason="NumPy's BLAS is not its ILP64 OpenBLAS: products take the general path")
    module, shapes = _programs()[name]
    rng = np.random.default_rng(threads)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = InterpreterDevice().compile(module).run(args)
    exe = CPUDevice(lambda: {"cache_dir": "off", "num_threads": threads}).compile(module)
    atol = 2e-3 if name == "layer" else 1e-4    # sums of 200-256 products of order 1
    for _ in range(3):                       # runs reuse the planned buffers: same answers
        got = exe.run(args)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)
            assert not g.flags.writeable
    assert isinstance(exe._range_cache.get(("program", threads)), NativeProgram)


def test_general_path_and_native_program_agree_on_split_work() -> None:
    module, shapes = _programs()["columns"]
    args = [np.random.default_rng(5).standard_normal(s).astype(np.float32) for s in shapes]
    fast = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 4}).compile(module)
    slow = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 4, "debug": 2}).compile(module)
    assert any(len(fast._split(s, 4)) > 1 for s in fast.steps), "nothing was split"
    for a, b in zip(fast.run(args), slow.run(args)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    assert ("program", 4) not in slow._range_cache


# ---- matrix products as tiles on the pool ---------------------------------------------

@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt", "tt"])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_gemm_tiles_match_numpy(dtype, layout: str, threads: int) -> None:
    rng = np.random.default_rng(threads)
    m, k, n = 123, 77, 211
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    if layout[0] == "t":
        a = np.ascontiguousarray(a.T).T          # a transposed view, read by BLAS as is
    if layout[1] == "t":
        b = np.ascontiguousarray(b.T).T
    out = np.full((m, n), np.nan, dtype)
    assert native_gemm.matmul(a, b, out, threads)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol)


def test_gemm_grid_is_close_to_square_and_never_empty() -> None:
    assert native_gemm.grid(2048, 2048, 16) == (4, 4)
    assert native_gemm.grid(4096, 64, 4) == (4, 1)
    assert native_gemm.grid(2, 5000, 8) == (1, 8)
    # a transposed A costs more to pack: a weight gradient (g.T @ x) is split by rows,
    # so each tile packs only its share of it
    assert native_gemm.grid(512, 784, 2) == (1, 2)
    assert native_gemm.grid(512, 784, 2, native_gemm.TRANS_A_WEIGHT) == (2, 1)
    assert native_gemm.grid(10, 512, 2, native_gemm.TRANS_A_WEIGHT) == (1, 2)
    for m, n, t in [(1, 1, 16), (3, 7, 6), (100, 1, 4)]:
        pm, pn = native_gemm.grid(m, n, t)
        assert pm <= m and pn <= n


def _task_grid(m: int, n: int, k: int, trans_a: bool, threads: int) -> tuple:
    """(row blocks, column blocks) that native_gemm.task cuts C = A B into."""
    ir = native_gemm.IR
    pa = (ir.CBLAS_TRANS, m) if trans_a else (ir.CBLAS_NO_TRANS, k)
    _, desc, ranges = native_gemm.task(np.dtype(np.float32), m, n, k, pa, (ir.CBLAS_NO_TRANS, n),
                                       threads)
    return len(ranges) // int(desc[ir.GEMM_TILES_N]), int(desc[ir.GEMM_TILES_N])


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
def test_gemm_tiles_split_on_two_threads_by_the_tiles_packing() -> None:
    """Two tiles side by side split C by rows unless C is much wider than tall (by
    columns: the MLP step's forward products x @ W.T, whose 256x512 C makes a square tile
    that way), or A is much taller than B is wide: 2048^2, the weight gradients (A
    transposed), a narrow product."""
    for m, n, k, trans_a in [(2048, 2048, 2048, False), (512, 784, 256, True),
                             (512, 512, 256, True), (256, 10, 512, False), (256, 320, 512, False)]:
        assert _task_grid(m, n, k, trans_a, 2) == (2, 1), (m, n, k, trans_a)
    for m, n, k, trans_a in [(256, 512, 784, False), (256, 512, 512, False),
                             (10, 512, 256, True), (256, 1024, 256, True)]:
        assert _task_grid(m, n, k, trans_a, 2) == (1, 2), (m, n, k, trans_a)
    assert _task_grid(2, 5000, 64, False, 8) == (1, 8)
    assert _task_grid(2048, 2048, 2048, False, 16) == (4, 4)


def test_gemm_declines_what_it_does_not_cover() -> None:
    out = np.empty((4, 4), np.float16)
    assert not native_gemm.matmul(np.ones((4, 4), np.float16), np.ones((4, 4), np.float16), out, 2)
    strided = np.ones((8, 8), np.float32)[::2, ::2]
    assert not native_gemm.matmul(strided, strided, np.empty((4, 4), np.float32), 2)


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
def test_gemm_tasks_cover_c_with_no_empty_tile() -> None:
    # 11 rows in 5 blocks of 3 would leave an empty fifth block (a negative size to BLAS)
    for m, n, threads in [(11, 7, 5), (5, 300, 4), (3, 3, 2), (256, 10, 5)]:
        _, desc, ranges = native_gemm.task(np.dtype(np.float32), m, n, 8,
                                           (native_gemm.IR.CBLAS_NO_TRANS, 8),
                                           (native_gemm.IR.CBLAS_NO_TRANS, n), threads)
        bm, bn, per_row = (int(v) for v in desc[native_gemm.IR.GEMM_BM:native_gemm.IR.GEMM_TILES_N + 1])
        starts = [((t // per_row) * bm, (t % per_row) * bn) for t, _ in ranges]
        assert all(r < m and c < n for r, c in starts), (m, n, threads, starts)
        cells = sum(min(bm, m - r) * min(bn, n - c) for r, c in starts)
        assert cells == m * n
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((11, 40)), rng.standard_normal((40, 7))
    out = np.full((11, 7), np.nan)
    assert native_gemm.matmul(a, b, out, 5)
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
@pytest.mark.parametrize("m, k, n", [(256, 10, 512), (256, 512, 10), (10, 256, 512)])
def test_a_short_product_in_a_program_is_split_and_exact(m: int, k: int, n: int) -> None:
    """A training step's small products (a 10-wide layer: 1.3M multiply-adds, bound by C
    and packing rather than arithmetic) are split over the threads inside a program's
    job, and the tiles together give NumPy's product."""
    f32 = D.float32
    module = Module("short", [
        I("parameter", (), (m, k), f32, {"number": 0}),
        I("parameter", (), (k, n), f32, {"number": 1}),
        I("dot_general", (0, 1), (m, n), f32, {"lhs_contracting": (1,), "rhs_contracting": (0,),
                                                "lhs_batch": (), "rhs_batch": ()}),
        I("negate", (2,), (m, n), f32, {}),
    ], [3])
    rng = np.random.default_rng(11)
    args = [rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32)]
    exe = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2}).compile(module)
    (got,) = exe.run(args)
    prog = exe._range_cache[("program", 2)]
    tiles = [int(t[NP.IR.TASK_CHUNKS]) for job, _, _ in prog.segments
             for t in job._tasks.reshape(-1, NP.IR.TASK_WORDS)]
    assert tiles[0] == 2, tiles                    # the product's task: one tile per thread
    np.testing.assert_allclose(got, -(args[0].astype(np.float64) @ args[1]), rtol=1e-4, atol=1e-4)
    assert native_gemm.work(32, 32, 32) < native_gemm.SPLIT_WORK      # tiny: one tile


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
def test_a_program_keeps_its_gemm_descriptors_alive() -> None:
    """The job's table holds only the address of each product's descriptor: memory freed
    and reused after planning would hand BLAS garbage sizes."""
    import gc
    module, shapes = _programs()["layer"]
    rng = np.random.default_rng(9)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    want = InterpreterDevice().compile(module).run(args)
    exe = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2}).compile(module)
    exe.run(args)
    for _ in range(3):
        gc.collect()
        junk = [np.full(native_gemm.IR.GEMM_WORDS, -1, np.int64) for _ in range(20000)]
        for g, w in zip(exe.run(args), want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-3)
        del junk


def _train_mlp(steps: int, general: bool) -> tuple:
    """Losses and parameters of a few Adam steps of a small MLP; `general`: under a
    profile, which runs programs step by step (a stepwise plan, each step timed)."""
    import contextlib

    import lazyarray as la
    import lazyarray.nn.functional as F
    rng = np.random.default_rng(0)
    model = la.nn.Sequential(la.nn.Linear(96, 160), la.nn.ReLU(), la.nn.Linear(160, 10))
    model.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.1
                           for n, p in model.named_parameters()})
    opt = la.optim.Adam(model.parameters(), lr=1e-2)
    x = la.asarray(rng.standard_normal((200, 96)).astype(np.float32))
    y = la.asarray(rng.integers(0, 10, 200))
    losses = []
    with la.profiler.profile() if general else contextlib.nullcontext():
        for _ in range(steps):
            with la.GradientTape() as tape:
                loss = F.cross_entropy(model(x), y)
            opt.apply_gradients(tape.gradient(loss, model.parameters()))
            losses.append(loss.item())
    return losses, [p.numpy() for p in model.parameters()]


@pytest.mark.skipif(not native_gemm.available(), reason="NumPy's BLAS is not its ILP64 OpenBLAS")
def test_a_training_step_runs_natively_and_matches_the_general_path(monkeypatch) -> None:
    """Products, in-place parameter updates (donated buffers) and the Adam state all in
    one native job: the same losses and parameters as step by step."""
    from lazyarray.compiler import profile_hooks
    donated, stepwise = [], []
    real = NativeProgram.run

    def counting(self, args):
        donated.append(sum(1 for d, *_ in self._donated if d is not None))
        stepwise.append((self.stepwise, bool(profile_hooks.ACTIVE)))
        return real(self, args)
    monkeypatch.setattr(NativeProgram, "run", counting)
    native = _train_mlp(4, general=False)
    assert max(donated) >= 6, "the training step did not run natively with donated buffers"
    assert not any(s for s, _ in stepwise)
    stepwise.clear()
    general = _train_mlp(4, general=True)
    profiled = [s for s, active in stepwise if active]
    assert profiled and all(profiled)    # the training program ran step by step
    np.testing.assert_allclose(native[0], general[0], rtol=1e-5)
    for a, b in zip(native[1], general[1]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_tiny_program_runs_on_the_calling_thread() -> None:
    """No kernel is split finer than it pays: a 4,096-element sync wakes no worker, a
    large one starts them (a pool size no other test uses, so it starts fresh here)."""
    f32 = D.float32

    def module(n: int) -> Module:
        return Module("scaled_sum", [
            I("parameter", (), (n,), f32, {"number": 0}),
            I("multiply", (0, 0), (n,), f32, {}),
            I("reduce", (1,), (), f32, {"axes": (0,), "kind": "sum"}),
        ], [2])

    device = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 7})
    pool = NP.get_pool(7)
    small = np.ones(4096, np.float32)
    assert float(device.compile(module(4096)).run([small])[0]) == 4096
    assert pool.started == 0 and pool.runs_shared == 0
    big = np.ones(1 << 20, np.float32)
    assert float(device.compile(module(1 << 20)).run([big])[0]) == 1 << 20
    assert pool.started == 6 and pool.runs_shared == 1


# ---- tasks that go on without a barrier -------------------------------------------------

@pytest.mark.parametrize("threads", [2, 4])
def test_the_barrier_after_tasks_that_go_on_waits_for_all_of_them(threads: int) -> None:
    """A long task (64 chunks) marked to go on, a one-chunk task after it, then a task
    reading the long one's output: threads done with the short task must still wait for
    every chunk of the long one before the reader starts."""
    n = 1 << 20
    a = np.zeros(n, np.int64)
    b = np.zeros(4, np.int64)
    dst = np.zeros(n, np.int64)
    length = np.array([n], np.int64)
    inc, rev = KERNELS.address("inc"), KERNELS.address("rev")
    job = NP.Job([(inc, [0], [], [], split(n, 64)), (inc, [1], [], [], [(0, 4)]),
                  (rev, [0, 2, 3], [], [], split(n, 16))], 4, go_on=[0])
    job.table[:] = (a.ctypes.data, b.ctypes.data, dst.ctypes.data, length.ctypes.data)
    words = job._tasks.reshape(-1, NP.IR.TASK_WORDS)[:, NP.IR.TASK_GO_ON]
    assert list(words) == [1, 0, 0]
    pool = NP.NativePool(threads)
    try:
        for k in range(1, 40):
            pool.run(job)
            assert (b == k).all() and (a == k).all()
            assert (dst == k).all(), f"run {k}: the reader started before the long task ended"
    finally:
        pool.close()


def test_one_chunk_tasks_that_go_on_share_the_threads() -> None:
    """Two one-chunk tasks side by side make a parallel job (each may take a thread),
    and each still runs exactly once; the last task can never go on."""
    x, y = np.zeros(1000, np.int64), np.zeros(1000, np.int64)
    inc = KERNELS.address("inc")
    tasks = [(inc, [0], [], [], [(0, 1000)]), (inc, [1], [], [], [(0, 1000)])]
    assert not NP.Job(tasks, 2).parallel
    job = NP.Job(tasks, 2, go_on=[0])
    assert job.parallel
    job.table[:] = (x.ctypes.data, y.ctypes.data)
    pool = NP.NativePool(2)
    try:
        for _ in range(25):
            pool.run(job)
    finally:
        pool.close()
    assert (x == 25).all() and (y == 25).all()
    with pytest.raises(ValueError, match="go on"):
        NP.Job(tasks, 2, go_on=[1])


def test_a_programs_new_trampolines_are_built_together(monkeypatch) -> None:
    """Jobs made before any of them runs (a new program's) get their trampolines from one
    object built when the first job's address is read, not one object per signature; each
    job then runs its kernels as before."""
    c = NP.code()
    built: list = []
    real = NP.runtime_object
    monkeypatch.setattr(NP, "runtime_object", lambda *a: built.append(a) or real(*a))
    saved = dict(c._tramps)
    c._tramps.clear()                # as in a new process: no trampoline built yet
    try:
        n = 64
        out, src, dst, x = (np.zeros(n, np.int64), np.arange(n, dtype=np.int64),
                            np.zeros(n, np.int64), np.arange(n, dtype=np.int64))
        count, part = np.asarray([n], np.int64), np.zeros(1, np.int64)
        jobs = [NP.Job([(KERNELS.address("inc"), [0], [], [], split(n, 4))], 1),
                NP.Job([(KERNELS.address("rev"), [0, 1, 2], [], [], split(n, 4))], 3),
                NP.Job([(KERNELS.address("chunk_sum"), [0], [1], [0], [(0, n)])], 2)]
        assert built == []           # nothing built while jobs are made
        jobs[0].table[:] = (out.ctypes.data,)
        jobs[1].table[:] = (src.ctypes.data, dst.ctypes.data, count.ctypes.data)
        jobs[2].table[:] = (x.ctypes.data, part.ctypes.data)
        pool = NP.NativePool(2)
        try:
            for job in jobs:
                pool.run(job)
        finally:
            pool.close()
        assert built == [("trampolines", 1, 0, 0, 1, 1, 0, 3, 0, 0)]   # one object, sorted
        np.testing.assert_array_equal(out, np.ones(n, np.int64))
        np.testing.assert_array_equal(dst, src[::-1])
        assert part[0] == x.sum()
    finally:
        c._tramps.update(saved)


def test_prefetched_trampolines_are_taken_and_the_rest_built(monkeypatch):
    """Trampolines predicted for a program (native_pool.prefetch_trampolines) are built in
    one object on a thread of their own and loaded when a job first needs one of them; a
    key not predicted is built then as before, and one predicted but never needed costs
    only its build."""
    from lazyarray.devices.cpu import native_pool as P, runtime_objects as R
    code = P.code()
    built = []
    plain = R.runtime_code

    def counting(name, *shape, **how):
        built.append((name, shape))
        return plain(name, *shape, **how)
    monkeypatch.setattr(R, "runtime_code", counting)
    monkeypatch.setattr(R, "CACHE", [lambda: (None, ())])     # built, never read back
    predicted = [(29, 3, 1), (30, 0, 0)]           # signatures no other test uses
    P.prefetch_trampolines(predicted + [(29, 3, 1)])
    P.prefetch_trampolines(predicted)              # on the way already: nothing more
    first, other = code.trampolines([(29, 3, 1), (31, 0, 0)])
    assert first and other and first != other
    assert code.trampoline(30, 0, 0) not in (0, first, other)   # from the same object
    assert P._PREFETCHED == []
    assert [b[0] for b in built] == ["trampolines", "trampoline"]
    assert built[0][1] == (29, 3, 1, 30, 0, 0) and built[1][1] == (31, 0, 0)
