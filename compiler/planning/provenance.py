"""Which instructions of the module a compile started from each instruction came from.

The profiler names, for every kernel, the user's lines its ops were recorded at. The
passes rebuild the module (simplify, fold, CSE, DCE), so a position in the optimized
module says nothing by itself about the traced graph. Each pass that rebuilds records
`origins` on the module it returns (per new instruction: the positions of the input
module it stands for: the instruction it copies or replaces, or the one whose rewrite
created it); the pipeline composes them into `sources`: per instruction, the positions
in the module given to `compile`, whose instructions are the captured graph's nodes in
capture order. A module without `origins` (a pass that did not say) loses the sources,
so a profile shows no lines rather than wrong ones.
"""
from __future__ import annotations

from typing import Optional

from ..hlo.module import Module


def set_origins(module: Module, origins: list) -> Module:
    """Attach `origins` (one iterable of input positions per instruction) to a pass's
    result; returns the module."""
    module.origins = tuple(tuple(sorted(o)) for o in origins)
    return module


def carry(before: Module, after: Module) -> None:
    """Give `after` (a pass's result) the sources of `before` (its input), through the
    pass's origins."""
    if after is before:
        return
    prev = sources_of(before)
    origins = getattr(after, "origins", None)
    if prev is None or origins is None or len(origins) != len(after.instructions):
        after.sources = None
        return
    after.sources = tuple(tuple(sorted({s for o in orig for s in prev[o]})) for orig in origins)


def sources_of(module: Module) -> Optional[tuple]:
    """Per instruction, the positions of the compiled module's input it came from (the
    identity for a module no pass has touched); None when unknown."""
    if not hasattr(module, "sources"):
        return tuple((p,) for p in range(len(module.instructions)))
    return module.sources
