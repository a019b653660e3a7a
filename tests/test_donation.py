"""Donation: a sync may let its program overwrite the buffers of parameter leaves that
nothing but the graph still references (an optimizer's old parameters and state), never
one the user still holds, never while a tape records; a donated buffer raises when read;
results are the same with and without donation."""
from __future__ import annotations

import weakref

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray import runtime
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.graph.node import Node
from lazyarray.compiler.graph.trace import DonatedBuffer, capture
from lazyarray.compiler.primitives import linalg


@pytest.fixture
def cpu():
    la.sync()
    with la.config.override(device="cpu"):
        yield
    la.config.donate = True


def _train(donate: bool, steps: int = 4) -> tuple:
    la.config.donate = donate
    rng = np.random.default_rng(0)
    model = la.nn.Sequential(la.nn.Linear(64, 128), la.nn.ReLU(), la.nn.Linear(128, 8))
    model.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.1
                           for n, p in model.named_parameters()})
    opt = la.optim.Adam(model.parameters(), lr=1e-2)
    x = la.asarray(rng.standard_normal((32, 64)).astype(np.float32))
    y = la.asarray(rng.integers(0, 8, 32))
    before = la.debug.metrics().donated_buffers
    losses = []
    for _ in range(steps):
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, model.parameters()))
        losses.append(loss.item())
    params = [p.numpy() for p in model.parameters()]
    return losses, params, la.debug.metrics().donated_buffers - before


def test_training_donates_and_matches_no_donation(cpu) -> None:
    losses_d, params_d, donated = _train(True)
    losses_n, params_n, none = _train(False)
    assert donated >= 3 * 4 * 3          # parameters and both Adam states, most steps
    assert none == 0
    assert losses_d == losses_n
    for a, b in zip(params_d, params_n):
        np.testing.assert_array_equal(a, b)


def _adam_steps(model, opt, x, y, steps: int) -> list:
    losses = []
    for _ in range(steps):
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, model.parameters()))
        losses.append(loss.item())
    return losses


def _adam_model(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    # a weight of 128 KB (its memory recycled, tracked) and small ones (noted)
    model = la.nn.Sequential(la.nn.Linear(128, 256), la.nn.ReLU(), la.nn.Linear(256, 8))
    model.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.1
                           for n, p in model.named_parameters()})
    opt = la.optim.Adam(model.parameters(), lr=1e-2)
    x = la.asarray(rng.standard_normal((16, 128)).astype(np.float32))
    y = la.asarray(rng.integers(0, 8, 16))
    return model, opt, x, y


def _arrays(model, opt) -> list:
    """Every buffer array a step rebinds: the parameters' and Adam's state's."""
    out = [p._node.buffer for p in model.parameters()]
    for state in opt.state:
        out += [t._node.buffer for t in state.values()]
    return out


def test_an_in_place_update_hands_out_the_given_arrays_again(cpu, monkeypatch) -> None:
    """In the steady state of a training loop the program writes each donated parameter
    and state in place and hands the very array it was given out again as a new value
    (devices/cpu/native_program.py `_run_donating`): the step's arrays are one set of objects
    from step to step, and the values are those of the run without donation."""
    # the last layer's products (16x256x8) as library calls: as fused reductions
    # (linalg.SMALL_PRODUCT) fewer of the small arrays came back as the same objects
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)
    model, opt, x, y = _adam_model()
    losses = _adam_steps(model, opt, x, y, 3)
    # (weak references: holding an array would stop its donation)
    first = [weakref.ref(a) for a in _arrays(model, opt)]
    before = la.debug.metrics().donated_buffers
    losses += _adam_steps(model, opt, x, y, 3)
    assert la.debug.metrics().donated_buffers - before == 3 * len(first)
    later = {id(a) for a in _arrays(model, opt)}
    # the same objects, maybe moved between the tensors: the large weight and its state
    # (tracked memory) at least, and in all most of them (small ones too)
    same = [r() for r in first if r() is not None and id(r()) in later]
    assert sum(a.nbytes >= 1 << 16 for a in same) == 3
    assert len(same) >= len(first) // 2
    params = [p.numpy() for p in model.parameters()]
    la.config.donate = False
    model, opt, x, y = _adam_model()
    assert _adam_steps(model, opt, x, y, 6) == losses
    for a, b in zip(params, (p.numpy() for p in model.parameters())):
        np.testing.assert_array_equal(a, b)


