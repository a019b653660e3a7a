"""The public namespace: every op of `lazyarray.ops`, lifted to tensors, and what needs
the runtime (creation from data, graph breaks, sync)."""
from __future__ import annotations

import builtins
import math
from typing import Any

import numpy as _np

from . import ops
from .ops import nn as _ops_nn
from .compiler.hlo import dtypes as _D
from .compiler.hlo.dtypes import (DType, bfloat16, bool_, float16, float32, float64, int8, int16,
                                  int32, int64, uint8, uint16, uint32, uint64)
from .compiler.hlo.dtypes import complex64, complex128  # noqa: F401
from . import random as _random
from . import runtime
from .autograd import GradientTape, grad, stop_gradient, value_and_grad
from .backward import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .conventions import ValuesIndices, max, min, sort, std, var
from .creation import asarray, from_dlpack, from_numpy, tensor
from .creation import grad_option as _grad_option, sized as _sized
from .creation import astype_on_device as _astype_on_device, like_on_device as _like_on_device
from .creation import show_device_keyword as _show_device
from .graph_break import nonzero, unique, unique_all, unique_counts, unique_inverse, unique_values
from .lift import lift
from .saving import load, save
from .sampling import multinomial

_CONVENTIONS = {"max", "min", "var", "std", "sort"}
for _name in ops.__all__:
    if _name not in _CONVENTIONS:
        globals()[_name] = lift(getattr(ops, _name))

# creation: PyTorch's separate sizes (`zeros(3, 4)`) and requires_grad=
for _name in ("zeros", "ones", "empty"):
    globals()[_name] = _sized(globals()[_name])
for _name in ("full", "arange", "linspace", "eye", "zeros_like", "ones_like", "full_like",
              "empty_like"):
    globals()[_name] = _grad_option(globals()[_name])
for _name in ("zeros_like", "ones_like", "full_like", "empty_like"):
    globals()[_name] = _like_on_device(globals()[_name], globals()["empty"])
for _name in ("zeros", "ones", "empty", "full", "arange", "linspace", "eye", "zeros_like",
              "ones_like", "full_like", "empty_like"):
    _show_device(globals()[_name], requires_grad=True)
astype = _astype_on_device(globals()["astype"])
from .graph_break import repeat  # noqa: E402,F811  (an array of repeats: a graph break)

from . import linalg  # noqa: E402  (the array API's linalg extension: la.linalg.solve, ...)
from . import fft  # noqa: E402  (the array API's fft extension: la.fft.rfft, ...)

bool = bool_  # noqa: A001  (the array API's name for the dtype)
e, pi, inf, nan, newaxis = math.e, math.pi, math.inf, math.nan, None


def sync(device=None) -> None:
    """Compute every pending tensor (of `device`, or of every device)."""
    runtime.sync(runtime.get_device(device) if device is not None else None)


def device(name=None) -> runtime.DeviceState:
    return runtime.get_device(name)


def finfo(dtype):
    return ops.utility.finfo_of(_D.to_dtype(dtype if not hasattr(dtype, "_node") else dtype.dtype))


def iinfo(dtype):
    return ops.utility.iinfo_of(_D.to_dtype(dtype if not hasattr(dtype, "_node") else dtype.dtype))


def result_type(*xs):
    """The dtype of combining tensors, dtypes and Python scalars; scalars are weak: they
    take the others' dtype where their kind allows (the array API's rule)."""
    scalars = (builtins.bool, builtins.int, builtins.float, builtins.complex)
    strong = [x.dtype if hasattr(x, "_node") else _D.to_dtype(x)
              for x in xs if not isinstance(x, scalars)]
    weak = [x for x in xs if isinstance(x, scalars)]
    if not strong:
        if not weak:
            raise ValueError("result_type: needs at least one tensor, dtype or scalar")
        strong, weak = [_D.scalar_dtype(weak[0])], weak[1:]
    out = _D.result_type(*strong)
    for v in weak:
        out = _D.weak_scalar_dtype(out, v)
    return out


def broadcast_shapes(*shapes: Any) -> tuple:
    """The shape arrays of `shapes` broadcast to (array API 2025.12, NumPy's
    `broadcast_shapes`); ValueError when they cannot be."""
    checked = []
    for s in shapes:
        if not isinstance(s, (tuple, list)) or not builtins.all(
                isinstance(d, (builtins.int, _np.integer)) and not isinstance(d, builtins.bool)
                and d >= 0 for d in s):
            raise TypeError(f"broadcast_shapes: each shape must be a tuple of non-negative "
                            f"ints, got {s!r}")
        checked.append(tuple(builtins.int(d) for d in s))
    if not checked:
        return ()
    return ops.promotion.broadcast_shapes("broadcast_shapes", *checked)


