"""A loop's sync skips the capture when its graph matches the last one synced at the same
line (`compiler/trace.py` Template): the template must accept exactly the graphs whose
capture key is its own, so that no graph runs another's program. Checked on random graphs
against the keys themselves, and end to end on what a wrong hit would get wrong: scalars,
kept constants, shapes, dtypes, shared operands, nodes computed since they were recorded,
donated leaves."""
from __future__ import annotations

import random

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler import dtypes as D
from lazyarray.compiler.node import Node, kept_constant, parameter_leaf, scalar_leaf
from lazyarray.compiler.trace import Template, capture


# ---- the template against the key, on random graphs ------------------------------------

def _random_graph(seed: int, leaves: list, values: random.Random) -> list:
    """Roots of a small random graph over `leaves` (so that graphs can share a leaf):
    unary and binary ops, operands drawn from everything made so far (sharing), new
    scalars and kept constants among them. One `seed` is one structure, made of new
    nodes at each call, its scalars' values drawn from `values`."""
    rng = random.Random(seed)
    made: list = []
    for _ in range(rng.randint(1, 6)):
        pool = made + leaves
        kind = rng.random()
        if kind < 0.15:            # a scalar's dtype shows only in its own entry
            dtype = values.choice([D.float32, D.float64])
            made.append(Node("convert", (scalar_leaf(values.choice([2.0, 3.0]), dtype),), (),
                             D.float32, {"dtype": D.float32}))
        elif kind < 0.25:
            made.append(kept_constant(values.choice([0.0, 1.0]), D.float32))
        elif kind < 0.35:          # the leaf's shape shows only in the leaf's own entry
            a = rng.choice([n for n in pool if n.shape] or pool)
            made.append(Node("reduce", (a,), (), a.dtype, {"axes": tuple(range(len(a.shape))),
                                                           "kind": "sum"}))
        elif kind < 0.5:
            a = rng.choice(pool)
            made.append(Node(rng.choice(["negate", "exp"]), (a,), a.shape, a.dtype, {}))
        else:
            a = rng.choice(pool)
            same = [b for b in pool if b.shape == a.shape and b.dtype is a.dtype]
            # (a reduce of a 0-d value has no axes: equal shapes only)
            made.append(Node(rng.choice(["add", "multiply"]), (a, rng.choice(same)),
                             a.shape, a.dtype, {}))
    ops = [n for n in made if n.operands] or made
    return rng.sample(ops, rng.randint(1, min(2, len(ops))))


def _leaves(shapes: tuple) -> list:
    out = [parameter_leaf(np.zeros(s, np.float32), s, D.float32) for s in shapes]
    return out + [scalar_leaf(1.5, D.float32)]


def test_a_template_accepts_exactly_the_graphs_of_its_key() -> None:
    rng = random.Random(7)
    # leaf sets alike in type (their graphs share keys) and one of other shapes
    sets = [_leaves(((3,), (3,))), _leaves(((3,), (3,))), _leaves(((3,), (2,)))]
    accepted = rejected = 0
    for _ in range(3000):
        seed = rng.randrange(60)
        first = _random_graph(seed, rng.choice(sets), rng)
        # half the time the same structure again (new nodes, other scalar values)
        second = _random_graph(seed if rng.random() < 0.5 else rng.randrange(60),
                               rng.choice(sets), rng)
        a, b = capture(first), capture(second)
        bound = Template(a).bind(second)
        assert (bound is not None) == (a.key == b.key)
        if bound is None:
            rejected += 1
            continue
        accepted += 1
        assert bound.order == b.order
        assert [id(v) for v in bound.args] == [id(v) for v in b.args]
        assert bound.positions == b.positions
    assert accepted > 300 and rejected > 300     # both answers were put to the test


def _chain(x: Node, y: Node, shared: bool) -> Node:
    t = Node("multiply", (x, y), x.shape, x.dtype, {})
    u = t if shared else Node("multiply", (x, y), x.shape, x.dtype, {})
    return Node("add", (t, u), x.shape, x.dtype, {})


def test_a_template_tells_shared_nodes_from_equal_ones() -> None:
    x, y = (parameter_leaf(np.zeros(3, np.float32), (3,), D.float32) for _ in range(2))
    shared, apart = _chain(x, y, True), _chain(x, y, False)
    assert Template(capture([shared])).bind([apart]) is None
    assert Template(capture([apart])).bind([shared]) is None
    assert Template(capture([shared])).bind([_chain(x, y, True)]) is not None
    # x * y and x * x: one leaf in two places is not two leaves
    xy = Node("multiply", (x, y), (3,), D.float32, {})
    xx = Node("multiply", (x, x), (3,), D.float32, {})
    assert Template(capture([xy])).bind([xx]) is None
    assert Template(capture([xx])).bind([xy]) is None


