"""The lifted elementwise functions' fronts (lazyarray/lift.py `_elementwise_front`,
`_direct_public`), the operators' direct forms and the ops' short ways record the graph
the op itself records on nodes, and the values and dtypes NumPy gives, over every dtype and
operand kind of `bench/recording_sweep.py`'s forms: a Python int, float and bool, a NumPy
scalar of the tensor's own dtype (and np.float64, np.float32), another tensor, either side.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import lazyarray as la
from lazyarray import ops
from lazyarray.callsite import format_frame
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler import primitive
from lazyarray.compiler.graph.node import Node, new_node, node_type
from lazyarray.lift import numpy_operand, truth_operand
from lazyarray.ops import elementwise as E
from lazyarray.ops.promotion import kept_spread, spread_scalar, weak_operand

DTYPES = {"bool": np.bool_, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
          "f16": np.float16, "f32": np.float32, "f64": np.float64}
UNARY = ["exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "tan",
         "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "log2",
         "log10", "floor", "ceil", "trunc", "round", "negative", "positive", "abs", "sign",
         "square", "reciprocal", "logical_not", "bitwise_invert", "isnan", "isinf",
         "isfinite", "signbit", "real", "imag", "conj", "relu"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "pow", "divide", "atan2",
          "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
          "floor_divide", "remainder", "logical_and", "logical_or", "logical_xor",
          "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
          "bitwise_right_shift", "copysign", "nextafter", "hypot", "logaddexp", "logaddexp2"]
# float-only ops that take an integer tensor's NumPy int scalar of its own dtype as the
# Python int it holds when float32 holds it exactly (`i / np.int32(2)` records `i / 2`)
EXACT_INTS = ("divide", "atan2", "copysign", "nextafter", "hypot", "logaddexp", "logaddexp2")
FLOAT_BINARY = ("copysign", "nextafter", "hypot", "logaddexp", "logaddexp2")


def _structure(node: Node) -> tuple:
    """A node's graph as nested tuples (op, type, attributes, scalar values and kinds)."""
    value = node.value
    if value is not None and not isinstance(value, (bool, int, float, complex)):
        value = repr(value.array.tolist())
    elif value is not None:
        value = (type(value).__name__, repr(value))
    return (node.op, node.shape, node.dtype, tuple(sorted(node.attrs.items())), value,
            node.buffer is not None, tuple(_structure(o) for o in node.operands))


def _outcome(make) -> object:
    try:
        out = make()
    except (TypeError, ValueError, OverflowError) as e:
        return type(e)
    return _structure(out._node if isinstance(out, la.Tensor) else out)


def _arrays() -> dict:
    v = np.array([-3.0, -0.0, 0.0, 1.5, 2.0, 7.0, -1.0, 5.0])
    out = {}
    for name, t in DTYPES.items():
        if t is np.bool_:
            out[name] = v > 0
        elif t is np.uint8:
            out[name] = np.abs(v).astype(t)
        else:
            out[name] = v.astype(t)
    return out


def _scalars(name: str) -> list:
    own = {"bool": np.bool_(True), "i32": np.int32(2), "i64": np.int64(2), "u8": np.uint8(2),
           "f16": np.float16(2.5), "f32": np.float32(2.5), "f64": np.float64(2.5)}[name]
    return [2, 2.5, True, 0, 1.0, -0.0, own, np.float64(0.5), np.float32(0.5)]


def _as_op_operand(fn_name: str, s, dtype: D.DType):
    """What the op itself takes for the NumPy scalar `s` beside a tensor of `dtype`."""
    if not isinstance(s, np.generic):
        return s
    if fn_name.startswith("logical"):
        return truth_operand(s)
    if fn_name in EXACT_INTS and dtype.is_int and s.dtype == dtype.np and abs(int(s)) <= 2 ** 24:
        return s.item()
    return numpy_operand(s)


