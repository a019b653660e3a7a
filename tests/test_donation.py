"""Donation: a sync may let its program overwrite the buffers of parameter leaves that
nothing but the graph still references (an optimizer's old parameters and state), never
one the user still holds, never while a tape records; a donated buffer raises when read;
results are the same with and without donation."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray import runtime
from lazyarray.compiler import dtypes as D
from lazyarray.compiler.node import Node
from lazyarray.compiler.trace import DonatedBuffer, capture


@pytest.fixture
def cpu():
    la.sync()
    with la.config.override(device="cpu"):
        yield
    la.config.donate = True


def _train(donate: bool, steps: int = 4) -> tuple:
    la.config.donate = donate
    rng = np.random.default_rng(0)
    model = la.nn.Sequential(la.nn.Linear(64, 128), la.nn.ReLU(), la.nn.Linear(128, 8))
    model.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.1
                           for n, p in model.named_parameters()})
    opt = la.optim.Adam(model.parameters(), lr=1e-2)
    x = la.asarray(rng.standard_normal((32, 64)).astype(np.float32))
    y = la.asarray(rng.integers(0, 8, 32))
    before = la.debug.metrics().donated_buffers
    losses = []
    for _ in range(steps):
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, model.parameters()))
        losses.append(loss.item())
    params = [p.numpy() for p in model.parameters()]
    return losses, params, la.debug.metrics().donated_buffers - before


def test_training_donates_and_matches_no_donation(cpu) -> None:
    losses_d, params_d, donated = _train(True)
    losses_n, params_n, none = _train(False)
    assert donated >= 3 * 4 * 3          # parameters and both Adam states, most steps
    assert none == 0
    assert losses_d == losses_n
    for a, b in zip(params_d, params_n):
        np.testing.assert_array_equal(a, b)


def test_a_value_the_user_still_holds_is_never_donated(cpu) -> None:
    t = la.asarray(np.arange(1 << 15, dtype=np.float32))
    keep = t                              # a second name: the same tensor
    old = t._node
    runtime.offer_donation(old)
    t = t * 2 + 1                         # rebinding alone: `keep` still holds the old node
    t.numpy()
    assert old.buffer is not None and not isinstance(old.buffer, DonatedBuffer)
    np.testing.assert_array_equal(keep.numpy(), np.arange(1 << 15, dtype=np.float32))


def test_a_buffer_the_user_viewed_is_never_donated(cpu) -> None:
    w = la.asarray(np.ones((256, 256), np.float32))
    w._assign((w * 3)._node)
    w.numpy()                             # w now holds a program output
    view = np.asarray(w)[:2]              # the user reads the buffer without a copy
    runtime.offer_donation(w._node)
    w._assign((w + 1)._node)
    w.numpy()
    np.testing.assert_array_equal(view, np.full((2, 256), 3, np.float32))


def test_donated_buffer_read_raises(cpu) -> None:
    p = la.asarray(np.ones((128, 128), np.float32))
    p.numpy()
    old = p._node
    runtime.offer_donation(old)
    p._assign((p - 0.5)._node)
    cap = capture([p._node], donate=runtime.OFFERED)
    assert cap.donated == frozenset()     # `old` is referenced here: not donatable
    del cap
    ref_count_free = la.debug.metrics().donated_buffers
    import weakref
    w = weakref.ref(old)
    del old
    p.numpy()
    assert la.debug.metrics().donated_buffers == ref_count_free + 1
    assert w() is None                    # nothing could read it: it is gone
    gone = Node("parameter", (), (2,), D.float32, {}, buffer=DonatedBuffer((2,), D.float32))
    t = la.Tensor._wrap(gone, runtime.get_device("cpu"))
    with pytest.raises(RuntimeError, match="donated"):
        t.numpy()
    with pytest.raises(RuntimeError, match="donated"):
        (t + 1).numpy()
    np.testing.assert_array_equal(p.numpy(), np.full((128, 128), 0.5, np.float32))


def test_no_donation_while_a_tape_records(cpu) -> None:
    w = la.asarray(np.ones((64, 64), np.float32))
    before = la.debug.metrics().donated_buffers
    with la.GradientTape() as tape:
        tape.watch(w)
        runtime.offer_donation(w._node)
        w._assign((w * 2)._node)
        w.numpy()
    assert la.debug.metrics().donated_buffers == before


def test_capture_key_includes_the_donation_set() -> None:
    import weakref
    offered = weakref.WeakSet()

    def graph(hold: bool, offer: bool = True):
        a = Node("parameter", (), (3,), D.float32, {}, buffer=np.zeros(3, np.float32))
        if offer:
            offered.add(a)
        u = Node("negative", (a,), (3,), D.float32, {})
        return u, (a if hold else None)
    u, held = graph(False)
    free = capture([u], donate=offered)
    u2, held2 = graph(True)
    kept = capture([u2], donate=offered)
    u3, _ = graph(False, offer=False)
    assert free.donated == {0} and kept.donated == frozenset()
    assert capture([u3], donate=offered).donated == frozenset()     # never offered
    assert free.key != kept.key
    assert capture([u2]).key == kept.key
