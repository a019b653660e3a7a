"""`Tensor`: a handle on a traced node that lives on one device.

This module holds what a handle is — construction, properties, reading the value
(`numpy()`, `item()`, printing, `bool()` sync the tensor's device), moving it, pickling
and DLPack — and nothing that records ops. The operators and methods that record ops are
one table, `lazyarray/methods.py`, which installs them on the class when the package is
imported: this module imports nothing of the layers above it, so there is no import loop.
"""
from __future__ import annotations

import math
import sys
import threading
import weakref
from typing import Any, Optional

import numpy as np

from .compiler.hlo import dtypes as D
from .compiler.graph.node import Node, parameter_leaf
from . import callsite, dlpack, numpy_protocol, runtime
from .runtime import DeviceState

# Tensor._flags bits
REQUIRES_GRAD = 1
PARAMETER = 2

_DTYPE_NAMES = frozenset(d.name for d in D.ALL)


class Size(int):
    """A tensor's element count (the array API's `x.size`, an int) that can also be called
    as PyTorch's `x.size()` (the shape) and `x.size(d)` (one dimension)."""

    def __new__(cls, shape: tuple) -> "Size":
        s = int.__new__(cls, math.prod(shape))
        s.shape = shape
        return s

    def __call__(self, dim: Optional[int] = None) -> Any:
        if dim is None:
            return self.shape
        if not -len(self.shape) <= dim < len(self.shape):
            raise IndexError(f"size({dim}): dimension out of range for a "
                             f"{len(self.shape)}-d tensor of shape {self.shape}")
        return self.shape[dim]

    def __reduce__(self) -> tuple:
        return int, (int(self),)


