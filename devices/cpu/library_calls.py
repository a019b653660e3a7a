"""The library calls a CPU program's steps name (`LibraryStep.call`, from the primitive's
stanza) as the runtime runs them from Python: "gemm", a matrix product the native tiles
do not cover (integer, complex and half-float products, operands that need a copy:
NumPy's matmul into the planned buffer, split over the pool), and "host", a primitive's
NumPy reference (host_calls.py). A native program runs them between two of its jobs
(native_program.py); products the tiles cover are tasks of the jobs themselves.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...compiler.hlo import dtypes as D
from ...compiler.program import LibraryStep, ValueInfo
from . import native_gemm
from .host_calls import host_call
from .native_pool import NativePool, split


def gemm_call(step: LibraryStep, v: ValueInfo, operands: list, out: np.ndarray,
              pool: NativePool) -> None:
    """dot_general through BLAS, with the layout the compiler worked out."""
    matmul_into(out, operands[0], operands[1], step.args, pool)


def matmul_into(out: np.ndarray, lhs: np.ndarray, rhs: np.ndarray, layout: dict,
                pool: Optional[NativePool] = None) -> None:
    """out = the product as (batch, m, k) @ (batch, k, n) (`layout`, from dot_general's
    stanza): float32/float64 as the tiles a native program runs for it, on the native pool
    (native_gemm.run_product); other dtypes through NumPy's matmul, written straight
    into the planned buffer (a large one split by batches or rows over the pool)."""
    if not out.size:
        return
    threads = pool.threads if pool is not None else 1
    if native_gemm.run_product(layout, lhs, rhs, out, threads):
        return
    # transposed operands are strided views (reshaped without a copy where they allow)
    a, c = np.transpose(lhs, layout["lhs_perm"]), np.transpose(rhs, layout["rhs_perm"])
    b, m, k, n = layout["batch"], layout["m"], layout["k"], layout["n"]
    a, c = a.reshape(b, m, k), c.reshape(b, k, n)
    target = out.reshape(b, m, n)
    if out.dtype in (np.float16, D.bfloat16.np):
        # an overflow to inf is the result (a GradScaler step looks for it), not a warning
        with np.errstate(over="ignore", invalid="ignore"):
            target[...] = np.matmul(a.astype(np.float32), c.astype(np.float32)).astype(out.dtype)
    elif threads <= 1 or b * m * n * k < SPLIT_FLOPS or (b < threads and m < 2 * threads):
        np.matmul(a, c, out=target)
    elif b >= threads:
        pool.run_python(lambda _, s, e: np.matmul(a[s:e], c[s:e], out=target[s:e]),
                        split(b, threads))
    else:
        pool.run_python(lambda _, s, e: np.matmul(a[:, s:e], c, out=target[:, s:e]),
                        split(m, threads))


SPLIT_FLOPS = 1 << 22    # an integer or complex product this large is split over the pool


# what the CPU runs for each library call a stanza can name (compiler/primitive.py)
LIBRARY_CALLS = {"gemm": gemm_call, "host": host_call}