@pytest.mark.parametrize("name", BINARY)
def test_lifted_binary_functions_and_operators_record_the_ops_graph(name) -> None:
    """`la.f(t, s)`, `la.f(s, t)`, `la.f(t, u)` (and the operator where there is one) give
    the graph `ops.f` records on the nodes, or raise the error it raises."""
    op, fn = getattr(ops, name), getattr(la, name)
    for dn, a in _arrays().items():
        t = la.asarray(a)
        node = t._node
        u = la.asarray(np.ones(a.shape, a.dtype))
        assert _outcome(lambda: fn(t, u)) == _outcome(lambda: op(node, u._node)), (name, dn)
        for s in _scalars(dn):
            ref = _as_op_operand(name, s, t.dtype)
            assert _outcome(lambda: fn(t, s)) == _outcome(lambda: op(node, ref)), (name, dn, s)
            assert _outcome(lambda: fn(s, t)) == _outcome(lambda: op(ref, node)), (name, dn, s)


_OPERATORS = {"add": "__add__", "subtract": "__sub__", "multiply": "__mul__",
              "divide": "__truediv__", "floor_divide": "__floordiv__", "remainder": "__mod__",
              "pow": "__pow__", "bitwise_and": "__and__", "bitwise_or": "__or__",
              "bitwise_xor": "__xor__", "bitwise_left_shift": "__lshift__",
              "bitwise_right_shift": "__rshift__", "equal": "__eq__", "less": "__lt__"}


@pytest.mark.parametrize("name", sorted(_OPERATORS))
def test_operators_record_what_the_lifted_function_records(name) -> None:
    dunder = _OPERATORS[name]
    for dn, a in _arrays().items():
        t = la.asarray(a)
        for s in _scalars(dn):
            assert _outcome(lambda: getattr(t, dunder)(s)) == \
                _outcome(lambda: getattr(la, name)(t, s)), (name, dn, s)
            rname = dunder.replace("__", "__r", 1)
            if hasattr(t, rname) and name not in ("equal", "less"):
                assert _outcome(lambda: getattr(t, rname)(s)) == \
                    _outcome(lambda: getattr(la, name)(s, t)), (name, dn, s)


def test_lifted_unary_where_and_clip_record_the_ops_graph() -> None:
    arrays = _arrays()
    c = la.asarray(arrays["bool"])
    for dn, a in arrays.items():
        t = la.asarray(a)
        node = t._node
        for name in UNARY:
            assert _outcome(lambda: getattr(la, name)(t)) == \
                _outcome(lambda: getattr(ops, name)(node)), (name, dn)
        for s in (0, 0.0, 2.5, True, -0.0, 7):
            assert _outcome(lambda: la.where(c, t, s)) == \
                _outcome(lambda: ops.where(c._node, node, s)), (dn, s)
            assert _outcome(lambda: la.where(c, s, t)) == \
                _outcome(lambda: ops.where(c._node, s, node)), (dn, s)
        assert _outcome(lambda: la.where(c, t, t)) == _outcome(lambda: ops.where(c._node, node, node))
        for lo, hi in ((0, 1), (0.0, 1.0), (0, None), (None, 1), (-1.5, 2.5), (-0.0, 300)):
            assert _outcome(lambda: la.clip(t, lo, hi)) == \
                _outcome(lambda: ops.clip(node, lo, hi)), (dn, lo, hi)
            assert _outcome(lambda: la.clip(t, min=lo, max=hi)) == \
                _outcome(lambda: ops.clip(node, lo, hi)), (dn, lo, hi)


def _rule_dtype(name: str, a: np.ndarray, s) -> np.dtype:
    """The result dtype of a float binary op of a tensor of a's dtype and `s`: a float
    tensor's own (a Python scalar or np.float64 weak beside it, a NumPy float of another
    dtype promoting), float32 for integers and bools (the default float)."""
    if a.dtype.kind == "f":
        if isinstance(s, np.generic) and type(s) is not np.float64 and s.dtype.kind == "f":
            return np.promote_types(a.dtype, s.dtype)
        return a.dtype
    if isinstance(s, np.generic) and s.dtype.kind == "f" and type(s) is not np.float64:
        return np.promote_types(np.float32, s.dtype)
    return np.dtype(np.float32)


