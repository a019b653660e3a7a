"""Tensor's operators and methods: one table, each entry an op of `lazyarray.ops` taken
through `lift` (or a public function built on it), installed on the class at import.

Kept apart from `tensor.py` so that the handle imports nothing above it: indexing,
conventions and autograd import `Tensor`, and this module imports them.
"""
from __future__ import annotations

from typing import Any

from . import api, backward, indexing, ops
from .ops.chains import PLANS as _PLANS, remember as _remember_chain, replay as _replay
from .compiler.hlo import dtypes as D
from .compiler.transforms import autodiff
from .conventions import reduction_method
from .creation import shape_args
from .lift import lift, method, reflected, unary_method
from .tensor import Tensor
from . import torch_methods

_wrap = Tensor._wrap

# ---- operators: (name, op, reflected name or None) -------------------------------------

_OPERATORS = [
    ("__add__", ops.add, "__radd__"), ("__sub__", ops.subtract, "__rsub__"),
    ("__mul__", ops.multiply, "__rmul__"), ("__truediv__", ops.divide, "__rtruediv__"),
    ("__floordiv__", ops.floor_divide, "__rfloordiv__"),
    ("__mod__", ops.remainder, "__rmod__"), ("__pow__", ops.pow, "__rpow__"),
    ("__matmul__", ops.matmul, "__rmatmul__"), ("__and__", ops.bitwise_and, "__rand__"),
    ("__or__", ops.bitwise_or, "__ror__"), ("__xor__", ops.bitwise_xor, "__rxor__"),
    ("__lshift__", ops.bitwise_left_shift, "__rlshift__"),
    ("__rshift__", ops.bitwise_right_shift, "__rrshift__"),
    ("__eq__", ops.equal, None), ("__ne__", ops.not_equal, None),
    ("__lt__", ops.less, None), ("__le__", ops.less_equal, None),
    ("__gt__", ops.greater, None), ("__ge__", ops.greater_equal, None),
    ("matmul", ops.matmul, None), ("dot", ops.matmul, None),
    # PyTorch's method names of the operators
    ("add", ops.add, None), ("sub", ops.subtract, None), ("mul", ops.multiply, None),
    ("div", ops.divide, None), ("pow", ops.pow, None), ("eq", ops.equal, None),
    ("ne", ops.not_equal, None), ("lt", ops.less, None), ("le", ops.less_equal, None),
    ("gt", ops.greater, None), ("ge", ops.greater_equal, None),
    ("maximum", ops.maximum, None), ("minimum", ops.minimum, None),
]

# in place, as PyTorch spells it: the tensor object takes the new value (updates are
# functional underneath: tensors read from it earlier keep theirs)
_IN_PLACE = [("__iadd__", "add_", ops.add), ("__isub__", "sub_", ops.subtract),
             ("__imul__", "mul_", ops.multiply), ("__itruediv__", "div_", ops.divide),
             ("__ipow__", "pow_", ops.pow), ("__ifloordiv__", None, ops.floor_divide),
             ("__imod__", None, ops.remainder), ("__imatmul__", None, ops.matmul),
             ("__iand__", None, ops.bitwise_and), ("__ior__", None, ops.bitwise_or),
             ("__ixor__", None, ops.bitwise_xor), ("__ilshift__", None, ops.bitwise_left_shift),
             ("__irshift__", None, ops.bitwise_right_shift)]

_UNARY = {"__neg__": ops.negative, "__pos__": ops.positive, "__abs__": ops.abs,
          "__invert__": ops.bitwise_invert, "abs": ops.abs, "exp": ops.exp, "log": ops.log,
          "sqrt": ops.sqrt, "tanh": ops.tanh, "sigmoid": ops.sigmoid, "sin": ops.sin,
          "cos": ops.cos, "relu": ops.relu, "square": ops.square, "round": ops.round,
          "floor": ops.floor, "ceil": ops.ceil, "sign": ops.sign, "log1p": ops.log1p,
          "expm1": ops.expm1, "rsqrt": ops.rsqrt, "neg": ops.negative}

_REDUCTIONS = ["sum", "prod", "mean", "all", "any", "argmax", "argmin"]


def _in_place(fn: Any) -> Any:
    op = method(fn)

    def update(self: Tensor, other: Any) -> Tensor:
        self._assign(op(self, other)._node)
        return self
    return update


