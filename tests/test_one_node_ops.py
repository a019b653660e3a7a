"""hypot, logaddexp, logaddexp2, copysign, nextafter and clip/clamp: one primitive node
each, compared with NumPy itself on special values (signed zeros, infinities, NaN,
subnormals) and with PyTorch's gradients where the op table cannot say it (clamp's ties,
NaN bounds, min > max; the derivative rules at their edges); their PTX through ptxas; and
the fusion plan computing a costly one (floored division among them) once."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler import PRIMITIVES
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.codegen import nvptx, ptxas
from lazyarray.compiler.passes.pipeline import compile_plan
from lazyarray.compiler.graph.trace import capture
from ptx_marks import needs_libdevice, needs_ptxas

OPS = ("hypot", "logaddexp", "logaddexp2", "copysign", "nextafter")
EXACT = ("copysign", "nextafter")
HALVES = (D.float16, D.bfloat16)


def _same(got: np.ndarray, want: np.ndarray, what: str, ulps: int = 0) -> None:
    """Bit for bit (sign of zero included, any NaN for NaN), or within `ulps` units in
    the last place for finite nonzero results."""
    assert got.dtype == want.dtype, what
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(g) & np.isnan(w)
    ok = nan | ((g == w) & (np.signbit(g) == np.signbit(w)))
    if ulps:
        finite = np.isfinite(g) & np.isfinite(w) & (w != 0)
        with np.errstate(all="ignore"):
            spacing = np.abs(np.spacing(want.astype(np.float32 if want.dtype in (
                D.bfloat16.np, np.float16) else want.dtype))).astype(np.float64)
            if want.dtype == D.bfloat16.np:
                spacing = spacing * 2.0 ** 16
            elif want.dtype == np.float16:
                spacing = spacing * 2.0 ** 13
            ok |= finite & (np.abs(g - w) <= ulps * spacing)
    if not ok.all():
        idx = np.argwhere(~ok)[:5].ravel()
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} differ, e.g. "
                             + ", ".join(f"got {got[i]!r} want {want[i]!r}" for i in idx))


def _grid(dtype: D.DType) -> tuple:
    """Every pair of special and ordinary values of a float dtype (subnormals too)."""
    info = np.finfo(np.float32 if dtype is D.bfloat16 else dtype.np)
    tiny = float(info.smallest_subnormal) if dtype is not D.bfloat16 else 9.18355e-41
    vals = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-3, 100.0, -7.25, np.inf, -np.inf,
            np.nan, tiny, -tiny, float(info.tiny), float(info.max), -float(info.max)]
    with np.errstate(over="ignore"):
        v = np.array(vals, np.float64).astype(dtype.np)
    a, b = zip(*itertools.product(v, v))
    return np.array(a, dtype.np), np.array(b, dtype.np)


def _numpy(name: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """NumPy's answer; half floats (bfloat16, which NumPy lacks, and float16) computed in
    float32 and rounded once, as NumPy's float16 loops do, but nextafter in their own
    bits (NumPy's float16 loop and ml_dtypes' bfloat16 one)."""
    fn = getattr(np, name)
    with np.errstate(all="ignore"):
        if a.dtype in (np.float16, D.bfloat16.np) and name != "nextafter":
            return fn(a.astype(np.float32), b.astype(np.float32)).astype(a.dtype)
        return fn(a, b)


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("name", OPS)
def test_one_node_and_numpys_values_on_special_pairs(name, dtype, device):
    a, b = _grid(dtype)
    t = getattr(la, name)(la.asarray(a, device=device), la.asarray(b, device=device))
    assert t._node.op == name and all(o.op == "parameter" for o in t._node.operands)
    _same(t.numpy(), _numpy(name, a, b), f"{name} {dtype.name} on {device}",
          ulps=0 if name in EXACT else 4)


@pytest.mark.parametrize("name", OPS)
def test_scalars_and_integers_record_one_node_of_the_default_float(name):
    x = la.asarray(np.array([0.5, -2.0, 3.0], np.float32))
    i = la.asarray(np.array([1, -2, 3], np.int32))
    fn = getattr(la, name)
    for t in (fn(x, 2.5), fn(2, x), fn(i, i), fn(i, 2), fn(3, i), fn(i, 2.5)):
        assert t._node.op == name and t.dtype == la.float32
    f = i.numpy().astype(np.float32)
    np.testing.assert_array_equal(fn(i, 2).numpy(), _numpy(name, f, np.full(3, 2, np.float32)))
    with pytest.raises(TypeError, match=name):
        fn(la.asarray(np.array([1 + 1j], np.complex64)), 1.0)


# ---- clip / clamp -----------------------------------------------------------------------

CLIP_VALUES = [np.nan, -np.inf, -1.0, -0.0, 0.0, 0.5, 1.0, np.inf]


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.name)
def test_clip_is_numpys_clip_with_scalar_bounds_bit_for_bit(dtype, device):
    """Every triple of special values (NaN in x or in a bound, signed zeros, min > max)
    through tensor bounds, against np.clip called element by element with NumPy scalar
    bounds (the loop NumPy uses for scalar bounds: x's own zero where it ties a zero
    bound; NumPy's float32/float64 loop over whole bound arrays would take the bound's,
    its float16 loop x's). And Python scalar bounds against np.clip directly."""
    v = np.array(CLIP_VALUES, np.float64).astype(dtype.np)
    x, lo, hi = (np.array(c, dtype.np) for c in zip(*itertools.product(v, v, v)))
    wide = [c.astype(np.float32) if dtype in HALVES else c for c in (x, lo, hi)]
    want = np.array([np.clip(*t) for t in zip(*wide)], wide[0].dtype).astype(dtype.np)
    t = la.clip(*(la.asarray(c, device=device) for c in (x, lo, hi)))
    assert t._node.op == "clamp"
    _same(t.numpy(), want, f"clip {dtype.name} tensor bounds on {device}")
    xs = la.asarray(v, device=device)
    for a, b in itertools.product(CLIP_VALUES, CLIP_VALUES):
        got = xs.clip(a, b)
        assert got._node.op == "clamp" and got.dtype == xs.dtype
        wv = v.astype(np.float32) if dtype in HALVES else v
        _same(got.numpy(), np.clip(wv, a, b).astype(dtype.np), f"clip({a}, {b}) {dtype.name}")


@pytest.mark.parametrize("dtype", [D.int8, D.uint8, D.int32, D.int64, D.uint64],
                         ids=lambda d: d.name)
def test_clip_of_integers_keeps_the_dtype(dtype):
    info = np.iinfo(dtype.np)
    a = np.array(sorted({info.min, info.min + 1, 0, 1, 3, 7, info.max}), dtype.np)
    x = la.asarray(a)
    for lo, hi in [(0, 3), (3, 0), (None, 3), (1, None), (1.5, 6.5), (-2.5, 2.5)]:
        got = la.clip(x, lo, hi)
        assert got._node.op == "clamp" and got.dtype == x.dtype
        # a float bound truncated (what NumPy's float result gives as x's dtype)
        lo_i = info.min if lo is None else int(lo)
        hi_i = info.max if hi is None else int(hi)
        want = np.array([min(max(int(v), lo_i), hi_i) for v in a], dtype.np)
        np.testing.assert_array_equal(got.numpy(), want)
    lo, hi = np.full(a.shape, 1, dtype.np), np.full((1,), 5, dtype.np)   # broadcast bounds
    np.testing.assert_array_equal(la.clip(x, la.asarray(lo), la.asarray(hi)).numpy(),
                                  np.clip(a, lo, hi))


def test_clip_bounds_broadcast_and_take_x_dtype():
    a = np.arange(-3, 3, dtype=np.float32).reshape(2, 3)
    lo = np.array([-1.0, 0.0, 1.0], np.float64)
    hi = np.array([[0.5], [2.0]], np.float16)
    got = la.clip(la.asarray(a), la.asarray(lo), la.asarray(hi))
    assert got.dtype == la.float32 and got.shape == (2, 3)
    np.testing.assert_array_equal(got.numpy(), np.clip(a, lo.astype(np.float32),
                                                       hi.astype(np.float32)))
    with pytest.raises(TypeError, match="clip: complex"):
        la.clip(la.asarray(np.array([1j], np.complex64)), 0.0, 1.0)
    with pytest.raises(TypeError, match="bool"):
        la.clip(la.asarray(np.array([True])), 0, 1)


@pytest.fixture
def torch():
    """PyTorch, for the tests that compare gradients with it (only those skip without it)."""
    return pytest.importorskip("torch", reason="PyTorch is not installed: the parity of the "
                                               "gradients at ties is checked against it")


def _torch_grads(torch, fn, *arrays):
    ts = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    fn(*ts).sum().backward()
    return [t.grad.numpy() for t in ts]


def _la_grads(fn, *arrays):
    xs = [la.asarray(a) for a in arrays]
    with la.GradientTape() as tape:
        tape.watch(xs)
        loss = la.sum(fn(*xs))
    return [g.numpy() for g in tape.gradient(loss, xs)]


TIES = dict(
    x=[-1.0, 0.0, 0.5, 1.0, 2.0, np.nan, 0.5, 0.5, 3.0, 2.0, 2.0, 1.0],
    lo=[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, np.nan, 1.0, 2.0, 2.0, 3.0, 1.0],
    hi=[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 2.0, 1.0, np.nan])


def test_clamp_gradient_at_ties_nans_and_crossed_bounds_is_pytorchs(torch):
    """x takes all of the gradient at a tie with a bound (not the half maximum and minimum
    would give it), a bound takes it where it wins, min > max sends it to max, a NaN
    anywhere sends it nowhere: torch.clamp's rule, with tensor and with scalar bounds."""
    arrays = [np.array(TIES[k]) for k in ("x", "lo", "hi")]
    got = _la_grads(lambda x, lo, hi: la.clamp(x, lo, hi), *arrays)
    want = _torch_grads(torch, lambda x, lo, hi: torch.clamp(x, lo, hi), *arrays)
    for g, w, what in zip(got, want, ("x", "min", "max")):
        np.testing.assert_array_equal(g, w, err_msg=what)
    x = arrays[0]
    for lo, hi in [(0.0, 1.0), (0.0, None), (None, 1.0), (1.0, 0.0), (2.0, 2.0)]:
        (g,) = _la_grads(lambda t: t.clamp(lo, hi), x)
        (w,) = _torch_grads(torch, lambda t: torch.clamp(t, lo, hi), x)
        np.testing.assert_array_equal(g, w, err_msg=f"clamp({lo}, {hi})")


@pytest.mark.parametrize("name", OPS)
def test_gradients_at_the_edges_are_pytorchs(name, torch):
    """hypot at (0, 0) (NaN, as PyTorch), copysign at 0 and toward -0.0, nextafter where
    a == b or NaN, logaddexp with an infinite side; where both sides of logaddexp are the
    same infinity PyTorch gives NaN and lazyarray one half each (the limit along a = b)."""
    a = np.array([0.0, 3.0, -0.0, 2.0, -np.inf, np.inf, 1.0, -1.0, np.nan, 5.0])
    b = np.array([0.0, 4.0, -1.0, 2.0, 0.0, 1.0, -np.inf, -0.0, 1.0, -np.inf])
    got = _la_grads(getattr(la, name), a, b)
    want = _torch_grads(torch, getattr(torch, name), a, b)
    for g, w, what in zip(got, want, "ab"):
        np.testing.assert_array_equal(g, w, err_msg=f"{name} d{what}")
    if name.startswith("logaddexp"):
        both = np.array([-np.inf, np.inf, 2.0])
        for g in _la_grads(getattr(la, name), both, both):
            np.testing.assert_array_equal(g, [0.5, 0.5, 0.5])


# ---- fusion: a costly value is computed once --------------------------------------------

@pytest.mark.parametrize("op", ["floor_divide", "remainder", "hypot", "logaddexp"])
def test_costly_value_with_two_consumers_is_computed_once(op):
    """An op its stanza marks costly (floored division, a transcendental) feeding two
    kernels is materialized, not recomputed in each: the fusion plan says why."""
    x = la.asarray(np.linspace(1, 9, 64, dtype=np.float32).reshape(8, 8))
    y = la.asarray(np.full((8, 8), 2.5, np.float32))
    q = getattr(la, op)(x, y)
    outs = [(q * 2.0).sum(axis=0), (q + 1.0).sum(axis=1)]
    prim = {"remainder": "floor_mod"}.get(op, op)
    assert PRIMITIVES[prim].costly
    plan = compile_plan(capture([t._node for t in outs]).module("m"))
    ins = plan.module.instructions
    owners = [k for k in plan.kernels for p in k.members if ins[p].op == prim]
    assert len(owners) == 1, [(k.kind, k.name) for k in owners]
    want = getattr(np, op)(x.numpy(), y.numpy())
    np.testing.assert_allclose(outs[0].numpy(), (want * 2).sum(axis=0), rtol=1e-5)


# ---- PTX ----------------------------------------------------------------------------------



@needs_ptxas
@needs_libdevice
def test_ptx_of_every_float_dtype_assembles():
    """One PTX module with each op (and clamp, also of integers) over every dtype it
    takes, fused into a chain, accepted by ptxas for sm_80 and sm_90."""
    mod = nvptx.new_module("one_node")
    for k, dtype in enumerate(D.FLOATS + (D.int32, D.uint8)):
        x = la.asarray(np.ones((5, 7), dtype.np))
        y = la.asarray(np.full((5, 7), 3, dtype.np))
        outs = [la.clip(x, y, y + 1)]
        if dtype.is_float:
            outs += [getattr(la, n)(x, y) * 2 for n in OPS]
        plan = compile_plan(capture([t._node for t in outs]).module(f"m{k}"))
        nvptx.emit_kernels(mod, plan, f"k{k}_")
    text = str(mod)
    assert '@"__nv_hypotf"(' in text and '@"__nv_hypot"(' in text
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    ptxas.check(ptx, ("sm_80", "sm_90"), "one_node")
