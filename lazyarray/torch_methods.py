"""Tensor methods in PyTorch's meaning (a method the array API does not define is
PyTorch's): `x.max(1)` is the pair (values, indices), `x.var()` is unbiased, `x.sort()`
gives values and indices, `x.split(2)` cuts parts of size 2, `x.t()`, `x.norm()`,
`x.is_leaf`, `x.real`, `x.data`, `x.add_(g, alpha=-lr)`, `x.normal_()`...

NumPy's keywords keep NumPy's meaning (`x.max(axis=1)` is the values, `x.var(axis=0)`
divides by n), as `lazyarray/conventions.py` has it. Installed on the class by
`methods.install()`; every method is a few lines over the public functions.
"""
from __future__ import annotations

import math
from typing import Any

from . import api, backward, ops
from . import random as _random
from .compiler.transforms import autodiff
from .compiler.hlo import dtypes as D
from .conventions import ValuesIndices
from .creation import shape_args
from .graph_break import torch_unique
from .lift import lift
from .tensor import Tensor

_wrap = Tensor._wrap
_UNSET = object()
_split_sizes = lift(ops.manipulation.split_sizes)
_kthvalue, _median = lift(ops.sorting.kthvalue), lift(ops.sorting.median_low)
_mode = lift(ops.sorting.mode)


def _extreme(name: str) -> Any:
    """`x.max()`: the value; `x.max(1)`, `x.max(dim=1)`, `x.max(1, True)`: the pair
    (values, indices) (PyTorch); `x.max(axis=1)`: the values (NumPy); `x.max(other)`: the
    elementwise maximum (PyTorch)."""
    plain = getattr(Tensor, name)            # the conventions' method: axis= / dim= rules
    elementwise = api.maximum if name == "max" else api.minimum

    def reduce(self: Tensor, dim: Any = _UNSET, keepdim: Any = _UNSET, **kw: Any) -> Any:
        if dim is _UNSET and keepdim is _UNSET:
            return plain(self, **kw) if kw else plain(self)      # x.max(): the value
        if type(dim) is Tensor:
            return elementwise(self, dim)
        if "axis" in kw:
            raise TypeError(f"{name}: got both a dim and axis=")
        kw["dim"] = kw.get("dim") if dim is _UNSET else dim
        kw["keepdim"] = False if keepdim is _UNSET else keepdim
        return plain(self, **kw)
    reduce.__name__, reduce.__doc__ = name, _extreme.__doc__
    return reduce


def _spread(name: str) -> Any:
    """`x.var()`, `x.var(1)`, `x.var(dim=1)`: unbiased (PyTorch); `x.var(axis=1)`: NumPy's
    (divides by n); `correction=`/`unbiased=` say otherwise. `x.var(1, False)`: PyTorch's
    old (dim, unbiased) order."""
    public = getattr(api, name)

    def reduce(self: Tensor, dim: Any = _UNSET, unbiased: Any = None, keepdim: Any = False,
               **kw: Any) -> Tensor:
        if "axis" in kw or "keepdims" in kw:          # NumPy's keywords: NumPy's meaning
            if dim is not _UNSET:
                raise TypeError(f"{name}: got both a dim and axis=")
            return public(self, unbiased=unbiased, **kw)
        if isinstance(dim, bool) and unbiased is None:    # x.var(False): (unbiased)
            dim, unbiased = _UNSET, dim
        d = kw.pop("dim", None) if dim is _UNSET else dim
        return public(self, dim=d, keepdim=bool(kw.pop("keepdim", keepdim)),
                      unbiased=unbiased, **kw)
    reduce.__name__, reduce.__doc__ = name, _spread.__doc__
    return reduce


def sort(self: Tensor, dim: Any = _UNSET, descending: bool = False, stable: bool = False, *,
         axis: Any = _UNSET) -> Any:
    """(values, indices) along `dim` (PyTorch; always stable); `axis=`: the sorted values
    (NumPy's keyword)."""
    if axis is not _UNSET:
        if dim is not _UNSET:
            raise TypeError("sort: got both a dim and axis=")
        return api.sort(self, axis=axis, descending=descending)
    return api.sort(self, dim=-1 if dim is _UNSET else dim, descending=descending)


