"""Recording's fast paths give exactly the graph the general path gives, and its remembered
rules never remember an error.

Elementwise front ends record the common case (two nodes of one dtype and shape, or a node
and a weak Python scalar) without `operands`/`apply`; shape rules, broadcasts, axes and
reshape targets are remembered. Each case here builds the same op both ways and compares
the graphs node by node (op, shape, dtype, attributes, scalar values), and checks that bad
input still raises on every call.
"""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray import ops
from lazyarray.callsite import format_frame, user_site
from lazyarray.compiler import dtypes as D
from lazyarray.compiler.node import Node, parameter_leaf
from lazyarray.compiler.primitive import apply
from lazyarray.ops.promotion import broadcast_shapes, normalize_axes, operands


def _structure(node: Node) -> tuple:
    """A node's graph as nested tuples: what capture and the compiler read of it."""
    value = node.value
    if value is not None and not isinstance(value, (bool, int, float, complex)):
        value = repr(value.array.tolist())            # a kept constant's literal
    elif value is not None:
        value = (type(value).__name__, repr(value))   # -0.0 and 0.0, 1 and True apart
    return (node.op, node.shape, node.dtype, tuple(sorted(node.attrs.items())), value,
            node.buffer is not None, tuple(_structure(o) for o in node.operands))


def _leaf(dtype: D.DType, shape: tuple = (4, 3)) -> Node:
    return parameter_leaf(np.zeros(shape, dtype.np), shape, dtype)


def _general(name: str, prim: str, a, b, numeric: bool = False, to_float: bool = False,
             **attrs) -> Node:
    """The op recorded the general way: promotion and broadcast, the checks, `apply`."""
    a, b = operands(name, a, b)
    if numeric and a.dtype is D.bool_:
        raise TypeError(f"{name}: not defined for bool tensors")
    if to_float and not a.dtype.is_inexact:
        a, b = (apply("convert", n, dtype=D.DEFAULT_FLOAT) for n in (a, b))
    return apply(prim, a, b, **attrs)


BINARY = [(ops.add, "add", "add", {}), (ops.multiply, "multiply", "multiply", {}),
          (ops.subtract, "subtract", "subtract", {"numeric": True}),
          (ops.maximum, "maximum", "maximum", {}), (ops.minimum, "minimum", "minimum", {}),
          (ops.divide, "divide", "divide", {"to_float": True}),
          (ops.less, "less", "compare", {"direction": "LT"}),
          (ops.equal, "equal", "compare", {"direction": "EQ"})]
DTYPES = [D.float32, D.float16, D.bfloat16, D.float64, D.int32, D.uint8, D.bool_,
          D.complex64, D.int8, D.int64, D.uint64, D.complex128]
# the ints past a dtype's range take the general way, which raises (OverflowError)
SCALARS = [2.5, 0.0, -0.0, 1.0, -1.0, math.nan, math.inf, 3, 0, -1, True, False, 300, -129,
           2**40, 2**63, -2**63 - 1, 2**64, 1e300]


def _same_or_same_error(fast, general) -> None:
    try:
        want = _structure(general())
    except (TypeError, ValueError, OverflowError) as e:
        with pytest.raises(type(e)):
            fast()
        return
    assert _structure(fast()) == want


