"""Kernels with the same code: a key that says when two kernels of a plan would compile to
the same function, so that the function is generated and optimized once.

The layers of a deep model give the same fused kernels over and over, differing only in
which buffers they read and write. Two kernels get equal keys when their members are the
same ops (shape, dtype, attributes, operands) wired the same way, their reads have the
same types, their values share buffer slots the same way (an argument per slot, so the
function's signature follows) and a reduction's plan is the same. Everything the CPU
code generator reads of a kernel is in the key; positions are replaced by their place
in a canonical order: operands before their users, walked from the outputs, so that
two layers whose fused ops interleave differently in the module (a constant recorded
before or after a broadcast: a ResNet's BatchNorm steps) still share. The function
made for one computes the other's values from the other's buffers: the steps' module
positions are mapped through the two orders (`translate`).

`kernel_key(plan, kern)` -> (key, positions in canonical order); `translate` maps the
steps made for one kernel onto another with the same key.
"""
from __future__ import annotations

from typing import Any, Optional

from ..planning.plan import ExecutionPlan, Kernel
from ..program import step_from_data


def kernel_key(plan: ExecutionPlan, kern: Kernel) -> tuple:
    ins = plan.module.instructions
    members = list(kern.members)
    inside = set(members)
    reads = sorted(set(kern.inputs) | {o for m in members for o in ins[m].operands
                                       if o not in inside})
    order = _canonical(ins, inside, list(kern.outputs) + list(kern.epilogue) + members
                       + reads)
    local = {p: k for k, p in enumerate(order)}
    slot_of = plan.buffers.slot_of
    slots: dict = {}
    pattern = tuple(slots.setdefault(slot_of.get(p, ("pos", p)), len(slots)) for p in order)
    aliases = tuple(sorted((local[o], local[x]) for o, x in plan.buffers.aliases.items()
                           if o in local and x in local))
    entries = []
    for k, p in enumerate(order):
        i = ins[p]
        if p in inside:
            ops = tuple(local.get(o, ("outside", o)) for o in i.operands)
            entries.append((i.op, i.shape, i.dtype.short, tuple(sorted(i.attrs.items())), ops))
        else:
            entries.append(("read", i.shape, i.dtype.short))
    key = (kern.kind, len(reads), tuple(entries), pattern, aliases,
           tuple(local[p] for p in kern.outputs), tuple(local[p] for p in kern.inputs),
           tuple(local[p] for p in kern.epilogue), _reduction_key(kern, local))
    return key, order


def _canonical(ins: list, inside: set, roots: list) -> list:
    """The kernel's positions, each after its operands (depth first from `roots`, operands
    in their order); a position outside the kernel (a read) is a leaf."""
    order: list = []
    seen: set = set()
    for root in roots:
        stack = [(root, False)]
        while stack:
            p, expanded = stack.pop()
            if expanded:
                order.append(p)
                continue
            if p in seen:
                continue
            seen.add(p)
            if p not in inside:
                order.append(p)
                continue
            stack.append((p, True))
            stack.extend((o, False) for o in reversed(ins[p].operands) if o not in seen)
    return order


def _reduction_key(kern: Kernel, local: dict) -> Any:
    """A REDUCTION kernel's ReductionPlan (compiler/planning/reduction_plan.py), positions local."""
    rp = getattr(kern, "reduction", None)
    if rp is None:
        return None
    at = lambda ps: tuple(local.get(p, ("outside", p)) for p in ps)   # noqa: E731
    return (at(rp.roots), tuple((r.kind, r.arg) for r in rp.reducers), tuple(rp.shape),
            tuple(rp.axes), rp.layout, at(rp.side), at(rp.late))


# The step fields (compiler/program.py, codegen/cpu_kernels.py) and those that hold lists
# of module positions; a step with any other field is never shared.
_KNOWN_FIELDS = frozenset(("type", "kernel", "fn", "args", "extent", "work", "per_chunk",
                           "finish", "finish_args", "finish_extent", "roots", "serial", "pos",
                           "operands", "op", "call", "partials_stored"))
_POSITION_LISTS = ("args", "finish_args")


def translate(steps: list, old: Kernel, old_order: list, new: Kernel,
              new_order: list) -> Optional[list]:
    """The steps made for `old` with `new`'s positions and name; None when a step names a
    position outside the kernel (then `new` is generated on its own)."""
    to_new = dict(zip(old_order, new_order))

    def pos(p: Any) -> Any:
        if p is None:
            return None
        if p not in to_new:
            raise KeyError(p)
        return to_new[p]

    out = []
    try:
        for s in steps:
            t = s.to_data()
            if not set(t) <= _KNOWN_FIELDS:
                return None         # a field this file does not know may hold positions
            for field in _POSITION_LISTS:
                if isinstance(t.get(field), list):   # (a library step's args are its call's)
                    t[field] = [pos(p) for p in t[field]]
            if "pos" in t:
                t["pos"] = pos(t["pos"])
            if "operands" in t:
                t["operands"] = [pos(p) for p in t["operands"]]
            if "roots" in t:
                t["roots"] = [dict(r, pos=pos(r["pos"])) for r in t["roots"]]
            if t.get("kernel", "").startswith(old.name):
                t["kernel"] = new.name + t["kernel"][len(old.name):]
            out.append(step_from_data(t))
    except KeyError:
        return None
    return out