@pytest.mark.parametrize("name", FLOAT_BINARY)
def test_float_binaries_of_integer_and_bool_operands_match_numpy(name) -> None:
    """hypot, logaddexp, logaddexp2, copysign, nextafter of integer and bool tensors beside
    Python ints and bools, NumPy scalars of their own dtype and each other (the short
    ways: `_exact_float`, `exact_ints`): NumPy's values in the rule's dtype."""
    ref = getattr(np, name)
    for dn, a in _arrays().items():
        t = la.asarray(a)
        for s in _scalars(dn) + [a]:
            for swap in (False, True):
                got = getattr(la, name)(*((s, t) if swap else (t, s)))
                want_dtype = _rule_dtype(name, a, s if not isinstance(s, np.ndarray) else a)
                x = a.astype(want_dtype)
                y = np.asarray(s).astype(want_dtype)
                with np.errstate(all="ignore"):
                    want = ref(*((y, x) if swap else (x, y)))
                assert got.dtype.np == want.dtype, (name, dn, s, swap)
                value = got.numpy()
                tol = {np.float16: 2e-3, np.float32: 4e-6, np.float64: 1e-12}[want.dtype.type]
                if name in ("copysign", "nextafter"):
                    np.testing.assert_array_equal(value, want, err_msg=f"{name} {dn} {s}")
                    assert np.signbit(value).tolist() == np.signbit(want).tolist()
                else:
                    np.testing.assert_allclose(value, want, rtol=tol, atol=0,
                                               err_msg=f"{name} {dn} {s!r} {swap}")


def test_log2_log10_isinf_and_bool_forms_match_numpy() -> None:
    for dn, a in _arrays().items():
        t = la.asarray(a)
        f = a if a.dtype.kind == "f" else a.astype(np.float32)
        with np.errstate(all="ignore"):
            for name, want in (("log2", np.log2(f)), ("log10", np.log10(f))):
                got = getattr(la, name)(t)
                assert got.dtype.np == want.dtype, (name, dn)
                np.testing.assert_allclose(got.numpy(), want, rtol=2e-3 if dn == "f16" else 2e-6,
                                           equal_nan=True, err_msg=f"{name} {dn}")
        if dn != "bool":
            assert la.isinf(t).numpy().tolist() == np.isinf(a).tolist()
        for sym in ("<", "==", ">=", "&", "^"):
            if a.dtype.kind == "f" and sym in ("&", "^"):
                continue
            got = eval(f"la.asarray(a) {sym} 2", {"la": la, "a": a})
            want = eval(f"a {sym} 2", {"a": a})
            assert got.dtype.np == want.dtype and got.numpy().tolist() == want.tolist(), (dn, sym)


def test_clip_of_integers_with_float_bounds_truncates_as_convert() -> None:
    """`_float_as_int` compares floats with the range ends as floats: the same int as
    the exact comparison, at and past both ends of every integer dtype."""
    for dtype in D.INTEGERS:
        lo, hi = E._INT_LIMITS[dtype]
        cases = [0.0, -0.0, 1.5, -1.5, float(lo), float(hi), float(lo) - 1e3, float(hi) + 1e3,
                 float("inf"), float("-inf"), float("nan"), 2.0 ** 62, -2.0 ** 63, 2.0 ** 63,
                 2.0 ** 64, np.nextafter(2.0 ** 63, 0), np.nextafter(2.0 ** 64, 0),
                 np.nextafter(2.0 ** 31, 0), 2.0 ** 31 - 1, 2.0 ** 31]
        for v in cases:
            v = float(v)
            exact = 0 if v != v else lo if v <= lo else hi if v >= hi else int(v)
            assert E._float_as_int(v, dtype) == exact, (dtype, v)


