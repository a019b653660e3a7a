"""The fast paths of recording a training step build exactly the graph of the general way.

- compiler/graph/builders.py makes same-type elementwise nodes (and broadcasts of constants)
  directly instead of through `apply`: each must equal what `apply` records;
- partial vjps (`Primitive.vjp_partial`: maximum, minimum, dot_general) skip cotangents
  the walk does not need: the ones it needs equal the full vjp's, and gradients through
  them stay right against float64 finite differences;
- optimizers record their update with `SameType` where the operands share one type: the
  same graph as `ops` gives (so the same program), and PyTorch's numbers
  (tests/test_optim.py).
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.transforms import autodiff, vjp_templates
from lazyarray.compiler.graph import builders as A
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.graph.node import parameter_leaf
from lazyarray.compiler.primitive import PRIMITIVES, apply

from gradcheck import check_direction, check_full
from graph_compare import same_graph


def leaf(shape, dtype=D.float32):
    return parameter_leaf(np.zeros(shape, dtype.np), shape, dtype)


FAST_TYPES = [((3, 4), D.float32), ((), D.float64), ((5,), D.float16), ((2, 2), D.complex64)]


@pytest.mark.parametrize("shape,dtype", FAST_TYPES, ids=lambda v: str(v))
def test_builders_fast_paths_equal_apply(shape, dtype):
    a, b = leaf(shape, dtype), leaf(shape, dtype)
    for fn, prim in [(A.add, "add"), (A.sub, "subtract"), (A.mul, "multiply"),
                     (A.div, "divide")]:
        assert same_graph(fn(a, b), apply(prim, a, b)), prim
    assert same_graph(A.neg(a), apply("negate", a))
    pred = leaf(shape, D.bool_)
    assert same_graph(A.select(pred, a, b), apply("select", pred, a, b))
    for value in (0, 1, 0.5):
        assert same_graph(A.full_like(a, value), A.full(value, shape, dtype))
        assert same_graph(A.full_like(a, value),
                          A.broadcast(A.const(value, dtype), shape))
    if not dtype.is_complex:
        for d in ("EQ", "NE", "LT", "LE", "GT", "GE"):
            assert same_graph(A.compare(a, b, d), apply("compare", a, b, direction=d))


def test_builders_general_cases_still_checked():
    """Mixed types are not fast: `apply` records or raises as before."""
    a, i = leaf((3,), D.float32), leaf((3,), D.int32)
    assert A.add(i, i).dtype is D.int32                      # integers: through apply
    assert A.mul(leaf((3,), D.bool_), leaf((3,), D.bool_)).dtype is D.bool_
    with pytest.raises(TypeError):
        A.add(a, i)
    with pytest.raises(ValueError):
        A.mul(a, leaf((4,), D.float32))
    with pytest.raises(TypeError):
        A.select(leaf((3,), D.float32), a, a)                # the predicate must be bool
    with pytest.raises(TypeError):
        A.compare(leaf((2,), D.complex64), leaf((2,), D.complex64), "LT")
    with pytest.raises(ValueError):
        A.compare(a, a, "XX")


@pytest.mark.parametrize("op", ["maximum", "minimum", "dot_general"])
def test_partial_vjp_gives_the_full_vjps_cotangents(op):
    prim = PRIMITIVES[op]
    assert prim.vjp_partial
    if op == "dot_general":
        x, w = leaf((4, 3)), leaf((3, 5))
        attrs = dict(lhs_contracting=(1,), rhs_contracting=(0,), lhs_batch=(), rhs_batch=())
    else:
        x, w = leaf((4, 3)), leaf((4, 3))
        attrs = {}
    out = apply(op, x, w, **attrs)
    g = leaf(out.shape)
    full = prim.vjp(g, out, x, w, **attrs)
    for wanted in [(True, False), (False, True), (True, True)]:
        part = prim.vjp(g, out, x, w, wanted=wanted, **attrs)
        for want, c, f in zip(wanted, part, full):
            assert (c is None) if not want else same_graph(c, f)


def test_partial_vjp_walk_skips_unwanted_operands():
    """The walk asks a partial vjp only for what reaches a source: relu's constant and a
    first layer's data get no cotangent node at all."""
    made = []
    x, w = leaf((4, 3)), leaf((3, 5))
    h = apply("dot_general", x, w, lhs_contracting=(1,), rhs_contracting=(0,),
              lhs_batch=(), rhs_batch=())
    r = apply("maximum", h, A.zeros_like(h))
    loss = A.reduce_sum(r, (0, 1))
    prim = PRIMITIVES["dot_general"]
    orig = prim.vjp

    def spy(*args, **kw):
        outs = orig(*args, **kw)
        made.append(outs)
        return outs
    prim.vjp = spy
    try:
        (gw,) = autodiff.vjp_graph(loss, [w], A.full(1, (), D.float32))
    finally:
        prim.vjp = orig
    assert gw.shape == w.shape
    assert made and made[0][0] is None and made[0][1] is not None


