"""A small CNN training step (conv 3x3 -> batch norm -> ReLU -> max-pool, twice, then a
linear layer and softmax cross-entropy; SGD), by lazyarray and, in the same run, PyTorch
eager (skipped when not installed). The convolution backward passes read the batch norm /
ReLU / max-pool backward chain once per 3x3 tap: fusion must compute that chain once
(issue 8, point 7), not in every tap.

    python -m pytest bench/bench_cnn.py --benchmark-only
"""
from __future__ import annotations

import time

import numpy as np
import pytest

from peers import installed

BATCH, CHANNELS, SIDE, CLASSES = 32, (3, 16, 32), 32, 10
LR = 0.01


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, CHANNELS[0], SIDE, SIDE), dtype=np.float32)
    y = rng.integers(0, CLASSES, BATCH)
    return x, y


def _weights() -> list:
    """conv1 w, b, bn1 gamma, beta, conv2 w, b, bn2 gamma, beta, linear w, b: the same
    arrays for every framework."""
    rng = np.random.default_rng(1)
    out = []
    for cin, cout in zip(CHANNELS[:-1], CHANNELS[1:]):
        bound = 1 / np.sqrt(cin * 9)
        out += [rng.uniform(-bound, bound, (cout, cin, 3, 3)).astype(np.float32),
                rng.uniform(-bound, bound, cout).astype(np.float32),
                np.ones(cout, np.float32), np.zeros(cout, np.float32)]
    features = CHANNELS[-1] * (SIDE // 4) ** 2
    bound = 1 / np.sqrt(features)
    out += [rng.uniform(-bound, bound, (CLASSES, features)).astype(np.float32),
            rng.uniform(-bound, bound, CLASSES).astype(np.float32)]
    return out


def _record(benchmark, framework, first_s):
    benchmark.group = "cnn training step"
    benchmark.extra_info.update(framework=framework, first_step_s=first_s)


def _la_step_fn():
    import lazyarray as la
    import lazyarray.nn.functional as F
    nn = la.nn
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(CHANNELS[-1] * (SIDE // 4) ** 2, CLASSES))
    params = model.parameters()
    for p, w in zip(params, _weights()):
        assert tuple(p.shape) == w.shape
    model.load_state_dict({n: w for (n, _), w in zip(model.named_parameters(), _weights())},
                          strict=False)
    opt = la.optim.SGD(params, lr=LR)
    x, y = (la.asarray(a) for a in _data())

    def step():
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        return loss.item()
    return step


def test_lazyarray(benchmark):
    import lazyarray as la
    step = _la_step_fn()
    la.sync()
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    step()
    before = la.debug.metrics().cache_misses
    _record(benchmark, "lazyarray", first)
    benchmark(step)
    assert la.debug.metrics().cache_misses == before        # every timed step was a cache hit


def _torch_step_fn():
    import torch
    torch.set_grad_enabled(True)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(CHANNELS[-1] * (SIDE // 4) ** 2, CLASSES))
    with torch.no_grad():
        for p, w in zip(model.parameters(), _weights()):
            p.copy_(torch.from_numpy(w))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = (torch.from_numpy(a) for a in _data())

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


def test_torch(benchmark):
    if not installed("torch"):
        pytest.skip("PyTorch is not installed")
    step = _torch_step_fn()
    t0 = time.perf_counter()
    step()
    _record(benchmark, "torch", time.perf_counter() - t0)
    benchmark(step)
