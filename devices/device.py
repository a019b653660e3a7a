"""What every device provides: buffers, and executables compiled from modules."""
from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from ..compiler import profile_hooks
from ..compiler.hlo.module import Module


class Executable(Protocol):
    def run(self, args: list) -> list:
        """Run on parameter buffers (and Python scalars for scalar parameters), in
        parameter order; return one buffer per module output."""


class Device:
    """A place tensors live. Subclasses implement the four methods below."""

    name: str = "?"
    platform: str = "?"

    def compile(self, module: Module) -> Executable:
        raise NotImplementedError

    def put(self, array: np.ndarray) -> Any:
        """Copy a host array into a new buffer on this device."""
        raise NotImplementedError

    def get(self, buffer: Any) -> np.ndarray:
        """Copy a buffer back to a host array (which the caller may keep)."""
        raise NotImplementedError

    def cache_key(self) -> tuple:
        """What, besides the module, decides the compiled code (target, features)."""
        return (self.platform,)

    def __repr__(self) -> str:
        return f"device(type='{self.name}')"


class HostDevice(Device):
    """A device whose buffers are read-only NumPy arrays in host memory."""

    def put(self, array: np.ndarray) -> np.ndarray:
        rec = profile_hooks.ACTIVE
        t0 = time.perf_counter() if rec else 0.0
        out = np.array(array, copy=True, order="C")
        out.setflags(write=False)
        if rec:
            rec.span("transfer", "host_to_device", t0, time.perf_counter(), {"bytes": out.nbytes})
        return out

    def get(self, buffer: np.ndarray) -> np.ndarray:
        return buffer

    def wrap_host(self, array: np.ndarray) -> np.ndarray:
        """Use a host array as a buffer without copying (DLPack import)."""
        return array
