"""`la.vmap`: every primitive's batching rule against the primitive applied per element,
the public function against NumPy loops, composition with `grad`, and its errors."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler import PRIMITIVES
from lazyarray.compiler.transforms.batching import LOOP_OVER_BATCH
from lazyarray.compiler.primitive import LEAF, apply
from lazyarray.tensor import Tensor

from gradcheck import check_direction, check_full
from primitive_cases import CASES, _attrs, dtypes_for, make_inputs

BATCH = 3
# control flow (kind "control") says it has no rule yet: test_control_flow.py checks that
BATCHABLE = [c for c in CASES if PRIMITIVES[c.prim].kind not in (LEAF, "control")
             and c.prim != "tuple"]


def test_every_primitive_has_a_batching_rule():
    """A rule beside the primitive in its stanza, or the explicit per-element fallback;
    leaves have no operands and the module root is never inside a user's function."""
    missing = [n for n, p in PRIMITIVES.items()
               if p.kind != LEAF and n != "tuple" and p.batch is None]
    assert not missing, f"primitives without a batching rule: {missing}"
    assert all(callable(p.batch) or p.batch == LOOP_OVER_BATCH
               for p in PRIMITIVES.values() if p.batch is not None)


def _subsets(n: int) -> list:
    """Which operands carry the batch: all of them, then each one alone."""
    return [tuple(range(n))] + ([(i,) for i in range(n)] if n > 1 else [])


def _variant(case, subset, device):
    dtype = dtypes_for(case)[0]
    attrs = _attrs(case, dtype)
    elements = [make_inputs(case, dtype, seed=b) for b in range(BATCH)]
    args = [np.stack([e[i] for e in elements]) if i in subset else elements[0][i]
            for i in range(len(case.operands))]
    ref = PRIMITIVES[case.prim].reference
    with np.errstate(all="ignore"):
        want = np.stack([np.asarray(ref(*[e[i] if i in subset else elements[0][i]
                                         for i in range(len(case.operands))], **attrs))
                         for e in elements])

    def one(*ts):
        state = next(t for t in ts if isinstance(t, Tensor))._state
        return Tensor._wrap(apply(case.prim, *[t._node for t in ts], **attrs), state)

    tensors = [la.asarray(a, device=device) for a in args]
    in_axes = tuple(0 if i in subset else None for i in range(len(args)))
    return la.vmap(one, in_axes=in_axes)(*tensors), want


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    if want.dtype.kind == "f" or str(want.dtype) == "bfloat16":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=2e-2, atol=1e-5, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


@pytest.mark.parametrize("case", BATCHABLE, ids=lambda c: c.id)
def test_batching_rule_matches_per_element(case):
    """On the interpreter: the batched graph equals the primitive's NumPy reference applied
    to each batch element (with unbatched operands shared by all)."""
    for subset in _subsets(len(case.operands)):
        got, want = _variant(case, subset, "interpreter")
        _same(got.numpy(), want, f"{case.id} batched operands {subset}")


def test_batched_graphs_compile_like_the_interpreter():
    """Every case's batched graph in one CPU program, against the interpreter."""
    pairs = []
    for case in BATCHABLE:
        for subset in _subsets(len(case.operands)):
            pairs.append((f"{case.id} {subset}", _variant(case, subset, "cpu")[0],
                          _variant(case, subset, "interpreter")[0]))
    la.sync()
    for what, compiled, interpreted in pairs:
        _same(compiled.numpy(), interpreted.numpy(), what)


# ---- the public function -----------------------------------------------------------------

def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_matches_a_numpy_loop():
    x, w = _rand(5, 3), _rand(3, 4, seed=1)
    f = lambda v: la.tanh(v @ la.asarray(w)).sum()          # noqa: E731
    got = la.vmap(f)(la.asarray(x)).numpy()
    np.testing.assert_allclose(got, [np.tanh(r @ w).sum() for r in x], rtol=1e-5)