def test_spread_scalar_sets_the_slots_new_node_sets() -> None:
    for shape in ((), (4, 3)):
        got = spread_scalar(2.5, D.float32, shape)
        s = new_node("scalar", (), (), D.float32, {}, 2.5)
        want = s if not shape else new_node("broadcast_in_dim", (s,), shape, D.float32,
                                            {"shape": shape, "broadcast_dimensions": ()})
        assert _structure(got) == _structure(want)
        for n in (got, *got.operands):
            assert (n.buffer, n.sig, n.site) == (None, None, None)


def test_a_scalar_broadcast_is_made_through_its_primitive() -> None:
    """`x * 2.5`'s broadcast comes from broadcast_in_dim's rule, remembered: its type is
    the tensor's interned one and its attributes the dict every such node shares."""
    x = la.asarray(np.ones((4, 3), np.float32))
    a, b = (x * 2.5)._node.operands[1], (x * 3.5)._node.operands[1]
    assert a.op == b.op == "broadcast_in_dim" and a.type is b.type is x._node.type
    assert a.attrs is b.attrs and a.attrs == {"shape": (4, 3), "broadcast_dimensions": ()}
    assert spread_scalar(1.5, D.float16, (2, 5)).type is node_type((2, 5), D.float16)


def test_the_fronts_tables_are_the_memos_own_and_survive_a_clear() -> None:
    """A front end's table (`memo_of`) is the one `apply` fills: after the memo is
    cleared (past its cap), `apply` remembers into the same table the front looks in."""
    x = la.asarray(np.ones(7, np.float64))
    y = la.asarray(np.ones(7, np.float64))
    table = primitive.memo_of("multiply")
    primitive._clear_memo()
    assert primitive.memo_size() == 0 and not table
    xn, yn = x._node, y._node
    primitive.apply("multiply", xn, yn)
    assert primitive.memo_of("multiply") is table
    assert table[primitive.types_key((xn, yn))][0] is node_type((7,), D.float64)
    assert primitive.types_key((xn, xn)) is xn.type.pair       # two of one type: one key
    assert primitive.memo_size() == 1
    np.testing.assert_array_equal((x * y).numpy(), np.ones(7))


def _common_forms() -> list:
    f = la.asarray(np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4))
    g = la.asarray(np.ones((3, 4), np.float32))
    i = la.asarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    m = f > 0
    return [lambda: la.exp(f), lambda: f.exp(), lambda: la.exp(i), lambda: la.floor(f),
            lambda: -f, lambda: abs(f), lambda: f * g, lambda: f * 2.5, lambda: 2.5 - f,
            lambda: la.multiply(f, 2.5), lambda: la.subtract(2, f), lambda: f < 2,
            lambda: la.less(2.5, f), lambda: i * 2.5, lambda: m * 2, lambda: i / 2,
            lambda: i / i, lambda: f * np.float32(2), lambda: la.pow(f, np.float32(2)),
            lambda: i >> np.int32(1), lambda: f ** 2, lambda: la.square(f),
            lambda: la.where(m, f, g), lambda: la.where(m, f, 2.5), lambda: la.where(m, 0.0, i),
            lambda: la.where(m, 1.0, 0.5), lambda: la.clip(f, -1.5, 2.5), lambda: la.clip(i, 0, 5),
            lambda: f.astype(la.int32), lambda: la.signbit(f), lambda: la.logical_not(i),
            lambda: la.logical_and(i, i), lambda: la.log2(i), lambda: la.isinf(f),
            lambda: la.reciprocal(i), lambda: la.hypot(i, i)]


def test_the_fronts_find_what_apply_remembered(monkeypatch) -> None:
    """Recorded a second time, the common forms take every node from the memo by the
    fronts' own lookups (their keys are `apply`'s: `types_key`): no call of `apply`."""
    from lazyarray.ops import promotion
    forms = _common_forms()
    for form in forms:
        form()
    calls, apply = [], primitive.apply

    def counted(name, *operands, **attrs):
        calls.append(name)
        return apply(name, *operands, **attrs)
    for module, attr in ((primitive, "apply"), (E, "apply"), (promotion, "apply"),
                         (sys.modules["lazyarray.lift"], "_apply")):
        monkeypatch.setattr(module, attr, counted)
    for k, form in enumerate(forms):
        form()
        assert not calls, (k, calls)


