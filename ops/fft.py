"""The array API's fft extension (NumPy's numpy.fft signatures), over the `fft` primitive.

Each function moves its axes last, crops or zero-pads them to the requested lengths (`n`,
`s`), runs one `fft` (XLA's kinds: FFT, IFFT, RFFT, IRFFT) and scales for `norm`:
"backward" (the default: the inverse divides by n), "ortho" (both by sqrt(n)) or
"forward" (the forward divides by n). Real input to a complex transform is made complex;
integer and bool input computes in the default float, as lazyarray's other float
functions do.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..compiler.graph import builders as A
from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .promotion import as_node, convert, normalize_axis, shape_str

_NORMS = ("backward", "ortho", "forward")


def _float(x: Node) -> Node:
    if x.dtype.is_complex or x.dtype in (D.float32, D.float64):
        return x
    return convert(x, D.float32 if x.dtype in (D.float16, D.bfloat16) else D.DEFAULT_FLOAT)


def _complex(x: Node) -> Node:
    x = _float(x)
    return x if x.dtype.is_complex else convert(x, D.complex_dtype(x.dtype))


def _real(op: str, x: Node) -> Node:
    x = _float(x)
    if x.dtype.is_complex:
        raise TypeError(f"{op}: needs real input, got {x.dtype.name} (use fft for complex)")
    return x


def _axes(op: str, x: Node, s: Optional[Sequence[int]], axes: Optional[Sequence[int]]) -> tuple:
    if axes is None:
        axes = tuple(range(x.ndim - len(s), x.ndim)) if s is not None else tuple(range(x.ndim))
    axes = tuple(normalize_axis(op, a, x.ndim) for a in axes)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: repeated axes {axes}")
    if s is not None and len(s) != len(axes):
        raise ValueError(f"{op}: s {tuple(s)} and axes {axes} must have the same length")
    if not axes:
        raise ValueError(f"{op}: needs at least one axis")
    return axes


def _to_end(x: Node, axes: tuple) -> tuple:
    perm = tuple(d for d in range(x.ndim) if d not in axes) + axes
    return A.transpose(x, perm), perm


def _back(y: Node, perm: tuple) -> Node:
    return A.transpose(y, A.inverse_permutation(perm))


def _fit(op: str, x: Node, lengths: tuple) -> Node:
    """Crop or zero-pad the last len(lengths) axes to `lengths`."""
    k = len(lengths)
    for i, n in enumerate(lengths):
        if n < 1:
            raise ValueError(f"{op}: transform lengths must be >= 1, got {n}")
        axis = x.ndim - k + i
        have = x.shape[axis]
        if n < have:
            lo, hi = [0] * x.ndim, list(x.shape)
            hi[axis] = n
            x = apply("slice", x, start_indices=tuple(lo), limit_indices=tuple(hi),
                      strides=(1,) * x.ndim)
        elif n > have:
            high = [0] * x.ndim
            high[axis] = n - have
            x = apply("pad", x, A.const(0, x.dtype), edge_padding_low=(0,) * x.ndim,
                      edge_padding_high=tuple(high), interior_padding=(0,) * x.ndim)
    return x


def _norm_scale(op: str, y: Node, norm: str, n: int, inverse: bool) -> Node:
    """XLA's convention is "backward"; rescale for the others."""
    if norm not in _NORMS:
        raise ValueError(f"{op}: norm must be one of {_NORMS}, got {norm!r}")
    if norm == "backward" or n == 0:
        return y
    if norm == "ortho":
        c = math.sqrt(n) if inverse else 1 / math.sqrt(n)
    else:
        c = float(n) if inverse else 1.0 / n
    return A.mul(y, A.full(c, y.shape, y.dtype))


