"""Recording a training step through the fast paths (remembered backward passes, remembered
losses, Adam's scalars taken back from the last step) gives the program of the general
path: the same compiled program (a cache hit on the general path's executable, so the
same structure), and the same numbers bit for bit, step after step.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.transforms import graph_templates, walk_templates
from lazyarray.optim import optimizer


def _general(on: bool) -> None:
    """Every fast path of recording a step off (on=True) or back on."""
    walk_templates.ENABLED[0] = not on
    graph_templates.ENABLED[0] = not on
    optimizer.REUSE_LAST_STEP[0] = not on
    optimizer.STEP_TEMPLATES[0] = not on


@pytest.fixture(autouse=True)
def restore():
    yield
    _general(False)


def _setup(seed=0, **adam):
    rng = np.random.default_rng(seed)
    model = la.nn.Sequential(la.nn.Linear(12, 16), la.nn.ReLU(), la.nn.Linear(16, 16),
                             la.nn.ReLU(), la.nn.Linear(16, 5))
    weights = {n: rng.uniform(-0.3, 0.3, p.shape).astype(np.float32)
               for n, p in model.named_parameters()}
    model.load_state_dict(weights)
    opt = la.optim.Adam(model.parameters(), lr=1e-2, **adam)
    x = la.asarray(rng.standard_normal((32, 12)).astype(np.float32))
    y = la.asarray(rng.integers(0, 5, 32))
    return model, opt, x, y


def _steps(n, sync_every=1, change=None, **adam):
    model, opt, x, y = _setup(**adam)
    params = model.parameters()
    losses = []
    for i in range(n):
        if change:
            change(opt, i)
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        losses.append(loss)
        if (i + 1) % sync_every == 0:
            la.sync()
    la.sync()
    return [l.numpy() for l in losses], [p.numpy() for p in params] + \
        [t.numpy() for s in opt.state for t in s.values()]


def _compare(n=6, **kw):
    # earlier tests' pending work (the random generator's state) must not join the first
    # run's programs: the two runs below must sync the same graphs
    la.sync()
    _setup()
    la.sync()
    _general(True)
    want = _steps(n, **kw)
    misses = la.debug.metrics().cache_misses
    _general(False)
    got = _steps(n, **kw)
    # every program of the fast paths was the general path's, already in memory (a
    # structure of its own would miss there, even if the disk cache then had it)
    assert la.debug.metrics().cache_misses == misses
    for a, b in zip(got[0] + got[1], want[0] + want[1]):
        np.testing.assert_array_equal(a, b)


def test_mlp_adam_steps_bit_identical_to_the_general_path():
    before = walk_templates.STATS["hits"]
    copies = optimizer.STEP_STATS["copies"]
    _compare()
    assert walk_templates.STATS["hits"] > before                  # copies were used
    assert optimizer.STEP_STATS["copies"] - copies >= 4           # (steps 2 to 6)


def test_steps_recorded_between_syncs_make_the_general_programs():
    """Two or three steps in one program: nothing of an earlier, still pending step is
    taken back, so the program is the general one."""
    _compare(n=6, sync_every=2)
    _compare(n=6, sync_every=3)


def test_changing_hyper_parameters_between_steps():
    """A schedule and new betas/eps mid-run: scalars whose value changed are new nodes."""
    def change(opt, i):
        opt.lr = 1e-2 / (1 + i)
        if i == 3:
            opt.param_groups[0]["betas"] = (0.8, 0.99)
        if i == 4:
            opt.param_groups[0]["eps"] = 1e-6
    _compare(n=7, change=change)


def test_adamw_and_weight_decay():
    _compare(n=4, weight_decay=0.01)


@pytest.fixture
def pending_steps():
    """Steps that stay pending after apply_gradients (no step boundary), so that a test
    can read the graph an update recorded."""
    with la.config.override(step_sync=False):
        yield


def test_scalars_are_taken_back_only_when_the_last_step_ran():
    model, opt, x, y = _setup()
    params = model.parameters()

    def step():
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        return opt._made[(0, la.float32)][1]
    with la.config.override(step_sync=False):         # steps stay pending until la.sync()
        first = step()
        second = step()                               # the first is still pending
        assert not any(a is b for a, b in zip(first, second))
        la.sync()
        third = step()
        kept = [a is b for a, b in zip(second, third)]
        assert sum(kept) == 5 and not kept[4] and not kept[6]   # the bias corrections change
        la.sync()
    fourth = step()                                   # the step's own boundary computed it
    assert sum(a is b for a, b in zip(third, fourth)) == 5


def test_rewound_step_count_and_new_rate_make_new_scalars():
    """`steps` set back (load_state_dict does) with another learning rate: the step's
    scalars are this call's, never those of the earlier call with the same count."""
    model, opt, x, y = _setup()
    params = model.parameters()
    for lr in (1e-2, 1e-2, 5e-3):
        if lr == 5e-3:
            opt.steps = 1
            opt.lr = lr
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        la.sync()
        b1, b2 = opt.param_groups[0]["betas"]
        values = [n.value for n in opt._made[(0, la.float32)][1]]
        assert values[6] == lr / (1 - b1 ** opt.steps)
        assert values[4] == 1 / np.sqrt(1 - b2 ** opt.steps)


