"""Graphviz text of a fused module: one cluster per kernel, buffers between them.

`plan_dot(plan)` is the "dot" stage of `la.debug.ir` and of LAZYARRAY_DUMP. Parameters
and input constants are boxes outside every cluster; an instruction duplicated into
several kernels appears once per kernel; edges between clusters are the buffers a kernel
reads, labelled with the fusion reason when the producer could not be fused.
"""
from __future__ import annotations

from .module import Module
from ..planning.plan import ExecutionPlan

_COLORS = {"loop": "lightblue", "reduction": "palegreen", "library": "gold",
           "opaque": "lightpink"}


def _label(module: Module, pos: int) -> str:
    from .printer import type_text     # a tuple type (while, conditional) too
    ins = module.instructions[pos]
    return f"{ins.op}.{pos}\\n{type_text(ins.shape, ins.dtype)}"


def _quote(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def plan_dot(plan: ExecutionPlan) -> str:
    m = plan.module
    lines = [f"digraph {_quote(m.name)} {{", "  rankdir=TB;",
             "  node [shape=box, fontname=monospace, fontsize=10];"]
    home: dict = {}            # position -> node id of the copy that writes its buffer
    for k in plan.kernels:
        for o in k.outputs:
            home[o] = f"{k.name}_{o}"
    for p, ins in enumerate(m.instructions):
        if p in plan.buffers.slot_of and p not in home:
            home[p] = f"in_{p}"
            lines.append(f"  in_{p} [label={_quote(_label(m, p))}, shape=ellipse];")
    for k in plan.kernels:
        lines += _cluster(m, k)
    for k in plan.kernels:
        for p in k.inputs:
            reason = next((r for r in k.reasons if f"{m.instructions[p].op}.{p} " in r), "")
            for user in _users_inside(m, k, p):
                attrs = f" [label={_quote(reason)}, fontsize=8]" if reason else ""
                lines.append(f"  {home[p]} -> {k.name}_{user}{attrs};")
    for i, o in enumerate(m.outputs):
        if o in home:
            lines.append(f"  out_{i} [label=\"output {i}\", shape=plaintext];")
            lines.append(f"  {home[o]} -> out_{i};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _cluster(m: Module, k) -> list:
    color = _COLORS.get(k.kind, "white")
    lines = [f"  subgraph cluster_{k.name} {{",
             f"    label={_quote(k.name + ' (' + k.kind + ')')}; style=filled; color={color};"]
    for p in k.members:
        style = ", penwidth=2" if p in k.outputs else ""
        lines.append(f"    {k.name}_{p} [label={_quote(_label(m, p))}{style}];")
    members = set(k.members)
    for p in k.members:
        for o in m.instructions[p].operands:
            if o in members:
                lines.append(f"    {k.name}_{o} -> {k.name}_{p};")
    lines.append("  }")
    return lines


def _users_inside(m: Module, k, pos: int) -> list:
    return sorted({p for p in k.members if pos in m.instructions[p].operands})
