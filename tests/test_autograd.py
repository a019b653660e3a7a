"""GradientTape, grad, value_and_grad and stop_gradient, on every test device."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime


def _t(values, dtype=np.float64):
    return la.asarray(np.asarray(values, dtype=dtype))


def test_tape_gradient_of_a_scalar(device):
    x = _t([1.0, 2.0, 3.0])
    with la.GradientTape() as tape:
        tape.watch(x)
        y = la.sum(x ** 3)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [3.0, 12.0, 27.0])


def test_non_persistent_tape_is_used_once(device):
    x = _t([1.0, 2.0])
    with la.GradientTape() as tape:
        y = la.sum(x * x)
    tape.gradient(y, x)
    with pytest.raises(RuntimeError, match="persistent"):
        tape.gradient(y, x)


def test_persistent_tape_gives_several_gradients(device):
    x = _t([1.0, 2.0])
    with la.GradientTape(persistent=True) as tape:
        y = la.sum(x * x)
        z = la.sum(la.exp(x))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [2.0, 4.0])
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), np.exp([1.0, 2.0]))
    del tape
    assert runtime.TAPE_DEPTH[0] == 0


def test_sources_as_list_tuple_and_dict(device):
    a, b = _t([1.0, 2.0]), _t(3.0)
    with la.GradientTape(persistent=True) as tape:
        y = la.sum(a * b)
    ga, gb = tape.gradient(y, (a, b))
    np.testing.assert_allclose(ga.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(gb.numpy(), 3.0)
    g = tape.gradient(y, {"w": a, "nested": [b]})
    assert set(g) == {"w", "nested"}
    np.testing.assert_allclose(g["nested"][0].numpy(), 3.0)
    assert isinstance(tape.gradient(y, [a]), list)


def test_unconnected_sources_none_or_zeros(device):
    x, unused = _t([1.0, 2.0]), _t([[5.0, 6.0]])
    with la.GradientTape(persistent=True) as tape:
        y = la.sum(x)
    assert tape.gradient(y, unused) is None
    z = tape.gradient(y, unused, unconnected_gradients="zero")
    np.testing.assert_array_equal(z.numpy(), [[0.0, 0.0]])
    with pytest.raises(ValueError, match="unconnected_gradients"):
        tape.gradient(y, x, unconnected_gradients="nan")


def test_integer_sources_get_no_gradient(device):
    n = _t([1, 2], dtype=np.int32)
    x = _t([1.0, 2.0])
    with la.GradientTape() as tape:
        y = la.sum(x * n)
    gx, gn = tape.gradient(y, [x, n])
    np.testing.assert_allclose(gx.numpy(), [1.0, 2.0])
    assert gn is None


def test_target_must_be_scalar_unless_output_gradients(device):
    x = _t([1.0, 2.0])
    with la.GradientTape(persistent=True) as tape:
        y = x * x
    with pytest.raises(ValueError, match="scalar"):
        tape.gradient(y, x)
    g = tape.gradient(y, x, output_gradients=_t([1.0, 10.0]))
    np.testing.assert_allclose(g.numpy(), [2.0, 40.0])


def test_nested_tapes_second_derivative(device):
    x = _t(2.0)
    with la.GradientTape() as outer:
        outer.watch(x)
        with la.GradientTape() as inner:
            inner.watch(x)
            y = x ** 3
        dy = inner.gradient(y, x)
    d2y = outer.gradient(dy, x)
    np.testing.assert_allclose(dy.numpy(), 12.0)
    np.testing.assert_allclose(d2y.numpy(), 12.0)     # 6x


def test_hessian_vector_product(device):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 4))
    a = a + a.T
    v = rng.standard_normal(4)
    x0 = rng.standard_normal(4)
    A, V, x = _t(a), _t(v), _t(x0)

    def f(t):
        return 0.5 * la.sum(t * (A @ t)) + la.sum(la.sin(t))

    def grad_dot_v(t):
        return la.sum(la.grad(f)(t) * V)
    hv = la.grad(grad_dot_v)(x)
    want = a @ v - np.sin(x0) * v
    np.testing.assert_allclose(hv.numpy(), want, rtol=1e-10)


def test_grad_and_value_and_grad(device):
    def f(x, y):
        return la.sum(x * x * y)
    x, y = _t([1.0, 2.0]), _t([3.0, 4.0])
    np.testing.assert_allclose(la.grad(f)(x, y).numpy(), [6.0, 16.0])
    gx, gy = la.grad(f, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gy.numpy(), [1.0, 4.0])
    value, g = la.value_and_grad(f, argnums=1)(x, y)
    np.testing.assert_allclose(value.numpy(), 19.0)
    np.testing.assert_allclose(g.numpy(), [1.0, 4.0])


def test_value_and_grad_has_aux_and_structures(device):
    def loss(params, scale):
        out = la.sum(params["w"] * scale) + la.sum(params["b"])
        return out, {"out": out}
    params = {"w": _t([1.0, 2.0]), "b": _t(0.5)}
    (value, aux), g = la.value_and_grad(loss, has_aux=True)(params, 3.0)
    np.testing.assert_allclose(value.numpy(), 9.5)
    assert aux["out"] is value
    np.testing.assert_allclose(g["w"].numpy(), [3.0, 3.0])
    np.testing.assert_allclose(g["b"].numpy(), 1.0)


def test_grad_unused_argument_gets_zeros(device):
    g = la.grad(lambda x, y: la.sum(x), argnums=1)(_t([1.0]), _t([2.0, 3.0]))
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])


def test_stop_gradient_and_detach(device):
    x = _t([1.0, 2.0])
    with la.GradientTape(persistent=True) as tape:
        y = la.sum(x * la.stop_gradient(x))
        z = la.sum(x * x.detach())
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 2.0])
    np.testing.assert_allclose(tape.gradient(z, x).numpy(), [1.0, 2.0])
    np.testing.assert_allclose(y.numpy(), 5.0)


def test_stop_gradient_of_a_pending_value(device):
    x = _t([1.0, 2.0])
    with la.GradientTape() as tape:
        h = la.exp(x)
        y = la.sum(h * la.stop_gradient(h))
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), np.exp([1.0, 2.0]) ** 2)


def test_sync_inside_the_tape_keeps_the_graph(device):
    x = _t([1.0, 2.0])
    with la.GradientTape() as tape:
        h = x * x
        assert h.numpy().tolist() == [1.0, 4.0]        # materialized mid-tape
        y = la.sum(h * 3.0)
        _ = y.item()
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [6.0, 12.0])
    assert runtime.TAPE_DEPTH[0] == 0


def test_watch_pins_the_watched_value(device):
    x = _t([1.0, 2.0])
    with la.GradientTape(watch_accessed_variables=False) as tape:
        tape.watch(x)
        y = la.sum(x * x)
    other = _t([1.0])
    gx, go = tape.gradient(y, [x, other])
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0])
    assert go is None


def test_training_loop_with_sync_between_steps(device):
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((16, 3))
    w_true = np.array([1.0, -2.0, 0.5])
    ys = xs @ w_true
    X, Y = _t(xs), _t(ys)
    w = _t(np.zeros(3))
    w_np = np.zeros(3)
    losses = []
    for _ in range(30):
        w_np = w_np - 0.3 * (2 / len(xs)) * xs.T @ (xs @ w_np - ys)
        with la.GradientTape() as tape:
            tape.watch(w)
            loss = la.mean((X @ w - Y) ** 2)
        g = tape.gradient(loss, w)
        w = w - 0.3 * g
        la.sync()
        losses.append(loss.item())
        assert w._node.operands == ()     # no history kept across steps
    assert losses[-1] < 0.05 * losses[0]
    np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-10)
    assert runtime.TAPE_DEPTH[0] == 0


def test_gradient_graph_is_lazy(device):
    x = _t([1.0, 2.0])
    with la.GradientTape() as tape:
        y = la.sum(la.tanh(x))
    g = tape.gradient(y, x)
    assert not g.is_materialized
    np.testing.assert_allclose(g.numpy(), 1 - np.tanh([1.0, 2.0]) ** 2)


def test_bad_sources_are_refused(device):
    x = _t([1.0])
    with la.GradientTape() as tape:
        y = la.sum(x)
    with pytest.raises(TypeError, match="tensor"):
        tape.gradient(y, [x, 3.0])


def test_history_is_dropped_when_the_last_tape_ends(device):
    w = _t([1.0, 2.0])
    tapes = []
    for _ in range(3):
        tape = la.GradientTape(persistent=True)
        with tape:
            loss = la.sum(w * w)
        w = w - 0.1 * tape.gradient(loss, w)
        la.sync()                              # under the persistent tape: history kept
        assert w._node.operands != ()
        tapes.append(tape)
    del tape
    tapes.clear()                              # the last tape ends
    assert runtime.TAPE_DEPTH[0] == 0
    assert w._node.operands == ()
    np.testing.assert_allclose(w.numpy(), np.array([1.0, 2.0]) * 0.8 ** 3)
