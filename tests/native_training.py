"""Shared by the native-runtime tests: a spy on the native programs a test makes, and a
few SGD steps of a small MLP whose parameters the tests compare across devices."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.devices.cpu import native_program


def made_programs(monkeypatch: pytest.MonkeyPatch) -> list:
    """The NativePrograms built while the test runs, in order."""
    made: list = []
    real = native_program.NativeProgram.__init__

    def spy(self, exe, threads, *rest):
        real(self, exe, threads, *rest)
        made.append(self)
    monkeypatch.setattr(native_program.NativeProgram, "__init__", spy)
    return made


def train_mlp(sizes: tuple, batch: int, steps: int) -> list:
    rng = np.random.default_rng(0)
    layers = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers += [la.nn.Linear(fan_in, fan_out), la.nn.ReLU()]
    model = la.nn.Sequential(*layers[:-1])
    weights = [rng.uniform(-0.2, 0.2, tuple(p.shape)).astype(np.float32)
               for p in model.parameters()]
    model.load_state_dict({n: w for (n, _), w in zip(model.named_parameters(), weights)})
    opt = la.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)   # (Adam: sign-like
    # updates of near-zero gradients would amplify float rounding past any tolerance)
    x = la.asarray(rng.standard_normal((batch, sizes[0])).astype(np.float32))
    y = la.asarray(rng.integers(0, sizes[-1], batch))
    params = model.parameters()
    for _ in range(steps):
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        loss.item()
    return [p.numpy() for p in params]
