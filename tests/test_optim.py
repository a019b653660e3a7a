"""la.optim: each optimizer against its reference update formula written in NumPy
(PyTorch's formulas), over several steps with a changing learning rate."""
from __future__ import annotations

import math

import numpy as np
import pytest

import lazyarray as la

RNG = np.random.default_rng(1)
SHAPES = [(4, 3), (5,)]
STEPS = 4
LRS = [0.1, 0.05, 0.0, 1.0]            # 0 and 1 must not become constants (no recompiles)


def _problem():
    params = [RNG.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[RNG.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(STEPS)]
    return params, grads


def ref_sgd(p, grads, lrs, momentum=0.0, dampening=0.0, wd=0.0, nesterov=False, maximize=False):
    p, buf, out = p.astype(np.float64), None, []
    for t, (g, lr) in enumerate(zip(grads, lrs)):
        g = -g if maximize else g.astype(np.float64)
        g = g + wd * p
        if momentum:
            buf = g.copy() if t == 0 else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
        out.append(p)
    return out


def ref_adam(p, grads, lrs, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False, amsgrad=False):
    p = p.astype(np.float64)
    m, v, out = np.zeros_like(p), np.zeros_like(p), []
    v_max = np.zeros_like(p)
    for t, (g, lr) in enumerate(zip(grads, lrs), start=1):
        g = g.astype(np.float64)
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        v_max = np.maximum(v_max, v)
        mhat, vhat = m / (1 - b1 ** t), (v_max if amsgrad else v) / (1 - b2 ** t)
        p = p - lr * mhat / (np.sqrt(vhat) + eps)
        out.append(p)
    return out


CASES = [
    ("sgd", la.optim.SGD, {}, ref_sgd, {}),
    ("momentum", la.optim.SGD, {"momentum": 0.9}, ref_sgd, {"momentum": 0.9}),
    ("dampening", la.optim.SGD, {"momentum": 0.8, "dampening": 0.3}, ref_sgd,
     {"momentum": 0.8, "dampening": 0.3}),
    ("nesterov", la.optim.SGD, {"momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
     ref_sgd, {"momentum": 0.9, "nesterov": True, "wd": 0.01}),
    ("maximize", la.optim.SGD, {"maximize": True, "weight_decay": 0.1}, ref_sgd,
     {"maximize": True, "wd": 0.1}),
    ("adam", la.optim.Adam, {}, ref_adam, {}),
    ("adam_l2", la.optim.Adam, {"betas": (0.8, 0.99), "weight_decay": 0.05}, ref_adam,
     {"b1": 0.8, "b2": 0.99, "wd": 0.05}),
    ("adamw", la.optim.AdamW, {"weight_decay": 0.1}, ref_adam, {"wd": 0.1, "decoupled": True}),
    ("adam_amsgrad", la.optim.Adam, {"amsgrad": True, "betas": (0.5, 0.6)}, ref_adam,
     {"amsgrad": True, "b1": 0.5, "b2": 0.6}),
    ("adamw_amsgrad", la.optim.AdamW, {"amsgrad": True, "weight_decay": 0.1}, ref_adam,
     {"amsgrad": True, "wd": 0.1, "decoupled": True}),
]


@pytest.mark.parametrize("name,cls,kwargs,ref,ref_kwargs", CASES, ids=[c[0] for c in CASES])
def test_against_reference_formula(device, clean_metrics, name, cls, kwargs, ref, ref_kwargs):
    init, grads = _problem()
    params = [la.asarray(p) for p in init]
    opt = cls(params, lr=LRS[0], **kwargs)
    expected = [ref(p, [g[i] for g in grads], LRS, **ref_kwargs) for i, p in enumerate(init)]
    for step in range(STEPS):
        opt.lr = LRS[step]
        opt.apply_gradients([la.asarray(g) for g in grads[step]])
        la.sync()
        for i, p in enumerate(params):
            np.testing.assert_allclose(p.numpy(), expected[i][step], rtol=2e-5, atol=2e-6,
                                       err_msg=f"{name}: parameter {i} after step {step + 1}")
    assert clean_metrics.cache_misses == 1, clean_metrics.recompiles


def test_pairs_none_and_schedule(device):
    init, grads = _problem()
    params = [la.asarray(p) for p in init]
    schedule = la.optim.schedules.step_decay(0.5, every=1, factor=0.5)   # 0.5, 0.25, ...
    opt = la.optim.SGD(params, lr=schedule)
    # (grad, param) pairs in any order; the second parameter gets no gradient
    opt.apply_gradients([(la.asarray(grads[0][0]), params[0])])
    opt.apply_gradients([la.asarray(grads[1][0]), None])
    expected = init[0] - 0.5 * grads[0][0] - 0.25 * grads[1][0]
    np.testing.assert_allclose(params[0].numpy(), expected, rtol=1e-6)
    np.testing.assert_array_equal(params[1].numpy(), init[1])
    assert opt.steps == 2


def test_a_parameter_given_twice_is_updated_twice_in_order(device):
    """Pairs naming one parameter twice: the second update reads the first one's result
    (the optimizer rebinds its tensors together at the end of the call otherwise)."""
    init, grads = _problem()
    params = [la.asarray(p) for p in init]
    opt = la.optim.SGD(params, lr=0.5, momentum=0.9)
    g0, g1, h = (la.asarray(a) for a in (grads[0][0], grads[1][0], grads[0][1]))
    opt.apply_gradients([(g0, params[0]), (g1, params[0]), (h, params[1])])
    # the buffer starts at g (first step), then 0.9 * buf + g
    buf = 0.9 * grads[0][0] + grads[1][0]
    np.testing.assert_allclose(opt.state[0]["momentum_buffer"].numpy(), buf, rtol=1e-6)
    np.testing.assert_allclose(params[0].numpy(), init[0] - 0.5 * grads[0][0] - 0.5 * buf,
                               rtol=1e-5)
    np.testing.assert_allclose(params[1].numpy(), init[1] - 0.5 * grads[0][1], rtol=1e-6)


def test_parameters_keep_identity(device):
    model = la.nn.Linear(3, 2)
    params = model.parameters()
    opt = la.optim.Adam(model.parameters(), lr=0.1)
    opt.apply_gradients([la.ones(p.shape) for p in params])
    la.sync()
    assert model.parameters() == params and opt.params == params
    assert all(p.is_materialized for p in params)


def test_state_follows_a_model_moved_after_the_optimizer_was_made():
    from harness import device_names
    model = la.nn.Linear(3, 2, device="interpreter")
    opt = la.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for name in device_names()[::-1]:
        model.to(name)
        opt.apply_gradients([la.ones(p.shape, device=name) for p in model.parameters()])
        la.sync()
        assert all(t.device is la.device(name) for s in opt.state for t in s.values())


def test_clip_grad_norm(device):
    gs = [RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal(5).astype(np.float32)]
    total = math.sqrt(sum(float((g.astype(np.float64) ** 2).sum()) for g in gs))
    clipped, norm = la.optim.clip_grad_norm([la.asarray(g) for g in gs] + [None], 1.0)
    assert clipped[-1] is None
    np.testing.assert_allclose(norm.item(), total, rtol=1e-5)
    for c, g in zip(clipped, gs):
        np.testing.assert_allclose(c.numpy(), g / (total + 1e-6), rtol=1e-5)
    same, _ = la.optim.clip_grad_norm([la.asarray(g) for g in gs], total * 2)
    for c, g in zip(same, gs):
        np.testing.assert_allclose(c.numpy(), g, rtol=1e-6)


def test_schedules():
    cos = la.optim.schedules.cosine(1.0, total_steps=10, warmup=2)
    assert cos(0) == 0.0 and cos(1) == 0.5 and cos(2) == 1.0
    assert abs(cos(10)) < 1e-12 and 0 < cos(6) < 1


def test_errors(device):
    p = la.asarray(np.zeros(3, np.float32))
    opt = la.optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="got 2 gradients for 1 parameters"):
        opt.apply_gradients([la.ones(3), la.ones(3)])
    with pytest.raises(ValueError, match=r"gradient of shape \(4,\) for parameter 0"):
        opt.apply_gradients([la.ones(4)])
    with pytest.raises(ValueError, match="not one of this optimizer's parameters"):
        opt.apply_gradients([(la.ones(3), la.ones(3))])
    with pytest.raises(TypeError, match="floating-point Tensor"):
        la.optim.Adam([la.asarray(np.zeros(3, np.int32))])
    with pytest.raises(ValueError, match="Nesterov"):
        la.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="empty parameter list"):
        la.optim.Adam([])
