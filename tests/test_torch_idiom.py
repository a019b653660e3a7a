"""PyTorch's training idiom (requires_grad, backward, .grad, zero_grad/step, no_grad,
detach) over the same lazy graph as the tape: one compiled program per step."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F


def _data(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    x = la.asarray(rng.standard_normal((64, 16)).astype(np.float32))
    y = la.asarray(rng.integers(0, 4, 64))
    return x, y


def _model() -> la.nn.Module:
    return la.nn.Sequential(la.nn.Linear(16, 32), la.nn.BatchNorm1d(32), la.nn.ReLU(),
                            la.nn.Dropout(0.2), la.nn.Linear(32, 4))


def test_backward_step_compiles_once_over_20_steps(device, clean_metrics):
    la.manual_seed(0)
    model = _model()
    opt = la.optim.AdamW(model.parameters(), lr=0.05)
    crit = la.nn.CrossEntropyLoss()
    x, y = _data()
    la.sync()
    compiles, syncs = clean_metrics.cache_misses, clean_metrics.syncs
    params = model.parameters()
    losses = []
    for step in range(20):
        opt.lr = 0.05 * (1.0 - step / 20)
        opt.zero_grad()
        loss = crit(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert clean_metrics.cache_misses - compiles == 1, clean_metrics.recompiles
    assert clean_metrics.syncs - syncs == 20                    # one program per step
    assert model.parameters() == params and all(p.is_materialized for p in params)
    assert losses[-1] < 0.5 * losses[0], losses


def test_reading_the_loss_before_backward_keeps_the_graph(device, clean_metrics):
    """print(loss.item()) between the forward pass and backward(): the graph is kept."""
    la.manual_seed(1)
    model = la.nn.Linear(16, 4)
    opt = la.optim.SGD(model.parameters(), lr=0.1)
    x, y = _data(1)
    la.sync()
    losses = []
    for _ in range(6):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        losses.append(loss.item())                               # sync before backward
        loss.backward()
        assert model.weight.grad is not None
        opt.step()
    assert losses[-1] < losses[0]


def test_backward_matches_the_tape(device):
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((3, 2)).astype(np.float32)
    xs = rng.standard_normal((5, 3)).astype(np.float32)
    w = la.asarray(w0, requires_grad=True)
    loss = la.tanh(la.asarray(xs) @ w).sum()
    loss.backward()
    v = la.asarray(w0)
    with la.GradientTape() as tape:
        tape.watch(v)
        loss2 = la.tanh(la.asarray(xs) @ v).sum()
    np.testing.assert_allclose(w.grad.numpy(), tape.gradient(loss2, v).numpy(), rtol=1e-6)


def test_grad_accumulates_until_zero_grad(device):
    w = la.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    (w * 3).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [5, 5, 5])
    opt = la.optim.SGD([w], lr=1.0)
    opt.zero_grad()
    assert w.grad is None
    opt.step()                                        # no grad: nothing moves
    np.testing.assert_allclose(w.numpy(), [1, 1, 1])


def test_no_grad_and_detach_stop_gradients(device):
    w = la.asarray([1.0, 2.0], requires_grad=True)
    with la.no_grad():
        frozen = w * 3
    assert la.is_grad_enabled()
    ((w * frozen).sum()).backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 6.0])       # frozen is a constant
    w.grad = None
    (w * (w * 3).detach()).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 6.0])

    @la.no_grad()
    def evaluate(v):
        return v * v
    w.grad = None
    (w * evaluate(w)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 4.0])


def test_values_computed_under_no_grad_forget_their_graph_at_their_sync(device):
    """A loop under no_grad() (decoding from a model whose weights require grad) keeps no
    step's graph once the step is computed; a sync that also computes a value recorded
    with gradients on keeps the graphs, and its backward() is right."""
    w = la.asarray([1.0, 2.0], requires_grad=True)
    with la.no_grad():
        state = la.asarray([0.5, 0.25])
        for step in range(3):
            state = la.tanh(state * w + step)
            state.numpy()
            assert state._node.operands == ()          # computed, its graph let go
        np.testing.assert_allclose(state.numpy(), _tanh_steps([0.5, 0.25], [1.0, 2.0], 3))
        with la.enable_grad():
            loss = (w * w).sum()                        # recorded with gradients on
        frozen = w * 3
        frozen.numpy()                                  # one sync computes both
        assert loss._node.operands != ()
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
    np.testing.assert_allclose(frozen.numpy(), [3.0, 6.0])


def test_a_sync_under_no_grad_holds_nothing_for_backward(device):
    """A sync whose values were all recorded under no_grad() gives them their buffers and
    lets their graphs go at once: nothing is held for a backward() (no weak reference
    kept per computed node), even though the graph reaches a weight that requires grad."""
    from lazyarray import runtime
    w = la.asarray([1.0, 2.0], requires_grad=True)
    with la.no_grad():
        state = la.asarray([0.5, 0.25])
        state.numpy()
        held = len(runtime.HELD)
        for step in range(4):
            state = la.tanh(state * w + step)
            state.numpy()
            assert state._node.operands == ()
        assert len(runtime.HELD) == held
    np.testing.assert_allclose(state.numpy(), _tanh_steps([0.5, 0.25], [1.0, 2.0], 4),
                               rtol=1e-6)


def test_a_long_loop_under_no_grad_keeps_its_notes_bounded(device):
    """The tensors a no_grad() block records are noted as recorded; in a loop of many
    steps the dead ones' notes are dropped, and what the loop computes still forgets its
    graph at its sync."""
    import threading
    from lazyarray import runtime
    w = la.asarray([1.0, 2.0], requires_grad=True)
    with la.no_grad():
        state = la.asarray([0.5, 0.25])
        noted = runtime.NO_GRAD[threading.get_ident()]
        for step in range(6000):
            state = state * 0.5 + w
            if step % 1000 == 999:
                state.numpy()
                assert state._node.operands == ()
            assert len(noted) <= 2 * 4096 + 2
        assert len(noted.ids) == len(noted)
        state = state * 0.5 + w
        assert state._node.operands != ()
        state.numpy()
        assert state._node.operands == ()
    assert threading.get_ident() not in runtime.NO_GRAD


def _tanh_steps(s, w, n):
    s, w = np.asarray(s), np.asarray(w)
    for step in range(n):
        s = np.tanh(s * w + step)
    return s


def test_manual_update_under_no_grad_in_place(device):
    w = la.asarray([1.0, -1.0], requires_grad=True)
    for _ in range(3):
        loss = (w ** 2).sum()
        loss.backward()
        with la.no_grad():
            w -= 0.25 * w.grad
        w.grad = None
    np.testing.assert_allclose(w.numpy(), [0.125, -0.125])
    assert w.requires_grad


def test_backward_errors_are_clear(device):
    with pytest.raises(RuntimeError, match="does not depend on any tensor that requires grad"):
        la.asarray([1.0, 2.0]).sum().backward()
    w = la.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="shape"):
        (w * 2).backward()
    with pytest.raises(TypeError, match="floating-point"):
        la.asarray([1, 2]).requires_grad_()


def test_requires_grad_survives_pickling_and_repr(device):
    import pickle
    w = la.ones(2, requires_grad=True)
    assert "requires_grad=True" in repr(w)
    assert pickle.loads(pickle.dumps(w)).requires_grad


def _digits_example():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"
    spec = importlib.util.spec_from_file_location("train_digits", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(__import__("importlib").util.find_spec("sklearn") is None,
                    reason="scikit-learn (the `examples` extra) is not installed: the digits "
                           "data comes from it")
def test_digits_example_in_the_backward_style(clean_metrics, capsys):
    digits = _digits_example()
    la.manual_seed(0)
    make, settings = digits.MODELS["mlp"]
    result = digits.train(make(), digits.load_digits_split(), epochs=8, log=None,
                          style="backward", progress=True, **settings)
    assert result["accuracy"] >= 0.95, result
    assert result["compiles"] == 2, (result, clean_metrics.recompiles)   # step + evaluation
    assert "epoch 8/8" in capsys.readouterr().err                         # the progress bar


def test_progress_line_without_tqdm():
    import io
    digits = _digits_example()
    out = io.StringIO()
    bar = digits.Progress(4, "epoch 1/2", stream=out)
    bar.bar = None                                   # the built-in line, tqdm or not
    for _ in range(4):
        bar.update(loss=0.5)
    bar.close()
    assert "epoch 1/2 [" in out.getvalue() and "4/4  loss 0.5000" in out.getvalue()


def test_kept_graphs_stop_at_the_new_parameters(device):
    """A sync that keeps its graph for backward() still makes the parameters it computes
    leaves: the next step's walk (tape or backward) does not go into the last step."""
    model = la.nn.Linear(4, 2)
    opt = la.optim.SGD(model.parameters(), lr=0.1)
    x = la.ones((3, 4))
    for _ in range(2):
        with la.GradientTape() as tape:
            loss = model(x).sum()
        opt.apply_gradients(tape.gradient(loss, model.parameters()))
        loss.item()
        assert model.weight._node.operands == () and model.weight.is_materialized
    opt.zero_grad()
    loss = model(x).sum()
    loss.item()                                           # kept: backward comes next
    assert loss._node.operands != ()
    loss.backward()
    assert model.weight.grad is not None
