"""Remembered backward passes (compiler/transforms/walk_templates.py): a gradient whose forward graph
has the structure of an earlier one copies that walk's backward graph. The copy must be
the graph the walk itself builds, for every graph the template accepts; any other graph
is walked. Each case compares, node for node, a gradient taken through the template with
the walk's own (templates off), on fresh forward graphs over the same leaves.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.transforms import autodiff, walk_templates
from lazyarray.compiler.graph import builders as A
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.graph.node import kept_constant
from lazyarray.compiler.primitive import apply

import graph_compare
from gradcheck import check_direction, check_full
from test_vjp_fast import leaf


def same_graph(a, b) -> bool:
    """The same expression, leaves a copy makes afresh compared by value (graph_compare)."""
    return graph_compare.same_graph(a, b, fresh_leaves=True)


@pytest.fixture(autouse=True)
def fresh_templates():
    walk_templates._TEMPLATES.clear()
    yield
    walk_templates._TEMPLATES.clear()
    walk_templates.ENABLED[0] = True


def _walked(build, sources_of, seed_of=None):
    """Cotangents of a fresh forward graph by the walk alone."""
    walk_templates.ENABLED[0] = False
    try:
        return _grads(build, sources_of, seed_of)
    finally:
        walk_templates.ENABLED[0] = True


def _grads(build, sources_of, seed_of=None):
    target = build()
    seed = seed_of(target) if seed_of else A.full(1, (), target.dtype)
    return autodiff.vjp_graph(target, sources_of(target), seed)


def _same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert (a is None and b is None) or (a is not None and b is not None
                                             and same_graph(a, b)), (a, b)


def _check_copied(build, sources_of, seed_of=None, hits=1):
    """First call makes the template, the next `hits` copy it: each equals the walk."""
    before = walk_templates.STATS["hits"]
    for _ in range(1 + hits):
        _same(_grads(build, sources_of, seed_of), _walked(build, sources_of, seed_of))
    assert walk_templates.STATS["hits"] - before == hits      # the copies were used


# ---- graphs the template accepts ------------------------------------------------------

X, W1, B1, W2 = leaf((8, 5)), leaf((6, 5)), leaf((6,)), leaf((3, 6))
LABELS = leaf((8,), D.int64)


def _mlp():
    from lazyarray.ops import nn as onn
    h = onn.relu(onn.linear(X, W1, B1))
    return onn.cross_entropy(onn.linear(h, W2), LABELS)


def _params(target):
    return [W1, B1, W2]


def test_mlp_cross_entropy_is_copied():
    _check_copied(_mlp, _params, hits=3)


IMG, K1, K2 = leaf((2, 3, 9, 9)), leaf((4, 3, 3, 3)), leaf((5, 4, 3, 3))


def _convnet():
    # a stride-1 and a stride-2 convolution (the input gradient by phases) and a ReLU:
    # convolution's vjp reads only types and attributes, so a CNN's backward is copied
    from lazyarray.ops import convolution as conv, nn as onn
    h = onn.relu(conv.conv2d(IMG, K1, padding=1))
    return A.reduce_sum(conv.conv2d(h, K2, stride=2, padding=1), (0, 1, 2, 3))


def test_a_convolution_network_is_copied():
    _check_copied(_convnet, lambda t: [K1, K2, IMG], hits=2)


def test_sources_absent_duplicated_integer_and_interior():
    other = leaf((2,))
    _check_copied(_mlp, lambda t: [W1, other, W1, LABELS, X])
    # an interior node as a source: its cotangent, and the walk goes on behind it
    inner = {}

    def build():
        inner["h"] = apply("maximum", apply("dot_general", X, leaf_t(), lhs_contracting=(1,),
                                            rhs_contracting=(0,), lhs_batch=(), rhs_batch=()),
                           A.full(0, (8, 6), D.float32))
        return A.reduce_sum(inner["h"], (0, 1))
    _check_copied(build, lambda t: [inner["h"], WT])


WT = leaf((5, 6))


def leaf_t():
    return WT


def test_kept_constants_in_the_forward_and_as_seed():
    """x * 1 + relu(x): the rules' shared constants 0 and 1 sit in the forward graph; the
    seed is the shared 1 too."""
    x = leaf((4,))

    def build():
        one = kept_constant(1, D.float32)
        y = A.mul(x, A.broadcast(one, (4,)))
        z = A.add(y, apply("maximum", x, A.full(0, (4,), D.float32)))
        return A.reduce_sum(z, (0,))
    _check_copied(build, lambda t: [x])


def test_output_gradients_seed():
    x = leaf((3, 4))
    g = leaf((4, 3))
    _check_copied(lambda: apply("transpose", A.mul(x, x), permutation=(1, 0)),
                  lambda t: [x], lambda t: g)


def test_stopped_node_is_a_leaf_for_the_copy():
    x, y = leaf((5,)), leaf((5,))
    held = []

    def build():
        s = autodiff.stop(A.mul(x, y))          # a pending copy the walk does not enter
        held.append(s)
        return A.reduce_sum(A.mul(s, x), (0,))
    _check_copied(build, lambda t: [x, y])


def test_backward_sources_as_leaves():
    """through_sources=False (backward()): a source with operands is a leaf."""
    x = leaf((4,))
    mid = {}

    def build():
        mid["m"] = A.mul(x, x)
        return A.reduce_sum(apply("exponential", mid["m"]), (0,))
    for _ in range(3):
        got = autodiff.vjp_graph(build(), [mid["m"], x], A.full(1, (), D.float32),
                                 through_sources=False)
        walk_templates.ENABLED[0] = False
        want = autodiff.vjp_graph(build(), [mid["m"], x], A.full(1, (), D.float32),
                                  through_sources=False)
        walk_templates.ENABLED[0] = True
        _same(got, want)
        assert got[1] is None                      # not reached behind the leaf m


# ---- graphs the template must refuse ----------------------------------------------------

def _prime_then(first, second, sources_of):
    """Make a template from `first`, then take `second`'s gradient: it equals the walk."""
    _grads(first, sources_of)
    _grads(first, sources_of)
    _same(_grads(second, sources_of), _walked(second, sources_of))


