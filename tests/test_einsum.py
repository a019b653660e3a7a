"""einsum beyond the op table: what it lowers to, gradients of every pattern, errors."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.graph.trace import capture

import gradcheck


def _ops(t: la.Tensor) -> list:
    return [i.op for i in capture([t._node]).module("einsum").instructions]


def _data(*shape: int) -> la.Tensor:
    return la.asarray(np.ones(shape, np.float32))


def test_a_matrix_product_is_one_dot_general_and_nothing_else():
    a, b = _data(4, 5), _data(5, 6)
    ops = _ops(la.einsum("ij,jk->ik", a, b))
    assert ops.count("dot_general") == 1
    assert not {"transpose", "reduce", "broadcast_in_dim"} & set(ops), ops


def test_a_batched_product_is_one_batched_dot_general():
    a, b = _data(3, 4, 5), _data(3, 5, 6)
    ops = _ops(la.einsum("bij,bjk->bik", a, b))
    assert ops.count("dot_general") == 1 and "transpose" not in ops, ops


def test_three_operands_take_two_products():
    a, b, c = _data(2, 3), _data(3, 4), _data(4, 5)
    assert _ops(la.einsum("ij,jk,kl->il", a, b, c)).count("dot_general") == 2


PATTERNS = [("ij,jk->ik", [(2, 3), (3, 4)]), ("ii->i", [(3, 3)]), ("iij->j", [(2, 2, 3)]),
            ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("i,j->ij", [(3,), (2,)]),
            ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]), ("ij->", [(2, 3)]),
            ("abc,cd,de->abe", [(2, 3, 2), (2, 3), (3, 2)]), ("ij,ij->ij", [(1, 3), (2, 3)])]


@pytest.mark.parametrize("subscripts,shapes", PATTERNS, ids=[p[0] for p in PATTERNS])
def test_gradient_of_every_pattern(subscripts, shapes):
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(s) for s in shapes]
    gradcheck.check_full(lambda *xs: la.einsum(subscripts, *xs), inputs, device="interpreter")


@pytest.mark.parametrize("subscripts,shapes,match", [
    ("ij,jk->ik", [(2, 3), (4, 5)], "label 'j' has sizes 3 and 4"),
    ("ij,jk->ik", [(2, 3)], "2 operand terms for 1 operands"),
    ("ijk->i", [(2, 3)], "names 3 dimensions, its operand has 2"),
    ("ij->iq", [(2, 3)], "output label 'q' is in no input term"),
    ("i1->i", [(2, 3)], "letters"),
    ("ij->ii", [(2, 3)], "repeats a label"),
])
def test_errors_name_the_subscripts_and_the_problem(subscripts, shapes, match):
    xs = [la.ones(s) for s in shapes]
    with pytest.raises(ValueError, match=match):
        la.einsum(subscripts, *xs)


def test_bool_operands_are_refused():
    with pytest.raises(TypeError, match="bool"):
        la.einsum("i,i", la.ones(3, dtype=la.bool), la.ones(3, dtype=la.bool))


def test_compiled_matches_numpy_on_a_larger_contraction():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((8, 16, 32)), rng.standard_normal((32, 8, 12))
    got = la.einsum("bij,jbk->bik", la.asarray(a, device="cpu"), la.asarray(b, device="cpu"))
    np.testing.assert_allclose(got.numpy(), np.einsum("bij,jbk->bik", a, b), rtol=1e-12)
