"""The CUDA device: cuda-python's driver bindings, PTX from compiler/codegen/nvptx.py.

- one primary context per GPU, one non-blocking stream; everything is ordered on it;
- memory from the device's default memory pool, stream-ordered (cuMemAllocAsync /
  cuMemFreeAsync); the pool keeps freed memory (release threshold: never), so a training
  loop's buffers are reused instead of returned to the driver;
- transfers through pinned host staging buffers (kept per size, reused);
- an executable loads its PTX once (cuModuleLoadData) and launches each fused kernel with
  the grid and block its LaunchSpec gives;
- dot_general through cuBLAS (nvmath-python's `bindings`), float32/float64/float16/
  bfloat16, batched and with transposed operands; the few ops with no GPU code yet (sort,
  argsort, cumulative, scatter, and dot_general when nvmath is absent or the operand
  layout is not a plain (transposed) matrix) run on the host with the primitive's NumPy
  reference, which is correct but copies through host memory.

Import this module only where `available()` may be asked: it imports cuda-python lazily.
"""
from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from typing import Any, Optional

import numpy as np

from ..compiler import dtypes as D
from ..compiler import primitive as P
from ..compiler import profile_hooks
from ..compiler.driver import compile as compile_program, gpu_arch
from ..compiler.module import Module
from ..compiler.program import Program
from . import gpu_timer
from .cuda_solver import run_library_call
from .device import Device

_DRIVER: Any = None


def driver() -> Any:
    """cuda-python's driver module, initialized (cuInit) once; raises if unusable."""
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver as cu
        check(cu.cuInit(0), "cuInit")
        _DRIVER = cu
    return _DRIVER


def available() -> bool:
    """True when cuda-python imports, a driver loads and at least one GPU is present."""
    if os.name == "posix" and not os.path.exists("/proc/driver/nvidia") \
            and not os.path.exists("/dev/nvidia0") and not os.path.exists("/dev/nvidiactl"):
        return False        # no NVIDIA kernel driver: skip importing cuda-python (~70 ms)
    try:
        cu = driver()
        return check(cu.cuDeviceGetCount(), "cuDeviceGetCount") > 0
    except Exception:       # no package, no driver library, no device: all mean "absent"
        return False


