"""A loop's sync skips the capture when its graph matches the last one synced at the same
line (`compiler/graph/trace.py` Template): the template must accept exactly the graphs whose
capture key is its own, so that no graph runs another's program. Checked on random graphs
against the keys themselves, and end to end on what a wrong hit would get wrong: scalars,
kept constants, shapes, dtypes, shared operands, nodes computed since they were recorded,
donated leaves. A training step's sync may donate: its template must then donate exactly
the leaves capture would, and refuse where the donation check would (a leaf or an inner
node held elsewhere), so that a hit never overwrites what someone can still read."""
from __future__ import annotations

import collections
import contextlib
import random
import weakref
from typing import Any

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.graph.node import Node, kept_constant, parameter_leaf, scalar_leaf
from lazyarray.compiler.graph.trace import Template, capture, donation_safe

from interrupting import Interrupted


# ---- the template against the key, on random graphs ------------------------------------

_APPROX = {"approx": True}


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
        elif kind < 0.45:
            a = rng.choice(pool)
            # (attributes or none, drawn apart from the structure: only the check tells)
            # (the check compares attributes and shapes by identity first: one dict
            # shared by graphs, or an equal one of their own)
            attrs = values.choice([_APPROX, {"approx": True}]) if values.random() < 0.2 else {}
            made.append(Node(rng.choice(["negate", "exp"]), (a,), a.shape, a.dtype, attrs))
        elif kind < 0.5:           # a shape drawn apart from the structure
            a = rng.choice(pool)
            shape = values.choice([(3,), (2,), tuple([3]), tuple([2])])
            made.append(Node("spread", (a,), shape, a.dtype, {}))
        elif kind < 0.6:           # operand counts drawn apart from the structure
            a = rng.choice(pool)
            same = [b for b in pool if b.shape == a.shape and b.dtype is a.dtype]
            made.append(Node("addn", tuple(rng.choice(same) for _ in range(values.randint(1, 2))),
                             a.shape, a.dtype, {}))
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
        assert list(bound.order) == b.order
        assert [id(v) for v in bound.args] == [id(v) for v in b.args]
        assert bound.positions == b.positions
    assert accepted > 300 and rejected > 300     # both answers were put to the test


# ---- donating templates against capture and the donation check, on random graphs ----

def _donating_graph(seed: int, plan: random.Random, held: list, offered: Any) -> list:
    """Roots of a random graph of structure `seed` over new buffer leaves. `plan` draws
    (apart from the structure) which leaves are offered (added to `offered`), which are
    held elsewhere (the node, or only its buffer, appended to `held`), and which op nodes
    a tensor outside the pending list holds (appended to `held`: what an interrupt can
    leave behind). Nothing else keeps a node of the graph."""
    rng = random.Random(seed)
    leaves, made = [], []
    for shape in [(3,)] * rng.randint(1, 3) + [(2,)] * rng.randint(0, 2):
        leaf = parameter_leaf(np.zeros(shape, np.float32), shape, D.float32)
        if plan.random() < 0.75:
            offered.add(leaf)
        r = plan.random()
        if r < 0.08:
            held.append(leaf)
        elif r < 0.16:
            held.append(leaf.buffer)
        leaves.append(leaf)
    for _ in range(rng.randint(1, 7)):
        pool = made + leaves
        a = rng.choice(pool)
        kind = rng.random()
        if kind < 0.1:
            made.append(Node("convert", (scalar_leaf(2.0, D.float64),), (), D.float32,
                             {"dtype": D.float32}))
        elif kind < 0.2 and a.shape:
            made.append(Node("reduce", (a,), (), a.dtype, {"axes": (0,), "kind": "sum"}))
        elif kind < 0.45:
            made.append(Node(rng.choice(["negate", "exp"]), (a,), a.shape, a.dtype, {}))
        else:
            b = rng.choice([n for n in pool if n.shape == a.shape])
            made.append(Node(rng.choice(["add", "multiply"]), (a, b), a.shape, a.dtype, {}))
        if plan.random() < 0.15:
            held.append(made[-1])
    return rng.sample(made, rng.randint(1, min(2, len(made))))


def _effective_capture(roots: list, offered: Any) -> Any:
    """The capture a sync runs: donating unless the donation check refuses."""
    cap = capture(roots, donate=offered)
    if cap.donated_nodes and not donation_safe(cap):
        cap = capture(roots)
    return cap


