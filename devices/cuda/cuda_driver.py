"""The CUDA driver API as the device uses it: cuda-python's `cuda.bindings.driver`, or the
host-memory stand-in of `cuda_fake` (selected with `use_fake`, which lazyarray does for
`LAZYARRAY_FAKE_CUDA=1`).

Every call returns cuda-python's tuple `(CUresult, values...)`; `check` unpacks it and
raises with the driver's own error name. `missing()` says, in one sentence, which of the
GPU, the NVIDIA driver or the `cuda` extra (cuda-python) is absent.
"""
from __future__ import annotations

import os
from typing import Any, Optional

_DRIVER: Any = None
_FAKE = [False]
_FAILURE: list = []          # why the real driver could not be loaded (kept for `missing`)


def use_fake(on: bool = True) -> None:
    """Serve the driver calls from host memory (cuda_fake) instead of a GPU, for devices
    made afterwards without saying which (a device may also ask for one: `driver(fake)`)."""
    _FAKE[0] = bool(on)


def is_fake() -> bool:
    return _FAKE[0]


def driver(fake: Optional[bool] = None) -> Any:
    """The driver module, or the stand-in (`fake`; by default as `use_fake` chose),
    initialized (cuInit) once; raises if unusable."""
    global _DRIVER
    if fake if fake is not None else _FAKE[0]:
        from ..stand_ins.cuda_fake import FAKE_DRIVER
        return FAKE_DRIVER
    if _DRIVER is None:
        from cuda.bindings import driver as cu
        check(cu.cuInit(0), "cuInit")
        _DRIVER = cu
    return _DRIVER


def _has_kernel_driver() -> bool:
    return os.name != "posix" or any(os.path.exists(p) for p in
                                     ("/proc/driver/nvidia", "/dev/nvidia0", "/dev/nvidiactl"))


def missing(fake: Optional[bool] = None) -> Optional[str]:
    """None when a CUDA device can be made here; else what is missing, and the fix."""
    if fake if fake is not None else _FAKE[0]:
        return None
    if not _has_kernel_driver():      # checked first: skips importing cuda-python (~70 ms)
        return ("no NVIDIA GPU was found (no NVIDIA kernel driver: /dev/nvidia0 and "
                "/proc/driver/nvidia are absent)")
    try:
        import cuda.bindings.driver  # noqa: F401
    except ImportError:
        return ("the `cuda` extra is not installed (cuda-python cannot be imported): "
                "pip install 'lazyarray[cuda]'")
    try:
        cu = driver(False)
    except Exception as e:            # libcuda.so absent or too old, cuInit failing
        return f"the NVIDIA driver library could not be initialized ({e})"
    try:
        count = check(cu.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as e:
        return f"the NVIDIA driver could not count the GPUs ({e})"
    if count < 1:
        return "the NVIDIA driver is loaded but reports no CUDA GPU"
    return None


def available() -> bool:
    """True when a CUDA device can be made: a GPU with its driver and cuda-python, or the
    stand-in when selected."""
    try:
        return missing() is None
    except Exception:
        return False


def check(result: Any, what: str) -> Any:
    """Unpack a driver call's (error, values...) tuple; raise RuntimeError on an error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA {what} failed: {error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def error_text(err: Any) -> str:
    try:
        _, text = (_DRIVER or driver(True)).cuGetErrorString(err)
        return f"{getattr(err, 'name', err)} ({text.decode() if text else '?'})"
    except Exception:
        return str(err)