# ---- the fall-backs: the step changes mid-training ---------------------------------------
#
# Each run trains a few steps (the templates are made and copied), changes one thing the
# recorded step depends on, and trains on. The run through the fast paths must give the
# general path's losses, parameters and state bit for bit: a template that accepted the
# changed step by mistake would build another graph (another program, other numbers).

def _train(n, change, backward=False):
    """n steps of the small MLP (tape, or loss.backward() and opt.step()); `change(i, run)`
    may replace anything in `run` (model, opt, x, y) before step i."""
    model, opt, x, y = _setup()
    run = {"model": model, "opt": opt, "x": x, "y": y}
    losses = []
    for i in range(n):
        change(i, run)
        model, opt = run["model"], run["opt"]
        if backward:
            opt.zero_grad()
            loss = F.cross_entropy(model(run["x"]), run["y"])
            loss.backward()
            opt.step()
        else:
            params = model.parameters()
            with la.GradientTape() as tape:
                loss = F.cross_entropy(model(run["x"]), run["y"])
            opt.apply_gradients(tape.gradient(loss, params))
        losses.append(loss)
        la.sync()
    opt = run["opt"]
    return [l.numpy() for l in losses] + [p.numpy() for p in run["model"].parameters()] + \
        [t.numpy() for s in opt.state for t in s.values()]


def _compare_changed(change, n=7, backward=False):
    la.sync()
    _general(True)
    want = _train(n, change, backward)
    misses = la.debug.metrics().cache_misses
    walk_hits = walk_templates.STATS["hits"]
    _general(False)
    got = _train(n, change, backward)
    assert walk_templates.STATS["hits"] > walk_hits               # the copies were used
    assert la.debug.metrics().cache_misses == misses              # the general programs
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    return got


def _replace_weight(pending: bool):
    def change(i, run):
        if i != 3:
            return
        model = run["model"]
        w = model[2].weight
        fresh = np.linspace(-0.2, 0.2, w.numel()).astype(np.float32).reshape(w.shape)
        if pending:         # a parameter made from a pending value (a graph behind it)
            model[2].weight = la.nn.Parameter(w * 0.5 + la.asarray(fresh))
        else:
            model[2].weight = la.nn.Parameter(la.asarray(fresh))
        run["opt"] = la.optim.Adam(model.parameters(), lr=1e-2)
    return change


@pytest.mark.parametrize("backward", [False, True], ids=["tape", "backward"])
@pytest.mark.parametrize("pending", [False, True], ids=["data", "pending"])
def test_a_parameter_replaced_mid_training(backward, pending):
    got = _compare_changed(_replace_weight(pending), backward=backward)
    assert not np.array_equal(got[2], got[3])        # the change reached the losses


@pytest.mark.parametrize("backward", [False, True], ids=["tape", "backward"])
def test_requires_grad_toggled_mid_training(backward):
    """A layer frozen at step 2 and thawed at step 5. With backward() the frozen weight
    gets no .grad (opt.step skips it); with the tape, whose sources do not depend on
    requires_grad, the step is unchanged: both must match the general path."""
    frozen = {}

    def change(i, run):
        w = run["model"][2].weight
        if i == 2:
            w.requires_grad_(False)
            frozen["before"] = w.numpy().copy()
        if i == 5:
            frozen["after"] = w.numpy().copy()
            w.requires_grad_(True)
    _compare_changed(change, backward=backward)
    if backward:                                     # frozen: left as it was
        np.testing.assert_array_equal(frozen["before"], frozen["after"])


