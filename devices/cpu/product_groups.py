"""Independent matrix products of a program side by side on the native pool.

A training step's backward pass has pairs of products that read the same gradient and
nothing of each other: the weight gradient g.T @ h and the input gradient g @ W of a
layer. The schedule puts them apart (each weight gradient just before its optimizer
update), and each runs split in one tile per thread: every tile packs its share of
both operands again, and a barrier follows. Run side by side, each whole on one thread
(or each split, when their sizes differ too much for that), they skip the split's
repeated packing and one barrier: 2 x 0.77 ms -> ~1.45 ms for a 512-wide layer's pair
on a 2-core machine.

`plan(exe, threads)` moves a product up next to an earlier one when that changes no
result: nothing between them writes what it reads, and nothing between them reads or
writes the memory its result goes to (the buffer plan may reuse that memory for a value
alive in between: the product's result then gets memory of its own). The two become
consecutive tasks of the program's job with no barrier between (`Job(go_on=...)`).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from . import native_gemm
from .step_barriers import writers

# A pair of products each on its own thread is worth it while the larger one takes at
# most this much more than an even share of both: a split costs ~5-8% in repeated
# packing (measured on the MLP step's 256x512x512 and 512x512x256 products: 0.77 ms each
# on 2 threads, 1.44 ms whole on one).
WHOLE_SLACK = 1.1
# Products below the work a product is split at (one tile, one thread anyway) stay apart:
# beside another, each would make its job wake the workers, which costs more than the
# pair saves (a decoding step's 1x64 @ 64x64 projections made a program of ~30 tiny
# kernels a parallel job: 140 us a token against 75 on the calling thread alone, on 2
# cores with the other one busy).
SIDE_BY_SIDE_WORK = native_gemm.SPLIT_WORK


class Plan:
    """The order of a program's steps for the native job, and how its products run."""

    def __init__(self, order: list, go_on: set, tiles: dict, own: set) -> None:
        self.order = order      # the steps, some products moved up next to another
        self.go_on = go_on      # id(step) of each product followed by no barrier
        self.tiles = tiles      # id(step) -> threads its product is split over
        self.own = own          # values given memory of their own (not their slot's)


def plan(exe: Any, threads: int, used: Callable[[dict], list],
         gemm_work: Callable[[dict], Optional[int]]) -> Plan:
    """`used(step)`: the values a step reads or writes; `gemm_work(step)`: a product
    step's estimated work when it is a native 2-D product, else None."""
    steps = list(exe.steps)
    written = writers(exe, used)
    given = {p for p, _ in exe.params} | set(exe._const_arrays)
    fixed = _fixed_values(exe)
    order: list = []
    groups: list = []          # each a list of product steps placed side by side
    own: set = set()
    for step in steps:
        work = gemm_work(step)
        if work is not None and work < SIDE_BY_SIDE_WORK:
            work = None     # a product run whole on one thread anyway stays apart
        placed = work is not None and _join(exe, step, order, groups, threads, written, given,
                                            fixed, used, gemm_work, own)
        if not placed:
            order.append(step)
            if work is not None:
                groups.append([step])
    go_on, tiles = set(), {}
    for group in groups:
        if len(group) < 2:
            continue
        for step in group[:-1]:
            go_on.add(id(step))
        whole = _whole(group, threads, gemm_work)
        for step in group:
            tiles[id(step)] = 1 if whole else threads
    return Plan(order, go_on, tiles, own)


LOOK_BACK = 8       # how many earlier groups a product may join, and how many steps it
REACH = 64          # may move over at most (planning stays linear in the steps)


def _join(exe: Any, step: dict, order: list, groups: list, threads: int, written: dict,
          given: set, fixed: set, used: Callable, gemm_work: Callable, own: set) -> bool:
    """Place `step` beside the products of an earlier group when it may move there:
    the latest group where each product then runs whole on a thread, else the latest
    group it may join at all."""
    best = None
    for group in reversed(groups[-LOOK_BACK:]):
        if len(group) >= threads:
            continue
        start = _index(order, group[0])
        if len(order) - start > REACH:
            break                  # (earlier groups are farther still)
        mine = _movable(exe, step, order[start:], written, given, fixed, used)
        if mine is None:
            continue
        if _whole(group + [step], threads, gemm_work):
            best = (group, start, mine)
            break
        if best is None:
            best = (group, start, mine)
    if best is None:
        return False
    group, start, mine = best
    order.insert(start + len(group), step)
    group.append(step)
    own |= mine
    return True


def _whole(group: list, threads: int, gemm_work: Callable) -> bool:
    """Whether the group's products run faster each whole on a thread than each split."""
    works = [gemm_work(s) for s in group]
    return len(works) > 1 and max(works) <= WHOLE_SLACK * sum(works) / threads


def _index(order: list, step: dict) -> int:
    for k in range(len(order) - 1, -1, -1):       # (a group is near the end)
        if order[k] is step:
            return k
    raise ValueError("step not in the order")


def _fixed_values(exe: Any) -> set:
    """Values whose memory is not the program's to move: outputs, values in a parameter's
    slot (donated memory), the two sides of an in-place output."""
    fixed = set(exe.outputs)
    fixed |= {p for p, slot in exe.slot_of.items() if slot in exe._param_slots}
    for o, x in exe._aliases:
        fixed |= {o, x}
    return fixed


def _movable(exe: Any, step: dict, between: list, written: dict, given: set, fixed: set,
             used: Callable[[dict], list]) -> Optional[set]:
    """The values to give memory of their own when `step` (a product) can run before or
    beside the steps `between`, else None: none of them writes one of its operands
    (`written`: step_barriers.writers), and none touches the memory its result goes to
    (else that result takes memory of its own, when it may: not an output, not donated
    memory)."""
    out = step.pos
    if out in fixed:
        return None
    late = {id(s) for s in between}
    for o in step.operands:
        if o not in given and late & written.get(o, set()):
            return None          # an operand is computed in between
    slot = exe.slot_of.get(out)
    if slot is None:
        return set()
    for s in between:
        for p in used(s):
            if p is not None and p != out and exe.slot_of.get(p) == slot:
                return {out}     # its slot holds another value meanwhile: own memory
    return set()
