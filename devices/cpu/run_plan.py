"""The CPU runtime's one plan of how a program runs: pure data, computed from its typed steps.

`plan(exe, threads)` turns a loaded program's steps and buffer plan into a `ProgramPlan`
and reads no address: kernels are named by their symbols, buffers by their index in one
address table, work by its chunk ranges for that thread count (`step_ranges`: the split
is a function of the thread count, never a value baked into a step). Two executors bind
the same plan:

- in-process, `NativeProgram` (native_program.py) gives every table entry its memory
  (parameters, constants, slots, partial arrays, product descriptors), resolves each
  symbol in the loaded object code and runs the jobs on the native pool;
- ahead of time, the C driver (aot.py) writes the plan as C tables: the table entries
  become arena offsets and inputs, the jobs static task tables run by the same pool code
  (`lzp_run`), loops and branches C functions over their sub-plans.

The table: parameters first, then constants, then the buffer plan's slots (one entry per
slot; a parameter's slot one entry per value planned there, since a donation may or may
not give its memory), then values with memory of their own, then what the steps need
besides (a product's descriptor, a reduction's partial arrays, a chunk count).

Segments run in order: a `JobPlan` is one job of the pool (tasks with a barrier after
each but those in `go_on`; `fills`: partial arrays reset to their start value before it;
`copies`: reductions without a finish phase, argmax's, copied out after it), a
`CallPlan` a library step run outside any job (a host call's NumPy reference, a product
the native tiles do not cover: NumPy's matmul; in a C library every product: BLAS), a
`ControlPlan` a while or conditional step with the plans of its sub-programs. A
stepwise plan (`stepwise=True`: a profile, debug >= 2) makes each step a segment of its
own, so that each is timed.

`exe` needs only the loaded program's pure fields (steps, values, params, outputs,
slot_of, slot_bytes, `_aliases`, `_param_slots`, `_const_arrays`, `_subs`): a
CPUExecutable, or a `ProgramView` of a Program that is never loaded (aot.py).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ...compiler.hlo import dtypes as D
from ...compiler.program import (CONTROL_STEPS, LibraryStep, LoopStep, PartialStep, Program,
                                 Step, sub_program)
from . import native_gemm, product_groups, step_barriers
from .native_pool import split

SPLIT_ELEMENTS = 1 << 15      # below this much work a kernel runs on one thread
CHUNKS_PER_THREAD = 4         # chunks a thread takes of a large kernel (balance on a busy core)
# Inside a job that runs on every thread anyway, a loop kept whole for being small (below
# SPLIT_ELEMENTS: a split would cost a dispatch) leaves the other threads waiting at its
# barrier: there it is split as soon as each thread gets this much (a softmax over a
# 256x10 batch's logits, 38 us of CPU whole, ran on one thread of the MLP step's job).
# Each chunk computes whole rows of the outer dimension: the results are the same.
JOB_SPLIT_ELEMENTS = 1 << 10


# ---- the plan ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Input:
    number: int           # the argument
    index: int            # its table entry
    pos: int              # its value


@dataclass(frozen=True)
class Constant:
    pos: int
    index: int


@dataclass(frozen=True)
class Slot:
    """Memory one table entry names: a buffer-plan slot (`key` its number) shared by
    `members`, or a value's own (`key` ("own", pos))."""
    index: int
    key: Any
    nbytes: int
    members: tuple


@dataclass(frozen=True)
class ParamSlot:
    """A parameter's slot: (table entry, value) per value planned there."""
    slot: int
    entries: tuple


@dataclass(frozen=True)
class Partial:
    """A reduction root's partial array: `chunks` rows of `shape` in dtype `acc`."""
    index: int
    pos: Optional[int]    # the value it reduces to (None: working state, argmax's best)
    acc: str
    shape: tuple
    init: Any
    kind: str
    chunks: int

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * D.from_name(self.acc).itemsize


@dataclass(frozen=True)
class Task:
    """One kernel over its chunk ranges. `args`, `partials`, `counts`: table entries (a
    partial's pointer is its entry plus chunk x stride bytes); `fn`: the kernel's symbol,
    "" for a product, whose tile function and descriptor (the last argument) come from
    `product` = (step number, threads its tiles are planned for); `split`: (extent, work)
    of a loop whose range may be split again by another thread count (a C library's)."""
    fn: str
    args: tuple
    partials: tuple
    strides: tuple
    ranges: tuple
    counts: tuple = ()
    product: Optional[tuple] = None
    split: Optional[tuple] = None


