"""Kernels with the same code share one function (compiler/codegen/kernel_key.py): two
kernels whose fused ops are the same and wired the same way get equal keys even where
the module interleaves their ops differently, and the steps made for one, mapped onto
the other, read and write the other's buffers."""
from __future__ import annotations

import numpy as np

from lazyarray.compiler.codegen import cpu_kernels
from lazyarray.compiler.codegen.kernel_key import kernel_key
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.compiler.planning.plan import LOOP, BufferPlan, ExecutionPlan, Kernel

F32 = D.float32


def _scaled_exp(x: int, at: int, constant_first: bool) -> list:
    """exp(x) * 0.5 as instructions starting at position `at`, with the constant and
    its broadcast recorded before the exp or after it."""
    half = [Instruction("constant", (), (), F32, {"value": Literal(np.float32(0.5))}),
            None]
    if constant_first:
        half[1] = Instruction("broadcast_in_dim", (at,), (4, 8), F32,
                              {"shape": (4, 8), "broadcast_dimensions": ()})
        ex = Instruction("exponential", (x,), (4, 8), F32, {})
        return half + [ex, Instruction("multiply", (at + 2, at + 1), (4, 8), F32, {})]
    ex = Instruction("exponential", (x,), (4, 8), F32, {})
    half[1] = Instruction("broadcast_in_dim", (at + 1,), (4, 8), F32,
                          {"shape": (4, 8), "broadcast_dimensions": ()})
    return [ex] + half + [Instruction("multiply", (at, at + 2), (4, 8), F32, {})]


def _plan() -> ExecutionPlan:
    params = [Instruction("parameter", (), (4, 8), F32, {"number": k}) for k in range(2)]
    ins = params + _scaled_exp(0, 2, True) + _scaled_exp(1, 6, False)
    module = Module("interleaved", ins, [5, 9])
    kernels = [Kernel("loop_0", LOOP, [2, 3, 4, 5], [5], [0]),
               Kernel("loop_1", LOOP, [6, 7, 8, 9], [9], [1])]
    slots = {0: 0, 1: 1, 5: 2, 9: 3}
    return ExecutionPlan(module, kernels, BufferPlan(slots, [128] * 4, 512))


def test_kernels_interleaved_differently_get_one_key():
    plan = _plan()
    (a, _), (b, _) = (kernel_key(plan, k) for k in plan.kernels)
    assert a == b


def test_the_second_kernel_calls_the_first_ones_function_with_its_own_buffers():
    _, steps = cpu_kernels.generate_module(_plan(), "interleaved")
    assert [s.fn for s in steps] == [steps[0].fn] * 2
    assert [s.args for s in steps] == [[5, 0], [9, 1]]
