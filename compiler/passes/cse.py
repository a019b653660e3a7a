"""Common subexpression elimination (structural).

Rule: two instructions with the same op, operands, shape, dtype and attributes compute
the same value -> the later one is replaced by the earlier. Equal constants merge too.
Every primitive today is pure (random bits are counter-based HLO arithmetic), so none is
exempt; an impure op would be listed in IMPURE.
"""
from __future__ import annotations

from typing import Optional

from ..hlo.module import Instruction, Module
from .rewrite import Builder, rebuild

IMPURE: frozenset = frozenset()


def _key(ins: Instruction) -> Optional[tuple]:
    try:
        key = ins.key()
        hash(key)
    except TypeError:
        return None          # an attribute that cannot be compared structurally
    return key


def cse(module: Module) -> Module:
    seen: dict = {}

    def rule(b: Builder, ins: Instruction) -> Optional[int]:
        if ins.op in IMPURE:
            return None
        key = _key(ins)
        if key is None:
            return None
        if key in seen:
            return seen[key]
        seen[key] = len(b.instructions)      # where rebuild is about to put it
        return None

    return rebuild(module, rule, "cse")
