"""Host stand-ins for a GPU program's kernels, for the fake driver (cuda_fake.py).

GPU kernels use thread indices, warp shuffles and barriers that do not run on a CPU, so a
fake launch runs the CPU target's code for the same kernel of the same fusion plan: the
plan is compiled for the host with every value in its own buffer (the GPU runtime gives
each value its own allocation, where the CPU's buffer plan would share them), and each
GPU launch maps to the CPU steps of its plan kernel by name. The second stage of a
two-stage full reduction has nothing left to do on the host.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

from ..compiler.codegen import cpu_kernels, llvm_target
from ..compiler.codegen.nvptx import LaunchSpec, kernel_entry_name
from ..compiler.plan import BufferPlan, ExecutionPlan
from . import cpu_program


def _own_buffers(plan: ExecutionPlan) -> ExecutionPlan:
    """The plan with each value in a buffer of its own, except an output updated in place,
    which shares its donated parameter's (as the GPU runtime gives them one buffer)."""
    ins = plan.module.instructions
    slot_of = {pos: pos for pos in range(len(ins))}
    aliases = dict(plan.buffers.aliases)
    for out, param in aliases.items():
        slot_of[out] = param
    sizes = [int(np.prod(i.shape, dtype=np.int64)) * i.dtype.itemsize for i in ins]
    return ExecutionPlan(plan.module, plan.kernels,
                         BufferPlan(slot_of, sizes, sum(sizes), aliases=aliases), plan.decisions)


def host_kernels(plan: ExecutionPlan, launches: list, name: str) -> dict:
    """launch name -> (callable(device pointers), number of parameters) for every
    LaunchSpec of `launches` (the GPU program of `plan`)."""
    from .cpu import CPUDevice, CPUExecutable
    own = _own_buffers(plan)
    ir_text, steps = cpu_kernels.generate(own, name)
    llmod = llvm_target.optimize(ir_text, name)
    meta = cpu_program.describe(own, steps)
    exe = CPUExecutable(meta, llvm_target.emit_object(llmod), CPUDevice(lambda: {"num_threads": 1}))
    by_kernel: dict = {}
    for step in steps:
        # a CPU partial reduction's epilogue is a step of its own ("<kernel>_epilogue")
        owner = step["kernel"][:-len("_epilogue")] if step["kernel"].endswith("_epilogue") \
            else step["kernel"]
        by_kernel.setdefault(owner, []).append(step)
    entries = {}
    for k, kernel in enumerate(plan.kernels):
        entries[kernel_entry_name(k, kernel.name)] = kernel.name
    out = {}
    for spec in launches:
        if not isinstance(spec, LaunchSpec):
            continue
        base = spec.name[:-2] if spec.name[-2:] in ("_1", "_2") and spec.name[:-2] in entries \
            else spec.name
        if base not in entries:
            raise ValueError(f"fake cuda: launch {spec.name!r} matches no kernel of the plan")
        work = [] if spec.name.endswith("_2") and base != spec.name else by_kernel.get(entries[base], [])
        out[spec.name] = (_runner(exe, work, spec.params, plan), len(spec.params))
    return out


def _runner(exe: Any, steps: list, params: list, plan: ExecutionPlan) -> Callable:
    ins = plan.module.instructions

    def run(pointers: list) -> None:
        arrays = {}
        for p, ptr in zip(params, pointers):
            if isinstance(p, str):           # a scratch buffer of the GPU code only
                continue
            arrays[p] = _view(ptr, ins[p].shape, ins[p].dtype.np)
        for step in steps:
            if step["type"] == "partial":
                exe._partial(step, arrays)
            elif step["type"] == "loop":
                exe._loop(step, arrays)
            else:
                raise ValueError(f"fake cuda: a {step['type']} step inside a GPU kernel")
    return run


def _view(ptr: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    nbytes = n * np.dtype(dtype).itemsize
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)