@dataclass(frozen=True)
class JobPlan:
    tasks: tuple
    go_on: tuple          # tasks followed by no barrier
    fills: tuple          # plan.partials numbers reset before the job
    copies: tuple         # plan.partials numbers copied into their value after it
    steps: tuple = ()     # the numbers of the steps it runs, in order


@dataclass(frozen=True)
class CallPlan:
    step: int             # the library step's number
    buffers: tuple        # table entries of its operands, then its result


@dataclass(frozen=True)
class ControlPlan:
    step: int
    subs: tuple           # ProgramPlan per sub-program (None: a loop body changing nothing)


@dataclass(frozen=True)
class ProgramPlan:
    threads: int
    size: int             # table entries
    inputs: tuple
    constants: tuple
    slots: tuple
    param_slots: tuple
    partials: tuple
    counts: tuple         # (table entry, integer it holds)
    segments: tuple

    def entries(self) -> dict:
        """value -> its table entry."""
        where = {i.pos: i.index for i in self.inputs}
        where.update((c.pos, c.index) for c in self.constants)
        for slot in self.slots:
            where.update(dict.fromkeys(slot.members, slot.index))
        for param_slot in self.param_slots:
            where.update((p, index) for index, p in param_slot.entries)
        return where

    def to_data(self) -> dict:
        """The plan as plain JSON-able data (`from_data` gives it back)."""
        return _data(self)

    @classmethod
    def from_data(cls, data: dict) -> "ProgramPlan":
        return _undata(data)


_TYPES = {c.__name__: c for c in (Input, Constant, Slot, ParamSlot, Partial, Task, JobPlan,
                                  CallPlan, ControlPlan, ProgramPlan)}


def _data(v: Any) -> Any:
    if dataclasses.is_dataclass(v):
        out = {"type": type(v).__name__}
        out.update({f.name: _data(getattr(v, f.name)) for f in dataclasses.fields(v)})
        return out
    if isinstance(v, tuple):
        return [_data(x) for x in v]
    return v


def _undata(v: Any) -> Any:
    if isinstance(v, dict):
        cls = _TYPES[v["type"]]
        return cls(**{k: _undata(x) for k, x in v.items() if k != "type"})
    if isinstance(v, list):
        return tuple(_undata(x) for x in v)
    return v


# ---- splits ---------------------------------------------------------------------------------

def step_ranges(step: Step, threads: int) -> list:
    """A kernel step's chunk ranges on `threads` threads: whole below SPLIT_ELEMENTS of
    work (a split costs a dispatch), else a few chunks per thread, taken from a queue
    (balance when a core is busy)."""
    return split_ranges(int(step.extent), int(step.work), bool(step.serial), threads)


def split_ranges(extent: int, work: int, serial: bool, threads: int) -> list:
    small = extent * max(1, work) < SPLIT_ELEMENTS
    if threads <= 1 or small or extent < 2 or serial:
        return [(0, extent)]
    per_thread = CHUNKS_PER_THREAD if extent * work >= 64 * SPLIT_ELEMENTS else 1
    return split(extent, threads * per_thread)


def split_in_job(step: Step, ranges: list, threads: int) -> list:
    """A one-chunk loop's ranges in a parallel job: one chunk per thread when each has
    JOB_SPLIT_ELEMENTS of work."""
    extent = int(step.extent)
    if len(ranges) > 1 or step.serial or \
            extent * max(1, int(step.work)) < JOB_SPLIT_ELEMENTS * threads:
        return ranges
    return split(extent, threads)


# ---- what steps touch ---------------------------------------------------------------------

def host(step: Step) -> bool:
    return isinstance(step, LibraryStep) and step.call == "host"


def product(step: Step) -> bool:
    return isinstance(step, LibraryStep) and step.call == "gemm"


