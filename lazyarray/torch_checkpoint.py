"""Reading PyTorch's checkpoint format (what `torch.save` writes by default) without torch.

The format is a zip archive: `<name>/data.pkl` is a pickle whose tensors are calls of
`torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...)`, each storage a
persistent id `('storage', <storage class>, key, location, numel)` whose bytes are the
entry `<name>/data/<key>`. This module unpickles it with a closed table of names, as
`torch.load(weights_only=True)` does: the tensor and parameter rebuilders, the storage and
dtype names, `torch.Size`, `torch.device`, `OrderedDict`, and what lazyarray's own
weights-only load admits. Each is looked up here by name; nothing named by the file is
imported or run, so a file naming anything else is refused. Tensors come back as lazyarray
tensors on the default device, values copied out of the archive.
"""
from __future__ import annotations

import collections
import io
import pickle
import zipfile
from typing import Any, Callable

import ml_dtypes
import numpy as np

from . import runtime
from .compiler.hlo import dtypes as D
from .tensor import Tensor, mark_requires_grad

ZIP_MAGIC = b"PK\x03\x04"
# torch.save(..., _use_new_zipfile_serialization=False) and torch < 1.6: a pickled magic
# number, then the objects
LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": ml_dtypes.bfloat16, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_, "ComplexFloatStorage": np.complex64,
    "ComplexDoubleStorage": np.complex128, "UntypedStorage": np.uint8,
}
_TORCH_DTYPES = {
    "float32": np.float32, "float": np.float32, "float64": np.float64, "double": np.float64,
    "float16": np.float16, "half": np.float16, "bfloat16": ml_dtypes.bfloat16,
    "int8": np.int8, "int16": np.int16, "short": np.int16, "int32": np.int32, "int": np.int32,
    "int64": np.int64, "long": np.int64, "uint8": np.uint8, "uint16": np.uint16,
    "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_, "complex64": np.complex64,
    "cfloat": np.complex64, "complex128": np.complex128, "cdouble": np.complex128,
}


class _StorageType:
    """What a file's `torch.FloatStorage` (or other storage class) stands for."""

    def __init__(self, name: str) -> None:
        self.name, self.dtype = name, np.dtype(_STORAGE_DTYPES[name])


def _bad(message: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(f"la.load (PyTorch checkpoint): {message}")


def _strided(storage: np.ndarray, offset: int, size: tuple, stride: tuple) -> np.ndarray:
    """A copy of the view (offset, size, stride) of a storage, checked to lie inside it
    (a malformed file must not read past the storage's end)."""
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride) or any(s < 0 for s in size + stride) or offset < 0:
        raise _bad(f"tensor view size {size}, stride {stride}, offset {offset} is malformed")
    if 0 in size:
        return np.zeros(size, storage.dtype)
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= storage.size:
        raise _bad(f"tensor view size {size}, stride {stride}, offset {offset} reaches "
                   f"element {last} of a storage of {storage.size}")
    view = np.lib.stride_tricks.as_strided(
        storage[offset:], shape=size, strides=tuple(s * storage.itemsize for s in stride))
    return np.array(view)          # owned, C-ordered


def _tensor(array: np.ndarray, requires_grad: bool) -> Tensor:
    t = Tensor._from_numpy(array, runtime.get_device(None))
    if requires_grad:
        mark_requires_grad(t, True)
    return t


def _rebuild_tensor_v2(storage: np.ndarray, offset: int, size: tuple, stride: tuple,
                       requires_grad: bool, hooks: Any, metadata: Any = None) -> Tensor:
    return _tensor(_strided(storage, offset, size, stride), bool(requires_grad))


def _rebuild_tensor_v3(storage: np.ndarray, offset: int, size: tuple, stride: tuple,
                       requires_grad: bool, hooks: Any, dtype: Any,
                       metadata: Any = None) -> Tensor:
    """A tensor over an untyped (byte) storage, its dtype given apart (uint16 and others
    without a typed storage class)."""
    if not isinstance(dtype, D.DType):
        raise _bad(f"_rebuild_tensor_v3 needs a torch dtype, got {dtype!r}")
    if storage.nbytes % dtype.itemsize:
        raise _bad(f"a storage of {storage.nbytes} bytes is not a whole number of "
                   f"{dtype.name} elements")
    typed = storage.view(np.uint8).view(dtype.np)
    return _tensor(_strided(typed, offset, size, stride), bool(requires_grad))


def _rebuild_parameter(data: Tensor, requires_grad: bool, hooks: Any,
                       state: Any = None) -> Tensor:
    if type(data) is not Tensor:
        raise _bad(f"a parameter must hold a tensor, got {type(data).__name__}")
    mark_requires_grad(data, bool(requires_grad))
    return data


def _device(*args: Any) -> str:
    """torch.device('cuda', 0) and the like, as its name."""
    return ":".join(str(a) for a in args)


_REBUILDERS: dict = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_tensor_v3"): _rebuild_tensor_v3,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): tuple,
    ("torch", "device"): _device,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, archive: zipfile.ZipFile, prefix: str, big_endian: bool,
                 fallback: Callable) -> None:
        super().__init__(io.BytesIO(archive.read(prefix + "data.pkl")))
        self.archive, self.prefix, self.big_endian = archive, prefix, big_endian
        self.fallback = fallback          # names outside torch's: lazyarray's own rules
        self.storages: dict = {}

    def find_class(self, module: str, name: str) -> Any:
        found = _REBUILDERS.get((module, name))
        if found is not None:
            return found
        if module in ("torch", "torch.storage") and name in _STORAGE_DTYPES:
            return _StorageType(name)
        if module == "torch" and name in _TORCH_DTYPES:
            return D.to_dtype(_TORCH_DTYPES[name])     # torch.float16 -> la.float16
        return self.fallback(module, name)

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType)):
            raise _bad(f"unknown persistent id {pid!r:.80}")
        _, kind, key, _location, _numel = pid
        key = str(key)
        if key not in self.storages:
            self.storages[key] = self._read_storage(kind, key)
        return self.storages[key]

    def _read_storage(self, kind: _StorageType, key: str) -> np.ndarray:
        entry = f"{self.prefix}data/{key}"
        try:
            raw = self.archive.read(entry)
        except KeyError:
            raise _bad(f"the archive lacks storage entry {entry!r}") from None
        if len(raw) % kind.dtype.itemsize:
            raise _bad(f"storage {entry!r} has {len(raw)} bytes, not a whole number of "
                       f"{kind.name} elements")
        if not self.big_endian:
            return np.frombuffer(raw, kind.dtype)
        # each number's bytes reversed (a complex number's two parts each on their own)
        unit = kind.dtype.itemsize // (2 if kind.dtype.kind == "c" else 1)
        return np.frombuffer(raw, np.dtype(f"u{unit}")).byteswap().view(kind.dtype)


def load(data: bytes, fallback: Callable) -> Any:
    """The object a `torch.save` zip archive holds; `fallback(module, name)` answers for
    the names that are not PyTorch's (lazyarray's weights-only table, or any class)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise _bad(f"not a readable zip archive ({e})") from None
    with archive:
        pickles = [n for n in archive.namelist()
                   if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
        if len(pickles) != 1:
            raise _bad(f"expected one data.pkl in the archive, found {len(pickles)}")
        prefix = pickles[0][:-len("data.pkl")]
        names = set(archive.namelist())
        order = archive.read(prefix + "byteorder") if prefix + "byteorder" in names else b"little"
        return _Unpickler(archive, prefix, order.strip() == b"big", fallback).load()


__all__: list = []      # reached through la.load
