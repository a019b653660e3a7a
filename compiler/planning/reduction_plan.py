"""Reduction planning: one plan per REDUCTION kernel, chosen here for every target.

A fused REDUCTION kernel (compiler/planning/fusion.py) reads values of one shape S and combines
them over axes A. Its plan says what code generation needs to know, so that the CPU and
NVPTX emitters only wrap their loops around it:

- `roots`: the reductions (several: a multi-output kernel, e.g. layer norm's two means),
  each with its Reducer from its stanza (compiler/primitives/reduction.py);
- `layout`: "row" (A are the trailing axes and something is kept: each result combines a
  contiguous row), "column" (A are the leading axes), "full" (one result: two phases,
  per-chunk or per-block partials, then their combination), or "generic" (interleaved);
- `side`: outputs of shape S, written while the reduction passes over S;
- `late`: the reductions and epilogue members that leave the kernel, written at each
  result index once its reductions are complete (the epilogue: `sum(x) / n`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from .plan import REDUCTION, ExecutionPlan, Kernel
from ..primitive import PRIMITIVES
from ..primitives.reduction import reducer_of
from ..hlo.shapes import num_elements


@dataclass(frozen=True)
class ReductionPlan:
    roots: tuple
    reducers: tuple          # Reducer of each root
    shape: tuple             # S
    axes: tuple              # A, increasing
    layout: str              # row, column, full or generic
    side: tuple
    late: tuple

    @property
    def out_shape(self) -> tuple:
        return tuple(n for d, n in enumerate(self.shape) if d not in self.axes)

    @property
    def has_arg(self) -> bool:
        return any(r.arg for r in self.reducers)


def layout_of(shape: tuple, axes: tuple) -> str:
    rank = len(shape)
    if len(axes) == rank or num_elements(tuple(n for d, n in enumerate(shape) if d not in axes)) == 1:
        return "full"
    if not axes:            # nothing combined: one element per result
        return "generic"
    if tuple(axes) == tuple(range(rank - len(axes), rank)):
        return "row"
    if tuple(axes) == tuple(range(len(axes))):
        return "column"
    return "generic"


def plan_reduction(plan: ExecutionPlan, kern: Kernel) -> ReductionPlan:
    ins = plan.module.instructions
    roots = tuple(p for p in kern.members if reducer_of(ins[p]) is not None)
    first = ins[roots[0]]
    shape = ins[first.operands[0]].shape
    axes = tuple(PRIMITIVES[first.op].reduced_axes(first.attrs))
    epilogue = set(kern.epilogue)
    late = tuple(p for p in kern.outputs if p in roots or p in epilogue)
    side = tuple(p for p in kern.outputs if p not in late)
    return ReductionPlan(roots, tuple(reducer_of(ins[p]) for p in roots), shape, axes,
                         layout_of(shape, axes), side, late)


def plan_reductions(plan: ExecutionPlan) -> ExecutionPlan:
    """The pipeline step: every REDUCTION kernel gets its ReductionPlan."""
    kernels = [replace(k, reduction=plan_reduction(plan, k)) if k.kind == REDUCTION else k
               for k in plan.kernels]
    return replace(plan, kernels=kernels)
