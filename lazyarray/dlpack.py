"""DLPack for the one dtype NumPy cannot carry: bfloat16.

NumPy exports and imports DLPack capsules for its own dtypes, but bfloat16 (the
`ml_dtypes` extension type) is not one of them. Both directions therefore go through
uint16, which has the same size, and rewrite the dtype field of the capsule's `DLTensor`
in place: kDLUInt/16 on the way out becomes kDLBfloat/16, and the reverse on the way in.
The memory is shared either way; only the 4-byte type descriptor changes.
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional

import numpy as np

from .compiler.hlo import dtypes as D

K_DL_UINT = 1
K_DL_BFLOAT = 4


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):        # DLTensor (dlpack.h)
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("dtype", _DataType), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]


class _Versioned(ctypes.Structure):     # DLManagedTensorVersioned: the tensor comes after
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _Tensor)]


_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype, _get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype, _get_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _dtype_field(capsule: Any) -> _DataType:
    """The dtype descriptor inside a not yet consumed capsule (either layout)."""
    name = _get_name(capsule)
    if name not in (b"dltensor", b"dltensor_versioned"):
        raise TypeError(f"DLPack: expected an unconsumed DLPack capsule, got one named {name!r}")
    ptr = _get_pointer(capsule, name)
    if name == b"dltensor_versioned":
        return _Versioned.from_address(ptr).dl_tensor.dtype
    return _Tensor.from_address(ptr).dtype       # DLManagedTensor starts with its DLTensor


def export(host: np.ndarray, max_version: Optional[tuple]) -> Any:
    """A capsule for a host array, bfloat16 included. A read-only array (a tensor's shared
    buffer) goes out as DLPack >= 1.0's read-only flag when the consumer reads that
    version; an older consumer cannot be told, so it gets a writable copy (NumPy would
    refuse: "Cannot export readonly array"), never a view it might write through."""
    kwargs = {} if max_version is None else {"max_version": max_version}
    if not host.flags.writeable and (max_version is None or tuple(max_version)[0] < 1):
        host = np.array(host, copy=True)
    if host.dtype != D.bfloat16.np:
        return host.__dlpack__(**kwargs)
    capsule = host.view(np.uint16).__dlpack__(**kwargs)
    field = _dtype_field(capsule)
    field.code, field.bits = K_DL_BFLOAT, 16
    return capsule


class _Relabeled:
    """An exporter whose capsule is another's with bfloat16 relabeled as uint16, so that
    `np.from_dlpack` accepts it."""

    def __init__(self, capsule: Any, device: tuple) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.capsule

    def __dlpack_device__(self) -> tuple:
        return self.device


def to_numpy(x: Any, copy: Optional[bool] = None) -> np.ndarray:
    """The host array behind a DLPack exporter (shared unless `copy`), bfloat16 included."""
    if isinstance(x, np.ndarray):
        return np.array(x, copy=True) if copy else x
    try:
        return np.from_dlpack(x, copy=copy)
    except (BufferError, TypeError, RuntimeError) as first:
        capsule = _capsule(x)
        if capsule is None:
            raise first
        field = _dtype_field(capsule)
        if (field.code, field.bits) != (K_DL_BFLOAT, 16):
            raise first
        field.code = K_DL_UINT
        arr = np.from_dlpack(_Relabeled(capsule, x.__dlpack_device__()))
        arr = arr.view(D.bfloat16.np)
        return np.array(arr, copy=True) if copy else arr


def _capsule(x: Any) -> Any:
    for kwargs in ({"max_version": (1, 0)}, {}):
        try:
            return x.__dlpack__(**kwargs)
        except TypeError:
            continue
    return None
