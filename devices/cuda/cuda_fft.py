"""The `fft` primitive (compiler/primitives/fft.py) on the CUDA device through cuFFT,
queued on the device's stream with no copy through host memory.

The primitive is XLA's Fft: FFT, IFFT (scaled by 1/N), RFFT, IRFFT (scaled by 1/N) over
the trailing len(fft_length) axes, every leading axis a batch. cuFFT's inverse transforms
are unscaled, so the 1/N is a cuBLAS scal over the result (its real and imaginary parts
as one real vector). IRFFT follows pocketfft's definition exactly, also for input that is
not the half spectrum of a real signal (a gradient's finite differences feed such input):
a copy of the input (cuFFT's complex-to-real overwrites its input) gets the inverse C2C
over the leading transformed axes, then the imaginary parts of the zero and Nyquist
frequencies are zeroed (pocketfft ignores them; cuFFT's result would depend on them), then
a batched 1-D C2R over the last axis.

Plans are kept per device, per (type, lengths, batch, layout), least recently used first
out; each plan's work area comes from the device's allocator (cuFFT allocates nothing).
A transform of more than 3 axes, or a device without cuFFT (or cuBLAS for the scaling),
is left to the caller (the host reference).

UNVERIFIED on a GPU: written against cufft.h's documented API and run against the
stand-in of cuda_fft_fake.py; the real library was only loaded and its symbols resolved.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Optional

import numpy as np

from . import cuda_fft_library as L
from .cuda_driver import check

PLAN_CACHE_SIZE = 32

# (fft_type, operand dtype) -> cufftType
_PLAN_TYPES = {("FFT", "complex64"): L.C2C, ("FFT", "complex128"): L.Z2Z,
               ("IFFT", "complex64"): L.C2C, ("IFFT", "complex128"): L.Z2Z,
               ("RFFT", "float32"): L.R2C, ("RFFT", "float64"): L.D2Z,
               ("IRFFT", "complex64"): L.C2R, ("IRFFT", "complex128"): L.Z2D}
_COMPLEX_OF = {L.C2R: L.C2C, L.Z2D: L.Z2Z}


class PlanCache:
    """cuFFT plans of one device, each with its work area and bound to its stream."""

    def __init__(self, device: Any, cufft: L.Cufft) -> None:
        self.device, self.cufft = device, cufft
        self.plans: OrderedDict = OrderedDict()      # key -> (plan, work buffer or None)
        self.made = 0
        # cufftDestroy for every plan left when the device goes (or the process ends)
        weakref.finalize(self, _destroy_all, cufft, self.plans)

    def get(self, lengths: tuple, batch: int, fft_type: int, embed: Optional[tuple] = None,
            stride: int = 1, dist: Optional[tuple] = None) -> int:
        key = (fft_type, lengths, batch, embed, stride, dist)
        entry = self.plans.get(key)
        if entry is not None:
            self.plans.move_to_end(key)
            return entry[0]
        plan, nbytes = self.cufft.make_plan(lengths, batch, fft_type, embed, stride, dist)
        try:
            work = self.device.new_buffer((nbytes,), np.uint8) if nbytes else None
            if work is not None:
                self.cufft.set_work_area(plan, work.ptr)
            self.cufft.set_stream(plan, int(self.device.stream))
        except Exception:
            self.cufft.destroy(plan)
            raise
        self.plans[key] = (plan, work)
        self.made += 1
        if len(self.plans) > PLAN_CACHE_SIZE:
            self._evict()
        return plan

    def _evict(self) -> None:
        """Drop the least recently used plan, once the stream is done with it."""
        _, (plan, _work) = self.plans.popitem(last=False)
        self.device.synchronize()
        self.cufft.destroy(plan)


def _destroy_all(cufft: L.Cufft, plans: OrderedDict) -> None:
    while plans:
        _, (plan, _work) = plans.popitem()
        cufft.lib.cufftDestroy(plan)          # at teardown: a failure has no one to tell


def plan_cache(device: Any) -> Optional[PlanCache]:
    """The device's plans (made once), or None where cuFFT cannot be loaded."""
    cache = getattr(device, "_cufft_plans", None)
    if cache is None:
        lib = device.libs.cufft(device.cu)
        cache = PlanCache(device, lib) if lib is not None else False
        device._cufft_plans = cache
    return cache or None


def run_fft(device: Any, ins: Any, out: Any, operands: list) -> bool:
    """Queue the `fft` instruction `ins` on cuFFT: operands[0] in, `out` written. False
    when cuFFT cannot take it (the caller runs the host reference)."""
    (x,) = operands
    fft_type, lengths = ins.attrs["fft_type"], tuple(int(n) for n in ins.attrs["fft_length"])
    plan_type = _PLAN_TYPES.get((fft_type, x.dtype.name))
    if plan_type is None or len(lengths) > L.MAX_RANK:
        return False
    scaled = fft_type in ("IFFT", "IRFFT")
    blas = device.cublas() if scaled else None
    if scaled and (blas is None or not hasattr(blas[0], "scal")):
        return False
    plans = plan_cache(device)
    if plans is None:
        return False
    if out.nbytes == 0:
        return True                           # an empty batch: nothing to compute
    batch = int(np.prod(ins.shape[:-len(lengths)], dtype=np.int64))
    if fft_type == "IRFFT":
        _irfft(device, plans, plan_type, x, out, lengths, batch)
    else:
        direction = L.INVERSE if fft_type == "IFFT" else L.FORWARD
        plans.cufft.execute(plans.get(lengths, batch, plan_type), plan_type, x.ptr, out.ptr,
                            direction)
    if scaled:
        _scale(blas, out, 1.0 / float(np.prod(lengths, dtype=np.int64)))
    return True


def _irfft(device: Any, plans: PlanCache, plan_type: int, x: Any, out: Any, lengths: tuple,
           batch: int) -> None:
    """pocketfft's irfftn, unscaled: inverse C2C over the leading axes of a copy, the
    imaginary parts of the zero and Nyquist frequencies zeroed, 1-D C2R over the last."""
    work = device.new_buffer(x.shape, x.dtype)      # C2R destroys its input: never x
    device.copy(x, work)
    item, m, last = x.dtype.itemsize, lengths[-1] // 2 + 1, lengths[-1]
    lead = lengths[:-1]
    if lead:          # each batch: m interleaved transforms over the leading axes, in place
        c2c = _COMPLEX_OF[plan_type]
        plan = plans.get(lead, m, c2c, embed=lead, stride=m, dist=(1, 1))
        block = int(np.prod(lead, dtype=np.int64)) * m * item
        for b in range(batch):
            plans.cufft.execute(plan, c2c, work.ptr + b * block, work.ptr + b * block, L.INVERSE)
    rows = batch * int(np.prod(lead, dtype=np.int64))
    columns = (0, m - 1) if last % 2 == 0 else (0,)
    for col in columns:        # imaginary part: the second half of each complex element
        check(device.cu.cuMemsetD2D32Async(work.ptr + col * item + item // 2, m * item, 0,
                                           item // 8, rows, device.stream), "memset imag")
    plans.cufft.execute(plans.get((last,), rows, plan_type), plan_type, work.ptr, out.ptr)


def _scale(blas: tuple, out: Any, factor: float) -> None:
    """out *= factor, a complex result as twice as many reals."""
    lib, handle = blas
    double = out.dtype in (np.float64, np.complex128)
    count = out.nbytes // (8 if double else 4)
    lib.scal(handle, double, count, factor, out.ptr)
