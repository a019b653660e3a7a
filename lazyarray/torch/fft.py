"""`torch.fft`: PyTorch's signatures (n, dim, norm; s, dim) over `lazyarray.fft`."""
from __future__ import annotations

from typing import Any, Optional

from lazyarray import fft as _fft


def _one(name: str) -> Any:
    op = getattr(_fft, name)

    def transform(input: Any, n: Optional[int] = None, dim: int = -1, norm: Any = None) -> Any:
        return op(input, n, axis=dim, norm=norm or "backward")
    transform.__name__ = name
    return transform


def _many(name: str, default: Any) -> Any:
    op = getattr(_fft, name)

    def transform(input: Any, s: Any = None, dim: Any = default, norm: Any = None) -> Any:
        axes = None if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
        return op(input, s, axes=axes, norm=norm or "backward")
    transform.__name__ = name
    return transform


fft, ifft, rfft, irfft = _one("fft"), _one("ifft"), _one("rfft"), _one("irfft")
hfft, ihfft = _one("hfft"), _one("ihfft")
fft2, ifft2 = _many("fft2", (-2, -1)), _many("ifft2", (-2, -1))
rfft2, irfft2 = _many("rfft2", (-2, -1)), _many("irfft2", (-2, -1))
fftn, ifftn = _many("fftn", None), _many("ifftn", None)
rfftn, irfftn = _many("rfftn", None), _many("irfftn", None)


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Any:
    return _fft.fftfreq(n, d, dtype=dtype, device=device)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None, device: Any = None) -> Any:
    return _fft.rfftfreq(n, d, dtype=dtype, device=device)


def fftshift(input: Any, dim: Any = None) -> Any:
    return _fft.fftshift(input, axes=dim)


def ifftshift(input: Any, dim: Any = None) -> Any:
    return _fft.ifftshift(input, axes=dim)
