"""The one way passes rebuild a module: instruction by instruction, with a rule that may
replace each one by an existing value or by new instructions.

A rule gets the `Builder` and the instruction with its operands already renumbered into
the new module; it returns the position of the value that replaces it, or None to keep
it. A replacement must have the instruction's shape and dtype (checked: a rule that
breaks this is a compiler bug, not a user error).
"""
from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from ..literal import Literal
from ..module import Instruction, Module
from ..provenance import set_origins

Rule = Callable[["Builder", Instruction], Optional[int]]


class Builder:
    def __init__(self) -> None:
        self.instructions: list = []

    def add(self, ins: Instruction) -> int:
        self.instructions.append(ins)
        return len(self.instructions) - 1

    def emit(self, op: str, operands: tuple, shape: tuple, dtype, attrs: dict) -> int:
        return self.add(Instruction(op, operands, shape, dtype, attrs))

    def constant(self, array: np.ndarray, dtype) -> int:
        array = np.asarray(array, dtype=dtype.np)
        return self.emit("constant", (), array.shape, dtype, {"value": Literal(array)})

    def __getitem__(self, pos: int) -> Instruction:
        return self.instructions[pos]


def rebuild(module: Module, rule: Rule, pass_name: str) -> Module:
    b = Builder()
    where: list = []
    origins: list = []        # per new instruction: the old positions it stands for
    for old, ins in enumerate(module.instructions):
        cand = Instruction(ins.op, tuple(where[o] for o in ins.operands), ins.shape,
                           ins.dtype, ins.attrs)
        made = len(b.instructions)
        pos = rule(b, cand)
        if pos is None:
            pos = b.add(cand)
        else:
            got = b[pos]
            if got.shape != ins.shape or got.dtype is not ins.dtype:
                raise RuntimeError(f"{pass_name}: replaced {ins.op} {ins.dtype.short}"
                                   f"{list(ins.shape)} by {got.op} {got.dtype.short}"
                                   f"{list(got.shape)}")
        where.append(pos)
        origins.extend([old] for _ in range(len(origins), len(b.instructions)))
        if pos < made:                 # replaced by an earlier value: it stands for both
            origins[pos].append(old)
    out = Module(module.name, b.instructions, tuple(where[o] for o in module.outputs))
    return set_origins(out, origins)


def splat(b: Builder, pos: int) -> Optional[np.generic]:
    """The one value every element of `pos` holds, when it is a constant (possibly
    broadcast or reshaped); None otherwise or when empty."""
    ins = b[pos]
    while ins.op in ("broadcast_in_dim", "reshape"):
        ins = b[ins.operands[0]]
    if ins.op != "constant":
        return None
    a = ins.attrs["value"].array
    if a.size == 0:
        return None
    first = a.reshape(-1)[0]
    if a.size > 1 and not np.all(a == first):
        return None
    return first