def check(result: Any, what: str) -> Any:
    """Unpack a driver call's (error, values...) tuple; raise RuntimeError on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA {what} failed: {_error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def _error_text(err: Any) -> str:
    try:
        _, text = _DRIVER.cuGetErrorString(err)
        return f"{getattr(err, 'name', err)} ({text.decode() if text else '?'})"
    except Exception:
        return str(err)


# ---- kernel arguments ------------------------------------------------------------------

class PackedArgs:
    """A kernel's parameters as the driver wants them: an array of pointers, each to the
    bytes of one argument (here every argument is a 64-bit device pointer)."""

    def __init__(self, pointers: list) -> None:
        self.values = [ctypes.c_uint64(int(p)) for p in pointers]
        self.array = (ctypes.c_void_p * max(1, len(self.values)))(
            *[ctypes.addressof(v) for v in self.values])

    @property
    def address(self) -> int:
        return ctypes.addressof(self.array)


# ---- buffers -----------------------------------------------------------------------------

class CudaBuffer:
    """Device memory holding one array; freed (stream-ordered) when unreachable."""

    __slots__ = ("ptr", "nbytes", "shape", "dtype", "device", "_finalizer", "__weakref__")

    def __init__(self, device: "CudaDevice", ptr: int, nbytes: int, shape: tuple,
                 dtype: np.dtype) -> None:
        self.ptr, self.nbytes, self.shape, self.dtype, self.device = ptr, nbytes, shape, dtype, device
        self._finalizer = weakref.finalize(self, device._free, ptr)

    def __repr__(self) -> str:
        return f"<CudaBuffer {self.device.name} {self.dtype}{list(self.shape)} at {self.ptr:#x}>"


class CudaDevice(Device):
    platform = "cuda"

    def __init__(self, name: str = "cuda") -> None:
        cu = driver()
        self.name = name
        self.ordinal = int(name.split(":")[1]) if ":" in name else 0
        count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
        if not 0 <= self.ordinal < count:
            raise ValueError(f"device {name!r}: there are {count} CUDA GPUs (cuda:0.."
                             f"cuda:{count - 1})")
        self.dev = check(cu.cuDeviceGet(self.ordinal), "cuDeviceGet")
        self.ctx = check(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        self.activate()
        self.stream = check(cu.cuStreamCreate(1), "cuStreamCreate")       # non-blocking
        self.pool = check(cu.cuDeviceGetDefaultMemPool(self.dev), "cuDeviceGetDefaultMemPool")
        keep = cu.cuuint64_t(2 ** 64 - 1)
        check(cu.cuMemPoolSetAttribute(
            self.pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, keep),
            "cuMemPoolSetAttribute")
        attr = cu.CUdevice_attribute
        self.capability = (
            check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev), "cc"),
            check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev), "cc"))
        self.arch = gpu_arch(self.capability)
        self._staging: dict = {}       # nbytes -> pinned host pointer (reused)
        self._lock = threading.Lock()
        self._cublas: Any = None
        self.bytes_moved = 0

    # ---- context, memory -----------------------------------------------------------

    def activate(self) -> None:
        check(driver().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    def alloc(self, nbytes: int) -> int:
        cu = driver()
        err, ptr = cu.cuMemAllocAsync(max(int(nbytes), 1), self.stream)
        if int(err) == int(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY):
            check(cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
            err, ptr = cu.cuMemAllocAsync(max(int(nbytes), 1), self.stream)
            if int(err) == int(cu.CUresult.CUDA_ERROR_OUT_OF_MEMORY):
                free, total = check(cu.cuMemGetInfo(), "cuMemGetInfo")
                raise MemoryError(f"{self.name}: out of memory allocating {nbytes:,} bytes "
                                  f"({free:,} of {total:,} bytes free on the GPU)")
        check((err,), "cuMemAllocAsync")
        return int(ptr)

    def _free(self, ptr: int) -> None:
        try:
            check(driver().cuMemFreeAsync(ptr, self.stream), "cuMemFreeAsync")
        except Exception:       # interpreter shutdown: the context is going away anyway
            pass

    def new_buffer(self, shape: tuple, dtype: np.dtype) -> CudaBuffer:
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return CudaBuffer(self, self.alloc(nbytes), nbytes, tuple(shape), np.dtype(dtype))

    def _pinned(self, nbytes: int) -> int:
        ptr = self._staging.get(nbytes)
        if ptr is None:
            ptr = check(driver().cuMemHostAlloc(max(nbytes, 1), 0), "cuMemHostAlloc")
            self._staging[nbytes] = int(ptr)
            ptr = int(ptr)
        return ptr

    def put(self, array: np.ndarray) -> CudaBuffer:
        cu, rec = driver(), profile_hooks.ACTIVE
        t0 = time.perf_counter() if rec else 0.0
        host = np.ascontiguousarray(array)
        buf = self.new_buffer(host.shape, host.dtype)
        if host.nbytes:
            with self._lock:
                staging = self._pinned(host.nbytes)
                ctypes.memmove(staging, host.ctypes.data, host.nbytes)
                check(cu.cuMemcpyHtoDAsync(buf.ptr, staging, host.nbytes, self.stream), "HtoD")
                check(cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        self.bytes_moved += host.nbytes
        if rec:
            rec.span("transfer", "host_to_device", t0, time.perf_counter(), {"bytes": host.nbytes})
        return buf

    def get(self, buffer: CudaBuffer) -> np.ndarray:
        cu, rec = driver(), profile_hooks.ACTIVE
        t0 = time.perf_counter() if rec else 0.0
        out = np.empty(buffer.shape, buffer.dtype)
        if out.nbytes:
            with self._lock:
                staging = self._pinned(out.nbytes)
                check(cu.cuMemcpyDtoHAsync(staging, buffer.ptr, out.nbytes, self.stream), "DtoH")
                check(cu.cuStreamSynchronize(self.stream), "cuStreamSynchronize")
                ctypes.memmove(out.ctypes.data, staging, out.nbytes)
        self.bytes_moved += out.nbytes
        if rec:
            rec.span("transfer", "device_to_host", t0, time.perf_counter(), {"bytes": out.nbytes})
        return out

    def copy(self, src: CudaBuffer, dst: CudaBuffer) -> None:
        check(driver().cuMemcpyDtoDAsync(dst.ptr, src.ptr, src.nbytes, self.stream), "DtoD")

    def synchronize(self) -> None:
        check(driver().cuStreamSynchronize(self.stream), "cuStreamSynchronize")

    def cache_key(self) -> tuple:
        return (self.platform, self.arch)

    def cublas(self) -> Optional[Any]:
        """A cuBLAS handle bound to this device's stream, or None without nvmath-python."""
        if self._cublas is None:
            try:
                from nvmath.bindings import cublas
            except ImportError:
                self._cublas = False
                return None
            handle = cublas.create()
            cublas.set_stream(handle, int(self.stream))
            self._cublas = (cublas, handle)
        return self._cublas or None

    # ---- compile -----------------------------------------------------------------

    def compile(self, module: Module) -> "CudaExecutable":
        return CudaExecutable(self, compile_program(module, self.arch))


