"""A program's LLVM module cut into pieces that are optimized at once on several threads
(compiler/driver.py): two halves linked back into one module, or several pieces, each
emitted as an object of its own, taken by whichever thread is free.

The CPU program's functions are its kernels: none calls another, so each piece holds a
run of consecutive functions (the linked module keeps the original order), every
declaration and all metadata. A global variable (a constant table, a LAPACK kernel's
address table) goes with the piece whose functions name it; one named by two pieces
would be defined twice, so such a module is not cut.

Before it is cut, functions whose text is the same but for their name are merged
(`merge_equal`): kernels that differ only in a shape their code never reads, or in the
order of their fused ops, generate the same function (a ResNet's repeated blocks: 23 of
143 functions), which LLVM then optimizes once.
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


def function_texts(llmod: ir.Module) -> dict:
    """{name: text} of every function `llmod` defines, in the module's order."""
    return {g.name: str(g) for g in llmod.globals.values()
            if isinstance(g, ir.Function) and g.blocks}


def merge_equal(llmod: ir.Module, texts: Optional[dict] = None) -> dict:
    """Drop from `llmod` every function whose text, its name aside, equals an earlier
    one's (attributes, arguments, body and the globals and metadata it names: the same
    machine code); returns {dropped name: the kept one's}, for the steps that call them.
    `texts` (function_texts), when given, loses the dropped functions too."""
    texts = function_texts(llmod) if texts is None else texts
    kept: dict = {}
    merged: dict = {}
    for name, text in list(texts.items()):
        # the name is in the text once, on its `define` line (a kernel calls no kernel)
        body = text.replace(f'@"{name}"(', "@(", 1)
        first = kept.setdefault(body, name)
        if first != name:
            merged[name] = first
            del llmod.globals[name]
            del texts[name]
    return merged


def halves(llmod: ir.Module, texts: Optional[dict] = None) -> Optional[tuple]:
    """(text of the first half, text of the second) with about half the IR each, or
    None where `llmod` is too small or cannot be cut (see the module's docstring).
    `texts`: function_texts(llmod), where the caller has it."""
    texts = function_texts(llmod) if texts is None else texts
    costs = _costs(llmod, texts)
    if costs is None:
        return None
    first = _first_half(list(costs), costs, sum(costs.values()))
    return _cut(llmod, texts, [first, set(costs) - first])


def pieces(llmod: ir.Module, workers: int, texts: Optional[dict] = None) -> Optional[list]:
    """The texts of `llmod` cut into runs of consecutive functions for `workers` threads
    that each take the next piece when done with one, or None where it is too small or
    cannot be cut. The pieces shrink as they go (a quarter of what is left for two
    workers, then less), so that the last ones, taken when a thread is free, even out
    the threads' finishing times without an object per function."""
    texts = function_texts(llmod) if texts is None else texts
    costs = _costs(llmod, texts)
    if costs is None:
        return None
    total = sum(costs.values())
    floor = total / (MAX_PIECES_PER_WORKER * workers)
    groups: list = [set()]
    left, size = total, 0.0
    for name, cost in costs.items():
        if size >= max(left / (2 * workers), floor):
            groups.append(set())
            left -= size
            size = 0.0
        groups[-1].add(name)
        size += cost
    return _cut(llmod, texts, groups) if len(groups) > 1 else None


# a thread's pieces at most (each is an object and an engine of its own when loaded:
# devices/cpu/object_code.py)
MAX_PIECES_PER_WORKER = 4


def _costs(llmod: ir.Module, texts: dict) -> Optional[dict]:
    """{name: LLVM's cost} of each defined function, or None where the module is too
    small to cut."""
    if len(texts) < 2 or sum(map(len, texts.values())) < MIN_SPLIT_CHARS:
        return None
    return {name: len(text) * (OPTNONE_COST if "optnone" in llmod.get_global(name).attributes
                               else 1) for name, text in texts.items()}


def _cut(llmod: ir.Module, texts: dict, groups: list) -> Optional[tuple]:
    """The module texts of `groups` (sets of function names), or None where a global
    is named by functions of two groups."""
    piece = {name: k for k, group in enumerate(groups) for name in group}
    parts: tuple = tuple([] for _ in groups)
    for g in llmod.globals.values():
        if isinstance(g, ir.Function):
            if not g.blocks:
                for part in parts:
                    part.append(str(g))
            else:
                parts[piece[g.name]].append(texts[g.name])
            continue
        users = {piece[name] for name, text in texts.items() if g.get_reference() in text}
        if len(users) > 1:
            return None
        parts[users.pop() if users else 0].append(str(g))
    return tuple(_module_text(llmod, body) for body in parts)


def _first_half(names: list, costs: dict, total: float) -> set:
    """Names of the leading functions that make up about half of `total`."""
    first, size = set(), 0.0
    for name in names[:-1]:
        if size + costs[name] / 2 > total / 2:
            break
        first.add(name)
        size += costs[name]
    return first or {names[0]}


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
