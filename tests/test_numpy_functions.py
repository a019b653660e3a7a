"""NumPy's functions on tensors: `np.sum(t)`, `np.std(t, ddof=1)`, `np.concatenate([t, a])`
and the rest compute with NumPy, as for any array-like, with every keyword NumPy's, and
give NumPy's results (as the ufuncs do: `np.exp(t)`); lazyarray's own functions stay lazy."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la

_X = (np.arange(24, dtype=np.float32).reshape(2, 3, 4) % 7 - 3) / 2
_I = (np.arange(12, dtype=np.int32).reshape(3, 4) * 5) % 11

# (label, function, positional arguments after the array, keywords); "I" marks the int array
CALLS = [
    ("sum", np.sum, (), {}), ("sum_axis_keep", np.sum, (), {"axis": 1, "keepdims": True}),
    ("sum_dtype", np.sum, (), {"dtype": np.float64}),
    ("sum_int_dtype", np.sum, (), {"dtype": np.int8, "_int": True}),
    ("sum_axes", np.sum, (), {"axis": (0, 2)}),
    ("mean", np.mean, (), {}), ("mean_dtype_axis", np.mean, (), {"axis": -1, "dtype": np.float64}),
    ("max", np.max, (), {}), ("max_axis_keep", np.max, (), {"axis": 0, "keepdims": True}),
    ("min_initial", np.min, (), {"axis": 1, "initial": -10.0}),
    ("amax", np.amax, (), {"axis": 2}),
    ("std", np.std, (), {}), ("std_ddof", np.std, (), {"axis": 1, "ddof": 1}),
    ("var_dtype", np.var, (), {"dtype": np.float64, "keepdims": True}),
    ("prod", np.prod, (), {"axis": 0}), ("cumsum", np.cumsum, (), {"axis": 1}),
    ("argmax", np.argmax, (), {"axis": -1}), ("argmin", np.argmin, (), {}),
    ("median", np.median, (), {"axis": 1}), ("percentile", np.percentile, (30,), {"axis": 0}),
    ("nanmean", np.nanmean, (), {}), ("ptp", np.ptp, (), {"axis": 2}),
    ("any", np.any, (), {"axis": 0}), ("all", np.all, (), {}),
    ("round", np.round, (), {"decimals": 1}), ("clip", np.clip, (-1, 1), {}),
    ("transpose", np.transpose, (), {"axes": (2, 0, 1)}), ("reshape", np.reshape, ((4, 6),), {}),
    ("squeeze", np.squeeze, (), {}), ("ravel", np.ravel, (), {}),
    ("sort", np.sort, (), {"axis": 1}), ("argsort", np.argsort, (), {"axis": 0}),
    ("unique", np.unique, (), {}), ("nonzero", np.nonzero, (), {}),
    ("where", np.where, (), {}), ("take", np.take, ([0, 3],), {"axis": 2}),
    ("diff", np.diff, (), {"axis": -1}), ("trace", np.trace, (), {}),
    ("norm", np.linalg.norm, (), {"axis": -1}), ("einsum", None, (), {}),
    ("average", np.average, (), {"axis": 1}), ("count_nonzero", np.count_nonzero, (), {}),
    ("isclose", np.isclose, (0.5,), {}), ("allclose", np.allclose, (_X,), {}),
    ("array_equal", np.array_equal, (_X,), {}), ("histogram", np.histogram, (), {"bins": 3}),
    ("shape", np.shape, (), {}), ("ndim", np.ndim, (), {}), ("size", np.size, (), {}),
    ("exp_ufunc", np.exp, (), {}), ("add_ufunc", np.add, (1.5,), {}),
]


def _call(fn, label, x, args, kwargs):
    kwargs = {k: v for k, v in kwargs.items() if not k.startswith("_")}
    if label == "einsum":
        return np.einsum("abc,abc->b", x, x)
    return fn(x, *args, **kwargs)


def _same(got, want, label):
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), label
        for g, w in zip(got, want):
            _same(g, w, label)
        return
    assert type(got) is type(want), (label, type(got), type(want))
    if isinstance(want, (np.ndarray, np.generic)):
        assert got.dtype == want.dtype, (label, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=label)
    else:
        assert got == want, label


@pytest.mark.parametrize("label, fn, args, kwargs", CALLS, ids=[c[0] for c in CALLS])
def test_numpy_function_on_a_tensor_equals_it_on_the_array(label, fn, args, kwargs, device):
    data = _I if kwargs.get("_int") else _X
    want = _call(fn, label, data, args, kwargs)
    got = _call(fn, label, la.asarray(data), args, kwargs)
    _same(got, want, label)


@pytest.mark.parametrize("fn, kwargs", [(np.sum, {"axis": 1}), (np.mean, {"axis": 0}),
                                        (np.max, {"axis": 2}), (np.cumsum, {"axis": 0})])
def test_out_is_a_numpy_array_written_as_numpy_writes_it(fn, kwargs, device):
    want = fn(_X, **kwargs)
    out = np.empty_like(want)
    result = fn(la.asarray(_X), out=out, **kwargs)
    assert result is out
    np.testing.assert_array_equal(out, want)


def test_a_tensor_as_out_is_refused_with_the_way_out():
    t = la.asarray(_X)
    with pytest.raises(TypeError, match="out=<Tensor>.*la.sum"):
        np.sum(t, axis=0, out=la.zeros((3, 4)))


def test_tensors_inside_sequences_and_mixed_with_arrays(device):
    t = la.asarray(_X)
    for got, want in [(np.concatenate([t, _X], axis=1), np.concatenate([_X, _X], axis=1)),
                      (np.stack((t, t)), np.stack((_X, _X))),
                      (np.dot(t[0], _X[0].T), np.dot(_X[0], _X[0].T)),
                      (np.where(t > 0, t, _X * 2), np.where(_X > 0, _X, _X * 2))]:
        _same(got, want, "mixed")


def test_metadata_functions_do_not_compute_the_value(clean_metrics):
    t = la.asarray(_X) * 2           # pending
    syncs = la.debug.metrics().syncs
    assert (np.shape(t), np.ndim(t), np.size(t)) == ((2, 3, 4), 3, 24)
    assert la.debug.metrics().syncs == syncs and not t.is_materialized


def test_operators_and_lazyarray_functions_stay_lazy():
    t = la.asarray(_X)
    assert type(np.ones(4, np.float32) + t) is la.Tensor      # the operator defers to ours
    assert type(la.sum(t, axis=1)) is la.Tensor
