"""Indexing against NumPy: reading (basic, advanced, masks), functional setitem, errors."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la

A = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)

# keys valid for A (shape (2, 3, 4, 5)), NumPy semantics
KEYS = [
    0, -1, 1, (1, 2), (1, -3, 2, -5), (), Ellipsis,
    slice(None), slice(1, None), slice(None, None, -1), slice(5, 10), slice(1, 1),
    (slice(None), slice(1, None, 2)), (slice(None), slice(None, None, -2)),
    (slice(3, 0, -2), slice(None), slice(-1, None, -3)), (Ellipsis, slice(4, None, -3)),
    (Ellipsis, 0), (0, Ellipsis, 1), (None,), (None, 0, Ellipsis, None), (slice(None), None, 1),
    [0, 1], [1, 0, 1], [-1], [], np.array(-1), (np.array(1), 2),
    ([1, 0], [2, 0]), ([-1, -2], None, [0, 1]), ([[0], [1]], [0, 2, 1]),
    (slice(None), [0, 2], slice(None), [1, 4]), (0, slice(None), [1, 2]),
    (slice(None), [[0], [2]], [1, 3]), (Ellipsis, [0, 0, 1]), (slice(None, None, -1), [1, 2]),
    (slice(None), 1, slice(None), [0, 3]), ([1], slice(None), 0),
    True, False, (True, [0, 1]), (Ellipsis, True), (0, False),
    np.array([True, False]), (slice(None), np.array([[True, False, True, True]] * 3)),
    (np.array([False, False]),), (1, np.array([True, False, True])), range(1, -1, -1),
    (slice(None), range(3), 0),
]


def _ids(keys):
    return [repr(k).replace(" ", "") for k in keys]


@pytest.mark.parametrize("key", KEYS, ids=_ids(KEYS))
def test_getitem_matches_numpy(key, device):
    want = A[key]
    got = la.asarray(A)[key].numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("key", KEYS, ids=_ids(KEYS))
def test_setitem_matches_numpy(key, device):
    shape = A[key].shape
    value = (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1000)
    want = A.copy()
    want[key] = value
    x = la.asarray(A)
    x[key] = la.asarray(value)
    np.testing.assert_array_equal(x.numpy(), want)


@pytest.mark.parametrize("key", [0, (slice(None), 1), (Ellipsis, slice(None, None, 2)),
                                 ([0, 1], 0), (slice(None), [2, 0], 1)])
def test_setitem_scalar_broadcasts(key, device):
    want = A.copy()
    want[key] = -7
    x = la.asarray(A)
    x[key] = -7
    np.testing.assert_array_equal(x.numpy(), want)


def test_setitem_value_broadcasts_and_strips_leading_ones(device):
    x = la.asarray(A)
    row = np.arange(5, dtype=np.float32)
    x[0] = row.reshape(1, 1, 1, 5)          # NumPy drops the leading 1s
    want = A.copy()
    want[0] = row
    np.testing.assert_array_equal(x.numpy(), want)


def test_setitem_casts_to_the_tensor_dtype(device):
    a = np.arange(6, dtype=np.int32)
    x = la.asarray(a)
    x[1:3] = la.asarray([2.7, -1.2], dtype="float32")
    x[4] = 9.9
    want = a.copy()
    want[1:3] = np.array([2.7, -1.2], np.float32)
    want[4] = 9.9
    assert x.dtype == la.int32
    np.testing.assert_array_equal(x.numpy(), want)


def test_setitem_is_functional(device):
    x = la.asarray(A)
    before = x[0]
    x[0] = 0.0
    np.testing.assert_array_equal(before.numpy(), A[0])
    assert float(x[0].sum()) == 0.0


def test_setitem_with_repeated_index_takes_the_last_write(device):
    x = la.asarray(np.zeros(4, np.float32))
    x[la.asarray([1, 1, 2])] = la.asarray([5.0, 6.0, 7.0])
    np.testing.assert_array_equal(x.numpy(), [0, 6, 7, 0])


def test_tensor_index_arrays_and_negative_wrap(device):
    x = la.asarray(A)
    i = la.asarray([-1, 0, 1])
    j = la.asarray(np.array([[2], [-4]], np.int32))
    np.testing.assert_array_equal(x[i].numpy(), A[[-1, 0, 1]])
    np.testing.assert_array_equal(x[:, i, j].numpy(), A[:, [-1, 0, 1], [[2], [-4]]])
    np.testing.assert_array_equal(x[0, :, i.astype("uint8") if False else i, 3].numpy(),
                                  A[0, :, [-1, 0, 1], 3])


def test_zero_d_tensor_index(device):
    x = la.asarray(A)
    k = la.asarray(1)
    np.testing.assert_array_equal(x[k].numpy(), A[1])
    np.testing.assert_array_equal(x[:, k, k].numpy(), A[:, 1, 1])


def test_zero_d_and_size_zero_tensors(device):
    s = la.asarray(np.float32(3.5))
    assert s[()].numpy() == np.float32(3.5)
    assert s[...].shape == ()
    assert s[None].shape == (1,)
    assert s[True].shape == (1,) and s[False].shape == (0,)
    s[()] = 1.0
    assert s.item() == 1.0
    e = la.asarray(np.zeros((0, 3), np.float32))
    assert e[:, 1].shape == (0,)
    assert e[1:].shape == (0, 3)
    assert e[[]].shape == (0, 3)
    e[:, 0] = 5.0
    assert e.shape == (0, 3)


def test_index_arrays_from_numpy_do_not_recompile(device, fresh_metrics):
    x = la.asarray(A)
    for i in range(3):
        idx = np.array([i % 2, 0, 1 - i % 2])
        np.testing.assert_array_equal(x[idx].numpy(), A[idx])
    assert la.debug.metrics().cache_misses == 1


def test_changing_int_index_does_not_recompile(device, fresh_metrics):
    a = np.arange(40, dtype=np.float32).reshape(8, 5)
    x = la.asarray(a)
    for i in (2, 3, 4, -3):         # 0 and 1 stay constants (see promotion.KEPT_CONSTANTS)
        np.testing.assert_array_equal(x[i, 1:].numpy(), a[i, 1:])
        np.testing.assert_array_equal(x[:, i % 5].numpy(), a[:, i % 5])
    assert la.debug.metrics().cache_misses == 2


def test_boolean_tensor_mask_is_a_graph_break(device, fresh_metrics):
    m = A[..., 0] > 30
    x = la.asarray(A)
    got = x[la.asarray(m)]
    np.testing.assert_array_equal(got.numpy(), A[m])
    metrics = la.debug.metrics()
    assert metrics.graph_breaks == 1
    assert any("test_indexing.py" in site for site in metrics.graph_break_sites)


def test_boolean_mask_with_other_indices(device):
    m = np.array([True, False, True, True])
    x = la.asarray(A)
    got = x[1, :, la.asarray(m), 0]
    np.testing.assert_array_equal(got.numpy(), A[1, :, m, 0])


def test_boolean_mask_getitem_in_strict_mode_names_the_line(device):
    x = la.asarray(A)
    m = la.asarray(A > 3)
    with la.config.override(strict=True):
        with pytest.raises(Exception) as info:
            x[m]
    assert "boolean mask" in str(info.value)
    assert "test_indexing.py" in str(info.value)


@pytest.mark.parametrize("mask_shape", [(2, 3, 4, 5), (2, 3), ()])
def test_boolean_mask_setitem_is_a_select_without_graph_break(mask_shape, device,
                                                              fresh_metrics):
    rng = np.random.default_rng(0)
    m = rng.random(mask_shape) > 0.5
    x = la.asarray(A)
    with la.config.override(strict=True):           # a graph break would raise
        x[la.asarray(m)] = -1.0
        want = A.copy()
        want[m] = -1.0
        np.testing.assert_array_equal(x.numpy(), want)
    assert la.debug.metrics().graph_breaks == 0


def test_boolean_mask_setitem_with_a_row_value(device):
    m = np.array([[True, False, True], [False, False, True]])
    row = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = la.asarray(A)
    x[la.asarray(m)] = la.asarray(row)
    want = A.copy()
    want[m] = row
    np.testing.assert_array_equal(x.numpy(), want)


def test_boolean_mask_setitem_with_one_value_per_element_breaks_the_graph(device):
    a = np.arange(6, dtype=np.float32)
    m = a > 2
    x = la.asarray(a)
    x[la.asarray(m)] = la.asarray(np.array([10, 20, 30], np.float32))
    want = a.copy()
    want[m] = [10, 20, 30]
    np.testing.assert_array_equal(x.numpy(), want)


def test_augmented_assignment_through_an_index(device):
    a = np.arange(6, dtype=np.float32)
    x = la.asarray(a)
    x[1:3] += 10
    x[[0, 0, 5]] *= 2          # as NumPy: a repeated index is written once, not twice
    x[la.asarray(a > 3)] -= 1
    want = a.copy()
    want[1:3] += 10
    want[[0, 0, 5]] *= 2
    want[a > 3] -= 1
    np.testing.assert_array_equal(x.numpy(), want)


def test_negative_step_setitem(device):
    a = np.arange(10, dtype=np.int64)
    x = la.asarray(a)
    x[8:1:-3] = la.asarray([100, 200, 300])
    want = a.copy()
    want[8:1:-3] = [100, 200, 300]
    np.testing.assert_array_equal(x.numpy(), want)


# ---- errors --------------------------------------------------------------------------

@pytest.mark.parametrize("key, fragment", [
    (2, "index 2 is out of bounds for dimension 0 with size 2"),
    (-3, "index -3 is out of bounds for dimension 0 with size 2"),
    ((0, 3), "dimension 1 with size 3"),
    ((slice(None), [0, 3]), "index 3 is out of bounds for dimension 1 with size 3"),
    ((0, 0, 0, 0, 0), "too many indices"),
    ((Ellipsis, 0, Ellipsis), "single ellipsis"),
    (np.array([True, False, True]), "does not match"),
])
def test_index_errors(key, fragment):
    x = la.asarray(A)
    with pytest.raises(IndexError, match=fragment):
        x[key]


@pytest.mark.parametrize("key", [1.0, (0, 1.5), "a", [0.5, 1.0], np.array([1.0]), {0: 1}])
def test_float_and_other_indices_are_type_errors(key):
    x = la.asarray(A)
    with pytest.raises(TypeError, match="valid indices"):
        x[key]
    with pytest.raises(TypeError, match="valid indices"):
        x[key] = 1.0


def test_float_tensor_index_is_a_type_error():
    x = la.asarray(A)
    with pytest.raises(TypeError, match="integer or boolean"):
        x[la.asarray([0.0, 1.0])]


def test_slice_step_zero():
    with pytest.raises(ValueError, match="step cannot be zero"):
        la.asarray(A)[::0]


def test_setitem_errors():
    x = la.asarray(A)
    with pytest.raises(IndexError, match="out of bounds"):
        x[5] = 1.0
    with pytest.raises(ValueError, match="could not broadcast"):
        x[0] = la.asarray(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(x.numpy(), A)     # a failed update changes nothing


# ---- take, take_along_axis -----------------------------------------------------------

def test_take(device):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = la.asarray(a)
    idx = np.array([3, -1, 0])
    np.testing.assert_array_equal(la.take(x, la.asarray(idx), axis=1).numpy(),
                                  np.take(a, idx, axis=1))
    np.testing.assert_array_equal(la.take(x, la.asarray([2, 0]), axis=0).numpy(), a[[2, 0]])
    v = la.asarray(np.arange(5))
    np.testing.assert_array_equal(la.take(v, la.asarray([4, 1])).numpy(), [4, 1])
    with pytest.raises(ValueError, match="axis is required"):
        la.take(x, la.asarray([0]))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_along_axis(axis, device):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    idx = np.argsort(a, axis=axis)
    got = la.take_along_axis(la.asarray(a), la.asarray(idx), axis=axis)
    np.testing.assert_array_equal(got.numpy(), np.take_along_axis(a, idx, axis=axis))
    small = idx.take([0], axis=axis)                # broadcasting the other dims
    np.testing.assert_array_equal(
        la.take_along_axis(la.asarray(a), la.asarray(small), axis=axis).numpy(),
        np.take_along_axis(a, small, axis=axis))


# ---- random keys against NumPy (property-based) --------------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402


@st.composite
def _shape_and_key(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    key, dim = [], 0
    ellipsis_used = False
    while dim < len(shape) and draw(st.booleans()):
        n = shape[dim]
        kind = draw(st.sampled_from(["int", "slice", "slice", "array", "mask", "none",
                                     "ellipsis"]))
        if kind == "int" and n:
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "array" and n:
            key.append(draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=3)))
        elif kind == "mask":
            key.append(np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool))
        elif kind == "none":
            key.append(None)
            continue
        elif kind == "ellipsis" and not ellipsis_used:
            ellipsis_used = True
            key.append(Ellipsis)
            break
        else:
            bound = st.one_of(st.none(), st.integers(-6, 6))
            step = draw(st.one_of(st.none(), st.sampled_from([-3, -2, -1, 1, 2, 3])))
            key.append(slice(draw(bound), draw(bound), step))
        dim += 1
    return shape, tuple(key)


def _numpy_accepts(a, key) -> bool:
    try:
        a[key]
    except IndexError:          # e.g. index arrays that do not broadcast together
        return False
    return True


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_shape_and_key())
def test_random_keys_match_numpy(shape_key):
    shape, key = shape_key
    a = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    if not _numpy_accepts(a, key):
        return
    x = la.asarray(a, device="interpreter")
    want = a[key]
    got = x[key].numpy()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    value = -1 - np.arange(want.size, dtype=np.int32).reshape(want.shape)
    b = a.copy()
    b[key] = value
    x[key] = la.asarray(value, device="interpreter")
    np.testing.assert_array_equal(x.numpy(), b)      # repeated indices: the last write wins


def test_index_tensors_whose_values_are_known_are_range_checked_as_numpy_does():
    """A computed index tensor (values on the host) out of range raises IndexError at the
    call, for take, indexing, take_along_axis and setitem; a pending one is clamped at run
    time (its values do not exist yet), as the module docstring says."""
    x = la.asarray(np.arange(5.0))
    for bad in (lambda: la.take(x, la.asarray([0, 7])), lambda: x[la.asarray([-6])],
                lambda: la.take_along_axis(x, la.asarray([9]), axis=0)):
        with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 5"):
            bad()
    y = la.asarray(np.zeros(3))
    with pytest.raises(IndexError, match="index 4 is out of bounds"):
        y[la.asarray([4])] = 1.0
    np.testing.assert_array_equal(y.numpy(), np.zeros(3))
    np.testing.assert_array_equal(la.take(x, la.asarray([0, -1])).numpy(), [0.0, 4.0])
    np.testing.assert_array_equal(x[la.asarray([1]) + 10].numpy(), [4.0])


@pytest.mark.parametrize("key", [k for k in KEYS if not isinstance(k, (list, np.ndarray, range))
                                 and not (isinstance(k, tuple) and any(
                                     isinstance(e, (list, np.ndarray, range, bool)) for e in k))
                                 and not isinstance(k, bool)],
                         ids=lambda k: repr(k).replace(" ", ""))
def test_a_remembered_basic_key_records_what_the_general_way_records(key):
    """A basic key over a node of one type is replayed from the steps remembered at its
    first use (ops/chains.py `PLANS`): the same graph as the general way, runtime
    starts made afresh with the key's values."""
    from graph_compare import same_graph
    from lazyarray.ops import chains, indexing as ix
    x = la.asarray(A)._node
    chains.PLANS.clear()
    general = ix.getitem(x, key)                      # the general way, remembered
    plain = ix._plain_key(x, key)
    assert plain is not None and plain in chains.PLANS
    again = ix.getitem(x, key)                        # replayed
    assert same_graph(again, general, fresh_leaves=True)
    assert again is x or again is not general
    np.testing.assert_array_equal(la.Tensor._wrap(again, la.asarray(A)._state).numpy(),
                                  A[key])


@pytest.mark.parametrize("x_shape", [(5,), (5, 3), (5, 2, 3)])
@pytest.mark.parametrize("idx", [np.array([0, 4, -1]), np.array([[1, -5], [2, 3]]),
                                 np.int64(2), np.array([3], np.int32),
                                 np.array([1, 0], np.uint8)], ids=repr)
def test_one_integer_tensor_index_records_what_the_general_way_records(x_shape, idx):
    """x[t] for one integer tensor t (an embedding's rows picked by tokens) is made
    directly: the graph the general way makes of (t,), NumPy's values, NumPy's error for
    an index out of range."""
    from graph_compare import same_graph
    from lazyarray.ops import chains, indexing as ix
    a = np.arange(np.prod(x_shape), dtype=np.float32).reshape(x_shape)
    x, t = la.asarray(a), la.asarray(idx)
    assert same_graph(ix.getitem(x._node, t._node), ix.getitem(x._node, (t._node,)),
                      fresh_leaves=True)
    np.testing.assert_array_equal(x[t].numpy(), a[idx])
    with pytest.raises(IndexError, match="getitem: index 5 is out of bounds for dimension 0"):
        x[la.asarray(np.array([0, 5]))]
