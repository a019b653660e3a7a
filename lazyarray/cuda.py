"""`la.cuda`: the CUDA device's memory and state, as `torch.cuda` names them.

    la.cuda.is_available()          # a GPU, its driver and cuda-python (or the stand-in)
    la.cuda.device_count()          # how many (cuda:0 .. cuda:N-1)
    la.cuda.memory_allocated()      # bytes held by live tensors
    la.cuda.memory_reserved()       # that plus the allocator's cache
    la.cuda.empty_cache()           # return the cached blocks to the driver
"""
from __future__ import annotations

from . import config, runtime
from .devices_registry import _cuda_count
from .devices.cuda.libraries import libraries


def is_available() -> bool:
    return libraries(config.fake_cuda).missing() is None


def device_count() -> int:
    """The GPUs the driver counts (0 where no CUDA device is usable)."""
    return _cuda_count() if is_available() else 0


def _device(device: str):
    return runtime.get_device(device).device


def empty_cache(device: str = "cuda") -> int:
    """Return the blocks the caching allocator keeps for reuse to the driver (other
    programs may then use the memory); the bytes released. Live tensors keep theirs."""
    return _device(device).empty_cache()


def memory_allocated(device: str = "cuda") -> int:
    return _device(device).allocator.allocated


def memory_reserved(device: str = "cuda") -> int:
    return _device(device).allocator.reserved


def synchronize(device: str = "cuda") -> None:
    """Wait until the device has finished everything queued (a sync does not wait)."""
    _device(device).synchronize()
