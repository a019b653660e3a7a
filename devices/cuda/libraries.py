"""Where the CUDA runtime gets NVIDIA's libraries (the driver, cuBLAS, cuFFT, cuSOLVER,
NCCL) and how it makes a program's PTX loadable: the one seam between the runtime and
either the real libraries (`NVIDIA`) or their stand-ins over host memory
(devices/stand_ins/libraries.py, chosen with `LAZYARRAY_FAKE_CUDA=1`), so that the whole
runtime runs and is tested on machines without a GPU. Nothing else in the runtime asks
which of the two it has.

Each library is opened one way: a method returning the object the runtime calls, or None
(cuBLAS, cuFFT) or the reason it is absent (NCCL); cuSOLVER's routines raise ImportError
where they are absent."""
from __future__ import annotations

from typing import Any, Optional, Protocol

from . import cuda_driver


class Libraries(Protocol):
    stand_in: bool          # the stand-ins (the device reports it; nothing branches on it)

    def driver(self) -> Any:
        """The driver API (cuda-python's `cuda.bindings.driver` or its stand-in)."""

    def missing(self) -> Optional[str]:
        """None when a device can be made; else what is missing, and the fix."""

    def cublas(self, cu: Any) -> Optional[Any]:
        """cuBLAS (create, set_stream, the GEMMs), or None without it."""

    def cufft(self, cu: Any) -> Optional[Any]:
        """cuFFT wrapped in cuda_fft_library.Cufft, or None without it."""

    def solver(self, cu: Any) -> tuple:
        """(cuBLAS routines, cuSOLVER routines) for cusolver_calls.py; ImportError without."""

    def nccl(self) -> tuple:
        """(nccl_library.Nccl, None), or (None, why NCCL cannot be used)."""

    def image(self, code: bytes, arch: str, cache_dir: str) -> bytes:
        """What cuModuleLoadData gets for a program's PTX (`code`)."""

    def host_kernels(self, module: Any, donated: frozenset, program: Any) -> Optional[dict]:
        """Host code for the program's kernels where the driver runs them on the host."""

    def conditional_image(self, arch: str) -> bytes:
        """What cuModuleLoadData gets for the kernels that set a CUDA graph's conditional
        handles (conditional_kernels.py), made loadable on this driver."""


class Nvidia:
    """NVIDIA's own libraries, on a GPU."""

    stand_in = False

    def driver(self) -> Any:
        return cuda_driver.driver()

    def missing(self) -> Optional[str]:
        return cuda_driver.missing()

    def cublas(self, cu: Any) -> Optional[Any]:
        from .cuda_blas import load_cublas
        lib = load_cublas()
        if lib is not None:
            return lib
        try:              # the last resort: nvmath-python's bindings (a slow import)
            from nvmath.bindings import cublas
            return cublas
        except ImportError:
            return None

    def cufft(self, cu: Any) -> Optional[Any]:
        from . import cuda_fft_library
        return cuda_fft_library.load()[0]

    def solver(self, cu: Any) -> tuple:
        from nvmath.bindings import cublas, cusolverDn
        return cublas, cusolverDn

    def nccl(self) -> tuple:
        from . import nccl_library
        return nccl_library.load()

    def image(self, code: bytes, arch: str, cache_dir: str) -> bytes:
        from .cuda_link import load_image
        return load_image(code.decode(), arch, cache_dir)

    def host_kernels(self, module: Any, donated: frozenset, program: Any) -> Optional[dict]:
        return None              # a GPU runs the program's own kernels

    def conditional_image(self, arch: str) -> bytes:
        # the PTX itself: the driver compiles it (two tiny kernels) and resolves its
        # cudaGraphSetConditional at load, as for nvcc's output (conditional_kernels.py)
        from .conditional_kernels import ptx
        return ptx(arch).encode() + b"\0"


NVIDIA = Nvidia()
_STAND_INS = [False]         # what a device made without saying which gets


def use_stand_ins(on: bool = True) -> None:
    """Serve devices made afterwards (without saying which) from the stand-ins."""
    _STAND_INS[0] = bool(on)


def libraries(stand_ins: Optional[bool] = None) -> Libraries:
    """The real libraries, or the stand-ins (`stand_ins`; by default as use_stand_ins
    chose): the one place the choice is made."""
    if _STAND_INS[0] if stand_ins is None else stand_ins:
        from ..stand_ins.libraries import STAND_INS
        return STAND_INS
    return NVIDIA


def available(stand_ins: Optional[bool] = None) -> bool:
    """True when a CUDA device can be made: a GPU with its driver and cuda-python, or the
    stand-ins when chosen."""
    try:
        return libraries(stand_ins).missing() is None
    except Exception:
        return False
