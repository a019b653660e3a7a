"""Steps end themselves: `optimizer.step()` (and `apply_gradients`) mark a step boundary,
as PyTorch/XLA's `optimizer_step` does, so a training loop that never reads a value (the
loss logged every N steps) runs one compiled program per step, the same each step, and no
graph spans two steps. The `max_graph_ops` cut stays as a safety net whose warning names
the boundary it expected."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray import runtime

K = 6


def _setup(opt_type=la.optim.Adam):
    la.random.seed(0)
    model = la.nn.Sequential(la.nn.Linear(8, 16), la.nn.ReLU(), la.nn.Linear(16, 3))
    opt = opt_type(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    data = [(la.asarray(rng.standard_normal((4, 8)).astype(np.float32)),
             la.asarray(rng.integers(0, 3, 4))) for _ in range(3)]
    return model, opt, data


def _train(style: str, read_each_step: bool, opt_type=la.optim.Adam):
    """K steps; the losses (read each step, or only at the end) and the parameters."""
    model, opt, data = _setup(opt_type)
    la.sync()
    la.debug.reset_metrics()
    losses = []
    for i in range(K):
        x, y = data[i % len(data)]
        if style == "backward":
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            with la.GradientTape() as tape:
                loss = F.cross_entropy(model(x), y)
            opt.apply_gradients(tape.gradient(loss, model.parameters()))
        losses.append(loss.item() if read_each_step else loss)
    metrics = la.debug.metrics()
    counts = (metrics.syncs, metrics.cache_misses, metrics.cache_hits,
              metrics.step_boundaries, metrics.graph_size_syncs)
    return [float(v) for v in losses], [p.numpy() for p in model.parameters()], counts


@pytest.mark.parametrize("opt_type", [la.optim.Adam, la.optim.SGD])
@pytest.mark.parametrize("style", ["backward", "tape"])
def test_a_loop_that_reads_nothing_runs_one_program_per_step(style, opt_type, device):
    runtime.clear_caches()
    losses, params, counts = _train(style, read_each_step=False, opt_type=opt_type)
    syncs, built, hits, boundaries, cuts = counts
    # one sync per step, of one program: built (or read from disk) once, then found in
    # memory every step
    assert (syncs, built, hits, boundaries, cuts) == (K, 1, K - 1, K, 0)
    read_losses, read_params, _ = _train(style, read_each_step=True, opt_type=opt_type)
    assert losses == read_losses                     # bit for bit
    for a, b in zip(params, read_params):
        np.testing.assert_array_equal(a, b)


def test_reading_the_loss_after_the_step_adds_no_program(device):
    """`loss.item()` after `step()` reads what the step's program computed."""
    _, _, (syncs, built, hits, _, _) = _train("backward", read_each_step=True)
    assert syncs == K and built + hits == K


def test_no_graph_spans_two_steps(device):
    model, opt, data = _setup()
    x, y = data[0]
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    assert loss.is_materialized and all(p.is_materialized for p in model.parameters())
    assert not [r for r in runtime.get_device(device).pending if r() is not None
                and r()._node.buffer is None]


def test_step_sync_off_leaves_steps_pending(device):
    """The switch back: steps stay pending until a value is read (one graph over them)."""
    with la.config.override(step_sync=False):
        model, opt, data = _setup()
        for x, y in data:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        assert not loss.is_materialized
        la.sync()


def test_the_step_program_updates_parameters_in_place():
    """The boundary comes after the update's frame is gone: the old parameters and
    moments are donated to the step's program (updated in place, no second copy)."""
    with la.config.override(device="cpu", donate=True):
        _train("backward", read_each_step=False)
        assert la.debug.metrics().donated_buffers >= (K - 1) * 4 * 3   # 4 tensors x 3


def test_the_safety_net_names_the_step_boundary(device):
    """A loop with no step boundary (no optimizer, no la.sync()) is still cut, and the
    warning says where a step should end."""
    runtime._WARNED_GRAPH.clear()
    x = la.asarray(np.float32(1.0))
    with la.config.override(max_graph_ops=40), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(100):
            x = x * 1.0 + 1.0
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1
    assert "step boundary" in messages[0] and "optimizer.step()" in messages[0] \
        and "la.sync()" in messages[0]
    assert x.item() == 101.0


def test_no_boundary_inside_a_recording_tape(device):
    """An update recorded while a (persistent) tape still records is part of the graph it
    may differentiate: no step ends there; it ends at the next boundary."""
    model, opt, data = _setup(la.optim.SGD)
    x, y = data[0]
    with la.GradientTape(persistent=True) as tape:
        loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, model.parameters()))
        assert not model[0].weight.is_materialized
    la.sync()
    assert model[0].weight.is_materialized