def test_a_donating_template_donates_exactly_as_capture_would() -> None:
    """With an offered set, a template accepts a graph exactly when capture gives it the
    template's key (same structure, same donated leaves) and the donation check accepts
    it, and then gives the same nodes, arguments and donated leaves as capture."""
    rng = random.Random(5)
    seen: collections.Counter = collections.Counter()
    for _ in range(5000):
        seed = rng.randrange(40)
        offered, held = weakref.WeakSet(), []
        first = _donating_graph(seed, rng, held, offered)
        cap = _effective_capture(first, offered)
        template, key = Template(cap), cap.key
        del cap, first
        held.clear()
        second = _donating_graph(seed if rng.random() < 0.7 else rng.randrange(40), rng,
                                 held, offered)
        bound = template.bind(second, offered.data)
        got = None if bound is None else (
            [id(n) for n in bound.order], [id(a) for a in bound.args],
            [id(n) for n in bound.donated_nodes], bound.donated)
        del bound                  # (its nodes must not count in the capture's check)
        cap = capture(second, donate=offered)
        safe = not cap.donated_nodes or donation_safe(cap)
        assert (got is not None) == (cap.key == key and safe)
        if got is not None:
            assert got == ([id(n) for n in cap.order], [id(a) for a in cap.args],
                           [id(n) for n in cap.donated_nodes], cap.donated)
            seen["donating hit" if cap.donated else "hit"] += 1
        elif cap.key == key:
            seen["refused: unsafe"] += 1
        else:
            seen["refused: " + ("donation" if key[:-1] == cap.key[:len(key) - 1]
                                else "structure")] += 1
        del cap
    # every answer was put to the test
    assert min(seen.values()) >= 40 and len(seen) == 5, seen


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


def test_a_template_checks_distinctness_only_where_nodes_are_alike() -> None:
    """Two positions can hold one node only when their subgraphs are alike down to the
    leaves: the template checks those positions alone (here the two products and the
    two leaves of one type), and still refuses one node standing in both."""
    x, y = (parameter_leaf(np.zeros(3, np.float32), (3,), D.float32) for _ in range(2))
    z = parameter_leaf(np.zeros(2, np.float32), (2,), D.float32)
    apart = _chain(x, y, False)
    total = Node("reduce", (z,), (), D.float32, {"axes": (0,), "kind": "sum"})
    cap = capture([apart, total])
    template = Template(cap)
    alike = sorted(id(cap.order[p]) for p in template.alike)
    assert alike == sorted(map(id, [x, y] + list(apart.operands)))
    assert template.bind([_chain(x, y, False), total]) is not None
    assert template.bind([_chain(x, y, True), total]) is None
    assert template.bind([_chain(x, x, False), total]) is None


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
    # a template of a donating capture: its key names the donation, so a sync that may
    # not donate (no offered set) is not its graph
    user, offered = _offered_negation()
    cap = capture([user], donate=offered)
    assert cap.donated
    t = Template(cap)
    del cap
    user, offered = _offered_negation()
    assert t.bind([user]) is None
    bound = t.bind([user], offered.data)
    assert bound is not None and bound.donated == {0}
    assert bound.donated_nodes == (user.operands[0],)


def _offered_negation() -> tuple:
    leaf = parameter_leaf(np.zeros(3, np.float32), (3,), D.float32)
    return Node("negate", (leaf,), (3,), D.float32, {}), weakref.WeakSet([leaf])


# ---- end to end: a loop syncing at one line ------------------------------------------

@pytest.fixture
def counted_captures(monkeypatch):
    calls = []
    real = runtime.capture
    la.sync()                    # work an earlier test left pending is not this test's capture
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


# ---- end to end: donating syncs at one line ------------------------------------------

def _adam_steps(donate: bool, steps: int, view_at: int = -1) -> tuple:
    """A few Adam steps of a small MLP, the loss read at one line: (losses, parameters,
    captures after each step, buffers donated at each step); at step `view_at` the user
    holds a view of the first weight's buffer through the step."""
    calls = []
    real = runtime.capture

    def counting(nodes, donate=None):
        calls.append(len(nodes))
        return real(nodes, donate)
    rng = np.random.default_rng(3)
    with la.config.override(device="cpu", donate=donate):
        runtime.clear_caches()
        model = la.nn.Sequential(la.nn.Linear(16, 32), la.nn.ReLU(), la.nn.Linear(32, 4))
        model.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.2
                               for n, p in model.named_parameters()})
        opt = la.optim.Adam(model.parameters(), lr=1e-2)
        x = la.asarray(rng.standard_normal((8, 16)).astype(np.float32))
        y = la.asarray(rng.integers(0, 4, 8))
        losses, captured, donated = [], [], []
        runtime.capture = counting
        try:
            for k in range(steps):
                view = np.asarray(model[0].weight) if k == view_at else None
                seen = None if view is None else view.copy()
                with la.GradientTape() as tape:
                    loss = la.nn.functional.cross_entropy(model(x), y)
                before = la.debug.metrics().donated_buffers
                # the step ends at apply_gradients (its sync donates); the loss is read
                opt.apply_gradients(tape.gradient(loss, model.parameters()))
                losses.append(loss.item())
                donated.append(la.debug.metrics().donated_buffers - before)
                captured.append(len(calls))
                if view is not None:           # what the user viewed never changed
                    np.testing.assert_array_equal(view, seen)
                del view
        finally:
            runtime.capture = real
        return losses, [p.numpy() for p in model.parameters()], captured, donated