class CudaExecutable:
    """A loaded Program (its PTX module) and its steps, run over device buffers."""

    def __init__(self, device: CudaDevice, program: Program) -> None:
        cu = driver()
        self.device, self.program = device, program
        self.values = program.value_table()      # position -> shape, dtype, op, attrs
        self.functions: dict = {}
        self.cu_module = None
        if program.code:
            device.activate()
            self.cu_module = check(cu.cuModuleLoadData(program.code + b"\0"),
                                   "cuModuleLoadData")
            for step in program.steps:
                if step["type"] == "launch":
                    self.functions[step["fn"]] = check(
                        cu.cuModuleGetFunction(self.cu_module, step["fn"].encode()),
                        f"cuModuleGetFunction({step['fn']})")
        self.param_of = {int(p): int(n) for p, n in program.params}
        self.outputs = list(program.outputs)
        self.constants = {p: device.put(v.constant()) for p, v in self.values.items()
                          if v.op == "constant"}

    def run(self, args: list) -> list:
        dev = self.device
        dev.activate()
        values: dict = dict(self.constants)
        for pos, number in self.param_of.items():
            values[pos] = self._as_buffer(args[number], self.values[pos])
        scratch = {key: dev.new_buffer((nbytes,), np.uint8)
                   for key, nbytes in self.program.scratch.items()}
        prof = profile_hooks.ACTIVE          # a profile records: events around each step
        timer = gpu_timer.EventTimer(driver(), dev.stream) if prof else None
        for step in self.program.steps:
            mark = timer.start() if timer else None
            if step["type"] == "launch":
                self._launch(step, values, scratch)
            else:
                self._library(step, values)
            if timer:
                timer.stop(mark, gpu_timer.kernel_name(step, self.program), "gpu")
        dev.synchronize()
        if timer:
            timer.report(prof, self.program.name)
        return [values[o] for o in self.outputs]

    def _as_buffer(self, arg: Any, ins: Any) -> CudaBuffer:
        if isinstance(arg, CudaBuffer):
            if arg.device is not self.device:
                raise ValueError(f"{self.device.name}: a parameter lives on "
                                 f"{arg.device.name}; move it with .to('{self.device.name}')")
            return arg
        return self.device.put(np.asarray(arg, ins.dtype.np).reshape(ins.shape))

    def _out(self, pos: int, values: dict) -> CudaBuffer:
        if pos not in values:
            ins = self.values[pos]
            values[pos] = self.device.new_buffer(ins.shape, ins.dtype.np)
        return values[pos]

    def _launch(self, step: dict, values: dict, scratch: dict) -> None:
        pointers = [scratch[p].ptr if isinstance(p, str) else self._out(p, values).ptr
                    for p in step["args"]]
        packed = PackedArgs(pointers)
        check(driver().cuLaunchKernel(self.functions[step["fn"]], *step["grid"], *step["block"],
                                      step["shared_bytes"], self.device.stream, packed.address, 0),
              f"cuLaunchKernel({step['fn']})")
        # the launch copied the arguments: `packed` may go now

    def _library(self, step: dict, values: dict) -> None:
        pos = step["pos"]
        ins = self.values[pos]
        operands = [values[o] for o in ins.operands]
        shapes = [self.values[o].shape for o in ins.operands]
        if step["call"] == "gemm" and gemm(self.device, ins, operands, self._out(pos, values),
                                           shapes):
            return
        call = (P.PRIMITIVES[ins.op].device_calls or {}).get("cuda")   # the stanza's own
        if call is not None and run_library_call(self.device, ins, self._out(pos, values),
                                                 operands, call):
            return
        host = [self.device.get(b) for b in operands]       # host fallback, exact reference
        with np.errstate(all="ignore"):
            out = P.PRIMITIVES[ins.op].reference(*host, **ins.attrs)
        values[pos] = self.device.put(np.asarray(out, ins.dtype.np).reshape(ins.shape))