def test_a_view_of_a_parameter_stops_its_in_place_reuse(cpu) -> None:
    """A view the user takes of a parameter between steps (of memory that is written in
    place at every step) keeps that value: the next step gives the parameter new memory,
    and the loop goes on with the values of a run without donation."""
    model, opt, x, y = _adam_model()
    losses = _adam_steps(model, opt, x, y, 3)
    weight = model.parameters()[0]
    held = np.asarray(weight)[:2]                # a view: another reader of the memory
    kept = held.copy()
    losses += _adam_steps(model, opt, x, y, 2)
    np.testing.assert_array_equal(held, kept)
    assert np.asarray(weight).__array_interface__["data"][0] != \
        held.__array_interface__["data"][0]
    del held
    losses += _adam_steps(model, opt, x, y, 2)
    params = [p.numpy() for p in model.parameters()]
    la.config.donate = False
    model, opt, x, y = _adam_model()
    assert _adam_steps(model, opt, x, y, 7) == losses
    for a, b in zip(params, (p.numpy() for p in model.parameters())):
        np.testing.assert_array_equal(a, b)


def test_a_value_the_user_still_holds_is_never_donated(cpu) -> None:
    t = la.asarray(np.arange(1 << 15, dtype=np.float32))
    keep = t                              # a second name: the same tensor
    old = t._node
    runtime.offer_donation(old)
    t = t * 2 + 1                         # rebinding alone: `keep` still holds the old node
    t.numpy()
    assert old.buffer is not None and not isinstance(old.buffer, DonatedBuffer)
    np.testing.assert_array_equal(keep.numpy(), np.arange(1 << 15, dtype=np.float32))


def test_a_buffer_the_user_viewed_is_never_donated(cpu) -> None:
    w = la.asarray(np.ones((256, 256), np.float32))
    w._assign((w * 3)._node)
    w.numpy()                             # w now holds a program output
    view = np.asarray(w)[:2]              # the user reads the buffer without a copy
    runtime.offer_donation(w._node)
    w._assign((w + 1)._node)
    w.numpy()
    np.testing.assert_array_equal(view, np.full((2, 256), 3, np.float32))


def _address(t) -> int:
    return np.asarray(t).__array_interface__["data"][0]


def test_a_small_output_is_updated_in_place_unless_viewed(cpu) -> None:
    """A small output (its memory not recycled, so not tracked) is claimed by its own
    raw memory's count: an update overwrites it in place, and a view the user holds keeps
    it (and its value)."""
    w = la.asarray(np.ones(64, np.float32))
    for step in range(4):
        runtime.offer_donation(w._node)
        before = _address(w) if step else None
        w._assign((w * 2)._node)
        w.numpy()
        if step >= 2:                     # (an output from the second step on)
            assert _address(w) == before
    np.testing.assert_array_equal(w.numpy(), np.full(64, 16, np.float32))
    view = np.asarray(w)[:2]
    runtime.offer_donation(w._node)
    w._assign((w + 1)._node)
    w.numpy()
    np.testing.assert_array_equal(view, np.full(2, 16, np.float32))
    assert _address(w) != view.__array_interface__["data"][0]


def test_a_shared_small_array_is_never_written(cpu) -> None:
    """`asarray` shares a small array's memory: offered and held by nothing else, it
    is still never written (only raw memory of lazyarray's own outputs is claimed): the
    update's result lands in memory of its own."""
    owner = np.empty(256, np.uint8)                          # raw bytes, as outputs have
    owner.view(np.float32)[:] = np.arange(64, dtype=np.float32)
    shared = owner.__array_interface__["data"][0]
    w = la.asarray(owner.view(np.float32))
    del owner                                                # (the buffer holds it alone)
    runtime.offer_donation(w._node)
    w._assign((w * 2)._node)
    np.testing.assert_array_equal(w.numpy(), 2 * np.arange(64, dtype=np.float32))
    assert _address(w) != shared      # (the shared memory lived until the run had ended)


def test_donated_buffer_read_raises(cpu) -> None:
    p = la.asarray(np.ones((128, 128), np.float32))
    p.numpy()
    old = p._node
    runtime.offer_donation(old)
    p._assign((p - 0.5)._node)
    cap = capture([p._node], donate=runtime.OFFERED)
    assert cap.donated == frozenset()     # `old` is referenced here: not donatable
    del cap
    ref_count_free = la.debug.metrics().donated_buffers
    import weakref
    w = weakref.ref(old)
    del old
    p.numpy()
    assert la.debug.metrics().donated_buffers == ref_count_free + 1
    assert w() is None                    # nothing could read it: it is gone
    gone = Node("parameter", (), (2,), D.float32, {}, buffer=DonatedBuffer((2,), D.float32))
    t = la.Tensor._wrap(gone, runtime.get_device("cpu"))
    with pytest.raises(RuntimeError, match="donated"):
        t.numpy()
    with pytest.raises(RuntimeError, match="donated"):
        (t + 1).numpy()
    np.testing.assert_array_equal(p.numpy(), np.full((128, 128), 0.5, np.float32))


