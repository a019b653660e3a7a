"""la.random: Threefry known answers, reproducibility on every device, moments, and a
dropout step that compiles once."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.lift import lift
from lazyarray.ops import random as gen

from harness import device_names

# Random123's known-answer vectors for threefry2x32 with 20 rounds: (key, counter, output)
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,counter,expected", KNOWN_ANSWERS)
def test_threefry_known_answers(device, key, counter, expected):
    k = la.asarray(np.array(key, np.uint32))
    c0 = la.asarray(np.array([counter[0]], np.uint32))
    c1 = la.asarray(np.array([counter[1]], np.uint32))
    x0, x1 = lift(gen.threefry2x32)(k, c0, c1)
    assert (int(x0.numpy()[0]), int(x1.numpy()[0])) == expected


def _draws():
    return [la.random.uniform((7, 5)).numpy(), la.random.normal((33,)).numpy(),
            la.random.randint(-3, 9, (10,)).numpy(), la.random.permutation(12).numpy(),
            la.random.bits((5,)).numpy()]


def test_same_seed_same_numbers(device):
    la.random.seed(1234)
    first = _draws()
    la.random.seed(1234)
    second = _draws()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    la.random.seed(1235)
    assert not np.array_equal(la.random.uniform((7, 5)).numpy(), first[0])


_EVERY_DEVICE = device_names() + ["fakecuda"] * ("fakecuda" not in device_names())
_DRAW_TABLE = [
    ("randn", lambda: la.randn(3, 1000)),
    ("normal_f64", lambda: la.random.normal((7, 33), mean=1.5, std=3.0, dtype=la.float64)),
    ("normal_f16", lambda: la.random.normal((64,), dtype=la.float16)),
    ("normal_bf16", lambda: la.random.normal((5, 4), std=0.02, dtype=la.bfloat16)),
    ("normal_scalar", lambda: la.random.normal(())),
    ("normal_empty", lambda: la.random.normal((0, 3))),
    ("uniform_span", lambda: la.random.uniform((99,), low=-2.0, high=3.0)),
    ("uniform_f64", lambda: la.random.uniform((4, 5), dtype=la.float64)),
    ("rand", lambda: la.rand(2, 3, 4)),
    ("randint", lambda: la.random.randint(-3, 9, (10,))),
    ("bernoulli", lambda: la.random.bernoulli(0.3, (50,))),
    ("permutation", lambda: la.random.permutation(12)),
    ("bits", lambda: la.random.bits((5,))),
    ("init_normal", lambda: la.nn.init.normal((8, 8), std=0.1)),
]


def test_same_numbers_on_every_device():
    """Bit for bit, floats too: the generator's log and cosine are built from correctly
    rounded operations (compiler/primitives/portable_math.py), not each device's own."""
    results = {}
    for name in _EVERY_DEVICE:
        with la.config.override(device=name):
            la.random.seed(99)
            results[name] = [fn().numpy() for _, fn in _DRAW_TABLE]
    first, *others = _EVERY_DEVICE
    for other in others:
        for (label, _), a, b in zip(_DRAW_TABLE, results[first], results[other]):
            assert a.dtype == b.dtype and a.shape == b.shape, label
            assert a.tobytes() == b.tobytes(), f"{label}: {first} and {other} differ"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_portable_log_and_cosine_are_accurate(dtype):
    """Within 2 ulp of NumPy's float64 log and 3 ulp of its cos over the generator's
    domains: (0, 1] and [0, 1); compiled, the very bits of the NumPy reference."""
    from lazyarray.compiler.primitive import apply
    eps = np.finfo(dtype).eps
    x = np.concatenate([np.linspace(2.0 ** -52, 1, 20001), 2.0 ** -np.arange(0, 53)])
    x = x.astype(dtype)
    x = x[x > 0]
    u = np.linspace(0, 1, 40001, endpoint=False).astype(dtype)
    logs, cosines = [], []
    for name in ("cpu", "interpreter"):
        with la.config.override(device=name):
            logs.append(lift(lambda v: apply("portable_log", v))(la.asarray(x)).numpy())
            cosines.append(lift(lambda v: apply("portable_cos_two_pi", v))(la.asarray(u)).numpy())
    assert logs[0].tobytes() == logs[1].tobytes()
    assert cosines[0].tobytes() == cosines[1].tobytes()
    want = np.log(x.astype(np.float64))
    assert logs[0].dtype == dtype
    assert np.all(np.abs(logs[0] - want) <= 2 * eps * np.abs(want) + np.finfo(dtype).tiny)
    want = np.cos(2 * np.pi * u.astype(np.float64))
    assert np.abs(cosines[0] - want).max() <= 3 * eps


