"""Module-call reuse (lazyarray/nn/module_reuse.py): a module called again is replayed as
one `call` node, with results equal to running forward, and every call whose forward does
something a replay would skip runs forward instead."""
from __future__ import annotations

import logging
import warnings

import numpy as np
import pytest

import lazyarray as la
from lazyarray.nn import module_reuse as MR

nn = la.nn
F = la.nn.functional
RNG = np.random.default_rng(0)
LOG = logging.getLogger("test_module_reuse")


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.fixture(autouse=True)
def _fresh():
    MR.clear()
    with la.config.override(module_reuse=True):
        yield
    MR.clear()


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(4, 8), nn.Linear(8, 3)
        self.scale = 2.0

    def forward(self, x, cache):
        y = self.l2(F.relu(self.l1(x))) * self.scale
        return y, [cache + y.sum()]


def np_mlp(m, x):
    w1, b1, w2, b2 = (t.numpy() for t in (m.l1.weight, m.l1.bias, m.l2.weight, m.l2.bias))
    return (np.maximum(x @ w1.T + b1, 0) @ w2.T + b2) * m.scale


def _replayed(t) -> bool:
    """Whether `t` was made by a replay: one element of a call node."""
    n = t._node
    return n.op == "get_tuple_element" and n.operands[0].op == "call"


def _run(m, xs, cache):
    outs = []
    with la.no_grad():
        for x in xs:
            y, (cache,) = m(la.asarray(x), cache)
            outs.append((y.numpy(), cache.numpy()))
    return outs


def test_second_call_is_one_node_and_equal_to_numpy_and_to_forward():
    m = MLP()
    xs = [rand(2, 4) for _ in range(4)]
    cache = la.asarray(np.zeros(3, np.float32))
    la.sync()                               # the weights' initial values
    before = la.debug.metrics().compiles
    with la.no_grad():
        y, (cache,) = m(la.asarray(xs[0]), cache)
        assert _replayed(y)                 # the first call's outputs are the replay's too
        y.numpy()
        y2, (cache2,) = m(la.asarray(xs[1]), cache)
        assert _replayed(y2) and _replayed(cache2)
        # forward did not run: one call node and its elements, nothing else recorded
        assert MR.COUNTS["hits"] >= 1
        np.testing.assert_allclose(y2.numpy(), np_mlp(m, xs[1]), rtol=1e-5, atol=1e-5)
    assert la.debug.metrics().compiles - before <= 1      # one program for the shape
    m2 = MLP()
    m2.load_state_dict(m.state_dict())
    reused = _run(m, xs, la.asarray(np.zeros(3, np.float32)))
    with la.config.override(module_reuse=False):
        plain = _run(m2, xs, la.asarray(np.zeros(3, np.float32)))
    for (a, c), (b, d) in zip(reused, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6)
        np.testing.assert_allclose(c, d, rtol=1e-5)


def test_off_switch_runs_forward():
    m = MLP()
    with la.config.override(module_reuse=False):
        _run(m, [rand(2, 4)] * 3, la.asarray(np.zeros(3, np.float32)))
    assert MR.COUNTS == {"hits": 0, "stores": 0, "doubts": 0} or not MR._TABLE


# ---- what a replay would skip: forward runs ----------------------------------------------

class ReadsValue(nn.Module):
    def forward(self, x):
        return x * float(x.sum())            # a value read while tracing


class Prints(nn.Module):
    def forward(self, x):
        print("called")
        return x + 1.0


class Warns(nn.Module):
    def forward(self, x):
        warnings.warn("called")
        return x + 1.0


class Logs(nn.Module):
    def forward(self, x):
        LOG.warning("called")
        return x + 1.0


class Draws(nn.Module):
    def forward(self, x):
        return x + la.random.normal(x.shape)


class Counts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1                      # the key changes while tracing
        return x * 2.0


SEEN: list = []


class Appends(nn.Module):
    def forward(self, x):
        SEEN.append(1)                       # a global list it reads grows
        return x * 2.0


def _calls(m, xs):
    with la.no_grad():
        return [m(la.asarray(x)).numpy() for x in xs]


def test_a_value_read_in_forward_is_read_at_every_call():
    xs = [rand(3) for _ in range(3)]
    for x, y in zip(xs, _calls(ReadsValue(), xs)):
        np.testing.assert_allclose(y, x * x.sum(), rtol=1e-5)
    assert MR.COUNTS["hits"] == 0


def test_print_in_forward_prints_at_every_call(capsys):
    _calls(Prints(), [rand(3)] * 3)
    assert capsys.readouterr().out.count("called") == 3
    assert MR.COUNTS["hits"] == 0


