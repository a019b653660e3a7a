"""cuBLAS for dot_general: a direct ctypes binding to the library the `nvidia-cublas`
wheel ships (or the system's libcublas), and the argument mapping from a row-major
dot_general to cuBLAS's column-major strided batched GEMM.

Importing nvmath-python instead took 1.9 s at the first GEMM (it loads CuPy's and
cuFFT's libraries); opening libcublas alone is one dlopen.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import Any, Optional

import numpy as np

from ...compiler.hlo import dtypes as D
from ..ctypes_library import load_first

CUDA_DATA_TYPE = {D.float32: 0, D.float64: 1, D.float16: 2, D.bfloat16: 14,
                  D.complex64: 4, D.complex128: 5}      # CUDA_C_32F, CUDA_C_64F
# alpha and beta's type: the compute type's (complex data: the complex one of its precision)
_SCALAR = {D.float64: np.float64, D.complex64: np.complex64, D.complex128: np.complex128}
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
OP_N, OP_T = 0, 1
SCAL_CHUNK = 1 << 30            # values per scal call (its count is a C int)
WORKSPACE_BYTES = 32 << 20      # cuBLAS's own workspace, given so that it never allocates


def library_paths() -> list:
    """Where libcublas may be: the nvidia-cublas wheel's lib folder, then the system."""
    paths = []
    try:
        import nvidia.cublas as wheel        # a namespace package: no __file__
        for root in list(getattr(wheel, "__path__", [])):
            paths += sorted(glob.glob(os.path.join(root, "lib", "libcublas.so*")))
    except ImportError:
        pass
    found = ctypes.util.find_library("cublas")
    if found:
        paths.append(found)
    return paths


_VP, _I32, _I64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
# name -> (restype, argtypes) of the cuBLAS functions the device calls (cublasStatus_t is
# an int); declared by ctypes_library as the NCCL and cuFFT bindings are
PROTOTYPES = {
    "cublasCreate_v2": (_I32, [ctypes.POINTER(_VP)]),
    "cublasSetStream_v2": (_I32, [_VP, _VP]),
    "cublasSetWorkspace_v2": (_I32, [_VP, _VP, ctypes.c_size_t]),
    "cublasGemmStridedBatchedEx": (_I32, [
        _VP, _I32, _I32, _I32, _I32, _I32, _VP, _VP, _I32, _I32, _I64, _VP, _I32, _I32, _I64,
        _VP, _VP, _I32, _I32, _I64, _I32, _I32, _I32]),
    "cublasSscal_v2": (_I32, [_VP, _I32, _VP, _VP, _I32]),
    "cublasDscal_v2": (_I32, [_VP, _I32, _VP, _VP, _I32]),
}
INSTALL = "pip install nvidia-cublas-cu12 (or install the CUDA toolkit's libcublas)"


