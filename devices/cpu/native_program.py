"""A whole CPU program in as few native calls as it allows: the fast path of a cached run.

`CPUExecutable.run` binds every value to a NumPy array and dispatches step by step; for a
tiny program that bookkeeping is most of the time a sync takes. A `NativeProgram` plans it
once per executable and thread count:

- every buffer (each parameter, constant, buffer slot and partial array) gets an index
  in one address table shared by the native jobs; a run writes only the parameters' and
  the fresh outputs' addresses into it;
- the steps become the tasks of one job of the native pool (one native call, barriers
  between tasks): a partial reduction is two tasks, its chunks and then its finish
  (combining the chunks' partials and running the epilogue, generated code too); only
  a reduction without a finish phase (argmax's) ends a job, its result copied out in
  NumPy before the next job;
- small temporaries keep their memory between runs (the executable runs one call at a
  time, under its lock); large ones come from and go back to the recycled host memory;
  outputs are fresh arrays, handed to the caller read-only as the general path does.
- a cached tiny program costs little Python: an input array given again is not checked
  again (a weak reference to it), a Python scalar's holder keeps its address, small
  outputs are made as their arrays, and a program that is one job of one chunk a task
  (the split gives a small kernel one chunk) is one direct native call on this thread.

It serves programs of generated kernels, matrix products (a product is a task of the
same job: tiles of C, each a single-threaded BLAS gemm or our own code, see
devices/cpu/native_gemm.py; batched ones and operands read in place as matrices too),
and host steps (NumPy's references: a sort, an FFT), which it runs from Python between
two jobs over the buffers its table names (devices/cpu/host_calls.py). A product whose
operands need a copy, a host step inside a loop or branch run natively, a profile or
`debug` >= 2 send the run down the general path (CPUExecutable's steps one by one).
Donated parameters are handled as the general path does: a
parameter's slot is the caller's memory when it can be claimed, else fresh memory for
each value planned there, an in-place output starting as a copy of its parameter.
"""
from __future__ import annotations

import ctypes
import itertools
import weakref
from typing import Any, Optional

import numpy as np

from ...compiler.hlo import dtypes as D
from ...compiler.program import CONTROL_STEPS, LibraryStep, LoopStep, PartialStep, Step
from . import host_calls, native_control, native_gemm, product_groups, step_barriers
from .host_memory import HOST_MEMORY, MIN_BYTES, claim_memory
from .native_pool import Job, address, code, get_pool, split


def eligible(exe: Any) -> bool:
    """Whether `exe` (a CPUExecutable) can run as a NativeProgram (host steps only where
    no control step makes the whole program one call of the control runner)."""
    steps = exe.steps
    return bool(steps) and all(_native_step(exe, s) for s in steps) \
        and not (set(exe.outputs) & ({p for p, _ in exe.params} | set(exe._const_arrays))) \
        and not (any(map(_host, steps)) and any(isinstance(s, CONTROL_STEPS) for s in steps))


def _host(step: Step) -> bool:
    return isinstance(step, LibraryStep) and step.call == "host"


def _native_step(exe: Any, step: Step) -> bool:
    if isinstance(step, CONTROL_STEPS):      # its sub-programs natively too
        return native_control.eligible_step(exe, step)
    if isinstance(step, (LoopStep, PartialStep)):
        return exe._code is not None
    if isinstance(step, LibraryStep) and step.call == "host":
        return True                          # run between two jobs (host_calls.HostStep)
    return isinstance(step, LibraryStep) and step.call == "gemm" \
        and _gemm_task(exe, step, 1) is not None


def _gemm_task(exe: Any, step: LibraryStep, threads: int) -> Optional[tuple]:
    """native_gemm.program_task for a library step, when its operands and result share
    one float dtype."""
    lhs, rhs = (exe.values[o] for o in step.operands)
    out = exe.values[step.pos]
    if not lhs.dtype == rhs.dtype == out.dtype:
        return None
    return native_gemm.program_task(step.args, lhs.shape, rhs.shape, out.shape,
                                    out.dtype.np, threads)