def test_warnings_and_logging_in_forward_happen_at_every_call(caplog):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _calls(Warns(), [rand(3)] * 3)
    assert len(seen) == 3
    with caplog.at_level(logging.WARNING, logger="test_module_reuse"):
        _calls(Logs(), [rand(3)] * 3)
    assert caplog.text.count("called") == 3
    assert MR.COUNTS["hits"] == 0


def test_random_draws_differ_at_every_call():
    ys = _calls(Draws(), [np.zeros(5, np.float32)] * 3)
    assert not np.array_equal(ys[1], ys[2])
    assert MR.COUNTS["hits"] == 0


def test_side_effects_on_attributes_and_globals_happen_at_every_call():
    m = Counts()
    _calls(m, [rand(3)] * 3)
    assert m.calls == 3
    for _ in range(3):                       # the attribute as it was before each call
        m.calls = 0
        _calls(m, [rand(3)])
        assert m.calls == 1
    SEEN.clear()
    _calls(Appends(), [rand(3)] * 3)
    assert len(SEEN) == 3
    assert MR.COUNTS["hits"] == 0


class WritesArgument(nn.Module):
    def forward(self, x, log, pos):
        log[pos] = x.sum()                   # an in-place update of an argument
        return x * 2.0


def test_in_place_update_of_an_argument_is_replayed():
    m = WritesArgument()
    log = la.asarray(np.zeros(4, np.float32))
    log.numpy()
    xs = [rand(3) for _ in range(4)]
    with la.no_grad():
        for k, x in enumerate(xs):
            y = m(la.asarray(x), log, la.asarray(np.int64(k)))
            np.testing.assert_allclose(y.numpy(), 2 * x, rtol=1e-6)
    np.testing.assert_allclose(log.numpy(), [x.sum() for x in xs], rtol=1e-5)
    assert MR.COUNTS["hits"] >= 2


class Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", la.asarray(np.zeros(3, np.float32)))

    def forward(self, x):
        self.total[...] = self.total + x     # a buffer updated in place
        return self.total * 1.0


def test_in_place_update_of_a_buffer_is_replayed():
    m = Buffered()
    m.total.numpy()
    xs = [rand(3) for _ in range(4)]
    with la.no_grad():
        ys = [m(la.asarray(x)).numpy() for x in xs]
    np.testing.assert_allclose(ys[-1], sum(xs), rtol=1e-5)
    np.testing.assert_allclose(m.total.numpy(), sum(xs), rtol=1e-5)
    assert MR.COUNTS["hits"] >= 2


# ---- what changes between calls is seen ---------------------------------------------------

def test_changed_weights_attributes_submodules_and_modes_are_seen():
    m = MLP()
    x = rand(2, 4)
    cache = la.asarray(np.zeros(3, np.float32))
    cache.numpy()

    def check():
        with la.no_grad():
            y, _ = m(la.asarray(x), cache)
            np.testing.assert_allclose(y.numpy(), np_mlp(m, x), rtol=1e-5, atol=1e-5)

    check(); check()
    opt = la.optim.SGD(m.parameters(), lr=0.5)          # an optimizer step
    loss = m(la.asarray(x), cache)[0].sum()
    loss.backward()
    opt.step()
    check()
    m.load_state_dict({k: v + 1 for k, v in m.state_dict().items()})    # new values
    check()
    m.scale = 3.0                                       # a Python attribute
    check()
    m.l2 = nn.Linear(8, 3)                              # a replaced submodule
    check()
    m.eval(); check(); m.train(); check()
    assert MR.COUNTS["hits"] >= 1


class Dropped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x) * 1.0


def test_eval_mode_is_replayed_train_mode_draws_at_every_call():
    m = Dropped()
    x = np.ones(64, np.float32)
    m.eval()
    ys = _calls(m, [x] * 3)
    np.testing.assert_array_equal(ys[2], x)
    assert MR.COUNTS["hits"] >= 1
    m.train()
    ys = _calls(m, [x] * 3)
    assert not np.array_equal(ys[1], ys[2])


def test_training_with_gradients_is_not_replayed():
    m = MLP()
    x = la.asarray(rand(2, 4))
    cache = la.asarray(np.zeros(3, np.float32))
    for _ in range(3):
        y, _ = m(x, cache)
        y.sum().backward()
        assert not _replayed(y)
    assert m.l1.weight.grad is not None
    assert MR.COUNTS["hits"] == 0


class TwoInputs(nn.Module):
    def forward(self, a, b):
        return a * 2.0 + b


