"""One rule for two conventions: the keywords say which one a call means.

- `axis=`, `keepdims=`, or positional arguments: NumPy's and the array API's meaning
  (`x.max(1)` is the maximum values; `x.var()` divides by n).
- `dim=`, `keepdim=` (or `unbiased=`): PyTorch's meaning (`x.max(dim=1)` is the pair
  (values, indices); `x.var(dim=1)` divides by n - 1).

Where the two meanings are the same (`sum`, `mean`, `argmax`, ...) `dim` is just another
name for `axis` (`lift` renames it). This module holds the functions whose meaning
differs: `max`, `min`, `var`, `std`, `sort`, and the reductions as Tensor methods.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

from . import ops
from .lift import lift
from .tensor import Tensor

ValuesIndices = namedtuple("ValuesIndices", ["values", "indices"])

_UNSET = object()
_op = {name: lift(getattr(ops, name)) for name in
       ("max", "min", "var", "std", "sort", "argsort", "argmax", "argmin", "take_along_axis")}


def _torch_style(name: str, axis: Any, dim: Any, keepdims: Any, keepdim: Any) -> tuple:
    """(is a PyTorch-style call, axis, keepdims) from the two sets of keywords."""
    torch = dim is not _UNSET or keepdim is not _UNSET
    if dim is not _UNSET and axis is not None:
        raise TypeError(f"{name}: got both axis= and dim=; pass one (dim= means PyTorch's "
                        "semantics, axis= NumPy's)")
    if keepdim is not _UNSET and keepdims is not None:
        raise TypeError(f"{name}: got both keepdims= and keepdim=; pass one")
    if dim is not _UNSET:
        axis = tuple(dim) if isinstance(dim, list) else dim
    keep = keepdim if keepdim is not _UNSET else keepdims
    return torch, axis, bool(keep)


def _extreme(name: str, arg: str):
    def reduce(x: Any, axis: Any = None, keepdims: Any = None, *, dim: Any = _UNSET,
               keepdim: Any = _UNSET) -> Any:
        torch, axis, keep = _torch_style(name, axis, dim, keepdims, keepdim)
        values = _op[name](x, axis=axis, keepdims=keep)
        if not torch or dim is _UNSET or dim is None:
            return values
        if not isinstance(axis, int):
            raise TypeError(f"{name}(dim=...): PyTorch's form takes one int dim, got "
                            f"{dim!r}; for several axes use axis= (values only)")
        return ValuesIndices(values, _op[arg](x, axis=axis, keepdims=keep))
    reduce.__name__ = name
    reduce.__doc__ = (f"The {name}imum over `axis` (NumPy); with `dim=` (PyTorch) the pair "
                      f"(values, indices) along that dim.")
    return reduce


max = _extreme("max", "argmax")
min = _extreme("min", "argmin")


def _spread(name: str):
    def reduce(x: Any, axis: Any = None, keepdims: Any = None, *, correction: Any = None,
               dim: Any = _UNSET, keepdim: Any = _UNSET, unbiased: Any = None) -> Any:
        torch, axis, keep = _torch_style(name, axis, dim, keepdims, keepdim)
        if unbiased is not None:
            if correction is not None:
                raise TypeError(f"{name}: got both unbiased= and correction=; pass one")
            correction = 1 if unbiased else 0
        if correction is None:
            correction = 1 if torch else 0
        return _op[name](x, axis=axis, keepdims=keep, correction=correction)
    reduce.__name__ = name
    reduce.__doc__ = (f"The {'variance' if name == 'var' else 'standard deviation'}: "
                      "correction 0 with axis= (NumPy, array API), 1 with dim= (PyTorch, "
                      "unbiased), unless `correction=`/`unbiased=` says otherwise.")
    return reduce


var = _spread("var")
std = _spread("std")


def sort(x: Any, axis: Any = -1, descending: bool = False, stable: bool = True, *,
         dim: Any = _UNSET) -> Any:
    """Sorted values along `axis` (array API); with `dim=` (PyTorch) the pair (values,
    indices)."""
    if dim is _UNSET:
        return _op["sort"](x, axis=axis, descending=descending, stable=stable)
    idx = _op["argsort"](x, axis=dim, descending=descending, stable=True)
    return ValuesIndices(_op["take_along_axis"](x, idx, axis=dim), idx)


def reduction_method(name: str):
    """A Tensor reduction method where axis and dim, keepdims and keepdim are the same."""
    op = getattr(ops, name)
    fn = lift(op)

    def reduce(self: Tensor, axis: Any = None, keepdims: Any = None, *, dim: Any = _UNSET,
               keepdim: Any = _UNSET, **kw: Any) -> Tensor:
        if dim is _UNSET and keepdim is _UNSET and not kw:
            if axis is None and keepdims is None:
                return Tensor._wrap(op(self._node), self._state)    # x.sum(): the whole tensor
            if type(axis) is int and (keepdims is None or type(keepdims) is bool):
                out = op(self._node, axis=axis, keepdims=bool(keepdims))    # x.sum(1)
                return Tensor._wrap(out, self._state)
        _, axis, keep = _torch_style(name, axis, dim, keepdims, keepdim)
        return fn(self, axis=axis, keepdims=keep, **kw)
    reduce.__name__ = name
    return reduce


__all__ = ["max", "min", "var", "std", "sort", "ValuesIndices", "reduction_method"]