def _gemm_work(exe: Any, step: Step) -> Optional[int]:
    """A native product step's estimated work (native_gemm.work), else None."""
    if not isinstance(step, LibraryStep) or step.call != "gemm" \
            or _gemm_task(exe, step, 1) is None:
        return None
    a = step.args
    return a["batch"] * native_gemm.work(a["m"], a["n"], a["k"])


# Inside a job that runs on every thread anyway, a loop kept whole for being small (below
# cpu.SPLIT_ELEMENTS: a split would cost a dispatch) leaves the other threads waiting at its
# barrier: there it is split as soon as each thread gets this much (a softmax over a
# 256x10 batch's logits, 38 us of CPU whole, ran on one thread of the MLP step's job).
# Each chunk computes whole rows of the outer dimension: the results are the same.
JOB_SPLIT_ELEMENTS = 1 << 10


def _parallel_jobs(exe: Any, plan: Any, threads: int) -> dict:
    """id(step) -> whether the job it runs in wakes the workers anyway (a step of that job
    is split over threads). A partial step without a finish phase ends a job."""
    out: dict = {}
    job: list = []
    wide = False
    for step in plan.order:
        if isinstance(step, CONTROL_STEPS) or _host(step):     # between jobs, never in one
            out.update(dict.fromkeys(job, wide))
            job, wide = [], False
            continue
        job.append(id(step))
        if threads > 1:
            if isinstance(step, LibraryStep):
                # split over threads only from SPLIT_WORK on (native_gemm.program_task):
                # a small batch's one tile per matrix runs on one thread (attention's
                # products in a decoding loop made its every iteration wake the workers)
                wide = wide or (plan.tiles.get(id(step), threads) > 1
                                and _gemm_work(exe, step) >= native_gemm.SPLIT_WORK)
            else:
                wide = wide or len(exe._split(step, threads)) > 1
        if isinstance(step, PartialStep) and not step.finish:
            out.update(dict.fromkeys(job, wide))
            job, wide = [], False
    out.update(dict.fromkeys(job, wide))
    return out


def _split_in_job(step: Step, ranges: list, threads: int) -> list:
    """A one-chunk loop's ranges in a parallel job: one chunk per thread when each has
    JOB_SPLIT_ELEMENTS of work."""
    extent = int(step.extent)
    if len(ranges) > 1 or step.serial or \
            extent * max(1, int(step.work)) < JOB_SPLIT_ELEMENTS * threads:
        return ranges
    return split(extent, threads)


def _roots(step: Step) -> list:
    """A partial step's reduced values (none for another step)."""
    return step.roots if isinstance(step, PartialStep) else []


def _go_on(tasks: list, paired: list, free: list) -> list:
    """The tasks of a job followed by no barrier: products side by side, and steps free
    of the next (step_barriers.py) when the job runs on several threads anyway (a job of
    one-chunk tasks runs on the calling thread, waking no worker: dropping a barrier
    there would wake them)."""
    if free and any(len(t[4]) > 1 for t in tasks):
        return sorted(set(paired) | {t for t in free if t < len(tasks) - 1})
    return paired


def _used(step: Step) -> list:
    """The values a step reads or writes through its buffer arguments."""
    if isinstance(step, LibraryStep):
        return list(step.operands) + [step.pos]
    if isinstance(step, CONTROL_STEPS):
        return list(step.operands) + [p for p, _ in step.outputs]
    if isinstance(step, PartialStep):
        return list(step.args) + list(step.finish_args or ()) + [r["pos"] for r in step.roots]
    return list(step.args)


class _Reduction:
    """One reduction root of a partial step: its partial array, reset to its start value
    before each run."""

    __slots__ = ("part", "ident", "kind", "chunks", "pos", "same_dtype")

    def __init__(self, part: np.ndarray, ident: Any, kind: str, chunks: int, pos: Optional[int],
                 target_dtype: Optional[np.dtype]) -> None:
        self.part, self.ident, self.kind, self.chunks, self.pos = part, ident, kind, chunks, pos
        self.same_dtype = target_dtype == part.dtype


