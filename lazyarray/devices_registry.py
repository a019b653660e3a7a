"""Devices by name: which runtime serves 'interpreter', 'cpu' and 'cuda'."""
from __future__ import annotations

from .devices.interpreter import InterpreterDevice
from . import runtime

runtime.register_device("interpreter", lambda name: InterpreterDevice())


def _register_cuda() -> None:
    """'cuda' and 'cuda:N' exist only where cuda-python imports and a GPU is present."""
    from .devices import cuda
    if cuda.available():
        runtime.register_device("cuda", lambda name: cuda.CudaDevice(name))


_register_cuda()