@pytest.mark.parametrize("fn,name,prim,kw", BINARY, ids=[b[1] for b in BINARY])
@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_binary_fast_path_records_the_general_graph(fn, name, prim, kw, dtype) -> None:
    a, b = _leaf(dtype), _leaf(dtype)
    _same_or_same_error(lambda: fn(a, b), lambda: _general(name, prim, a, b, **kw))
    for s in SCALARS:
        _same_or_same_error(lambda: fn(a, s), lambda: _general(name, prim, a, s, **kw))
        _same_or_same_error(lambda: fn(s, a), lambda: _general(name, prim, s, a, **kw))
    zero_d = _leaf(dtype, ())
    _same_or_same_error(lambda: fn(zero_d, 2), lambda: _general(name, prim, zero_d, 2, **kw))
    # broadcasts and mixed dtypes: made by `operands`, then recorded
    for other in (_leaf(dtype, (3,)), _leaf(dtype, (4, 1)), _leaf(D.float32, (3,)),
                  _leaf(D.int64, (4, 3)), _leaf(dtype, (5,))):
        _same_or_same_error(lambda: fn(a, other), lambda: _general(name, prim, a, other, **kw))
        _same_or_same_error(lambda: fn(other, a), lambda: _general(name, prim, other, a, **kw))


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_unary_fast_path_records_the_general_graph(dtype) -> None:
    x = _leaf(dtype)
    for fn, prim in [(ops.exp, "exponential"), (ops.tanh, "tanh"), (ops.sqrt, "sqrt")]:
        def general():
            y = x if x.dtype.is_inexact else apply("convert", x, dtype=D.DEFAULT_FLOAT)
            return apply(prim, y)
        _same_or_same_error(lambda: fn(x), general)


def _unary_general(name: str, prim: str, x: Node) -> Node:
    """The unary op the general way: `operands`, the bool check, `apply`."""
    (x,) = operands(name, x)
    if x.dtype is D.bool_:
        raise TypeError(f"{name}: not defined for bool tensors")
    if prim == "abs" and x.dtype.kind == "uint":
        return x
    if prim in ("floor", "ceil", "truncate", "round_nearest_even") and not x.dtype.is_float:
        return x
    return apply(prim, x, x) if prim == "multiply" else apply(prim, x)


def _square_general(name: str, prim: str, x: Node) -> Node:
    """x ** 2: a product, but for a bool x (True ** 2 is the int 1, as in NumPy)."""
    if x.dtype is D.bool_:
        return apply("power", *operands("pow", x, 2))
    return _unary_general(name, prim, x)


UNARY = [(ops.negative, "negative", "negate"), (ops.abs, "abs", "abs"),
         (ops.sign, "sign", "sign"), (ops.square, "square", "multiply"),
         (ops.floor, "floor", "floor"), (ops.ceil, "ceil", "ceil"),
         (ops.trunc, "trunc", "truncate"), (ops.round, "round", "round_nearest_even"),
         (lambda x: ops.pow(x, 2), "pow", "multiply")]


@pytest.mark.parametrize("dtype", DTYPES, ids=[d.name for d in DTYPES])
def test_unary_operator_fast_paths_record_the_general_graph(dtype) -> None:
    for shape in ((4, 3), ()):
        x = _leaf(dtype, shape)
        for fn, name, prim in UNARY:
            general = _square_general if name == "pow" else _unary_general
            _same_or_same_error(lambda: fn(x), lambda: general(name, prim, x))
    x = _leaf(dtype)
    if dtype.is_float:      # x ** 2.0: a float exponent squares a float tensor only
        assert _structure(ops.pow(x, 2.0)) == _structure(apply("multiply", x, x))
    else:
        want = _structure(apply("power", *operands("pow", x, 2.0)))
        assert _structure(ops.pow(x, 2.0)) == want


def test_numpy_float64_operands_are_weak_as_python_floats() -> None:
    """np.float64 subclasses float: operators take it as the Python float (the tensor's
    dtype stays), on either side, and x ** np.float64(0.5) is NumPy's square root."""
    a = np.array([-0.0, -np.inf, 4.0, 2.5], np.float32)
    x, i = la.asarray(a), la.asarray(np.arange(4))
    h = x.astype(la.float16)
    for t, arr in ((x, a), (i, np.arange(4)), (h, a.astype(np.float16))):
        for got, plain in [(t * np.float64(2.5), t * 2.5), (np.float64(2.5) - t, 2.5 - t),
                           (t / np.float64(3), t / 3.0), (t > np.float64(0.5), t > 0.5),
                           (t ** np.float64(2), t ** 2.0)]:
            assert got.dtype is plain.dtype
            np.testing.assert_array_equal(got.numpy(), plain.numpy())
    assert (i * np.float64(2.5)).dtype is la.float32
    with np.errstate(invalid="ignore"):
        want = a ** np.float32(0.5)            # NumPy's square root: -0.0 stays, -inf is NaN
    np.testing.assert_array_equal((x ** np.float64(0.5)).numpy(), want)