def test_weak_operand_is_weak_scalar_like_but_for_shared_kept_broadcasts() -> None:
    from lazyarray.ops.promotion import weak_scalar_like
    for dtype in (D.float32, D.float16, D.int32, D.uint8, D.int64, D.bool_):
        for shape in ((), (4, 3)):
            x = new_node("parameter", (), shape, dtype, {})
            for v in (2, 2.5, True, False, 0, 1, -1, 0.0, -0.0, 1.0, 300, -7, 2 ** 63):
                got, want = weak_operand(v, x), weak_scalar_like(v, x)
                assert (got is None) == (want is None), (dtype, shape, v)
                if got is not None:
                    assert _structure(got) == _structure(want), (dtype, shape, v)
                    for n in (got, *got.operands):
                        assert (n.buffer, n.sig, n.site) == (None, None, None)


def test_converted_sets_the_slots_new_node_sets() -> None:
    x = new_node("parameter", (), (4, 3), D.int32, {})
    got = E._converted(x, D.float32)
    want = new_node("convert", (x,), (4, 3), D.float32, {"dtype": D.float32})
    assert _structure(got) == _structure(want) and got.operands[0] is x
    assert (got.buffer, got.value, got.sig, got.site) == (None, None, None, None)


def test_a_shared_kept_broadcast_never_becomes_a_tensors_own_node() -> None:
    """`x + 1`, `where(c, 1.0, 0.0)`: the kept constant's broadcast is one node shared by
    every graph (`kept_spread`); the results that are a kept constant itself (`imag(x)`,
    `logical_or(m, True)`) are nodes of their own, so that computing them gives no
    buffer to the shared node."""
    x = la.asarray(np.arange(6, dtype=np.float32))
    m = x > 2
    shared = kept_spread(int, 1, D.float32, (6,))
    assert (x + 1)._node.operands[1] is shared and (2 * x + 1)._node.operands[1] is shared
    w = la.where(m, 1.0, 0.0)
    assert w._node.operands[1] is kept_spread(float, 1.0, D.float32, (6,))
    outs = [la.imag(x), la.logical_or(m, True), la.logical_and(m, False), x + 1, w]
    la.sync()
    assert [o.numpy().tolist() for o in outs] == [
        [0.0] * 6, [True] * 6, [False] * 6, (np.arange(6) + 1.0).tolist(),
        np.where(np.arange(6) > 2, 1.0, 0.0).tolist()]
    for o in outs:
        assert o._node is not shared and o._node.buffer is not None
    for kind, value in ((int, 1), (float, 1.0), (float, 0.0), (int, 0), (bool, True)):
        for dtype in (D.float32, D.bool_):
            if kind is float and dtype is D.bool_:
                continue
            assert kept_spread(kind, value, dtype, (6,)).buffer is None
    assert weak_operand(-0.0, x._node).operands[0].value == -0.0    # -0.0 is not shared
    np.testing.assert_array_equal((x * -0.0).numpy(), np.arange(6, dtype=np.float32) * -0.0)


def test_fronts_bind_the_ops_parameters_and_name_the_op_in_errors() -> None:
    x = la.asarray(np.array([-2.0, 0.5, 3.0], np.float32))
    np.testing.assert_array_equal(la.clip(x, min=0).numpy(), [0.0, 0.5, 3.0])
    np.testing.assert_array_equal(la.clip(x, max=1.0).numpy(), [-2.0, 0.5, 1.0])
    np.testing.assert_array_equal(la.add(a=x, b=1).numpy(), [-1.0, 1.5, 4.0])
    np.testing.assert_array_equal(la.where(condition=x > 0, x=x, y=0.0).numpy(), [0.0, 0.5, 3.0])
    assert la.add(1, 2, device="cpu").item() == 3
    assert la.exp(0.0, device="cpu").item() == 1.0
    with pytest.raises(TypeError, match="add"):
        la.add(x, 1, out=None)
    with pytest.raises(TypeError, match="exp"):
        la.exp(x, 2)
    with pytest.raises(TypeError, match="clip"):
        la.clip(x, 0, 1, 2)
    other = la.asarray(np.ones(3, np.float32), device="interpreter")
    for make in (lambda: la.add(x, other), lambda: la.pow(x, other),
                 lambda: la.where(x > 0, x, other), lambda: la.clip(x, other, 1)):
        with pytest.raises(ValueError, match="different devices"):
            make()


