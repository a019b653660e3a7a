"""Remembered composites (compiler/transforms/graph_templates.py): a copy of a composite's graph is
the graph the composite itself builds, for every key; graphs it cannot copy exactly make
no template. The class losses of nn.functional (labels all counted) are the user.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.graph import builders as A
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.transforms import autodiff, graph_templates
from lazyarray.compiler.graph.node import Node, kept_constant
from lazyarray.compiler.primitive import apply

from gradcheck import check_direction
from test_vjp_fast import leaf
from test_walk_templates import same_graph


@pytest.fixture(autouse=True)
def fresh_templates():
    F._all_counted.templates.clear()
    yield
    graph_templates.ENABLED[0] = True


def _loss(name, x, y, **kw):
    return getattr(F, name)(x, y, **kw)


def _general(name, x, y, reduction="mean", **kw):
    """The lifted composition `_all_counted` stands for (per-item loss, sum, / count)."""
    per = F._per_class_loss[name](x, y, reduction="none", **kw)
    if reduction == "none":
        return per
    total = per.sum()
    return total if reduction == "sum" else total / float(np.prod(y.shape))


CASES = [("cross_entropy", {}), ("cross_entropy", {"label_smoothing": 0.1}),
         ("nll_loss", {})]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("name,kw", CASES, ids=lambda v: str(v))
def test_class_loss_copies_are_the_general_graph(name, kw, reduction, dtype):
    rng = np.random.default_rng(0)
    x = la.asarray(rng.standard_normal((6, 4)).astype(dtype))
    y = la.asarray(rng.integers(0, 4, 6))
    want = _general(name, x, y, reduction, **kw)._node
    for _ in range(3):                          # builds, then copies
        got = _loss(name, x, y, reduction=reduction, **kw)._node
        assert same_graph(got, want)
    assert any(F._all_counted.templates.values())
    np.testing.assert_array_equal(_loss(name, x, y, reduction=reduction, **kw).numpy(),
                                  _general(name, x, y, reduction, **kw).numpy())


def test_each_key_gets_its_own_graph():
    """Shapes, dtypes, reductions, smoothing and autocast each change the graph: a copy
    made for one never serves another."""
    rng = np.random.default_rng(1)
    calls = []
    for shape in [(6, 4), (5, 4), (6, 3)]:
        for dtype in (np.float32, np.float64):
            x = la.asarray(rng.standard_normal(shape).astype(dtype))
            y = la.asarray(rng.integers(0, shape[1], shape[0]))
            for reduction in ("mean", "sum"):
                for smoothing in (0.0, 0.2, 0.3):
                    calls.append((x, y, reduction, smoothing))
    for x, y, reduction, smoothing in calls + calls[::-1]:
        got = F.cross_entropy(x, y, reduction=reduction, label_smoothing=smoothing)._node
        assert same_graph(got, _general("cross_entropy", x, y, reduction,
                                        label_smoothing=smoothing)._node)
    x = la.asarray(rng.standard_normal((6, 4)).astype(np.float32))
    y = la.asarray(rng.integers(0, 4, 6))
    plain = F.cross_entropy(x, y)._node
    with la.autocast("cpu", dtype=la.bfloat16):
        for _ in range(2):                          # its own key (float32 logits)
            cast = F.cross_entropy(x, y)
            assert same_graph(cast._node, _general("cross_entropy", x, y)._node)
    assert sum(1 for k in F._all_counted.templates if k[0] is la.bfloat16) == 1
    assert same_graph(F.cross_entropy(x, y)._node, plain)


def test_out_of_range_labels_still_raise_after_a_copy():
    x = la.asarray(np.zeros((3, 4), np.float32))
    F.cross_entropy(x, la.asarray(np.array([0, 1, 2])))
    F.cross_entropy(x, la.asarray(np.array([0, 1, 2])))
    with pytest.raises(ValueError, match="out of range"):
        F.cross_entropy(x, la.asarray(np.array([0, 4, 2])))


def test_copied_loss_gradient_against_finite_differences():
    rng = np.random.default_rng(2)
    labels = la.asarray(rng.integers(0, 3, 5))
    logits = rng.standard_normal((5, 3))
    for _ in range(3):
        check_direction(lambda x: F.cross_entropy(x, labels), [logits])
    assert any(F._all_counted.templates.values())


# ---- the mechanism on its own -----------------------------------------------------------

def _fresh_fn(body):
    return graph_templates.remembered()(body)


def test_copy_keeps_sharing_scalars_and_constants():
    def body(x, y, k):
        s = Node("scalar", (), (), x.dtype, {}, value=k)
        wide = A.broadcast(s, x.shape)
        one = A.broadcast(kept_constant(1, x.dtype), x.shape)
        classes = apply("iota", shape=x.shape, dtype=D.int32, dimension=0)
        z = A.mul(A.add(x, wide), A.sub(wide, y))
        return A.add(A.add(z, one), A.convert(classes, x.dtype))
    fn = _fresh_fn(body)
    x, y = leaf((3,)), leaf((3,))
    for _ in range(3):
        assert same_graph(fn(x, y, 2.5), body(x, y, 2.5))
        assert same_graph(fn(y, x, 2.5), body(y, x, 2.5))
    assert same_graph(fn(x, y, 3.5), body(x, y, 3.5))       # another value, another key
    z = fn(x, y, 2.5).operands[0].operands[0]
    assert z.op == "multiply"
    assert z.operands[0].operands[1] is z.operands[1].operands[0]  # one node, two users


def test_nodes_no_argument_reaches_are_made_once():
    """What a composite builds from no argument (a runtime scalar, its broadcast, an iota)
    is the first call's nodes in every copy; what an argument reaches, and the result, is
    each call's own."""
    def body(x, k):
        wide = A.broadcast(Node("scalar", (), (), x.dtype, {}, value=k), x.shape)
        classes = A.convert(apply("iota", shape=x.shape, dtype=D.int32, dimension=0), x.dtype)
        return A.add(A.mul(x, wide), classes)
    fn = _fresh_fn(body)
    x, y = leaf((3,)), leaf((3,))
    outs = [fn(x, 2.5), fn(y, 2.5), fn(x, 2.5)]
    for out, arg in zip(outs, (x, y, x)):
        assert same_graph(out, body(arg, 2.5))
    first = outs[0]
    for out in outs[1:]:
        assert out is not first and out.operands[0] is not first.operands[0]
        assert out.operands[0].operands[1] is first.operands[0].operands[1]     # wide
        assert out.operands[1] is first.operands[1]                             # classes
    other = fn(x, 3.5)                                      # another key: its own nodes
    assert other.operands[1] is not first.operands[1]


