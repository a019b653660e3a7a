"""Control flow in a Program: a `while` or `conditional` kernel becomes one *control step*
that holds its sub-computations compiled for the same target (each a Program of its
own, stored inside the step), so the enclosing module is still one compile and one
Program that a device loads once.

Steps (plain JSON-able dicts, like every step; compiler/program.py):

- "while": {"operands": positions of the initial state, "outputs": [[position, tuple
  index], ...] (the get_tuple_element values it writes), "cond": program, "body":
  program, "varying": the state indices the body changes}. The device runs `cond` on the
  state and reads its pred[] back; while it holds it runs `body`, which computes the
  varying state values (in the order of "varying") and then the condition on the new
  state (its last output: one program per iteration); the other state values (weights
  and other captured values) are passed on untouched, never copied. The body is
  compiled with its varying state donated (`carried_state`), for the CPU and CUDA
  alike: each state value's buffer may take its own new value, in place where the
  body allows it (the device keeps one buffer for that state, program.state_buffers, and
  two for the others: swapped on the CPU, the new value copied over the old in a CUDA
  graph).
- "conditional": {"operands": [index position, operand positions...], "outputs": as
  above, "branches": [program, ...]}: the device reads the index, clamps it to the
  branches and runs that one on the operands.

A program is {"meta": Program.to_cache()'s dict, "code": base64 of its code}; a device
rebuilds it with `compiler.program.sub_program`. The CPU runs the step in native code
(devices/cpu/native_control.py: the sub-programs' jobs under a control runner, no Python
per iteration) and an AOT library as C loops and branches (devices/cpu/aot.py); the
CUDA device as one CUDA graph with WHILE/IF conditional nodes where the driver has them
(devices/cuda/cuda_loops.py). Where those do not apply (a sub-program with a host call, a
profile timing each kernel, an older CUDA driver) `run_while` / `branch_index` drive it
from the host (XLA's GPU backend drives a `while` the same way).
"""
from __future__ import annotations

import base64
from typing import Callable

from ..hlo.module import Instruction, Module
from ..planning.plan import ExecutionPlan, Kernel
from ..primitive import CONTROL, PRIMITIVES
from ..program import ConditionalStep, Program, Step, WhileStep


def is_control(plan: ExecutionPlan, kern: Kernel) -> bool:
    """Whether `kern` is a control-flow kernel (a while/conditional and its elements)."""
    ins = plan.module.instructions[kern.members[0]]
    return PRIMITIVES[ins.op].kind == CONTROL


def _program_data(program: Program) -> dict:
    meta, code = program.to_cache()
    return {"meta": meta, "code": base64.b64encode(code).decode()}


def varying(body: Module) -> list:
    """State indices the body changes: all but those whose output is its own parameter."""
    out = []
    params = {p: body.instructions[p].attrs["number"] for p in body.parameters}
    for k, o in enumerate(body.outputs):
        if params.get(o) != k:
            out.append(k)
    return out


def control_step(plan: ExecutionPlan, kern: Kernel, compile_sub: Callable[[Module], Program]
                 ) -> Step:
    """The step of control kernel `kern`; `compile_sub` compiles a sub-computation for
    the plan's target."""
    m = plan.module
    pos = kern.members[0]
    ins = m.instructions[pos]
    outputs = [[p, int(m.instructions[p].attrs["index"])] for p in kern.members[1:]
               if p in kern.outputs]
    if ins.op == "while":
        body = ins.attrs["body"]
        vary = varying(body)
        cond = ins.attrs["cond"]
        each = body_then_cond(body, cond, vary) if vary else None
        return WhileStep(
            kernel=kern.name, operands=list(ins.operands), outputs=outputs, varying=vary,
            cond=_program_data(compile_sub(_renamed(cond, "cond"))),
            body=_program_data(compile_sub(each, carried=carried_state(vary))) if vary else None)
    return ConditionalStep(
        kernel=kern.name, operands=list(ins.operands), outputs=outputs,
        branches=[_program_data(compile_sub(_renamed(b, f"branch{k}")))
                  for k, b in enumerate(ins.attrs["branches"])])


def carried_state(vary: list) -> dict:
    """The body's loop state as `compile`'s `carried`: {state index (its parameter
    number): index of the output that is its new value}. The loop owns the state's
    buffers (it copies the initial values in at entry), so the body may write the new
    value over the old one where buffer assignment finds that safe."""
    return {k: j for j, k in enumerate(vary)}


def body_then_cond(body: Module, cond: Module, vary: list) -> Module:
    """One sub-program per iteration: the body's varying outputs, then the condition on
    the new state (so an iteration runs one program, not two)."""
    ins = list(body.instructions)
    new_state = list(body.outputs)
    where: dict = {}
    for p, c in enumerate(cond.instructions):
        if c.op == "parameter":
            where[p] = new_state[c.attrs["number"]]
            continue
        where[p] = len(ins)
        ins.append(Instruction(c.op, tuple(where[o] for o in c.operands), c.shape, c.dtype,
                               c.attrs))
    return Module("body", ins, [new_state[k] for k in vary] + [where[cond.outputs[0]]])


def _renamed(module: Module, name: str) -> Module:
    return Module(name, module.instructions, module.outputs)


def step_positions(step: Step) -> list:
    """The module positions a control step reads and writes (for the Program's value
    table)."""
    return list(step.operands) + [p for p, _ in step.outputs]