def _install() -> None:
    for name, fn, rname in _OPERATORS:
        setattr(Tensor, name, method(fn))
        if rname:
            setattr(Tensor, rname, reflected(fn))
    for dunder, name, fn in _IN_PLACE:
        setattr(Tensor, dunder, _in_place(fn))
        if name:
            setattr(Tensor, name, _in_place(fn))
    for name, fn in _UNARY.items():
        setattr(Tensor, name, unary_method(fn))
    for name in _REDUCTIONS:
        setattr(Tensor, name, reduction_method(name))
    for name in ("max", "min"):
        setattr(Tensor, name, _extreme(name))
    for name in ("var", "std", "sort"):
        setattr(Tensor, name, getattr(api, name))


# ---- methods that adapt their arguments -------------------------------------------------

# `t.view(B, T, H, D)`, `t.transpose(1, 2)`, `t.permute(0, 2, 1, 3)`: a model repeats
# them at every step with the same plain-int arguments on operands of the same type, so
# what each made is remembered under (method, the operand's interned type, arguments) and
# replayed (ops/chains.py): no argument checks, no lifted function, no attribute key.


def _ints(args: tuple) -> bool:
    for a in args:
        if type(a) is not int:
            return False
    return True


def _again(kind: str, self: Tensor, args: tuple) -> Any:
    """The tensor `kind` made before for this operand type and these arguments, made
    again; None when there is none."""
    node = self._node
    t = node.type
    if t is None or not _ints(args):
        return None
    plan = _PLANS.get((kind, t, args))
    if plan is None:
        return None
    return _wrap(_replay(node, plan), self._state, 3)


def _remember(kind: str, node: Any, args: tuple, out: Any) -> Any:
    """Keep what the general way made of `node`; `out` returned. A result that is the
    operand itself (a reshape to its own shape) is not kept: the general way hands back
    the tensor it was given."""
    t = node.type
    if t is not None and out._node is not node and _ints(args):
        _remember_chain((kind, t, args), node, out._node)
    return out


def reshape(self: Tensor, *shape: Any) -> Tensor:
    out = _again("reshape", self, shape)
    if out is not None:
        return out
    return _remember("reshape", self._node, shape, api.reshape(self, shape_args(shape)))


def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    start, end = start_dim % max(self.ndim, 1), end_dim % max(self.ndim, 1)
    if self.ndim == 0:
        return api.reshape(self, (1,))
    return api.reshape(self, self.shape[:start] + (-1,) + self.shape[end + 1:])


def transpose(self: Tensor, *axes: Any) -> Tensor:
    out = _again("transpose", self, axes)
    if out is not None:
        return out
    if len(axes) == 2:
        out = api.transpose(self, axes[0], axes[1])
    elif axes:
        out = api.permute_dims(self, shape_args(axes))
    else:
        out = api.transpose(self)
    return _remember("transpose", self._node, axes, out)


def permute(self: Tensor, *dims: Any) -> Tensor:
    out = _again("permute", self, dims)
    if out is not None:
        return out
    return _remember("permute", self._node, dims, api.permute_dims(self, shape_args(dims)))


def squeeze(self: Tensor, axis: Any = None, *, dim: Any = None) -> Tensor:
    return api.squeeze(self, dim if dim is not None else axis)


def broadcast_to(self: Tensor, *shape: Any) -> Tensor:
    return api.broadcast_to(self, shape_args(shape))


def expand(self: Tensor, *shape: Any) -> Tensor:
    sizes = shape_args(shape)
    own = (None,) * (len(sizes) - self.ndim) + self.shape
    return api.broadcast_to(self, tuple(n if s == -1 else s for s, n in zip(sizes, own)))


def flip(self: Tensor, axis: Any = None, *, dims: Any = None) -> Tensor:
    return api.flip(self, dims if dims is not None else axis)


def cumsum(self: Tensor, axis: Any = None, *, dim: Any = None) -> Tensor:
    return api.cumulative_sum(self, dim if dim is not None else axis)


def _extreme(name: str) -> Any:
    """`x.max()`, `x.max(1)`, `x.max(axis=0, keepdims=True)`: NumPy's meaning (the values),
    the op on the node directly; PyTorch's keywords (`dim=`: values and indices) and
    anything else go through `lazyarray.max` (lazyarray/conventions.py)."""
    op, public = getattr(ops, name), getattr(api, name)

    def reduce(self: Tensor, axis: Any = None, keepdims: Any = None, **kw: Any) -> Any:
        if not kw and (axis is None or type(axis) is int) and \
                (keepdims is None or type(keepdims) is bool):
            return _wrap(op(self._node, axis, bool(keepdims)), self._state)
        return public(self, axis, keepdims, **kw)
    reduce.__name__, reduce.__doc__ = name, public.__doc__
    return reduce


