"""cuFFT through ctypes: libcufft.so.11 from the `nvidia-cufft-cu12` wheel (its
`nvidia/cufft/lib`), else wherever the system's loader finds it. `Cufft` wraps the few C
functions the CUDA device's fft step calls (plans made with our own work area, bound to
the device's stream, and the six executors) and turns a failed call's cufftResult into a
`CufftError` that names the call and the result.

`Cufft` calls its functions through any object that has them under their C names: the
loaded library, or the host-memory stand-in of cuda_fft_fake.py (for the fake CUDA
driver), so that this wrapper is the same code on both.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
from typing import Any, Optional

from .. import ctypes_library
from ..ctypes_library import load_first

# cufftType: (input, output) precision and kind, as cufft.h numbers them
R2C, C2R, C2C, D2Z, Z2D, Z2Z = 0x2A, 0x2C, 0x29, 0x6A, 0x6C, 0x69
FORWARD, INVERSE = -1, 1                 # CUFFT_FORWARD, CUFFT_INVERSE (exponent's sign)
MAX_RANK = 3                             # cuFFT plans transforms of 1 to 3 dimensions

# cufftResult, in order (cufft.h numbers them 0..16)
RESULTS = ("CUFFT_SUCCESS", "CUFFT_INVALID_PLAN", "CUFFT_ALLOC_FAILED", "CUFFT_INVALID_TYPE",
           "CUFFT_INVALID_VALUE", "CUFFT_INTERNAL_ERROR", "CUFFT_EXEC_FAILED",
           "CUFFT_SETUP_FAILED", "CUFFT_INVALID_SIZE", "CUFFT_UNALIGNED_DATA",
           "CUFFT_INCOMPLETE_PARAMETER_LIST", "CUFFT_INVALID_DEVICE", "CUFFT_PARSE_ERROR",
           "CUFFT_NO_WORKSPACE", "CUFFT_NOT_IMPLEMENTED", "CUFFT_LICENSE_ERROR",
           "CUFFT_NOT_SUPPORTED")
INVALID_PLAN, INVALID_TYPE, INVALID_VALUE = 1, 3, 4
EXEC_FAILED, INVALID_SIZE, NO_WORKSPACE = 6, 8, 13

_INT, _LL, _PTR, _SIZE = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_size_t
_P_INT, _P_LL, _P_SIZE = ctypes.POINTER(_INT), ctypes.POINTER(_LL), ctypes.POINTER(_SIZE)
# every function the binding calls: (result type, argument types); all must resolve.
# A cufftHandle is an int; streams and device memory are addresses.
PROTOTYPES = {
    "cufftGetVersion": (_INT, [_P_INT]),
    "cufftCreate": (_INT, [_P_INT]),
    "cufftDestroy": (_INT, [_INT]),
    "cufftSetAutoAllocation": (_INT, [_INT, _INT]),
    "cufftMakePlanMany64": (_INT, [_INT, _INT, _P_LL, _P_LL, _LL, _LL, _P_LL, _LL, _LL, _INT,
                                   _LL, _P_SIZE]),
    "cufftSetWorkArea": (_INT, [_INT, _PTR]),
    "cufftSetStream": (_INT, [_INT, _PTR]),
    "cufftExecC2C": (_INT, [_INT, _PTR, _PTR, _INT]),
    "cufftExecZ2Z": (_INT, [_INT, _PTR, _PTR, _INT]),
    "cufftExecR2C": (_INT, [_INT, _PTR, _PTR]),
    "cufftExecD2Z": (_INT, [_INT, _PTR, _PTR]),
    "cufftExecC2R": (_INT, [_INT, _PTR, _PTR]),
    "cufftExecZ2D": (_INT, [_INT, _PTR, _PTR]),
}
# the executor of each plan type, and whether it takes a direction
EXECUTORS = {C2C: ("cufftExecC2C", True), Z2Z: ("cufftExecZ2Z", True),
             R2C: ("cufftExecR2C", False), D2Z: ("cufftExecD2Z", False),
             C2R: ("cufftExecC2R", False), Z2D: ("cufftExecZ2D", False)}

INSTALL = "pip install 'lazyarray[cuda]' (the nvidia-cufft-cu12 wheel)"


class CufftError(RuntimeError):
    """A failed cuFFT call: `call`, `code` (cufftResult) and `name` ('CUFFT_INVALID_SIZE')."""

    def __init__(self, call: str, code: int, detail: str = "") -> None:
        self.call, self.code = call, int(code)
        self.name = RESULTS[code] if 0 <= code < len(RESULTS) else f"cufftResult {code}"
        super().__init__(f"{call} failed: {self.name} ({code})" + (f": {detail}" if detail else ""))


# ---- finding and loading the library ---------------------------------------------------

def candidate_paths() -> list:
    """Where libcufft may be: the nvidia-cufft wheel's lib folder first (found without
    importing anything), then the bare names for the system's loader."""
    paths = []
    try:
        spec = importlib.util.find_spec("nvidia.cufft")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        lib = os.path.join(folder, "lib")
        if os.path.isdir(lib):
            paths += sorted(os.path.join(lib, f) for f in os.listdir(lib)
                            if f.startswith("libcufft.so"))
    paths.append(ctypes.util.find_library("cufft") or "libcufft.so.11")
    return paths


