"""Compiled training steps: one program per step (forward, backward, update, running
statistics, the random key), compiled once even when the learning rate changes every
step; the digits example reaches its accuracy."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"
HAVE_SKLEARN = importlib.util.find_spec("sklearn") is not None


def _load_example():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_compile_once_over_20_steps_with_changing_lr(device, clean_metrics):
    la.random.seed(0)
    rng = np.random.default_rng(0)
    model = la.nn.Sequential(la.nn.Linear(16, 32), la.nn.BatchNorm1d(32), la.nn.ReLU(),
                             la.nn.Dropout(0.2), la.nn.Linear(32, 4))
    opt = la.optim.AdamW(model.parameters(), lr=0.05)          # syncs the initialization
    x = la.asarray(rng.standard_normal((64, 16)).astype(np.float32))
    y = la.asarray(rng.integers(0, 4, 64))
    la.sync()
    compiles, syncs = clean_metrics.cache_misses, clean_metrics.syncs
    params = model.parameters()
    losses = []
    for step in range(20):
        opt.lr = 0.05 * (1.0 - step / 20)                        # reaches 1.0 x ... and 0.0025
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        losses.append(loss.item())
    assert clean_metrics.cache_misses - compiles == 1, clean_metrics.recompiles
    assert clean_metrics.cache_hits >= 19
    assert clean_metrics.syncs - syncs == 20                    # one program per step
    assert model.parameters() == params and all(p.is_materialized for p in params)
    assert la.random.key().is_materialized                      # the key came out of the step
    assert model[1].running_mean.is_materialized
    assert losses[-1] < 0.5 * losses[0], losses


def test_one_sgd_step_matches_numpy(device):
    rng = np.random.default_rng(2)
    layer = la.nn.Linear(3, 2)
    w, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)
    x = rng.standard_normal((5, 3)).astype(np.float32)
    t = rng.standard_normal((5, 2)).astype(np.float32)
    opt = la.optim.SGD(layer.parameters(), lr=0.1, momentum=0.5)
    with la.GradientTape() as tape:
        loss = F.mse_loss(layer(la.asarray(x)), la.asarray(t))
    opt.apply_gradients(tape.gradient(loss, layer.parameters()))
    r = x @ w.T + b - t                                          # d loss / d out = 2 r / r.size
    gw, gb = 2 * r.T @ x / r.size, 2 * r.sum(0) / r.size
    np.testing.assert_allclose(layer.weight.numpy(), w - 0.1 * gw, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.bias.numpy(), b - 0.1 * gb, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(loss.item(), (r ** 2).mean(), rtol=1e-5)


def test_gradients_from_a_dict_of_sources(device):
    layer = la.nn.Linear(4, 3)
    opt = la.optim.Adam(layer.parameters(), lr=0.01)
    before = layer.weight.numpy()
    with la.GradientTape() as tape:
        loss = layer(la.ones((2, 4))).sum()
    grads = tape.gradient(loss, dict(layer.named_parameters()))
    opt.apply_gradients([(grads[name], p) for name, p in layer.named_parameters()])
    assert not np.allclose(layer.weight.numpy(), before)


@pytest.mark.skipif(not HAVE_SKLEARN, reason="scikit-learn (the `examples` extra) is not "
                                             "installed: the digits data comes from it")
def test_digits_mlp_accuracy(clean_metrics):
    digits = _load_example()
    la.random.seed(0)
    make, settings = digits.MODELS["mlp"]
    result = digits.train(make(), digits.load_digits_split(), epochs=8, log=None, **settings)
    assert result["accuracy"] >= 0.95, result
    assert result["compiles"] == 2, (result, clean_metrics.recompiles)   # step + evaluation


@pytest.mark.skipif(not HAVE_SKLEARN or importlib.util.find_spec("lazyarray.ops.convolution")
                    is None, reason="needs scikit-learn and lazyarray.ops.convolution (the "
                                    "convolution ops of the autodiff work, not in this tree)")
def test_digits_cnn_trains(clean_metrics):
    digits = _load_example()
    la.random.seed(0)
    make, settings = digits.MODELS["cnn"]
    result = digits.train(make(), digits.load_digits_split(), epochs=4, log=None, **settings)
    assert result["accuracy"] >= 0.93, result
    assert result["compiles"] == 2, (result, clean_metrics.recompiles)  # step + evaluation
