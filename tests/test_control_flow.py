"""la.cond, la.fori_loop, la.scan, la.while_loop with JAX's meanings: values against
NumPy, gradients through scan and fori_loop against finite differences (float64), and a
data-dependent while_loop that compiles its iteration once."""
import numpy as np
import pytest

import lazyarray as la
from gradcheck import check_direction


def test_cond_with_a_tensor_predicate_selects_and_differentiates():
    x = np.array([1.0, -2.0, 3.0])
    for flag in (True, False):
        got = la.cond(la.asarray(flag), lambda a: a * 2.0, lambda a: la.exp(a), la.asarray(x))
        np.testing.assert_allclose(got.numpy(), x * 2 if flag else np.exp(x), rtol=1e-6)
    assert la.cond(False, lambda: 1, lambda: 2) == 2          # a Python bool picks a branch
    check_direction(lambda a: la.cond(a.sum() > 0, lambda v: v * v, lambda v: -v, a),
                    [x])
    with pytest.raises(TypeError, match=r"cond: the branches' results differ at leaf 0"):
        la.cond(la.asarray(True), lambda: la.ones(3), lambda: la.ones(4))


def test_fori_loop_matches_numpy_and_differentiates():
    x = np.linspace(-1, 1, 5)

    def f(a):
        return la.fori_loop(1, 5, lambda i, v: v * 0.5 + la.sin(v) * i, a)
    want = x.copy()
    for i in range(1, 5):
        want = want * 0.5 + np.sin(want) * i
    np.testing.assert_allclose(f(la.asarray(x)).numpy(), want, rtol=1e-10)
    check_direction(f, [x])


def _rnn(h0, xs, w):
    def step(h, x):
        h = la.tanh(h @ w + x)
        return h, h.sum()
    return la.scan(step, h0, xs)


def test_scan_matches_numpy_stacks_ys_and_differentiates():
    rng = np.random.default_rng(0)
    h0, xs, w = rng.standard_normal(4), rng.standard_normal((6, 4)), rng.standard_normal((4, 4)) * 0.5
    h, ys = _rnn(la.asarray(h0), la.asarray(xs), la.asarray(w))
    hn, want = h0, []
    for x in xs:
        hn = np.tanh(hn @ w + x)
        want.append(hn.sum())
    np.testing.assert_allclose(h.numpy(), hn, rtol=1e-10)
    np.testing.assert_allclose(ys.numpy(), want, rtol=1e-10)
    check_direction(lambda a, b, c: _rnn(a, b, c)[0], [h0, xs, w])
    check_direction(lambda a, b, c: _rnn(a, b, c)[1], [h0, xs, w])
    carry, rev = la.scan(lambda c, x: (c + x, c), la.asarray(0.0), la.asarray([1.0, 2.0, 3.0]),
                         reverse=True)
    assert carry.item() == 6.0 and rev.numpy().tolist() == [5.0, 3.0, 0.0]


def test_scan_over_a_pytree():
    xs = {"a": la.asarray(np.arange(3.0, dtype=np.float32)), "b": la.asarray(np.ones((3, 2)))}
    carry, ys = la.scan(lambda c, x: ((c[0] + x["a"], c[1] * 2), {"s": x["b"].sum()}),
                        (la.asarray(0.0), la.asarray(1.0)), xs)
    assert carry[0].item() == 3.0 and carry[1].item() == 8.0
    assert ys["s"].numpy().tolist() == [2.0, 2.0, 2.0]


def test_while_loop_runs_until_the_condition_and_compiles_once():
    x = la.asarray(np.array([1.0, 3.0], np.float32))
    la.sync()
    before = la.debug.metrics().compiles
    count, val = la.while_loop(lambda s: s[1].sum() < 1000.0,
                               lambda s: (s[0] + 1, s[1] * 1.5 + 1.0),
                               (la.asarray(np.int64(0)), x))
    want_n, want = 0, np.array([1.0, 3.0], np.float32)
    while want.sum() < 1000:
        want_n, want = want_n + 1, want * np.float32(1.5) + np.float32(1.0)
    assert count.item() == want_n and want_n > 5
    np.testing.assert_allclose(val.numpy(), want, rtol=1e-6)
    # the first condition, then one program per iteration (body + next condition)
    assert la.debug.metrics().compiles - before <= 3


def test_bad_state_is_an_error_naming_the_op():
    with pytest.raises(TypeError, match="fori_loop: body_fun's result and its input state differ"):
        la.fori_loop(0, 2, lambda i, v: la.ones(3), la.ones(2))
    with pytest.raises(ValueError, match="scan: give xs or length"):
        la.scan(lambda c, x: (c, c), la.ones(2))
