"""Runs a GPU program's own kernels on the host, thread by thread (SIMT stand-in).

The fake CUDA driver (cuda_fake.py) runs a CPU twin of each kernel, which checks the
runtime but not the GPU kernels' code. This runs that code: the kernels of
`compiler.driver.compile_gpu_for_host` (the same emission as the PTX, built for the host;
compiler/codegen/gpu_simt.py) with one OS thread per GPU thread of a block, real
barriers (`pthread_barrier_wait`) and warp shuffles through an exchange array, the
blocks of a grid one after another. So team reductions, vector loads, grid-stride loops
and the last-block ticket of a full reduction run as they would on a GPU, at the launch
sizes of the Program.

It is slow (a thread per GPU thread, a barrier wait per shuffle): for tests on small
shapes, with a small GPU target so that grids of several blocks stay short.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from ...compiler.driver import llvm_lock, simt_layout
from ...compiler.program import Program
from ..cpu.object_code import LoadedCode

CTX, CTX_WORDS, BARRIER_BYTES = simt_layout()
_LIBC = ctypes.CDLL(None)
_LIBC.pthread_barrier_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
_LIBC.pthread_barrier_wait.argtypes = [ctypes.c_void_p]
_LIBC.pthread_barrier_destroy.argtypes = [ctypes.c_void_p]
ALIGN = 256                  # as the CUDA device's buffers (vector loads need 16)
TIMEOUT_S = 120.0            # a kernel whose threads miss a barrier hangs: fail instead


def _symbols() -> None:
    with llvm_lock():
        addr = ctypes.cast(_LIBC.pthread_barrier_wait, ctypes.c_void_p).value
        llvm.add_symbol("pthread_barrier_wait", addr)


class _Aligned:
    """Zeroed host memory starting at an ALIGN boundary, viewed as an array."""

    def __init__(self, shape: tuple, dtype: Any) -> None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        self.raw = np.zeros(max(nbytes, 1) + ALIGN, np.uint8)
        start = (-self.raw.ctypes.data) % ALIGN
        self.array = self.raw[start:start + nbytes].view(dtype).reshape(shape)
        self.ptr = self.raw.ctypes.data + start


class SimtExecutable:
    """A Program of `compile_gpu_for_host`, run on host buffers."""

    def __init__(self, program: Program) -> None:
        _symbols()
        self.program = program
        self.code = LoadedCode(program.code)
        self.values = program.value_table()
        self.params = {int(p): int(n) for p, n in program.params}

    def run(self, args: list) -> list:
        """Host arrays for the module's parameters (by number) -> its outputs."""
        buffers: dict = {}
        for step in self.program.steps:
            for key in step.args:
                if key in buffers:
                    continue
                if isinstance(key, str):
                    buffers[key] = _Aligned((self.program.scratch[key],), np.uint8)
                    continue
                v = self.values[key]
                buffers[key] = _Aligned(v.shape, v.dtype.np)
                if key in self.params:
                    buffers[key].array[...] = np.asarray(args[self.params[key]], v.dtype.np)
                elif v.op == "constant":
                    buffers[key].array[...] = v.constant()
        for step in self.program.steps:
            self._launch(step, [buffers[k].ptr for k in step.args])
        return [buffers[o].array.copy() for o in self.program.outputs]

    def _launch(self, step: Any, pointers: list) -> None:
        fn_type = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(pointers) + 1))
        kernel = fn_type(self.code.address(step.fn))
        (gx, gy, gz), (bx, by, bz) = step.grid, step.block
        if gy != 1 or gz != 1 or bz != 1:
            raise NotImplementedError(f"simt: {step.fn}: grids and blocks are 1-d or 2-d here")
        nthreads = bx * by
        warps = -(-nthreads // 32)
        barriers = np.zeros((1 + warps) * BARRIER_BYTES, np.uint8)
        base = barriers.ctypes.data
        _LIBC.pthread_barrier_init(base, None, nthreads)
        for w in range(warps):
            _LIBC.pthread_barrier_init(base + (1 + w) * BARRIER_BYTES, None,
                                       min(32, nthreads - 32 * w))
        exchange = np.zeros(nthreads, np.int32)
        errors: list = []

        def thread(tx: int, ty: int) -> None:
            ctx = (ctypes.c_int64 * CTX_WORDS)()
            words = {"tid.x": tx, "tid.y": ty, "ntid.x": bx, "ntid.y": by, "nctaid.x": gx,
                     "block_barrier": base, "warp_barriers": base + BARRIER_BYTES,
                     "exchange": exchange.ctypes.data, "linear_tid": tx + bx * ty}
            for k, v in words.items():
                ctx[CTX[k]] = v
            try:
                for block in range(gx):
                    ctx[CTX["ctaid.x"]] = block
                    kernel(*pointers, ctypes.addressof(ctx))
                    _LIBC.pthread_barrier_wait(base)     # the next block's shared memory
            except Exception as e:                      # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=thread, args=(t % bx, t // bx), daemon=True)
                   for t in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT_S)
            if t.is_alive():
                raise RuntimeError(f"simt: {step.fn} did not finish in {TIMEOUT_S:.0f} s "
                                   f"(threads waiting at a barrier the others missed?)")
        for k in range(1 + warps):
            _LIBC.pthread_barrier_destroy(base + k * BARRIER_BYTES)
        if errors:
            raise errors[0]
