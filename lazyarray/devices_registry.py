"""Devices by name: which runtime serves 'interpreter', 'cpu' and 'cuda'."""
from __future__ import annotations

from .devices.interpreter import InterpreterDevice
from . import runtime

runtime.register_device("interpreter", lambda name: InterpreterDevice())