def test_in_axes_out_axes_and_structures():
    x, y = _rand(4, 2), _rand(2, 4, seed=1)
    got = la.vmap(lambda a, b: {"s": a + b, "p": (a * b,)}, in_axes=(0, 1), out_axes=1)(
        la.asarray(x), la.asarray(y))
    np.testing.assert_allclose(got["s"].numpy(), (x + y.T).T, rtol=1e-6)
    np.testing.assert_allclose(got["p"][0].numpy(), (x * y.T).T, rtol=1e-6)
    scaled = la.vmap(lambda a, c: a * c, in_axes=(0, None))(la.asarray(x), 3.0)
    np.testing.assert_allclose(scaled.numpy(), x * 3, rtol=1e-6)
    pair = la.vmap(lambda ab: [ab[0], ab[1] * 2], in_axes=([0, 1],))([la.asarray(x), la.asarray(y)])
    np.testing.assert_allclose(pair[1].numpy(), y.T * 2, rtol=1e-6)


def test_output_independent_of_the_batch_is_repeated():
    x = _rand(3, 2)
    c = la.asarray(np.float32(7))
    out = la.vmap(lambda a: c * 2)(la.asarray(x))
    np.testing.assert_array_equal(out.numpy(), np.full((3,), 14, np.float32))


def test_nested_vmap_is_an_outer_product():
    a, b = _rand(3), _rand(4, seed=1)
    got = la.vmap(lambda u: la.vmap(lambda v: u * v)(la.asarray(b)))(la.asarray(a))
    np.testing.assert_allclose(got.numpy(), np.outer(a, b), rtol=1e-6)


def test_per_example_gradients_compose_with_grad():
    """vmap(grad(f)) gives per-example gradients; grad(vmap(f)) differentiates the batch."""
    x, w = _rand(6, 3), _rand(3, seed=1)
    loss = lambda wv, xv: la.sum(la.sin(xv * wv) ** 2)        # noqa: E731
    per_example = la.vmap(la.grad(loss), in_axes=(None, 0))(la.asarray(w), la.asarray(x))
    want = np.stack([2 * np.sin(r * w) * np.cos(r * w) * r for r in x])
    np.testing.assert_allclose(per_example.numpy(), want, rtol=1e-4, atol=1e-6)
    total = la.grad(lambda wv: la.vmap(loss, in_axes=(None, 0))(wv, la.asarray(x)).sum())
    np.testing.assert_allclose(total(la.asarray(w)).numpy(), want.sum(0), rtol=1e-4, atol=1e-5)


def test_gradient_through_vmap_matches_finite_differences():
    """Float64 finite differences through a batched matrix product, in both arguments."""
    w = _rand(3, 2, seed=2).astype(np.float64)
    x = _rand(4, 3, seed=3).astype(np.float64)
    f = lambda xv, wv: la.vmap(lambda r: la.tanh(r @ wv))(xv)      # noqa: E731
    check_full(f, [x, w])
    check_direction(f, [x, w], device="cpu")


def test_reading_a_batched_value_inside_is_an_error_and_leaves_nothing_pending():
    x = la.asarray(_rand(3, 2))
    before = la.asarray(np.float32(1)) + 1          # pending, unrelated to the vmap
    with pytest.raises(RuntimeError, match="vmap: the value of a batched argument"):
        la.vmap(lambda a: a.sum().item())(x)
    kept = x * 2                                    # the device still syncs normally
    np.testing.assert_allclose(kept.numpy(), x.numpy() * 2)
    assert before.item() == 2


def test_bad_arguments_are_clear_errors():
    x, y = la.asarray(_rand(3, 2)), la.asarray(_rand(4, 2))
    with pytest.raises(ValueError, match="disagree on the batch size"):
        la.vmap(lambda a, b: a + b)(x, y)
    with pytest.raises(ValueError, match="out of range"):
        la.vmap(lambda a: a, in_axes=2)(x)
    with pytest.raises(ValueError, match="in_axes has 1 entries"):
        la.vmap(lambda a, b: a, in_axes=(0,))(x, x)
    with pytest.raises(ValueError, match="no argument is batched"):
        la.vmap(lambda a: a, in_axes=None)(x)
    with pytest.raises(ValueError, match="out_axes=None"):
        la.vmap(lambda a: a, out_axes=None)(x)
