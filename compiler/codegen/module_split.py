"""A program's LLVM module cut into pieces that are optimized at once on several threads
(compiler/driver.py): two halves linked back into one module, or pieces cut while the
functions are generated (`Stream`), each emitted as an object of its own by whichever
thread is free.

The CPU program's functions are its kernels: none calls another, so each piece holds a
run of consecutive functions (the linked module keeps the original order), every
declaration and all metadata. A global variable (a constant table, a LAPACK kernel's
address table) goes with the piece whose functions name it; one named by two pieces
would be defined twice, so such a module is not cut.

Before it is cut, functions whose text is the same but for their name are merged
(`merge_equal`): kernels that differ only in a shape their code never reads, or in the
order of their fused ops, generate the same function (a ResNet's repeated blocks: 23 of
143 functions), which LLVM then optimizes once.

A function of explicit vector code (llvm_target.mark_vector_code), optimized by a pipeline
of its own, goes to a piece of its kind: each piece is sent with whether it is one.
"""
from __future__ import annotations

from typing import Any, Optional

import llvmlite.ir as ir

from .llvm_target import is_vector_code

# below this much IR the second thread and the bitcode round trip cost more than they
# save (a small program's optimization is a few milliseconds)
MIN_SPLIT_CHARS = 64 * 1024
# LLVM's cost of an `optnone` function (a small kernel: no IR passes, fast instruction
# selection) per character of IR, against an optimized one's: halves are cut by cost
OPTNONE_COST = 0.1
# ... and of vector code (llvm_target.mark_vector_code: a convolution's function built
# with a short pipeline, 0.6 of its -O2 time)
VECTOR_CODE_COST = 0.6


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


def _shrinking(costs: dict, workers: int) -> list:
    """The functions of `costs` ({name: cost}, in order) in runs of shrinking cost for
    `workers` threads (see `Stream`)."""
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
    return groups


# a thread's pieces at most (each is an object and an engine of its own when loaded:
# devices/cpu/object_code.py)
MAX_PIECES_PER_WORKER = 4


def _costs(llmod: ir.Module, texts: dict) -> Optional[dict]:
    """{name: LLVM's cost} of each defined function, or None where the module is too
    small to cut."""
    if len(texts) < 2 or sum(map(len, texts.values())) < MIN_SPLIT_CHARS:
        return None
    return {name: _cost(llmod.get_global(name), text) for name, text in texts.items()}


def _cost(fn: ir.Function, text: str) -> float:
    if "optnone" in fn.attributes:
        return len(text) * OPTNONE_COST
    return len(text) * (VECTOR_CODE_COST if is_vector_code(fn) else 1)


def by_kind(llmod: ir.Module, groups: list) -> list:
    """`groups` (sets of function names of `llmod`) each cut in two where it holds both
    vector code (llvm_target.mark_vector_code) and other functions (empty sets left
    out): [(group, whether it is vector code)]."""
    out = []
    for group in groups:
        vector = {name for name in group if is_vector_code(llmod.get_global(name))}
        out += [(g, kind) for g, kind in ((group - vector, False), (vector, True)) if g]
    return out


def vector_code_apart(llmod: ir.Module, texts: dict) -> Optional[tuple]:
    """(text of the functions that are not vector code, text of those that are), or None
    where every function is of one kind or a global is named by both kinds."""
    kinds = by_kind(llmod, [set(texts)])
    if len(kinds) < 2:
        return None
    return _cut(llmod, texts, [group for group, _ in kinds])