class Tensor:
    # _grad and _flags are set only on the few tensors that use them (trainable ones):
    # recording an op sets two slots, no more
    __slots__ = ("_node", "_state", "_grad", "_flags", "__weakref__")
    __array_priority__ = 100           # NumPy defers to our operators

    # ---- construction -------------------------------------------------------------

    @staticmethod
    def _wrap(node: Node, state: DeviceState, depth: int = 2) -> "Tensor":
        """The tensor of a newly recorded node: every op ends here, so this is
        `add_pending` written out (the user's frame found from here, one call less).
        `depth`: the frame the walk for the user's frame starts at, counted from here: 2
        is our caller's caller; a caller that knows more frames below it are lazyarray's
        own (a lifted function calling an operator's body) passes more, so that the walk
        makes no frame object for them."""
        t = _new(Tensor)
        t._state = state
        if node.buffer is not None:
            t._node = node
            return t
        if node.op == "constant":
            node = _own(node)
        t._node = node
        # the user's frame: `callsite.user_frame_from(depth + 1)` written out (one call
        # less per op). The walk starts above frames that are lazyarray's own code (only
        # our own code calls _wrap): each frame the walk touches is made into a frame
        # object.
        try:
            f = _getframe(depth)
        except ValueError:                 # called from the outermost frame
            f = None
        while f is not None:
            code = f.f_code
            mine = _own_code(_id(code))
            if mine is None:
                mine = _is_own(code)
            if not mine:
                node.site = (code, f.f_lasti)
                break
            f = f.f_back
        pending = state.pending
        ref = _ref(t)
        pending.append(ref)
        recorded = state.recorded = state.recorded + 1
        if len(pending) > state.compact_at or recorded > _VALUES["max_graph_ops"] > 0:
            state.tidy_pending()
        if callsite.SITES is not None:     # a profile records: note the user's line
            callsite.tag(node)
        if _NO_GRAD:                       # a thread is inside no_grad(): is it this one?
            # `runtime.note_no_grad` written out, with the reference just made (one call
            # and one reference less per op of a model run under no_grad)
            noted = _NO_GRAD.get(_get_ident())
            if noted is not None:
                noted.append(ref)
                noted.ids.add(_id(ref))
                if len(noted) > noted.compact_at:
                    noted.compact()
        return t

    @staticmethod
    def _from_numpy(array: np.ndarray, state: DeviceState) -> "Tensor":
        dtype = D.from_numpy(array.dtype)
        # ascontiguousarray makes a 0-d array 1-d: keep the array's own shape
        buf = state.device.put(np.ascontiguousarray(array).reshape(array.shape))
        return Tensor._wrap(parameter_leaf(buf, tuple(array.shape), dtype), state)

    def __init__(self, data: Any, dtype: Any = None, device: Any = None) -> None:
        """A new tensor holding a copy of `data` (as `torch.tensor` copies)."""
        if type(data) is Tensor:
            state = runtime.get_device(device) if device is not None else data._state
            t = data.to(device=state, dtype=dtype)
            node = t._node if t._node is not data._node else \
                parameter_leaf(data._buffer(), data.shape, data.dtype)
        else:
            state = runtime.get_device(device)
            node = Tensor._from_numpy(host_array(data, dtype), state)._node
        self._node, self._state = _own(node), state
        if self._node.buffer is None:
            self._state.add_pending(self)

    def _assign(self, node: Node) -> None:
        """Make this tensor hold a new value (functional __setitem__)."""
        node = _own(node)
        if node.buffer is None:
            # listed before it holds the node: an interrupt in between must not leave an
            # uncomputed tensor out of `pending` (a later donation could then take a leaf
            # its value needs); listed with its old, computed value it is just skipped
            self._state.pending.append(weakref.ref(self))
            self._node = node
            self._state.add_pending(self, listed=True)
            if callsite.SITES is not None:
                callsite.tag(node)
        else:
            self._node = node

    @staticmethod
    def _wrap_all(nodes: list, state: DeviceState) -> list:
        """`_wrap` of each node (None gives None), all recorded by one user call (a tape's
        gradients): the user's frame is found once, not once per tensor."""
        site = callsite.user_frame_from(2)      # above our caller, lazyarray's own code
        out = []
        for node in nodes:
            if node is None:
                out.append(None)
                continue
            t = _new(Tensor)
            t._state = state
            if node.buffer is None:
                t._node = node = _own(node)
                state.pending.append(_ref(t))
                state.add_pending(t, True, site)
                if callsite.SITES is not None:
                    callsite.tag(node)
            else:
                t._node = node
            out.append(t)
        return out

    @staticmethod
    def _assign_all(tensors: list, nodes: list) -> None:
        """`t._assign(node)` for each pair, all recorded by one user call (an optimizer's
        step rebinding every parameter and its state): the user's frame is found once,
        not once per tensor."""
        site = callsite.user_frame_from(2)      # above our caller, lazyarray's own code
        for t, node in zip(tensors, nodes):
            node = _own(node)
            if node.buffer is None:
                # listed first, as in `_assign` (an interrupt in between leaves no
                # uncomputed tensor out of `pending`)
                state = t._state
                state.pending.append(weakref.ref(t))
                t._node = node
                state.add_pending(t, True, site)
                if callsite.SITES is not None:
                    callsite.tag(node)
            else:
                t._node = node

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
    def size(self) -> Size:
        return Size(self._node.shape)

    def numel(self) -> int:
        return math.prod(self._node.shape)

    def dim(self) -> int:
        return len(self._node.shape)

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
        return runtime.value(self)

    def numpy(self) -> np.ndarray:
        """A host copy of the value (syncs the device)."""
        return np.array(self._state.device.get(self._buffer()), copy=True)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """`np.asarray(t)` may be a read-only view of the buffer; `np.array(t)` (copy=True)
        is a writable copy."""
        if copy is False:
            raise ValueError("np.asarray(tensor, copy=False): a tensor's buffer is not "
                             "writable host memory; leave copy unset (read-only view) or "
                             "copy=True")
        out = np.asarray(self._state.device.get(self._buffer()))
        if dtype is not None and out.dtype != np.dtype(dtype):
            return out.astype(dtype)
        return np.array(out, copy=True) if copy else out

    def item(self) -> Any:
        shape = self._node.shape
        if shape and math.prod(shape) != 1:
            raise ValueError(f"item(): the tensor has {self.size} elements, not 1")
        # ndarray.item() of a one-element array is a Python scalar (a copy): no host copy
        # of the array first (a loop reading its loss pays this at every step)
        buf = self._state.device.get(runtime.value(self))
        return buf.item() if type(buf) is np.ndarray else np.asarray(buf).item()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def __bool__(self) -> bool:
        if self._node.shape and self.size != 1:
            raise ValueError(f"the truth value of a tensor with {self.size} elements is "
                             "ambiguous; use .any() or .all()")
        return bool(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if not self.dtype.is_int:
            raise TypeError(f"only integer tensors can be used as an index, not {self.dtype.name}")
        return int(self.item())

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), separator=", ", prefix="tensor(")
        extra = "" if self.dtype in (D.float32, D.int64, D.bool_) else f", dtype={self.dtype.name}"
        dev = "" if self._state.device.name == runtime.default_device_name() else \
            f", device='{self._state.device.name}'"
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"tensor({body}{extra}{dev}{grad})"

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

    # ---- pickling: the value (a pending tensor is computed first) -----------------------

    def __reduce__(self) -> tuple:
        return _rebuild, (self.numpy(), self._state.device.name,
                          getattr(self, "_flags", 0) & (REQUIRES_GRAD | PARAMETER))

    # ---- conversion and devices ---------------------------------------------------

    def to_device(self, device: Any, /, *, stream: Any = None) -> "Tensor":
        """The array API's name for moving a tensor: `.to(device)`."""
        return self.to(device)

    def to(self, device: Any = None, dtype: Any = None) -> "Tensor":
        if isinstance(device, (D.DType, type)) or device in _DTYPE_NAMES:
            device, dtype = None, device                    # t.to(la.float64)
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

    def __array_function__(self, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        """NumPy's functions on tensors compute with NumPy and give NumPy's results, every
        keyword NumPy's (see numpy_protocol.py; `la.` functions stay lazy)."""
        return numpy_protocol.call(func, args, kwargs, Tensor)

    def __array_namespace__(self, api_version: Optional[str] = None) -> Any:
        """The lazyarray namespace; `api_version` may name any revision of the array API
        up to the one lazyarray declares (each later one extends the earlier)."""
        namespace = sys.modules[__package__]
        known = ("2021.12", "2022.12", "2023.12", "2024.12", namespace.__array_api_version__)
        if api_version is not None and api_version not in known:
            raise ValueError(f"__array_namespace__: api_version {api_version!r} is not one "
                             f"lazyarray implements; valid: None, {', '.join(known)}")
        return namespace

    def __dlpack__(self, stream: Any = None, max_version: Optional[tuple] = None,
                   dl_device: Any = None, copy: Optional[bool] = None) -> Any:
        """Export the buffer (the CPU devices share it, read-only; `copy=True` exports a
        copy). bfloat16 travels as DLPack's bfloat16 code."""
        host = np.asarray(self._state.device.get(self._buffer()))
        if copy:
            host = np.array(host, copy=True)
        return dlpack.export(host, max_version)

    def __dlpack_device__(self) -> tuple:
        return (1, 0)          # kDLCPU: every device exports through host memory


_VALUES = runtime._VALUES      # the config's dict: read at every op
_new = object.__new__
_ref = weakref.ref
_NO_GRAD = runtime.NO_GRAD     # (the dict itself: never rebound)
_get_ident = threading.get_ident
_getframe = sys._getframe
_own_code = callsite._OWN.get      # keyed by id(code): see callsite._OWN
_id = id
_is_own = callsite._is_own


def _rebuild(array: np.ndarray, device: str, flags: int) -> Tensor:
    t = Tensor._from_numpy(array, runtime.get_device(device))
    if flags:
        mark_requires_grad(t, bool(flags & REQUIRES_GRAD))
        t._flags |= flags
    return t


# id -> weak reference, of every live tensor that requires grad (what backward() walks
# to); a dict keyed by id, since a set would compare tensors with ==, which records an op
TRAINABLE: dict = {}
# how many times a tensor's requires_grad changed: a remembered module call
# (lazyarray/guards.py) whose forward may have read the flag checks this one count
GRAD_FLAG_CHANGES = [0]


def mark_requires_grad(t: Tensor, flag: bool) -> None:
    """Set or clear t's requires_grad flag and its entry in TRAINABLE."""
    flags = getattr(t, "_flags", 0)
    key = id(t)
    if flag != bool(flags & REQUIRES_GRAD):
        GRAD_FLAG_CHANGES[0] += 1
    if flag:
        t._flags = flags | REQUIRES_GRAD
        TRAINABLE[key] = weakref.ref(t, lambda _r, key=key: TRAINABLE.pop(key, None))
    else:
        t._flags = flags & ~(REQUIRES_GRAD | PARAMETER)
        TRAINABLE.pop(key, None)


def _own(node: Node) -> Node:
    """A tensor's own node. Kept constants (0, 1, -1) are shared by every graph; a tensor
    holding one directly gets a copy, so that materializing it does not turn the shared
    constant into a parameter of every later module."""
    if node.op != "constant" or node.buffer is not None:
        return node
    return Node("constant", (), node.shape, node.dtype, node.attrs, value=node.value)


def raise_mixed_devices(a: DeviceState, b: DeviceState) -> None:
    raise ValueError(f"tensors on different devices: {a.device.name!r} and {b.device.name!r}; "
                     f"move one with .to({b.device.name!r}) or .to({a.device.name!r})")


def host_array(obj: Any, dtype: Any = None) -> np.ndarray:
    """A NumPy array of a supported dtype from a NumPy array, a (nested) list or a scalar.
    Python floats default to float32 (ints to int64), as in PyTorch; NumPy arrays keep
    their dtype. An array already of the right dtype is returned as is (not copied)."""
    if dtype is not None:
        return np.asarray(obj, dtype=D.to_dtype(dtype).np)
    arr = np.asarray(obj)
    if arr.dtype == np.float64 and not isinstance(obj, (np.ndarray, np.generic)):
        arr = arr.astype(np.float32)
    elif arr.dtype == np.complex128 and not isinstance(obj, (np.ndarray, np.generic)):
        arr = arr.astype(np.complex64)        # Python complex: complex64, as in PyTorch
    if arr.dtype.kind not in "biufc" and arr.dtype != D.bfloat16.np:
        raise TypeError(f"asarray: unsupported element type {arr.dtype} "
                        f"(valid: {', '.join(d.name for d in D.EVERY)})")
    return arr
