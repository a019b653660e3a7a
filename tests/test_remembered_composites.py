"""The composites a model records at every step (layer_norm, gelu, attention, linear over more than rows) are copied
from their first call's graph (ops/nn.py, compiler/transforms/graph_templates.py): each
copy is the graph the composite itself builds, for every form of its arguments, and
computes its values; bad input still raises after a copy."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.transforms import graph_templates
from lazyarray.ops import nn as N

from graph_compare import same_graph

RNG = np.random.default_rng(0)


def _t(*shape, dtype=np.float32):
    return la.asarray(RNG.standard_normal(shape).astype(dtype))


X, W, B = _t(2, 3, 8), _t(8), _t(8)
Q, K, V = _t(2, 4, 3, 8), _t(2, 4, 5, 8), _t(2, 4, 5, 8)
MASK = la.asarray(RNG.standard_normal((3, 5)) > 0)
ADD = _t(3, 5)

CASES = {
    "layer_norm": (lambda: F.layer_norm(X, (8,), W, B, 1e-5), N._layer_norm),
    "layer_norm plain": (lambda: F.layer_norm(X, 8), N._layer_norm),
    "layer_norm f64": (lambda: F.layer_norm(_X64, (3, 8), eps=1e-6), N._layer_norm),
    "linear": (lambda: F.linear(X, _W2, B), N._linear),
    "linear no bias": (lambda: F.linear(X, _W2), N._linear),
    "gelu": (lambda: F.gelu(X), N._gelu),
    "gelu tanh": (lambda: F.gelu(X, approximate="tanh"), N._gelu),
    "attention": (lambda: F.scaled_dot_product_attention(Q, K, V), N._attention),
    "attention causal": (lambda: F.scaled_dot_product_attention(Q, K, V, is_causal=True),
                         N._attention),
    "attention bool mask": (lambda: F.scaled_dot_product_attention(Q, K, V, MASK),
                            N._attention),
    "attention float mask": (lambda: F.scaled_dot_product_attention(Q, K, V, ADD, scale=0.3),
                             N._attention),
}
_X64 = _t(2, 3, 8, dtype=np.float64)
_W2 = _t(8, 8)


@pytest.mark.parametrize("name", list(CASES))
def test_a_copy_is_the_composite_graph(name):
    call, remembered = CASES[name]
    remembered.templates.clear()
    graph_templates.ENABLED[0] = False
    try:
        want = call()
    finally:
        graph_templates.ENABLED[0] = True
    for _ in range(3):                              # builds, then copies
        got = call()
        assert same_graph(got._node, want._node, fresh_leaves=True)
    assert any(remembered.templates.values())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


def test_bad_shapes_still_raise_after_a_copy():
    F.layer_norm(X, (8,), W, B)
    F.layer_norm(X, (8,), W, B)
    with pytest.raises(ValueError, match="layer_norm"):
        F.layer_norm(X, (4,), W, B)
    F.scaled_dot_product_attention(Q, K, V)
    with pytest.raises(ValueError, match="scaled_dot_product_attention"):
        F.scaled_dot_product_attention(Q, _t(2, 4, 5, 7), V)
