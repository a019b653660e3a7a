"""Host stand-ins for a GPU program's kernels, for the fake driver (cuda_fake.py).

GPU kernels use thread indices, warp shuffles and barriers that do not run on a CPU, so a
fake launch runs the CPU target's code for the same kernel of the same fusion plan: the
module is compiled for the host with every value in its own buffer (as the GPU runtime
allocates them; `separate_buffers`), and each GPU launch maps to the CPU steps of its
plan kernel by name (the GPU entry is `k<index>_<kernel>`, with `_0`, `_1`, ... for the
loops of an opaque op, which the host steps do all at the first launch). These check the
runtime, not the GPU kernels' code: devices/stand_ins/cuda_simt.py runs that code.
"""
from __future__ import annotations

import ctypes
import re
from typing import Any, Callable

import numpy as np

from ...compiler.driver import compile as compile_program
from ...compiler.hlo.module import Module
from ...compiler.program import (CONTROL_STEPS, LaunchStep, LoopStep, PartialStep, Program,
                                 Step, sub_program)


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def host_kernels(module: Module, donated: frozenset, gpu: Program) -> dict:
    """GPU entry name -> (callable(device pointers), number of parameters) for every
    launch step of `gpu` (the GPU program of `module`); under the key CONTROL, for each
    control step of `gpu` (a while or conditional), the same map of each of its
    sub-programs (None for a while body that changes nothing)."""
    host = compile_program(module, "cpu", donated, separate_buffers=True)
    return _kernels(host, gpu)


CONTROL = "__control__"


def _kernels(host: Program, gpu: Program) -> dict:
    from ..cpu.cpu import CPUDevice, CPUExecutable
    exe = CPUExecutable(host, CPUDevice(lambda: {"num_threads": 1}))
    by_kernel: dict = {}
    for step in host.steps:
        # a CPU partial reduction's epilogue is a step of its own ("<kernel>_epilogue")
        owner = re.sub(r"_epilogue$", "", step.kernel)
        by_kernel.setdefault(_ident(owner), []).append(step)
    out: dict = {CONTROL: {}}
    done: set = set()
    for step in gpu.steps:
        if isinstance(step, CONTROL_STEPS):
            out[CONTROL][step.kernel] = _control_kernels(step, by_kernel)
            continue
        if not isinstance(step, LaunchStep):
            continue
        owner = _owner(re.sub(r"^k\d+_", "", step.fn), by_kernel)
        if owner is None:
            raise ValueError(f"fake cuda: launch {step.fn!r} matches no kernel of the "
                             f"host program ({', '.join(sorted(by_kernel))})")
        # a kernel launched in stages (a full reduction's two, an opaque op's loops): the
        # host steps do all of it at the first launch, nothing is left for the others
        work = [] if owner in done else by_kernel[owner]
        done.add(owner)
        out[step.fn] = (_runner(exe, work, step.args), len(step.args))
    return out


def _control_kernels(step: Step, by_kernel: dict) -> list:
    """The host maps of a GPU control step's sub-programs, paired with the host program's
    step of the same kernel (the two targets share the fusion plan)."""
    (host_step,) = by_kernel[_ident(step.kernel)]
    return [None if g is None else _kernels(sub_program(h), sub_program(g))
            for g, h in zip(step.sub_programs(), host_step.sub_programs())]


def _owner(base: str, by_kernel: dict) -> Any:
    """The host kernel a GPU entry belongs to: the same name, or the name with a stage
    suffix (`_<n>`)."""
    if base in by_kernel:
        return base
    stem = re.sub(r"_\d+$", "", base)
    return stem if stem in by_kernel and stem != base else None


def _runner(exe: Any, steps: list, params: list) -> Callable:
    values = exe.values

    def run(pointers: list) -> None:
        arrays = {}
        for p, ptr in zip(params, pointers):
            if isinstance(p, str):           # a scratch buffer of the GPU code only
                continue
            arrays[p] = _view(ptr, values[p].shape, values[p].dtype.np)
        for step in steps:
            if not isinstance(step, (LoopStep, PartialStep)):
                raise ValueError(f"fake cuda: a {step.kind} step inside a GPU kernel")
            exe.run_step(step, arrays)
    return run


def _view(ptr: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    nbytes = n * np.dtype(dtype).itemsize
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(ptr)
    return np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)
