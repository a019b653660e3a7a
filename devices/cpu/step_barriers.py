"""Which steps of a program's native job need no barrier after them.

The tasks of a native job run in order with a barrier between them, so that each may
read what the one before wrote. Many neighbours in a training step share nothing: the
optimizer's updates of different parameters, a layer's ReLU-gradient kernel and its bias
gradient. A barrier between them costs a wait on the slower thread, and a one-chunk task
(the update of a bias, of a 10-wide layer's weights) leaves the other threads idle till
it ends. Without the barrier (`Job(go_on=...)`) a thread that finds no chunk of a task
left goes on to the next task's chunks.

A step may follow without a barrier when it touches no memory written by any task since
the last barrier, and writes no memory those tasks read. Memory is compared by buffer
slot (values planned in one slot may share its memory, in-place outputs that of their
parameter), so a value reusing a dead value's memory counts as touching it.

A value is written by every step of the plan kernel that computes it, not by its first
step alone: a scatter is two steps of one kernel (its operand copied into the result,
then the updates written into it), so the step after the updates must wait for them
(a reduction over a GPT's embedding gradient read it while the scatter still wrote:
losses differed from run to run in the last digits).
"""
from __future__ import annotations

from typing import Any, Callable, Hashable


def free_steps(exe: Any, order: list, go_on: set, own: set,
               used: Callable[[dict], list]) -> set:
    """id(step) of each step in `order` (not the last) that needs no barrier after it.
    `go_on`: the steps already followed by no barrier (products placed side by side,
    product_groups.py): no step is chained into the start of such a group, whose pair
    was checked only against itself. `own`: the values given memory of their own."""
    memory = _memory_key(exe, own)
    producer = writers(exe, used)
    free: set = set()
    open_used: set = set()         # memory read or written by the tasks since the barrier
    open_written: set = set()
    for k, step in enumerate(order[:-1]):
        touched, written = _access(step, used, producer, memory)
        open_used |= touched
        open_written |= written
        nxt = order[k + 1]
        if id(step) in go_on:
            continue               # a product pair: its own check (product_groups)
        n_touched, n_written = _access(nxt, used, producer, memory)
        if id(nxt) not in go_on and not (n_written & open_used) and not (n_touched & open_written):
            free.add(id(step))
        else:
            open_used, open_written = set(), set()
    return free


def _memory_key(exe: Any, own: set) -> Callable[[int], Hashable]:
    """value -> what names its memory: its slot (shared by the values planned there; an
    in-place output's is its parameter's), or the value itself when its memory is its
    own (a parameter's array, a constant, scratch of its own)."""
    alias = {o: x for o, x in exe._aliases}
    slot_of = exe.slot_of

    def key(p: int) -> Hashable:
        p = alias.get(p, p)
        slot = slot_of.get(p)
        return ("value", p) if slot is None or p in own else ("slot", slot)
    return key


def writers(exe: Any, used: Callable[[dict], list]) -> dict:
    """value -> ids of the steps that write it: each step of the plan kernel whose step
    first uses the value (a value neither a parameter nor a constant is computed by the
    first step that touches it, and a kernel of several steps writes its values in any
    of them)."""
    given = {p for p, _ in exe.params} | set(exe._const_arrays)
    kernels: dict = {}
    for step in exe.steps:
        kernels.setdefault(step.kernel, set()).add(id(step))
    out: dict = {}
    for step in exe.steps:
        for p in used(step):
            if p is not None and p not in given and p not in out:
                out[p] = kernels[step.kernel] if step.kernel else {id(step)}
    return out


def _access(step: dict, used: Callable[[dict], list], producer: dict,
            memory: Callable[[int], Hashable]) -> tuple:
    """(memory the step reads or writes, memory it writes); `producer`: `writers`."""
    touched, written = set(), set()
    for p in used(step):
        if p is None:
            continue
        key = memory(p)
        touched.add(key)
        if id(step) in producer.get(p, ()):
            written.add(key)
    return touched, written