def used(step: Step) -> list:
    """The values a step reads or writes through its buffer arguments."""
    if isinstance(step, LibraryStep):
        return list(step.operands) + [step.pos]
    if isinstance(step, CONTROL_STEPS):
        return list(step.operands) + [p for p, _ in step.outputs]
    if isinstance(step, PartialStep):
        return list(step.args) + list(step.finish_args or ()) + [r["pos"] for r in step.roots]
    return list(step.args)


def outside(exe: Any, step: Step, products_in_jobs: bool = True) -> bool:
    """Whether a step runs outside the pool's jobs: a loop or branch, a host call, a
    product the native tiles do not cover (integer, complex, operands needing a copy)
    or, in a C library, any product (BLAS)."""
    if isinstance(step, CONTROL_STEPS):
        return True
    if not isinstance(step, LibraryStep):
        return False
    return not (products_in_jobs and step.call == "gemm" and gemm_task(exe, step, 1) is not None)


def roots(step: Step) -> list:
    """A partial step's reduced values (none for another step)."""
    return step.roots if isinstance(step, PartialStep) else []


def gemm_task(exe: Any, step: LibraryStep, threads: int) -> Optional[tuple]:
    """native_gemm.program_task for a product step (tile function address, descriptor,
    ranges), when its operands and result share one float dtype."""
    lhs, rhs = (exe.values[o] for o in step.operands)
    out = exe.values[step.pos]
    if not lhs.dtype == rhs.dtype == out.dtype:
        return None
    return native_gemm.program_task(step.args, lhs.shape, rhs.shape, out.shape,
                                    out.dtype.np, threads)


def gemm_work(exe: Any, step: Step) -> Optional[int]:
    """A native product step's estimated work (native_gemm.work), else None."""
    if not product(step) or gemm_task(exe, step, 1) is None:
        return None
    a = step.args
    return a["batch"] * native_gemm.work(a["m"], a["n"], a["k"])


def parallel_jobs(exe: Any, order_plan: Any, threads: int, products_in_jobs: bool = True
                  ) -> dict:
    """id(step) -> whether the job it runs in wakes the workers anyway (a step of that job
    is split over threads). A partial step without a finish phase ends a job."""
    out: dict = {}
    job: list = []
    wide = False
    for step in order_plan.order:
        if outside(exe, step, products_in_jobs):     # between jobs, never in one
            out.update(dict.fromkeys(job, wide))
            job, wide = [], False
            continue
        job.append(id(step))
        if threads > 1:
            if isinstance(step, LibraryStep):
                # split over threads only from SPLIT_WORK on (native_gemm.program_task):
                # a small batch's one tile per matrix runs on one thread (attention's
                # products in a decoding loop made its every iteration wake the workers)
                wide = wide or (order_plan.tiles.get(id(step), threads) > 1
                                and gemm_work(exe, step) >= native_gemm.SPLIT_WORK)
            else:
                wide = wide or len(step_ranges(step, threads)) > 1
        if isinstance(step, PartialStep) and not step.finish:
            out.update(dict.fromkeys(job, wide))
            job, wide = [], False
    out.update(dict.fromkeys(job, wide))
    return out


def _go_on(tasks: list, paired: list, free: list) -> tuple:
    """The tasks of a job followed by no barrier: products side by side, and steps free
    of the next (step_barriers.py) when the job runs on several threads anyway (a job of
    one-chunk tasks runs on the calling thread, waking no worker: dropping a barrier
    there would wake them)."""
    if free and any(len(t.ranges) > 1 for t in tasks):
        return tuple(sorted(set(paired) | {t for t in free if t < len(tasks) - 1}))
    return tuple(paired)


# ---- planning ------------------------------------------------------------------------------

def plan(exe: Any, threads: int, products_in_jobs: bool = True, stepwise: bool = False
         ) -> ProgramPlan:
    """The plan of `exe`'s steps for `threads` threads. `products_in_jobs`: matrix
    products are tasks of the jobs (the native tiles); else each is a CallPlan.
    `stepwise`: each step a segment of its own, in the program's order (a profile times
    each): no products side by side, no barrier dropped."""
    return _Planner(exe, threads, products_in_jobs, stepwise).plan()


