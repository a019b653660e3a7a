"""`lazyarray.torch`: PyTorch's names with PyTorch's meaning, over lazyarray's ops.

    import lazyarray.torch as torch
    import lazyarray.torch.nn as nn
    import lazyarray.torch.nn.functional as F

    values, indices = torch.max(logits, 1)        # positional dim: the pair, as in PyTorch
    torch.triu(m, diagonal=1); torch.equal(a, b)  # -> one bool

A thin convention layer: every function here calls the public `lazyarray` functions (no
second implementation), so recording stays what it is there. `lazyarray` itself stays the
array API namespace (NumPy's meaning). A name that cannot mean what PyTorch means raises
and says what differs. Tensors are `lazyarray.Tensor`, whose methods already follow
PyTorch where the array API has no method (`lazyarray/torch_methods.py`).
"""
from __future__ import annotations

import builtins
from collections import namedtuple
from typing import Any

import numpy as np

import lazyarray as _la
from lazyarray import api as _api
from lazyarray import ops as _ops
from lazyarray.compiler.hlo import dtypes as _D
from lazyarray.conventions import ValuesIndices
from lazyarray.creation import shape_args as _shape_args
from lazyarray.lift import lift as _lift
from lazyarray.tensor import Size, Tensor
from lazyarray import torch_methods as _tm

from .device import device
from .missing import missing as _missing
from .dtypes import (bfloat16, bool, cdouble, cfloat, complex64, complex128, double, dtype,  # noqa: A004
                     float, float16, float32, float64, half, int, int8, int16, int32, int64,
                     long, short, uint8, uint16, uint32, uint64, get_default_dtype,
                     set_default_dtype, is_floating_point, is_complex)
from .creation import (tensor, as_tensor, from_numpy, zeros, ones, empty, full, zeros_like,
                       ones_like, empty_like, full_like, rand, randn, randint, rand_like,
                       randn_like, randint_like, randperm, arange, linspace, eye, normal,
                       bernoulli, multinomial, manual_seed, seed, initial_seed)

_builtin_bool, _builtin_int, _builtin_float = builtins.bool, builtins.int, builtins.float

# ---- the same meaning as lazyarray's (dim is the second positional argument) -----------------

no_grad, enable_grad, set_grad_enabled = _la.no_grad, _la.enable_grad, _la.set_grad_enabled
inference_mode, is_grad_enabled = _la.inference_mode, _la.is_grad_enabled
save, load = _la.save, _la.load

abs, absolute = _la.abs, _la.abs
exp, expm1, log, log2, log10, log1p = _la.exp, _la.expm1, _la.log, _la.log2, _la.log10, _la.log1p
sqrt, rsqrt, square = _la.sqrt, _la.rsqrt, _la.square
sin, cos, tan, asin, acos, atan = _la.sin, _la.cos, _la.tan, _la.asin, _la.acos, _la.atan
arcsin, arccos, arctan = asin, acos, atan
sinh, cosh, tanh, asinh, acosh, atanh = _la.sinh, _la.cosh, _la.tanh, _la.asinh, _la.acosh, _la.atanh
sigmoid, relu, erf = _la.sigmoid, _la.relu, _la.erf
floor, ceil, trunc, sign, neg, negative = (_la.floor, _la.ceil, _la.trunc, _la.sign,
                                           _la.negative, _la.negative)
reciprocal, signbit = _la.reciprocal, _la.signbit
atan2, arctan2, hypot, logaddexp = _la.atan2, _la.atan2, _la.hypot, _la.logaddexp
maximum, minimum, pow, remainder = _la.maximum, _la.minimum, _la.pow, _la.remainder
mul, multiply, true_divide = _la.multiply, _la.multiply, _la.divide
eq, ne, lt, le, gt, ge = (_la.equal, _la.not_equal, _la.less, _la.less_equal, _la.greater,
                          _la.greater_equal)