def test_successive_calls_differ_and_key_advances_lazily(device):
    la.random.seed(0)
    a = la.random.uniform((16,))
    key = la.random.key()
    assert not key.is_materialized            # advanced inside the graph, not on the host
    b = la.random.uniform((16,))
    assert not np.array_equal(a.numpy(), b.numpy())
    assert key.is_materialized and key is la.random.key()


def test_numbers_do_not_depend_on_where_syncs_fall(device):
    la.random.seed(21)
    a, b = la.random.normal((6,)), la.random.uniform((4,))
    together = a.numpy(), b.numpy()
    la.random.seed(21)
    a = la.random.normal((6,)).numpy()
    b = la.random.uniform((4,)).numpy()
    np.testing.assert_array_equal(together[0], a)
    np.testing.assert_array_equal(together[1], b)


def test_many_calls_between_syncs(device):
    la.random.seed(4)
    draws = [la.random.bits((3,)) for _ in range(40)]      # a chain of 40 state advances
    values = np.stack([d.numpy() for d in draws])
    assert len({tuple(v) for v in values}) == 40


def test_uniform_moments(device):
    la.random.seed(7)
    u = la.random.uniform((20000,)).numpy()
    assert u.dtype == np.float32 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01
    assert abs(u.var() - 1 / 12) < 0.005
    v = la.random.uniform((2000,), low=-2.0, high=3.0).numpy()
    assert v.min() >= -2.0 and v.max() < 3.0 and abs(v.mean() - 0.5) < 0.2


def test_uniform_float64_uses_more_bits(device):
    la.random.seed(3)
    u = la.random.uniform((4000,), dtype=la.float64).numpy()
    assert u.dtype == np.float64 and 0.0 <= u.min() and u.max() < 1.0
    # 52 random mantissa bits: the values are not all float32-representable
    assert np.any(u != u.astype(np.float32).astype(np.float64))


def test_normal_moments(device):
    la.random.seed(11)
    z = la.random.normal((20000,)).numpy()
    assert np.isfinite(z).all()
    assert abs(z.mean()) < 0.04
    assert abs(z.std() - 1.0) < 0.03
    assert abs(((z - z.mean()) ** 3).mean()) < 0.1        # symmetric
    assert abs((z ** 4).mean() - 3.0) < 0.25             # Gaussian kurtosis
    w = la.random.normal((5000,), mean=2.0, std=0.5).numpy()
    assert abs(w.mean() - 2.0) < 0.05 and abs(w.std() - 0.5) < 0.03


def test_randint_range_and_frequencies(device):
    la.random.seed(5)
    r = la.random.randint(-3, 7, (10000,)).numpy()
    assert r.dtype == np.int64 and r.min() == -3 and r.max() == 6
    counts = np.bincount(r + 3, minlength=10)
    assert np.all(np.abs(counts - 1000) < 150)
    with pytest.raises(ValueError, match="low < high"):
        la.random.randint(4, 4, (3,))


