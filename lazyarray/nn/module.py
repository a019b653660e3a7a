"""`Module`: a tree of layers holding parameters (trainable tensors) and buffers
(running statistics).

Parameters are plain `Tensor`s, marked by `Parameter(t)` (which returns `t` itself, now
requiring grad, as PyTorch's parameters do) and registered when assigned to a module
attribute.
An optimizer updates a parameter by rebinding its node (`Tensor._assign`), so the objects
a module holds keep their identity across steps, and `state_dict` always sees the latest
values.
"""
from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any, Iterator

import numpy as np

from .. import backward, config, runtime
from . import length_buckets, module_reuse
from ..creation import asarray
from ..tensor import PARAMETER, Tensor

_VALUES = config._values        # read at every module call: the dict, not the attribute
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def Parameter(tensor: Any = None, requires_grad: bool = True) -> Tensor:
    """Mark a tensor as trainable and return it (the same object, still an ordinary Tensor):
    assigned to a module attribute, it is registered as a parameter; it requires grad
    (so `backward()` fills its `.grad`) unless `requires_grad=False`."""
    if type(tensor) is not Tensor:
        tensor = asarray(np.zeros((0,), np.float32) if tensor is None else tensor)
    if requires_grad and tensor.dtype.is_float:
        backward.set_requires_grad(tensor, True)
    tensor._flags = getattr(tensor, "_flags", 0) | PARAMETER
    return tensor


def is_parameter(value: Any) -> bool:
    return type(value) is Tensor and bool(getattr(value, "_flags", 0) & PARAMETER)


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
        if is_parameter(value):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # parameters first: a layer's forward reads its weight and bias at every call
        d = self.__dict__
        params = d.get("_parameters")
        if params is not None and name in params:
            return params[name]
        for table in ("_buffers", "_modules"):
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

    def named_children(self) -> Iterator[tuple]:
        return iter(self._modules.items())

    def apply(self, fn: Any) -> "Module":
        """Call `fn` on every submodule (children first) and then on this module; returns
        self (PyTorch's weight-init idiom: `model.apply(init_weights)`)."""
        for m in self._modules.values():
            m.apply(fn)
        fn(self)
        return self

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple]:
        """(dotted name, tensor) for every parameter: a shared (tied) tensor once, under
        its first name, unless `remove_duplicate=False` (PyTorch's defaults)."""
        seen = set()
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mod_name, m in modules:
            for name, t in m._parameters.items():
                if not remove_duplicate or id(t) not in seen:
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

    def _state_items(self, prefix: str = "") -> Iterator[tuple]:
        """(dotted name, tensor) in PyTorch's state_dict order: each module's parameters,
        then its buffers, then its children's, depth first. A shared (tied) tensor comes
        under every name it has, as PyTorch lists it (a GPT's `wte.weight` and
        `lm_head.weight`), so checkpoints of tied models load strictly both ways."""
        for mod_name, m in self.named_modules(prefix):
            for table in (m._parameters, m._buffers):
                for name, t in table.items():
                    if t is not None:
                        yield (f"{mod_name}.{name}" if mod_name else name), t

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Every parameter and buffer by dotted name (PyTorch's names and order, a tied
        tensor under each of its names), as host NumPy arrays (syncs once)."""
        items = list(self._state_items())
        runtime.sync()
        host: dict = {}                      # a tied tensor is read once, shared by its names
        out: "OrderedDict[str, np.ndarray]" = OrderedDict()
        for name, t in items:
            if id(t) not in host:
                host[id(t)] = t.numpy()
            out[name] = host[id(t)]
        return out

    def load_state_dict(self, state: Any, strict: bool = True) -> IncompatibleKeys:
        """Set parameters and buffers from arrays (or tensors) by name; the tensor objects
        stay the same. With `strict`, a missing or unexpected key is an error; without,
        they are returned as (missing_keys, unexpected_keys)."""
        own = OrderedDict(self._state_items())
        present = {id(t) for k, t in own.items() if k in state}
        # a tied tensor's other name is not missing when one of its names is given (a file
        # that lists it once, as lazyarray wrote before it listed every name)
        missing = [k for k, t in own.items() if k not in state and id(t) not in present]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"{type(self).__name__}.load_state_dict: "
                           + _describe_keys(missing, unexpected, own, state)
                           + " (pass strict=False to load the rest)")
        for name, t in own.items():
            if name in state:
                _load_one(self, name, t, state[name])
        return IncompatibleKeys(missing, unexpected)
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

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear every parameter's `.grad` (set to None, or to zeros)."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else p.grad * 0

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            backward.set_requires_grad(p, requires_grad)
            p._flags |= PARAMETER
        return self

    # ---- calling --------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _VALUES["length_buckets"] and length_buckets.applies(self):
            return length_buckets.call(self, self.forward, args, kwargs)
        if _VALUES["module_reuse"]:
            return module_reuse.call(self, args, kwargs)
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


def _owner(root: Module, name: str) -> str:
    """The module holding a dotted state key, as `ClassName at 'path'`."""
    path = name.rpartition(".")[0]
    m = root
    for part in path.split(".") if path else ():
        m = m._modules.get(part, m)
    return f"{type(m).__name__} at {path!r}" if path else type(m).__name__


def _describe_keys(missing: list, unexpected: list, own: dict, state: Any) -> str:
    parts = []
    if missing:
        parts.append("missing keys " + ", ".join(repr(k) for k in missing))
    if unexpected:
        parts.append("unexpected keys " + ", ".join(repr(k) for k in unexpected)
                     + f" (the module's keys: {', '.join(list(own)[:12])}"
                     + (", ..." if len(own) > 12 else "") + ")")
    return "; ".join(parts)


def _load_one(root: Module, name: str, t: Tensor, value: Any) -> None:
    if type(value) is Tensor:
        value = value.numpy()
    value = np.asarray(value)
    if tuple(value.shape) != t.shape:
        raise ValueError(f"load_state_dict: {name!r} (in {_owner(root, name)}) has shape "
                         f"{tuple(value.shape)} in the checkpoint, the module expects {t.shape}")
    fresh = Tensor._from_numpy(value.astype(t.dtype.np, copy=False), t._state)
    t._assign(fresh._node)
