"""How each HLO dtype lives in LLVM: in memory (storage) and in registers (compute).

bool is i8 in memory and i1 in registers. float16 and bfloat16 are computed in float32
(the references do the same) and rounded back after every op, so a fused chain gives what
the interpreter gives; bfloat16 is stored as i16 because llvmlite has no bfloat type.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..hlo import dtypes as D

F32 = ir.FloatType()
F64 = ir.DoubleType()
F16 = ir.HalfType()
I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()

HALF = (D.float16, D.bfloat16)


C64 = ir.LiteralStructType([F32, F32])      # complex: (real, imaginary), NumPy's layout
C128 = ir.LiteralStructType([F64, F64])


def compute_type(dtype: D.DType) -> ir.Type:
    if dtype.is_complex:
        return C128 if dtype is D.complex128 else C64
    if dtype is D.bool_:
        return I1
    if dtype.is_int:
        return ir.IntType(dtype.bits)
    if dtype is D.float64:
        return F64
    return F32


def storage_type(dtype: D.DType) -> ir.Type:
    if dtype is D.bool_:
        return I8
    if dtype is D.float16:
        return F16
    if dtype is D.bfloat16:
        return I16
    return compute_type(dtype)


def constant(dtype: D.DType, value) -> ir.Constant:
    """A compute-type constant (NaN and infinities included)."""
    ty = compute_type(dtype)
    if dtype.is_complex:
        z = complex(value)
        part = ty.elements[0]
        return ir.Constant(ty, [ir.Constant(part, z.real), ir.Constant(part, z.imag)])
    if dtype.is_float:
        return ir.Constant(ty, float(value))
    if dtype is D.bool_:
        return ir.Constant(ty, int(bool(value)))
    v = int(value) & ((1 << dtype.bits) - 1)
    if v >= 1 << (dtype.bits - 1):     # the same bits, written as LLVM's signed literal
        v -= 1 << dtype.bits
    return ir.Constant(ty, v)


class Value:
    """An LLVM value in its dtype's compute type."""

    __slots__ = ("ir", "dtype")

    def __init__(self, value: ir.Value, dtype: D.DType) -> None:
        self.ir = value
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"<Value {self.dtype.name} {self.ir.type}>"