class NativeProgram:
    @property
    def exe(self) -> Any:
        """The executable this program runs (None once it is gone)."""
        return self._exe()

    def __init__(self, exe: Any, threads: int) -> None:
        # the executable keeps this program (its _range_cache): a weak reference back, so
        # that a program the runtime's cache drops is freed at once, its LLVM engine with
        # it, not at the next full collection (issue 33, item 17: ~80 dropped programs,
        # ~5 MB, waited for one under an 8-program cap)
        self._exe = weakref.ref(exe)
        self.outputs = list(exe.outputs)
        self.pool = get_pool(threads)
        values = exe.values
        where: dict = {}                  # value position -> buffer index
        self._inputs: list = []           # _Input per parameter
        for p, number in exe.params:
            v = values[p]
            where[p] = len(where)
            self._inputs.append(_Input(number, where[p], v.dtype.np, v.shape))
        self._by_value = {p: param for (p, _), param in zip(exe.params, self._inputs)}
        fixed: list = []                  # (index, array) whose address never changes
        for p, arr in exe._const_arrays.items():
            where[p] = len(where)
            fixed.append((where[p], arr))
        self._descriptors: list = []      # the gemm tasks' descriptors, kept alive
        # whether a task calls BLAS (a product of ours alone, dots or direct, does not:
        # the run then leaves BLAS's thread count alone, two calls of ~1.5 us each): set
        # with the plan below
        self._partials: list = []         # every _Reduction, its partial array kept alive
        # parameter slots: (the donor's argument number or None, its value, [(index,
        # value, dtype, shape, bytes)] per value planned in the slot)
        self._donated: list = []
        self._outputs = set(exe.outputs)
        # independent products side by side (product_groups.py): the steps' order, and
        # the values whose memory that order cannot share with their slot's
        self.plan = product_groups.plan(exe, threads, _used, lambda s: _gemm_work(exe, s))
        self.calls_blas = any(host_calls.calls_lapack(s) for s in exe.steps if _host(s))
        self._plan_slots(exe, where, fixed)
        self._aliases = list(exe._aliases)
        # (output, the parameter it overwrites in place) for each alias
        self._alias_inputs = [(o, self._by_value[x]) for o, x in self._aliases]
        self._claim = claim_memory
        extra = sum(len(_roots(s)) + 1 for s in exe.steps)   # partials, chunk counts
        self.table = np.zeros(len(where) + extra + 1, np.int64)
        self._count = len(where)
        self.segments = self._plan_steps(exe, threads, where, fixed)
        # a program with loops or branches: all its segments one call of the control
        # runner (devices/cpu/native_control.py)
        self._block = None
        if any(isinstance(job, native_control.ControlStep) for job, _, _ in self.segments):
            self._block = native_control.Block(*native_control.program_ops(self))
        # values a run copies a result into from NumPy (argmax's): their arrays are needed
        self._copied_into = {red.pos for _, _, copies in self.segments for red in copies}
        for index, arr in fixed:
            self.table[index] = address(arr)
        # what the table's addresses point into, held here rather than through the
        # executable (a weak reference): the code, sub-programs, constants and buffers
        self._owned = (exe._code, exe._subs, exe._lapack, [arr for _, arr in fixed])
        self._small_outputs = self._plan_small_outputs()
        # a single job whose tasks have one chunk each: called here, no pool asked
        only = self.segments[0] if len(self.segments) == 1 else None
        direct = only is not None and isinstance(only[0], Job) and not only[0].parallel \
            and not only[2]
        self._direct = only[0].address if direct else None
        self._direct_fills = only[1] if direct else []
        self._call = code().run
        # (the direct call's arguments as ctypes objects: no conversion at each call)
        self._direct_job = ctypes.c_void_p(self._direct) if direct else None
        self._kept_outputs = self._plan_kept_outputs() if direct else None

    # ---- planning ----------------------------------------------------------------------

    def _plan_slots(self, exe: Any, where: dict, fixed: list) -> None:
        """Slot memory: kept between runs (temporaries, the large ones within
        `KEPT_PROGRAM_BYTES` and the process's `KEPT_SCRATCH_BYTES`), or taken each run
        (slots holding an output, the other large temporaries)."""
        outputs = set(exe.outputs)
        by_slot: dict = {}
        sizes = dict(enumerate(exe.slot_bytes))
        own = self.plan.own
        for p, slot in exe.slot_of.items():
            if p not in where and p not in own:
                by_slot.setdefault(slot, []).append(p)
        for step in exe.steps:       # values with no slot get their own scratch memory
            for p in _used(step):
                if p is not None and p not in where and (p not in exe.slot_of or p in own):
                    by_slot[("own", p)] = [p]
                    sizes[("own", p)] = exe.values[p].nbytes
        self.views: dict = {}             # value -> array over kept memory
        self._fresh: list = []            # (index, bytes, [(value, dtype, shape)], output?)
        kept = 0                          # bytes of large temporaries kept
        room = KEPT_SCRATCH_BYTES - KEPT_SCRATCH.total   # what the process may still keep
        for slot, members in by_slot.items():
            if slot in exe._param_slots:
                self._param_slot(exe, slot, members, where)
                continue
            index = len(where)
            for p in members:
                where[p] = index
            size = sizes[slot]
            has_output = any(p in outputs for p in members)
            large = size >= MIN_BYTES
            if large and not has_output and kept + size <= min(room, KEPT_PROGRAM_BYTES):
                kept += size              # kept: no take, address or release per run
            elif has_output or large:
                self._fresh.append(self._fresh_slot(exe, index, size, members, has_output))
                continue
            mem = np.zeros(max(1, size), np.uint8)
            fixed.append((index, mem))
            for p in members:
                v = exe.values[p]
                self.views[p] = mem[:v.nbytes].view(v.dtype.np).reshape(v.shape)
        if kept:
            KEPT_SCRATCH.add(self, kept)

    def _param_slot(self, exe: Any, slot: int, members: list, where: dict) -> None:
        """A parameter's slot: each value planned there gets its own buffer index, all
        set at each run to the donated parameter's memory when it can be claimed, else
        each to fresh memory of its own (as the general path's `_bind`)."""
        entries = []
        for p in members:
            where[p] = len(where)
            v = exe.values[p]
            entries.append((where[p], p, v.dtype.np, v.shape, v.nbytes))
        donor = exe._donated_slots.get(slot)
        if donor is None:
            self._donated.append((None, None, entries, None))
            return
        # the output of the parameter's own type planned in its slot (an optimizer's new
        # value): it may be handed out as the given array itself (see `_run_donating`)
        given = exe.values[donor[0]]
        same = [(p, dtype, shape) for _, p, dtype, shape, _ in entries
                if p in self._outputs and dtype == given.dtype.np and shape == given.shape]
        self._donated.append((donor[1], given, entries, same[0] if len(same) == 1 else None))

    @staticmethod
    def _fresh_slot(exe: Any, index: int, size: int, members: list, has_output: bool) -> tuple:
        """(buffer index, bytes, views to make, output?) of a slot whose memory is new at
        each run. Outputs are views of raw memory as the general path makes them (a
        donation later tells that memory from a caller's own array by that)."""
        outputs = set(exe.outputs)
        targets = {r["pos"] for s in exe.steps for r in _roots(s)}
        views = [(p, exe.values[p].dtype.np, exe.values[p].shape) for p in members
                 if p in outputs or p in targets]
        return index, size, views, has_output

    def _buffer(self, fixed: list, arr: np.ndarray) -> int:
        index = self._count
        self._count += 1
        fixed.append((index, arr))
        return index

    def _plan_steps(self, exe: Any, threads: int, where: dict, fixed: list) -> list:
        """Jobs of the native pool, each with the partial arrays to reset before it and
        the reductions to copy out after it (a partial step without a finish phase)."""
        segments, tasks, fills, go_on, free = [], [], [], [], []
        # steps that share no memory with the tasks since the last barrier follow with
        # none (step_barriers.py); products side by side are the plan's own
        unbarred = step_barriers.free_steps(exe, self.plan.order, self.plan.go_on,
                                            self.plan.own, _used)
        wide = _parallel_jobs(exe, self.plan, threads)
        for step in self.plan.order:
            if isinstance(step, CONTROL_STEPS):      # ops of the control runner
                if tasks:
                    segments.append((Job(tasks, self._count, self.table,
                                         _go_on(tasks, go_on, free)), fills, []))
                    tasks, fills, go_on, free = [], [], [], []
                base = address(self.table)
                control = native_control.ControlStep(
                    step, exe._subs[id(step)], threads, lambda p: base + 8 * where[p],
                    lambda p: exe.values[p].nbytes)
                self.calls_blas = self.calls_blas or control.calls_blas
                segments.append((control, [], []))
                continue
            if _host(step):          # NumPy's reference, on this thread, between jobs
                if tasks:
                    segments.append((Job(tasks, self._count, self.table,
                                         _go_on(tasks, go_on, free)), fills, []))
                    tasks, fills, go_on, free = [], [], [], []
                segments.append((host_calls.HostStep(exe.values, step,
                                                     [where[p] for p in _used(step)],
                                                     self.table), [], []))
                continue
            if isinstance(step, LibraryStep):    # a matrix product: tiles of C
                fn, desc, ranges = _gemm_task(exe, step, self.plan.tiles.get(id(step), threads))
                self._descriptors.append(desc)   # the table holds its address only
                self.calls_blas = self.calls_blas or native_gemm.calls_blas(fn)
                args = [where[p] for p in _used(step)] + [self._buffer(fixed, desc)]
                tasks.append((fn, args, [], [], ranges))
                if id(step) in self.plan.go_on:  # the next product runs beside it
                    go_on.append(len(tasks) - 1)
                elif id(step) in unbarred:
                    free.append(len(tasks) - 1)
                continue
            ranges = exe._split(step, threads)
            if isinstance(step, LoopStep) and wide[id(step)]:
                ranges = _split_in_job(step, ranges, threads)
            args = [where[p] for p in step.args]
            fn = exe._code.address(step.fn)
            if isinstance(step, LoopStep):
                tasks.append((fn, args, [], [], ranges))
                if id(step) in unbarred:
                    free.append(len(tasks) - 1)
                continue
            chunks = len(ranges) if step.per_chunk else 1
            reductions = [self._reduction(exe, r, chunks) for r in step.roots]
            parts = [self._buffer(fixed, red.part) for red in reductions]
            self._partials.extend(reductions)   # the table holds their addresses only
            strides = [red.part.strides[0] if chunks > 1 else 0 for red in reductions]
            tasks.append((fn, args, parts, strides, ranges))
            if not step.partials_stored:     # (each chunk stores its row whole)
                fills.extend(reductions)
            if step.finish:             # combine and epilogue natively, in the same job
                count = self._count
                self._count += 1
                self.table[count] = chunks
                tasks.append((exe._code.address(step.finish),
                              [where[p] for p in step.finish_args], parts, [0] * len(parts),
                              [(0, step.finish_extent)], [count]))
                if id(step) in unbarred:          # (after its finish)
                    free.append(len(tasks) - 1)
                continue
            segments.append((Job(tasks, self._count, self.table, _go_on(tasks, go_on, free)),
                             fills, [red for red in reductions if red.pos is not None]))
            tasks, fills, go_on, free = [], [], [], []
        if tasks:
            segments.append((Job(tasks, self._count, self.table, _go_on(tasks, go_on, free)),
                            fills, []))
        return segments

    @staticmethod
    def _reduction(exe: Any, root: dict, chunks: int) -> _Reduction:
        acc = D.from_name(root["acc"])
        part = np.full((chunks,) + tuple(root["shape"]), root["init"], acc.np)
        pos = root["pos"]
        target = exe.values[pos].dtype.np if pos is not None else None
        return _Reduction(part, root["init"], root["kind"], chunks, pos, target)

    def _plan_small_outputs(self) -> Optional[list]:
        """(buffer index, dtype, shape) per output when every slot a run takes fresh
        memory for holds exactly one output and nothing else (a reduction's scalar, a
        small result): the run makes those arrays directly. None otherwise."""
        outs = []
        for index, size, views, has_output in self._fresh:
            if not has_output or size >= MIN_BYTES or len(views) != 1 \
                    or _nbytes(views[0][1], views[0][2]) < size:
                return None
            outs.append((views[0][0], (index, views[0][1], views[0][2])))
        if [p for p, _ in outs] != self.outputs or any(c for _, _, c in self.segments):
            return None
        return [o for _, o in outs]

    def _plan_kept_outputs(self) -> Optional[list]:
        """For a tiny program (one direct call) whose outputs are all a few bytes: memory
        kept for each output, its address in the table for good; a run copies the results
        out of it (copying a few bytes costs less than making an array and writing its
        address at each run). None otherwise."""
        outs = self._small_outputs
        if outs is None or self._donated or self._aliases \
                or any(_nbytes(dtype, shape) > KEPT_OUTPUT_BYTES for _, dtype, shape in outs):
            return None
        kept = []
        for index, dtype, shape in outs:
            mem = _empty(shape, dtype)
            self.table[index] = address(mem)
            kept.append((mem, dtype, shape))
        return kept

    # ---- running -----------------------------------------------------------------------

    def run(self, args: list) -> list:
        kept = self._kept_outputs
        if kept is not None:              # a tiny program: one call, results copied out
            # (never one that donates: see _plan_kept_outputs)
            keep = self._bind_inputs(args)    # converted inputs: alive until it ends
            for red in self._direct_fills:
                red.part.fill(red.ident)
            self._call(None, self._direct_job, _ZERO)
            # each result a new read-only array over a copy of its bytes (an immutable
            # copy: one object fewer than a copy's read-only view, and still an array
            # with a base, which a donation never takes for a buffer of put()'s)
            if len(kept) == 1:
                mem, dtype, shape = kept[0]
                return [_ndarray(shape, dtype, mem.tobytes())]
            return [_ndarray(shape, dtype, mem.tobytes()) for mem, dtype, shape in kept]
        if self._donated or self._aliases:
            return self._run_donating(args)
        keep = self._bind_inputs(args)    # inputs converted for this run: alive until it ends
        if self._small_outputs is not None:       # every output its own small array
            outs = self._new_small_outputs()
            if self._direct is not None:  # (a tiny program: _run_jobs inlined)
                for red in self._direct_fills:
                    red.part.fill(red.ident)
                self._call(None, self._direct, 0)
            else:
                self._run_jobs(self.views)
            return [_handed_out_small(a) for a in outs]   # (keep: alive until here)
        fresh: dict = {}
        taken: list = []
        try:
            self._take_fresh(fresh, taken)
            self._run_jobs(fresh)
        finally:
            for mem in taken:
                HOST_MEMORY.release(mem)
        del keep                          # (the converted inputs lived through the run)
        return [_handed_out(fresh[p]) for p in self.outputs]

    def _bind_inputs(self, args: list) -> list:
        """Point the table at this run's inputs. An array given last run is skipped (its
        dtype, shape and layout were checked then, and its address written; the weak
        reference keeps no buffer alive, and NumPy refuses to resize an array that a weak
        reference watches, so its memory stays where it was). A Python scalar goes into
        its parameter's own 8 bytes, whose address is written once."""
        table = self.table
        keep = []
        for param in self._inputs:
            a = args[param.number]
            kind = type(a)
            if kind is _NDARRAY:
                if param.last() is a:
                    continue
                param.last = _nothing     # (first, so that an interrupt leaves no stale entry)
                if (a.dtype is not param.dtype and a.dtype != param.dtype) \
                        or a.shape != param.shape or not a.flags.c_contiguous:
                    a = np.ascontiguousarray(np.asarray(a, dtype=param.dtype).reshape(param.shape))
                    keep.append(a)
                    table[param.index] = address(a)
                else:
                    table[param.index] = address(a)
                    param.last = _weak(a)
            elif kind is float or kind is int or kind is bool:
                param.holder[()] = a          # a Python scalar: into its own 8 bytes
                if param.last is not _holder:
                    table[param.index] = param.holder_address
                    param.last = _holder
            elif isinstance(a, _CONVERTED):   # converted, never remembered
                param.last = _nothing
                a = np.ascontiguousarray(np.asarray(a, dtype=param.dtype).reshape(param.shape))
                keep.append(a)
                table[param.index] = address(a)
            else:
                param.holder[()] = a          # a NumPy scalar, an object with __float__, ...
                if param.last is not _holder:
                    table[param.index] = param.holder_address
                    param.last = _holder
        return keep

    def _new_small_outputs(self) -> list:
        """Each output slot's memory as a new array of the output's dtype and shape."""
        table = self.table
        outs = []
        for index, dtype, shape in self._small_outputs:
            a = _empty(shape, dtype)
            table[index] = address(a)
            outs.append(a)
        return outs

    def _take_fresh(self, fresh: dict, taken: list) -> None:
        table = self.table
        take = HOST_MEMORY.take
        for index, size, views, has_output in self._fresh:
            mem = take(size)
            if not has_output:
                taken.append(mem)
            table[index] = address(mem)
            for p, dtype, shape in views:
                fresh[p] = _ndarray(shape, dtype, mem)

    def _run_jobs(self, fresh: dict) -> None:
        if self._block is not None:
            native_control.run(self._block, self.pool)
            return
        direct = self._direct
        if direct is not None:            # one job of one chunk a task: no pool to ask
            for red in self._direct_fills:
                red.part.fill(red.ident)
            self._call(None, direct, 0)
            return
        for job, fills, copies in self.segments:
            if type(job) is _HOST_STEP:
                job.run(self.pool)
                continue
            for red in fills:
                red.part.fill(red.ident)
            self.pool.run(job)
            for red in copies:
                _copy_out(red, fresh[red.pos] if red.pos in fresh else self.views[red.pos])

    def _run_donating(self, args: list) -> list:
        """A run with donated parameters or in-place outputs: their slots first.

        A donated parameter given as an array this program handed out (last step's new
        value, say) whose memory nothing else views is written in place and handed out
        again as the output of its own type planned there: the same array object, still
        tracked by the host memory, so a training step's parameters and optimizer state
        cost no claim, no new views and no tracking at each step."""
        table = self.table
        fresh: dict = {}                  # value -> array over this run's new memory
        at: dict = {}                     # value -> the address of its memory (a slot's)
        again: dict = {}                  # output value -> the given array handed out again
        taken: list = []
        claim, take, outputs = self._claim, HOST_MEMORY.take, self._outputs
        reclaim, copied_into = HOST_MEMORY.reclaim, self._copied_into
        # claimed before any view of a parameter is made (a view would count as another
        # reader of its memory and the claim would fail)
        for number, value, entries, same in self._donated:
            mem = None
            if number is not None:
                given = args[number]
                if same is not None and type(given) is _NDARRAY and given.shape == same[2] \
                        and (given.dtype is same[1] or given.dtype == same[1]):
                    mem = reclaim(given)
                    if mem is not None:
                        again[same[0]] = given
                if mem is None:
                    mem = claim(given, value)
            for index, p, dtype, shape, nbytes in entries:
                own = mem
                if own is None:
                    own = take(nbytes)
                    if p not in outputs:
                        taken.append(own)
                table[index] = at[p] = address(own)
                if p not in again or p in copied_into:   # (the given array serves as it)
                    fresh[p] = _ndarray(shape, dtype, own)
        try:
            keep = self._bind_inputs(args)
            self._take_fresh(fresh, taken)
            for o, param in self._alias_inputs:
                # the kernel reads the parameter through the output's memory: when the
                # caller's buffer could not be taken over, that memory starts as a copy
                addr = at.get(o)
                if addr is None:
                    addr = address(fresh[o])
                if addr != table.item(param.index):
                    target = fresh.get(o)
                    if target is None:        # handed out again: its memory, writable
                        given = again[o]
                        target = _ndarray(given.shape, given.dtype, given.base)
                    src = np.asarray(args[param.number], dtype=param.dtype)
                    np.copyto(target, src.reshape(target.shape))
            self._run_jobs(fresh)
            del keep                      # (the converted inputs lived through the run)
        finally:
            for mem in taken:
                HOST_MEMORY.release(mem)
        if not again:
            return [_handed_out(fresh[p]) for p in self.outputs]
        out = []
        for p in self.outputs:
            given = again.get(p)
            out.append(_handed_out(fresh[p]) if given is None else given)
        return out