def can_cast(from_, to) -> bool:
    a = from_.dtype if hasattr(from_, "_node") else _D.to_dtype(from_)
    b = _D.to_dtype(to)
    return _D.promote(a, b) is b


def isdtype(dtype, kind) -> bool:
    dtype = _D.to_dtype(dtype)
    if isinstance(kind, tuple):
        return builtins.any(isdtype(dtype, k) for k in kind)   # `any` here is lazyarray's
    if isinstance(kind, (DType, type)) or not isinstance(kind, str):
        return dtype is _D.to_dtype(kind)
    groups = {"bool": (_D.bool_,), "signed integer": _D.INTS, "unsigned integer": _D.UINTS,
              "integral": _D.INTEGERS, "real floating": _D.FLOATS, "complex floating": _D.COMPLEX,
              "numeric": _D.NUMERIC + _D.COMPLEX}
    if kind not in groups:
        raise ValueError(f"isdtype: unknown kind {kind!r}; valid: {sorted(groups)}")
    return dtype in groups[kind]


class _NamespaceInfo:
    """What `__array_namespace_info__()` reports (array API inspection, 2023.12 on)."""

    def capabilities(self) -> dict:
        # boolean indexing and nonzero work, as graph breaks (errors in strict mode)
        return {"boolean indexing": True, "data-dependent shapes": True,
                "max dimensions": None}

    def default_device(self):
        return runtime.get_device(None)

    def default_dtypes(self, *, device=None) -> dict:
        return {"real floating": _D.DEFAULT_FLOAT, "complex floating": _D.DEFAULT_COMPLEX,
                "integral": _D.DEFAULT_INT, "indexing": _D.DEFAULT_INDEX}

    def devices(self) -> list:
        return [runtime.get_device(n) for n in runtime.registered_devices()
                if n == "interpreter" or n == runtime.default_device_name()]

    def dtypes(self, *, device=None, kind=None) -> dict:
        # the standard's dtypes only (float16 and bfloat16 are extensions)
        standard = [d for d in _D.EVERY if d not in (_D.float16, _D.bfloat16)]
        return {d.name: d for d in standard if kind is None or isdtype(d, kind)}


def __array_namespace_info__() -> _NamespaceInfo:
    return _NamespaceInfo()


# ---- names a PyTorch user types ---------------------------------------------------------

cat = concatenate = globals()["concat"]
cumsum = globals()["cumulative_sum"]
manual_seed = _random.seed
rand, randn, randint = _random.rand, _random.randn, _random.randint


def randperm(n: int, dtype: Any = None, device: Any = None) -> Any:
    """A random permutation of 0..n-1 (int64), from the device's generator."""
    p = _random.permutation(builtins.int(n), device=device)
    return p if dtype is None else p.astype(dtype)


def numel(x: Any) -> int:
    return asarray(x).numel()


softmax, log_softmax = lift(_ops_nn.softmax), lift(_ops_nn.log_softmax)
unsqueeze = globals()["expand_dims"]
permute = globals()["permute_dims"]
clamp = globals()["clip"]
inference_mode = no_grad


_topk = lift(ops.topk)


def topk(x: Any, k: int, axis: int = -1, largest: bool = True, sorted: bool = True, *,
         dim: Any = None) -> ValuesIndices:
    """(values, indices) of the k largest (`largest=False`: smallest) along `axis`
    (PyTorch's topk; `dim=` is the same axis)."""
    return ValuesIndices(*_topk(x, k, axis=axis if dim is None else dim, largest=largest,
                                sorted=sorted))


def unbind(x: Any, dim: int = 0) -> tuple:
    """The slices along `dim`, that dim removed (PyTorch's name for unstack)."""
    return globals()["unstack"](x, axis=dim)


def flatten(x: Any, start_dim: int = 0, end_dim: int = -1) -> Any:
    """Dimensions start_dim..end_dim merged into one (PyTorch's torch.flatten)."""
    return asarray(x).flatten(start_dim, end_dim)


# dtype aliases last: from here on `float`, `int`, `bool` in this module are dtypes
long, int, short = int64, int32, int16  # noqa: A001
float, double, half = float32, float64, float16  # noqa: A001