def test_relu_mlp_gradient_against_finite_differences():
    """maximum(x, 0) and products with data, through the partial vjps, in float64."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 4))
    w1 = rng.standard_normal((4, 6))
    w2 = rng.standard_normal((6, 3))

    def f(x, w1, w2):
        h = la.maximum(x @ w1, 0.0)
        return la.minimum(h @ w2, 0.7)
    check_direction(f, [x, w1, w2], wrt=[1, 2])
    check_full(f, [x, w1, w2], wrt=[1, 2])


def test_relu_tie_splits_gradient_through_partial_vjp():
    """maximum(x, x) with both operands sources: each gets half (the full vjp path)."""
    x = la.asarray(np.array([1.0, -2.0, 3.0]))
    with la.GradientTape() as tape:
        tape.watch(x)
        y = la.maximum(x, x).sum()
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), [1.0, 1.0, 1.0])
    z = la.asarray(np.array([1.0, 5.0, 3.0]))
    with la.GradientTape() as tape:
        y = la.maximum(x, z).sum()
    gx, gz = tape.gradient(y, [x, z])
    np.testing.assert_allclose(gx.numpy(), [0.5, 0.0, 0.5])
    np.testing.assert_allclose(gz.numpy(), [0.5, 1.0, 0.5])


# ---- remembered vjps (compiler/transforms/vjp_templates.py) -----------------------------------------

def _cases():
    f, d = D.float32, D.float64
    x, y = leaf((3, 4)), leaf((3, 4))
    p = leaf((3, 4), D.bool_)
    out = [("add", (x, y), {}), ("subtract", (x, y), {}), ("multiply", (x, y), {}),
           ("divide", (x, y), {}), ("maximum", (x, y), {}), ("minimum", (x, y), {}),
           ("negate", (x,), {}), ("exponential", (x,), {}), ("log", (x,), {}),
           ("select", (p, x, y), {}), ("convert", (x,), {"dtype": d}),
           ("convert", (leaf((3, 4), d),), {"dtype": f}),
           ("broadcast_in_dim", (leaf((4,)),), {"shape": (3, 4), "broadcast_dimensions": (1,)}),
           ("broadcast_in_dim", (leaf((3, 1)),), {"shape": (3, 4), "broadcast_dimensions": (0, 1)}),
           ("reshape", (x,), {"shape": (12,)}), ("transpose", (x,), {"permutation": (1, 0)}),
           ("dot_general", (x, leaf((4, 5))), {"lhs_contracting": (1,), "rhs_contracting": (0,),
                                              "lhs_batch": (), "rhs_batch": ()}),
           ("dot_general", (leaf((2, 3, 4)), leaf((2, 5, 4))),
            {"lhs_contracting": (2,), "rhs_contracting": (2,), "lhs_batch": (0,),
             "rhs_batch": (0,)})]
    for kind in ("sum", "max", "min", "prod"):
        out.append(("reduce", (x,), {"axes": (1,), "kind": kind}))
    i64 = D.int64
    out += [("rsqrt", (x,), {}), ("erf", (x,), {}),
            ("slice", (x,), {"start_indices": (1, 0), "limit_indices": (3, 4),
                             "strides": (1, 2)}),
            ("dynamic_slice", (x, leaf((), i64), leaf((), i64)), {"slice_sizes": (2, 3)}),
            ("gather", (x, leaf((5,), i64)), {"axis": 1})]
    return out


def _fresh(operands):
    return tuple(leaf(o.shape, o.dtype) for o in operands)


@pytest.mark.parametrize("op,operands,attrs", _cases(), ids=lambda v: str(v)[:40])
def test_remembered_vjp_builds_the_vjps_graph(op, operands, attrs):
    """The walk's second meeting with a node type copies the first's graph: for fresh
    inputs of the same types it equals what the vjp itself builds, for each `wanted`."""
    prim = PRIMITIVES[op]
    assert prim.vjp_by_type
    n = len(operands)
    patterns = [(True,) * n] + ([(True, False), (False, True)] if prim.vjp_partial else [])
    for wanted in patterns:
        for _ in range(3):                      # the first builds, the next ones copy
            ops = _fresh(operands)
            node = apply(op, *ops, **attrs)
            g = leaf(node.shape, node.dtype)
            extra = {"wanted": wanted} if prim.vjp_partial else {}
            got = autodiff._by_type(prim.vjp, g, node, ops, {**attrs, **extra}, list(wanted))
            want = prim.vjp(g, node, *ops, **attrs, **extra)
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert (a is None and b is None) or same_graph(a, b)
        key = vjp_templates.key_of(node, tuple(wanted))
        assert vjp_templates.lookup(key) is not False


def test_template_never_made_from_aliased_inputs():
    """maximum(x, x): a template made there could not tell the operands apart."""
    x = leaf((7, 2))
    node = apply("maximum", x, x)
    key = vjp_templates.key_of(node, (True, True))
    vjp_templates._TEMPLATES.pop(key, None)
    autodiff._by_type(PRIMITIVES["maximum"].vjp, leaf((7, 2)), node, (x, x),
                      {"wanted": (True, True)}, [True, True])
    assert vjp_templates.lookup(key) is False
    a, b = leaf((7, 2)), leaf((7, 2))
    node = apply("maximum", a, b)
    g = leaf((7, 2))
    for _ in range(2):
        got = autodiff._by_type(PRIMITIVES["maximum"].vjp, g, node, (a, b),
                                {"wanted": (True, True)}, [True, True])
        want = PRIMITIVES["maximum"].vjp(g, node, a, b, wanted=(True, True))
        assert all(same_graph(p, q) for p, q in zip(got, want))


def test_training_step_gradients_stay_right_when_remembered():
    """Several steps of an MLP through tape gradients (templates from step 2 on) give
    the float64 NumPy gradients at every step."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 4))
    w1, w2 = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    for step in range(3):
        xs = la.asarray(x + step)
        p1, p2 = la.asarray(w1), la.asarray(w2)
        with la.GradientTape() as tape:
            h = la.maximum(xs @ p1, 0.0)
            loss = la.exp(h @ p2).sum()
        g1, g2 = tape.gradient(loss, [p1, p2])
        hx = np.maximum((x + step) @ w1, 0.0)
        e = np.exp(hx @ w2)
        np.testing.assert_allclose(g2.numpy(), hx.T @ e, rtol=1e-10)
        np.testing.assert_allclose(g1.numpy(), (x + step).T @ ((e @ w2.T) * (hx > 0)),
                                   rtol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_unmasked_form_equals_masked_form(reduction):
    """Labels known on the host with no ignore_index among them skip the mask: the loss and
    its gradient are bit for bit those of the masked form (labels still pending there)."""
    import lazyarray.nn.functional as F
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((16, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 16)
    out = []
    for pending in (False, True):
        x = la.asarray(logits)
        y = la.asarray(labels)
        if pending:
            y = y + 0                              # values not on the host: masked form
        with la.GradientTape() as tape:
            tape.watch(x)
            loss = F.cross_entropy(x, y, reduction=reduction)
            total = loss.sum() if reduction == "none" else loss
        out.append((loss.numpy(), tape.gradient(total, x).numpy()))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
    ref = -np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True))[np.arange(16), labels]
    want = {"mean": ref.mean(), "sum": ref.sum(), "none": ref}[reduction]
    np.testing.assert_allclose(out[0][0], want, rtol=1e-5)