greater, less, greater_equal, less_equal, not_equal = (_la.greater, _la.less,
                                                       _la.greater_equal, _la.less_equal,
                                                       _la.not_equal)
logical_and, logical_or, logical_not, logical_xor = (_la.logical_and, _la.logical_or,
                                                     _la.logical_not, _la.logical_xor)
bitwise_and, bitwise_or, bitwise_xor, bitwise_not = (_la.bitwise_and, _la.bitwise_or,
                                                     _la.bitwise_xor, _la.bitwise_invert)
isnan, isinf, isfinite = _la.isnan, _la.isinf, _la.isfinite
real, imag, conj, angle = _la.real, _la.imag, _la.conj, _la.angle
where, clamp, clip = _la.where, _la.clip, _la.clip
matmul, outer, einsum, tensordot = _la.matmul, _la.outer, _la.einsum, _la.tensordot
sum, mean = _la.sum, _la.mean
argmax, argmin, all, any = _la.argmax, _la.argmin, _la.all, _la.any
count_nonzero = _la.count_nonzero
numel, flatten, unbind = _la.numel, _la.flatten, _la.unbind
softmax, log_softmax = _la.softmax, _la.log_softmax
topk, multinomial = _la.topk, multinomial


# ---- PyTorch's signatures over the same ops --------------------------------------------------

def is_tensor(obj: Any) -> _builtin_bool:
    return isinstance(obj, Tensor)


def _t(x: Any) -> Tensor:
    return x if type(x) is Tensor else _la.asarray(x)