def _nothing() -> None:
    """`_Input.last` when nothing is known of what the table points at."""
    return None


def _holder() -> None:
    """`_Input.last` when the table points at the parameter's scalar holder."""
    return None


class _Input:
    """A parameter of the program: where its address goes in the table, what it must be,
    and what the table points at now (`last`: a weak reference to the array given last
    run, else `_holder` or `_nothing`; called, each gives the array or None)."""

    __slots__ = ("number", "index", "dtype", "shape", "holder", "holder_address", "last")

    def __init__(self, number: int, index: int, dtype: np.dtype, shape: tuple) -> None:
        self.number, self.index, self.dtype, self.shape = number, index, dtype, shape
        self.holder = np.empty((), dtype)
        self.holder_address = address(self.holder)
        self.last: Any = _nothing


_NDARRAY = np.ndarray
_HOST_STEP = host_calls.HostStep
_ndarray = np.ndarray     # (shape, dtype, memory): a view of raw memory in one call
_empty = np.empty
_ZERO = ctypes.c_int64(0)
# Large temporaries kept by a program between runs, up to KEPT_PROGRAM_BYTES per program
# and KEPT_SCRATCH_BYTES for all live programs together (beyond either, each run takes
# them from the host memory and gives them back): a training step's few MB of scratch then
# cost no take, address and release per buffer per step, while the executable cache's
# hundreds of rarely run programs pin no more than the process-wide figure.
KEPT_PROGRAM_BYTES = 8 << 20
KEPT_SCRATCH_BYTES = 64 << 20