def test_one_tensor_passed_twice_then_two_tensors():
    m = TwoInputs()
    a, b = la.asarray(rand(3)), la.asarray(rand(3))
    a.numpy(), b.numpy()
    with la.no_grad():
        m(a, a).numpy()
        np.testing.assert_allclose(m(a, a).numpy(), 3 * a.numpy(), rtol=1e-6)
        np.testing.assert_allclose(m(a, b).numpy(), 2 * a.numpy() + b.numpy(), rtol=1e-6)


class Fails(nn.Module):
    def forward(self, x, bad):
        if bad:
            raise RuntimeError("forward failed")
        return x + 1.0


def test_a_failing_forward_raises_and_later_calls_are_right():
    m = Fails()
    x = la.asarray(rand(3))
    with la.no_grad():
        with pytest.raises(RuntimeError, match="forward failed"):
            m(x, True)
        for _ in range(3):
            np.testing.assert_allclose(m(x, False).numpy(), x.numpy() + 1, rtol=1e-6)
        with pytest.raises(RuntimeError, match="forward failed"):
            m(x, True)


class Reversed(nn.Module):
    """Returns its results in the reverse of the order it made them."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 3)

    def forward(self, x, cache):
        new_cache = cache + x.sum()
        return self.l1(x), new_cache


@pytest.mark.parametrize("make", [MLP, Reversed])
def test_one_compile_per_shape_in_a_decoding_loop(make):
    """The first call's graph (rebound to the replay's call) is the later calls' graph:
    its tensors pending in the same order, so the sync's program is the same."""
    m = make()
    cache = la.asarray(np.zeros(3, np.float32))
    la.sync()
    with la.no_grad():
        y, cache = m(la.asarray(rand(2, 4)), cache)
        cache = cache[0] if isinstance(cache, list) else cache
        y.numpy()
        before = la.debug.metrics().cache_misses
        for _ in range(5):
            y, cache = m(la.asarray(rand(2, 4)), cache)
            cache = cache[0] if isinstance(cache, list) else cache
            y.numpy()
    assert la.debug.metrics().cache_misses == before


def test_a_call_inside_vmap_and_a_loop_body():
    m = MLP()
    xs = rand(5, 2, 4)
    cache = la.asarray(np.zeros(3, np.float32))
    cache.numpy()
    with la.no_grad():
        m(la.asarray(xs[0]), cache)[0].numpy()          # remembered
        ys = la.vmap(lambda x: m(x, cache)[0])(la.asarray(xs)).numpy()
        for k in range(5):
            np.testing.assert_allclose(ys[k], np_mlp(m, xs[k]), rtol=1e-5, atol=1e-5)
        total = la.fori_loop(0, 3, lambda i, c: m(la.asarray(xs[0]), c)[1][0], cache)
        y = np_mlp(m, xs[0]).sum()
        np.testing.assert_allclose(total.numpy(), 3 * y, rtol=1e-4)


class Increments(nn.Module):
    def forward(self, x, count):
        return x * 2.0, count + 1.0


def test_a_constant_input_not_yet_computed_is_not_frozen():
    """`la.zeros(3) + 1.0` is folded into a constant while recording: remembered from
    such a call, a replay would ignore its input."""
    m = Increments()
    x = la.asarray(rand(3))
    count = la.zeros(3)
    seen = []
    with la.no_grad():
        for _ in range(4):
            _, count = m(x, count)
            seen.append(count.numpy()[0])
    assert seen == [1, 2, 3, 4]
    assert MR.COUNTS["hits"] >= 1


def test_a_remembered_model_is_freed_and_a_cast_is_seen():
    import gc
    import weakref
    m = MLP()
    cache = la.asarray(np.zeros(3, np.float32))
    x = rand(2, 4)
    la.sync()
    with la.no_grad():
        first = weakref.ref(m(la.asarray(x), cache)[0])   # remembered: its entry keeps no output
        gc.collect()
        assert first() is None
        m(la.asarray(x), cache)[0].numpy()
        m.to(dtype=la.float64)                          # every weight rebound as float64
        y, _ = m(la.asarray(x.astype(np.float64)), cache.to(dtype=la.float64))
        assert y.dtype == la.float64
        np.testing.assert_allclose(y.numpy(), np_mlp(m, x), rtol=1e-6)
    assert MR.COUNTS["hits"] >= 1
    ref = weakref.ref(m)
    del m, y
    gc.collect()
    assert ref() is None


class Inverts(nn.Module):
    def forward(self, a):
        return la.linalg.inv(a) * 2.0


def test_a_failing_replayed_computation_raises_at_the_call_and_later_calls_are_right():
    m = Inverts()
    good = la.asarray(np.eye(3, dtype=np.float32) * 2)
    bad = la.asarray(np.zeros((3, 3), np.float32))
    la.sync()
    with la.no_grad():
        for a in (good, good, bad, good, bad, good):
            if a is bad:
                with pytest.raises(np.linalg.LinAlgError, match="singular"):
                    m(a).numpy()
            else:
                np.testing.assert_allclose(m(a).numpy(), np.eye(3), rtol=1e-6)
    assert MR.COUNTS["hits"] >= 4


