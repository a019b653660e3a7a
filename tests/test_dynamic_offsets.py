"""Slice starts and int indices are runtime scalars: a loop over positions compiles once
per distinct shape, and each result is exactly NumPy's (fewer rows at the end)."""
import numpy as np
import pytest

import lazyarray as la


def _compiles(fn):
    la.sync()           # work an earlier test left pending is not this loop's compile
    before = la.debug.metrics().cache_misses
    fn()
    return la.debug.metrics().cache_misses - before


def test_batch_loop_compiles_once_per_batch_length():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((250, 7)).astype(np.float32)
    order = rng.permutation(250)
    Xt, perm = la.asarray(X), la.asarray(order)

    def loop():
        for i in range(0, 250, 64):          # 64, 64, 64, 58: two lengths
            xb = Xt[perm[i:i + 64]]
            np.testing.assert_array_equal(xb.numpy(), X[order[i:i + 64]])

    assert _compiles(loop) == 2
    assert _compiles(loop) == 0              # the second epoch: all cache hits


@pytest.mark.parametrize("key", [
    lambda i: i, lambda i: slice(i, i + 3), lambda i: slice(i, None, 2),
    lambda i: slice(i + 2, None, -1), lambda i: (slice(None), i % 4),
    lambda i: (slice(i, i + 2), slice(1, 3)), lambda i: (i, Ellipsis, None)])
def test_positions_share_one_program(key):
    X = np.arange(8 * 4 * 3, dtype=np.float32).reshape(8, 4, 3)
    Xt = la.asarray(X)
    Xt[0].numpy()          # warm whatever compiles for unrelated reasons
    shapes = {}
    total = 0
    for i in range(5):
        want = X[key(i)]
        got = Xt[key(i)]
        assert got.shape == want.shape
        before = la.debug.metrics().cache_misses
        np.testing.assert_array_equal(got.numpy(), want)
        total += la.debug.metrics().cache_misses - before
        shapes[want.shape] = True
    assert total <= len(shapes)


def test_slice_past_the_end_is_short_like_numpy():
    X = np.arange(10.0, dtype=np.float32)
    Xt = la.asarray(X)
    for i in range(0, 12, 4):
        np.testing.assert_array_equal(Xt[i:i + 4].numpy(), X[i:i + 4])
    assert Xt[12:16].shape == (0,)


def test_setitem_at_positions_compiles_once():
    X = np.zeros((6, 3), np.float32)

    def loop():
        t = la.asarray(X)
        for i in range(1, 5):
            t[i:i + 2] = float(i)
            t.numpy()
        return t

    first = _compiles(loop)
    assert first <= 2
    want = X.copy()
    for i in range(1, 5):
        want[i:i + 2] = float(i)
    np.testing.assert_array_equal(loop().numpy(), want)


def test_explicit_dynamic_slice_clamps_like_hlo():
    X = np.arange(20, dtype=np.float32).reshape(5, 4)
    Xt = la.asarray(X)
    np.testing.assert_array_equal(la.dynamic_slice(Xt, (4, -3), (3, 2)).numpy(), X[2:5, 0:2])
    start = la.asarray(np.int32(7))
    np.testing.assert_array_equal(la.dynamic_slice(Xt, (start, 1), (2, 3)).numpy(), X[3:5, 1:4])
    np.testing.assert_array_equal(la.dynamic_slice(Xt, la.asarray([1, 1]), (2, 2)).numpy(),
                                  X[1:3, 1:3])
    upd = la.dynamic_update_slice(Xt, la.ones((2, 2)), (9, 9))
    want = X.copy()
    want[3:5, 2:4] = 1
    np.testing.assert_array_equal(upd.numpy(), want)


def test_explicit_dynamic_slice_in_a_loop_compiles_once():
    Xt = la.asarray(np.arange(30, dtype=np.float32))
    outs = []
    n = _compiles(lambda: outs.extend(la.dynamic_slice(Xt, (i,), (4,)).numpy()
                                      for i in range(0, 30, 3)))
    assert n == 1
    assert outs[-1].tolist() == [26, 27, 28, 29]       # start 27 clamped to 26


def test_dynamic_slice_bad_input_names_the_op():
    Xt = la.ones((3, 4))
    with pytest.raises(ValueError, match=r"dynamic_slice: 1 start indices .*\(3, 4\)"):
        la.dynamic_slice(Xt, (0,), (1, 1))
    with pytest.raises(ValueError, match="dynamic_slice: slice_sizes"):
        la.dynamic_slice(Xt, (0, 0), (4, 1))
    with pytest.raises(TypeError, match="start index 1 must be an int"):
        la.dynamic_slice(Xt, (0, 1.5), (1, 1))
    with pytest.raises(ValueError, match="dynamic_update_slice: the update"):
        la.dynamic_update_slice(Xt, la.ones((4, 4)), (0, 0))


def test_dynamic_slice_gradient_through_a_runtime_start():
    x = la.asarray(np.arange(6, dtype=np.float32))
    with la.GradientTape() as tape:
        tape.watch(x)
        y = (x[2:5] * 2.0).sum()
    g = tape.gradient(y, [x])[0]
    np.testing.assert_array_equal(g.numpy(), [0, 0, 2, 2, 2, 0])


@pytest.mark.parametrize("start,error,match", [
    ((0, True), TypeError, "start index 1 must be an int"),
    ((0, 2.0), TypeError, "start index 1 must be an int"),
    ((0, 2 ** 63), OverflowError, "start index 1 = 9223372036854775808 does not fit int64"),
    ((0, la.asarray(np.float32(1))), TypeError, "start index 1 must be an integer scalar"),
    ((0, la.asarray(np.array([1]))), TypeError, "start index 1 must be an integer scalar"),
    ((0,), ValueError, r"1 start indices for an operand of shape \(3, 4\)"),
])
def test_update_starts_checked_in_every_form(start, error, match):
    """Python ints and 0-d integer tensors in a tuple (the form a decoding loop uses at
    every token) are taken directly; anything else raises as the checked way says."""
    with pytest.raises(error, match=f"dynamic_update_slice: {match}"):
        la.dynamic_update_slice(la.ones((3, 4)), la.zeros((1, 2)), start)


def test_update_starts_of_every_accepted_form_agree():
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = base.copy()
    want[1:2, 2:4] = -1
    for start in [(1, 2), [1, 2], (np.int64(1), 2), (la.asarray(np.int32(1)), 2),
                  (1, la.asarray(np.int64(2))), la.asarray(np.array([1, 2]))]:
        got = la.dynamic_update_slice(la.asarray(base), la.full((1, 2), -1.0), start)
        np.testing.assert_array_equal(got.numpy(), want)
