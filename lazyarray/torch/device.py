"""`torch.device`: a device name with PyTorch's `.type` and `.index`; a str, so every
lazyarray function taking `device=` takes it as it is."""
from __future__ import annotations

from typing import Any, Optional


class device(str):
    """device("cuda:1"), device("cuda", 1), device("cpu"); compares equal to its name."""

    def __new__(cls, type: Any, index: Optional[int] = None) -> "device":
        if isinstance(type, device):
            return type
        name = type if isinstance(type, str) else _name_of(type)
        if not isinstance(name, str):
            raise TypeError(f"device: expected a name like 'cpu' or 'cuda:0', got {type!r}")
        kind, _, num = name.partition(":")
        if kind not in ("cpu", "cuda", "interpreter"):
            raise ValueError(f"device: lazyarray has no {kind!r} device (cpu, cuda, "
                             "interpreter)")
        if num:
            if index is not None:
                raise ValueError(f"device: index given twice ({name!r} and {index})")
            index = int(num)
        self = str.__new__(cls, kind if index is None else f"{kind}:{index}")
        self.type, self.index = kind, index
        return self

    def __repr__(self) -> str:
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{idx})"

    def __hash__(self) -> int:
        return str.__hash__(self)

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, str):
            other = _name_of(other)
            if other is None:
                return NotImplemented
            return str.__eq__(self.type if self.index is None else self, other) or \
                str.__eq__(self, other)
        return str.__eq__(self, other)


def _name_of(state: Any) -> Optional[str]:
    """A lazyarray device (`x.device`) as a name: 'cpu', 'cuda:1'."""
    kind = getattr(state, "type", None)
    if not isinstance(kind, str):
        return None
    index = getattr(state, "index", 0)
    return f"{kind}:{index}" if index else kind
