"""Sorting, searching and set functions against NumPy; graph breaks and strict mode."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.graph_break import GraphBreakError

RNG = np.random.default_rng(7)
TIES = RNG.integers(0, 4, size=(3, 7)).astype(np.float32)     # many equal keys
WITH_NAN = np.array([[3.0, np.nan, -1.0, 2.0, np.nan, 0.0], [1.0, 1.0, -np.inf, np.inf, 5.0, 1.0]],
                    np.float32)


def _stable_desc(a: np.ndarray, axis: int) -> np.ndarray:
    """Descending order that keeps equal elements in their original order (no NaN)."""
    return np.argsort(-a.astype(np.float64), axis=axis, kind="stable")


# ---- sort, argsort ---------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_ascending(axis, device):
    x = la.asarray(TIES)
    np.testing.assert_array_equal(la.sort(x, axis=axis).numpy(), np.sort(TIES, axis=axis))
    np.testing.assert_array_equal(la.argsort(x, axis=axis).numpy(),
                                  np.argsort(TIES, axis=axis, kind="stable"))


@pytest.mark.parametrize("axis", [0, -1])
def test_sort_and_argsort_descending_are_stable(axis, device):
    x = la.asarray(TIES)
    want = _stable_desc(TIES, axis)
    got = la.argsort(x, axis=axis, descending=True)
    assert got.dtype == la.int64
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(la.sort(x, axis=axis, descending=True).numpy(),
                                  np.take_along_axis(TIES, want, axis=axis))


def test_sort_puts_nan_last(device):
    got = la.sort(la.asarray(WITH_NAN)).numpy()
    np.testing.assert_array_equal(got, np.sort(WITH_NAN, axis=-1))
    np.testing.assert_array_equal(la.argsort(la.asarray(WITH_NAN)).numpy(),
                                  np.argsort(WITH_NAN, axis=-1, kind="stable"))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64", "float16", "float64", "bool"])
def test_sort_dtypes(dtype, device):
    a = RNG.integers(0, 50, size=(4, 5)).astype(dtype)
    got = la.sort(la.asarray(a), axis=0)
    assert got.dtype == la.asarray(a).dtype
    np.testing.assert_array_equal(got.numpy(), np.sort(a, axis=0))
    np.testing.assert_array_equal(la.argsort(la.asarray(a)).numpy(),
                                  np.argsort(a, axis=-1, kind="stable"))


def test_sort_size_zero_and_methods(device):
    e = la.asarray(np.zeros((0, 3), np.float32))
    assert la.sort(e, axis=0).shape == (0, 3)
    assert la.argsort(e, axis=1).shape == (0, 3)


def test_sort_errors():
    with pytest.raises(ValueError, match="0-d"):
        la.sort(la.asarray(1.0))
    with pytest.raises(IndexError, match="axis 2 is out of range"):
        la.argsort(la.asarray(TIES), axis=2)


# ---- argmax, argmin, where -------------------------------------------------------------

@pytest.mark.parametrize("fn", ["argmax", "argmin"])
@pytest.mark.parametrize("axis", [None, 0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_argmax_argmin(fn, axis, keepdims, device):
    got = getattr(la, fn)(la.asarray(TIES), axis=axis, keepdims=keepdims)
    want = getattr(np, fn)(TIES, axis=axis, keepdims=keepdims)
    assert got.shape == want.shape
    assert got.dtype == la.int64
    np.testing.assert_array_equal(got.numpy(), want)


def test_argmax_of_empty_axis_is_an_error():
    with pytest.raises(ValueError, match="argmax"):
        la.argmax(la.asarray(np.zeros((0, 3), np.float32)), axis=0)


def test_where(device):
    c = TIES > 1
    got = la.where(la.asarray(c), la.asarray(TIES), -1.0)
    np.testing.assert_array_equal(got.numpy(), np.where(c, TIES, np.float32(-1)))


# ---- searchsorted ----------------------------------------------------------------------

SORTED = np.array([-1.0, 0.0, 0.0, 2.5, 3.0, np.nan], np.float32)
VALUES = np.array([[-5.0, 0.0, 1.0], [3.0, np.nan, 9.0]], np.float32)


@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted(side, device):
    got = la.searchsorted(la.asarray(SORTED), la.asarray(VALUES), side=side)
    assert got.dtype == la.int64
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(SORTED, VALUES, side=side))


@pytest.mark.parametrize("n", [65, 300])          # past the compare-and-count limit
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_long_input_binary_search(n, side, device):
    rng = np.random.default_rng(n)
    a = np.sort(rng.integers(0, 40, n)).astype(np.float32)
    a[-3:] = np.nan
    v = np.concatenate([rng.integers(-5, 45, (2, 20)).astype(np.float32),
                        np.array([[np.nan] * 20], np.float32)])
    got = la.searchsorted(la.asarray(a), la.asarray(v), side=side)
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(a, v, side=side))


def test_searchsorted_with_sorter_and_ints(device):
    a = np.array([5, 1, 4, 1, 9], np.int32)
    order = np.argsort(a, kind="stable")
    v = np.array([0, 1, 4, 10], np.int64)
    got = la.searchsorted(la.asarray(a), la.asarray(v), side="right", sorter=la.asarray(order))
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(a, v, side="right", sorter=order))


def test_searchsorted_empty_and_errors(device):
    got = la.searchsorted(la.asarray(np.zeros(0, np.float32)), la.asarray([1.0, 2.0]))
    np.testing.assert_array_equal(got.numpy(), [0, 0])
    with pytest.raises(ValueError, match="side"):
        la.searchsorted(la.asarray(SORTED), la.asarray(VALUES), side="middle")
    with pytest.raises(ValueError, match="1-d"):
        la.searchsorted(la.asarray(TIES), la.asarray(VALUES))


# ---- nonzero, count_nonzero ----------------------------------------------------------

NZ = np.array([[0, 2, 0, 1], [3, 0, 0, 4], [0, 0, 0, 0]], np.int32)


def test_nonzero_is_a_graph_break(device, fresh_metrics):
    got = la.nonzero(la.asarray(NZ))
    for g, w in zip(got, np.nonzero(NZ)):
        np.testing.assert_array_equal(g.numpy(), w)
    assert la.debug.metrics().graph_breaks == 1


@pytest.mark.parametrize("size, fill", [(2, 0), (4, 0), (6, -1), (0, 0)])
def test_nonzero_with_size_is_traceable(size, fill, device, fresh_metrics):
    x = la.asarray(NZ) * 1
    with la.config.override(strict=True):      # no graph break: strict mode allows it
        got = la.nonzero(x, size=size, fill_value=fill)
        want = [np.concatenate([w, np.full(6, fill)])[:size] for w in np.nonzero(NZ)]
        for g, w in zip(got, want):
            assert g.dtype == la.int64
            np.testing.assert_array_equal(g.numpy(), w)
    assert la.debug.metrics().graph_breaks == 0


@pytest.mark.parametrize("shape", [(7,), (2, 3, 4), (1, 5, 1)])
def test_nonzero_static_shapes(shape, device):
    a = (RNG.random(shape) > 0.5) & (RNG.random(shape) > 0.2)
    n = int(a.sum())
    got = la.nonzero(la.asarray(a), size=n + 2, fill_value=-7)
    for g, w in zip(got, np.nonzero(a)):
        np.testing.assert_array_equal(g.numpy()[:n], w)
        np.testing.assert_array_equal(g.numpy()[n:], [-7, -7])


def test_nonzero_errors():
    with pytest.raises(ValueError, match="zero-dimensional"):
        la.nonzero(la.asarray(1.0))
    with pytest.raises(ValueError, match="zero-dimensional"):
        la.nonzero(la.asarray(1.0), size=1)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_count_nonzero(axis, keepdims, device):
    got = la.count_nonzero(la.asarray(NZ), axis=axis, keepdims=keepdims)
    want = np.count_nonzero(NZ, axis=axis, keepdims=keepdims)
    assert got.dtype == la.int64
    np.testing.assert_array_equal(got.numpy(), want)


def test_count_nonzero_bool_and_nan(device):
    a = np.array([True, False, True])
    assert la.count_nonzero(la.asarray(a)).item() == 2
    f = np.array([0.0, np.nan, -0.0, 1.0], np.float32)
    assert la.count_nonzero(la.asarray(f)).item() == np.count_nonzero(f)


# ---- set functions (graph breaks) -----------------------------------------------------

SET = np.array([[3, 1, 2], [1, 3, 3]], np.int64)


def test_unique_values_counts_inverse_all(device, fresh_metrics):
    x = la.asarray(SET)
    np.testing.assert_array_equal(la.unique_values(x).numpy(), [1, 2, 3])
    v, c = la.unique_counts(x)
    np.testing.assert_array_equal(v.numpy(), [1, 2, 3])
    np.testing.assert_array_equal(c.numpy(), [2, 1, 3])
    v, inv = la.unique_inverse(x)
    assert inv.shape == SET.shape
    np.testing.assert_array_equal(v.numpy()[inv.numpy()], SET)
    v, idx, inv, c = la.unique_all(x)
    np.testing.assert_array_equal(idx.numpy(), [1, 2, 0])      # first occurrences (flat)
    np.testing.assert_array_equal(v.numpy()[inv.numpy()], SET)
    np.testing.assert_array_equal(c.numpy(), [2, 1, 3])
    assert la.debug.metrics().graph_breaks == 4


def test_unique_nans_are_distinct(device):
    x = la.asarray(np.array([np.nan, 1.0, np.nan], np.float32))
    v = la.unique_values(x).numpy()
    assert v.shape == (3,) and np.isnan(v).sum() == 2


def test_unique_of_a_pending_value(device):
    x = la.asarray(SET) * 2        # still lazy: the break materializes it
    np.testing.assert_array_equal(la.unique_values(x).numpy(), [2, 4, 6])


@pytest.mark.parametrize("name", ["unique_values", "unique_counts", "unique_inverse",
                                  "unique_all", "nonzero"])
def test_strict_mode_names_the_op_and_the_line(name):
    x = la.asarray(SET)
    with la.config.override(strict=True):
        with pytest.raises(GraphBreakError) as info:
            getattr(la, name)(x)
    message = str(info.value)
    assert name in message
    assert "test_sorting_searching.py:" in message


def test_strict_mode_from_the_environment_variable(monkeypatch):
    monkeypatch.setenv("LAZYARRAY_STRICT", "1")
    la.config.reload()
    try:
        with pytest.raises(GraphBreakError, match="unique_values"):
            la.unique_values(la.asarray(SET))
    finally:
        monkeypatch.delenv("LAZYARRAY_STRICT")
        la.config.reload()
    assert not la.config.strict


def test_set_functions_and_nonzero_accept_numpy_input():
    np.testing.assert_array_equal(la.unique_values(np.array([3, 1, 3])).numpy(), [1, 3])
    (idx,) = la.nonzero(np.array([0, 2, 2]))
    np.testing.assert_array_equal(idx.numpy(), [1, 2])


def test_strict_error_suggests_the_static_form():
    with la.config.override(strict=True):
        with pytest.raises(GraphBreakError, match=r"nonzero\(x, size=N"):
            la.nonzero(la.asarray([0, 1]))