class CublasLib:
    """The cuBLAS entry points the device calls, on a library whose PROTOTYPES are
    declared."""

    def __init__(self, lib: Any, path: str = "") -> None:
        self.lib, self.path = lib, path

    def _ok(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"cuBLAS {what} failed with status {status}")

    def create(self) -> int:
        h = ctypes.c_void_p()
        self._ok(self.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        return int(h.value)

    def set_stream(self, handle: int, stream: Any) -> None:
        self._ok(self.lib.cublasSetStream_v2(handle, int(stream)), "cublasSetStream")

    def set_workspace(self, handle: int, ptr: int, nbytes: int) -> None:
        self._ok(self.lib.cublasSetWorkspace_v2(handle, ptr, nbytes), "cublasSetWorkspace")

    def gemm_strided_batched_ex(self, handle: int, *args: Any) -> None:
        self._ok(self.lib.cublasGemmStridedBatchedEx(handle, *args), "cublasGemmStridedBatchedEx")

    def scal(self, handle: int, double: bool, count: int, factor: float, ptr: int) -> None:
        """x *= factor over `count` float32 (float64 if `double`) values at `ptr`, queued
        on the handle's stream (the inverse FFTs' 1/N), in chunks cuBLAS's int counts hold."""
        name = "cublasDscal_v2" if double else "cublasSscal_v2"
        alpha = np.array(factor, np.float64 if double else np.float32)
        size = alpha.itemsize
        for start in range(0, count, SCAL_CHUNK):
            n = min(SCAL_CHUNK, count - start)
            self._ok(getattr(self.lib, name)(handle, n, alpha.ctypes.data, ptr + start * size, 1),
                     name)


def load() -> tuple:
    """(the library wrapped in CublasLib, None), or (None, why it could not be loaded)."""
    return load_first(library_paths(), PROTOTYPES, CublasLib, "cuBLAS",
                      "libcublas was not found", INSTALL)


def load_cublas() -> Optional[CublasLib]:
    """The binding, or None when no libcublas can be opened here."""
    return load()[0]


# ---- argument mapping -------------------------------------------------------------------

def matrix_layout(ndim: int, batch: tuple, contracting: tuple) -> Optional[str]:
    """'N' if the operand is laid out (batch, free, contracting), 'T' if (batch,
    contracting, free), None otherwise (cuBLAS cannot read it in place)."""
    free = [d for d in range(ndim) if d not in batch and d not in contracting]
    if list(batch) + free + list(contracting) == list(range(ndim)):
        return "N"
    if list(batch) + list(contracting) + free == list(range(ndim)):
        return "T"
    return None


def gemm_arguments(ins: Any, lhs_shape: tuple, rhs_shape: tuple) -> Optional[dict]:
    """cuBLAS (column-major) arguments for a row-major dot_general, or None.

    Row-major C[b] = A[b] @ B[b] is column-major C[b]^T = B[b]^T @ A[b]^T, so cuBLAS gets
    the rhs first; an operand stored transposed only flips its `trans` flag. Leading
    dimensions are at least 1 (cuBLAS refuses 0, e.g. for k = 0)."""
    a = ins.attrs
    la = matrix_layout(len(lhs_shape), tuple(a["lhs_batch"]), tuple(a["lhs_contracting"]))
    lb = matrix_layout(len(rhs_shape), tuple(a["rhs_batch"]), tuple(a["rhs_contracting"]))
    if la is None or lb is None or ins.dtype not in CUDA_DATA_TYPE:
        return None
    lfree = [d for d in range(len(lhs_shape)) if d not in a["lhs_batch"] and d not in a["lhs_contracting"]]
    rfree = [d for d in range(len(rhs_shape)) if d not in a["rhs_batch"] and d not in a["rhs_contracting"]]
    batch = _size(lhs_shape, a["lhs_batch"])
    m, k, n = _size(lhs_shape, lfree), _size(lhs_shape, a["lhs_contracting"]), _size(rhs_shape, rfree)
    rhs_n = lb == "T"          # rhs stored (b, k, n): column-major n x k, used as is
    lhs_n = la == "N"          # lhs stored (b, m, k): column-major k x m, used as is
    return dict(transa=OP_N if rhs_n else OP_T, transb=OP_N if lhs_n else OP_T,
                m=n, n=m, k=k, lda=max(1, n if rhs_n else k), ldb=max(1, k if lhs_n else m),
                ldc=max(1, n), stride_a=k * n, stride_b=m * k, stride_c=m * n, batch=batch)


def _size(shape: tuple, dims: Any) -> int:
    return int(np.prod([shape[d] for d in dims], dtype=np.int64))


def gemm(device: Any, ins: Any, operands: list, out: Any, lhs_shape: tuple,
         rhs_shape: tuple) -> bool:
    """Queue a dot_general on cuBLAS; False when cuBLAS cannot take it (the caller falls
    back). An empty contraction (k = 0) is a zero fill; alpha and beta are read from host
    memory at the call (cuBLAS's host pointer mode), so nothing waits."""
    g = gemm_arguments(ins, lhs_shape, rhs_shape)
    if g is None:
        return False
    if g["m"] * g["n"] * g["batch"] == 0:
        return True                       # an empty result: nothing to compute
    if g["k"] == 0:
        device.memset(out, 0)
        return True
    lib = device.cublas()
    if lib is None:
        return False
    cublas, handle = lib
    dtype = ins.dtype
    compute = COMPUTE_64F if dtype in (D.float64, D.complex128) else COMPUTE_32F
    scalar = _SCALAR.get(dtype, np.float32)
    alpha, beta = np.array(1, scalar), np.array(0, scalar)
    t = CUDA_DATA_TYPE[dtype]
    lhs, rhs = operands
    cublas.gemm_strided_batched_ex(
        handle, g["transa"], g["transb"], g["m"], g["n"], g["k"], alpha.ctypes.data,
        rhs.ptr, t, g["lda"], g["stride_a"], lhs.ptr, t, g["ldb"], g["stride_b"],
        beta.ctypes.data, out.ptr, t, g["ldc"], g["stride_c"], g["batch"], compute, GEMM_DEFAULT)
    return True
