"""The runtimes: each turns a compiled module into an executable and runs it on buffers."""
from .device import Device, Executable
from .interpreter import InterpreterDevice

__all__ = ["Device", "Executable", "InterpreterDevice"]