def _transform(op: str, x: Node, s: Any, axes: Any, norm: str, fft_type: str) -> Node:
    axes = _axes(op, x, s, axes)
    moved, perm = _to_end(x, axes)
    k = len(axes)
    tail = moved.shape[-k:]
    if fft_type == "IRFFT":
        lengths = tuple(s) if s is not None else tail[:-1] + (2 * (tail[-1] - 1),)
        if lengths[-1] < 1:
            raise ValueError(f"{op}: the output length must be >= 1, got {lengths[-1]} (input "
                             f"{shape_str(x.shape)})")
        fitted = _fit(op, moved, lengths[:-1] + (lengths[-1] // 2 + 1,))
    else:
        lengths = tuple(s) if s is not None else tail
        fitted = _fit(op, moved, lengths)
    y = apply("fft", fitted, fft_type=fft_type, fft_length=tuple(int(n) for n in lengths))
    y = _norm_scale(op, y, norm, math.prod(lengths), fft_type in ("IFFT", "IRFFT"))
    return _back(y, perm)


def _one(n: Optional[int]) -> Optional[tuple]:
    return None if n is None else (int(n),)


def fft(x: Any, n: Optional[int] = None, axis: int = -1, norm: str = "backward") -> Node:
    return _transform("fft", _complex(as_node(x)), _one(n), (axis,), norm, "FFT")


def ifft(x: Any, n: Optional[int] = None, axis: int = -1, norm: str = "backward") -> Node:
    return _transform("ifft", _complex(as_node(x)), _one(n), (axis,), norm, "IFFT")


def fftn(x: Any, s: Any = None, axes: Any = None, norm: str = "backward") -> Node:
    return _transform("fftn", _complex(as_node(x)), s, axes, norm, "FFT")


def ifftn(x: Any, s: Any = None, axes: Any = None, norm: str = "backward") -> Node:
    return _transform("ifftn", _complex(as_node(x)), s, axes, norm, "IFFT")


def rfft(x: Any, n: Optional[int] = None, axis: int = -1, norm: str = "backward") -> Node:
    return _transform("rfft", _real("rfft", as_node(x)), _one(n), (axis,), norm, "RFFT")


def irfft(x: Any, n: Optional[int] = None, axis: int = -1, norm: str = "backward") -> Node:
    return _transform("irfft", _complex(as_node(x)), _one(n), (axis,), norm, "IRFFT")


def rfftn(x: Any, s: Any = None, axes: Any = None, norm: str = "backward") -> Node:
    return _transform("rfftn", _real("rfftn", as_node(x)), s, axes, norm, "RFFT")


def irfftn(x: Any, s: Any = None, axes: Any = None, norm: str = "backward") -> Node:
    return _transform("irfftn", _complex(as_node(x)), s, axes, norm, "IRFFT")


def fft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Node:
    """fftn over the last two axes (NumPy's fft2)."""
    return _transform("fft2", _complex(as_node(x)), s, axes, norm, "FFT")


def ifft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Node:
    return _transform("ifft2", _complex(as_node(x)), s, axes, norm, "IFFT")


def rfft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Node:
    return _transform("rfft2", _real("rfft2", as_node(x)), s, axes, norm, "RFFT")


def irfft2(x: Any, s: Any = None, axes: Any = (-2, -1), norm: str = "backward") -> Node:
    return _transform("irfft2", _complex(as_node(x)), s, axes, norm, "IRFFT")


_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def hfft(x: Any, n: Optional[int] = None, axis: int = -1, norm: str = "backward") -> Node:
    """The FFT of a signal with Hermitian symmetry (given by its first half): real output."""
    if norm not in _NORMS:
        raise ValueError(f"hfft: norm must be one of {_NORMS}, got {norm!r}")
    x = _complex(as_node(x))
    return _transform("hfft", apply("conj", x), _one(n), (axis,), _SWAP[norm], "IRFFT")


def ihfft(x: Any, n: Optional[int] = None, axis: int = -1, norm: str = "backward") -> Node:
    """The inverse of hfft: the first half of the spectrum of a real signal."""
    if norm not in _NORMS:
        raise ValueError(f"ihfft: norm must be one of {_NORMS}, got {norm!r}")
    y = _transform("ihfft", _real("ihfft", as_node(x)), _one(n), (axis,), _SWAP[norm], "RFFT")
    return apply("conj", y)


def fftfreq(n: int, d: float = 1.0, *, dtype: Any = None) -> Node:
    """The sample frequencies of an n-point FFT: [0, 1, ..., -(n // 2), ..., -1] / (d n)."""
    return _freqs("fftfreq", n, d, dtype, half=False)


def rfftfreq(n: int, d: float = 1.0, *, dtype: Any = None) -> Node:
    """The non-negative sample frequencies of an n-point real FFT: [0, ..., n // 2] / (d n)."""
    return _freqs("rfftfreq", n, d, dtype, half=True)


def _freqs(op: str, n: int, d: float, dtype: Any, half: bool) -> Node:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"{op}: n must be a positive int, got {n!r}")
    dtype = D.DEFAULT_FLOAT if dtype is None else D.to_dtype(dtype)
    if not dtype.is_float:
        raise TypeError(f"{op}: dtype must be a real floating-point dtype, got {dtype.name}")
    count = n // 2 + 1 if half else n
    k = A.iota((count,), D.int64, 0)
    if not half:        # the upper half stands for the negative frequencies
        wrap = A.compare(k, A.full((n - 1) // 2, (count,), D.int64), "GT")
        k = A.select(wrap, A.sub(k, A.full(n, (count,), D.int64)), k)
    return A.mul(A.convert(k, dtype), A.full(1.0 / (float(d) * n), (count,), dtype))


def _shift(op: str, x: Any, axes: Any, inverse: bool) -> Node:
    from .manipulation import roll
    x = as_node(x)
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, int):
        axes = (axes,)
    axes = tuple(normalize_axis(op, a, x.ndim) for a in axes)
    shifts = tuple((-(x.shape[a] // 2) if inverse else x.shape[a] // 2) for a in axes)
    return roll(x, shifts, axis=axes) if axes else x


def fftshift(x: Any, axes: Any = None) -> Node:
    """Move the zero frequency to the middle (roll each axis by n // 2)."""
    return _shift("fftshift", x, axes, inverse=False)


def ifftshift(x: Any, axes: Any = None) -> Node:
    """Undo fftshift (roll each axis by -(n // 2))."""
    return _shift("ifftshift", x, axes, inverse=True)


FFT = ("fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft",
       "fft2", "ifft2", "rfft2", "irfft2",
       "fftfreq", "rfftfreq", "fftshift", "ifftshift")
__all__: list = []     # none is a top-level name: they live in lazyarray.fft
