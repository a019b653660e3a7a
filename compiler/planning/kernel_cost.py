"""What each kernel of a plan moves and computes, and which traced ops it stands for: the
figures a profile divides by a kernel's time (achieved GB/s and GFLOP/s) and the link
from a kernel back to the user's lines (through `provenance`).

Bytes are what the kernel reads from and writes to buffers (an operand read through a
broadcast counts once: its buffer's size). Flops count one per element for each
arithmetic elementwise op and for each element a reduction combines, and 2*M*N*K for a
matrix product; index-moving ops and conversions count none.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import primitive as P
from .plan import ExecutionPlan
from .provenance import sources_of

_NOT_OPS = frozenset(("parameter", "constant", "tuple"))    # not listed as a kernel's ops


def _numel(shape: tuple) -> int:
    return int(np.prod(shape, dtype=np.int64))


def nbytes(ins: Any) -> int:
    return _numel(ins.shape) * ins.dtype.itemsize


def flops(module: Any, pos: int) -> int:
    """Floating-point (or integer) operations instruction `pos` performs: its stanza's
    `flops` (compiler/primitive.py)."""
    ins = module.instructions[pos]
    operands = tuple(module.instructions[o] for o in ins.operands)
    return P.PRIMITIVES[ins.op].flops(ins, operands)


def kernel_info(plan: ExecutionPlan) -> dict:
    """kernel name -> {"ops": op names of its members, in order; "sources": positions in
    the module given to compile (the captured graph) it stands for; "bytes_read",
    "bytes_written", "flops"} (JSON-able: it is stored with a cached program)."""
    m = plan.module
    ins = m.instructions
    sources = sources_of(m)
    out = {}
    for k in plan.kernels:
        members = list(dict.fromkeys(list(k.members) + list(k.outputs)))
        srcs = sorted({s for p in members for s in sources[p]}) if sources is not None else []
        out[k.name] = {
            "kind": k.kind,
            "ops": [ins[p].op for p in members if ins[p].op not in _NOT_OPS],
            "sources": srcs,
            "bytes_read": sum(nbytes(ins[p]) for p in set(k.inputs)),
            "bytes_written": sum(nbytes(ins[p]) for p in set(k.outputs)),
            "flops": sum(flops(m, p) for p in members),
        }
    return out
