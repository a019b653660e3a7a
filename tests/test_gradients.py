"""Every primitive's vector-Jacobian product against float64 finite differences.

The cases come from the primitive case table (tests/primitive_cases.py), run in float64:
a random-direction check on every test device, full finite differences on the
interpreter (the inputs are tiny). Public ops marked differentiable in the op table
(tests/op_table.py) get the random-direction check too.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler import PRIMITIVES
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.primitive import LEAF, NOT_DIFFERENTIABLE, apply
from lazyarray.lift import lift

import gradcheck
from primitive_cases import CASES, _attrs, dtypes_for, make_inputs

# ---- the registry -----------------------------------------------------------------------


def test_every_primitive_has_a_vjp_or_says_it_has_none():
    missing = [name for name, p in PRIMITIVES.items() if p.vjp is None]
    assert not missing, f"primitives with neither a vjp nor NOT_DIFFERENTIABLE: {missing}"


def _differentiable_case(case) -> bool:
    p = PRIMITIVES[case.prim]
    return p.kind != LEAF and p.vjp is not NOT_DIFFERENTIABLE and D.float64 in dtypes_for(case)


def _complex_case(case) -> bool:
    p = PRIMITIVES[case.prim]
    if p.kind == LEAF or p.vjp is NOT_DIFFERENTIABLE or D.complex128 not in dtypes_for(case):
        return False
    operands = [la.asarray(a)._node for a in make_inputs(case, D.complex128)]
    # float64 or complex128 results: finite differences of lower precision are noise
    return p.infer(operands, **_attrs(case, D.complex128))[1] in (D.float64, D.complex128)


def test_every_differentiable_primitive_has_a_float_case():
    covered = {c.prim for c in CASES if _differentiable_case(c) or _complex_case(c)}
    covered |= {c[0] for c in EXTRA_CASES}
    wanted = {n for n, p in PRIMITIVES.items()
              if p.kind != LEAF and p.vjp is not NOT_DIFFERENTIABLE}
    assert wanted <= covered, f"no gradient case for {sorted(wanted - covered)}"


# ---- the primitive table ----------------------------------------------------------------

def _primitive_fn(prim: str, attrs: dict):
    def on_nodes(*nodes):
        return apply(prim, *nodes, **attrs)
    return lift(on_nodes)


def _checkable(case) -> tuple:
    """(fn, inputs, reason to skip or "")."""
    if not _differentiable_case(case):
        return None, None, "not differentiable"
    if PRIMITIVES[case.prim].kind == "control":
        return None, None, CONTROL_REASON
    attrs = _attrs(case, D.float64)
    inputs = make_inputs(case, D.float64, seed=1)
    if not gradcheck.float_inputs(inputs):
        return None, None, "no floating-point operand"
    fn = _primitive_fn(case.prim, attrs)
    out_dtype = PRIMITIVES[case.prim].infer(
        [la.asarray(a)._node for a in inputs], **attrs)[1]
    if out_dtype in (D.float16, D.bfloat16):
        return None, None, "a half-precision result is too coarse for finite differences"
    if not out_dtype.is_float:
        return None, None, "integer or bool result"
    return fn, inputs, ""


CONTROL_REASON = ("a tuple result (control flow): test_control_flow.py checks gradients "
                  "through scan, fori_loop and cond")
_WHY_NOT = {c.id: _checkable(c)[2] for c in CASES if _differentiable_case(c)}
# cases whose result finite differences cannot check are left out at collection, each with
# its reason (test_cases_left_out_have_a_reason keeps the list honest)
GRAD_CASES = [c for c in CASES if _differentiable_case(c) and not _WHY_NOT[c.id]]
LEFT_OUT = {k: v for k, v in _WHY_NOT.items() if v}


def test_cases_left_out_have_a_reason():
    allowed = {"a half-precision result is too coarse for finite differences",
               "integer or bool result", "no floating-point operand", CONTROL_REASON}
    assert set(LEFT_OUT.values()) <= allowed, LEFT_OUT
    assert len(GRAD_CASES) > 3 * len(LEFT_OUT)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.id)
def test_primitive_vjp_direction(case, device):
    fn, inputs, _ = _checkable(case)
    gradcheck.check_direction(fn, inputs, device=device)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.id)
def test_primitive_vjp_full(case):
    fn, inputs, _ = _checkable(case)
    gradcheck.check_full(fn, inputs, device="interpreter")


# ---- complex: the conjugate-Wirtinger convention ------------------------------------------

COMPLEX_CASES = [c for c in CASES if c.prim not in ("tuple",)
                 and PRIMITIVES[c.prim].kind != "control" and _complex_case(c)]


# results with complex eigen- or singular vectors, each fixed only up to a phase: a loss
# that sees the phase has no gradient (PyTorch and JAX refuse it too); their check
# differentiates |result|^2, which no phase changes
PHASE_FREE = {"eigh": lambda a: a["vectors"], "eig": lambda a: a["vectors"],
              "svd": lambda a: a["compute_uv"]}


@pytest.mark.parametrize("case", COMPLEX_CASES, ids=lambda c: c.id)
def test_primitive_vjp_complex(case, device):
    """Every primitive taking complex128: its vjp against complex finite differences."""
    attrs = _attrs(case, D.complex128)
    inputs = make_inputs(case, D.complex128, seed=1)
    fn = _primitive_fn(case.prim, attrs)
    if PHASE_FREE.get(case.prim, lambda a: False)(attrs):
        prim_fn = fn
        fn = lambda *xs: la.abs(prim_fn(*xs)) ** 2     # noqa: E731
    gradcheck.check_complex_direction(fn, inputs, device=device)


# ---- cases the table lacks: edges of particular rules ----------------------------------

def _r(*shape, lo=-2.0, hi=2.0, seed=0):
    return np.random.default_rng(seed + len(shape)).uniform(lo, hi, shape)


EXTRA_CASES = [
    ("broadcast_in_dim", dict(shape=(4, 2, 3), broadcast_dimensions=(0, 2)), [_r(1, 3)]),
    ("pad", dict(edge_padding_low=(-1, 2), edge_padding_high=(2, -2), interior_padding=(2, 1)),
     [_r(3, 4), np.array(0.5)]),
    ("dynamic_update_slice", {},
     [_r(4, 5), _r(2, 2), np.array(3, np.int32), np.array(-1, np.int32)]),
    ("dynamic_slice", dict(slice_sizes=(2, 2)),
     [_r(4, 5), np.array(9, np.int64), np.array(1, np.int64)]),
    ("scatter", dict(axis=0, mode="set"), [_r(4, 2), np.array([1, 3, 1, 7, -1]), _r(5, 2)]),
    ("scatter", dict(axis=1, mode="add"), [_r(2, 4), np.array([[0, 3], [3, 3]]), _r(2, 2, 2)]),
    ("gather", dict(axis=0), [_r(4, 2), np.array([0, 5, -3, 2])]),
    ("dot_general", dict(lhs_contracting=(0, 3), rhs_contracting=(3, 1), lhs_batch=(2,),
                         rhs_batch=(0,)), [_r(2, 3, 4, 5), _r(4, 5, 6, 2)]),
    ("reduce", dict(axes=(0, 2), kind="prod"), [np.array([[[0.0, 2.0], [1.5, 0.0]],
                                                         [[3.0, 0.5], [0.0, 0.0]]])]),
    ("reduce", dict(axes=(1,), kind="max"), [_r(3, 5)]),
    ("cumulative", dict(axis=0, kind="max", reverse=True), [_r(5, 3)]),
    ("cumulative", dict(axis=1, kind="prod", reverse=False), [_r(2, 4, lo=0.5)]),
    ("sort", dict(dimension=0, descending=True), [_r(5, 2)]),
    ("power", {}, [np.array([0.3, 0.5, 2.0]), np.array([2.0, 0.0, -1.5])]),
    ("clamp", {}, [np.full((2, 3), -0.5), _r(2, 3), np.full((2, 3), 0.7)]),
    ("select", {}, [np.array([True, False, True]), _r(3), _r(3, seed=3)]),
    ("concatenate", dict(dimension=0), [_r(1, 2), _r(3, 2), _r(2, 2, seed=4)]),
    ("slice", dict(start_indices=(1, 2), limit_indices=(6, 3), strides=(3, 2)), [_r(7, 4)]),
]


def _extra_id(c) -> str:
    prim, attrs, _ = c
    return prim + "-" + "-".join(f"{v}" for v in attrs.values() if isinstance(v, str))


@pytest.mark.parametrize("extra", EXTRA_CASES, ids=_extra_id)
def test_edge_vjps(extra, device):
    prim, attrs, inputs = extra
    fn = _primitive_fn(prim, attrs)
    gradcheck.check_direction(fn, inputs, device=device)
    if device == "interpreter":
        gradcheck.check_full(fn, inputs, device=device)


def test_reduce_max_ties_share_the_gradient():
    x = la.asarray(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]), device="interpreter")
    g = la.grad(lambda t: la.sum(la.max(t, axis=1)))(x)
    np.testing.assert_allclose(g.numpy(), [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])


def test_power_at_zero_has_no_nan():
    x = la.asarray(np.array([0.0, 0.0]), device="interpreter")
    y = la.asarray(np.array([0.0, 2.0]), device="interpreter")
    gx, gy = la.grad(lambda a, b: la.sum(a ** b), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(gy.numpy(), [0.0, 0.0])


def test_rounding_has_zero_gradient_like_jax():
    x = la.asarray(np.array([0.3, -1.7]), device="interpreter")
    for f in (la.floor, la.ceil, la.round, la.sign):
        np.testing.assert_array_equal(la.grad(lambda t: la.sum(f(t)))(x).numpy(), [0.0, 0.0])


def test_integer_convert_stops_the_gradient():
    x = la.asarray(np.array([1.5, 2.5]), device="interpreter")
    with la.GradientTape() as tape:
        tape.watch(x)
        y = la.sum(x.astype(la.int32).astype(la.float64) * x)
    g = tape.gradient(y, x)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0])


# ---- public ops marked differentiable -----------------------------------------------------

# sqrt-like results: the derivative is infinite at 0 (std of one element)
SINGULAR_AT_ZERO = ("std",)


# inputs drawn on a lattice (ties, special values): not where derivatives are checked
LATTICE_DOMAINS = {"shift", "special", "bool"}


def _op_cases() -> list:
    try:
        from op_table import CASES as OP_CASES
    except ImportError:          # the table is optional for this file
        return []
    out = []
    for case in OP_CASES:
        if not case.differentiable or case.missing() or D.float64 not in tuple(case.dtypes):
            continue
        if set(case.domains or ()) & LATTICE_DOMAINS:
            continue
        chosen = [(k, v) for k, v in enumerate(case.variants())
                  if all(int(np.prod(s)) > 0 for s in v[0])]
        # two variants a case: the first, and the first with other keywords (axis, ...)
        picked = chosen[:1] + [kv for kv in chosen[1:] if kv[1][1] != chosen[0][1][1]][:1]
        for k, (shapes, kwargs) in picked:
            out.append(pytest.param(case, shapes, kwargs, id=f"{case.id}-{k}"))
    return out


@pytest.mark.parametrize("case,shapes,kwargs", _op_cases())
def test_public_op_gradient(case, shapes, kwargs, device):
    rng = np.random.default_rng(0)
    inputs = case.make_inputs(rng, D.float64, shapes)
    # a case the table marks differentiable must give float inputs and a float result
    assert gradcheck.float_inputs(inputs), f"{case.id}: no floating-point input"

    def fn(*xs):
        out = case.fn(*xs, **kwargs)
        return out[0] if isinstance(out, (tuple, list)) else out
    probe = fn(*[la.asarray(a) for a in inputs])
    assert probe.dtype.is_float, f"{case.id}: {probe.dtype.name} result"
    if case.name.split(".")[-1] in SINGULAR_AT_ZERO:
        assert not np.any(probe.numpy() == 0), f"{case.name}: inputs where it has no derivative"
    gradcheck.check_direction(fn, inputs, device=device)


@pytest.mark.parametrize("reverse", [False, True])
def test_cumulative_product_gradient_with_zeros(reverse):
    x = np.array([[2.0, 0.0, 3.0, 0.5, 0.0], [1.5, -2.0, 0.0, 4.0, 1.0]])
    fn = _primitive_fn("cumulative", dict(axis=1, kind="prod", reverse=reverse))
    gradcheck.check_full(fn, [x], device="interpreter")


# ---- second order: every vjp is itself differentiable (nested tapes) ---------------------

def _gradient_along(fn, inputs, seed=2):
    """h(x) = <grad of sum(w * fn(x)), v>: differentiating h differentiates the vjp."""
    rng = np.random.default_rng(seed)
    wrt = gradcheck.float_inputs(inputs)
    out = fn(*[la.asarray(np.array(a)) for a in inputs])
    w = rng.standard_normal(out.shape)
    vs = [rng.standard_normal(np.shape(inputs[i])) for i in wrt]

    def h(*xs):
        with la.GradientTape() as tape:
            tape.watch([xs[i] for i in wrt])
            loss = la.sum(fn(*xs) * la.asarray(w))
        grads = tape.gradient(loss, [xs[i] for i in wrt], unconnected_gradients="zero")
        total = la.sum(grads[0] * la.asarray(vs[0]))
        for g, v in zip(grads[1:], vs[1:]):
            total = total + la.sum(g * la.asarray(v))
        return total
    return h


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.id)
def test_primitive_vjp_second_order(case):
    fn, inputs, _ = _checkable(case)
    with la.config.override(device="interpreter"):
        gradcheck.check_direction(_gradient_along(fn, inputs), inputs, device="interpreter")


def test_gradient_modules_verify_and_round_trip_as_text():
    """The backward graphs (constants, iota offsets, scatters, convolutions) are ordinary
    modules: the verifier accepts them and the text form parses back to the same module."""
    from lazyarray.compiler.hlo.parser import parse_module
    from lazyarray.compiler.graph.trace import capture
    from lazyarray.compiler.hlo.verifier import verify
    from lazyarray.ops import convolution as C
    conv2d, pool = lift(C.conv2d), lift(C.max_pool2d)
    rng = np.random.default_rng(0)
    x = la.asarray(rng.standard_normal((2, 2, 6, 6)), device="interpreter")
    w = la.asarray(rng.standard_normal((4, 1, 3, 3)), device="interpreter")
    with la.GradientTape() as tape:
        h = pool(la.erf(conv2d(x, w, groups=2, padding=1)), 3, stride=2, padding=1)
        y = la.sum(la.abs(la.sort(h.reshape(2, -1), axis=1)[:, ::2]) ** 1.5)
        y = y + la.sum(la.cumulative_sum(h, axis=3))
    grads = tape.gradient(y, [x, w])
    module = capture([g._node for g in grads]).module("backward")
    verify(module)
    assert parse_module(str(module)) == module
