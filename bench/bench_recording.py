"""Issue 2, item 9: microseconds per recorded op, and a cache-hit sync of a 1,000-op graph.

Targets: <= 3 us per recorded op; <= 2 ms per cache-hit sync, excluding the kernels.
NumPy runs the same 1,000 ops eagerly on the same small arrays, for scale.
"""
import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler.graph.trace import capture

N_OPS = 1000


def chain(x, y):
    """1,000 ops: add, multiply by a scalar, subtract, maximum — a typical elementwise mix."""
    z = x
    for i in range(N_OPS // 4):
        z = z + y
        z = z * 0.5
        z = z - x
        z = la.maximum(z, y) if isinstance(z, la.Tensor) else np.maximum(z, y)
    return z


@pytest.fixture
def small():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 8), dtype=np.float32), rng.standard_normal((8, 8), dtype=np.float32)


def test_record_1000_ops_lazyarray(benchmark, small):
    x, y = la.asarray(small[0]), la.asarray(small[1])
    benchmark.extra_info["ops"] = N_OPS
    benchmark(chain, x, y)


def test_1000_ops_numpy_eager(benchmark, small):
    benchmark.extra_info["ops"] = N_OPS
    benchmark(chain, *small)


def test_cache_hit_capture_and_lookup(benchmark, small):
    """The sync's own work on a hit: walk the graph, build the key, find the executable."""
    x, y = la.asarray(small[0]), la.asarray(small[1])
    z = chain(x, y)
    la.sync()                                   # compile once
    z = chain(x, y)
    state = runtime.get_device(None)

    def lookup():
        cap = capture([z._node])
        assert cap.key in state.executables
    benchmark.extra_info["ops"] = N_OPS
    benchmark(lookup)


def test_cache_hit_sync_end_to_end(benchmark, small):
    """Record nothing new: re-sync a fresh 1,000-op graph each round (kernels included)."""
    x, y = la.asarray(small[0]), la.asarray(small[1])
    chain(x, y).numpy()

    def setup():
        return (chain(x, y),), {}

    benchmark.extra_info["ops"] = N_OPS
    benchmark.pedantic(lambda z: z.numpy(), setup=setup, rounds=30)


# ---- issue 11 point 6: what recording costs in a training step ---------------------------
#
# lazyarray records the MLP step of bench_training.py (forward, the tape's gradient, the
# Adam update) and syncs every 20 steps outside the timing (`pedantic` setup), so the
# figure is host tracing alone. The peer's nearest equivalent: JAX tracing the same step
# to a jaxpr (`jax.make_jaxpr`, what jax.jit does before compiling it).

def _training_parts():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_training
    return bench_training


def test_record_training_step_lazyarray(benchmark):
    record = _training_parts().la_record_fn()
    for _ in range(3):
        record().item()                          # compiled once, then cache hits
    benchmark.group = "record one MLP training step (host tracing)"
    benchmark.extra_info["framework"] = "lazyarray"
    benchmark.pedantic(record, setup=lambda: la.sync(), rounds=40, warmup_rounds=2)
    la.sync()


def test_record_training_step_jax_make_jaxpr(benchmark):
    from peers import installed
    if not installed("jax"):
        pytest.skip("JAX is not installed")
    import jax
    import jax.numpy as jnp
    bt = _training_parts()
    _data, _weights = bt._data, bt._weights
    step = bt.jax_step_fn()

    params = [jnp.asarray(w) for w in _weights()]
    zeros = [jnp.zeros_like(p) for p in params]
    x, y = (jnp.asarray(a) for a in _data())
    trace = lambda: jax.make_jaxpr(step)(params, zeros, zeros, 1.0, x, y)
    trace()
    benchmark.group = "record one MLP training step (host tracing)"
    benchmark.extra_info["framework"] = "jax.make_jaxpr"
    benchmark(trace)