def test_layer_norm_copies_share_their_constants_and_compile_once():
    """Every call of a composite after the first shares its scalars' broadcasts; the graph
    of a step that builds the template and of later steps is one program, and the
    gradient through copies is the composite's own."""
    rng = np.random.default_rng(3)
    w, b = (la.asarray(rng.standard_normal(8).astype(np.float32)) for _ in range(2))
    xs = [la.asarray(rng.standard_normal((2, 8)).astype(np.float32)) for _ in range(3)]

    def step():
        return [F.layer_norm(x, (8,), w, b) for x in xs]
    ref = [_ln_numpy(x.numpy(), w.numpy(), b.numpy()) for x in xs]
    metrics = la.debug.metrics()
    before = metrics.compiles
    for _ in range(3):
        outs = step()
        eps = [_eps_node(o._node) for o in outs]
        assert len(set(map(id, eps))) == 1
        for o, r in zip(outs, ref):
            np.testing.assert_allclose(o.numpy(), r, rtol=1e-5, atol=1e-5)
    assert metrics.compiles - before <= 1
    for _ in range(2):
        check_direction(lambda x, w_: F.layer_norm(x, (5,), w_, None), [
            rng.standard_normal((3, 5)), rng.standard_normal(5)])


def _ln_numpy(x, w, b, eps=1e-5):
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _eps_node(out):
    """The runtime scalar 1e-5 under a layer norm's result."""
    stack, seen = [out], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if n.op == "scalar" and n.value == 1e-5:
            return n
        stack.extend(n.operands)
    raise AssertionError("no eps scalar")


def test_graphs_that_cannot_be_copied_make_no_template():
    x = leaf((3,))
    outside = apply("iota", shape=(3,), dtype=D.float32, dimension=0)
    outside.site = ("a user's line", 0)                 # recorded by the user (la.arange)
    cases = {
        "a buffer": lambda a: A.add(a, leaf((3,))),
        "its own literal": lambda a: A.add(a, Node("constant", (), (3,), D.float32, {},
                                                   value=np.zeros(3, np.float32))),
        "a node from elsewhere": lambda a: A.add(a, outside),
    }
    for why, body in cases.items():
        fn = _fresh_fn(body)
        fn(x)
        assert not any(fn.templates.values()), why
        assert fn(x) is not None
    alias = _fresh_fn(lambda a, b: A.mul(a, b))
    alias(x, x)
    assert not any(alias.templates.values())
    y = leaf((3,))
    assert same_graph(alias(x, y), A.mul(x, y))




def test_a_copy_of_a_stopped_node_is_stopped():
    """A composite that stops the gradient of a node it makes (softmax's shift by the row
    max) stops it in every copy too: the gradient through a copy is the composite's own."""
    @graph_templates.remembered()
    def shifted(x):
        return A.sub(x, autodiff.stop(A.mul(x, x)))      # d/dx = 1, not 1 - 2x

    rng = np.random.default_rng(0)
    x = la.asarray(rng.standard_normal(5).astype(np.float32))
    grads = []
    for _ in range(3):                          # builds, then copies
        with la.GradientTape() as tape:
            tape.watch(x)
            y = la.Tensor._wrap(shifted(x._node), x._state).sum()
        grads.append(tape.gradient(y, x).numpy())
    assert any(shifted.templates.values())
    for g in grads:
        np.testing.assert_array_equal(g, np.ones(5, np.float32))