class _KeptScratch:
    """Bytes of large temporaries kept by live programs; a program's share returns when
    the program is freed (evicted from the executable cache, its device gone). One dict
    entry per program: its insertion and removal are atomic, a counter's += is not."""

    def __init__(self) -> None:
        self._shares: dict = {}
        self._ids = itertools.count()

    @property
    def total(self) -> int:
        return sum(self._shares.values())

    def add(self, program: Any, nbytes: int) -> None:
        key = next(self._ids)
        self._shares[key] = nbytes
        weakref.finalize(program, self._shares.pop, key, None)


KEPT_SCRATCH = _KeptScratch()
KEPT_OUTPUT_BYTES = 256       # outputs up to this size are copied out of kept memory
_CONVERTED = (np.ndarray, list, tuple)    # what is not a scalar: an ndarray subclass, a list
_weak = weakref.ref


def _copy_out(red: _Reduction, target: np.ndarray) -> None:
    """A reduction's result from its one shared row of partials (argmax's index)."""
    if red.same_dtype:
        target[...] = red.part[0]
    else:
        target[...] = red.part[0].astype(target.dtype)


def _nbytes(dtype: np.dtype, shape: tuple) -> int:
    n = dtype.itemsize
    for d in shape:
        n *= d
    return n


def _handed_out_small(arr: np.ndarray) -> np.ndarray:
    """A small output as `_handed_out` gives it: a read-only view (never a base-less
    array, which a donation would take for a buffer of put()'s)."""
    arr = arr.view()
    arr.setflags(write=False)
    return arr


def _handed_out(arr: np.ndarray) -> np.ndarray:
    """An output as the general path hands it out: a read-only view whose memory comes
    back to the recycled host memory when the caller drops it."""
    arr = arr.view()
    base = arr.base
    if (base.dtype is _UINT8 or base.dtype == _UINT8) and base.ndim == 1:
        HOST_MEMORY.track(arr, base)
    arr.setflags(write=False)
    return arr


_UINT8 = np.dtype(np.uint8)


native_control.PROGRAM[:] = [NativeProgram, eligible]