def test_ops_record_the_users_line() -> None:
    """Each op's node holds the line that recorded it (an error computing it names that
    line), through every front end: operators, methods, lifted functions, composites."""
    x = la.asarray(np.ones((2, 3), np.float32))
    xi = la.asarray(np.ones((2, 3), np.int32))

    def helper(t):
        return t * 2.5, sys._getframe().f_lineno

    cases = [      # each recorded on its lambda's own line
        lambda: x * x, lambda: x * 2.5, lambda: 2.5 - x, lambda: xi * 2.5, lambda: x ** 2,
        lambda: -x, lambda: x.exp(), lambda: la.exp(x), lambda: la.multiply(x, 2),
        lambda: x.sum(), lambda: x.mean(axis=1), lambda: x.reshape(3, 2),
        lambda: la.logaddexp(x, x), lambda: x > np.float64(0.5),
    ]
    for make in cases:
        t = make()
        want = make.__code__.co_firstlineno
        assert format_frame(t._node.site) == f"{__file__}:{want}", make
    t, line = helper(x)
    assert format_frame(t._node.site) == f"{__file__}:{line}"
    y = la.asarray(np.ones(3, np.float32))
    line = sys._getframe().f_lineno + 1
    y += 1.5
    assert format_frame(y._node.site) == f"{__file__}:{line}"


def test_call_sites_of_short_lived_code_are_their_own() -> None:
    """Code made at run time (exec) comes and goes, and a new code object may take a
    freed one's address: the site of each is its own file and line."""
    for k in range(40):
        name = f"<generated {k}>"
        scope = {"user_site": user_site, "la": la, "np": np}
        exec(compile("\n" * k + "site = user_site()\n"
                     "t = la.asarray(np.ones(2, np.float32)) * 3.5\n", name, "exec"), scope)
        assert scope["site"] == f"{name}:{k + 1}"
        assert format_frame(scope["t"]._node.site) == f"{name}:{k + 2}"


def test_tensor_operators_match_numpy_through_the_fast_paths() -> None:
    a = np.array([[1.5, -2.0, 0.0]], np.float32)
    x = la.asarray(a)
    got = [(x * 2.5).numpy(), (2.5 - x).numpy(), (x + 0).numpy(), (x * -0.0).numpy(),
           (x / 2).numpy(), (x - True).numpy(), (x > 0.0).numpy(), x.exp().numpy()]
    want = [a * 2.5, 2.5 - a, a + 0, a * -0.0, a / 2, a - True, a > 0.0, np.exp(a)]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6)
    assert np.signbit((x * -0.0).numpy()).tolist() == np.signbit(a * -0.0).tolist()
    i = la.asarray(np.array([1, 2], np.int32))
    assert (i * 2.5).dtype is la.float32 and (i + 1).dtype is la.int32
    with pytest.raises(TypeError, match="subtract"):
        la.asarray(np.array([True])) - la.asarray(np.array([False]))


def test_remembered_rules_never_remember_errors() -> None:
    assert broadcast_shapes("add", (3, 1), (1, 4)) == (3, 4)
    for _ in range(2):
        with pytest.raises(ValueError, match="maximum: shapes"):
            broadcast_shapes("maximum", (3, 2), (4,))
    assert normalize_axes("sum", 1, 2) == (1,)
    for _ in range(2):
        with pytest.raises(TypeError, match="axis must be an int"):
            normalize_axes("sum", True, 2)            # True hashes as 1: not the same key
        with pytest.raises(IndexError, match="mean: axis 2"):
            normalize_axes("mean", 2, 2)
    x = la.asarray(np.zeros((2, 6), np.float32))
    assert x.reshape(3, 4).shape == (3, 4) and x.reshape(-1).shape == (12,)
    for _ in range(2):
        with pytest.raises(ValueError, match="reshape"):
            x.reshape(5, 3)
    node = x._node
    assert apply("reduce", node, axes=(1,), kind="sum").shape == (2,)
    for _ in range(2):
        with pytest.raises(IndexError):
            apply("reduce", node, axes=(2,), kind="sum")
    with pytest.raises(ValueError):
        apply("broadcast_in_dim", node, shape=(2, 5), broadcast_dimensions=(0, 1))