def test_no_donation_while_a_tape_records(cpu) -> None:
    w = la.asarray(np.ones((64, 64), np.float32))
    before = la.debug.metrics().donated_buffers
    with la.GradientTape() as tape:
        tape.watch(w)
        runtime.offer_donation(w._node)
        w._assign((w * 2)._node)
        w.numpy()
    assert la.debug.metrics().donated_buffers == before


def test_capture_key_includes_the_donation_set() -> None:
    import weakref
    offered = weakref.WeakSet()

    def graph(hold: bool, offer: bool = True):
        a = Node("parameter", (), (3,), D.float32, {}, buffer=np.zeros(3, np.float32))
        if offer:
            offered.add(a)
        u = Node("negative", (a,), (3,), D.float32, {})
        return u, (a if hold else None)
    u, held = graph(False)
    free = capture([u], donate=offered)
    u2, held2 = graph(True)
    kept = capture([u2], donate=offered)
    u3, _ = graph(False, offer=False)
    assert free.donated == {0} and kept.donated == frozenset()
    assert capture([u3], donate=offered).donated == frozenset()     # never offered
    assert free.key != kept.key
    assert capture([u2]).key == kept.key


# ---- in place: the update kernel overwrites the donated parameter it reads -----------------

def _mlp_peak(donate: bool) -> tuple:
    """(largest peak_bytes of the compiled training steps, bytes of parameters + Adam
    state, final parameters) for a few Adam steps of a 256-512-512-10 MLP."""
    la.config.donate = donate
    runtime.clear_caches()
    la.debug.reset_metrics()
    rng = np.random.default_rng(1)
    model = la.nn.Sequential(la.nn.Linear(256, 512), la.nn.ReLU(), la.nn.Linear(512, 512),
                             la.nn.ReLU(), la.nn.Linear(512, 10))
    model.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.05
                           for n, p in model.named_parameters()})
    opt = la.optim.Adam(model.parameters(), lr=1e-3)
    x = la.asarray(rng.standard_normal((64, 256)).astype(np.float32))
    y = la.asarray(rng.integers(0, 10, 64))
    for _ in range(3):
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, model.parameters()))
        loss.item()
    params = [p.numpy() for p in model.parameters()]
    state = 3 * sum(p.nbytes for p in params)
    return max(la.debug.metrics().peak_bytes.values()), state, params


def test_in_place_updates_lower_the_training_peak(cpu) -> None:
    peak_d, state, params_d = _mlp_peak(True)
    peak_n, _, params_n = _mlp_peak(False)
    # without in-place updates each update kernel holds the old and new values of a
    # weight and its two Adam moments at once; with them the peak moves to the backward
    # pass (activations, materialized weight transposes): 9.12 -> 7.48 MB here
    assert peak_d <= peak_n - 512 * 512 * 4, (peak_d, peak_n, state)
    assert peak_d < 0.9 * peak_n, (peak_d, peak_n, state)
    for a, b in zip(params_d, params_n):
        np.testing.assert_array_equal(a, b)


def _random_update(rng: np.random.Generator, leaves: list) -> tuple:
    """Elementwise outputs that read the leaves several times, through converts, selects
    and comparisons: the shape of an optimizer update, at random."""
    def expr(depth: int):
        if depth == 0 or rng.random() < 0.2:
            return leaves[rng.integers(len(leaves))]
        a, b = expr(depth - 1), expr(depth - 1)
        pick = rng.integers(8)
        if pick == 0:
            return a * b + 0.5
        if pick == 1:
            return a - 0.25 * b
        if pick == 2:
            return la.where(a > b, a, b * 2.0)
        if pick == 3:
            return (a.astype(la.float16) + b.astype(la.float16)).astype(la.float32)
        if pick == 4:
            return la.sqrt(la.abs(a) + 1.0) * b
        if pick == 5:
            return a.astype(la.float64) * 0.5 - b
        if pick == 6:
            return la.maximum(a, b) / (la.abs(b) + 1.0)
        return (a.astype(la.int32) + 1).astype(la.float32) * b
    return tuple(expr(3).astype(la.float32) for _ in range(int(rng.integers(1, 4))))


