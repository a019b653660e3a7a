"""`Module`: a tree of layers holding parameters (trainable tensors) and buffers
(running statistics).

Parameters are plain `Tensor`s, marked by `Parameter(t)` (which returns `t` itself) and
registered when assigned to a module attribute.
An optimizer updates a parameter by rebinding its node (`Tensor._assign`), so the objects
a module holds keep their identity across steps, and `state_dict` always sees the latest
values.
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Iterator

import numpy as np

from .. import runtime
from ..tensor import Tensor


_MARKED: dict = {}        # id(tensor) -> weak reference, for tensors marked as parameters


def Parameter(tensor: Any) -> Tensor:
    """Mark a tensor as trainable and return it (the same object, still an ordinary Tensor):
    assigned to a module attribute, it is registered as a parameter."""
    if type(tensor) is not Tensor:
        from ..creation import asarray
        tensor = asarray(tensor)
    key = id(tensor)
    # a dict keyed by id, not a WeakSet: a set would compare tensors with ==, which records
    _MARKED[key] = weakref.ref(tensor, lambda _ref, key=key: _MARKED.pop(key, None))
    return tensor


def is_parameter(value: Any) -> bool:
    ref = _MARKED.get(id(value))
    return ref is not None and ref() is value


class Module:
    """Base class of layers: holds parameters, buffers and sub-modules by attribute name."""

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration ---------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 f"assigning {name!r}")
        if name in self._buffers and (type(value) is Tensor or value is None):
            self._buffers[name] = value         # a buffer stays a buffer when reassigned
            return
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if type(value) is Tensor and is_parameter(value):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, tensor: Any) -> None:
        setattr(self, name, Parameter(tensor))

    def register_buffer(self, name: str, tensor: Tensor) -> None:
        """A tensor that is state but not trained (BatchNorm's running statistics)."""
        for table in (self._parameters, self._modules):
            table.pop(name, None)
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor

    def add_module(self, name: str, module: "Module") -> None:
        setattr(self, name, module)

    # ---- traversal ------------------------------------------------------------------

    def named_modules(self, prefix: str = "") -> Iterator[tuple]:
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def children(self) -> Iterator["Module"]:
        return iter(self._modules.values())

    def named_parameters(self, prefix: str = "") -> Iterator[tuple]:
        """(dotted name, tensor) for every parameter, each tensor once."""
        seen = set()
        for mod_name, m in self.named_modules(prefix):
            for name, t in m._parameters.items():
                if id(t) not in seen:
                    seen.add(id(t))
                    yield (f"{mod_name}.{name}" if mod_name else name), t

    def parameters(self) -> list:
        return [t for _, t in self.named_parameters()]

    def named_buffers(self, prefix: str = "") -> Iterator[tuple]:
        for mod_name, m in self.named_modules(prefix):
            for name, t in m._buffers.items():
                if t is not None:
                    yield (f"{mod_name}.{name}" if mod_name else name), t

    def buffers(self) -> list:
        return [t for _, t in self.named_buffers()]

    # ---- state ----------------------------------------------------------------------

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Every parameter and buffer by dotted name, as host NumPy arrays (syncs once)."""
        items = list(self.named_parameters()) + list(self.named_buffers())
        runtime.sync()
        return OrderedDict((name, t.numpy()) for name, t in items)

    def load_state_dict(self, state: Any, strict: bool = True) -> None:
        """Set parameters and buffers from arrays by name; the tensor objects stay the same."""
        own = OrderedDict(list(self.named_parameters()) + list(self.named_buffers()))
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys "
                           f"{unexpected}")
        for name, t in own.items():
            if name not in state:
                continue
            value = np.asarray(state[name])
            if tuple(value.shape) != t.shape:
                raise ValueError(f"load_state_dict: {name!r} has shape {tuple(value.shape)}, "
                                 f"the module expects {t.shape}")
            fresh = Tensor._from_numpy(value.astype(t.dtype.np, copy=False), t._state)
            t._assign(fresh._node)

    # ---- modes and devices ----------------------------------------------------------

    def train(self, mode: bool = True) -> "Module":
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def to(self, device: Any = None, dtype: Any = None) -> "Module":
        """Move (or cast) every parameter and buffer in place: the tensor objects held by
        the module, and by an optimizer built on them, are the same afterwards."""
        for t in self.parameters() + self.buffers():
            moved = t.to(device=device, dtype=dtype if t.dtype.is_float else None)
            if moved is not t:
                _rebind(t, moved)
        return self

    def zero_grad(self) -> None:
        """Gradients are values returned by the tape, not stored: nothing to clear."""

    # ---- calling --------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            child = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {child}")
        return "\n".join(lines) + (")" if len(lines) == 1 else "\n)")


def _rebind(t: Tensor, moved: Tensor) -> None:
    """Make `t` hold `moved`'s value on `moved`'s device (a tensor object keeps identity)."""
    t._state = moved._state
    t._assign(moved._node)