def test_labels_checked_once_still_catch_new_values() -> None:
    logits = la.asarray(np.zeros((3, 4), np.float32))
    labels = la.asarray(np.array([0, 1, 3]))
    for _ in range(2):
        F.cross_entropy(logits, labels)              # in range, remembered
    with pytest.raises(ValueError, match="label 9"):
        F.cross_entropy(la.asarray(np.zeros((3, 9), np.float32))[:, :3], la.asarray([9, 0, 1]))
    labels[0] = 7                                    # the tensor holds a new value
    la.sync()
    for _ in range(2):
        with pytest.raises(ValueError, match="label 7"):
            F.cross_entropy(logits, labels)
    with pytest.raises(ValueError, match="label 3"):  # fewer classes: checked again
        F.cross_entropy(la.asarray(np.zeros((3, 3), np.float32)), la.asarray(np.array([0, 1, 3])))


def test_lifted_several_tensors_take_the_general_rules() -> None:
    x, w, b = (la.asarray(np.ones(s, np.float32)) for s in ((2, 3), (4, 3), (4,)))
    assert F.linear(x, w, b).numpy().tolist() == [[4.0] * 4] * 2
    assert F.linear(x, w, None).shape == (2, 4)
    c = la.asarray(np.array([[True], [False]]))
    assert la.where(c, x, 0.0).numpy().tolist() == [[1.0] * 3, [0.0] * 3]
    with pytest.raises(ValueError, match="linear"):
        F.linear(x, la.asarray(np.ones((4, 5), np.float32)), b)


@pytest.mark.parametrize("name", ["sum", "prod", "mean", "all", "any", "argmax", "argmin"])
def test_reduction_methods_with_an_int_axis_record_the_lifted_graph(name) -> None:
    """`x.sum(1)`, `x.mean(-1, True)` take the op on the node directly: the same graph as
    the lifted function with keywords, NumPy's values, and the same errors."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 7.5
    x = la.asarray(a)
    lifted = getattr(la, name)
    for axis, keep in [(1, None), (-1, True), (0, False), (2, None)]:
        got = getattr(x, name)(axis) if keep is None else getattr(x, name)(axis, keep)
        want = lifted(x, axis=axis, keepdims=bool(keep))
        assert _structure(got._node) == _structure(want._node)
        ref = getattr(np, name)(a, axis=axis, keepdims=bool(keep))
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6)
    with pytest.raises((TypeError, IndexError)):
        getattr(x, name)(3)
    with pytest.raises(TypeError):
        getattr(x, name)(True)                  # a bool is no axis (the general way says so)


def test_shapes_and_axes_as_tuples_take_the_lifted_fast_path() -> None:
    """`la.reshape(x, (3, 4))` and `la.permute_dims(x, (1, 0))`: a tuple of ints goes to
    the op as is; a tuple holding anything else (a NumPy int) goes the general way."""
    a = np.arange(12, dtype=np.float32)
    x = la.asarray(a)
    for shape in [(3, 4), (-1, 6), (np.int64(4), 3), (12,)]:
        got = la.reshape(x, shape)
        assert got.shape == a.reshape(shape).shape
        np.testing.assert_array_equal(got.numpy(), a.reshape(shape))
    assert _structure(x.reshape(3, 4)._node) == _structure(la.reshape(x, (3, 4))._node)
    m = la.reshape(x, (3, 4))
    np.testing.assert_array_equal(la.permute_dims(m, (1, 0)).numpy(), a.reshape(3, 4).T)
    for _ in range(2):
        with pytest.raises(ValueError, match="reshape"):
            la.reshape(x, (5, 3))
        with pytest.raises(TypeError, match="reshape"):
            la.reshape(x, (3.0, 4))
