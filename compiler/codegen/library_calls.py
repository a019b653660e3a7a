"""Steps that call a library instead of generated code, as the primitives' stanzas name
them (`Primitive.library`): the same for every target."""
from __future__ import annotations

from ..module import Module
from ..primitive import PRIMITIVES


def library_step(module: Module, kernel: str, pos: int) -> dict:
    """The Program step running instruction `pos` through its stanza's library call."""
    ins = module.instructions[pos]
    call = PRIMITIVES[ins.op].library
    if call is None:
        raise ValueError(f"{ins.op}: this target generates no code for it and its stanza "
                         f"names no library call")
    shapes = [module.instructions[o].shape for o in ins.operands]
    return {"type": "library", "kernel": kernel, "call": call.name, "op": ins.op, "pos": pos,
            "operands": list(ins.operands), "args": call.args(ins, shapes) if call.args else {}}
