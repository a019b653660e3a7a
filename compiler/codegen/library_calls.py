"""What the stanzas of LIBRARY and OPAQUE primitives say about their code, for every
target: the loops an opaque op's stanza gives (`Primitive.emit`), else the library call
it names (`Primitive.library`)."""
from __future__ import annotations

from ..hlo.module import Module
from typing import Optional

from ..primitive import PRIMITIVES
from ..program import LibraryStep


def library_step(module: Module, kernel: str, pos: int) -> LibraryStep:
    """The Program step running instruction `pos` through its stanza's library call."""
    ins = module.instructions[pos]
    call = PRIMITIVES[ins.op].library
    if call is None:
        raise ValueError(f"{ins.op}: this target generates no code for it and its stanza "
                         f"names no library call")
    shapes = [module.instructions[o].shape for o in ins.operands]
    return LibraryStep(kernel=kernel, call=call.name, op=ins.op, pos=pos,
                       operands=list(ins.operands),
                       args=call.args(ins, shapes) if call.args else {})


def opaque_loops(module: Module, pos: int) -> Optional[list]:
    """The loops (compiler/primitive.py `Loop`) computing an OPAQUE instruction, or None
    where its stanza has none for it (then its library call serves)."""
    ins = module.instructions[pos]
    emit = PRIMITIVES[ins.op].emit
    if emit is None:
        return None
    return emit(ins, [module.instructions[o] for o in ins.operands])