def test_bernoulli_and_permutation(device):
    la.random.seed(8)
    b = la.random.bernoulli(0.3, (10000,)).numpy()
    assert b.dtype == np.bool_ and abs(b.mean() - 0.3) < 0.02
    p = la.random.permutation(50).numpy()
    assert sorted(p.tolist()) == list(range(50)) and p.tolist() != list(range(50))
    x = la.asarray(np.arange(20, dtype=np.float32).reshape(10, 2))
    shuffled = la.random.permutation(x).numpy()
    assert sorted(shuffled[:, 0].tolist()) == list(range(0, 20, 2))
    np.testing.assert_array_equal(shuffled[:, 1], shuffled[:, 0] + 1)


def test_dropout_step_compiles_once(device, clean_metrics):
    la.random.seed(0)
    x = la.asarray(np.ones((64, 32), np.float32))
    la.sync()
    masks = []
    for _ in range(5):
        y = la.nn.functional.dropout(x, 0.25)
        masks.append(y.numpy() != 0)
    assert clean_metrics.cache_misses == 1 and clean_metrics.cache_hits == 4
    assert not np.array_equal(masks[0], masks[1])
    kept = np.mean(masks)
    assert abs(kept - 0.75) < 0.03
    np.testing.assert_allclose(y.numpy()[masks[-1]], 1 / 0.75, rtol=1e-6)


def test_errors_name_the_function(device):
    with pytest.raises(TypeError, match="normal: dtype must be a floating-point"):
        la.random.normal((3,), dtype=la.int32)
    with pytest.raises(ValueError, match="negative dimensions"):
        la.random.uniform((-1, 2))
    with pytest.raises(TypeError, match="seed"):
        la.random.seed(1.5)


# ---- the generator fuses -------------------------------------------------------------

def test_random_numbers_fuse_into_their_consumer():
    """The README's first example: normal numbers then (3x^2 + 1).mean(axis=1) are one
    kernel with no temporary of x's size; the traced program shows the generator as two
    named ops (one Threefry call, its two words), not ~200 integer ops, and Box-Muller's
    portable log and cosine as one named op each, not ~130 lines of float ops."""
    import re
    with la.config.override(device="cpu"):
        x = la.random.normal((64, 128))
        y = (3 * x**2 + 1).mean(axis=1)
        del x
        hlo = la.debug.ir(y, "hlo")
        assert hlo.count(" threefry2x32(") == 2 and len(hlo.splitlines()) < 80   # was 212
        assert hlo.count(" portable_log(") == 1 and hlo.count(" portable_cos_two_pi(") == 1
        optimized = la.debug.ir(y, "optimized_hlo")
        assert "// 1 kernel:" in optimized and "threefry2x32 x2" in optimized
        peak = int(re.search(r"at their peak: (\d+) bytes", optimized).group(1))
        assert peak < 64 * 128 * 4 // 8
        u = la.random.uniform((33, 7))
        assert "// 1 kernel:" in la.debug.ir(u.sum(), "optimized_hlo")


def test_fused_random_numbers_equal_the_interpreters():
    results = []
    for device in ("cpu", "interpreter"):
        with la.config.override(device=device):
            la.random.seed(5)
            x = la.random.normal((64, 128))
            results.append(((3 * x**2 + 1).mean(axis=1).numpy(),
                            la.random.uniform((33, 7), dtype=la.float64).sum().numpy()))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)


@pytest.mark.parametrize("n", [1, 5, 8])
def test_bits_follow_their_documented_layout(n):
    """Word i < half is word 0 of the call (i, counter), word i >= half word 1 of the call
    (i - half, counter): the numbers a seed gave before the generator was one op."""
    from lazyarray.compiler.primitives.random_bits import _reference
    key = np.array([0x13198A2E, 0x03707344], np.uint32)
    counter = np.uint32(9)
    k = la.asarray(key)
    c = la.asarray(np.array(counter))
    got = lift(lambda k, c: gen.bits(k, (n,), c))(k, c).numpy()
    half = (n + 1) // 2
    i = np.arange(half, dtype=np.uint32)
    full = np.full(half, counter, np.uint32)
    words = [_reference(np.full(half, key[0]), np.full(half, key[1]), i, full, w) for w in (0, 1)]
    np.testing.assert_array_equal(got, np.concatenate(words)[:n])