def test_a_template_refuses_what_changed_since_it_was_made() -> None:
    x = parameter_leaf(np.zeros(3, np.float32), (3,), D.float32)
    mid = Node("negate", (x,), (3,), D.float32, {})
    out = Node("exp", (mid,), (3,), D.float32, {})
    t = Template(capture([out]))
    assert t.bind([out]) is not None
    mid.buffer = np.ones(3, np.float32)          # computed since: now a leaf of the graph
    assert t.bind([out]) is None
    mid.buffer = None
    x.buffer = runtime.DonatedBuffer((3,), D.float32)
    assert t.bind([out]) is None                 # the capture raises for it, not the template
    with pytest.raises(RuntimeError, match="donated"):
        capture([out])
    x.buffer = np.zeros(3, np.float32)
    assert t.bind([out]) is not None
    wide = Node("reduce", (out,), (), D.float32, {"axes": (0,), "kind": "sum"})
    other = Node("reduce", (out,), (), D.float32, {"axes": (0,), "kind": "max"})
    assert Template(capture([wide])).bind([other]) is None
    with pytest.raises(ValueError, match="donated"):
        Template(_donating_capture())


def _donating_capture():
    leaf = parameter_leaf(np.zeros(3, np.float32), (3,), D.float32)
    import weakref
    offered = weakref.WeakSet([leaf])
    user = Node("negate", (leaf,), (3,), D.float32, {})
    del leaf
    cap = capture([user], donate=offered)
    assert cap.donated
    return cap


# ---- end to end: a loop syncing at one line ------------------------------------------

@pytest.fixture
def counted_captures(monkeypatch):
    calls = []
    real = runtime.capture
    runtime.clear_caches()       # no program or template of an earlier test

    def counting(nodes, donate=None):
        calls.append(len(nodes))
        return real(nodes, donate)
    monkeypatch.setattr(runtime, "capture", counting)
    return calls


def _read(a, b, scalar):
    return float(((a * scalar + b) * 2.5).sum())      # one line: one site for every call


def _expect(a, b, scalar):
    return float(((np.asarray(a, np.float64) * scalar + np.asarray(b, np.float64)) * 2.5).sum())


def test_a_loop_at_one_line_captures_twice_then_matches(counted_captures):
    rng = np.random.default_rng(0)
    data = [rng.standard_normal(16).astype(np.float32) for _ in range(6)]
    for k in range(6):
        a, b = la.asarray(data[k]), la.asarray(data[(k + 1) % 6])
        assert _read(a, b, 1.5 + k) == pytest.approx(_expect(data[k], data[(k + 1) % 6], 1.5 + k),
                                                  rel=1e-5)
    # the first compiles, the second notes the site's key, the third makes the template
    assert len(counted_captures) == 3


@pytest.mark.parametrize("change", ["scalar to kept constant", "kept constant to scalar",
                                    "shape", "dtype", "shared operand", "apart again"])
def test_what_changes_the_program_is_never_a_template_hit(change, counted_captures):
    rng = np.random.default_rng(1)
    x32 = rng.standard_normal(8).astype(np.float32)
    y32 = rng.standard_normal(8).astype(np.float32)
    base = [(x32, y32, 3.0)] * 4               # four syncs: the fourth takes the template
    later = {
        "scalar to kept constant": (x32, y32, 1.0),     # 1.0 stays a constant in the module
        "kept constant to scalar": (x32, y32, 3.0),
        "shape": (rng.standard_normal(5).astype(np.float32),
                  rng.standard_normal(5).astype(np.float32), 3.0),
        "dtype": (x32.astype(np.float64), y32.astype(np.float64), 3.0),
        "shared operand": (x32, None, 3.0),             # b is a
        "apart again": (x32, y32, 3.0),
    }[change]
    if change == "kept constant to scalar":
        base = [(x32, y32, 1.0)] * 4
    if change == "apart again":
        base = [(x32, None, 3.0)] * 4
    for a, b, s in base + [later] * 3:
        ta = la.asarray(a)
        tb = ta if b is None else la.asarray(b)
        got = _read(ta, tb, s)
        assert got == pytest.approx(_expect(a, a if b is None else b, s), rel=1e-5)
    # three captures before the template, three again after the change (no hit on it)
    assert len(counted_captures) == 6


def test_a_node_computed_between_record_and_sync_is_a_leaf(counted_captures):
    x = la.asarray(np.arange(6, dtype=np.float32))
    for k in range(4):
        mid = x * (k + 2.0)
        out = mid + 1.0
        if k == 3:
            mid.numpy()                   # computed on its own: out's graph now starts at it
        assert float(_sum(out)) == pytest.approx(float((np.arange(6) * (k + 2.0) + 1).sum()))


def _sum(t):
    return t.sum().item()


def test_two_pending_results_at_one_line_each_get_their_own_value():
    x = la.asarray(np.arange(4, dtype=np.float32))
    for k in range(4):
        u, v = x * (k + 2.0), x - (k + 2.0)
        got = _numpy(u)
        np.testing.assert_allclose(got, np.arange(4) * (k + 2.0))
        np.testing.assert_allclose(v.numpy(), np.arange(4) - (k + 2.0))


def _numpy(t):
    return t.numpy()


def test_a_template_hit_under_a_tape_keeps_the_graph_for_backward():
    w = la.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    for k in range(4):
        with la.GradientTape() as tape:
            tape.watch(w)
            loss = (w * (k + 2.0)).sum()
            value = loss.item()
        (g,) = tape.gradient(loss, [w])
        assert value == pytest.approx(6.0 * (k + 2.0))
        np.testing.assert_allclose(g.numpy(), np.full(3, k + 2.0))