def add(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    """input + alpha * other."""
    return _la.add(input, other if alpha == 1 else other * alpha)


def sub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    return _la.subtract(input, other if alpha == 1 else other * alpha)


subtract = sub


def div(input: Any, other: Any, *, rounding_mode: Any = None) -> Tensor:
    """True division; rounding_mode "floor" (floor_divide) or "trunc" (toward zero)."""
    if rounding_mode is None:
        return _la.divide(input, other)
    if rounding_mode == "floor":
        return _la.floor_divide(input, other)
    if rounding_mode == "trunc":
        q = _la.divide(input, other)
        dt = _la.result_type(input, other)
        q = _la.trunc(q)
        return q if _D.to_dtype(dt).is_float else q.astype(dt)
    raise ValueError(f"div: rounding_mode must be None, 'floor' or 'trunc', got {rounding_mode!r}")


divide = div


def fmod(input: Any, other: Any) -> Tensor:
    """The remainder with the sign of the dividend (C's fmod), not Python's %."""
    x = _t(input)
    q = _la.divide(x, other)
    if x.dtype.is_float:
        return x - _la.trunc(q) * other
    return (x - _la.trunc(q).astype(x.dtype) * other).astype(x.dtype)


def rsub(input: Any, other: Any, *, alpha: Any = 1) -> Tensor:
    return _la.subtract(other, input if alpha == 1 else input * alpha)


def lerp(input: Any, end: Any, weight: Any) -> Tensor:
    return input + weight * (end - input)


def frac(input: Any) -> Tensor:
    return input - _la.trunc(input)


def round(input: Any, *, decimals: _builtin_int = 0) -> Tensor:
    """Round half to even (PyTorch's and NumPy's), to `decimals` places."""
    if decimals == 0:
        return _la.round(input)
    scale = 10.0 ** decimals
    return _la.round(input * scale) / scale


def max(input: Any, dim: Any = None, keepdim: _builtin_bool = False, *, out: Any = None) -> Any:
    """max(x): the largest value; max(x, dim, keepdim=False): (values, indices) along dim;
    max(x, other): the elementwise maximum."""
    return _extreme("max", input, dim, keepdim, out)


def min(input: Any, dim: Any = None, keepdim: _builtin_bool = False, *, out: Any = None) -> Any:
    """min(x), min(x, dim) -> (values, indices), min(x, other) (elementwise)."""
    return _extreme("min", input, dim, keepdim, out)


def _extreme(name: str, x: Any, dim: Any, keepdim: Any, out: Any) -> Any:
    if out is not None:
        raise TypeError(f"{name}: out= is not supported (tensors are values here; assign "
                        "the result)")
    if isinstance(dim, Tensor):
        return (_la.maximum if name == "max" else _la.minimum)(x, dim)
    if dim is None:
        return getattr(_la, name)(x)
    return getattr(_api, name)(x, dim=dim, keepdim=keepdim)


def amax(input: Any, dim: Any = (), keepdim: _builtin_bool = False) -> Tensor:
    """The maximum over `dim` (all dims when empty): values only."""
    return _la.max(input, axis=_dims(dim), keepdims=keepdim)


def amin(input: Any, dim: Any = (), keepdim: _builtin_bool = False) -> Tensor:
    return _la.min(input, axis=_dims(dim), keepdims=keepdim)


def _dims(dim: Any) -> Any:
    if dim is None or (isinstance(dim, (tuple, list)) and not dim):
        return None
    return tuple(dim) if isinstance(dim, (tuple, list)) else dim


_MinMax = namedtuple("aminmax", ["min", "max"])


def aminmax(input: Any, *, dim: Any = None, keepdim: _builtin_bool = False) -> tuple:
    return _MinMax(amin(input, dim if dim is not None else (), keepdim),
                amax(input, dim if dim is not None else (), keepdim))


def var(input: Any, dim: Any = None, unbiased: Any = None, keepdim: _builtin_bool = False, *,
        correction: Any = None) -> Tensor:
    """Unbiased (correction=1) by default, as PyTorch's."""
    return _t(input).var(dim, unbiased, keepdim, correction=correction) \
        if correction is not None else _t(input).var(dim, unbiased, keepdim)


def std(input: Any, dim: Any = None, unbiased: Any = None, keepdim: _builtin_bool = False, *,
        correction: Any = None) -> Tensor:
    return _t(input).std(dim, unbiased, keepdim, correction=correction) \
        if correction is not None else _t(input).std(dim, unbiased, keepdim)


def var_mean(input: Any, dim: Any = None, unbiased: Any = None, keepdim: _builtin_bool = False,
             *, correction: Any = None) -> tuple:
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


def std_mean(input: Any, dim: Any = None, unbiased: Any = None, keepdim: _builtin_bool = False,
             *, correction: Any = None) -> tuple:
    return (std(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


def logsumexp(input: Any, dim: Any, keepdim: _builtin_bool = False) -> Tensor:
    """log(sum(exp(x))) over dim (one int or several), computed from the maximum."""
    x = _t(input)
    axes = _dims(dim)
    m = _la.max(x, axis=axes, keepdims=True)
    m = _la.where(_la.isfinite(m), m, _la.zeros((), dtype=m.dtype, device=m.device))
    out = _la.log(_la.sum(_la.exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdim else _la.squeeze(out, axes if isinstance(axes, tuple) else (axes,)) \
        if axes is not None else _la.reshape(out, ())


def prod(input: Any, dim: Any = None, keepdim: _builtin_bool = False, *,
         dtype: Any = None) -> Tensor:
    """The product over one dim (PyTorch's prod takes an int dim, not several)."""
    if dim is not None and not isinstance(dim, (_builtin_int, np.integer)):
        raise TypeError(f"prod: dim must be one int (PyTorch's prod), got {dim!r}")
    return _la.prod(input, axis=dim, keepdims=keepdim, dtype=dtype)


def sort(input: Any, dim: _builtin_int = -1, descending: _builtin_bool = False,
         stable: _builtin_bool = False) -> ValuesIndices:
    """(values, indices) along dim (always stable)."""
    return _tm.sort(_t(input), dim, descending, stable)


def argsort(input: Any, dim: _builtin_int = -1, descending: _builtin_bool = False,
            stable: _builtin_bool = False) -> Tensor:
    return _la.argsort(input, axis=dim, descending=descending, stable=True)


def kthvalue(input: Any, k: _builtin_int, dim: _builtin_int = -1,
             keepdim: _builtin_bool = False) -> ValuesIndices:
    return _tm.kthvalue(_t(input), k, dim, keepdim)


def median(input: Any, dim: Any = None, keepdim: _builtin_bool = False) -> Any:
    """The lower median (never a mean of two); with dim the pair (values, indices)."""
    return _tm.median(_t(input), dim, keepdim)


def mode(input: Any, dim: _builtin_int = -1, keepdim: _builtin_bool = False) -> ValuesIndices:
    return _tm.mode(_t(input), dim, keepdim)


def unique(input: Any, sorted: _builtin_bool = True, return_inverse: _builtin_bool = False,
           return_counts: _builtin_bool = False, dim: Any = None) -> Any:
    return _tm.unique(_t(input), sorted, return_inverse, return_counts, dim)


def cumsum(input: Any, dim: _builtin_int, *, dtype: Any = None) -> Tensor:
    return _la.cumulative_sum(input, axis=dim, dtype=dtype)


def cumprod(input: Any, dim: _builtin_int, *, dtype: Any = None) -> Tensor:
    return _la.cumulative_prod(input, axis=dim, dtype=dtype)


def triu(input: Any, diagonal: _builtin_int = 0) -> Tensor:
    return _la.triu(input, k=diagonal)


def tril(input: Any, diagonal: _builtin_int = 0) -> Tensor:
    return _la.tril(input, k=diagonal)


def equal(input: Any, other: Any) -> _builtin_bool:
    """True when both have the same shape and the same values (one Python bool: a sync)."""
    a, b = _t(input), _t(other)
    if tuple(a.shape) != tuple(b.shape):
        return False
    return _builtin_bool(_la.all(_la.equal(a, b)).item())


def isclose(input: Any, other: Any, rtol: _builtin_float = 1e-05, atol: _builtin_float = 1e-08,
            equal_nan: _builtin_bool = False) -> Tensor:
    """|input - other| <= atol + rtol * |other|, elementwise (infinities equal to
    themselves; NaN equal to NaN only with equal_nan)."""
    a, b = _t(input), _t(other)
    if a.dtype.is_float or b.dtype.is_float:
        dt = _la.result_type(a, b)
        a, b = a.astype(dt), b.astype(dt)
        close = _la.abs(a - b) <= atol + rtol * _la.abs(b)
        close = close | (a == b)
        if equal_nan:
            close = close | (_la.isnan(a) & _la.isnan(b))
        return close
    return _la.abs(a - b) <= atol + rtol * _la.abs(b)


def allclose(input: Any, other: Any, rtol: _builtin_float = 1e-05, atol: _builtin_float = 1e-08,
             equal_nan: _builtin_bool = False) -> _builtin_bool:
    """isclose everywhere (shapes broadcast): one Python bool (a sync)."""
    return _builtin_bool(_la.all(isclose(input, other, rtol, atol, equal_nan)).item())


def _product(name: str, x: Any, y: Any, fits: Any, needs: str) -> Tensor:
    """matmul of two tensors whose shapes `fits` accepts (PyTorch's fixed-rank products do
    not broadcast), else a ValueError saying what `name` needs."""
    a, b = _t(x), _t(y)
    if not fits(a.shape, b.shape):
        raise ValueError(f"{name}: needs {needs}, got {tuple(a.shape)} and {tuple(b.shape)}")
    return _la.matmul(a, b)


def bmm(input: Any, mat2: Any) -> Tensor:
    """Batched matrix product of (b, n, m) and (b, m, p): no broadcasting (PyTorch's)."""
    return _product("bmm", input, mat2, lambda a, b: len(a) == len(b) == 3 and a[0] == b[0]
                    and a[2] == b[1], "(b, n, m) and (b, m, p) (matmul broadcasts)")


def mm(input: Any, mat2: Any) -> Tensor:
    return _product("mm", input, mat2, lambda a, b: len(a) == len(b) == 2, "two matrices")


def mv(input: Any, vec: Any) -> Tensor:
    return _product("mv", input, vec, lambda a, b: len(a) == 2 and len(b) == 1,
                    "a matrix and a vector")


def dot(input: Any, other: Any) -> Tensor:
    return _product("dot", input, other, lambda a, b: len(a) == len(b) == 1,
                    "two 1-D tensors")


def addmm(input: Any, mat1: Any, mat2: Any, *, beta: Any = 1, alpha: Any = 1) -> Tensor:
    return beta * input + alpha * mm(mat1, mat2)


def cat(tensors: Any, dim: _builtin_int = 0) -> Tensor:
    return _la.concat(list(tensors), axis=dim)


concat = concatenate = cat


def stack(tensors: Any, dim: _builtin_int = 0) -> Tensor:
    return _la.stack(list(tensors), axis=dim)


def hstack(tensors: Any) -> Tensor:
    ts = [_t(x) for x in tensors]
    return cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors: Any) -> Tensor:
    return cat([_t(x).reshape(1, -1) if _t(x).ndim == 1 else _t(x) for x in tensors], 0)


def split(tensor: Any, split_size_or_sections: Any, dim: _builtin_int = 0) -> tuple:
    """Parts of `split_size` along dim (the last may be shorter), or of the given sizes
    (PyTorch's; lazyarray.split is NumPy's)."""
    return _tm.split(_t(tensor), split_size_or_sections, dim)


def chunk(input: Any, chunks: _builtin_int, dim: _builtin_int = 0) -> tuple:
    return _la.chunk(input, chunks, axis=dim)


def tensor_split(input: Any, indices_or_sections: Any, dim: _builtin_int = 0) -> tuple:
    """Parts as NumPy's array_split makes them: n parts as even as can be, or cut at the
    indices."""
    x = _t(input)
    if isinstance(indices_or_sections, (_builtin_int, np.integer)):
        n, k = x.shape[dim], _builtin_int(indices_or_sections)
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        return _tm.split(x, sizes, dim)
    return _la.split(x, list(indices_or_sections), axis=dim)


def reshape(input: Any, shape: Any) -> Tensor:
    return _la.reshape(input, tuple(shape))


def squeeze(input: Any, dim: Any = None) -> Tensor:
    """Without dim: every size-1 dim removed; with dim: that dim if its size is 1 (a
    dim of another size stays, as in PyTorch)."""
    x = _t(input)
    if dim is None:
        return _la.squeeze(x, tuple(i for i, n in enumerate(x.shape) if n == 1))
    dims = (dim,) if isinstance(dim, _builtin_int) else tuple(dim)
    keep = tuple(d % x.ndim for d in dims if x.shape[d] == 1) if x.ndim else ()
    return _la.squeeze(x, keep) if keep else x


def unsqueeze(input: Any, dim: _builtin_int) -> Tensor:
    return _la.expand_dims(input, axis=dim)


def transpose(input: Any, dim0: _builtin_int, dim1: _builtin_int) -> Tensor:
    return _t(input).transpose(dim0, dim1)


swapaxes = swapdims = transpose


def t(input: Any) -> Tensor:
    return _t(input).t()


def permute(input: Any, dims: Any) -> Tensor:
    return _la.permute_dims(input, tuple(dims))


def movedim(input: Any, source: Any, destination: Any) -> Tensor:
    return _la.moveaxis(input, source, destination)


moveaxis = movedim


def flip(input: Any, dims: Any) -> Tensor:
    return _la.flip(input, axis=tuple(dims) if isinstance(dims, (list, tuple)) else dims)


def roll(input: Any, shifts: Any, dims: Any = None) -> Tensor:
    return _la.roll(input, shifts, axis=dims)


def gather(input: Any, dim: _builtin_int, index: Any) -> Tensor:
    return _tm.gather(_t(input), dim, index)


def index_select(input: Any, dim: _builtin_int, index: Any) -> Tensor:
    return _la.take(input, index, axis=dim)


def narrow(input: Any, dim: _builtin_int, start: _builtin_int, length: _builtin_int) -> Tensor:
    return _tm.narrow(_t(input), dim, start, length)


def masked_fill(input: Any, mask: Any, value: Any) -> Tensor:
    return _t(input).masked_fill(mask, value)


def repeat_interleave(input: Any, repeats: Any, dim: Any = None) -> Tensor:
    return _la.repeat(input, repeats, axis=dim)


def tile(input: Any, dims: Any) -> Tensor:
    return _la.tile(input, tuple(dims))


def broadcast_to(input: Any, size: Any) -> Tensor:
    return _la.broadcast_to(input, tuple(size))


def broadcast_tensors(*tensors: Any) -> tuple:
    return tuple(_la.broadcast_arrays(*tensors))


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple:
    """PyTorch's default indexing is "ij" (NumPy's is "xy")."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    return tuple(_la.meshgrid(*tensors, indexing=indexing))


def diagonal(input: Any, offset: _builtin_int = 0, dim1: _builtin_int = 0,
             dim2: _builtin_int = 1) -> Tensor:
    x = _la.moveaxis(input, (dim1, dim2), (-2, -1))
    return _la.diagonal(x, offset=offset)


def diag(input: Any, diagonal: _builtin_int = 0) -> Tensor:
    """A 1-D input: the matrix with it on the diagonal; a matrix: its diagonal."""
    x = _t(input)
    if x.ndim == 1:
        k = builtins.abs(diagonal)
        n = x.shape[0] + k
        on = _la.eye(n, k=diagonal, dtype=_la.bool, device=x.device)
        vals = _la.concat([x, _la.zeros((k,), dtype=x.dtype, device=x.device)])
        # row i holds x[i] above the diagonal, column j holds x[j] below it
        return _la.where(on, vals[:, None] if diagonal >= 0 else vals[None, :],
                         _la.zeros((), dtype=x.dtype, device=x.device))
    if x.ndim == 2:
        return _la.diagonal(x, offset=diagonal)
    raise ValueError(f"diag: needs a 1-D or 2-D tensor, got {x.ndim} dims")


def trace(input: Any) -> Tensor:
    return _la.trace(input)


def norm(input: Any, p: Any = "fro", dim: Any = None, keepdim: _builtin_bool = False,
         dtype: Any = None) -> Tensor:
    return _tm.norm(_t(input), p, dim, keepdim, dtype)


def dist(input: Any, other: Any, p: Any = 2) -> Tensor:
    return _tm.norm(_t(input) - other, p)


def cdist(x1: Any, x2: Any, p: _builtin_float = 2.0) -> Tensor:
    """Pairwise p-norm distances between the rows of x1 (.., P, M) and x2 (.., R, M)."""
    d = _la.expand_dims(x1, -2) - _la.expand_dims(x2, -3)
    return _la.linalg.vector_norm(d, axis=-1, ord=p)


def cross(input: Any, other: Any, dim: Any = None) -> Tensor:
    return _la.cross(input, other, axis=-1 if dim is None else dim)


def diff(input: Any, n: _builtin_int = 1, dim: _builtin_int = -1, prepend: Any = None,
         append: Any = None) -> Tensor:
    return _la.diff(input, axis=dim, n=n, prepend=prepend, append=append)


def searchsorted(sorted_sequence: Any, input: Any, *, right: _builtin_bool = False,
                 side: Any = None) -> Tensor:
    return _la.searchsorted(sorted_sequence, input,
                            side=side if side is not None else ("right" if right else "left"))


def bincount(input: Any, weights: Any = None, minlength: _builtin_int = 0) -> Tensor:
    """Counts of each value of a 1-D non-negative int tensor: its length depends on the
    largest value (read on the host: a graph break)."""
    x = _t(input)
    top = _builtin_int(_la.max(x).item()) + 1 if x.shape[0] else 0
    n = builtins.max(top, minlength)
    hits = (_la.expand_dims(x, -1) == _la.arange(n, device=x.device))
    if weights is None:
        return _la.sum(hits.astype(_la.int64), axis=0)
    w = _t(weights)
    return _la.sum(hits.astype(w.dtype) * _la.expand_dims(w, -1), axis=0)


def nan_to_num(input: Any, nan: _builtin_float = 0.0, posinf: Any = None,
               neginf: Any = None) -> Tensor:
    x = _t(input)
    fi = _la.finfo(x.dtype)
    x = _la.where(_la.isnan(x), nan, x)
    x = _la.where(x == np.inf, fi.max if posinf is None else posinf, x)
    return _la.where(x == -np.inf, fi.min if neginf is None else neginf, x)


def clamp_min(input: Any, min: Any) -> Tensor:
    return _la.clip(input, min, None)


def clamp_max(input: Any, max: Any) -> Tensor:
    return _la.clip(input, None, max)


def heaviside(input: Any, values: Any) -> Tensor:
    x = _t(input)
    return _la.where(x == 0, values, (x > 0).astype(x.dtype))


def kron(input: Any, other: Any) -> Tensor:
    a, b = _t(input), _t(other)
    out = _la.expand_dims(_la.expand_dims(a, -1), 1) * b[None, :, None, :] \
        if a.ndim == 2 and b.ndim == 2 else None
    if out is None:
        raise ValueError("kron: lazyarray.torch.kron takes two matrices")
    return out.reshape(a.shape[0] * b.shape[0], a.shape[1] * b.shape[1])


def inner(input: Any, other: Any) -> Tensor:
    return _la.tensordot(input, other, axes=([-1], [-1]))


# ---- where lazyarray cannot mean what PyTorch means -----------------------------------------

def compile(model: Any = None, **kwargs: Any) -> Any:
    """Every lazyarray program is already traced, fused and compiled: torch.compile gives
    the model (or function) back unchanged."""
    if model is None:
        return lambda m: m
    return model


def set_num_threads(n: _builtin_int) -> None:
    """The CPU pool's threads for the programs run from now on (la.config.num_threads,
    LAZYARRAY_NUM_THREADS), as torch.set_num_threads sets intra-op threads."""
    if not isinstance(n, _builtin_int) or isinstance(n, builtins.bool) or n < 1:
        raise ValueError(f"set_num_threads: expected a positive int, got {n!r}")
    _la.config.num_threads = n


def get_num_threads() -> _builtin_int:
    """The CPU pool's threads (all cores while la.config.num_threads is 0)."""
    import os
    return _la.config.num_threads or os.cpu_count() or 1


class _Cuda:
    """torch.cuda's questions, answered for lazyarray's CUDA device."""

    @staticmethod
    def is_available() -> _builtin_bool:
        try:
            _la.device("cuda")
        except Exception:
            return False
        return True

    @staticmethod
    def device_count() -> _builtin_int:
        return 1 if _Cuda.is_available() else 0

    @staticmethod
    def manual_seed(value: _builtin_int) -> None:
        manual_seed(value)

    manual_seed_all = manual_seed

    @staticmethod
    def synchronize(device: Any = None) -> None:
        _la.sync()


cuda = _Cuda()


class _Backends:
    class mps:
        @staticmethod
        def is_available() -> _builtin_bool:
            return False


backends = _Backends()

def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    raise _missing("lazyarray.torch", name)


from . import nn, optim, utils, autograd  # noqa: E402,F401  (they import the names above)
from . import fft, linalg  # noqa: E402,F401

__all__ = sorted(n for n in globals() if not n.startswith("_") and n not in (
    "annotations", "builtins", "np", "Any", "creation", "dtypes", "missing", "namedtuple"))
