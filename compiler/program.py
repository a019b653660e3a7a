"""What compilation hands a device: a self-contained, serializable Program.

A Program holds everything a device needs to run a compiled module and nothing it must
work out itself: the kernels' code (host object code, or PTX text as bytes), the steps in
execution order (kernel calls with their loop or launch shape, library calls named by
their primitives' stanzas), the buffer plan (slots, sizes, in-place pairs), the values
the steps touch (shape, dtype, constants' literals) and, when asked for, the texts of
each stage for dumps. Everything but the dump texts is plain JSON-able data plus one
bytes blob, so the disk cache stores a Program and a fresh process runs it without
re-planning (`to_cache` / `from_cache`).

Steps are typed (the dataclasses below), one class per kind:
- LoopStep, PartialStep (CPU): a generated function over a range of the outer dimension
  (compiler/codegen/cpu_kernels.py describes their fields); a loop calling LAPACK also
  names its routines and tables (`lapack`) and its fallback library step (`host`);
- LaunchStep (GPU): a kernel entry with grid, block, shared bytes and its parameters;
- WhileStep, ConditionalStep: control flow; sub-programs the device runs from the host
  (compiler/codegen/control_steps.py describes them; `run_while` below runs one);
- LibraryStep: a call a device implements natively, named by the primitive's stanza
  (`call`), with the value it writes (`pos`), the values it reads (`operands`) and the
  call's arguments the compiler worked out (`args`).
An executor runs a step by a table from step class to handler and reads its fields as
attributes. In the cache a step is plain data, {"type": kind, field: value...}
(`to_data`, `step_from_data`).
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Optional

import numpy as np

from .hlo import dtypes as D
from .hlo.literal import Literal

FORMAT = 2      # bump when the stored layout changes (old cache entries then miss)


# ---- steps ---------------------------------------------------------------------------------

@dataclass(kw_only=True)
class Step:
    """What every step has: its kind (the class's `kind`, "type" in the cache) and the
    plan kernel it runs."""

    kind: ClassVar[str] = ""
    kernel: str = ""

    def to_data(self) -> dict:
        """The step as plain JSON-able data (fields that are None left out)."""
        out: dict = {"type": self.kind}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = v.to_data() if isinstance(v, Step) else v
        return out


@dataclass(kw_only=True)
class LibraryStep(Step):
    kind: ClassVar[str] = "library"
    call: str
    op: str
    pos: int
    operands: list
    args: Any = None                # the call's arguments (a dict), or its positions (gemm)


@dataclass(kw_only=True)
class LoopStep(Step):
    kind: ClassVar[str] = "loop"
    fn: str
    args: list                      # module positions, in the function's argument order
    extent: int
    work: int
    serial: Optional[bool] = None   # its range may not be split
    lapack: Optional[dict] = None   # routines, table, status, checks, op, shape
    host: Optional[LibraryStep] = None   # the LAPACK loop's fallback


@dataclass(kw_only=True)
class PartialStep(Step):
    kind: ClassVar[str] = "partial"
    fn: str
    args: list
    extent: int
    work: int
    per_chunk: bool
    roots: list                     # one dict per reduced value (pos, kind, acc, ...)
    serial: Optional[bool] = None
    partials_stored: Optional[bool] = None
    finish: Optional[str] = None
    finish_args: Optional[list] = None
    finish_extent: Optional[int] = None


@dataclass(kw_only=True)
class LaunchStep(Step):
    kind: ClassVar[str] = "launch"
    fn: str
    grid: list
    block: list
    shared_bytes: int
    args: list


@dataclass(kw_only=True)
class WhileStep(Step):
    kind: ClassVar[str] = "while"
    operands: list
    outputs: list                   # [position, tuple index]
    varying: list
    cond: dict                      # sub-programs as data (`sub_program`)
    body: Optional[dict] = None

    def sub_programs(self) -> list:
        """[cond, body or None]."""
        return [self.cond, self.body]


@dataclass(kw_only=True)
class ConditionalStep(Step):
    kind: ClassVar[str] = "conditional"
    operands: list
    outputs: list
    branches: list

    def sub_programs(self) -> list:
        return list(self.branches)


CONTROL_STEPS = (WhileStep, ConditionalStep)     # steps whose sub-programs a device runs


STEP_TYPES = {cls.kind: cls for cls in (LibraryStep, LoopStep, PartialStep, LaunchStep,
                                        WhileStep, ConditionalStep)}


def step_from_data(data: dict) -> Step:
    """The step `to_data` gave."""
    kind = data["type"]
    if kind not in STEP_TYPES:
        raise ValueError(f"unknown program step type {kind!r}")
    values = {k: v for k, v in data.items() if k != "type"}
    if values.get("host") is not None:
        values["host"] = step_from_data(values["host"])
    return STEP_TYPES[kind](**values)


@dataclass
class Program:
    name: str
    target: str                   # "cpu" or an NVPTX architecture ("sm_80")
    code: bytes                   # object code (CPU) or PTX text (GPU); b"" if no kernels
    steps: list                   # Steps, in execution order (see the module docstring)
    values: dict                  # str(position) -> description (see `describe_value`)
    params: list                  # [position, parameter number]
    outputs: list                 # positions of the module outputs, in order
    slots: list = field(default_factory=list)        # [position, slot]
    slot_bytes: list = field(default_factory=list)
    peak_bytes: int = 0
    aliases: list = field(default_factory=list)      # [output, donated parameter]
    donated: list = field(default_factory=list)      # donated parameter numbers
    scratch: dict = field(default_factory=dict)      # GPU: scratch key -> bytes
    # plan kernel -> its ops, traced sources, bytes and flops (compiler/planning/kernel_cost.py):
    # what a profile shows beside each kernel's time
    kernel_info: dict = field(default_factory=dict)
    dumps: dict = field(default_factory=dict)        # stage -> text (never stored)

    def kernels(self) -> int:
        """Kernel calls per run (library calls included)."""
        return len(self.steps)

    def to_cache(self) -> tuple:
        """(meta dict, code bytes): what the disk cache stores."""
        meta = {k: getattr(self, k) for k in _STORED}
        meta["steps"] = [s.to_data() for s in self.steps]
        meta["format"] = FORMAT
        return meta, self.code

    @classmethod
    def from_cache(cls, meta: dict, code: bytes) -> "Program":
        if meta.get("format") != FORMAT:
            raise ValueError(f"program format {meta.get('format')!r}, expected {FORMAT}")
        stored = {k: meta[k] for k in _STORED}
        stored["steps"] = [step_from_data(s) for s in stored["steps"]]
        return cls(code=code, **stored)

    def value_table(self) -> dict:
        """position -> ValueInfo for every value the steps touch."""
        return {int(p): ValueInfo(d) for p, d in self.values.items()}


_STORED = ("name", "target", "steps", "values", "params", "outputs", "slots", "slot_bytes",
           "peak_bytes", "aliases", "donated", "scratch", "kernel_info")


# ---- values -------------------------------------------------------------------------------

def describe_value(ins: Any) -> dict:
    """One module instruction as JSON-able data."""
    return {"op": ins.op, "operands": list(ins.operands), "shape": list(ins.shape),
            "dtype": ins.dtype.name, "attrs": {k: encode_attr(v) for k, v in ins.attrs.items()}}


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

    def constant(self) -> np.ndarray:
        """A constant's value as a C-contiguous array of its shape and dtype."""
        arr = np.asarray(self.attrs["value"].array).astype(self.dtype.np).reshape(self.shape)
        return np.array(arr, order="C")      # (ascontiguousarray makes 0-d 1-d)


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


# ---- control steps (compiler/codegen/control_steps.py describes them) --------------------

def sub_program(data: dict) -> Program:
    """The Program a control step stores (see the module docstring)."""
    return Program.from_cache(data["meta"], base64.b64decode(data["code"]))


def run_while(step: "WhileStep", state: list, run_cond: Any, run_body: Any, truth: Any) -> list:
    """The loop of a "while" step over host-side handles: `run_cond(state)` -> [pred],
    `run_body(state)` -> the varying values then the next pred, `truth(pred) -> bool`
    (a read back to the host); returns the final state. Devices share it."""
    vary = step.varying
    go = truth(run_cond(state)[0])
    while go:
        if run_body is None:
            raise RuntimeError("while_loop: the body changes none of the loop's state, so "
                               "a loop whose condition holds would never end")
        new = run_body(state)
        for k, v in zip(vary, new):
            state[k] = v
        go = truth(new[-1])
    return state


def state_buffers(body: "Program", vary: list) -> dict:
    """{output position: parameter position} of each state value whose new value a loop
    body compiled with its state carried (codegen/control_steps.carried_state, for the
    CPU and CUDA alike) has planned in the old value's slot: written
    over it in place (an alias of the plan: an elementwise update, a KV cache's
    dynamic_update_slice) or once the old value is dead. Such a state keeps one buffer;
    the others, whose old value the body still reads after the new one is written, two.
    The CPU's native runner reads the same from its slot table; a device that gives each
    value a buffer of its own (CUDA) hands the output its parameter's buffer by this."""
    slot = {int(p): int(s) for p, s in body.slots}
    param = {int(n): int(p) for p, n in body.params}
    out = {}
    for j, k in enumerate(vary):
        o, x = int(body.outputs[j]), param.get(k)
        if x is not None and o != x and slot.get(o) is not None and slot.get(o) == slot.get(x):
            out[o] = x
    return out


def branch_index(step: "ConditionalStep", index: Any) -> int:
    """The branch a conditional takes for `index` (clamped, as HLO does)."""
    return min(max(int(index), 0), len(step.branches) - 1)
