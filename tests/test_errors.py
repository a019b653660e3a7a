"""Bad input gets a clear standard exception at the line that caused it, naming the op and
the shapes or dtypes involved, and never changes a tensor."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lazyarray as la

HERE = os.path.abspath(__file__)


def _x(shape=(2, 3), dtype=np.float32):
    return la.asarray(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape))


# ---- one test per kind of bad input ---------------------------------------------------

@pytest.mark.parametrize("call, words", [
    (lambda: la.add(_x((2, 3)), _x((4,))), ["add", "(2, 3)", "(4,)"]),
    (lambda: _x((2, 3)) * _x((3, 2)), ["multiply", "(2, 3)", "(3, 2)"]),
    (lambda: la.where(_x((2,)) > 0, _x((3,)), 0.0), ["where", "(2,)", "(3,)"]),
    (lambda: _x((2, 3)) @ _x((2, 3)), ["matmul", "(2, 3)"]),
    (lambda: la.concat([_x((2, 3)), _x((2, 4))]), ["concat", "(2, 3)", "(2, 4)"]),
    (lambda: la.stack([_x((2,)), _x((3,))]), ["stack", "(2,)", "(3,)"]),
    (lambda: _x((2, 3)).reshape(4, 2), ["reshape", "(2, 3)", "(4, 2)"]),
    (lambda: la.broadcast_to(_x((3,)), (2, 4)), ["broadcast_to", "(3,)", "(2, 4)"]),
])
def test_shape_mismatch_names_the_op_and_both_shapes(call, words, device):
    with pytest.raises(ValueError) as err:
        call()
    for w in words:
        assert w in str(err.value), f"{w!r} not in: {err.value}"


@pytest.mark.parametrize("call, words", [
    (lambda: _x((2, 3)).sum(axis=2), ["sum", "axis 2", "rank 2"]),
    (lambda: la.mean(_x((2, 3)), axis=-3), ["mean", "-3"]),
    (lambda: la.max(_x((2, 3)), axis=(0, 5)), ["max", "5"]),
    (lambda: la.argmax(_x((2, 3)), axis=2), ["argmax", "2"]),
    (lambda: la.expand_dims(_x((2, 3)), axis=4), ["expand_dims", "4"]),
    (lambda: la.flip(_x((2,)), axis=1), ["flip", "1"]),
    (lambda: la.sort(_x((2, 3)), axis=3), ["sort", "3"]),
    (lambda: la.concat([_x((2, 3)), _x((2, 3))], axis=2), ["concat", "2"]),
])
def test_bad_axis_is_an_index_error(call, words, device):
    with pytest.raises(IndexError) as err:
        call()
    for w in words:
        assert w in str(err.value), f"{w!r} not in: {err.value}"


@pytest.mark.parametrize("call, words", [
    (lambda: la.bitwise_and(_x(), _x()), ["bitwise_and", "float32"]),
    (lambda: ~_x(), ["bitwise_invert", "float32"]),
    (lambda: _x() << 1, ["bitwise_left_shift", "float32"]),
    (lambda: la.negative(la.asarray([True, False])), ["negative", "bool"]),
    (lambda: la.asarray([1.0], dtype="complex32"), ["complex32", "complex64"]),
    (lambda: la.asarray(np.array(["a", "b"])), ["asarray", "<U1"]),
    (lambda: _x().astype("float8"), ["float8"]),
    (lambda: la.zeros((2,), dtype=object), ["dtype"]),
])
def test_unsupported_dtype_is_a_type_error(call, words, device):
    with pytest.raises(TypeError) as err:
        call()
    for w in words:
        assert w in str(err.value), f"{w!r} not in: {err.value}"


@pytest.mark.parametrize("call, words", [
    (lambda: _x((3,))[3], ["index 3", "size 3"]),
    (lambda: _x((3,))[-4], ["-4", "size 3"]),
    (lambda: _x((2, 3))[:, 5], ["5", "size 3"]),
    (lambda: _x((3,))[np.array([0, 7])], ["7", "size 3"]),
    (lambda: la.take(_x((3,)), 3), ["3", "size 3"]),
    (lambda: _x((3,))[0, 0], ["too many indices", "(3,)"]),
])
def test_out_of_range_constant_index_is_an_index_error(call, words, device):
    with pytest.raises(IndexError) as err:
        call()
    for w in words:
        assert w in str(err.value), f"{w!r} not in: {err.value}"


@pytest.mark.parametrize("dtype, value", [("int8", 300), ("uint8", -1), ("int32", 2 ** 40),
                                          ("uint64", 2 ** 64)])
def test_python_int_out_of_range_for_the_dtype(dtype, value, device):
    x = la.asarray([1, 2], dtype=dtype)
    with pytest.raises((OverflowError, ValueError)) as err:
        x + value
    assert str(value) in str(err.value) and dtype in str(err.value)


def test_float_scalar_into_int_dtype_without_promotion_is_refused(device):
    with pytest.raises(TypeError, match="int8"):
        la.full((2,), 2.5, dtype="int8")


MALFORMED = [
    ("HloModule m\n\nENTRY main {\n  %p.0 = f32[2] parameter(), number=0\n"
     "  %a.1 = f32[2] add(f32[2] %p.0, f32[2] %zz)\n  ROOT %t.2 = (f32[2]) tuple(%a.1)\n}\n", 5),
    ("HloModule m\n\nENTRY main {\n  %p.0 = f32[2] parameter(), number=0\n"
     "  %a.1 = f32[2] frobnicate(f32[2] %p.0)\n  ROOT %t.2 = (f32[2]) tuple(%a.1)\n}\n", 5),
    ("HloModule m\n\nENTRY main {\n  %p.0 = q17[2] parameter(), number=0\n"
     "  ROOT %t.1 = (q17[2]) tuple(%p.0)\n}\n", 4),
    ("HloModule m\n\nENTRY main {\n  %p.0 = f32[2] parameter(), number=0\n"
     "  %a.1 = f32[3] add(f32[2] %p.0, f32[2] %p.0)\n  ROOT %t.2 = (f32[3]) tuple(%a.1)\n}\n", 5),
]


@pytest.mark.parametrize("text, line", MALFORMED)
def test_malformed_hlo_text_is_a_value_error_with_its_line(text, line):
    parser = pytest.importorskip("lazyarray.compiler.hlo.parser",
                                 reason="the HLO parser (compiler/hlo/parser.py) is not written yet")
    with pytest.raises(ValueError) as err:
        parser.parse_module(text)
    assert f"line {line}" in str(err.value), str(err.value)


# ---- mixed devices ------------------------------------------------------------------------

@pytest.mark.parametrize("combine", [lambda a, b: a + b, lambda a, b: la.add(a, b),
                                     lambda a, b: la.where(a > 0, a, b),
                                     lambda a, b: la.concat([a, b]), lambda a, b: a @ b])
def test_mixed_devices_name_both_and_the_fix(combine, device, other_device):
    a = la.asarray([1.0, 2.0], device=device)
    b = la.asarray([3.0, 4.0], device=other_device)
    with pytest.raises(ValueError) as err:
        combine(a, b)
    msg = str(err.value)
    assert device in msg and other_device in msg and ".to(" in msg, msg
    moved = combine(a, b.to(device))               # the fix the message names works
    assert moved.device is a.device


# ---- where and when the error is raised ---------------------------------------------------

def test_error_is_raised_when_recorded_at_the_users_line(device, fresh_metrics):
    a, b = _x((2, 3)) * 2, _x((3,)) + 1             # pending inputs
    with pytest.raises(ValueError) as err:
        bad = a + la.ones((4,))                      # the line the traceback must point at
    assert fresh_metrics.syncs == 0                  # raised while recording, no sync ran
    frames = [(os.path.abspath(e.path), e.lineno + 1) for e in err.traceback]
    mine = [ln for path, ln in frames if path == HERE]
    src = open(HERE).read().splitlines()
    assert mine and "the line the traceback must point at" in src[mine[-1] - 1]
    assert not a.is_materialized and not b.is_materialized


def test_a_failed_op_leaves_its_inputs_untouched(device, fresh_metrics):
    done = _x((2, 3)) + 1
    done.numpy()
    buffer = done._node.buffer
    pending = done * 2
    node = pending._node
    for bad in (lambda: done + _x((4,)), lambda: pending.sum(axis=7),
                lambda: la.bitwise_and(pending, done), lambda: pending.reshape(5)):
        with pytest.raises((ValueError, IndexError, TypeError)):
            bad()
    assert done._node.buffer is buffer and done.shape == (2, 3)
    assert pending._node is node and not pending.is_materialized
    np.testing.assert_allclose(pending.numpy(), (np.arange(6).reshape(2, 3) + 1) * 2)
    np.testing.assert_allclose(done.numpy(), np.arange(6).reshape(2, 3) + 1)
    assert fresh_metrics.syncs == 2


def test_item_of_many_elements_and_bool_ambiguity(device):
    x = _x((2, 2))
    with pytest.raises(ValueError, match="4 elements"):
        x.item()
    with pytest.raises(ValueError, match="ambiguous"):
        bool(x)


def test_unknown_device_lists_the_known_ones():
    with pytest.raises(ValueError) as err:
        la.asarray([1.0], device="tpu")
    assert "tpu" in str(err.value) and "interpreter" in str(err.value)


@pytest.mark.parametrize("call, shape", [
    (lambda: la.zeros((2 ** 40, 2 ** 40)), "(1099511627776, 1099511627776)"),
    (lambda: la.zeros((2 ** 40, 1)) + la.zeros((1, 2 ** 40)), "(1099511627776, 1099511627776)"),
    (lambda: la.ones((2 ** 62,)), "(4611686018427387904,)"),
    (lambda: la.full((2 ** 31, 2 ** 31, 4), 1.0), "(2147483648, 2147483648, 4)"),
    (lambda: la.eye(2 ** 32), "(4294967296, 4294967296)"),
])
def test_a_shape_too_large_to_address_is_refused(call, shape, device):
    """A 2**80-element shape was accepted (and would have wrapped every index computed
    from it): refused when recorded, naming the shape."""
    with pytest.raises(ValueError) as err:
        call()
    assert shape in str(err.value) and "larger than any array" in str(err.value)