def argsort(self: Tensor, dim: Any = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return api.argsort(self, axis=dim, descending=descending, stable=True)


def t(self: Tensor) -> Tensor:
    """The transpose of a matrix (a 0-d or 1-d tensor is itself), as PyTorch's t()."""
    if self.ndim > 2:
        raise ValueError(f"t(): expects a tensor of at most 2 dims, got {self.ndim} "
                         f"(shape {tuple(self.shape)}); use transpose(dim0, dim1) or .mT")
    return self if self.ndim < 2 else api.permute_dims(self, (1, 0))


def norm(self: Tensor, p: Any = "fro", dim: Any = None, keepdim: bool = False,
         dtype: Any = None) -> Tensor:
    """PyTorch's norm: the 2-norm of all elements by default ("fro" is the same over any
    dims), `p` a number for the vector p-norm over `dim`, "nuc" over two dims."""
    x = self if dtype is None else self.astype(dtype)
    if p == "nuc":
        if dim is None and x.ndim != 2:
            raise ValueError("norm(p='nuc'): needs a matrix or two dims")
        axes = (-2, -1) if dim is None else tuple(dim)
        return _matrix_norm(x, axes, keepdim, "nuc")
    if p == "fro" or p is None:
        p = 2
    if isinstance(p, str):
        raise ValueError(f"norm: p={p!r} is not a norm PyTorch's Tensor.norm takes "
                         "('fro', 'nuc' or a number)")
    axis = tuple(dim) if isinstance(dim, (list, tuple)) else dim
    return api.linalg.vector_norm(x, axis=axis, keepdims=keepdim, ord=p)


def _matrix_norm(x: Tensor, dims: tuple, keepdim: bool, ord: Any) -> Tensor:
    """The matrix norm over two dims (lazyarray's matrix_norm takes the last two)."""
    d = tuple(a % x.ndim for a in dims)
    out = api.linalg.matrix_norm(api.moveaxis(x, d, (-2, -1)), keepdims=keepdim, ord=ord)
    return api.moveaxis(out, (-2, -1), d) if keepdim else out


def _is_leaf(self: Tensor) -> bool:
    """True for a tensor that requires grad by itself (made with requires_grad=True, a
    Parameter) or that no gradient reaches (PyTorch's leaves)."""
    return backward.requires_grad(self) or not _derived(self)


def _derived(t: Tensor) -> bool:
    """Is t computed from a tensor that requires grad (under grad mode)? A walk back over
    t's pending graph, only when asked."""
    sources = [s._node for s in backward.trainable() if s._state is t._state and s is not t]
    return bool(sources) and t.dtype.is_inexact and autodiff.reaches(t._node, sources)


def _get_requires_grad(self: Tensor) -> bool:
    """PyTorch's: set on a leaf, or true of a tensor computed from one (with grad on)."""
    return backward.requires_grad(self) or (backward.is_grad_enabled() and _derived(self))


def split(self: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple:
    """PyTorch's split: parts of `split_size` along `dim` (the last may be shorter), or of
    the given sizes. (`lazyarray.split` is NumPy's: sections or indices.)"""
    return _split_sizes(self, split_size_or_sections, axis=dim)


def chunk(self: Tensor, chunks: int, dim: int = 0) -> tuple:
    return api.chunk(self, chunks, axis=dim)


def unbind(self: Tensor, dim: int = 0) -> tuple:
    return api.unbind(self, dim)


def topk(self: Tensor, k: int, dim: int = -1, largest: bool = True,
         sorted: bool = True) -> ValuesIndices:
    return api.topk(self, k, axis=dim, largest=largest, sorted=sorted)


def kthvalue(self: Tensor, k: int, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    return ValuesIndices(*_kthvalue(self, k, axis=dim, keepdims=keepdim))


def median(self: Tensor, dim: Any = None, keepdim: bool = False) -> Any:
    """PyTorch's median: the lower of the two middle values (never their mean); with a dim
    the pair (values, indices)."""
    if dim is None:
        return ValuesIndices(*_median(api.reshape(self, (-1,)), axis=0)).values
    return ValuesIndices(*_median(self, axis=dim, keepdims=keepdim))


def mode(self: Tensor, dim: int = -1, keepdim: bool = False) -> ValuesIndices:
    return ValuesIndices(*_mode(self, axis=dim, keepdims=keepdim))


def unique(self: Tensor, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: Any = None) -> Any:
    return torch_unique(self, sorted, return_inverse, return_counts, dim)


def _real(self: Tensor) -> Tensor:
    return api.real(self)


def _imag(self: Tensor) -> Tensor:
    return api.imag(self)


def _get_data(self: Tensor) -> Tensor:
    """PyTorch's `.data`: the tensor's value; here the tensor itself, so `p.data.mul_(s)`
    and `p.data.normal_()` update p, as in PyTorch."""
    return self


def _set_data(self: Tensor, value: Any) -> None:
    value = value if type(value) is Tensor else api.asarray(value, device=self._state)
    self._assign(value._node)


def _with_alpha(op: Any, name: str) -> Any:
    """`x.add(y, alpha=a)`: x + a * y (PyTorch's alpha); no alpha keeps the plain method."""
    plain = getattr(Tensor, name)

    def call(self: Tensor, other: Any, *, alpha: Any = None) -> Tensor:
        if alpha is None:
            return plain(self, other)
        return op(self, other * alpha)
    call.__name__ = name
    return call


def _with_alpha_(op: Any, name: str) -> Any:
    def update(self: Tensor, other: Any, *, alpha: Any = None) -> Tensor:
        self._assign(op(self, other if alpha is None else other * alpha)._node)
        return self
    update.__name__ = name
    return update


def addcmul_(self: Tensor, t1: Any, t2: Any, *, value: Any = 1) -> Tensor:
    self._assign((self + value * t1 * t2)._node)
    return self


def addcdiv_(self: Tensor, t1: Any, t2: Any, *, value: Any = 1) -> Tensor:
    self._assign((self + value * t1 / t2)._node)
    return self


def lerp_(self: Tensor, end: Any, weight: Any) -> Tensor:
    self._assign((self + weight * (end - self))._node)
    return self


def masked_fill_(self: Tensor, mask: Any, value: Any) -> Tensor:
    self._assign(self.masked_fill(mask, value)._node)
    return self


def normal_(self: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    self._assign(_random.normal(self.shape, mean, std, dtype=self.dtype,
                                device=self._state)._node)
    return self


def uniform_(self: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    self._assign(_random.uniform(self.shape, a, b, dtype=self.dtype, device=self._state)._node)
    return self


def repeat(self: Tensor, *sizes: Any) -> Tensor:
    """PyTorch's repeat: the tensor tiled `sizes` times (NumPy's tile, not its repeat)."""
    sizes = shape_args(sizes)
    if len(sizes) < self.ndim:
        raise ValueError(f"repeat: {len(sizes)} repeat counts for a tensor of {self.ndim} "
                         "dims (PyTorch needs at least one per dim)")
    return api.tile(self, sizes)


def gather(self: Tensor, dim: int, index: Any) -> Tensor:
    """out[i][j] = self[index[i][j]][j] for dim 0 (PyTorch's gather): index has self's
    rank and is no larger than self outside `dim`."""
    index = index if type(index) is Tensor else api.asarray(index, device=self._state)
    if index.ndim != self.ndim:
        raise ValueError(f"gather: index of {index.ndim} dims for a tensor of {self.ndim}")
    d = dim % max(self.ndim, 1)
    key = tuple(slice(None) if i == d else slice(0, n) for i, n in enumerate(index.shape))
    return api.take_along_axis(self[key], index, axis=d)


def index_select(self: Tensor, dim: int, index: Any) -> Tensor:
    return api.take(self, index, axis=dim)


def narrow(self: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = dim % self.ndim
    return self[(slice(None),) * d + (slice(start, start + length),)]


_TYPE_NAMES = {D.float32: "Float", D.float64: "Double", D.float16: "Half",
               D.bfloat16: "BFloat16", D.int64: "Long", D.int32: "Int", D.int16: "Short",
               D.int8: "Char", D.uint8: "Byte", D.bool_: "Bool", D.complex64: "ComplexFloat",
               D.complex128: "ComplexDouble"}


def type_(self: Tensor, dtype: Any = None, non_blocking: bool = False) -> Any:
    """`x.type()`: PyTorch's type name ("torch.FloatTensor"); `x.type(dtype)`: x cast."""
    if dtype is None:
        name = _TYPE_NAMES.get(self.dtype)
        if name is None:
            raise TypeError(f"type(): PyTorch has no tensor type name for {self.dtype.name}")
        return f"torch.{name}Tensor"
    return self.astype(dtype)


def type_as(self: Tensor, other: Tensor) -> Tensor:
    return self.astype(other.dtype)


def _new(fill: Any) -> Any:
    def make(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
        shape = shape_args(size)
        out = api.full(shape, fill, dtype=dtype or self.dtype,
                       device=device if device is not None else self._state)
        return out.requires_grad_() if requires_grad else out
    return make


def new_full(self: Tensor, size: Any, fill_value: Any, *, dtype: Any = None,
             device: Any = None) -> Tensor:
    return api.full(tuple(size), fill_value, dtype=dtype or self.dtype,
                    device=device if device is not None else self._state)


def new_tensor(self: Tensor, data: Any, *, dtype: Any = None, device: Any = None) -> Tensor:
    return api.asarray(data, dtype=dtype or self.dtype,
                       device=device if device is not None else self._state)


def softmax(self: Tensor, dim: int) -> Tensor:
    return api.softmax(self, dim)


def log_softmax(self: Tensor, dim: int) -> Tensor:
    return api.log_softmax(self, dim)


def is_floating_point(self: Tensor) -> bool:
    return self.dtype.is_float


def is_contiguous(self: Tensor, memory_format: Any = None) -> bool:
    """Always: a value has no strides (`contiguous()` is the tensor itself)."""
    return True


def element_size(self: Tensor) -> int:
    return self.dtype.np.itemsize


def _in_place_unary(fn: Any) -> Any:
    def update(self: Tensor) -> Tensor:
        self._assign(fn(self)._node)
        return self
    return update


_METHODS = {
    "sort": sort, "argsort": argsort, "t": t, "norm": norm, "split": split, "chunk": chunk,
    "unbind": unbind, "topk": topk, "kthvalue": kthvalue, "median": median, "mode": mode,
    "unique": unique, "addcmul_": addcmul_, "addcdiv_": addcdiv_, "lerp_": lerp_,
    "masked_fill_": masked_fill_, "normal_": normal_, "uniform_": uniform_,
    "repeat": repeat, "gather": gather, "index_select": index_select, "narrow": narrow,
    "type_as": type_as, "type": type_, "new_zeros": _new(0), "new_ones": _new(1), "new_empty": _new(0),
    "new_full": new_full, "new_tensor": new_tensor, "softmax": softmax,
    "log_softmax": log_softmax, "is_floating_point": is_floating_point,
    "element_size": element_size, "is_contiguous": is_contiguous, "nelement": Tensor.numel,
    "angle": lift(ops.angle), "tan": lift(ops.tan), "conj": lift(ops.conj),
    "exp_": _in_place_unary(api.exp), "sqrt_": _in_place_unary(api.sqrt),
    "abs_": _in_place_unary(api.abs), "neg_": _in_place_unary(api.negative),
    "relu_": _in_place_unary(api.relu), "sigmoid_": _in_place_unary(api.sigmoid),
    "tanh_": _in_place_unary(api.tanh),
}

_PROPERTIES = {
    "is_leaf": property(_is_leaf), "real": property(_real), "imag": property(_imag),
    "data": property(_get_data, _set_data),
}


def install() -> None:
    """Put PyTorch's methods on the class (after `methods.install`, whose max/min/var/std
    they call for the keyword forms)."""
    for name in ("max", "min"):
        setattr(Tensor, name, _extreme(name))
    for name in ("var", "std"):
        setattr(Tensor, name, _spread(name))
    for name, op in (("add", api.add), ("sub", api.subtract)):
        setattr(Tensor, name, _with_alpha(op, name))
        setattr(Tensor, name + "_", _with_alpha_(op, name + "_"))
    requires = Tensor.requires_grad
    Tensor.requires_grad = property(_get_requires_grad, requires.fset)
    for name, fn in {**_METHODS, **_PROPERTIES}.items():
        setattr(Tensor, name, fn)


__all__ = ["install"]