def test_lifted_fronts_record_the_users_line() -> None:
    """The fronts hand `_wrap` the depth of the user's frame: the site is still the
    user's line (a wrong depth would name a frame of ours or one above the user's)."""
    x = la.asarray(np.ones(4, np.float32))
    i = la.asarray(np.arange(4, dtype=np.int32))
    c = x > 0
    cases = [lambda: la.add(x, 2.5), lambda: la.add(2.5, x), lambda: la.hypot(i, 2),
             lambda: la.hypot(i, np.int32(3)), lambda: la.divide(i, np.int32(3)),
             lambda: la.add(x, np.bool_(True)), lambda: la.where(c, x, 0.0),
             lambda: la.clip(x, 0, 1), lambda: la.exp(x), lambda: la.pow(x, 2.5),
             lambda: la.logical_or(x, 0.0), lambda: la.copysign(True, i), lambda: x / np.int32(2),
             lambda: la.less(c, 2), lambda: la.add(x, np.ones(4, np.float32))]
    for make in cases:
        t = make()
        assert format_frame(t._node.site) == f"{__file__}:{make.__code__.co_firstlineno}"

    def nested():            # lifted functions called from a function of the user's
        return la.where(c, 1.0, 0.0), sys._getframe().f_lineno
    t, line = nested()
    assert format_frame(t._node.site) == f"{__file__}:{line}"


def test_pow_of_integer_and_bool_tensors_writes_powers_graph_out() -> None:
    """`i ** 2.5`, `2.5 ** i`, `m ** 2`: pow's short ways record what `_power` (the
    general binary recorder) records."""
    for dtype in (D.int32, D.int64, D.uint8, D.bool_, D.float16, D.float32):
        x = new_node("parameter", (), (4,), dtype, {})
        for s in (2.5, -1.0, 0.0, 1.0, 2, 3, 0, 1, True, 7, -2):
            assert _outcome(lambda: ops.pow(x, s)) == _outcome(lambda: E._power(x, s)) or \
                not (dtype is D.bool_ or isinstance(s, float) and not dtype.is_float), (dtype, s)
            if isinstance(s, float):
                assert _outcome(lambda: ops.pow(s, x)) == _outcome(lambda: E._power(s, x)), (dtype, s)


def test_clip_bounds_of_integers_are_the_converted_floats() -> None:
    """clip's short way for a float bound of an integer x (written out in `_fast_bound`)
    gives the bound `_float_as_int` gives: truncated, saturated, NaN as 0."""
    def value(n):
        if n.op == "broadcast_in_dim":
            n = n.operands[0]
        return n.value if n.op == "scalar" else n.value.array.item()
    for dtype in D.INTEGERS:
        x = new_node("parameter", (), (4,), dtype, {})
        lo, hi = E._INT_LIMITS[dtype]
        for v in (1.5, -1.5, 2.5, 0.5, -0.5, 255.9, float(hi) + 1e3, float(lo) - 1e3,
                  float("inf"), float("-inf"), float("nan"), 2.0 ** 63, -2.0 ** 63, 1e30):
            node = ops.clip(x, v, None)
            assert node.op == "clamp" and value(node.operands[0]) == E._float_as_int(v, dtype), \
                (dtype, v)
            node = ops.clip(x, None, v)
            assert value(node.operands[2]) == E._float_as_int(v, dtype), (dtype, v)