def plan_for(exe: Any, threads: int, stepwise: bool = False) -> tuple:
    """(`plan(exe, threads, stepwise=stepwise)`, the order of its steps
    (product_groups.Plan: what the plan's products side by side came from)), made once
    per executable, thread count and kind."""
    key = ("plan", threads, stepwise)
    found = exe._range_cache.get(key)
    if found is None:
        planner = _Planner(exe, threads, True, stepwise)
        found = exe._range_cache[key] = (planner.plan(), planner.order)
    return found


class _Planner:
    def __init__(self, exe: Any, threads: int, products_in_jobs: bool, stepwise: bool) -> None:
        self.exe, self.threads, self.products_in_jobs = exe, threads, products_in_jobs
        self.stepwise = stepwise
        self.where: dict = {}             # value -> table entry
        self.size = 0
        self.partials: list = []
        self.counts: list = []
        self.number = {id(s): k for k, s in enumerate(exe.steps)}
        grouped = products_in_jobs and not stepwise
        work = (lambda s: gemm_work(exe, s)) if grouped else (lambda s: None)
        self.order = product_groups.plan(exe, threads, used, work)

    def entry(self) -> int:
        self.size += 1
        return self.size - 1

    def plan(self) -> ProgramPlan:
        exe, where = self.exe, self.where
        inputs = []
        for p, number in exe.params:
            where[p] = self.entry()
            inputs.append(Input(number, where[p], p))
        constants = []
        for p in exe._const_arrays:
            where[p] = self.entry()
            constants.append(Constant(p, where[p]))
        slots, param_slots = self._slots()
        segments = self._segments()
        return ProgramPlan(self.threads, self.size, tuple(inputs), tuple(constants), slots,
                           param_slots, tuple(self.partials), tuple(self.counts), segments)

    def _slots(self) -> tuple:
        """One entry per slot of the buffer plan (per value in a parameter's slot), then
        one per value that has no slot or is given memory of its own (product_groups)."""
        exe, where, own = self.exe, self.where, self.order.own
        by_slot: dict = {}
        sizes = dict(enumerate(exe.slot_bytes))
        for p, slot in exe.slot_of.items():
            if p not in where and p not in own:
                by_slot.setdefault(slot, []).append(p)
        for step in exe.steps:
            for p in used(step):
                if p is not None and p not in where and (p not in exe.slot_of or p in own):
                    by_slot[("own", p)] = [p]
                    sizes[("own", p)] = exe.values[p].nbytes
        slots, param_slots = [], []
        for slot, members in by_slot.items():
            if slot in exe._param_slots:
                entries = []
                for p in members:
                    where[p] = self.entry()
                    entries.append((where[p], p))
                param_slots.append(ParamSlot(slot, tuple(entries)))
                continue
            index = self.entry()
            for p in members:
                where[p] = index
            slots.append(Slot(index, slot, sizes[slot], tuple(members)))
        return tuple(slots), tuple(param_slots)

    def _segments(self) -> tuple:
        exe, where, threads = self.exe, self.where, self.threads
        order = self.order
        segments: list = []
        job = _Job()
        # steps that share no memory with the tasks since the last barrier follow with
        # none (step_barriers.py); products side by side are the order's own
        unbarred, wide = set(), {}
        if not self.stepwise:
            unbarred = step_barriers.free_steps(exe, order.order, order.go_on, order.own, used)
            wide = parallel_jobs(exe, order, threads, self.products_in_jobs)
        for step in order.order:
            k = self.number[id(step)]
            if self.stepwise:
                job.flush(segments)
            if outside(exe, step, self.products_in_jobs):
                job.flush(segments)
                if isinstance(step, CONTROL_STEPS):
                    subs = tuple(None if sub is None else self._sub_plan(sub)
                                 for sub in exe._subs[id(step)])
                    segments.append(ControlPlan(k, subs))
                else:
                    segments.append(CallPlan(k, tuple(where[p] for p in used(step))))
                continue
            job.steps.append(k)
            if isinstance(step, LibraryStep):    # a matrix product: tiles of C
                tiles = order.tiles.get(id(step), threads)
                ranges = gemm_task(exe, step, tiles)[2]
                args = tuple(where[p] for p in used(step)) + (self.entry(),)
                job.tasks.append(Task("", args, (), (), tuple(ranges), product=(k, tiles)))
                if id(step) in order.go_on:      # the next product runs beside it
                    job.go_on.append(len(job.tasks) - 1)
                elif id(step) in unbarred:
                    job.free.append(len(job.tasks) - 1)
                continue
            ranges = step_ranges(step, threads)
            if isinstance(step, LoopStep) and wide.get(id(step)):
                ranges = split_in_job(step, ranges, threads)
            args = tuple(where[p] for p in step.args)
            if isinstance(step, LoopStep):
                resplit = None if step.serial else (int(step.extent), int(step.work))
                job.tasks.append(Task(step.fn, args, (), (), tuple(ranges), split=resplit))
                if id(step) in unbarred:
                    job.free.append(len(job.tasks) - 1)
                continue
            self._partial_step(step, args, ranges, job, unbarred, segments)
        job.flush(segments)
        return tuple(segments)

    def _sub_plan(self, sub: Any) -> ProgramPlan:
        """A loop's or branch's sub-program's plan (in-process: the one its own native
        program binds, made once)."""
        if self.products_in_jobs:
            return plan_for(sub, self.threads)[0]
        return plan(sub, self.threads, False)

    def _partial_step(self, step: PartialStep, args: tuple, ranges: list, job: "_Job",
                      unbarred: set, segments: list) -> None:
        """The kernel over its chunks, each into its row of the partial arrays (or one
        shared row), then its finish phase, or the end of the job (argmax's: the result
        is copied out after it)."""
        chunks = len(ranges) if step.per_chunk else 1
        numbers = []
        for r in step.roots:
            self.partials.append(Partial(self.entry(), r["pos"], r["acc"], tuple(r["shape"]),
                                         r["init"], r["kind"], chunks))
            numbers.append(len(self.partials) - 1)
        parts = tuple(self.partials[n].index for n in numbers)
        strides = tuple(self.partials[n].row_bytes if chunks > 1 else 0 for n in numbers)
        job.tasks.append(Task(step.fn, args, parts, strides, tuple(ranges)))
        if not step.partials_stored:     # (each chunk stores its row whole)
            job.fills.extend(numbers)
        if step.finish:                  # combine and epilogue natively, in the same job
            count = self.entry()
            self.counts.append((count, chunks))
            job.tasks.append(Task(step.finish, tuple(self.where[p] for p in step.finish_args),
                                  parts, (0,) * len(parts), ((0, int(step.finish_extent)),),
                                  (count,)))
            if id(step) in unbarred:     # (after its finish)
                job.free.append(len(job.tasks) - 1)
            return
        job.copies.extend(n for n in numbers if self.partials[n].pos is not None)
        job.flush(segments)


