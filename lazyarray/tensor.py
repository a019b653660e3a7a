"""`Tensor`: a handle on a traced node that lives on one device.

Operators record ops (through `lazyarray.ops`); reading a value (`numpy()`, `item()`,
printing, `bool()`) syncs the tensor's device.
"""
from __future__ import annotations

import math

from typing import Any, Optional

import numpy as np

from . import ops
from .compiler import dtypes as D
from .compiler.node import Node, parameter_leaf
from . import runtime
from .runtime import DeviceState

_SCALARS = (bool, int, float)


class Tensor:
    __slots__ = ("_node", "_state", "__weakref__")
    __array_priority__ = 100           # NumPy defers to our operators

    # ---- construction -------------------------------------------------------------

    @staticmethod
    def _wrap(node: Node, state: DeviceState) -> "Tensor":
        t = Tensor.__new__(Tensor)
        t._node = _own(node)
        t._state = state
        if node.buffer is None:
            state.add_pending(t)
        return t

    @staticmethod
    def _from_numpy(array: np.ndarray, state: DeviceState) -> "Tensor":
        dtype = D.from_numpy(array.dtype)
        # ascontiguousarray makes a 0-d array 1-d: keep the array's own shape
        buf = state.device.put(np.ascontiguousarray(array).reshape(array.shape))
        return Tensor._wrap(parameter_leaf(buf, tuple(array.shape), dtype), state)

    def __init__(self, data: Any, dtype: Any = None, device: Any = None) -> None:
        from .creation import asarray
        t = asarray(data, dtype=dtype, device=device)
        self._node, self._state = t._node, t._state
        if self._node.buffer is None:
            self._state.add_pending(self)

    def _assign(self, node: Node) -> None:
        """Make this tensor hold a new value (functional __setitem__)."""
        node = _own(node)
        self._node = node
        if node.buffer is None:
            self._state.add_pending(self)

    # ---- properties ---------------------------------------------------------------

    @property
    def shape(self) -> tuple:
        return self._node.shape

    @property
    def dtype(self) -> D.DType:
        return self._node.dtype

    @property
    def ndim(self) -> int:
        return len(self._node.shape)

    @property
    def size(self) -> int:
        return math.prod(self._node.shape)

    @property
    def device(self) -> DeviceState:
        return self._state

    @property
    def is_materialized(self) -> bool:
        return self._node.buffer is not None

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    # ---- materialization ----------------------------------------------------------

    def _buffer(self) -> Any:
        if self._node.buffer is None:
            runtime.sync(self._state)
        return self._node.buffer

    def numpy(self) -> np.ndarray:
        """A host copy of the value (syncs the device)."""
        return np.array(self._state.device.get(self._buffer()), copy=True)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self._state.device.get(self._buffer())
        return np.asarray(out, dtype=dtype) if dtype is not None else np.asarray(out)

    def item(self) -> Any:
        if self.size != 1:
            raise ValueError(f"item(): the tensor has {self.size} elements, not 1")
        return self.numpy().reshape(()).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise ValueError(f"the truth value of a tensor with {self.size} elements is "
                             "ambiguous; use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_int:
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype.name}")
        return int(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extra = "" if self.dtype in (D.float32, D.int64, D.bool_) else f", dtype={self.dtype.name}"
        dev = "" if self._state.device.name == runtime.default_device_name() else \
            f", device='{self._state.device.name}'"
        return f"tensor({body}{extra}{dev})"

    def __str__(self) -> str:
        return str(self.numpy())

    def __format__(self, spec: str) -> str:
        return format(self.item(), spec) if self.size == 1 and spec else str(self)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __hash__(self) -> int:
        return id(self)

    # ---- conversion and devices ---------------------------------------------------

    def to(self, device: Any = None, dtype: Any = None) -> "Tensor":
        t = self
        if dtype is not None:
            t = t.astype(dtype)
        if device is not None:
            target = runtime.get_device(device)
            if target is not t._state:
                t = Tensor._from_numpy(t.numpy(), target)
        return t

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, index: int = 0) -> "Tensor":
        return self.to(f"cuda:{index}")

    def astype(self, dtype: Any) -> "Tensor":
        return _unary(ops.astype, self, dtype)

    def type(self, dtype: Any) -> "Tensor":
        return self.astype(dtype)

    def float(self) -> "Tensor":
        return self.astype(D.float32)

    def double(self) -> "Tensor":
        return self.astype(D.float64)

    def long(self) -> "Tensor":
        return self.astype(D.int64)

    def int(self) -> "Tensor":
        return self.astype(D.int32)

    def bool(self) -> "Tensor":
        return self.astype(D.bool_)

    def half(self) -> "Tensor":
        return self.astype(D.float16)

    def __array_namespace__(self, api_version: Optional[str] = None) -> Any:
        import lazyarray
        return lazyarray

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._state.device.get(self._buffer()).__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple:
        return self._state.device.get(self._buffer()).__dlpack_device__()

    # ---- operators ----------------------------------------------------------------

    def __add__(self, o): return _binary(ops.add, self, o)
    def __radd__(self, o): return _binary(ops.add, o, self)
    def __sub__(self, o): return _binary(ops.subtract, self, o)
    def __rsub__(self, o): return _binary(ops.subtract, o, self)
    def __mul__(self, o): return _binary(ops.multiply, self, o)
    def __rmul__(self, o): return _binary(ops.multiply, o, self)
    def __truediv__(self, o): return _binary(ops.divide, self, o)
    def __rtruediv__(self, o): return _binary(ops.divide, o, self)
    def __floordiv__(self, o): return _binary(ops.floor_divide, self, o)
    def __rfloordiv__(self, o): return _binary(ops.floor_divide, o, self)
    def __mod__(self, o): return _binary(ops.remainder, self, o)
    def __rmod__(self, o): return _binary(ops.remainder, o, self)
    def __pow__(self, o): return _binary(ops.pow, self, o)
    def __rpow__(self, o): return _binary(ops.pow, o, self)
    def __matmul__(self, o): return _binary(ops.matmul, self, o)
    def __rmatmul__(self, o): return _binary(ops.matmul, o, self)
    def __and__(self, o): return _binary(ops.bitwise_and, self, o)
    def __rand__(self, o): return _binary(ops.bitwise_and, o, self)
    def __or__(self, o): return _binary(ops.bitwise_or, self, o)
    def __ror__(self, o): return _binary(ops.bitwise_or, o, self)
    def __xor__(self, o): return _binary(ops.bitwise_xor, self, o)
    def __rxor__(self, o): return _binary(ops.bitwise_xor, o, self)
    def __lshift__(self, o): return _binary(ops.bitwise_left_shift, self, o)
    def __rlshift__(self, o): return _binary(ops.bitwise_left_shift, o, self)
    def __rshift__(self, o): return _binary(ops.bitwise_right_shift, self, o)
    def __rrshift__(self, o): return _binary(ops.bitwise_right_shift, o, self)
    def __eq__(self, o): return _binary(ops.equal, self, o)          # type: ignore[override]
    def __ne__(self, o): return _binary(ops.not_equal, self, o)      # type: ignore[override]
    def __lt__(self, o): return _binary(ops.less, self, o)
    def __le__(self, o): return _binary(ops.less_equal, self, o)
    def __gt__(self, o): return _binary(ops.greater, self, o)
    def __ge__(self, o): return _binary(ops.greater_equal, self, o)
    def __neg__(self): return _unary(ops.negative, self)
    def __pos__(self): return _unary(ops.positive, self)
    def __abs__(self): return _unary(ops.abs, self)
    def __invert__(self): return _unary(ops.bitwise_invert, self)

    def __getitem__(self, key: Any) -> "Tensor":
        from .indexing import getitem
        return getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        from .indexing import setitem
        setitem(self, key, value)

    # ---- methods (PyTorch and NumPy names) ----------------------------------------

    def sum(self, axis=None, keepdims=False, *, dim=None, keepdim=None, dtype=None):
        return _reduce("sum", self, axis, dim, keepdims, keepdim, dtype=dtype)

    def prod(self, axis=None, keepdims=False, *, dim=None, keepdim=None, dtype=None):
        return _reduce("prod", self, axis, dim, keepdims, keepdim, dtype=dtype)

    def mean(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("mean", self, axis, dim, keepdims, keepdim)

    def max(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("max", self, axis, dim, keepdims, keepdim)

    def min(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("min", self, axis, dim, keepdims, keepdim)

    def var(self, axis=None, keepdims=False, *, dim=None, keepdim=None, correction=0):
        return _reduce("var", self, axis, dim, keepdims, keepdim, correction=correction)

    def std(self, axis=None, keepdims=False, *, dim=None, keepdim=None, correction=0):
        return _reduce("std", self, axis, dim, keepdims, keepdim, correction=correction)

    def all(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("all", self, axis, dim, keepdims, keepdim)

    def any(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("any", self, axis, dim, keepdims, keepdim)

    def argmax(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("argmax", self, axis, dim, keepdims, keepdim)

    def argmin(self, axis=None, keepdims=False, *, dim=None, keepdim=None):
        return _reduce("argmin", self, axis, dim, keepdims, keepdim)

    def reshape(self, *shape):
        return _unary(ops.reshape, self, _shape_args(shape))

    def view(self, *shape):
        return self.reshape(*shape)

    def flatten(self):
        return self.reshape(-1)

    def transpose(self, *axes):
        if len(axes) == 2:
            return _unary(ops.transpose, self, axes[0], axes[1])
        if axes:
            return _unary(ops.permute_dims, self, _shape_args(axes))
        return _unary(ops.transpose, self)

    def permute(self, *dims):
        return _unary(ops.permute_dims, self, _shape_args(dims))

    @property
    def T(self):
        return _unary(ops.transpose, self)

    @property
    def mT(self):
        return _unary(ops.matrix_transpose, self)

    def squeeze(self, axis=None, *, dim=None):
        return _unary(ops.squeeze, self, dim if dim is not None else axis)

    def unsqueeze(self, dim):
        return _unary(ops.expand_dims, self, dim)

    def expand_dims(self, axis):
        return _unary(ops.expand_dims, self, axis)

    def broadcast_to(self, *shape):
        return _unary(ops.broadcast_to, self, _shape_args(shape))

    def expand(self, *shape):
        shape = tuple(n if s == -1 else s for s, n in
                      zip(_shape_args(shape), (None,) * (len(_shape_args(shape)) - self.ndim)
                          + self.shape))
        return self.broadcast_to(shape)

    def clip(self, min=None, max=None):
        from . import api
        return api.clip(self, min, max)


    clamp = clip

    def flip(self, axis=None, *, dims=None):
        return _unary(ops.flip, self, dims if dims is not None else axis)

    def cumsum(self, axis=None, *, dim=None):
        return _unary(ops.cumulative_sum, self, dim if dim is not None else axis)

    def abs(self): return _unary(ops.abs, self)
    def exp(self): return _unary(ops.exp, self)
    def log(self): return _unary(ops.log, self)
    def sqrt(self): return _unary(ops.sqrt, self)
    def tanh(self): return _unary(ops.tanh, self)
    def sigmoid(self): return _unary(ops.sigmoid, self)
    def sin(self): return _unary(ops.sin, self)
    def cos(self): return _unary(ops.cos, self)
    def relu(self): return _unary(ops.relu, self)
    def square(self): return _unary(ops.square, self)
    def round(self): return _unary(ops.round, self)
    def floor(self): return _unary(ops.floor, self)
    def ceil(self): return _unary(ops.ceil, self)
    def sign(self): return _unary(ops.sign, self)

    def matmul(self, other): return _binary(ops.matmul, self, other)
    def dot(self, other): return _binary(ops.matmul, self, other)

    def detach(self) -> "Tensor":
        from . import api
        return api.stop_gradient(self)


def _own(node: Node) -> Node:
    """A tensor's own node. Kept constants (0, 1, -1) are shared by every graph; a tensor
    holding one directly gets a copy, so that materializing it does not turn the shared
    constant into a parameter of every later module."""
    if node.op != "constant" or node.buffer is not None:
        return node
    return Node("constant", (), node.shape, node.dtype, node.attrs, value=node.value)


# ---- the fast paths of the operators ---------------------------------------------------

def _node_of(x: Any, state: DeviceState) -> Any:
    if type(x) is Tensor:
        if x._state is not state:
            raise_mixed_devices(x._state, state)
        return x._node
    if isinstance(x, _SCALARS):
        return x
    from .creation import asarray
    return asarray(x, device=state)._node


def raise_mixed_devices(a: DeviceState, b: DeviceState) -> None:
    raise ValueError(f"tensors on different devices: {a.device.name!r} and {b.device.name!r}; "
                     f"move one with .to({b.device.name!r}) or .to({a.device.name!r})")


def _binary(fn: Any, a: Any, b: Any) -> Any:
    state = a._state if type(a) is Tensor else b._state
    return Tensor._wrap(fn(_node_of(a, state), _node_of(b, state)), state)


def _unary(fn: Any, x: Tensor, *args: Any) -> Tensor:
    return Tensor._wrap(fn(x._node, *args), x._state)


def _reduce(name: str, x: Tensor, axis: Any, dim: Any, keepdims: bool, keepdim: Any,
            **kw: Any) -> Tensor:
    """A reduction method: PyTorch's dim/keepdim or NumPy's axis/keepdims."""
    from . import api
    axis = dim if dim is not None else axis
    if isinstance(axis, list):
        axis = tuple(axis)
    keep = keepdim if keepdim is not None else keepdims
    return getattr(api, name)(x, axis=axis, keepdims=keep, **kw)


def _shape_args(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)
