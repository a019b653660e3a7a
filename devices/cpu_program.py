"""What a compiled CPU module is, apart from its object code: the steps to run and the
values they touch, as plain JSON-able data (so the disk cache can store it beside the
object code and a fresh process can run it without re-planning).
"""
from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..compiler import dtypes as D
from ..compiler.literal import Literal
from ..compiler.module import Module
from ..compiler.plan import ExecutionPlan


def encode_attr(v: Any) -> Any:
    if isinstance(v, D.DType):
        return {"dtype": v.name}
    if isinstance(v, Literal):
        a = np.ascontiguousarray(v.array)
        return {"literal": base64.b64encode(a.tobytes()).decode(), "np": a.dtype.str,
                "shape": list(a.shape)}
    if isinstance(v, (tuple, list)):
        return [encode_attr(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def decode_attr(v: Any) -> Any:
    if isinstance(v, dict) and "dtype" in v:
        return v["dtype"]
    if isinstance(v, dict) and "literal" in v:
        raw = base64.b64decode(v["literal"])
        dt = D.bfloat16.np if v["np"] == D.bfloat16.np.str else np.dtype(v["np"])
        return Literal(np.frombuffer(raw, dtype=dt).reshape(v["shape"]))
    if isinstance(v, list):
        return tuple(decode_attr(x) for x in v)
    return v


def _referenced(plan: ExecutionPlan, steps: list) -> set:
    refs = set(plan.module.outputs) | set(plan.buffers.slot_of)
    for s in steps:
        refs.update(s.get("args", []))
        if s["type"] == "library":
            refs.add(s["pos"])
            refs.update(s["operands"])
        for r in s.get("roots", []):
            if r["pos"] is not None:
                refs.add(r["pos"])
    return refs


def describe(plan: ExecutionPlan, steps: list) -> dict:
    """The program's metadata (see the module docstring)."""
    m = plan.module
    values = {}
    for pos in sorted(_referenced(plan, steps)):
        ins = m.instructions[pos]
        values[str(pos)] = {"op": ins.op, "operands": list(ins.operands), "shape": list(ins.shape),
                            "dtype": ins.dtype.name,
                            "attrs": {k: encode_attr(v) for k, v in ins.attrs.items()}}
    return {
        "name": m.name,
        "steps": steps,
        "slots": [[p, s] for p, s in plan.buffers.slot_of.items()],
        "slot_bytes": list(plan.buffers.slot_bytes),
        "peak_bytes": int(plan.buffers.peak_bytes),
        "aliases": [[int(o), int(x)] for o, x in plan.buffers.aliases.items()],
        "params": [[p, m.instructions[p].attrs["number"]] for p in m.parameters],
        "outputs": list(m.outputs),
        "values": values,
    }


class ValueInfo:
    """One referenced module value: shape, dtype, op and attributes."""

    __slots__ = ("op", "operands", "shape", "dtype", "attrs", "nbytes")

    def __init__(self, d: dict) -> None:
        self.op = d["op"]
        self.operands = tuple(d["operands"])
        self.shape = tuple(d["shape"])
        self.dtype = D.from_name(d["dtype"])
        self.attrs = {k: decode_attr(v) for k, v in d["attrs"].items()}
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def value_table(meta: dict) -> dict:
    return {int(p): ValueInfo(d) for p, d in meta["values"].items()}


def fallback_plan(module: Module) -> ExecutionPlan:
    """One kernel per instruction, each output its own slot: used when the fusion
    planner is missing, so that code generation always has a plan to follow."""
    from ..compiler.plan import LIBRARY, LOOP, OPAQUE, REDUCTION, BufferPlan, Kernel
    from ..compiler.primitive import PRIMITIVES
    from ..compiler import primitive as P
    kinds = {P.REDUCTION: REDUCTION, P.LIBRARY: LIBRARY, P.OPAQUE: OPAQUE}
    kernels, slot_of, sizes = [], {}, []
    for pos, ins in enumerate(module.instructions):
        nbytes = int(np.prod(ins.shape, dtype=np.int64)) * ins.dtype.itemsize
        if ins.op in ("parameter", "constant"):
            slot_of[pos] = len(sizes)
            sizes.append(nbytes)
            continue
        kind = kinds.get(PRIMITIVES[ins.op].kind, LOOP)
        kernels.append(Kernel(f"k{pos}_{ins.op}", kind, [pos], [pos], list(ins.operands)))
        slot_of[pos] = len(sizes)
        sizes.append(nbytes)
    return ExecutionPlan(module, kernels, BufferPlan(slot_of, sizes, sum(sizes)))
