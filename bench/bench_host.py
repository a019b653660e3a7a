"""The host's fixed costs (issue 11): what a sync, an op and a kernel dispatch cost apart
from the arithmetic, beside the peers in the same run.

    python -m pytest bench/bench_host.py --benchmark-only --benchmark-json=bench/results/host.json
    python bench/report.py bench/results/host.json

- dispatch: one parallel kernel (2 chunks of a tiny loop) through the native pool on 1,
  2 and all threads, and two chunks of Python work through the same pool
  (`run_python`: a host call's NumPy rows are split so);
- tiny sync: `float((x*2+1).sum())` over 4,096 floats, cached (recording, capture, cache
  lookup, run, result): lazyarray beside NumPy, PyTorch eager and a jax.jit call;
- scalar chain: 10 elementwise ops with Python scalars, then the sum, the same way;
- record one op: `x * y`, `x * 2.5`, `2.5 - x`, `exp(x)` recorded (lazyarray) beside the
  eager op of the others.
"""
from __future__ import annotations

import numpy as np
import pytest

from peers import FRAMEWORKS, namespace

N = 4096
THREADS = {"1 thread": 1, "2 threads": 2, "all threads": 0}


def tiny_sync(xp, x):
    return (x * 2 + 1).sum()


def scalar_chain(xp, x):
    y = x
    for k in range(5):
        y = y * 1.5 - 0.25 * k
    return y.sum()


def _scalar(framework: str, out) -> float:
    return float(out)


@pytest.mark.parametrize("framework", ["lazyarray", "numpy", "torch", "jax.jit"])
@pytest.mark.parametrize("workload", ["tiny sync", "scalar chain"])
def test_fixed_cost(benchmark, workload: str, framework: str) -> None:
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    fn = {"tiny sync": tiny_sync, "scalar chain": scalar_chain}[workload]
    xp = namespace(framework)
    data = np.random.default_rng(0).standard_normal(N, dtype=np.float32)
    x = fw.put(data)
    run = fw.compile(lambda a: fn(xp, a))
    np.testing.assert_allclose(float(run(x)), float(fn(np, data)), rtol=1e-3)
    benchmark.group = f"{workload} ({N} floats)"
    benchmark.extra_info.update(framework=framework)
    benchmark(lambda: float(run(x)))


RECORDED = {"x * y": lambda x, y: x * y, "x * 2.5": lambda x, y: x * 2.5,
            "2.5 - x": lambda x, y: 2.5 - x, "exp(x)": lambda x, y: x.exp()
            if hasattr(x, "exp") and not isinstance(x, np.ndarray) else np.exp(x),
            "x // 2": lambda x, y: x // 2, "x % y": lambda x, y: x % y}


@pytest.mark.parametrize("framework", ["lazyarray", "numpy", "torch"])
@pytest.mark.parametrize("op", list(RECORDED))
def test_record_one_op(benchmark, op: str, framework: str) -> None:
    """lazyarray records (nothing runs); the peers run the op eagerly. Tensor-tensor,
    with a Python scalar on either side, and a unary op."""
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    rng = np.random.default_rng(0)
    x, y = (fw.put(rng.standard_normal(N, dtype=np.float32)) for _ in range(2))
    fn = RECORDED[op]
    benchmark.group = f"record one op, {op}"
    benchmark.extra_info.update(framework=framework)
    if framework == "lazyarray":
        import lazyarray as la
        # a sync every 1,000 ops (as a loop reading a value would): the pending list and
        # the graph stay the size a program has, not the benchmark's whole run
        count = [0]

        def record():
            count[0] += 1
            if count[0] % 1000 == 0:
                la.sync()
            return fn(x, y)
        benchmark(record)
        la.sync()
    else:
        benchmark(lambda: fn(x, y))


def _dispatch_kernel():
    """A kernel of the codegen's signature that does almost nothing: f(out, start, end)."""
    import llvmlite.ir as ir
    from lazyarray.compiler.codegen import llvm_target
    i64, ptr = ir.IntType(64), ir.PointerType()
    mod = ir.Module("dispatch")
    mod.triple = llvm_target.host()[0]
    f = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, i64, i64]), "touch")
    b = ir.IRBuilder(f.append_basic_block())
    b.store(f.args[1], b.gep(f.args[0], [f.args[1]], source_etype=i64))
    b.ret_void()
    from lazyarray.devices.cpu.object_code import LoadedCode
    return LoadedCode(llvm_target.emit_object(llvm_target.optimize(str(mod), "d")))


@pytest.mark.parametrize("pool", ["lazyarray", "python chunks"])
@pytest.mark.parametrize("threads", list(THREADS))
def test_dispatch_one_parallel_kernel(benchmark, threads: str, pool: str) -> None:
    from lazyarray.devices.cpu import native_pool
    code = _dispatch_kernel()
    out = np.zeros(2, np.int64)
    n = THREADS[threads]
    p = native_pool.get_pool(n)
    if pool == "lazyarray":            # a kernel of generated code
        job = native_pool.Job([(code.address("touch"), [0], [], [], [(0, 1), (1, 2)])], 1)
        job.table[0] = out.ctypes.data
        run = lambda: p.run(job)
    else:                              # each chunk a call back into Python
        def touch(k, s, e):
            out[s] = s
        run = lambda: p.run_python(touch, [(0, 1), (1, 2)])
    run()
    benchmark.group = f"dispatch one kernel, {threads}"
    benchmark.extra_info.update(framework=pool)
    benchmark(run)
    np.testing.assert_array_equal(out, [0, 1])
