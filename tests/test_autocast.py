"""Mixed precision: which ops autocast lowers or widens, float32 accumulation, gradients,
a training run against float32, and the gradient scaler."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la

F = la.nn.functional


def _rand(*shape, seed=0):
    return la.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def test_products_run_low_and_reductions_softmax_losses_in_float32():
    a, b = _rand(4, 8), _rand(8, 3, seed=1)
    img, w = _rand(2, 3, 6, 6, seed=2), _rand(4, 3, 3, 3, seed=3)
    labels = la.asarray(np.array([0, 2, 1, 1]))
    with la.autocast("bfloat16"):
        c = a @ b
        assert c.dtype == la.bfloat16
        assert la.tensordot(a, b, axes=1).dtype == la.bfloat16
        assert F.conv2d(img, w).dtype == la.bfloat16
        assert c.sum().dtype == la.float32 and c.mean(axis=0).dtype == la.float32
        assert la.var(c).dtype == la.float32
        assert F.softmax(c, -1).dtype == la.float32
        assert F.cross_entropy(c, labels).dtype == la.float32
        assert F.layer_norm(c, (3,)).dtype == la.float32
        assert (c + 1).dtype == la.bfloat16            # everything else keeps its dtype
        with la.autocast(enabled=False):
            assert (a @ b).dtype == la.float32
    assert (a @ b).dtype == la.float32                  # the block ended
    with la.autocast("cuda", dtype=la.float16):
        assert (a @ b).dtype == la.float16
    with la.autocast(device_type="cpu"):
        assert (a @ b).dtype == la.bfloat16


def test_low_precision_products_accumulate_in_float32():
    """4096 ones summed in bfloat16 would stop at 256 (8 significant bits); accumulated in
    float32 and rounded once the product is exact."""
    ones = la.ones((1, 4096))
    with la.autocast("bfloat16"):
        got = (ones @ la.ones((4096, 1))).numpy()
    assert float(got[0, 0]) == 4096.0
    x, y = _rand(16, 512), _rand(512, 8, seed=1)
    with la.autocast("bfloat16"):
        low = (x @ y).numpy().astype(np.float32)
    xb = x.numpy().astype(la.bfloat16.np).astype(np.float64)
    yb = y.numpy().astype(la.bfloat16.np).astype(np.float64)
    want = (xb @ yb).astype(la.bfloat16.np).astype(np.float32)   # exact product, rounded once
    np.testing.assert_allclose(low, want, rtol=2 ** -7, atol=1e-3)


def test_float32_parameters_get_float32_gradients_close_to_full_precision():
    w, x = _rand(8, 4), _rand(16, 8, seed=1)

    def loss(wv):
        return F.mse_loss(la.tanh(x @ wv), la.zeros((16, 4)))

    full = la.grad(loss)(w)
    with la.autocast("bfloat16"):
        mixed = la.grad(loss)(w)
    assert mixed.dtype == la.float32
    np.testing.assert_allclose(mixed.numpy(), full.numpy(), rtol=0.05, atol=2e-3)


def _data(n=256, d=20, classes=4, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((classes, d)) * 2
    y = rng.integers(0, classes, n)
    x = centers[y] + rng.standard_normal((n, d))
    return la.asarray(x.astype(np.float32)), la.asarray(y)


def _train(dtype, steps=40, scaler=None):
    x, y = _data()
    rng = np.random.default_rng(1)
    params = [la.asarray((rng.standard_normal(s) * 0.3).astype(np.float32))
              for s in ((20, 32), (32,), (32, 4), (4,))]
    opt = la.optim.Adam(params, lr=0.01)
    losses = []
    for _ in range(steps):
        with la.GradientTape() as tape, la.autocast(dtype, enabled=dtype is not None):
            w1, b1, w2, b2 = params
            loss = F.cross_entropy(la.relu(x @ w1 + b1) @ w2 + b2, y)
            scaled = scaler.scale(loss) if scaler else loss
        grads = tape.gradient(scaled, params)
        if scaler:
            scaler.step(opt, grads)
            scaler.update()
        else:
            opt.apply_gradients(grads)
        losses.append(loss.item())
    return losses


def test_training_with_autocast_reaches_the_float32_loss():
    """Stated tolerance: after 40 Adam steps the mixed-precision loss is within 10% (plus
    0.02) of the float32 run's, from the same weights and data."""
    full = _train(None)
    for dtype, scaler in (("bfloat16", None), ("float16", la.amp.GradScaler(init_scale=1024.0))):
        mixed = _train(dtype, scaler=scaler)
        assert mixed[-1] < 0.5 * mixed[0], (dtype, mixed[0], mixed[-1])
        assert abs(mixed[-1] - full[-1]) <= 0.1 * full[-1] + 0.02, (dtype, mixed[-1], full[-1])


def test_scaler_skips_a_step_with_overflowed_gradients_and_backs_off():
    p = la.asarray(np.ones(3, np.float32))
    opt = la.optim.SGD([p], lr=0.1)
    scaler = la.amp.GradScaler(init_scale=8.0, growth_interval=2)
    assert scaler.scale(la.asarray(np.float32(2))).item() == 16.0
    taken = scaler.step(opt, [la.asarray(np.array([1, np.inf, 1], np.float32))])
    scaler.update()
    assert not taken and scaler.get_scale() == 4.0
    np.testing.assert_array_equal(p.numpy(), np.ones(3))
    for _ in range(2):
        assert scaler.step(opt, [la.asarray(np.full(3, 4.0, np.float32))])
        scaler.update()
    np.testing.assert_allclose(p.numpy(), 1 - 2 * 0.1 * 4.0 / 4.0)
    assert scaler.get_scale() == 8.0              # grown after two clean steps


def test_bad_settings_are_clear_errors():
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        with la.autocast("float64"):
            pass
    with pytest.raises(ValueError, match="growth_factor"):
        la.amp.GradScaler(growth_factor=0.5)


def test_an_overflowing_float16_step_warns_nothing():
    """A GradScaler step whose float16 products overflow to inf is skipped quietly: the
    inf is the result the scaler looks for, not a NumPy RuntimeWarning (turned into an
    error here, as `-W error` does)."""
    import warnings
    rng = np.random.default_rng(0)
    w = la.asarray(rng.standard_normal((2, 8, 8)).astype(np.float32))
    x = la.asarray(rng.standard_normal((2, 4, 8)).astype(np.float32) * 100)
    opt = la.optim.SGD([w], lr=0.1)
    scaler = la.amp.GradScaler(init_scale=2.0 ** 24)
    before = w.numpy().copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with la.GradientTape() as tape:
            with la.autocast("float16"):
                loss = (x @ w).astype(la.float32).sum()   # batched float16 product
            scaled = scaler.scale(loss)
        grads = tape.gradient(scaled, [w])
        taken = scaler.step(opt, grads)
        scaler.update()
    assert not taken and scaler.get_scale() == 2.0 ** 23
    np.testing.assert_array_equal(w.numpy(), before)
