"""Element types of the HLO, their NumPy counterparts and the promotion lattice.

Promotion follows the Python array API standard (2023.12) within a kind; across kinds it
does what PyTorch and JAX do (an integer and a float give the float; bool joins anything).
Python scalars are *weak*: they take the tensor's dtype when their kind allows it.
"""
from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np


class DType:
    """One element type. Singletons: compare with `is` or `==`."""

    __slots__ = ("name", "short", "kind", "bits", "np")

    def __init__(self, name: str, short: str, kind: str, bits: int, np_dtype: Any) -> None:
        self.name = name        # array API name: "float32"
        self.short = short      # HLO text name: "f32"
        self.kind = kind        # "bool" | "int" | "uint" | "float" | "complex"
        self.bits = bits
        self.np = np.dtype(np_dtype)

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def is_inexact(self) -> bool:
        """Floating point, real or complex: what gradients flow through."""
        return self.kind in ("float", "complex")

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    def __repr__(self) -> str:
        return f"lazyarray.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))


bool_ = DType("bool", "pred", "bool", 8, np.bool_)
int8 = DType("int8", "s8", "int", 8, np.int8)
int16 = DType("int16", "s16", "int", 16, np.int16)
int32 = DType("int32", "s32", "int", 32, np.int32)
int64 = DType("int64", "s64", "int", 64, np.int64)
uint8 = DType("uint8", "u8", "uint", 8, np.uint8)
uint16 = DType("uint16", "u16", "uint", 16, np.uint16)
uint32 = DType("uint32", "u32", "uint", 32, np.uint32)
uint64 = DType("uint64", "u64", "uint", 64, np.uint64)
float16 = DType("float16", "f16", "float", 16, np.float16)
bfloat16 = DType("bfloat16", "bf16", "float", 16, ml_dtypes.bfloat16)
float32 = DType("float32", "f32", "float", 32, np.float32)
float64 = DType("float64", "f64", "float", 64, np.float64)

# a complex value is two floats (real, imaginary), as NumPy lays them out
complex64 = DType("complex64", "c64", "complex", 64, np.complex64)
complex128 = DType("complex128", "c128", "complex", 128, np.complex128)

# ALL: the real dtypes (tables of real ops iterate it); COMPLEX beside it
ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
       float16, bfloat16, float32, float64)
COMPLEX = (complex64, complex128)
EVERY = ALL + COMPLEX
INTS = (int8, int16, int32, int64)
UINTS = (uint8, uint16, uint32, uint64)
INTEGERS = INTS + UINTS
FLOATS = (float16, bfloat16, float32, float64)
NUMERIC = INTEGERS + FLOATS

DEFAULT_FLOAT = float32
DEFAULT_COMPLEX = complex64
DEFAULT_INT = int64
DEFAULT_INDEX = int64

_BY_NAME = {d.name: d for d in EVERY}
_BY_NAME.update({d.short: d for d in EVERY})
_BY_NP = {d.np: d for d in EVERY}


def real_dtype(d: DType) -> DType:
    """The dtype of a complex dtype's parts (a real dtype is its own)."""
    return {complex64: float32, complex128: float64}.get(d, d)


def complex_dtype(d: DType) -> DType:
    """The complex dtype with parts of float dtype `d` (float16/bfloat16 widen)."""
    if d.is_complex:
        return d
    return complex128 if d is float64 else complex64


def from_name(name: str) -> DType:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise TypeError(f"unknown dtype {name!r}; valid: {', '.join(d.name for d in EVERY)}") from None


def to_dtype(x: Any) -> DType:
    """Accept a DType, a name, a NumPy dtype or type, or a Python type (float -> float32)."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        return from_name(x)
    if x is float:
        return DEFAULT_FLOAT
    if x is int:
        return DEFAULT_INT
    if x is bool:
        return bool_
    if x is complex:
        return DEFAULT_COMPLEX
    try:
        return _BY_NP[np.dtype(x)]
    except (KeyError, TypeError):
        raise TypeError(f"unsupported dtype {x!r}; valid: {', '.join(d.name for d in EVERY)}") from None


def from_numpy(np_dtype: Any) -> DType:
    return to_dtype(np_dtype)


def _int_join(a: DType, b: DType) -> DType:
    if a.kind == b.kind:
        return a if a.bits >= b.bits else b
    s, u = (a, b) if a.kind == "int" else (b, a)
    if s.bits > u.bits:
        return s
    if u.bits == 64:
        return float64        # no integer type holds both (NumPy's answer)
    return {8: int16, 16: int32, 32: int64}[u.bits]


def _float_join(a: DType, b: DType) -> DType:
    if a is b:
        return a
    if {a, b} == {float16, bfloat16}:
        return float32
    return a if a.bits >= b.bits else b


def promote(a: DType, b: DType) -> DType:
    """The result dtype of a binary op on two tensors."""
    if a is b:
        return a
    if a.kind == "bool":
        return b
    if b.kind == "bool":
        return a
    if a.is_complex or b.is_complex:
        # the array API: complex with a float keeps the wider precision; with an integer
        # the complex dtype stays (as a float does)
        parts = [real_dtype(d) for d in (a, b) if d.is_complex or d.is_float]
        wide = parts[0] if len(parts) == 1 else _float_join(*parts)
        return complex_dtype(wide)
    if a.is_float and b.is_float:
        return _float_join(a, b)
    if a.is_float:
        return a
    if b.is_float:
        return b
    return _int_join(a, b)


def result_type(*dtypes: DType) -> DType:
    out = dtypes[0]
    for d in dtypes[1:]:
        out = promote(out, d)
    return out


def weak_scalar_dtype(tensor_dtype: DType, value: Any) -> DType:
    """The dtype a tensor op takes when its other operand is a Python scalar."""
    if isinstance(value, bool):
        return tensor_dtype
    if isinstance(value, int):
        return DEFAULT_INT if tensor_dtype is bool_ else tensor_dtype
    if isinstance(value, float):
        return tensor_dtype if tensor_dtype.is_inexact else DEFAULT_FLOAT
    if isinstance(value, complex):
        return complex_dtype(tensor_dtype) if tensor_dtype.is_inexact else DEFAULT_COMPLEX
    raise TypeError(f"unsupported Python scalar {value!r} of type {type(value).__name__}")


def scalar_dtype(value: Any) -> DType:
    """The dtype of a Python scalar standing alone."""
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return DEFAULT_INT
    if isinstance(value, float):
        return DEFAULT_FLOAT
    if isinstance(value, complex):
        return DEFAULT_COMPLEX
    raise TypeError(f"unsupported Python scalar {value!r} of type {type(value).__name__}")


def finfo(d: DType) -> Any:
    return ml_dtypes.finfo(d.np) if d is bfloat16 else np.finfo(d.np)


def iinfo(d: DType) -> Any:
    return np.iinfo(d.np)


def min_value(d: DType) -> Any:
    """The identity of max: -inf for floats, the smallest value for integers."""
    if d.is_float:
        return -np.inf
    if d is bool_:
        return False
    return np.iinfo(d.np).min


def max_value(d: DType) -> Any:
    if d.is_float:
        return np.inf
    if d is bool_:
        return True
    return np.iinfo(d.np).max
