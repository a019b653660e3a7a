"""The reference device: runs a module one instruction at a time with each primitive's
NumPy reference. Every compiled result is tested against it."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..compiler import primitive as P
from ..compiler.hlo.module import Module
from .device import HostDevice


class InterpretedExecutable:
    def __init__(self, module: Module) -> None:
        self.module = module
        self.param_of = {i: module.instructions[i].attrs["number"] for i in module.parameters}

    def run(self, args: list) -> list:
        values: list = [None] * len(self.module.instructions)
        with np.errstate(all="ignore"):
            for i, ins in enumerate(self.module.instructions):
                values[i] = evaluate(ins, [values[o] for o in ins.operands],
                                     args[self.param_of[i]] if ins.op == "parameter" else None)
        return [values[o] for o in self.module.outputs]


def evaluate(ins: Any, operands: list, arg: Any = None) -> Any:
    """One instruction's value from its operands' values (a tuple of arrays for a while's
    or a conditional's tuple result: their references run the sub-computations)."""
    if ins.op == "parameter":
        return np.asarray(arg, dtype=ins.dtype.np).reshape(ins.shape)
    if ins.op == "constant":
        return ins.attrs["value"].array.astype(ins.dtype.np).reshape(ins.shape)
    out = P.PRIMITIVES[ins.op].reference(*operands, **ins.attrs)
    if isinstance(ins.dtype, tuple):
        return tuple(np.asarray(v, dtype=d.np).reshape(s)
                     for v, s, d in zip(out, ins.shape, ins.dtype))
    return np.asarray(out, dtype=ins.dtype.np).reshape(ins.shape)


class InterpreterDevice(HostDevice):
    name = "interpreter"
    platform = "interpreter"

    def compile(self, module: Module) -> InterpretedExecutable:
        return InterpretedExecutable(module)

