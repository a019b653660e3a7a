"""Assemble PTX with NVIDIA's `ptxas`, which needs no GPU.

The CUDA driver compiles PTX itself when a module is loaded, so `ptxas` is not needed to
run anything. It is the check: every PTX the compiler emits must assemble for the
architectures we target, on every machine where `ptxas` is found, GPU or not.
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from typing import Optional

DEFAULT_ARCHS = ("sm_80", "sm_90")


class PtxasError(RuntimeError):
    """`ptxas` rejected a PTX module; the message carries its diagnostics."""


def find_ptxas() -> Optional[str]:
    """The `ptxas` on PATH, else one in a CUDA install under /usr/local; None if absent."""
    found = shutil.which("ptxas")
    if found:
        return found
    for candidate in sorted(glob.glob("/usr/local/cuda*/bin/ptxas"), reverse=True):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def assemble(ptx: str, arch: str = "sm_80", name: str = "kernel") -> bytes:
    """Assemble `ptx` for `arch` and return the cubin; raise PtxasError with ptxas's
    message (and the offending lines) when it fails, FileNotFoundError without ptxas."""
    exe = find_ptxas()
    if exe is None:
        raise FileNotFoundError("ptxas not found on PATH nor under /usr/local/cuda*/bin; "
                                "install the CUDA toolkit (or nvidia-cuda-nvcc) to check PTX")
    with tempfile.TemporaryDirectory(prefix="lazyarray-ptxas-") as tmp:
        src = os.path.join(tmp, name + ".ptx")
        out = os.path.join(tmp, name + ".cubin")
        with open(src, "w") as f:
            f.write(ptx)
        proc = subprocess.run([exe, f"-arch={arch}", src, "-o", out],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise PtxasError(f"ptxas -arch={arch} rejected the PTX of {name!r} "
                             f"(exit {proc.returncode}):\n{proc.stderr.strip()}"
                             f"{_context(ptx, proc.stderr)}")
        with open(out, "rb") as f:
            return f.read()


def check(ptx: str, archs: tuple = DEFAULT_ARCHS, name: str = "kernel") -> None:
    """Assemble for every architecture in `archs`; raise on the first that fails."""
    for arch in archs:
        assemble(ptx, arch, name)


def _context(ptx: str, stderr: str) -> str:
    """The PTX lines that ptxas's messages point at ('..., line 42; error : ...')."""
    lines = ptx.splitlines()
    shown = []
    for msg in stderr.splitlines():
        marker = msg.find(", line ")
        if marker < 0:
            continue
        digits = msg[marker + 7:].split(";")[0].strip()
        if digits.isdigit() and 0 < int(digits) <= len(lines):
            shown.append(f"  {digits}: {lines[int(digits) - 1].strip()}")
    return ("\nat:\n" + "\n".join(shown[:10])) if shown else ""
