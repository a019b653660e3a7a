"""`lazyarray.fft`: the array API's fft extension (NumPy's numpy.fft names and
signatures), each a library call: pocketfft through NumPy on the CPU (ops/fft.py)."""
from __future__ import annotations

from .creation import show_device_keyword
from .lift import lift
from .ops import fft as _fft

for _name in _fft.FFT:
    globals()[_name] = lift(getattr(_fft, _name))
for _name in ("fftfreq", "rfftfreq"):         # they take device= (the array API's signature)
    show_device_keyword(globals()[_name])

__all__ = sorted(_fft.FFT)
