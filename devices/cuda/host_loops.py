"""A `while` step driven from the host: the CUDA device's form where a CUDA graph with a
WHILE node cannot run it (an older driver, a sub-program with a step a graph cannot
hold, a profile, graphs turned off: cuda.py `_as_graph`).

The body is compiled with its varying state donated, as for the CPU and the graph form
(compiler/codegen/control_steps.py `carried_state`, compiler/program.py
`state_buffers`, CudaExecutable.carry): a state value whose new value the body plans
in the old one's buffer -- written over it in place (an elementwise update, a KV
cache's dynamic_update_slice, which then writes the update alone) or once the old one
is dead -- has one buffer, the loop's own (the operand is copied into it once, at
entry: a user's tensor is never written). The other state values' new values come in
buffers of their own and take the old ones' place (two buffers, nothing copied).

Two ways to wait for the condition, chosen per step (`drive_while`):

- read-ahead: each iteration's body is queued before the host knows whether it is
  needed, so the GPU computes it while the previous condition travels to the host (no
  idle round trip per iteration). A body run past the loop's end must leave the state
  as it was, so it may write nothing in place: a state the body updates in place is
  written into a copy at each iteration. Chosen when those states are small (up to
  AHEAD_COPY_BYTES: a counter, a hidden vector), whose copy costs less than a round
  trip.
- in place: larger states updated in place (a KV cache) are written where they are, so
  no body may run ahead: the host reads each condition back before queuing the next
  body (one round trip per iteration, no copy of the state). A body holding a loop of
  its own runs this way too (a nested loop on a state past the end might not end).

The graph form has neither cost: the GPU tests the condition itself (cuda_loops.py).
"""
from __future__ import annotations

from typing import Any, Callable

from ...compiler.program import CONTROL_STEPS, WhileStep, run_while

# a body's in-place states up to this many bytes are copied per iteration so that the
# body can run one iteration ahead; larger ones are updated in place, read back each time
AHEAD_COPY_BYTES = 1 << 20


def speculable(body: Any) -> bool:
    """Whether a loop's body may run one iteration ahead of its condition: it exists and
    holds no loop of its own (kernels and library calls always end; a nested loop on a
    state past the loop's end might not)."""
    return body is not None and not any(isinstance(s, CONTROL_STEPS) for s in body.steps)


def drive_while(device: Any, step: WhileStep, operands: list, cond: Any, body: Any,
                run_sub: Callable) -> list:
    """The final state of a while step run from the host; `run_sub(exe, args, in_place)`
    runs a loaded sub-program (see the module doc)."""
    one, written = _one_buffer(body)
    run_cond = lambda st: run_sub(cond, st, True)           # noqa: E731
    if speculable(body) and sum(operands[k].nbytes for k in written) <= AHEAD_COPY_BYTES:
        return run_while_ahead(step, list(operands), run_cond,
                               lambda st: run_sub(body, st, False), device.read_later)
    state = list(operands)
    for k in one:                   # the loop's own buffer: the operand is never written
        state[k] = device.new_buffer(operands[k].shape, operands[k].dtype)
        device.copy(operands[k], state[k])
    return run_while(step, state, run_cond,
                     (lambda st: run_sub(body, st, True)) if body is not None else None,
                     lambda pred: bool(device.get(pred)))


def _one_buffer(body: Any) -> tuple:
    """(the state indices a loaded body keeps in one buffer, those of them it writes
    over in place: the plan's aliases); see CudaExecutable.carry."""
    if body is None:
        return [], []
    number = {int(p): int(n) for p, n in body.program.params}
    written = sorted(number[x] for x in body.aliases.values())
    return sorted(written + [number[x] for x in body.state_outputs.values()]), written


def run_while_ahead(step: WhileStep, state: list, run_cond: Any, run_body: Any,
                    read_later: Callable) -> list:
    """A "while" step with its condition read back asynchronously: each iteration's body
    is queued before the host knows whether it is needed, so the GPU computes it while
    the previous condition travels to the host (no idle round trip per iteration).
    A body past the loop's end is dropped: its results are fresh buffers, the state
    stays as it was (one iteration of wasted work at the end)."""
    vary = step.varying
    pending = read_later(run_cond(state)[0])
    while True:
        ahead = run_body(state)
        if not bool(pending()):
            return state
        for k, v in zip(vary, ahead):
            state[k] = v
        pending = read_later(ahead[-1])
