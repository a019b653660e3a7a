"""The NVPTX architectures the code generator knows, and the PTX ISA version each gets.

Apart from nvptx.py so that a CUDA device can name its target (driver.gpu_arch) without
importing the code generators: a process that loads its programs from the disk cache
never needs them."""
from __future__ import annotations

# PTX ISA version per architecture: the oldest that knows the architecture, at least 7.8
# (CUDA 11.8), so that any driver that can run the GPU accepts the PTX.
PTX_VERSION = {"sm_70": 78, "sm_75": 78, "sm_80": 78, "sm_86": 78, "sm_89": 78,
               "sm_90": 78, "sm_100": 86, "sm_120": 87}


def arch_of(capability: tuple) -> str:
    """'sm_XY' for a compute capability (X, Y), capped to the newest known here."""
    wanted = capability[0] * 10 + capability[1]
    known = sorted(int(a[3:]) for a in PTX_VERSION)
    best = max([k for k in known if k <= wanted] or [known[0]])
    return f"sm_{best}"
