"""A stand-in for libcufft over the fake CUDA driver (cuda_fake.py), so that the CUDA
device's cuFFT path — the binding (cuda_fft_library.Cufft), plans, work areas, stream
order, the scaling and the complex-to-real copy — runs on machines without a GPU, as
nccl_fake.py does for NCCL.

It has libcufft's C functions under their names, taking what the binding passes to the
real library (ctypes references and arrays, addresses, a stream's handle), computes with
NumPy on the fake device's host memory, and holds callers to cuFFT's contract, strictly:
- a plan is made once (cufftMakePlanMany64), for rank 1 to 3, with its layout (packed, or
  `embed`/stride/distance); with auto-allocation off it runs only once a work area of at
  least the size it reported is set, inside a live device allocation;
- an executor must match the plan's type; C2C/Z2Z take CUFFT_FORWARD or CUFFT_INVERSE;
  neither scales (the inverse is unnormalized);
- work is queued on the plan's stream (one must be set: the device never uses the legacy
  default stream) and runs when the stream does, reading its input then;
- complex-to-real destroys its input (here: overwritten with NaN), and what cuFFT computes
  for a 1-D complex-to-real whose zero or Nyquist frequency has an imaginary part is not
  defined (here: NaN), so a caller relying on either gets wrong numbers here too.
"""
from __future__ import annotations

import ctypes
import itertools
from typing import Any, Optional

import numpy as np

from ..cuda import cuda_fft_library as L
from .cuda_fake import FAKE_DRIVER, FakeDriver

FAKE_VERSION = 99999                      # not a release, so never mistaken for one
# cufftType -> (input dtype, output dtype)
_DTYPES = {L.C2C: (np.complex64, np.complex64), L.Z2Z: (np.complex128, np.complex128),
           L.R2C: (np.float32, np.complex64), L.D2Z: (np.float64, np.complex128),
           L.C2R: (np.complex64, np.float32), L.Z2D: (np.complex128, np.float64)}
_EXECUTOR_TYPE = {name: t for t, (name, _) in L.EXECUTORS.items()}


class Plan:
    def __init__(self) -> None:
        self.auto_allocate = True
        self.made = False
        self.work_size = 0
        self.work: Optional[int] = None
        self.stream: Optional[Any] = None


