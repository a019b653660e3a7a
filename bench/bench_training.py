"""Issue 4, item 9: one MLP training step (784-512-512-10, batch 256, Adam, softmax
cross-entropy) by lazyarray and, in the same run, PyTorch eager, torch.compile and jax.jit
(each skipped when not installed). The first step (trace + compile) is measured apart from
the steady state; a peer's first call likewise; lazyarray's run (the sync of a recorded
step) is also timed alone; and all of them in turn, round by round (`test_interleaved`:
the ratio that a shared machine's drift does not bias). Beside it, the step's matrix products one at a time
(forward, weight gradient, input gradient: transposed operands as the step has them;
the large ones and the 10-wide layer's) by each framework and NumPy.

    python -m pytest bench/bench_training.py --benchmark-only
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from peers import FRAMEWORKS, installed, namespace

SIZES = (784, 512, 512, 10)
BATCH = 256
LR = 1e-3


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    return x, y


def _weights():
    """PyTorch-style uniform init, the same arrays for every framework."""
    rng = np.random.default_rng(1)
    out = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1 / np.sqrt(fan_in)
        out.append(rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32))
        out.append(rng.uniform(-bound, bound, (fan_out,)).astype(np.float32))
    return out


def _record(benchmark, framework, first_s):
    benchmark.group = "mlp training step"
    benchmark.extra_info.update(framework=framework, first_step_s=first_s)


# ---- lazyarray --------------------------------------------------------------------------

def la_record_fn():
    """One lazyarray MLP training step, recorded but not synced: returns the loss tensor
    (bench_recording times this recording alone)."""
    import lazyarray as la
    import lazyarray.nn.functional as F
    model = la.nn.Sequential(la.nn.Linear(784, 512), la.nn.ReLU(), la.nn.Linear(512, 512),
                             la.nn.ReLU(), la.nn.Linear(512, 10))
    model.load_state_dict({n: w for (n, _), w in zip(model.named_parameters(), _weights())})
    opt = la.optim.Adam(model.parameters(), lr=LR)
    x, y = (la.asarray(a) for a in _data())
    params = model.parameters()

    def record():
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        return loss
    return record


def _la_step_fn():
    record = la_record_fn()

    def step():
        return record().item()
    return step


def test_lazyarray(benchmark):
    import lazyarray as la
    from lazyarray import runtime
    runtime.clear_caches()
    step = _la_step_fn()
    la.sync()
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    before = la.debug.metrics().cache_misses
    _record(benchmark, "lazyarray", first)
    benchmark(step)
    assert la.debug.metrics().cache_misses == before        # every timed step was a cache hit


def test_lazyarray_run(benchmark):
    """The step's run alone: each round records a step untimed, then times the sync that
    runs it (the native program: products, fused kernels and the Adam update), so the
    cost of recording (bench_recording.py) is apart from the cost of running."""
    import lazyarray as la
    record = la_record_fn()
    for _ in range(2):                  # compiled here (the first step's program differs:
        record().item()                 # its parameters were pending), hits from now on
    before = la.debug.metrics().cache_misses
    benchmark.group = "mlp training step"
    benchmark.extra_info.update(framework="lazyarray (run only)")
    held = []                           # the loss stays live, as in a step that reads it

    def setup():
        held[:] = [record()]
    benchmark.pedantic(la.sync, setup=setup, rounds=200, warmup_rounds=5)
    assert la.debug.metrics().cache_misses == before


# ---- PyTorch ----------------------------------------------------------------------------

def _torch_step_fn(compiled: bool):
    import torch
    torch.set_grad_enabled(True)
    model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10))
    with torch.no_grad():
        for p, w in zip(model.parameters(), _weights()):
            p.copy_(torch.from_numpy(w))
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = _data()
    x, y = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return torch.compile(step) if compiled else step


@pytest.mark.parametrize("compiled", [False, True], ids=["torch", "torch.compile"])
def test_torch(benchmark, compiled):
    if not installed("torch"):
        pytest.skip("PyTorch is not installed")
    step = _torch_step_fn(compiled)
    t0 = time.perf_counter()
    step()
    _record(benchmark, "torch.compile" if compiled else "torch", time.perf_counter() - t0)
    benchmark(step)


# ---- JAX --------------------------------------------------------------------------------

def jax_step_fn():
    """The MLP step in JAX, not jitted: (params, m, v, t, x, y) -> (params, m, v, loss).
    bench_recording traces this same function."""
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, y):
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i].T + params[i + 1]
            if i + 2 < len(params):
                h = jax.nn.relu(h)
        logp = jax.nn.log_softmax(h)
        return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

    def step(params, m, v, t, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        b1, b2, eps = 0.9, 0.999, 1e-8
        m = [b1 * mi + (1 - b1) * g for mi, g in zip(m, grads)]
        v = [b2 * vi + (1 - b2) * g * g for vi, g in zip(v, grads)]
        scale = LR * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        params = [p - scale * mi / (jnp.sqrt(vi) + eps) for p, mi, vi in zip(params, m, v)]
        return params, m, v, loss
    return step


def _jax_run_fn():
    """One jitted JAX step over its own state (parameters, Adam's moments, the step count),
    returning the loss as a Python float."""
    import jax
    import jax.numpy as jnp

    step = jax.jit(jax_step_fn())
    params = [jnp.asarray(w) for w in _weights()]
    state = {"p": params, "m": [jnp.zeros_like(p) for p in params],
             "v": [jnp.zeros_like(p) for p in params], "t": 0}
    x, y = (jnp.asarray(a) for a in _data())

    def run():
        state["t"] += 1
        state["p"], state["m"], state["v"], loss = step(state["p"], state["m"], state["v"],
                                                        float(state["t"]), x, y)
        return float(loss)
    return run


def test_jax_jit(benchmark):
    if not installed("jax"):
        pytest.skip("JAX is not installed")
    run = _jax_run_fn()
    t0 = time.perf_counter()
    run()
    _record(benchmark, "jax.jit", time.perf_counter() - t0)
    benchmark(run)


# ---- all of them in turn ----------------------------------------------------------------

INTERLEAVED_ROUNDS = 40     # rounds of: each framework one untimed step, then TIMED_PER_ROUND
TIMED_PER_ROUND = 5


def test_interleaved(benchmark):
    """The step by lazyarray and each installed peer in turn, round by round (the order
    rotated each round), so that the shared machine's drift (other programs taking a core,
    the clock) falls on all alike: the step's ratio varied by ~15% from run to run when
    each framework was timed in its own stretch. Medians go to `extra_info["interleaved"]`
    (report.py's interleaved table); the benchmark's own figure is the whole measurement."""
    from bench_fused import interleaved_rounds
    import lazyarray as la

    calls = {"lazyarray": _la_step_fn()}
    if installed("jax"):
        calls["jax.jit"] = _jax_run_fn()
    if installed("torch"):
        calls["torch"] = _torch_step_fn(False)
        calls["torch.compile"] = _torch_step_fn(True)
    if len(calls) < 2:
        pytest.skip("no peer (torch, jax) is installed")
    for call in calls.values():      # compiled (traced, jitted) before the rounds
        call()
        call()
    before = la.debug.metrics().cache_misses
    times: dict = {}
    benchmark.group = "mlp training step (interleaved)"
    benchmark.pedantic(lambda: times.update(interleaved_rounds(
        calls, INTERLEAVED_ROUNDS, TIMED_PER_ROUND)), rounds=1, iterations=1)
    benchmark.extra_info.update(
        interleaved={name: statistics.median(ts) for name, ts in times.items()},
        rounds=INTERLEAVED_ROUNDS)
    assert la.debug.metrics().cache_misses == before        # every lazyarray step a cache hit


# ---- the step's matrix products, one at a time -----------------------------------------

def _layer_products() -> dict:
    """name -> (function of (xp, a, b), operand shapes): a Linear layer's forward
    (x @ W.T), its weight gradient (g.T @ x) and its input gradient (g @ W)."""
    b, i, o, last = BATCH, SIZES[0], SIZES[1], SIZES[-1]
    return {
        f"mlp forward {b}x{i} @ ({o}x{i}).T": (lambda xp, x, w: x @ w.T, ((b, i), (o, i))),
        f"mlp weight grad ({b}x{o}).T @ {b}x{i}": (lambda xp, g, x: g.T @ x, ((b, o), (b, i))),
        f"mlp input grad {b}x{o} @ {o}x{o}": (lambda xp, g, w: g @ w, ((b, o), (o, o))),
        # the hidden layer's forward product and weight gradient (in the step the weight
        # gradient runs beside the input gradient above, each whole on a thread)
        f"mlp forward {b}x{o} @ ({o}x{o}).T": (lambda xp, h, w: h @ w.T, ((b, o), (o, o))),
        f"mlp weight grad ({b}x{o}).T @ {b}x{o}": (lambda xp, g, h: g.T @ h, ((b, o), (b, o))),
        # the 10-wide output layer's gradients: short products (lazyarray computes them
        # with code of its own, not BLAS: native_gemm.direct)
        f"mlp input grad {b}x{last} @ {last}x{o}": (lambda xp, g, w: g @ w, ((b, last), (last, o))),
        f"mlp weight grad ({b}x{last}).T @ {b}x{o}": (lambda xp, g, h: g.T @ h,
                                                      ((b, last), (b, o))),
        # and its forward product (lazyarray: dot products of rows, native_gemm.dots)
        f"mlp forward {b}x{o} @ ({last}x{o}).T": (lambda xp, h, w: h @ w.T, ((b, o), (last, o))),
    }


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
@pytest.mark.parametrize("product", list(_layer_products()))
def test_layer_product(benchmark, product, framework):
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    fn, shapes = _layer_products()[product]
    rng = np.random.default_rng(2)
    host = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
    xp = namespace(framework)
    args = [fw.put(a) for a in host]
    run = fw.compile(lambda *a: fn(xp, *a))
    got = np.asarray(fw.finish(run(*args)))
    np.testing.assert_allclose(got, fn(np, *[a.astype(np.float64) for a in host]),
                               rtol=1e-3, atol=1e-3)
    benchmark.group = product
    benchmark.extra_info.update(framework=framework)
    benchmark(lambda: fw.finish(run(*args)))