X4, Y4, X3, Y3, X0, X5, Y5 = (leaf(s) for s in [(4, 4), (4, 4), (3,), (3,), (), (5,), (5,)])
_HELD: list = []        # stopped nodes stay alive (the walk's set of them is weak)


def _reduce_axis(axis):
    return lambda: A.reduce_sum(A.reduce_sum(A.mul(X4, Y4), (axis,)), (0,))


def _relu_at(value):
    return lambda: A.reduce_sum(apply("maximum", A.mul(X4, Y4), A.full(value, (4, 4), D.float32)),
                                (0, 1))


def _sum_of_product(a, b):
    return lambda: A.reduce_sum(A.mul(a, b), (0,))


def _times(value):
    """multiply(x, value) * x, the kept constant a 0-d operand the vjp reads."""
    return lambda: A.mul(A.mul(X0, kept_constant(value, D.float32)), X0)


def _stopped():
    s = autodiff.stop(A.mul(X5, Y5))
    _HELD.append(s)
    return A.reduce_sum(A.mul(s, X5), (0,))


# (case, the graph a template is made from, another graph of the same types, sources)
WALKED = [
    ("another reduced axis", _reduce_axis(0), _reduce_axis(1), [X4, Y4]),
    ("another constant", _relu_at(0), _relu_at(1), [X4, Y4]),
    ("x * x after x * y", _sum_of_product(X3, Y3), _sum_of_product(X3, X3), [X3, Y3]),
    ("x * y after x * x", _sum_of_product(X3, X3), _sum_of_product(X3, Y3), [X3, Y3]),
    ("another kept constant operand", _times(2.0), _times(3.0), [X0]),
    ("a sharing the sources do not show", _sum_of_product(X3, Y3), _sum_of_product(X3, X3),
     [X3]),
    ("unstopped after stopped", _stopped,
     lambda: A.reduce_sum(A.mul(A.mul(X5, Y5), X5), (0,)), [X5, Y5]),
]


@pytest.mark.parametrize("case,first,second,sources", WALKED, ids=[c[0] for c in WALKED])
def test_other_graphs_are_walked(case, first, second, sources):
    _prime_then(first, second, lambda t: sources)


