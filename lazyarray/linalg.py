"""`lazyarray.linalg`: the array API's linalg extension and PyTorch's common names.

Products and norms are traced into fused code (ops/linalg.py); solves and decompositions
are library calls (ops/decompositions.py): LAPACK on the CPU, cuSOLVER on CUDA. Results
with several parts are named tuples, as NumPy's and PyTorch's.
"""
from __future__ import annotations

import inspect
from typing import Any, NamedTuple

from .lift import lift
from .ops import decompositions as _dec
from .ops import linalg as _lin
from .tensor import Tensor


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class EigResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


class LstsqResult(NamedTuple):
    solution: Tensor
    residuals: Tensor
    rank: Tensor
    singular_values: Tensor


def _named(result_type: type, fn: Any) -> Any:
    lifted = lift(fn)

    def public(*args: Any, **kwargs: Any) -> Any:
        out = lifted(*args, **kwargs)
        return result_type(*out) if isinstance(out, tuple) else out
    public.__name__ = public.__qualname__ = fn.__name__
    public.__doc__ = fn.__doc__
    public.__wrapped_op__ = fn
    public.__signature__ = inspect.signature(fn)     # qr(x, mode=), svd(x, full_matrices=)
    return public


for _name in _lin.LINALG:
    globals()[_name] = lift(getattr(_lin, _name))
for _name in _dec.DECOMPOSITIONS:
    globals()[_name] = lift(getattr(_dec, _name))

eig = _named(EigResult, _dec.eig)
eigh = _named(EighResult, _dec.eigh)
svd = _named(SVDResult, _dec.svd)
qr = _named(QRResult, _dec.qr)
slogdet = _named(SlogdetResult, _dec.slogdet)
lstsq = _named(LstsqResult, _dec.lstsq)

__all__ = sorted(set(_lin.LINALG) | set(_dec.DECOMPOSITIONS))
