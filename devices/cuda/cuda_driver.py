"""The CUDA driver API as the device uses it: cuda-python's `cuda.bindings.driver` (its
host-memory stand-in is devices/stand_ins/cuda_fake.py; libraries.py chooses).

Every call returns cuda-python's tuple `(CUresult, values...)`; `check` unpacks it and
raises with the driver's own error name. `missing()` says, in one sentence, which of the
GPU, the NVIDIA driver or the `cuda` extra (cuda-python) is absent.
"""
from __future__ import annotations

import os
from typing import Any, Optional

_DRIVER: Any = None


def driver() -> Any:
    """The driver module, initialized (cuInit) once; raises if unusable."""
    global _DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver as cu
        check(cu.cuInit(0), "cuInit")
        _DRIVER = cu
    return _DRIVER


def _has_kernel_driver() -> bool:
    return os.name != "posix" or any(os.path.exists(p) for p in
                                     ("/proc/driver/nvidia", "/dev/nvidia0", "/dev/nvidiactl"))


def missing() -> Optional[str]:
    """None when a CUDA device can be made here; else what is missing, and the fix."""
    if not _has_kernel_driver():      # checked first: skips importing cuda-python (~70 ms)
        return ("no NVIDIA GPU was found (no NVIDIA kernel driver: /dev/nvidia0 and "
                "/proc/driver/nvidia are absent)")
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return ("the `cuda` extra is not installed (cuda-python cannot be imported): "
                "pip install 'lazyarray[cuda]'")
    try:
        cu = driver()
    except Exception as e:            # libcuda.so absent or too old, cuInit failing
        return f"the NVIDIA driver library could not be initialized ({e})"
    try:
        count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as e:
        return f"the NVIDIA driver could not count the GPUs ({e})"
    if count < 1:
        return "the NVIDIA driver is loaded but reports no CUDA GPU"
    return None


def check(result: Any, what: str) -> Any:
    """Unpack a driver call's (error, values...) tuple; raise RuntimeError on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA {what} failed: {error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def error_text(err: Any) -> str:
    """The error's name, and the driver's text for it where the real driver is loaded (the
    stand-in's errors are named by their enum)."""
    name = getattr(err, "name", err)
    if _DRIVER is None:
        return str(name)
    try:
        _, text = _DRIVER.cuGetErrorString(err)
        return f"{name} ({text.decode() if text else '?'})"
    except Exception:
        return str(err)