_LOADED: list = []          # [(Cufft or None, why not)] once looked for


def load() -> tuple:
    """(the library wrapped in `Cufft`, None), or (None, why it could not be loaded)."""
    if not _LOADED:
        _LOADED.append(_load())
    return _LOADED[0]


def _load() -> tuple:
    return load_first(candidate_paths(), PROTOTYPES, Cufft, "cuFFT", "libcufft was not found",
                      INSTALL)


def bind(lib: Any) -> Any:
    """Declare every prototype on a loaded CDLL (raises AttributeError for a missing one)."""
    return ctypes_library.bind(lib, PROTOTYPES)


# ---- the wrapper ---------------------------------------------------------------------

def _longs(values: Any) -> Any:
    return (_LL * len(values))(*[int(v) for v in values])


class Cufft:
    """cuFFT's functions as the fft step uses them; each raises CufftError on failure."""

    def __init__(self, lib: Any, path: str = "") -> None:
        self.lib, self.path = lib, path

    def check(self, result: int, call: str, detail: str = "") -> None:
        if int(result) != 0:
            raise CufftError(call, int(result), detail)

    def version(self) -> int:
        v = _INT()
        self.check(self.lib.cufftGetVersion(ctypes.byref(v)), "cufftGetVersion")
        return v.value

    def make_plan(self, lengths: tuple, batch: int, fft_type: int, embed: Optional[tuple] = None,
                  stride: int = 1, dist: Optional[tuple] = None) -> tuple:
        """(plan, work bytes): a plan over `batch` transforms of `lengths` that allocates
        nothing (the caller gives it a work area of that size, cufftSetWorkArea).
        Without `embed` the data are packed (cuFFT's basic layout); with it, element x of
        transform b sits at b * dist + stride * (row-major offset of x in `embed`), for
        input and output alike, and `dist` is (input, output) distances."""
        plan = _INT()
        self.check(self.lib.cufftCreate(ctypes.byref(plan)), "cufftCreate")
        try:
            self.check(self.lib.cufftSetAutoAllocation(plan.value, 0), "cufftSetAutoAllocation")
            idist, odist = dist or _packed_distances(lengths, fft_type)
            nembed = _longs(embed) if embed is not None else None
            work = _SIZE()
            self.check(self.lib.cufftMakePlanMany64(
                plan.value, len(lengths), _longs(lengths), nembed, stride, idist, nembed, stride,
                odist, fft_type, batch, ctypes.byref(work)), "cufftMakePlanMany64",
                f"lengths {tuple(lengths)}, batch {batch}, type {fft_type:#x}")
        except CufftError:
            self.lib.cufftDestroy(plan.value)
            raise
        return plan.value, int(work.value)

    def set_work_area(self, plan: int, ptr: int) -> None:
        self.check(self.lib.cufftSetWorkArea(plan, ptr), "cufftSetWorkArea")

    def set_stream(self, plan: int, stream: int) -> None:
        self.check(self.lib.cufftSetStream(plan, stream), "cufftSetStream")

    def execute(self, plan: int, fft_type: int, src: int, dst: int, direction: int = FORWARD) -> None:
        """Queue the plan's transforms of `src` into `dst` on the plan's stream. C2R and
        Z2D overwrite `src` (cuFFT's documented behaviour for complex-to-real)."""
        name, directed = EXECUTORS[fft_type]
        fn = getattr(self.lib, name)
        self.check(fn(plan, src, dst, direction) if directed else fn(plan, src, dst), name)

    def destroy(self, plan: int) -> None:
        self.check(self.lib.cufftDestroy(plan), "cufftDestroy")


def _packed_distances(lengths: tuple, fft_type: int) -> tuple:
    """(input, output) elements between consecutive packed transforms: the full size,
    except the complex side of a real transform, which holds n // 2 + 1 on its last axis."""
    full = 1
    for n in lengths:
        full *= int(n)
    half = full // int(lengths[-1]) * (int(lengths[-1]) // 2 + 1)
    if fft_type in (R2C, D2Z):
        return full, half
    if fft_type in (C2R, Z2D):
        return half, full
    return full, full
