"""PyTorch's dtype names (`torch.float32`, `torch.long`, `torch.cfloat`...), the same
dtype objects as lazyarray's."""
from __future__ import annotations

from typing import Any

from lazyarray.compiler.hlo import dtypes as _D
from lazyarray.compiler.hlo.dtypes import (DType as dtype, bfloat16, complex64, complex128,  # noqa: F401
                                       float16, float32, float64, int8, int16, int32, int64,
                                       uint8, uint16, uint32, uint64)

bool = _D.bool_  # noqa: A001
float, double, half = float32, float64, float16  # noqa: A001
int, long, short = int32, int64, int16  # noqa: A001
cfloat, cdouble = complex64, complex128


def get_default_dtype() -> dtype:
    return _D.DEFAULT_FLOAT


def set_default_dtype(d: Any) -> None:
    """lazyarray's default float is float32, fixed (its compiled programs are keyed on it)."""
    if _D.to_dtype(d) is not _D.DEFAULT_FLOAT:
        raise NotImplementedError(f"set_default_dtype({d}): lazyarray's default float is "
                                  f"{_D.DEFAULT_FLOAT.name} and cannot change; pass dtype= "
                                  "where you need another")


def is_floating_point(x: Any) -> Any:
    return x.dtype.is_float


def is_complex(x: Any) -> Any:
    return x.dtype.is_complex