def test_clip_with_shared_bounds_looks_them_up_and_keeps_negative_zero_apart() -> None:
    """clip(x, 0, 1) and clip(i, 0, None) reuse their bounds (shared nodes, looked up by
    kind, value, dtype and shape); -0.0 (== 0.0) is a runtime scalar of its own, never
    the 0.0 bound; the values are NumPy's."""
    a = np.array([-2.0, -0.0, 0.0, 0.5, 3.0, np.nan], np.float32)
    x = la.asarray(a)
    first, again = la.clip(x, 0.0, 1.0), la.clip(x, 0.0, 1.0)
    assert first._node.operands[0] is again._node.operands[0]
    assert first._node.operands[2] is again._node.operands[2]
    neg = la.clip(x, -0.0, 1.0)
    assert neg._node.operands[0] is not first._node.operands[0]
    assert neg._node.operands[0].operands[0].op == "scalar"
    for lo, hi in ((0.0, 1.0), (-0.0, 1.0), (0, 1), (-1, 0), (True, None), (None, 0.0)):
        got = la.clip(x, lo, hi).numpy()
        want = np.clip(a, -np.inf if lo is None else np.float32(lo), np.inf if hi is None else np.float32(hi))
        np.testing.assert_array_equal(got, want)
        assert np.signbit(got[:5]).tolist() == np.signbit(want[:5]).tolist(), (lo, hi)
    i = la.asarray(np.array([-5, 0, 3, 200], np.int32))
    assert la.clip(i, 0, None).numpy().tolist() == [0, 0, 3, 200]
    assert la.clip(i, -1, 1).numpy().tolist() == [-1, 0, 1, 1]
    assert la.clip(i, True, None).numpy().tolist() == [1, 1, 3, 200]



SHAPE_METHODS = [("view", (2, -1, 3)), ("reshape", (6, 4)), ("transpose", (0, 2)),
                 ("transpose", ()), ("transpose", (2, 0, 1)), ("permute", (1, 2, 0)),
                 ("permute", (0, 1, 2)), ("view", (2, 3, 4)), ("transpose", (1, -2))]


def _numpy_shape_method(name: str, a: np.ndarray, args: tuple) -> np.ndarray:
    if name in ("view", "reshape"):
        return a.reshape(args)
    if name == "transpose" and len(args) == 2:
        return np.swapaxes(a, *args)
    return np.transpose(a, args or None)


@pytest.mark.parametrize("name,args", SHAPE_METHODS, ids=[f"{n}{a}" for n, a in SHAPE_METHODS])
def test_shape_methods_remembered_record_what_the_general_way_records(name, args) -> None:
    """`t.view(...)`, `t.transpose(...)`, `t.permute(...)` called again on an operand of
    one type with the same int arguments make their node from what the first call made
    (ops/chains.py, keyed by method, type and arguments): the same graph as the op's, the same values, the
    user's line; another type takes its own way, bad arguments still raise."""
    from lazyarray.ops import chains
    chains.PLANS.clear()
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = la.asarray(data)
    first = getattr(la.exp(x), name)(*args)         # an op node: it has an interned type
    remembered = dict(chains.PLANS)
    again = getattr(la.exp(x), name)(*args); line = sys._getframe().f_lineno  # noqa: E702
    assert _structure(again._node) == _structure(first._node)
    assert format_frame(again._node.site) == f"{__file__}:{line}"
    np.testing.assert_allclose(again.numpy(), np.exp(_numpy_shape_method(name, data, args)),
                               rtol=1e-6)
    # a node of its own was made: remembered (an identity permutation makes none)
    assert bool(remembered) is (first._node.op != "exponential")
    with pytest.raises((ValueError, TypeError, IndexError)):
        getattr(la.exp(x), name)(*(5,) * (len(args) or 2))
    if name in ("transpose", "permute"):            # another type: its own result
        other = np.ones((4, 3, 2), np.float32)
        got = getattr(la.exp(la.asarray(other)), name)(*args)
        assert got.shape == _numpy_shape_method(name, other, args).shape