def test_requires_grad_toggled_with_backward_freezes_the_layer():
    """The same toggle with the templates on: the frozen steps leave the weight as it
    was, and it moves again once thawed (against a step taken without the freeze)."""
    la.sync()
    seen = []

    def change(i, run):
        w = run["model"][0].weight
        if i == 2:
            w.requires_grad_(False)
        if i in (2, 4, 6):
            seen.append(w.numpy().copy())
        if i == 4:
            w.requires_grad_(True)
    _train(7, change, backward=True)
    np.testing.assert_array_equal(seen[0], seen[1])
    assert not np.array_equal(seen[1], seen[2])


@pytest.mark.parametrize("backward", [False, True], ids=["tape", "backward"])
def test_another_batch_shape_mid_training(backward):
    """A last, smaller batch (and then the full one again): other shapes all through the
    step, so no template of the full batch's step may be copied for it."""
    rng = np.random.default_rng(5)
    small_x = la.asarray(rng.standard_normal((20, 12)).astype(np.float32))
    small_y = la.asarray(rng.integers(0, 5, 20))
    full = {}

    def change(i, run):
        if i == 0:
            full["x"], full["y"] = run["x"], run["y"]
        if i == 3:
            run["x"], run["y"] = small_x, small_y
        if i == 5:
            run["x"], run["y"] = full["x"], full["y"]
    _compare_changed(change, backward=backward)


def test_another_batch_shape_against_numpy():
    """The smaller batch's loss through the fast paths is the loss NumPy computes from the
    parameters the run had then (not a copy of the full batch's graph)."""
    la.sync()
    rng = np.random.default_rng(6)
    xs = rng.standard_normal((9, 12)).astype(np.float32)
    ys = rng.integers(0, 5, 9)
    state = {}

    def change(i, run):
        if i == 4:
            state["params"] = [p.numpy().copy() for p in run["model"].parameters()]
            run["x"], run["y"] = la.asarray(xs), la.asarray(ys)
    out = _train(5, change)
    w1, b1, w2, b2, w3, b3 = state["params"]
    h = np.maximum(xs @ w1.T + b1, 0)
    h = np.maximum(h @ w2.T + b2, 0)
    z = (h @ w3.T + b3).astype(np.float64)
    z -= z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(out[4], -logp[np.arange(9), ys].mean(), rtol=1e-5)


# ---- the optimizer's step template (optimizer.py `_copied_step`) -------------------------

def _one_step(model, opt, x, y, params=None):
    params = model.parameters() if params is None else params
    with la.GradientTape() as tape:
        loss = F.cross_entropy(model(x), y)
    opt.apply_gradients(tape.gradient(loss, params))
    la.sync()
    return loss


@pytest.mark.usefixtures("pending_steps")
def test_the_step_template_copies_the_written_update():
    """A copied update is the update as written, node for node: the same ops, types and
    attributes over the same parameter, gradient, state and scalar nodes."""
    from graph_compare import same_graph
    model, opt, x, y = _setup()
    for _ in range(3):
        _one_step(model, opt, x, y)
    params = model.parameters()
    with la.GradientTape() as tape:
        loss = F.cross_entropy(model(x), y)
    grads = tape.gradient(loss, params)
    before = [p._node for p in params] + [t._node for s in opt.state for t in s.values()]
    steps = opt.steps
    copies = optimizer.STEP_STATS["copies"]
    opt.apply_gradients(grads)
    copied = [p._node for p in params] + [t._node for s in opt.state for t in s.values()]
    assert optimizer.STEP_STATS["copies"] == copies + 1
    # the same step written out, from the same nodes (the scalars: this step's, taken back)
    for t, node in zip(params + [t for s in opt.state for t in s.values()], before):
        t._node = node
    opt.steps = steps
    optimizer.STEP_TEMPLATES[0] = False
    opt.apply_gradients(grads)
    written = [p._node for p in params] + [t._node for s in opt.state for t in s.values()]
    assert all(same_graph(a, b) for a, b in zip(copied, written))
    la.sync()