def test_cross_entropy_with_ignored_labels_still_masks():
    import lazyarray.nn.functional as F
    logits = np.random.default_rng(8).standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, -100, 2, 1])
    loss = F.cross_entropy(la.asarray(logits), la.asarray(labels)).item()
    keep = labels != -100
    ref = -np.log(np.exp(logits) / np.exp(logits).sum(1, keepdims=True))[keep, labels[keep]]
    np.testing.assert_allclose(loss, ref.mean(), rtol=1e-5)


@pytest.mark.parametrize("n", [0, 1, 7])
@pytest.mark.parametrize("dtype", [D.float32, D.float64])
@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_direct_equals_the_general_composition(n, dtype, with_bias):
    """ops.linear's direct form for (N, in) rows is the graph of matmul(x, w.T) + b."""
    from lazyarray.ops import nn as onn, linalg, manipulation, elementwise
    x, w = leaf((n, 4), dtype), leaf((3, 4), dtype)
    b = leaf((3,), dtype) if with_bias else None
    fast = onn.linear_direct(x, w, b)
    assert fast is not None
    general = linalg.matmul(x, manipulation.matrix_transpose(w))
    if with_bias:
        general = elementwise.add(general, b)
    assert same_graph(fast, general)
    assert same_graph(onn.linear(x, w, b), general)


