"""`Tensor.__getitem__` and `Tensor.__setitem__`: resolve the key's tensors, then index
through `lazyarray.ops.indexing`.

What the runtime adds to the ops layer: tensors in the key become their nodes (on the
indexed tensor's device); NumPy index arrays become parameters (so that new index values
do not change the fingerprint); boolean tensor masks are materialized (a graph break),
except in `x[mask] = value`, which is a select.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .compiler.hlo import dtypes as D
from .compiler.graph.node import Node
from .ops import indexing as ix
from .graph_break import host_mask
from .tensor import Tensor, raise_mixed_devices


def _lifter(t: Tensor) -> Callable[[np.ndarray], Node]:
    def lift(array: np.ndarray) -> Node:
        return Tensor._from_numpy(np.asarray(array, order="C"), t._state)._node
    return lift


def _is_bool_tensor(k: Any) -> bool:
    return type(k) is Tensor and k.dtype is D.bool_


def _resolve_one(k: Any, t: Tensor, op: str) -> Any:
    if type(k) is Tensor:
        if k._state is not t._state:
            raise_mixed_devices(k._state, t._state)
        if k.dtype is D.bool_:
            return host_mask(op, k)
        return k._node
    if isinstance(k, list) and any(type(e) is Tensor for e in k):
        return np.asarray([np.asarray(e) for e in k])
    return k


def _resolve(key: Any, t: Tensor, op: str) -> Any:
    if isinstance(key, tuple):
        return tuple(_resolve_one(k, t, op) for k in key)
    return _resolve_one(key, t, op)


def getitem(t: Tensor, key: Any) -> Tensor:
    """t[key] with NumPy semantics (a new lazy tensor; never a view)."""
    # a basic key (ints, slices, None, ...) remembered for t's type: no tensors in it to
    # resolve, no lifter to make (`x[:, -1]`, `t[:, None]` at every token of a decoder)
    node = ix.replayed(t._node, key)
    if node is not None:
        return Tensor._wrap(node, t._state)
    key = _resolve(key, t, "boolean mask indexing")
    return Tensor._wrap(ix.getitem(t._node, key, _lifter(t)), t._state)


def _value(value: Any, t: Tensor) -> Any:
    if type(value) is Tensor:
        if value._state is not t._state:
            raise_mixed_devices(value._state, t._state)
        return value._node
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float)):
        return value
    array = np.asarray(value)
    kinds = "biufc" if t.dtype.kind == "complex" else "biuf"
    if array.dtype.kind not in kinds and array.dtype != D.bfloat16.np:
        raise TypeError(f"setitem: cannot assign a value of type {type(value).__name__} "
                        f"to a {t.dtype.name} tensor (complex values need a complex tensor)")
    if isinstance(value, complex):
        return value
    return Tensor._from_numpy(array, t._state)._node


def setitem(t: Tensor, key: Any, value: Any) -> None:
    """`t[key] = value`: t now holds a new lazy value; tensors read from t earlier keep
    theirs (updates are functional, not through views)."""
    v = _value(value, t)
    v_shape = v.shape if isinstance(v, Node) else ()
    if _is_bool_tensor(key) and ix.mask_fits(t.shape, key.shape, v_shape):
        if key._state is not t._state:
            raise_mixed_devices(key._state, t._state)
        node = ix.mask_setitem(t._node, key._node, v)
    else:
        key = _resolve(key, t, "boolean mask assignment")
        node = ix.setitem(t._node, key, v, _lifter(t))
    t._assign(node)