def _compile_module(outs: tuple):
    cap = capture([t._node for t in outs])
    return cap.module(), [np.asarray(a) for a in cap.args]


def test_in_place_never_changes_results_on_random_update_graphs() -> None:
    from lazyarray.devices.cpu.cpu import CPUDevice
    from lazyarray.devices.interpreter import InterpreterDevice
    device = CPUDevice(lambda: {"cache_dir": "off"})
    aliased = 0
    for seed in range(12):
        rng = np.random.default_rng(seed)
        arrays = [rng.standard_normal((37, 129)).astype(np.float32) for _ in range(3)]
        leaves = [la.asarray(a) for a in arrays]
        module, args = _compile_module(_random_update(rng, leaves))
        numbers = frozenset(range(len(args)))
        want = InterpreterDevice().compile(module).run(args)
        plain = device.compile(module).run([a.copy() for a in args])
        exe = device.compile(module, donated=numbers)
        aliased += len(exe._aliases)
        given = [a.copy() for a in args]              # owned: the program takes them over
        got = exe.run(given)
        views = [np.concatenate([a.ravel(), a.ravel()])[:a.size].reshape(a.shape) for a in args]
        kept = [v.copy() for v in views]
        got_views = exe.run(views)                    # views: not taken, copied in place
        for g, v, p, w in zip(got, got_views, plain, want):
            np.testing.assert_array_equal(g, p, err_msg=f"seed {seed}")
            np.testing.assert_array_equal(v, p, err_msg=f"seed {seed}")
            np.testing.assert_allclose(g, w, rtol=2e-6, atol=1e-6, err_msg=f"seed {seed}")
        for v, k in zip(views, kept):
            np.testing.assert_array_equal(v, k)       # a buffer not taken over is untouched
    assert aliased >= 6                                # in-place pairs were exercised


def test_index_moving_reads_stay_right_with_every_input_donated() -> None:
    from lazyarray.devices.cpu.cpu import CPUDevice
    from lazyarray.devices.interpreter import InterpreterDevice
    device = CPUDevice(lambda: {"cache_dir": "off"})
    rng = np.random.default_rng(5)
    w, g = (la.asarray(rng.standard_normal((48, 48)).astype(np.float32)) for _ in range(2))
    cases = [lambda: (w - la.transpose(w) * g,),
             lambda: (w + la.flip(w, axis=1) * g, g * 0.5),
             lambda: (w * la.sum(w, axis=0) + g, la.transpose(g) - w)]
    for make in cases:
        module, args = _compile_module(make())
        want = InterpreterDevice().compile(module).run(args)
        got = device.compile(module, donated=frozenset(range(len(args)))).run(
            [a.copy() for a in args])
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-5)


def _step_with_failing_op(fail_at: int) -> tuple:
    """Three SGD steps (backward() style) where step `fail_at` also records an op that
    fails at run time (inv of a singular matrix) in the same sync as the update."""
    rng = np.random.default_rng(1)
    net = la.nn.Linear(4, 2)
    net.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32)
                         for n, p in net.named_parameters()})
    opt = la.optim.SGD(net.parameters(), lr=0.1)
    x = la.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    before = la.debug.metrics().donated_buffers
    losses, errors = [], []
    for step in range(3):
        loss = (net(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        line = _here() + 1
        bad = la.linalg.inv(la.zeros((2, 2))) if step == fail_at else None
        losses.append(loss.item())           # the sync that runs the failing program
        if bad is not None:
            with pytest.raises(np.linalg.LinAlgError, match="singular") as info:
                bad.numpy()
            errors.append((str(info.value), line))
    params = [p.numpy().copy() for p in net.parameters()]
    return losses, params, errors, la.debug.metrics().donated_buffers - before


def _here() -> int:
    import sys
    return sys._getframe(1).f_lineno


def test_a_failing_op_in_a_donating_step_loses_no_parameter(cpu) -> None:
    """A program that donates the old parameters and also fails (a singular matrix) leaves
    every tensor as it was: training goes on exactly as without the failing op, and the
    error names the op and the user's line."""
    la.config.donate = True
    plain = _step_with_failing_op(-1)
    failing = _step_with_failing_op(1)
    assert plain[3] > 0                       # the steps donate their old parameters
    assert failing[0] == plain[0]
    for a, b in zip(failing[1], plain[1]):
        np.testing.assert_array_equal(a, b)
    [(message, line)] = failing[2]
    assert "singular" in message and f"test_donation.py:{line}" in message
