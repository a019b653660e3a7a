"""`torch.linalg`: PyTorch's signatures over `lazyarray.linalg`."""
from __future__ import annotations

from typing import Any

from lazyarray import linalg as _linalg
from lazyarray import torch_methods as _tm

inv, det, solve, cholesky, eigh, qr, svd = (_linalg.inv, _linalg.det, _linalg.solve,
                                            _linalg.cholesky, _linalg.eigh, _linalg.qr,
                                            _linalg.svd)


def vector_norm(x: Any, ord: Any = 2, dim: Any = None, keepdim: bool = False, *,
                dtype: Any = None) -> Any:
    x = x if dtype is None else x.astype(dtype)
    axis = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    return _linalg.vector_norm(x, axis=axis, keepdims=keepdim, ord=ord)


def matrix_norm(A: Any, ord: Any = "fro", dim: Any = (-2, -1), keepdim: bool = False) -> Any:
    return _tm._matrix_norm(A, tuple(dim), keepdim, ord)


def norm(A: Any, ord: Any = None, dim: Any = None, keepdim: bool = False) -> Any:
    if dim is not None and not isinstance(dim, int) and len(dim) == 2:
        return matrix_norm(A, "fro" if ord is None else ord, dim, keepdim)
    if ord is not None and dim is None and A.ndim == 2:
        return matrix_norm(A, ord, (-2, -1), keepdim)
    return vector_norm(A, 2 if ord is None else ord, dim, keepdim)