def test_a_training_loop_donates_at_its_template_hits() -> None:
    """The optimizer offers its old values: the step's sync donates them, and from the
    fourth step on finds its program by the template (no capture), donating as before;
    the results are those of a run without donation, bit for bit."""
    losses, params, captured, donated = _adam_steps(True, 7)
    assert captured[3] == captured[-1]            # no capture from the fourth step on
    assert all(d == 2 * 3 * 2 for d in donated[1:])   # 2 layers x (w, b) x (value, m, v)
    plain_losses, plain_params, _, none = _adam_steps(False, 7)
    assert not any(none)
    assert losses == plain_losses
    for a, b in zip(params, plain_params):
        np.testing.assert_array_equal(a, b)


def test_a_viewed_parameter_is_not_donated_at_a_hit() -> None:
    """A step while the user views a parameter's buffer: that leaf is not donatable, so
    the template refuses and the sync captures (donating the others), as without it."""
    losses, params, captured, donated = _adam_steps(True, 8, view_at=5)
    assert captured[3] == captured[4]             # hits before the view
    assert captured[5] > captured[4]              # the viewed step captured
    assert donated[5] == 2 * 3 * 2 - 1            # everything but the viewed weight
    plain_losses, plain_params, _, _ = _adam_steps(False, 8)
    assert losses == plain_losses
    for a, b in zip(params, plain_params):
        np.testing.assert_array_equal(a, b)


def test_a_node_kept_out_of_pending_stops_a_donating_hit(counted_captures) -> None:
    """A live tensor out of the pending list (what an interrupt can leave) whose node is
    inside the step's graph and reads the old parameter: a hit must not donate that
    parameter, or the tensor could never be computed; the template refuses, the sync
    captures and drops the donation, and the tensor is computed later."""
    # steps left pending until la.sync(), so that the pending list can be edited between
    with la.config.override(device="cpu", donate=True, step_sync=False):
        start = np.arange(8, dtype=np.float32)
        p = la.asarray(start)
        opt = la.optim.SGD([p], lr=0.25)
        state, expect, marks = p._state, start, []
        for k in range(7):
            mid = p * 2.0                         # reads the old value
            opt.apply_gradients([mid + 1.0])
            if k == 5:
                state.pending = [r for r in state.pending if r() is not mid]
                kept, kept_expect = mid, expect * np.float32(2)
            del mid
            la.sync()
            marks.append(len(counted_captures))
            expect = expect - np.float32(0.25) * (expect * np.float32(2) + np.float32(1))
            np.testing.assert_allclose(p.numpy(), expect, rtol=1e-6)
        assert marks[3] == marks[4] < marks[5]    # hits, then the refused one
        np.testing.assert_array_equal(kept.numpy(), kept_expect)


def test_an_interrupt_during_a_donating_hit_keeps_the_new_values(counted_captures) -> None:
    """As for a captured sync (tests/test_failures.py): a hit that donates runs to its
    end when interrupted; the interrupt is raised once the new values are in place."""
    # (step_sync off: the update stays pending until the la.sync() below is interrupted)
    with la.config.override(device="cpu", donate=True, step_sync=False):
        p = la.asarray(np.ones(1 << 16, np.float32))
        opt = la.optim.SGD([p], lr=0.5)
        real_run = runtime._run
        donated = []

        def run(exe, cap, nodes):
            donated.append(len(cap.donated_nodes))
            return real_run(Interrupted(exe) if interrupt else exe, cap, nodes)
        runtime._run = run
        try:
            for k in range(5):
                interrupt = k == 4
                opt.apply_gradients([la.ones_like(p)])
                marks = len(counted_captures)
                with pytest.raises(KeyboardInterrupt) if interrupt else contextlib.nullcontext():
                    la.sync()                      # (one line: one site)
        finally:
            runtime._run = real_run
        assert len(counted_captures) == marks      # the interrupted sync was a hit
        assert donated[-1] == 1
        np.testing.assert_array_equal(p.numpy(), np.full(1 << 16, 1 - 0.5 * 5, np.float32))


def _item(t):
    return t.item()


@pytest.mark.parametrize("leaf", [False, True])
def test_a_template_hit_keeps_the_graph_behind_a_trainable_tensor(leaf):
    """backward() after reading the loss at one line (template hits from the third
    step): the sync keeps the graph when it reaches a tensor that requires grad, one it
    computes (a root of the sync) or one it reads (a leaf)."""
    base = np.array([1.0, 2.0, 3.0], np.float32)
    w = la.asarray(base).requires_grad_() if leaf else None
    for k in range(4):
        h = w if leaf else (la.asarray(base) * 1.0).requires_grad_()
        loss = (h * h * (k + 2.0)).sum()
        assert _item(loss) == pytest.approx(14.0 * (k + 2.0))
        loss.backward()
        np.testing.assert_allclose(h.grad.numpy(), 2 * base * (k + 2.0), rtol=1e-6)
        if leaf:
            w.grad = None
