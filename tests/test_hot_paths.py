"""The per-step hot paths keep their results while doing less: capture keys of equal graphs
are equal (one flat tuple each), the autodiff walk visits shared subgraphs once,
the optimizer's hyper-parameters are broadcast once per shape, and a donated weight's
memory is taken over by the program rather than copied in."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.transforms import autodiff
from lazyarray.compiler.graph import builders
from lazyarray.compiler.graph.trace import capture, describe_key


def _graph(x: la.Tensor, y: la.Tensor) -> la.Tensor:
    z = x
    for _ in range(20):
        z = la.maximum(z * 0.5 + y, x)
    return z


def test_equal_graphs_have_equal_flat_keys() -> None:
    x = la.asarray(np.ones((4, 3), np.float32))
    y = la.asarray(np.full((4, 3), 2.0, np.float32))
    a, b = capture([_graph(x, y)._node]), capture([_graph(x, y)._node])
    assert a.key == b.key and hash(a.key) == hash(b.key)
    # flat: the nodes' fields and positions side by side, no tuple per node (a hit hashes
    # and compares one tuple); the outputs' positions close it
    assert all(not isinstance(e, tuple) or e == () or isinstance(e[0], (int, tuple))
               for e in a.key)
    assert a.key[-1] == a.outputs
    words = describe_key(a.key)
    assert len(words) == len(a.order) + 1
    assert [w[0] == "P" for w in words[:-1]] == [n.buffer is not None for n in a.order]
    ops = [w for w in words[:-1] if isinstance(w[0], tuple)]
    assert [w[0][0] for w in ops] == [n.op for n in a.order if n.operands]
    assert all(w[1] == tuple(a.positions[o] for o in n.operands)
               for w, n in zip(ops, [n for n in a.order if n.operands]))
    other = capture([_graph(x, la.asarray(np.ones((4, 1), np.float32)))._node])
    assert other.key != a.key


def test_keys_tell_shared_operands_from_equal_ones() -> None:
    """x * x and x * y (y like x) are different programs: positions, not only the
    operands' types, are in the key."""
    x = la.asarray(np.ones(3, np.float32))
    y = la.asarray(np.ones(3, np.float32))
    assert capture([(x * x)._node]).key != capture([(x * y)._node]).key
    assert capture([(x * y)._node]).key == capture([(y * x)._node]).key


def test_capture_places_operands_before_users_once() -> None:
    x = la.asarray(np.ones((5,), np.float32))
    shared = x * 3.0
    out = shared + shared * shared
    cap = capture([out._node, shared._node])
    assert len(cap.order) == len(set(map(id, cap.order)))
    for n in cap.order:
        if n.buffer is None:
            assert all(cap.positions[o] < cap.positions[n] for o in n.operands)
    assert cap.outputs == (cap.positions[out._node], cap.positions[shared._node])


def test_gradient_through_a_diamond_counts_each_path_once() -> None:
    x = la.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    with la.GradientTape() as tape:
        tape.watch(x)
        h = x * x                        # used by two paths that meet again
        loss = la.sum(h * 2.0 + h * 3.0)
    (g,) = tape.gradient(loss, [x])
    np.testing.assert_allclose(g.numpy(), 10 * np.array([1.0, 2.0, 3.0]), rtol=1e-6)


def test_stopped_node_blocks_the_walk() -> None:
    x = la.asarray(np.array([1.0, 2.0], np.float32))
    with la.GradientTape() as tape:
        tape.watch(x)
        loss = la.sum(x * la.stop_gradient(x * x))
    (g,) = tape.gradient(loss, [x])
    np.testing.assert_allclose(g.numpy(), [1.0, 4.0])
    assert autodiff.vjp_graph(x._node, [x._node], builders.full(1, (2,), x._node.dtype))[0] \
        is not None


def test_adam_hyper_parameters_are_broadcast_once_per_shape() -> None:
    params = [la.asarray(np.ones((3, 2), np.float32)), la.asarray(np.ones((3, 2), np.float32))]
    opt = la.optim.Adam(params, lr=0.1)
    with la.config.override(step_sync=False):       # the update's graph left to read
        opt.apply_gradients([la.asarray(np.ones((3, 2), np.float32))] * 2)
    (leaves, wides), = opt._spread.values()         # one entry: one group, one shape
    assert len(wides) == 7 and all(
        n.op == "broadcast_in_dim" and n.shape == (3, 2) and n.operands[0] is leaf
        for n, leaf in zip(wides, leaves))
    for p in params:                                # both updates read those broadcasts
        assert {id(n) for n in _nodes_of(p._node) if n.op == "broadcast_in_dim"} \
            == {id(n) for n in wides}
    np.testing.assert_allclose(params[0].numpy(), params[1].numpy())


def _nodes_of(root):
    seen, stack = {}, [root]
    while stack:
        n = stack.pop()
        if id(n) not in seen:
            seen[id(n)] = n
            stack.extend(n.operands)
    return list(seen.values())


def test_donated_weights_are_updated_in_their_own_memory() -> None:
    la.sync()
    with la.config.override(device="cpu", donate=True):
        rng = np.random.default_rng(0)
        model = la.nn.Linear(128, 256)       # a 128 KiB weight: pooled host memory
        opt = la.optim.SGD(model.parameters(), lr=0.1)
        x = la.asarray(rng.standard_normal((8, 128)).astype(np.float32))
        y = la.asarray(rng.integers(0, 256, 8))
        addresses = []
        for _ in range(4):
            with la.GradientTape() as tape:
                loss = F.cross_entropy(model(x), y)
            opt.apply_gradients(tape.gradient(loss, model.parameters()))
            la.sync()
            addresses.append(np.asarray(model.weight._node.buffer).ctypes.data)
    if la.debug.metrics().donated_buffers == 0:
        pytest.fail("no buffer was donated in a training loop outside any tape")
    # from the second step on, the weight's memory is an earlier program's output: taken
    # over in place (same address), not copied into fresh memory
    assert addresses[1] == addresses[2] == addresses[3]


def test_two_tensors_of_one_value_get_buffers_of_their_own() -> None:
    """Two pending tensors that the compiler makes one value (CSE) each get their own
    buffer object: a later donation judges a buffer by its holders (Adam's two zero
    moments as one shared array were kept from donation at the first step only, and the
    second step recompiled)."""
    with la.config.override(device="cpu"):
        x = la.asarray(np.arange(8, dtype=np.float32))
        a, b = la.zeros_like(x), la.zeros_like(x)      # as an optimizer's two moments
        la.sync()
        ba, bb = a._node.buffer, b._node.buffer
        assert ba is not bb
        assert sys.getrefcount(ba) == sys.getrefcount(bb)
        np.testing.assert_array_equal(ba, np.zeros(8, np.float32))
        np.testing.assert_array_equal(bb, np.zeros(8, np.float32))
