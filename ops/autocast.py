"""Automatic mixed precision: which ops run in the low precision and which in float32.

PyTorch's autocast lists, reduced to lazyarray's ops: matrix products and convolutions
take their float operands in the autocast dtype (their products accumulate in float32 on
every target: BLAS/cuBLAS compute in float32 for float16 and bfloat16 operands), while
reductions (sum, mean, var, std, prod, cumulative sums), softmax, normalizations and
losses widen float16/bfloat16 operands to float32. Everything else runs in the dtype of
its inputs. `lazyarray.autocast` sets the dtype for a block; the setting is read at
record time, so a recorded graph does not change when the block ends.
"""
from __future__ import annotations

from typing import Optional

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from .promotion import convert

LOW = (D.float16, D.bfloat16)
_CURRENT: list = [None]      # the autocast dtype, or None when autocast is off


def current() -> Optional[D.DType]:
    return _CURRENT[0]


def set_current(dtype: Optional[D.DType]) -> Optional[D.DType]:
    """Set the autocast dtype (None: off); returns the previous one."""
    if dtype is not None and dtype not in LOW:
        raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {dtype.name}")
    previous, _CURRENT[0] = _CURRENT[0], dtype
    return previous


def lower(x: Node) -> Node:
    """A matrix product's or convolution's operand, in the autocast dtype when active."""
    dtype = _CURRENT[0]
    if dtype is None or not x.dtype.is_float or x.dtype is dtype:
        return x
    return convert(x, dtype)


def widen(x: Node) -> Node:
    """A reduction's, softmax's, normalization's or loss's operand: float32 when active."""
    if _CURRENT[0] is None or x.dtype not in LOW:
        return x
    return convert(x, D.float32)
