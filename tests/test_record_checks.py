"""Arguments that used to be accepted and fail (or silently misbehave) at sync are errors
where the op is recorded: raised at the user's own line, naming the op and what is valid."""
from __future__ import annotations

import os
import traceback

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.compiler.hlo.verifier import verify

HERE = os.path.abspath(__file__)


def _x(shape=(2, 3), dtype=np.float32):
    return la.asarray(np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape))


CASES = [
    (lambda: la.eye(-2), ValueError, ["eye", "n_rows", "-2"]),
    (lambda: la.eye(3, 2.5), TypeError, ["eye", "n_cols", "2.5"]),
    (lambda: la.eye(3, k=0.5), TypeError, ["eye", "k"]),
    (lambda: la.zeros((2.5,)), TypeError, ["zeros", "2.5"]),
    (lambda: la.zeros((2, -1)), ValueError, ["zeros", "negative", "(2, -1)"]),
    (lambda: la.ones(-3), ValueError, ["ones", "-3"]),
    (lambda: la.full((True,), 1.0), TypeError, ["full", "bool"]),
    (lambda: la.random.normal((2.5, 2)), TypeError, ["random", "2.5"]),
    (lambda: la.random.uniform((-1,)), ValueError, ["random", "-1"]),
    (lambda: la.linspace(0, 1, 2.5), TypeError, ["linspace", "num"]),
    (lambda: la.broadcast_to(_x((1,)), (-1,)), ValueError, ["broadcast_to", "-1"]),
    (lambda: _x((6,)).reshape(-2, -3), ValueError, ["reshape", "-2"]),
    (lambda: _x((6,)).reshape(2.0, 3), TypeError, ["reshape", "float"]),
    (lambda: la.tile(_x((2,)), (-1,)), ValueError, ["tile", "-1"]),
    (lambda: la.repeat(_x((3,)), -1), ValueError, ["repeat", "repeats", "-1"]),
    (lambda: F.one_hot(la.asarray([0, 1]), -1), ValueError, ["one_hot", "num_classes", "-1"]),
    (lambda: F.one_hot(la.asarray([0, 1]), 2.0), TypeError, ["one_hot", "num_classes"]),
    (lambda: F.cross_entropy(_x((2, 3)), la.asarray([0, 3])), ValueError,
     ["cross_entropy", "label 3", "3 classes"]),
    (lambda: F.cross_entropy(_x((2, 3)), la.asarray([-1, 0])), ValueError,
     ["cross_entropy", "label -1"]),
    (lambda: F.nll_loss(_x((2, 3)), la.asarray([0, 7])), ValueError, ["nll_loss", "label 7"]),
    (lambda: la.asarray([1.0], device="cpu:5"), ValueError, ["cpu:5", "cpu:0"]),
    (lambda: la.asarray([1.0], device="interpreter:1"), ValueError, ["interpreter:1"]),
    (lambda: setattr(la.config, "num_threads", "abc"), TypeError, ["num_threads", "'abc'"]),
    (lambda: setattr(la.config, "num_threads", -2), ValueError, ["num_threads", "-2"]),
    (lambda: setattr(la.config, "strict", "yes"), TypeError, ["strict"]),
    (lambda: setattr(la.config, "cache_dir", 3), TypeError, ["cache_dir"]),
    (lambda: _x((3,), np.int32) ** -1, ValueError, ["pow", "negative", "int32"]),
    (lambda: la.pow(_x((3,), np.int64), -2), ValueError, ["pow", "negative"]),
    (lambda: _x().sum(axis=1.0), TypeError, ["sum", "axis", "1.0"]),
    (lambda: la.mean(_x(), axis="0"), TypeError, ["mean", "axis"]),
    (lambda: _x() + "a", TypeError, ["add", "'a'", "str"]),
    (lambda: "a" * _x(), TypeError, ["multiply", "str"]),
    (lambda: _x() - None, TypeError, ["subtract", "None"]),
]