_PY_SCALARS = (type(None), bool, int, float)


def clip(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    if type(min) in _PY_SCALARS and type(max) in _PY_SCALARS:    # the op on the node
        return _wrap(ops.clip(self._node, min, max), self._state)
    return api.clip(self, min, max)


def astype(self: Tensor, dtype: Any, copy: bool = True) -> Tensor:
    return _wrap(ops.astype(self._node, dtype), self._state)


def _cast(dtype: D.DType) -> Any:
    def cast(self: Tensor) -> Tensor:
        return _wrap(ops.astype(self._node, dtype), self._state)
    return cast


def detach(self: Tensor) -> Tensor:
    """The value, with no path back for gradients (a constant for backward and tapes)."""
    return Tensor._wrap(autodiff.stop(self._node), self._state)


def _backward(self: Tensor, gradient: Any = None, retain_graph: bool = False,
              inputs: Any = None) -> None:
    backward.backward(self, gradient, retain_graph, inputs)


def clone(self: Tensor) -> Tensor:
    """A new tensor with the same value (values are never shared: a new handle is a copy)."""
    return Tensor._wrap(self._node, self._state)


def contiguous(self: Tensor) -> Tensor:
    """The tensor itself: values have no memory layout to fix (PyTorch's no-op case)."""
    return self


def masked_fill(self: Tensor, mask: Any, value: Any) -> Tensor:
    """`value` where `mask` is True, the tensor elsewhere (mask broadcasts)."""
    kind = type(value)
    if type(mask) is Tensor and mask._state is self._state and \
            (kind is float or kind is int or kind is bool):     # the op on the nodes
        return _wrap(ops.where(mask._node, value, self._node), self._state)
    return api.where(mask, api.astype(api.asarray(value, device=self._state), self.dtype)
                     if not isinstance(value, (bool, int, float)) else value, self)


def zero_(self: Tensor) -> Tensor:
    self._assign(api.zeros_like(self)._node)
    return self


def fill_(self: Tensor, value: Any) -> Tensor:
    self._assign(api.full_like(self, value)._node)
    return self


def copy_(self: Tensor, src: Any) -> Tensor:
    src = api.asarray(src, device=self._state)
    self._assign(api.broadcast_to(api.astype(src, self.dtype), self.shape)._node)
    return self


def clamp_(self: Tensor, min: Any = None, max: Any = None) -> Tensor:
    self._assign(api.clip(self, min, max)._node)
    return self


def _get_requires_grad(self: Tensor) -> bool:
    return backward.requires_grad(self)


def _set_requires_grad(self: Tensor, flag: bool) -> None:
    backward.set_requires_grad(self, flag)


def requires_grad_(self: Tensor, requires_grad: bool = True) -> Tensor:
    return backward.set_requires_grad(self, requires_grad)


_METHODS = {
    "reshape": reshape, "view": reshape, "flatten": flatten, "transpose": transpose,
    "permute": permute, "squeeze": squeeze, "unsqueeze": lift(ops.expand_dims),
    "expand_dims": lift(ops.expand_dims), "broadcast_to": broadcast_to, "expand": expand,
    "clip": clip, "clamp": clip, "flip": flip, "cumsum": cumsum, "astype": astype,
    "type": astype, "float": _cast(D.float32), "double": _cast(D.float64),
    "long": _cast(D.int64), "int": _cast(D.int32), "bool": _cast(D.bool_),
    "half": _cast(D.float16), "bfloat16": _cast(D.bfloat16), "detach": detach,
    "backward": _backward, "clone": clone, "contiguous": contiguous,
    "masked_fill": masked_fill, "zero_": zero_, "fill_": fill_, "copy_": copy_,
    "clamp_": clamp_, "requires_grad_": requires_grad_,
    "__getitem__": indexing.getitem, "__setitem__": indexing.setitem,
}

_PROPERTIES = {
    # (a method of one operand: no detour through the lifted function's argument checks,
    # every linear layer's `W.T`)
    "T": property(unary_method(ops.transpose)),
    "mT": property(unary_method(ops.matrix_transpose)),
    "requires_grad": property(_get_requires_grad, _set_requires_grad),
    "grad": property(backward.grad_of, backward.set_grad),
}


def install() -> None:
    """Put the table on the Tensor class (once, when the package is imported)."""
    _install()
    for name, fn in {**_METHODS, **_PROPERTIES}.items():
        setattr(Tensor, name, fn)
    torch_methods.install()            # PyTorch's meaning of the methods NumPy's API lacks