def test_record_scalar_chain_lazyarray(benchmark):
    """10 elementwise ops with Python scalars (bench_host's scalar chain) recorded, no sync
    in the timing: the recording share of that chain's cached sync."""
    x = la.asarray(np.random.default_rng(0).standard_normal(4096, dtype=np.float32))
    count = [0]

    def record():
        count[0] += 1
        if count[0] % 200 == 0:
            la.sync()
        y = x
        for k in range(5):
            y = y * 1.5 - 0.25 * k
        return y.sum()
    benchmark.group = "record 10 elementwise ops with Python scalars, and a sum"
    benchmark.extra_info["framework"] = "lazyarray"
    benchmark(record)
    la.sync()


# ---- issue 11 point 6: recording one op, every kind of elementwise op ---------------------
#
# bench_host.py times four ops; these are the rest a program records most: Python scalars
# on either side and of either kind, comparisons, powers, unary ops and the usual methods.
# lazyarray records (nothing runs; a sync every 1,000 ops keeps the pending list and the
# graph a program's size); NumPy and PyTorch run the op eagerly on 4,096 floats.

ONE_OP = {
    "x / 3": lambda x, i, m: x / 3, "x + 1": lambda x, i, m: x + 1,
    "3 * x": lambda x, i, m: 3 * x, "x ** 2": lambda x, i, m: x ** 2,
    "x > 0.5": lambda x, i, m: x > 0.5, "x < y": lambda x, i, m: x < i[0],
    "i * 2.5 (int tensor)": lambda x, i, m: i[1] * 2.5, "-x": lambda x, i, m: -x,
    "abs(x)": lambda x, i, m: abs(x), "x.sum()": lambda x, i, m: x.sum(),
    "x.mean()": lambda x, i, m: x.mean(), "m.sum(1)": lambda x, i, m: m.sum(1),
    "m.reshape(-1)": lambda x, i, m: m.reshape(-1),
}
# NumPy scalars on either side, the other kinds of op and the reductions' usual forms
ONE_OP.update({
    "x * np.float32(2.5)": lambda x, i, m: x * np.float32(2.5),
    "np.float64(2.5) - x": lambda x, i, m: np.float64(2.5) - x,
    "x * 2.5": lambda x, i, m: x * 2.5, "x == y": lambda x, i, m: x == i[0],
    "x ** 0.5": lambda x, i, m: x ** 0.5, "x * 2 + 1": lambda x, i, m: x * 2 + 1,
    "i / 2 (int tensor)": lambda x, i, m: i[1] / 2, "x.clip(0, 1)": lambda x, i, m: x.clip(0, 1),
    "x.max()": lambda x, i, m: x.max(), "x // 2": lambda x, i, m: x // 2,
})
# the forms bench/recording_sweep.py found above 3 us before they were recorded directly
# (the sweep times every public elementwise form; these are the ones with peers' spellings)
ONE_OP.update({
    "i / j (int tensors)": lambda x, i, m: i[1] / i[1], "i & 3": lambda x, i, m: i[1] & 3,
    "i >> 1": lambda x, i, m: i[1] >> 1, "~i": lambda x, i, m: ~i[1],
    "x.clip(-1.5, 2.5)": lambda x, i, m: x.clip(-1.5, 2.5),
})


@pytest.mark.parametrize("framework", ["lazyarray", "numpy", "torch"])
@pytest.mark.parametrize("op", list(ONE_OP))
def test_record_one_elementwise_op(benchmark, op: str, framework: str) -> None:
    from peers import FRAMEWORKS
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    rng = np.random.default_rng(0)
    x, y = (fw.put(rng.standard_normal(4096, dtype=np.float32)) for _ in range(2))
    ints = fw.put(np.arange(4096, dtype=np.int32))
    m = fw.put(rng.standard_normal((64, 64), dtype=np.float32))
    fn = ONE_OP[op]
    benchmark.group = f"record one op, {op}"
    benchmark.extra_info["framework"] = framework
    if framework != "lazyarray":
        benchmark(lambda: fn(x, (y, ints), m))
        return
    count = [0]

    def record():
        count[0] += 1
        if count[0] % 1000 == 0:
            la.sync()
        return fn(x, (y, ints), m)
    benchmark(record)
    la.sync()
