"""A program's LLVM module cut in two, so that both halves are optimized at once (one
on a thread of its own, compiler/driver.py), then linked back into one module.

The CPU program's functions are its kernels: none calls another, so each half holds a
run of consecutive functions (the linked module keeps the original order), every
declaration and all metadata. A global variable (a constant table, a LAPACK kernel's
address table) goes with the half whose functions name it; one named by both halves
would be defined twice when the halves are linked, so such a module is not cut.
"""
from __future__ import annotations

from typing import Optional

import llvmlite.ir as ir

# below this much IR the second thread and the bitcode round trip cost more than they
# save (a small program's optimization is a few milliseconds)
MIN_SPLIT_CHARS = 64 * 1024
# LLVM's cost of an `optnone` function (a small kernel: no IR passes, fast instruction
# selection) per character of IR, against an optimized one's: halves are cut by cost
OPTNONE_COST = 0.1


def halves(llmod: ir.Module) -> Optional[tuple]:
    """(text of the first half, text of the second) with about half the IR each, or
    None where `llmod` is too small or cannot be cut (see the module's docstring)."""
    defined = [g for g in llmod.globals.values()
               if isinstance(g, ir.Function) and g.blocks]
    if len(defined) < 2:
        return None
    texts = {g.name: str(g) for g in defined}
    if sum(map(len, texts.values())) < MIN_SPLIT_CHARS:
        return None
    costs = {g.name: len(texts[g.name]) * (OPTNONE_COST if "optnone" in g.attributes else 1)
             for g in defined}
    first = _first_half(defined, costs, sum(costs.values()))
    parts: tuple = ([], [])
    for g in llmod.globals.values():
        if isinstance(g, ir.Function):
            if not g.blocks:
                parts[0].append(str(g))
                parts[1].append(str(g))
            else:
                parts[0 if g.name in first else 1].append(texts[g.name])
            continue
        users = {0 if name in first else 1 for name, text in texts.items()
                 if g.get_reference() in text}
        if len(users) > 1:
            return None
        parts[users.pop() if users else 0].append(str(g))
    return tuple(_module_text(llmod, body) for body in parts)


def _first_half(defined: list, costs: dict, total: float) -> set:
    """Names of the leading functions that make up about half of `total`."""
    first, size = set(), 0.0
    for g in defined[:-1]:
        if size + costs[g.name] / 2 > total / 2:
            break
        first.add(g.name)
        size += costs[g.name]
    return first or {defined[0].name}


def _module_text(llmod: ir.Module, body: list) -> str:
    """`llmod`'s text with `body` in place of its global values (llvmlite's layout:
    header, identified types, globals, metadata)."""
    lines = ['; ModuleID = "%s"' % (llmod.name,),
             'target triple = "%s"' % (llmod.triple,),
             'target datalayout = "%s"' % (llmod.data_layout,), ""]
    lines += [t.get_declaration() for t in llmod.get_identified_types().values()]
    lines += body
    lines += llmod._get_metadata_lines()
    return "\n".join(lines)
