"""The stand-ins as the CUDA runtime's libraries (devices/cuda/libraries.py `Libraries`):
the driver and cuBLAS over host memory (cuda_fake.py), cuFFT (cuda_fft_fake.py), cuSOLVER
(cuda_solver_fake.py) and NCCL (nccl_fake.py) over it, and a program's kernels run as
their CPU twins (cuda_host_kernels.py), since the stand-in driver cannot run PTX."""
from __future__ import annotations

from typing import Any, Optional


class StandIns:
    stand_in = True

    def driver(self) -> Any:
        from .cuda_fake import FAKE_DRIVER
        return FAKE_DRIVER

    def missing(self) -> Optional[str]:
        return None

    def cublas(self, cu: Any) -> Optional[Any]:
        from .cuda_fake import FakeCublas
        return FakeCublas(cu)

    def cufft(self, cu: Any) -> Optional[Any]:
        from ..cuda.cuda_fft_library import Cufft
        from .cuda_fft_fake import FakeCufft
        return Cufft(FakeCufft(cu), "fake")

    def solver(self, cu: Any) -> tuple:
        from .cuda_solver_fake import FakeCublasRoutines, FakeCusolverDn
        return FakeCublasRoutines(cu), FakeCusolverDn(cu)

    def nccl(self) -> tuple:
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            return None, "the NCCL stand-in of the fake CUDA driver needs mpi4py"
        from ..cuda.nccl_library import Nccl
        from .nccl_fake import FakeNccl
        return Nccl(FakeNccl(), "(stand-in: devices/stand_ins/nccl_fake.py)"), None

    def image(self, code: bytes, arch: str, cache_dir: str) -> bytes:
        return code + b"\0"      # the stand-in runs host code: no cubin to link

    def host_kernels(self, module: Any, donated: frozenset, program: Any) -> Optional[dict]:
        from .cuda_host_kernels import host_kernels
        return host_kernels(module, donated, program)

    def conditional_image(self, arch: str) -> bytes:
        """The kernels' PTX, registered with their host build (cuda_conditional_host.py)."""
        from ..cuda.conditional_kernels import ptx
        from .cuda_conditional_host import host_kernels
        from .cuda_fake import FAKE_DRIVER
        image = ptx(arch).encode() + b"\0"
        FAKE_DRIVER.register_host_kernels(image, host_kernels())
        return image


STAND_INS = StandIns()
