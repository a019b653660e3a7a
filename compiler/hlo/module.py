"""An HLO module: instructions in topological order, operands by position.

Passes take a module and return a new one; nothing mutates a module after it is built.
"""
from __future__ import annotations

from typing import Any, Iterable

from .dtypes import DType


class Instruction:
    __slots__ = ("op", "operands", "shape", "dtype", "attrs")

    def __init__(self, op: str, operands: tuple, shape: tuple, dtype: DType, attrs: dict) -> None:
        self.op = op
        self.operands = tuple(operands)   # positions of earlier instructions
        self.shape = tuple(shape)
        self.dtype = dtype
        self.attrs = dict(attrs)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def key(self) -> tuple:
        d = self.dtype
        short = d.short if type(d) is not tuple else tuple(x.short for x in d)
        return (self.op, self.operands, self.shape, short, tuple(sorted(self.attrs.items())))

    def __repr__(self) -> str:
        return f"<Instruction {self.op} {self.dtype.short}{list(self.shape)} {self.operands}>"


class Module:
    def __init__(self, name: str, instructions: list, outputs: Iterable[int]) -> None:
        self.name = name
        self.instructions = list(instructions)
        self.outputs = tuple(outputs)

    @property
    def parameters(self) -> list:
        """Positions of the parameter instructions, ordered by parameter number (found
        once: a module never changes, and a loop's body is asked at every call)."""
        ps = self.__dict__.get("_parameters")
        if ps is None:
            at = self.instructions
            ps = [i for i, ins in enumerate(at) if ins.op == "parameter"]
            ps = self._parameters = tuple(sorted(ps, key=lambda i: at[i].attrs["number"]))
        return list(ps)

    def signature(self) -> tuple:
        """((shape, dtype) of each parameter by number, of each output): what a
        control-flow op checks its operands against at every call (found once)."""
        sig = self.__dict__.get("_signature")
        if sig is None:
            at = self.instructions
            sig = self._signature = (
                [(at[p].shape, at[p].dtype) for p in self.parameters],
                [(at[o].shape, at[o].dtype) for o in self.outputs])
        return sig

    def sub_computations(self) -> list:
        """(position, attribute name, module) of every sub-computation the instructions
        hold directly (a tuple attribute of modules: each, with its index)."""
        out = []
        for p, ins in enumerate(self.instructions):
            for k, v in ins.attrs.items():
                if isinstance(v, Module):
                    out.append((p, k, v))
                elif isinstance(v, tuple) and v and all(isinstance(m, Module) for m in v):
                    out.extend((p, f"{k}[{j}]", m) for j, m in enumerate(v))
        return out

    def users(self) -> list:
        """users[i]: positions of the instructions that read instruction i."""
        out: list = [[] for _ in self.instructions]
        for i, ins in enumerate(self.instructions):
            for o in ins.operands:
                out[o].append(i)
        return out

    def __eq__(self, other: Any) -> bool:
        if other is self:
            return True
        if not isinstance(other, Module) or self.outputs != other.outputs \
                or len(self.instructions) != len(other.instructions):
            return False
        mine, theirs = self.__dict__.get("_keys"), other.__dict__.get("_keys")
        if mine is not None and theirs is not None:
            # both hashed (attribute values, compared again at every sync that holds them:
            # a replayed module call's computation): by the keys kept then, at C speed
            return self._hash == other._hash and mine == theirs
        # passes reuse the instructions they keep: most pairs are one object
        return all(a is b or a.key() == b.key()
                   for a, b in zip(self.instructions, other.instructions))

    def __hash__(self) -> int:
        # a module is an attribute value of control-flow ops (a loop's body): attributes
        # are hashed into cache keys, so equal modules hash alike (the name is left out,
        # as __eq__ leaves it out); the keys are kept for __eq__ (a module never changes)
        h = getattr(self, "_hash", None)
        if h is None:
            self._keys = tuple(i.key() for i in self.instructions)
            h = self._hash = hash((self.outputs, self._keys))
        return h

    def __str__(self) -> str:
        from .printer import print_module
        return print_module(self)

