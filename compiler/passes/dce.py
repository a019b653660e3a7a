"""Dead code elimination.

Rule: an instruction no module output depends on is removed -> gone. Parameters always
stay (executables take their arguments by parameter number).
"""
from __future__ import annotations

from ..hlo.module import Instruction, Module
from ..planning.provenance import set_origins


def dce(module: Module) -> Module:
    ins = module.instructions
    live, stack = set(), list(module.outputs)
    while stack:
        p = stack.pop()
        if p not in live:
            live.add(p)
            stack.extend(ins[p].operands)
    keep = [p for p, i in enumerate(ins) if p in live or i.op == "parameter"]
    if len(keep) == len(ins):
        return module
    where = {p: n for n, p in enumerate(keep)}
    new = [Instruction(ins[p].op, tuple(where[o] for o in ins[p].operands), ins[p].shape,
                       ins[p].dtype, ins[p].attrs) for p in keep]
    out = Module(module.name, new, tuple(where[o] for o in module.outputs))
    return set_origins(out, [[p] for p in keep])
