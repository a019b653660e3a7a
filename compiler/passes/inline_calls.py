"""Inline every `call` (a replayed module call, lazyarray/nn/module_reuse.py) before the
CPU's own lowerings and the pipeline read the module.

Rule: `call(x..., computation=C)` -> C's instructions over x..., gathered in a `tuple`
(the op's stanza `expand`, compiler/primitives/control.py); each `get_tuple_element` of it
then reads the element itself (its `simplify`). The pipeline's expansion step does the
same for any module, but a call left to it would hide its convolutions from the CPU's
direct convolution loops (run before the pipeline, expand_convolution.py).
"""
from __future__ import annotations

from typing import Optional

from ..hlo.module import Instruction, Module
from ..primitive import CONTROL, PRIMITIVES
from .expand_convolution import _placeholder, _splice
from .rewrite import Builder, rebuild


def _inlined(ins: Instruction) -> bool:
    prim = PRIMITIVES[ins.op]
    return prim.kind == CONTROL and prim.expand is not None


def holds_calls(module: Module) -> bool:
    """Whether `module` calls a computation inline: a program made of a replayed module
    call, one step of a Python loop (its kernels are optimized as a loop body's)."""
    return any(map(_inlined, module.instructions))


def inline_calls(module: Module) -> Module:
    if not holds_calls(module):
        return module
    return rebuild(module, _rule, "inline_calls")


def _rule(b: Builder, ins: Instruction) -> Optional[int]:
    if not _inlined(ins):
        return None
    holders = [_placeholder(b[o]) for o in ins.operands]
    out = PRIMITIVES[ins.op].expand(*holders, **ins.attrs)
    return _splice(b, out, dict(zip(map(id, holders), ins.operands)))