class FakeCufft:
    """libcufft's functions (the subset cuda_fft_library binds) over the fake driver."""

    def __init__(self, driver: FakeDriver = FAKE_DRIVER) -> None:
        self.driver = driver
        self.plans: dict = {}
        self._ids = itertools.count(1)
        self.calls: dict = {}             # function name -> count (tests read it)

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def cufftGetVersion(self, ref: Any) -> int:
        ref._obj.value = FAKE_VERSION
        return 0

    def cufftCreate(self, ref: Any) -> int:
        self._count("cufftCreate")
        handle = next(self._ids)
        self.plans[handle] = Plan()
        ref._obj.value = handle
        return 0

    def cufftDestroy(self, plan: int) -> int:
        self._count("cufftDestroy")
        return 0 if self.plans.pop(int(plan), None) is not None else L.INVALID_PLAN

    def cufftSetAutoAllocation(self, plan: int, flag: int) -> int:
        p = self.plans.get(int(plan))
        if p is None:
            return L.INVALID_PLAN
        p.auto_allocate = bool(flag)
        return 0

    def cufftMakePlanMany64(self, plan: int, rank: int, n: Any, inembed: Any, istride: int,
                            idist: int, onembed: Any, ostride: int, odist: int, fft_type: int,
                            batch: int, work_ref: Any) -> int:
        self._count("cufftMakePlanMany64")
        p = self.plans.get(int(plan))
        if p is None or p.made:
            return L.INVALID_PLAN
        if fft_type not in _DTYPES:
            return L.INVALID_TYPE
        if not 1 <= rank <= L.MAX_RANK or (inembed is None) != (onembed is None):
            return L.INVALID_VALUE
        lengths = tuple(int(v) for v in n[:rank])
        if min(lengths) < 1 or batch < 1 or min(istride, ostride, idist, odist) < 1:
            return L.INVALID_SIZE
        real_in, real_out = fft_type in (L.R2C, L.D2Z), fft_type in (L.C2R, L.Z2D)
        half = lengths[:-1] + (lengths[-1] // 2 + 1,)
        p.lengths, p.batch, p.type = lengths, int(batch), int(fft_type)
        p.shapes = (half if real_out else lengths, half if real_in else lengths)
        embeds = (tuple(int(v) for v in inembed[:rank]), tuple(int(v) for v in onembed[:rank])) \
            if inembed is not None else p.shapes
        p.layouts = ((embeds[0], int(istride), int(idist)), (embeds[1], int(ostride), int(odist)))
        # a work size of the order cuFFT asks for: one transform's complex values
        p.work_size = int(np.prod(lengths)) * np.dtype(_DTYPES[fft_type][0]).itemsize * 2
        p.made = True
        work_ref._obj.value = p.work_size
        return 0

    def cufftSetWorkArea(self, plan: int, ptr: Any) -> int:
        p = self.plans.get(int(plan))
        if p is None:
            return L.INVALID_PLAN
        p.work = int(ptr or 0)
        return 0

    def cufftSetStream(self, plan: int, stream: Any) -> int:
        p = self.plans.get(int(plan))
        if p is None:
            return L.INVALID_PLAN
        p.stream = next((s for s in self.driver._streams if int(s) == int(stream or 0)), None)
        return 0 if p.stream is not None else L.INVALID_VALUE

    # ---- executors ---------------------------------------------------------------------

    def cufftExecC2C(self, plan: int, src: int, dst: int, direction: int) -> int:
        return self._exec("cufftExecC2C", plan, src, dst, direction)

    def cufftExecZ2Z(self, plan: int, src: int, dst: int, direction: int) -> int:
        return self._exec("cufftExecZ2Z", plan, src, dst, direction)

    def cufftExecR2C(self, plan: int, src: int, dst: int) -> int:
        return self._exec("cufftExecR2C", plan, src, dst, L.FORWARD)

    def cufftExecD2Z(self, plan: int, src: int, dst: int) -> int:
        return self._exec("cufftExecD2Z", plan, src, dst, L.FORWARD)

    def cufftExecC2R(self, plan: int, src: int, dst: int) -> int:
        return self._exec("cufftExecC2R", plan, src, dst, L.INVERSE)

    def cufftExecZ2D(self, plan: int, src: int, dst: int) -> int:
        return self._exec("cufftExecZ2D", plan, src, dst, L.INVERSE)

    def _exec(self, name: str, plan: int, src: int, dst: int, direction: int) -> int:
        self._count(name)
        p = self.plans.get(int(plan))
        if p is None or not p.made:
            return L.INVALID_PLAN
        if _EXECUTOR_TYPE[name] != p.type or direction not in (L.FORWARD, L.INVERSE):
            return L.INVALID_VALUE
        if p.stream is None:
            return L.INVALID_VALUE
        if not p.auto_allocate and p.work_size and not p.work:
            return L.NO_WORKSPACE
        src, dst = int(src), int(dst)
        work = (p.work, p.work_size) if not p.auto_allocate and p.work_size else None

        def run() -> None:
            if work is not None:
                self.driver._check_device(*work, f"{name} work area")
            x = self._read(p, 0, src, name)
            y = _transform(p, x, direction)
            if p.type in (L.C2R, L.Z2D):          # cuFFT's C2R destroys its input
                self._write(p, 0, src, np.full(x.shape, np.nan, x.dtype), name)
            self._write(p, 1, dst, y, name)
        self.driver._enqueue(p.stream, name, run)
        return 0

    def _view(self, p: Plan, side: int, ptr: int, name: str) -> tuple:
        """(flat view of the memory one side spans, index of each (batch, element))."""
        embed, stride, dist = p.layouts[side]
        shape = p.shapes[side]
        strides = np.cumprod((1,) + embed[::-1])[:-1][::-1] * stride
        offsets = sum(np.indices(shape)[i] * strides[i] for i in range(len(shape))).ravel()
        index = np.arange(p.batch)[:, None] * dist + offsets[None, :]
        dtype = np.dtype(_DTYPES[p.type][side])
        count = int(index.max()) + 1
        self.driver._check_device(ptr, count * dtype.itemsize, f"{name} {'output' if side else 'input'}")
        flat = np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(ptr), dtype)
        return flat, index.reshape((p.batch,) + shape)

    def _read(self, p: Plan, side: int, ptr: int, name: str) -> np.ndarray:
        flat, index = self._view(p, side, ptr, name)
        return flat[index]

    def _write(self, p: Plan, side: int, ptr: int, values: np.ndarray, name: str) -> None:
        flat, index = self._view(p, side, ptr, name)
        flat[index] = values


def _transform(p: Plan, x: np.ndarray, direction: int) -> np.ndarray:
    """cuFFT's unnormalized transform of a batch (axis 0) in NumPy."""
    axes = tuple(range(1, x.ndim))
    out_dtype = _DTYPES[p.type][1]
    if p.type in (L.R2C, L.D2Z):
        return np.fft.rfftn(x, axes=axes).astype(out_dtype)
    if p.type in (L.C2R, L.Z2D):
        y = np.fft.irfftn(x, s=p.lengths, axes=axes, norm="forward").astype(out_dtype)
        if len(p.lengths) == 1 and _undefined_c2r(x, p.lengths[-1]):
            y[...] = np.nan
        return y
    if direction == L.FORWARD:
        return np.fft.fftn(x, axes=axes).astype(out_dtype)
    return np.fft.ifftn(x, axes=axes, norm="forward").astype(out_dtype)


def _undefined_c2r(x: np.ndarray, n: int) -> bool:
    """Whether a 1-D C2R input has an imaginary zero or Nyquist frequency (no real
    signal's half spectrum has one; cuFFT does not define what it computes from it)."""
    edges = [x[..., 0]] + ([x[..., -1]] if n % 2 == 0 else [])
    return any(np.any(e.imag != 0) for e in edges)
