"""The walk's record of stopped nodes (`stop_gradient`, a `.grad`, a composite's held
shift): a stopped node is known as such while it lives, its entry goes with it (no
growth over a training loop, and a new node that happens to get a dead one's id is not
taken for it), and the walk treats a stopped node as a leaf."""
from __future__ import annotations

import gc

import numpy as np

import lazyarray as la
from lazyarray.compiler.graph.node import new_node
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.transforms import autodiff


def _op(x=None):
    leaf = new_node("scalar", (), (), D.float32, {}, 1.0) if x is None else x
    return new_node("negate", (leaf,), (), D.float32, {})


def test_a_stopped_node_is_known_while_it_lives_and_forgotten_after():
    before = len(autodiff._STOPPED)
    node = _op()
    copy = autodiff.stop(node)
    assert autodiff.is_stopped(copy) and not autodiff.is_stopped(node)
    assert autodiff.is_stopped(autodiff.mark_stopped(node))
    assert len(autodiff._STOPPED) == before + 2
    del node, copy
    gc.collect()
    assert len(autodiff._STOPPED) == before
    # new nodes, many of them on the dead ones' addresses: none is taken for stopped
    assert not any(autodiff.is_stopped(_op()) for _ in range(1000))


def test_stopped_entries_do_not_pile_up_over_training_steps():
    p = la.asarray(np.ones(3, np.float32)).requires_grad_(True)
    opt = la.optim.SGD([p], lr=0.1)
    sizes = []
    for _ in range(6):
        opt.zero_grad()
        loss = (la.stop_gradient(p * 2) * p).sum()
        loss.backward()
        opt.step()
        loss.item()
        sizes.append(len(autodiff._STOPPED))
    assert sizes[-1] == sizes[2]


def test_the_walk_stops_at_stopped_nodes():
    x = la.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    with la.GradientTape() as tape:
        tape.watch(x)
        y = (la.stop_gradient(x * x) * x).sum()      # d/dx = x*x (the stopped factor)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 4.0, 9.0])
