"""A dynamic_update_slice written over its own operand on the GPU: one thread per element
of the *update*, each storing its value at its place in the operand's buffer (XLA's
in-place dynamic-update-slice emitter; the CPU's is cpu_kernels._update_region). The work
is the update's size, not the buffer's: a KV cache carried by a loop, or donated to a
program, gets its new row written and nothing else.

It applies where the plan writes the kernel's one output over the operand (an alias of
buffer assignment: a donated parameter, a loop body's state under
control_steps.carried_state), the operand coming from outside the kernel: then the
buffer already holds every element outside the update. A kernel whose output has a
buffer of its own keeps the loop over the whole output (each element the operand's or
the update's).
"""
from __future__ import annotations

from typing import Any, Optional

from ..planning.buffer_assignment import updated_in_place


def in_place_update(plan: Any, kernel: Any) -> Optional[Any]:
    """The kernel's dynamic_update_slice when the plan writes it over its operand in
    place (the decision the CPU's update kernel takes too), else None."""
    return updated_in_place(plan.module, plan.buffers, kernel.members, kernel.outputs)


def update_kernel(mod: Any, plan: Any, kernel: Any, name: str, gpu: Any, dus: Any) -> Any:
    """The LaunchSpec of the kernel: a grid-stride loop over the update's elements."""
    from . import index_rules, nvptx
    ushape = plan.module.instructions[dus.operands[1]].shape
    (out,) = kernel.outputs

    def body(b: Any, args: list, index: list) -> None:
        em = nvptx._emitter(b, mod, plan, kernel, args)
        starts = index_rules.update_starts(em, dus)       # clamped: the update fits
        value = em.at(dus.operands[1], index)
        em.store(em.out_ptr[out], dus.shape, value,
                 [b.add(i, s, flags=("nsw",)) for i, s in zip(index, starts)])

    spec = nvptx.emit_loop(mod, name, ushape, len(nvptx._params(kernel)), body, gpu)
    spec.params = nvptx._params(kernel)
    return spec
