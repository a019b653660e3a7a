"""SGD's steps copied from the first step's update graph (Optimizer's step templates, fed
by `SGD.step_scalars`) give the update as written, bit for bit, and PyTorch's
torch.optim.SGD numbers, for every option: momentum, dampening, Nesterov, weight decay,
maximize, a learning-rate schedule, several parameter groups.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.optim import optimizer

OPTIONS = [dict(momentum=0.9), dict(momentum=0.9, dampening=0.3),
           dict(momentum=0.8, nesterov=True), dict(momentum=0.9, weight_decay=0.01),
           dict(momentum=0.9, maximize=True), dict(), dict(weight_decay=0.1)]


@pytest.fixture(autouse=True)
def restore():
    yield
    optimizer.STEP_TEMPLATES[0] = True


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-0.3, 0.3, s).astype(np.float32) for s in ((16, 12), (16,), (5, 16), (5,))], \
        rng.standard_normal((32, 12)).astype(np.float32), rng.integers(0, 5, 32)


def _model(ws):
    model = la.nn.Sequential(la.nn.Linear(12, 16), la.nn.ReLU(), la.nn.Linear(16, 5))
    for p, w in zip(model.parameters(), ws):
        p.copy_(la.asarray(w))
    return model


def _run(options, steps=5, groups=False, schedule=False):
    ws, x, y = _weights()
    model = _model(ws)
    params = model.parameters()
    if groups:     # the second layer its own group, with its own rate and momentum
        opt = la.optim.SGD([{"params": params[:2]},
                            {"params": params[2:], "lr": 0.02, "momentum": 0.5}],
                           lr=0.05, **options)
    else:
        opt = la.optim.SGD(params, lr=0.05, **options)
    xl, yl = la.asarray(x), la.asarray(y)
    losses = []
    for i in range(steps):
        if schedule:
            opt.lr = 0.05 / (1 + i)
        opt.zero_grad()
        loss = F.cross_entropy(model(xl), yl)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses + [p.numpy() for p in params] + \
        [t.numpy() for s in opt.state for t in s.values()]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("groups,schedule", [(False, False), (True, True)])
def test_copied_sgd_steps_are_the_written_update(options, groups, schedule):
    la.sync()
    optimizer.STEP_TEMPLATES[0] = False
    want = _run(options, groups=groups, schedule=schedule)
    optimizer.STEP_TEMPLATES[0] = True
    copies = optimizer.STEP_STATS["copies"]
    got = _run(options, groups=groups, schedule=schedule)
    assert optimizer.STEP_STATS["copies"] - copies == 4      # steps 2 to 5
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("options", OPTIONS, ids=str)
def test_copied_sgd_steps_match_pytorch(options):
    torch = pytest.importorskip("torch")
    got = _run(options, groups=True, schedule=True)
    ws, x, y = _weights()
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    with torch.no_grad():
        for p, w in zip(model.parameters(), ws):
            p.copy_(torch.tensor(w))
    params = list(model.parameters())
    opt = torch.optim.SGD([{"params": params[:2]},
                           {"params": params[2:], "lr": 0.02, "momentum": 0.5}],
                          lr=0.05, **options)
    losses = []
    for i in range(5):
        opt.param_groups[0]["lr"] = opt.param_groups[1]["lr"] = 0.05 / (1 + i)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    np.testing.assert_allclose(got[:5], losses, rtol=1e-5, atol=1e-6)
    for a, p in zip(got[5:9], params):
        np.testing.assert_allclose(a, p.detach().numpy(), rtol=1e-5, atol=1e-6)
