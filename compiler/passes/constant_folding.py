"""Constant folding: evaluate what depends only on constants, with the primitives' own
NumPy references (the interpreter's semantics, so folding cannot change a result).

Rules:

- `op(constant, ...) -> constant` when every operand is a constant and the result has at
  most MAX_ELEMENTS elements (a big literal would cost memory and fingerprint bytes);
- `elementwise(splat(a), splat(b), ...) -> broadcast_in_dim(constant(f(a, b, ...)))` for
  splats of rank-0 constants, at any size (the result stays one scalar);
- never folded: leaves (`iota` stays a computation that fuses, not a stored array),
  primitives that are not pure (collectives: every process must run them) and
  `broadcast_in_dim` of a rank-0 constant (already a splat, which fusion keeps in
  registers). An evaluation that raises is left for run time, which reports it.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..hlo.module import Instruction, Module
from ..primitive import CONTROL, ELEMENTWISE, LEAF, PRIMITIVES
from .rewrite import Builder, rebuild
from ..hlo.shapes import num_elements

MAX_ELEMENTS = 1024


def _value(ins: Instruction) -> np.ndarray:
    return ins.attrs["value"].array.astype(ins.dtype.np).reshape(ins.shape)


def _evaluate(ins: Instruction, operands: list) -> Optional[np.ndarray]:
    try:
        with np.errstate(all="ignore"):
            out = PRIMITIVES[ins.op].reference(*operands, **ins.attrs)
        return np.asarray(out, dtype=ins.dtype.np).reshape(ins.shape)
    except Exception:      # noqa: BLE001 - a bad constant expression fails at run time
        return None


def _scalar_of_splat(b: Builder, pos: int) -> Optional[int]:
    ins = b[pos]
    if ins.op == "constant" and ins.shape == ():
        return pos
    if (PRIMITIVES[ins.op].repeats and b[ins.operands[0]].op == "constant"
            and b[ins.operands[0]].shape == ()):
        return ins.operands[0]
    return None


def _fold_all_constant(b: Builder, ins: Instruction) -> Optional[int]:
    if not all(b[o].op == "constant" for o in ins.operands):
        return None
    if num_elements(ins.shape) > MAX_ELEMENTS:
        return None
    if PRIMITIVES[ins.op].repeats and b[ins.operands[0]].shape == () and ins.shape != ():
        return None
    out = _evaluate(ins, [_value(b[o]) for o in ins.operands])
    return None if out is None else b.constant(out, ins.dtype)


def _fold_splats(b: Builder, ins: Instruction) -> Optional[int]:
    if PRIMITIVES[ins.op].kind != ELEMENTWISE:
        return None
    scalars = [_scalar_of_splat(b, o) for o in ins.operands]
    if any(s is None for s in scalars):
        return None
    scalar_ins = Instruction(ins.op, (), (), ins.dtype, ins.attrs)
    out = _evaluate(scalar_ins, [_value(b[s]) for s in scalars])
    if out is None:
        return None
    c = b.constant(out, ins.dtype)
    if ins.shape == ():
        return c
    return b.emit("broadcast_in_dim", (c,), ins.shape, ins.dtype,
                  {"shape": ins.shape, "broadcast_dimensions": ()})


def _rule(b: Builder, ins: Instruction) -> Optional[int]:
    prim = PRIMITIVES[ins.op]
    if not ins.operands or prim.kind in (LEAF, CONTROL) or ins.op == "tuple" or not prim.pure:
        return None        # control flow: a loop over constants still runs at run time
    folded = _fold_all_constant(b, ins)
    return folded if folded is not None else _fold_splats(b, ins)


def fold_constants(module: Module) -> Module:
    return rebuild(module, _rule, "constant_folding")