# ---- cuBLAS ------------------------------------------------------------------------------

CUDA_DATA_TYPE = {D.float32: 0, D.float64: 1, D.float16: 2, D.bfloat16: 14}
COMPUTE_32F, COMPUTE_64F = 68, 70
GEMM_DEFAULT = -1
OP_N, OP_T = 0, 1


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
    the rhs first; an operand stored transposed only flips its `trans` flag."""
    a = ins.attrs
    la = matrix_layout(len(lhs_shape), tuple(a["lhs_batch"]), tuple(a["lhs_contracting"]))
    lb = matrix_layout(len(rhs_shape), tuple(a["rhs_batch"]), tuple(a["rhs_contracting"]))
    # the rhs is "N" for cuBLAS when stored (batch, contracting, free) = k x n row-major
    if la is None or lb is None or ins.dtype not in CUDA_DATA_TYPE:
        return None
    lfree = [d for d in range(len(lhs_shape)) if d not in a["lhs_batch"] and d not in a["lhs_contracting"]]
    rfree = [d for d in range(len(rhs_shape)) if d not in a["rhs_batch"] and d not in a["rhs_contracting"]]
    batch = _size(lhs_shape, a["lhs_batch"])
    m, k, n = _size(lhs_shape, lfree), _size(lhs_shape, a["lhs_contracting"]), _size(rhs_shape, rfree)
    rhs_n = lb == "T"          # rhs stored (b, k, n): column-major n x k, used as is
    lhs_n = la == "N"          # lhs stored (b, m, k): column-major k x m, used as is
    return dict(transa=OP_N if rhs_n else OP_T, transb=OP_N if lhs_n else OP_T,
                m=n, n=m, k=k, lda=n if rhs_n else k, ldb=k if lhs_n else m, ldc=n,
                stride_a=k * n, stride_b=m * k, stride_c=m * n, batch=batch)


def _size(shape: tuple, dims: Any) -> int:
    return int(np.prod([shape[d] for d in dims], dtype=np.int64))


def gemm(device: CudaDevice, ins: Any, operands: list, out: CudaBuffer, shapes: list) -> bool:
    """Run a dot_general with cuBLAS; False when cuBLAS cannot (the caller falls back)."""
    lib = device.cublas()
    lhs_shape, rhs_shape = shapes
    g = gemm_arguments(ins, lhs_shape, rhs_shape)
    if lib is None or g is None:
        return False
    cublas, handle = lib
    dtype = ins.dtype
    if g["m"] * g["n"] * g["batch"] == 0:
        return False
    compute = COMPUTE_64F if dtype is D.float64 else COMPUTE_32F
    scalar = np.float64 if dtype is D.float64 else np.float32
    alpha, beta = np.array(1, scalar), np.array(0, scalar)
    t = CUDA_DATA_TYPE[dtype]
    lhs, rhs = operands
    cublas.gemm_strided_batched_ex(
        handle, g["transa"], g["transb"], g["m"], g["n"], g["k"], alpha.ctypes.data,
        rhs.ptr, t, g["lda"], g["stride_a"], lhs.ptr, t, g["ldb"], g["stride_b"],
        beta.ctypes.data, out.ptr, t, g["ldc"], g["stride_c"], g["batch"], compute, GEMM_DEFAULT)
    device.synchronize()      # alpha and beta live in host memory read at launch
    return True
