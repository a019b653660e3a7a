"""What the compiler hands a device: kernels in execution order and a buffer plan.

The passes produce it (fusion decides the kernels, buffer assignment the slots); code
generation turns each kernel into target code; a device runs the kernels over buffers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..hlo.module import Module

LOOP = "loop"            # elementwise and index-moving work over the roots' shape
REDUCTION = "reduction"  # a reduction root with its producers fused in
LIBRARY = "library"      # a call into a tuned library (dot_general -> BLAS / cuBLAS)
OPAQUE = "opaque"        # an op that needs all of its input at once (sort, scatter...)
ROW = "row"              # reductions over trailing axes and their users, row by row
                         # (compiler/planning/row_fusion.py)


@dataclass
class Kernel:
    name: str
    kind: str
    members: list          # module positions computed inside, operands before users
    outputs: list          # positions whose values leave the kernel (written to buffers)
    inputs: list           # positions the kernel reads from buffers
    reasons: list = field(default_factory=list)   # fusion decisions, in words
    epilogue: list = field(default_factory=list)  # REDUCTION: members computed after the
                                                  # reduction, at the output index (fusion.py)
    reduction: Any = None   # REDUCTION: its ReductionPlan (compiler/planning/reduction_plan.py)


@dataclass
class BufferPlan:
    slot_of: dict          # module position -> buffer slot (inputs, outputs, temporaries)
    slot_bytes: list       # size of each slot
    peak_bytes: int = 0
    slot_kinds: list = field(default_factory=list)  # per slot: parameter, constant,
                                                    # output or temporary
    donate_inputs: bool = False   # parameter slots could be taken once dead
    aliases: dict = field(default_factory=dict)   # output -> donated parameter it
                                                  # overwrites in place, in one kernel


@dataclass
class ExecutionPlan:
    module: Module
    kernels: list          # Kernel, in execution order
    buffers: Optional[BufferPlan]   # None until buffer assignment has run
    decisions: list = field(default_factory=list)   # every fusion decision, for the dump
