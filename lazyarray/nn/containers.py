"""Module containers, as in PyTorch: what they hold is registered (its parameters appear in
`parameters()` and `state_dict()` under the index or key: `layers.0.weight`)."""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

from ..tensor import Tensor
from .module import Module, Parameter


def _index(container: Any, i: int) -> int:
    n = len(container)
    if not -n <= i < n:
        raise IndexError(f"{type(container).__name__}: index {i} is out of range for "
                         f"{n} entries")
    return i % n


class ModuleList(Module):
    """A list of modules, each registered under its index."""

    def __init__(self, modules: Optional[Iterable[Module]] = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> "ModuleList":
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList.append: expected a Module, got {type(module).__name__}")
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> "ModuleList":
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        for m in items:
            self.append(m)

    def __getitem__(self, i: Any) -> Any:
        items = list(self._modules.values())
        if isinstance(i, slice):
            return ModuleList(items[i])
        return items[_index(self, i)]

    def __setitem__(self, i: int, module: Module) -> None:
        self.add_module(str(_index(self, i)), module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def __iadd__(self, modules: Iterable[Module]) -> "ModuleList":
        return self.extend(modules)


class ModuleDict(Module):
    """A dict of modules, each registered under its key (insertion order kept)."""

    def __init__(self, modules: Any = None) -> None:
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules: Any) -> None:
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def __getitem__(self, key: str) -> Module:
        if key not in self._modules:
            raise KeyError(f"ModuleDict: no module {key!r} (keys: {list(self._modules)})")
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleDict[{key!r}]: expected a Module, got "
                            f"{type(module).__name__}")
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._modules))

    def keys(self) -> list:
        return list(self._modules.keys())

    def values(self) -> list:
        return list(self._modules.values())

    def items(self) -> list:
        return list(self._modules.items())


class ParameterList(Module):
    """A list of parameters, each registered under its index."""

    def __init__(self, values: Optional[Iterable[Any]] = None) -> None:
        super().__init__()
        for v in values or ():
            self.append(v)

    def append(self, value: Any) -> "ParameterList":
        self._parameters[str(len(self._parameters))] = Parameter(value)
        return self

    def extend(self, values: Iterable[Any]) -> "ParameterList":
        for v in values:
            self.append(v)
        return self

    def __getitem__(self, i: int) -> Tensor:
        return list(self._parameters.values())[_index(self, i)]

    def __setitem__(self, i: int, value: Any) -> None:
        self._parameters[str(_index(self, i))] = Parameter(value)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Tensor]:
        return iter(list(self._parameters.values()))


class ParameterDict(Module):
    """A dict of parameters, each registered under its key."""

    def __init__(self, values: Any = None) -> None:
        super().__init__()
        for k, v in (values.items() if hasattr(values, "items") else values or ()):
            self[k] = v

    def __getitem__(self, key: str) -> Tensor:
        return self._parameters[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self._parameters[key] = Parameter(value)

    def __contains__(self, key: str) -> bool:
        return key in self._parameters

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._parameters))

    def keys(self) -> list:
        return list(self._parameters.keys())

    def values(self) -> list:
        return list(self._parameters.values())

    def items(self) -> list:
        return list(self._parameters.items())


__all__ = ["ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]