def test_other_seeds_are_walked():
    x, y, z = leaf((3,)), leaf((3,)), leaf((3,))
    build = lambda: A.mul(x, y)
    # a seed that is a forward node makes no template (its refs would be ambiguous)
    _grads(build, lambda t: [x, y], lambda t: x)
    _grads(build, lambda t: [x, y], lambda t: x)
    _same(_grads(build, lambda t: [x, y], lambda t: z),
          _walked(build, lambda t: [x, y], lambda t: z))
    # a template made with the shared constant 1 as the seed, then another seed
    s = leaf(())
    build = lambda: A.reduce_sum(A.mul(x, y), (0,))
    _grads(build, lambda t: [x, y])
    _grads(build, lambda t: [x, y])
    _same(_grads(build, lambda t: [x, y], lambda t: s),
          _walked(build, lambda t: [x, y], lambda t: s))


def test_swapped_sources_and_newly_stopped_nodes_are_walked():
    x, y = leaf((3,)), leaf((3,))
    build = lambda: A.reduce_sum(A.mul(A.mul(x, y), y), (0,))
    _grads(build, lambda t: [x, y])
    _same(_grads(build, lambda t: [y, x]), _walked(build, lambda t: [y, x]))
    held = []

    def stopped():
        s = autodiff.stop(A.mul(x, y))
        held.append(s)
        return A.reduce_sum(A.mul(s, y), (0,))
    _same(_grads(stopped, lambda t: [x, y]), _walked(stopped, lambda t: [x, y]))


def test_vjp_reading_more_than_types_makes_no_template():
    """tanh's vjp is not marked by type: such a graph is walked every time."""
    x = leaf((3,))
    build = lambda: A.reduce_sum(apply("tanh", x), (0,))
    before = walk_templates.STATS["made"]
    _grads(build, lambda t: [x])
    _grads(build, lambda t: [x])
    assert walk_templates.STATS["made"] == before


# ---- random graphs: every accepted copy equals the walk --------------------------------

_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")
_UNARY = ("negate", "exponential", "log")


def _random_graph(rng, leaves):
    nodes = list(leaves)
    for _ in range(int(rng.integers(2, 9))):
        kind = rng.integers(0, 4)
        a = nodes[int(rng.integers(len(nodes)))]
        if kind == 0:
            nodes.append(apply(str(rng.choice(_UNARY)), a))
        elif kind == 1:
            c = kept_constant(float(rng.choice([0.0, 1.0, 0.5])), D.float64)
            nodes.append(apply(str(rng.choice(_BINARY)), a, A.broadcast(c, a.shape)))
        else:
            b = nodes[int(rng.integers(len(nodes)))]
            nodes.append(apply(str(rng.choice(_BINARY)), a, b))
    return A.reduce_sum(nodes[-1], (0, 1))


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_copy_or_walk_equals_the_walk(seed):
    leaves = [leaf((2, 3), D.float64) for _ in range(3)]
    rng = np.random.default_rng(seed)
    plans = [int(rng.integers(1 << 30)) for _ in range(2)]
    # the second graph is the first's structure or another one: either way, the walk's
    for plan in (plans[0], plans[0], plans[1], plans[0]):
        build = lambda: _random_graph(np.random.default_rng(plan), leaves)
        _same(_grads(build, lambda t: leaves), _walked(build, lambda t: leaves))


# ---- values: gradients through copies stay right ---------------------------------------

def test_copied_gradients_against_finite_differences():
    """The same function differentiated several times (copies from the second on), in
    float64, against central differences."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((5, 4))
    w1, w2 = rng.standard_normal((4, 6)), rng.standard_normal((6, 3))

    def f(x, w1, w2):
        h = la.maximum(x @ w1, 0.0)
        return la.exp(la.minimum(h @ w2, 0.7)) / 3.0
    before = walk_templates.STATS["hits"]
    for _ in range(3):
        check_direction(f, [x, w1, w2], wrt=[0, 1, 2])
    check_full(f, [x, w1, w2], wrt=[1, 2])
    assert walk_templates.STATS["hits"] > before
