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
from lazyarray.compiler import graph_templates, walk_templates
from lazyarray.optim import optimizer


def _general(on: bool) -> None:
    """Every fast path of recording a step off (on=True) or back on."""
    walk_templates.ENABLED[0] = not on
    graph_templates.ENABLED[0] = not on
    optimizer.REUSE_LAST_STEP[0] = not on


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
    _compare()
    assert walk_templates.STATS["hits"] > before                  # copies were used


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


def test_scalars_are_taken_back_only_when_the_last_step_ran():
    model, opt, x, y = _setup()
    params = model.parameters()

    def step():
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        return opt._made[(0, la.float32)][1]
    first = step()
    second = step()                                   # the first is still pending
    assert not any(a is b for a, b in zip(first, second))
    la.sync()
    third = step()
    kept = [a is b for a, b in zip(second, third)]
    assert sum(kept) == 5 and not kept[4] and not kept[6]   # the bias corrections change
    la.sync()


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
