"""THE pass pipeline of the compiler: one list, each step with why it is there.

`optimize(module)` runs the HLO passes (SIMPLIFY_GROUP, to a fixed point);
`compile_plan(module)` adds PLAN_STEPS (fusion, buffer assignment) and returns the
`ExecutionPlan` that code generation consumes (compiler/driver.py, the one entry point,
turns it into a Program).
With `verify=True` (the device passes `config.verify`, i.e. LAZYARRAY_VERIFY=1) the
verifier checks the module before the first pass and after every pass.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable

from .. import profile_hooks
from ..planning.buffer_assignment import assign_buffers
from ..planning.fusion import plan_fusion
from ..hlo.module import Module
from ..planning.plan import ExecutionPlan
from ..planning.reduction_plan import plan_reductions
from ..planning.provenance import carry
from .algebraic_simplifier import simplify
from .constant_folding import fold_constants
from .cse import cse
from .dce import dce
from .expand_convolution import expand_convolution

# Repeated until the module stops changing (each step can expose work for the others).
SIMPLIFY_GROUP: list = [
    ("expand_convolution", expand_convolution,
     "rewrites convolution and reduce_window into pad/slice/concatenate + dot_general or "
     "an elementwise max/add chain, so code generation needs nothing new"),
    ("algebraic_simplifier", simplify,
     "removes identities and collapses reshape/transpose/broadcast/convert chains, "
     "so that fusion sees fewer, simpler ops"),
    ("constant_folding", fold_constants,
     "evaluates small constant subgraphs once, at compile time, with the references"),
    ("cse", cse,
     "merges equal subexpressions (user code and gradients repeat work, e.g. x*x twice)"),
    ("dce", dce,
     "drops what no output needs, including what the steps above left behind"),
]
MAX_ROUNDS = 8   # the group converges in 2-3 rounds on real graphs; this bounds a bug


def _verifier() -> Callable:
    try:
        from ..hlo.verifier import verify
    except ImportError:       # the verifier is optional to the pipeline
        return lambda module: None
    return verify


def _run(step: str, fn: Callable, module: Module, check: Callable) -> Module:
    t0 = time.perf_counter() if profile_hooks.ACTIVE else 0.0
    out = fn(module)
    carry(module, out)         # which traced ops each instruction stands for (profiler)
    if profile_hooks.ACTIVE:
        profile_hooks.ACTIVE.span("pass", step, t0, time.perf_counter(), {})
    try:
        check(out)
    except ValueError as e:
        raise ValueError(f"after pass {step}: {e}") from e
    return out


def optimize(module: Module, verify: bool = False) -> Module:
    """The HLO passes, to a fixed point; the result computes the same outputs."""
    check = _verifier() if verify else (lambda m: None)
    check(module)
    for _ in range(MAX_ROUNDS):
        before = module
        for step, fn, _why in SIMPLIFY_GROUP:
            module = _run(step, fn, module, check)
        if module is before or module == before:    # `is`: no pass changed it
            break
    return module


# After SIMPLIFY_GROUP, once each and in this order, the steps that turn the optimized
# module into an ExecutionPlan. Each takes (plan, options) and returns the next plan.
PLAN_STEPS: list = [
    ("fusion", lambda plan, opt: plan_fusion(plan.module, row_kernels=opt.row_kernels),
     "groups instructions into kernels, because memory traffic, not arithmetic, is what "
     "costs; kernels come out in a topological order (the schedule), ties broken by "
     "program order (compiler/planning/fusion.py)"),
    ("reduction_planning", lambda plan, opt: plan_reductions(plan),
     "chooses, once for every target, how each fused reduction runs: row, column, full "
     "(two phases) or generic, its reductions and what it writes where "
     "(compiler/planning/reduction_plan.py)"),
    ("buffer_assignment", lambda plan, opt: replace(
        plan, buffers=assign_buffers(plan.module, plan.kernels, opt.donate_inputs)),
     "gives every kernel output a slot, reusing dead temporaries (and donated inputs), so "
     "a program needs little more memory than its inputs and outputs "
     "(compiler/planning/buffer_assignment.py)"),
]


@dataclass(frozen=True)
class PlanOptions:
    donate_inputs: Any = False   # parameter numbers whose buffers outputs may reuse (or bool)
    row_kernels: bool = True     # reductions over rows may join their users (row_fusion.py)


def compile_plan(module: Module, verify: bool = False, donate_inputs: Any = False,
                 row_kernels: bool = True, simplify: bool = True) -> ExecutionPlan:
    """optimize (unless `simplify` is False), then PLAN_STEPS: fusion (which kernels) and
    buffer assignment (which slots). `donate_inputs`: the runtime gives up those parameter
    buffers (True: all), so outputs may reuse them."""
    if simplify:
        module = optimize(module, verify=verify)
    opt = PlanOptions(donate_inputs, row_kernels)
    plan = ExecutionPlan(module, [], None)
    for step, fn, _why in PLAN_STEPS:
        with profile_hooks.span("pass", step):      # a profile times each step (no-op otherwise)
            plan = fn(plan, opt)
    return plan