def test_linear_general_cases_not_direct():
    from lazyarray.ops import nn as onn
    f = D.float32
    assert onn.linear_direct(leaf((2, 3, 4)), leaf((5, 4)), None) is None      # batched
    assert onn.linear_direct(leaf((2, 4), D.float16), leaf((5, 4), D.float16), None) is None
    assert onn.linear_direct(leaf((2, 4)), leaf((5, 4), D.float64), None) is None
    assert onn.linear_direct(leaf((2, 4)), leaf((5, 4)), leaf((1,), f)) is None  # bias (1,)
    with pytest.raises(ValueError):
        onn.linear(leaf((2, 3)), leaf((5, 4)))
    from lazyarray.ops import autocast
    previous = autocast.set_current(D.bfloat16)
    try:                                                  # autocast: the general path
        assert onn.linear_direct(leaf((2, 4)), leaf((5, 4)), None) is None
        assert onn.linear(leaf((2, 4)), leaf((5, 4))).dtype is D.bfloat16
    finally:
        autocast.set_current(previous)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("rows", [(5, 4), (2, 5, 4)])
def test_linear_layer_records_what_f_linear_records(dtype, with_bias, rows):
    """nn.Linear's forward makes F.linear's nodes itself (directly where it can)."""
    import lazyarray.nn.functional as F
    layer = la.nn.Linear(4, 3, bias=with_bias, dtype=dtype)
    x = la.asarray(np.ones(rows, dtype))
    got, want = layer(x)._node, F.linear(x, layer.weight, layer.bias)._node
    assert same_graph(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape", [(5, 4), (3,), ()])
def test_relu_layer_records_what_f_relu_records(dtype, shape):
    """nn.ReLU's forward makes F.relu's nodes itself (directly for float tensors)."""
    import lazyarray.nn.functional as F
    x = la.asarray(np.ones(shape, dtype))
    with la.config.override(module_reuse=False):     # the layer's graph, not a replayed call
        assert same_graph(la.nn.ReLU()(x)._node, F.relu(x)._node)
        bf = x.astype(la.bfloat16) if dtype is np.float32 else None
        if bf is not None:
            assert same_graph(la.nn.ReLU()(bf)._node, F.relu(bf)._node)