@pytest.mark.parametrize("call, kind, words", CASES)
def test_raised_at_the_users_line(call, kind, words):
    with la.config.override():          # a setting changed by a case is put back
        with pytest.raises(kind) as err:
            call()
    for w in words:
        assert w in str(err.value), f"{w!r} not in: {err.value}"
    # the user's line is in the traceback: raised while recording, not at a later sync
    frames = [f for f in traceback.extract_tb(err.value.__traceback__)
              if f.filename == HERE]
    assert frames, "not raised from this file's call"
    assert not any("runtime.py" in f.filename and f.name.startswith("_sync")
                   for f in traceback.extract_tb(err.value.__traceback__))


def test_out_of_range_labels_on_the_device_give_nan_not_a_silent_zero():
    """Labels computed in the same graph cannot be checked at record time: their rows'
    loss is NaN (PyTorch raises; silently adding 0 to the mean was the bug)."""
    logits = _x((2, 3))
    base = la.asarray([0, 1])
    for op in (F.cross_entropy, F.nll_loss):
        assert np.isnan(op(logits, base * 3).item())      # [0, 3]: pending, not checkable
        rows = op(logits, base * 3, reduction="none").numpy()
        assert np.isnan(rows[1]) and np.isfinite(rows[0])


def test_labels_checked_on_the_host_need_no_nan_guard():
    """Labels whose values were checked in range where the loss was recorded get no NaN
    guard (no `and` of range tests in the loss's graph); the loss and its gradient are
    unchanged, and pending labels of the same values keep the guard."""
    rng = np.random.default_rng(3)
    z = rng.standard_normal((4, 3)).astype(np.float32)
    labels = np.array([0, 2, 1, 2])
    for op in (F.cross_entropy, F.nll_loss):
        ops_of = {}
        for name in ("known", "pending"):
            # pending: computed in the loss's own graph (made here: a sync computes
            # every pending tensor)
            y = la.asarray(labels) if name == "known" else la.asarray(labels) * 1
            logits = la.asarray(z)
            with la.GradientTape() as tape:
                tape.watch(logits)
                loss = op(logits, y)
            ops_of[name] = la.debug.ir([loss], stage="hlo").count(" and(")   # the guard's
            grad = tape.gradient(loss, logits)
            want_rows = -z[np.arange(4), labels] if op is F.nll_loss else \
                -(z - np.log(np.exp(z).sum(1, keepdims=True)))[np.arange(4), labels]
            np.testing.assert_allclose(loss.item(), want_rows.mean(), rtol=1e-5)
            assert np.all(np.isfinite(grad.numpy()))
        assert ops_of["known"] == 0 and ops_of["pending"] >= 1


def test_empty_squeeze_follows_numpy():
    """NumPy accepts squeeze of a 0-d array (axis None, 0 or -1) and returns it; we do too."""
    x = la.asarray(np.float32(2.0))
    for t in (la.squeeze(x), la.squeeze(x, axis=0), la.squeeze(x, axis=-1)):
        assert t.shape == () and t.item() == 2.0
    with pytest.raises(IndexError, match="valid: 0 or -1"):
        la.squeeze(x, axis=1)


def test_concat_of_empty_tensors(device):
    e = la.zeros((0,))
    assert la.concat([e, e]).numpy().shape == (0,)
    np.testing.assert_array_equal(la.concat([e, la.ones(2), e, la.ones(1)]).numpy(), [1, 1, 1])
    z = la.zeros((0, 3))
    assert la.concat([z, z], axis=0).numpy().shape == (0, 3)
    assert la.concat([z, z], axis=1).numpy().shape == (0, 6)


def test_verifier_checks_the_operand_count():
    p = Instruction("parameter", (), (4,), D.float32, {"number": 0})
    q = Instruction("parameter", (), (4,), D.float32, {"number": 1})
    for op, operands in (("sine", (0, 1)), ("add", (0,)), ("add", (0, 1, 1)),
                         ("select", (0, 1))):
        m = Module("m", [p, q, Instruction(op, operands, (4,), D.float32, {})], [2])
        with pytest.raises(ValueError, match=f"{op} takes"):
            verify(m)
    verify(Module("m", [p, q, Instruction("add", (0, 1), (4,), D.float32, {})], [2]))
