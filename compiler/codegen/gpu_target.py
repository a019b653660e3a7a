"""What the NVPTX code generator knows of the GPU it compiles for: the architecture and
the numbers that size launches (occupancy).

A GPU target is a string, so that it can be a cache key as it is: `"sm_90"` (the
architecture, with the default GPU size below) or `"sm_90:132:2048"` (the architecture,
the number of streaming multiprocessors and the threads one multiprocessor holds at
once, as the CUDA device reads them from the driver's device attributes). Grid sizes are
baked into a Program's launch steps, so two GPUs of one architecture and different sizes
get different Programs.
"""
from __future__ import annotations

from dataclasses import dataclass

DEFAULT_SMS = 132               # an H100 SXM; what "sm_XX" alone stands for
DEFAULT_THREADS_PER_SM = 2048   # every architecture from sm_70 but sm_86/sm_89 (1536)
MAX_BLOCKS_PER_SM = 32          # the hardware's limit on resident blocks (sm_80 and later)


@dataclass(frozen=True)
class GpuTarget:
    arch: str
    sms: int = DEFAULT_SMS
    threads_per_sm: int = DEFAULT_THREADS_PER_SM

    def resident_blocks(self, block: int) -> int:
        """Blocks of `block` threads the whole GPU runs at once (one wave): the grid of a
        grid-stride kernel, so that every multiprocessor is full and no block waits for a
        second wave (registers may lower this on the hardware; the grid-stride loops stay
        correct for any grid)."""
        return self.sms * max(1, min(MAX_BLOCKS_PER_SM, self.threads_per_sm // block))

    def __str__(self) -> str:
        return f"{self.arch}:{self.sms}:{self.threads_per_sm}"


def parse_target(target: str) -> GpuTarget:
    """The GpuTarget a target string names ("sm_90" or "sm_90:132:2048")."""
    parts = str(target).split(":")
    if len(parts) == 1:
        return GpuTarget(parts[0])
    if len(parts) != 3 or not (parts[1].isdigit() and parts[2].isdigit()) \
            or int(parts[1]) < 1 or int(parts[2]) < 32:
        raise ValueError(f"nvptx: bad GPU target {target!r}; expected 'sm_XX' or "
                         f"'sm_XX:<multiprocessors>:<threads per multiprocessor>'")
    return GpuTarget(parts[0], int(parts[1]), int(parts[2]))


def target_string(arch: str, sms: int, threads_per_sm: int) -> str:
    """The target string of a GPU (from its device attributes)."""
    return str(GpuTarget(arch, max(1, int(sms)), max(32, int(threads_per_sm))))