class Stream:
    """Pieces of a module cut while its functions are generated (`add` is cpu_kernels'
    `ready`), each handed to `send(text, vector_code)` (whether it holds vector code, see
    `by_kind`) as soon as it is big enough, so that LLVM
    builds the first functions while Python generates the next ones; `finish()` cuts
    and sends what is left in shrinking pieces, a quarter of what is left for two
    workers, then less (so that the last ones, taken by whichever thread is free, even
    out the threads' finishing times without an object per function), and returns
    {merged function: the one kept} (as `merge_equal`).

    A piece is sent once it holds MIN_SPLIT_CHARS of IR, or half of what was sent
    before, up to MAX_STREAM_PIECE (which none passes but by its only function).
    Functions equal to an earlier one are dropped as they come. Declarations go to every piece; a global variable must go with every
    function that names it, so from the first one on, the rest waits for `finish`."""

    def __init__(self, workers: int, send: Any) -> None:
        self.llmod: Any = None
        self.workers, self.send = workers, send
        self.kept: dict = {}
        self.merged: dict = {}
        self.batch: dict = {}       # name -> text, not sent yet
        self.cost = 0.0             # of the batch
        self.sent = 0.0             # cost sent
        self.pieces = 0             # pieces sent
        self.streaming = True

    def add(self, llmod: ir.Module, functions: list) -> None:
        """Take the functions a kernel added to `llmod` (complete: tiers chosen)."""
        self.llmod = llmod
        if self.streaming and any(not isinstance(g, ir.Function)
                                  for g in llmod.globals.values()):
            self.streaming = False      # (the kernel made one: nothing sent from now on)
        for fn in functions:
            text = str(fn)
            first = self.kept.setdefault(text.replace(f'@"{fn.name}"(', "@(", 1), fn.name)
            if first != fn.name:
                self.merged[fn.name] = first
                del self.llmod.globals[fn.name]
                release_function(fn)
                continue
            cost = _cost(fn, text)
            if self.streaming and self.batch and self.cost + cost > MAX_STREAM_PIECE:
                self._send([set(self.batch)])       # (no piece much above the cap)
            self.batch[fn.name] = text
            self.cost += cost
        want = min(max(MIN_SPLIT_CHARS, self.sent / 2), MAX_STREAM_PIECE)
        if self.streaming and self.cost >= want:
            self._send([set(self.batch)])

    def finish(self, llmod: ir.Module) -> dict:
        """Send what is left of `llmod` (the whole module where nothing was sent)."""
        self.llmod = llmod
        if self.batch or not self.pieces:
            costs = {name: _cost(llmod.get_global(name), text)
                     for name, text in self.batch.items()}
            many = len(costs) > 1 and (self.pieces or self.cost >= MIN_SPLIT_CHARS)
            self._send(_shrinking(costs, self.workers) if many else [set(costs)])
        return self.merged

    def _send(self, groups: list) -> None:
        kinds = by_kind(self.llmod, groups) or [(set(), False)]    # (no function)
        texts = _cut(self.llmod, self.batch, [group for group, _ in kinds])
        if texts is None:                   # a global named by two groups: one piece,
            kinds = [(set(self.batch), False)]      # at -O2 whole
            texts = _cut(self.llmod, self.batch, [set(self.batch)])
        for text, (_, vector_code) in zip(texts, kinds):
            self.send(text, vector_code)
        self.pieces += len(texts)
        self.sent += self.cost
        self.batch, self.cost = {}, 0.0


# the largest piece sent while functions are still generated (LLVM's work on the last
# ones is what the threads share at the end)
MAX_STREAM_PIECE = 192 * 1024


def _cut(llmod: ir.Module, texts: dict, groups: list) -> Optional[tuple]:
    """The module texts of `groups` (sets of the names of `texts`), or None where a
    global is named by functions of two groups."""
    piece = {name: k for k, group in enumerate(groups) for name in group}
    parts: tuple = tuple([] for _ in groups)
    for g in llmod.globals.values():
        if isinstance(g, ir.Function):
            if not g.blocks:
                for part in parts:
                    part.append(str(g))
            elif g.name in piece:       # (a Stream's earlier pieces hold the others)
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


def release_ir(llmod: ir.Module) -> None:
    """Break the reference cycles of `llmod`'s objects (a value names its parent: an
    instruction its block, a block and an argument their function, a function and
    metadata their module), so that they are freed by reference counting once nothing
    names them, not by a pass of the cyclic collector: the IR of a program is some
    100,000 objects, which the compiler allocates with the collector paused
    (driver._collector_paused), and its first pass after a CNN's compile took 65-92 ms
    of the first step. Call it once the module's texts are made: `llmod` is empty after."""
    for g in llmod.globals.values():
        if isinstance(g, ir.Function):
            release_function(g)
        g.parent = None
    llmod.globals.clear()
    for md in llmod.metadata:
        md.parent = None
    llmod.metadata.clear()
    llmod.namedmetadata.clear()


def release_function(fn: ir.Function) -> None:
    """Break the reference cycles of a function's blocks, instructions, loops' phis and
    arguments (see `release_ir`); `fn` is empty after."""
    for block in fn.blocks:
        for inst in block.instructions:
            inst.parent = None
            if isinstance(inst, ir.PhiInstr):      # (a loop's phi and its next value
                inst.incomings = []                 # name each other)
        block.instructions, block.terminator, block.parent = [], None, None
    for arg in fn.args:
        arg.parent = None
    fn.blocks, fn.args, fn.return_value, fn.parent = [], (), None, None
