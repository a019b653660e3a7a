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

from ..hlo.literal import Literal
from ..hlo.module import Instruction, Module
from ..primitive import PRIMITIVES
from ..planning.provenance import set_origins

Rule = Callable[["Builder", Instruction], Optional[int]]


class Builder:
    sole_user = False       # set by a pass that counts users (see algebraic_simplifier)

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
    """The module with `rule` applied to each instruction in order. When the rule keeps
    every instruction, the input module itself comes back (so the pipeline's fixed point
    is seen without comparing modules, and nothing is copied)."""
    b = Builder()
    new = b.instructions
    where: list = []
    origins: list = []        # per new instruction: the old positions it stands for
    changed = False
    for old, ins in enumerate(module.instructions):
        operands = ins.operands
        moved = tuple([where[o] for o in operands]) if operands else operands
        # an instruction whose operands did not move is reused: instructions are immutable
        cand = ins if moved == operands else Instruction(ins.op, moved, ins.shape,
                                                         ins.dtype, ins.attrs)
        made = len(new)
        pos = rule(b, cand)
        if pos is None:
            pos = len(new)
            new.append(cand)
            if pos != old:             # the rule emitted instructions before it
                changed = True
        else:
            changed = True
            got = new[pos]
            if got.shape != ins.shape or got.dtype is not ins.dtype:
                raise RuntimeError(f"{pass_name}: replaced {ins.op} {ins.dtype.short}"
                                   f"{list(ins.shape)} by {got.op} {got.dtype.short}"
                                   f"{list(got.shape)}")
        where.append(pos)
        while len(origins) < len(new):
            origins.append([old])
        if pos < made:                 # replaced by an earlier value: it stands for both
            origins[pos].append(old)
    if not changed:
        return module
    out = Module(module.name, new, tuple(where[o] for o in module.outputs))
    return set_origins(out, origins)


def splat(b: Builder, pos: int) -> Optional[np.generic]:
    """The one value every element of `pos` holds, when it is a constant (possibly
    broadcast or reshaped); None otherwise or when empty."""
    ins = b[pos]
    while PRIMITIVES[ins.op].repeats or PRIMITIVES[ins.op].linear:
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
