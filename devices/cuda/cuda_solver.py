"""What the CUDA device lends a stanza's cuSOLVER call (devices/cuda/cusolver_calls.py):
handles bound to its stream and a few buffer operations. The routines are nvmath-python's
bindings of cuBLAS and cuSOLVER on a GPU, and the stand-ins of cuda_solver_fake.py on the
fake driver (so the calls are tested without a GPU). UNVERIFIED on a GPU (see there).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np


class SolverContext:
    def __init__(self, device: Any, cublas: tuple, cusolver: tuple) -> None:
        self.device = device
        self.cublas, self.cublas_handle = cublas
        self.cusolver, self.cusolver_handle = cusolver

    def zeros(self, shape: tuple, dtype: Any) -> Any:
        return self.device.put(np.zeros(shape, dtype))

    def put(self, array: np.ndarray) -> Any:
        return self.device.put(array)

    def get(self, buffer: Any) -> np.ndarray:
        return self.device.get(buffer)

    def copy(self, src: Any, dst: Any) -> None:
        self.device.copy(src, dst)

    def copy_bytes(self, src_ptr: int, dst_ptr: int, nbytes: int) -> None:
        from .cuda_driver import check
        check(self.device.cu.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, self.device.stream),
              "DtoD")

    def memset_bytes(self, ptr: int, nbytes: int) -> None:
        """Zero `nbytes` at `ptr`, queued on the stream."""
        from .cuda_driver import check
        check(self.device.cu.cuMemsetD8Async(ptr, 0, nbytes, self.device.stream), "memset")

    def synchronize(self) -> None:
        self.device.synchronize()


def solver_context(device: Any) -> Optional[SolverContext]:
    """The device's context (made once), or None without nvmath-python's cuSOLVER."""
    ctx = getattr(device, "_solver_context", None)
    if ctx is None:
        try:      # nvmath's cuBLAS bindings too: the calls use routines beyond the device's GEMM
            cublas, cusolverDn = _libraries(device)
        except ImportError:
            ctx = False
        else:
            blas = cublas.create()
            cublas.set_stream(blas, int(device.stream))
            handle = cusolverDn.create()
            cusolverDn.set_stream(handle, int(device.stream))
            ctx = SolverContext(device, (cublas, blas), (cusolverDn, handle))
        device._solver_context = ctx
    return ctx or None


def _libraries(device: Any) -> tuple:
    """(cuBLAS routines, cuSOLVER routines) from the device's libraries: nvmath's bindings,
    or their stand-ins (raises ImportError where neither is here)."""
    return device.libs.solver(device.cu)


def run_library_call(device: Any, ins: Any, out: Any, operands: list, call: Any) -> bool:
    """Run a stanza's CUDA library call; False when it cannot (the caller falls back)."""
    ctx = solver_context(device)
    return bool(ctx is not None and call(ctx, ins, out, operands))