class Weighted(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = la.asarray(np.array([1.0, 2.0, 3.0], np.float32))

    def forward(self, x):
        return (x * self.w).sum() * 2.0


def test_gradients_through_a_remembered_module():
    m = Weighted()
    x = la.asarray(np.ones(3, np.float32))
    la.sync()
    m(x).numpy(), m(x).numpy()                      # remembered, then replayed
    assert MR.COUNTS["hits"] == 1
    np.testing.assert_allclose(la.grad(lambda v: m(v))(x).numpy(), [2.0, 4.0, 6.0])


def test_a_module_whose_shapes_change_at_every_call_is_left_alone_then_tried_again():
    m = TwoInputs()
    with la.no_grad():
        for n in range(1, 14):                       # a growing sequence: every call new
            a = la.asarray(np.ones(n, np.float32))
            np.testing.assert_allclose(m(a, a).numpy(), 3.0)
        assert MR.COUNTS["stores"] == MR.MAX_MISSES
        a = la.asarray(np.ones(3, np.float32))
        b = la.asarray(np.ones(3, np.float32))
        for _ in range(MR.RETRY_EVERY + 2):          # then one shape: tried again
            np.testing.assert_allclose(m(a, b).numpy(), 3.0)
    assert MR.COUNTS["hits"] >= 1


def test_the_call_primitive_differentiates_as_its_computation():
    """`call`'s vjp (the computation inlined and differentiated), in float64 against
    central differences and the closed form."""
    from lazyarray.compiler.hlo.computation import build_computation, placeholders
    from lazyarray.compiler.primitive import apply
    from lazyarray.tensor import Tensor
    x0, y0 = RNG.standard_normal(3), RNG.standard_normal(3)
    ph = placeholders([la.asarray(x0)._node, la.asarray(y0)._node])
    comp = build_computation("c", ph, [apply("multiply", ph[0], ph[1]), apply("sine", ph[0])])

    def f(a, b):
        c = apply("call", a._node, b._node, computation=comp)
        p, q = (Tensor._wrap(apply("get_tuple_element", c, index=k), a._state) for k in (0, 1))
        return (p * 2.0 + q * q).sum()
    gx, gy = la.grad(f, argnums=(0, 1))(la.asarray(x0), la.asarray(y0))
    np.testing.assert_allclose(gx.numpy(), 2 * y0 + 2 * np.sin(x0) * np.cos(x0), rtol=1e-10)
    np.testing.assert_allclose(gy.numpy(), 2 * x0, rtol=1e-10)
    t, eps = RNG.standard_normal(3), 1e-6
    fd = (f(la.asarray(x0 + eps * t), la.asarray(y0)).item()
          - f(la.asarray(x0 - eps * t), la.asarray(y0)).item()) / (2 * eps)
    np.testing.assert_allclose(float(gx.numpy() @ t), fd, rtol=1e-6)


def test_a_model_remembered_again_shares_its_computation():
    """Remembered again under another setting (the models bench times a first call with
    the disk cache off), the model's second entry holds the first entry's computation
    itself: a sync compares a call node's computation with its template's at every call,
    an identity check for one object (a walk over two equal ones: ~1 ms a token)."""
    m = MLP()
    cache = la.asarray(np.zeros(3, np.float32))
    la.sync()
    with la.no_grad():
        with la.config.override(cache_dir="off"):
            y, (cache,) = m(la.asarray(rand(2, 4)), cache)
            y.numpy()
        for _ in range(2):
            y, (cache,) = m(la.asarray(rand(2, 4)), cache)
            y.numpy()
    entries = [e for _, slot in MR._TABLE.values() for e in slot.entries]
    assert len(entries) == 2
    assert entries[0].computation is entries[1].computation


def test_hlo_modules_hashed_compare_by_their_kept_keys():
    """Two equal modules, both hashed (attribute values), are equal by the keys kept when
    hashed; one instruction's attribute apart, they differ."""
    from lazyarray.compiler.hlo.module import Instruction, Module
    f32 = la.float32

    def mod(k):
        return Module("m", [Instruction("parameter", (), (3,), f32, {"number": 0}),
                            Instruction("parameter", (), (3,), f32, {"number": k})], [0])
    a, b, c = mod(1), mod(1), mod(2)
    assert hash(a) == hash(b) and a == b and "_keys" in a.__dict__
    hash(c)
    assert a != c and b != c