class _Job:
    """The job being planned."""

    def __init__(self) -> None:
        self.tasks: list = []
        self.fills: list = []
        self.copies: list = []
        self.go_on: list = []
        self.free: list = []
        self.steps: list = []

    def flush(self, segments: list) -> None:
        if self.tasks:
            segments.append(JobPlan(tuple(self.tasks), _go_on(self.tasks, self.go_on, self.free),
                                    tuple(self.fills), tuple(self.copies), tuple(self.steps)))
        self.__init__()


# ---- a program seen without loading it -----------------------------------------------------

class ProgramView:
    """The fields `plan` reads, from a Program that is never loaded in this process (a C
    library's): its values, buffer plan and steps; control steps' sub-programs as views."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.name = program.name
        self.values = program.value_table()
        self.steps = list(program.steps)
        self.params = [(int(p), int(n)) for p, n in program.params]
        self.outputs = list(program.outputs)
        self.slot_of = {int(p): int(s) for p, s in program.slots}
        self.slot_bytes = list(program.slot_bytes)
        self._aliases = [(int(o), int(x)) for o, x in program.aliases]
        self._param_slots = {self.slot_of[p] for p, _ in self.params if p in self.slot_of}
        self._const_arrays = {p: v.constant() for p, v in self.values.items()
                              if v.op == "constant" and p in self.slot_of}
        self._subs = {id(s): [None if d is None else ProgramView(sub_program(d))
                              for d in s.sub_programs()]
                      for s in self.steps if isinstance(s, CONTROL_STEPS)}
        self._range_cache: dict = {}