def _adam_run(change, n=6, **adam):
    model, opt, x, y = _setup(**adam)
    losses = []
    for i in range(n):
        grads_of = change(i, model, opt)
        params = model.parameters()
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        grads = tape.gradient(loss, params)
        opt.apply_gradients(grads_of(grads, params) if grads_of else grads)
        losses.append(loss)
        la.sync()
    return [l.numpy() for l in losses] + [p.numpy() for p in model.parameters()] + \
        [t.numpy() for s in opt.state for t in s.values()]


def _compare_steps(change, copied, **adam):
    """The run through the step templates (copies made: `copied` or more) against the
    update as written, bit for bit."""
    la.sync()
    optimizer.STEP_TEMPLATES[0] = False
    want = _adam_run(change, **adam)
    optimizer.STEP_TEMPLATES[0] = True
    copies = optimizer.STEP_STATS["copies"]
    got = _adam_run(change, **adam)
    assert optimizer.STEP_STATS["copies"] - copies == copied
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_the_step_template_falls_back_when_a_step_differs():
    """Steps 2 and 4 update a subset given as pairs (another key: written, then a template
    of their own), step 3 hands a gradient over as float16 (converted: written), step 5
    gives one parameter twice (written: the second update reads the first): every other
    step is a copy, and the run is the written one's bit for bit."""
    def change(i, model, opt):
        if i in (2, 4):
            return lambda grads, params: [(g, p) for g, p in zip(grads, params)][1:]
        if i == 3:
            return lambda grads, params: [g.astype(la.float16) if k == 0 else g
                                          for k, g in enumerate(grads)]
        if i == 5:
            return lambda grads, params: list(zip(grads, params)) + [(grads[0], params[0])]
        return None
    _compare_steps(change, copied=2)       # step 1 (of step 0's key) and step 4 (of step 2's)


def test_no_step_template_with_weight_decay():
    """Weight decay's scalar comes from `Hypers` (its value changes with the rate): Adam
    offers no step template then, and AdamW records every step as written."""
    _compare_steps(lambda i, model, opt: None, copied=0, weight_decay=0.01)


def test_the_step_template_follows_a_new_rate_and_a_rewound_step_count():
    """The scalars are arguments of the copy: a schedule, new betas and a step count set
    back give the written update's numbers."""
    def change(i, model, opt):
        opt.lr = 1e-2 / (1 + i)
        if i == 3:
            opt.param_groups[0]["betas"] = (0.8, 0.99)
            opt.steps = 1
        return None
    _compare_steps(change, copied=5)


def test_an_interrupted_copy_leaves_the_computed_parameters():
    """A KeyboardInterrupt inside a step's copy (before anything is rebound) loses
    nothing: the parameters keep their computed values, and the next step goes on."""
    model, opt, x, y = _setup()
    for _ in range(3):
        _one_step(model, opt, x, y)
    values = [p.numpy().copy() for p in model.parameters()]
    template = next(t for t in opt._step_templates.values() if t)
    copy = template.copy                    # (the generated code: made at the first copy)

    def interrupted(*args):
        raise KeyboardInterrupt
    template.copy = interrupted
    try:
        with pytest.raises(KeyboardInterrupt):
            _one_step(model, opt, x, y)
    finally:
        template.copy = copy
    for p, v in zip(model.parameters(), values):
        np.testing.assert_array_equal(p.numpy(), v)
    _one_step(model, opt, x, y)
    assert not np.array_equal(model.parameters()[0].numpy(), values[0])


def test_an_optimizer_with_an_update_of_its_own_records_every_step():
    """A subclass of Adam that overrides `update` may read anything (here: a structure
    that changes at step 3): no step of it is copied, and its change takes effect."""
    from lazyarray.compiler.graph import builders

    class Damped(la.optim.Adam):
        def update(self, param, grad, state, lr):
            new, moments = super().update(param, grad, state, lr)
            if self.steps >= 3:                 # the same value, another graph
                new = builders.add(new, builders.zeros_like(new))
            return new, moments
    model, _, x, y = _setup()
    opt = Damped(model.parameters(), lr=1e-2)
    copies = optimizer.STEP_STATS["copies"]
    ops = []
    for _ in range(4):
        _one_step(model, opt, x, y)
    params = model.parameters()
    with la.GradientTape() as tape:
        loss = F.cross_entropy(model(x), y)
    opt.apply_gradients(tape.gradient(loss, params))
    ops.append(params[0]._node.op)
    la.sync()
    assert optimizer.STEP_STATS["copies"] == copies
    assert ops == ["add"]
