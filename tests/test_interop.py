"""Interop: NumPy arrays in and out, lists and scalars, dtype defaults, DLPack (NumPy and
PyTorch, zero-copy on host devices), and the array API namespace."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D

HOST_DEVICES = ("interpreter", "cpu")


def _sample(dtype: D.DType) -> np.ndarray:
    if dtype is D.bool_:
        return np.array([[True, False, True], [False, False, True]])
    return np.array([[0, 1, 2], [3, 4, 5]]).astype(dtype.np)


# ---- NumPy in and out -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", D.ALL, ids=lambda d: d.name)
def test_asarray_from_numpy_keeps_dtype_and_values(dtype, device):
    a = _sample(dtype)
    t = la.asarray(a)
    assert t.dtype is dtype and t.shape == (2, 3)
    back = np.asarray(t)
    assert back.dtype == a.dtype
    np.testing.assert_array_equal(back.astype(np.float64), a.astype(np.float64))
    computed = np.asarray(t[1:])                  # an op result converts as well
    assert computed.dtype == a.dtype and computed.shape == (1, 3)


def test_bfloat16_comes_through_ml_dtypes(device):
    a = np.array([1.5, -2.0, 3.25], dtype=ml_dtypes.bfloat16)
    t = la.asarray(a) * 2
    assert t.dtype is la.bfloat16
    out = t.numpy()
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), [3.0, -4.0, 6.5])


def test_array_protocol(device):
    t = la.asarray([[1.0, 2.0], [3.0, 4.0]]) + 1
    assert isinstance(np.asarray(t), np.ndarray)
    np.testing.assert_array_equal(np.asarray(t), [[2, 3], [4, 5]])
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t).dtype == np.float32
    np.testing.assert_allclose(np.exp(np.asarray(t)), np.exp([[2, 3], [4, 5]]), rtol=1e-6)


def test_numpy_operands_defer_to_tensors(device):
    t = la.asarray([1.0, 2.0])
    out = np.array([10.0, 20.0], dtype=np.float32) + t
    assert isinstance(out, la.Tensor)
    np.testing.assert_array_equal(out.numpy(), [11, 22])
    out = t * np.array([2, 3], dtype=np.float32)
    assert isinstance(out, la.Tensor) and out.dtype is la.float32


def test_numpy_copy_is_independent(device):
    t = la.asarray([1.0, 2.0])
    a = t.numpy()
    a[0] = 100.0
    assert t.numpy()[0] == 1.0


# ---- lists, nested lists and scalars, dtype defaults ---------------------------------------

@pytest.mark.parametrize("data, dtype, shape", [
    ([1.0, 2.0], la.float32, (2,)),                 # Python floats: the default float
    ([1, 2, 3], la.int64, (3,)),                    # Python ints: the default int
    ([True, False], la.bool, (2,)),
    ([1, 2.5], la.float32, (2,)),
    ([[1, 2], [3, 4]], la.int64, (2, 2)),
    ([[[1.0]], [[2.0]]], la.float32, (2, 1, 1)),
    ([], la.float32, (0,)),
    (3, la.int64, ()),
    (2.5, la.float32, ()),
    (True, la.bool, ()),
    (np.float64(2.0), la.float64, ()),              # NumPy's own types keep their dtype
    (np.array([1.0, 2.0]), la.float64, (2,)),
    (np.int32(7), la.int32, ()),
    (np.array([1, 2], dtype=np.uint16), la.uint16, (2,)),
])
def test_asarray_dtype_defaults(data, dtype, shape, device):
    t = la.asarray(data)
    assert t.dtype is dtype and t.shape == shape
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype.np))


@pytest.mark.parametrize("spec", ["int16", la.int16, np.int16, np.dtype("int16")])
def test_asarray_with_a_dtype(spec, device):
    t = la.asarray([1, 2, 3], dtype=spec)
    assert t.dtype is la.int16
    t = la.asarray([[1.5, 2.5]], dtype=la.float64)
    assert t.dtype is la.float64 and t.shape == (1, 2)


def test_python_type_as_dtype(device):
    assert la.asarray([1, 2], dtype=float).dtype is la.float32
    assert la.asarray([1.0, 2.0], dtype=int).dtype is la.int64
    assert la.asarray([1, 0], dtype=bool).dtype is la.bool


def test_asarray_of_a_tensor_is_the_tensor(device):
    t = la.asarray([1.0, 2.0])
    assert la.asarray(t) is t
    assert la.asarray(t, dtype="float64").dtype is la.float64


def test_ragged_list_is_refused(device):
    with pytest.raises((ValueError, TypeError)):
        la.asarray([[1, 2], [3]])


# ---- DLPack -------------------------------------------------------------------------------

def _host_only(device: str) -> None:
    if device not in HOST_DEVICES:
        pytest.skip(reason=f"zero-copy DLPack with NumPy needs a host device, not {device}")


def test_from_dlpack_numpy_shares_memory(device):
    _host_only(device)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = la.from_dlpack(a)
    assert t.dtype is la.float32 and t.shape == (2, 3)
    assert np.shares_memory(np.asarray(t), a)
    np.testing.assert_array_equal((t * 2).numpy(), a * 2)


def test_dlpack_export_to_numpy_shares_memory(device):
    _host_only(device)
    t = la.asarray([[1.0, 2.0], [3.0, 4.0]]) * 3
    exported = np.from_dlpack(t)
    np.testing.assert_array_equal(exported, [[3, 6], [9, 12]])
    assert np.shares_memory(exported, np.asarray(t))
    assert t.__dlpack_device__()[0] == 1             # kDLCPU


@pytest.mark.parametrize("dtype", [D.float32, D.float64, D.int32, D.int64, D.uint8, D.bool_],
                         ids=lambda d: d.name)
def test_dlpack_round_trip_dtypes(dtype, device):
    a = _sample(dtype)
    t = la.from_dlpack(a)
    assert t.dtype is dtype
    np.testing.assert_array_equal(np.from_dlpack(t), a)


def test_torch_dlpack_zero_copy(device):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    _host_only(device)
    src = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    t = la.from_dlpack(src)
    assert t.dtype is la.float32 and t.shape == (2, 3)
    assert np.shares_memory(np.asarray(t), src.numpy())
    back = torch.from_dlpack(t * 1 + 1)
    assert back.dtype == torch.float32
    assert torch.equal(back, src + 1)
    u = la.asarray([1.0, 2.0]) * 2
    assert np.shares_memory(torch.from_dlpack(u).numpy(), np.asarray(u))


# ---- the array API namespace ------------------------------------------------------------

def test_array_namespace_is_lazyarray(device):
    t = la.asarray([1.0, 2.0])
    xp = t.__array_namespace__()
    assert xp is la
    assert la.__array_api_version__ == "2025.12"


def test_generic_array_api_code_runs(device):
    def softmax(x):
        xp = x.__array_namespace__()
        e = xp.exp(x - xp.max(x, axis=-1, keepdims=True))
        return e / xp.sum(e, axis=-1, keepdims=True)

    a = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    out = softmax(la.asarray(a))
    want = np.exp(a - a.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


# ---- moving between devices ---------------------------------------------------------------

def test_to_moves_between_devices(device, other_device):
    t = la.asarray([[1.0, 2.0]]) * 3
    moved = t.to(other_device)
    assert str(moved.device) != str(t.device) and other_device in repr(moved.device)
    np.testing.assert_array_equal(moved.numpy(), [[3.0, 6.0]])
    assert (moved + 1).device is moved.device
    back = la.asarray(moved, device=device)
    assert back.device is t.device
    np.testing.assert_array_equal(back.numpy(), t.numpy())
    assert t.to(device) is t                          # already there: the same tensor


def test_to_with_a_dtype(device):
    t = la.asarray([1.5, 2.5]).to(dtype="float64")
    assert t.dtype is la.float64


# ---- Python protocols ---------------------------------------------------------------------

def test_len_iteration_and_hash(device):
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    t = la.asarray(a)
    assert len(t) == 3
    rows = list(t)
    assert len(rows) == 3 and all(isinstance(r, la.Tensor) for r in rows)
    np.testing.assert_array_equal(np.stack([r.numpy() for r in rows]), a)
    assert len({t, t, la.asarray(a)}) == 2              # hashed by identity, not by value
    with pytest.raises(TypeError):
        len(la.asarray(1.0))
    with pytest.raises(TypeError):
        iter(la.asarray(1.0))


def test_index_protocol(device):
    i = la.asarray(2) + 0
    assert [10, 20, 30][i] == 30
    with pytest.raises(TypeError, match="integer"):
        [1, 2][la.asarray(1.0)]


def test_dlpack_export_without_a_version_gives_a_writable_copy(device):
    """A pre-1.0 consumer cannot be told a buffer is read-only: it gets a copy (NumPy
    refuses such an export); a 1.0 consumer gets the shared buffer flagged read-only."""
    _host_only(device)
    for t in (la.asarray([[1.0, 2.0]]) * 3, la.zeros((0, 3)), la.asarray(np.arange(3))):
        capsule = t.__dlpack__()
        assert "dltensor" in repr(capsule)
        versioned = t.__dlpack__(max_version=(1, 0))
        assert "dltensor_versioned" in repr(versioned)
    t = la.asarray([1.0, 2.0]) * 2
    shared = np.from_dlpack(t)                 # NumPy asks for 1.x: the shared buffer
    assert np.shares_memory(shared, np.asarray(t))
    if device == "cpu":                        # the CPU device's buffers are flagged read-only
        assert not shared.flags.writeable
