"""A whole CPU program in as few native calls as it allows: the in-process executor.

A `NativeProgram` binds the program's plan (devices/cpu/run_plan.py: pure data, the same
plan a C library's driver is written from) to memory and code, once per executable and
thread count:

- every entry of the plan's address table gets its memory: constants, partial arrays,
  product descriptors and small temporaries for good; a run writes only the parameters'
  and the fresh outputs' addresses into it;
- each of the plan's jobs becomes one job of the native pool (one native call, barriers
  between tasks), its kernels' symbols resolved in the loaded object code; a partial
  reduction is two tasks, its chunks and then its finish (combining the chunks' partials
  and running the epilogue, generated code too); only a reduction without a finish phase
  (argmax's) ends a job, its result copied out in NumPy before the next job;
- small temporaries keep their memory between runs (the executable runs one call at a
  time, under its lock); large ones come from and go back to the recycled host memory;
  outputs are fresh arrays, handed to the caller read-only (their memory recycled when
  the caller drops them).
- a cached tiny program costs little Python: an input array given again is not checked
  again (a weak reference to it), a Python scalar's holder keeps its address, small
  outputs are made as their arrays, and a program that is one job of one chunk a task
  (the split gives a small kernel one chunk) is one direct native call on this thread.

It runs every program: generated kernels, matrix products (a product is a task of the
same job: tiles of C, each a single-threaded BLAS gemm or our own code, see
devices/cpu/native_gemm.py; batched ones and operands read in place as matrices too),
loops and branches (one call each of the control runner, native_control.py; the whole
program one call when nothing else runs from Python), and, from Python between two jobs
over the buffers its table names: host steps (NumPy's references: a sort, an FFT,
host_calls.py), products the tiles do not cover (integer, complex, half-float, operands
needing a copy: NumPy's matmul, library_calls.py), loops and branches whose
sub-programs cannot run natively (a host call or argmax's copy inside, donated state:
each sub-program a loaded executable of its own). An output that is a parameter or a
constant is handed out as a copy. A profile or `debug` >= 2 runs a stepwise plan (each
step a segment of its own, timed).
Donated parameters: a parameter's slot is the caller's memory when it can be claimed,
else fresh memory for each value planned there, an in-place output starting as a copy of
its parameter.
"""
from __future__ import annotations

import ctypes
import itertools
import time
import weakref
from typing import Any, Optional

import numpy as np

from ...compiler import profile_hooks
from ...compiler.hlo import dtypes as D
from ...compiler.program import (CONTROL_STEPS, LibraryStep, LoopStep, PartialStep, Step,
                                 WhileStep, branch_index, run_while)
from . import host_calls, native_control, native_gemm, run_plan
from .host_calls import _array_at as array_at
from .host_memory import HOST_MEMORY, MIN_BYTES, claim_memory
from .library_calls import LIBRARY_CALLS
from .native_pool import Job, address, code, get_pool
from .run_plan import host as _host


def eligible(exe: Any) -> bool:
    """Whether `exe` (a CPUExecutable) runs as a NativeProgram: every program does (its
    plan covers every kind of step)."""
    return True


def all_native(exe: Any) -> bool:
    """Whether every step of `exe` runs in native code, so that the control runner can run
    it as a sub-program (native_control.py): no host step, no product from NumPy, no
    loop or branch driven from Python, no output that is a parameter or a constant."""
    steps = exe.steps
    return all(_native_step(exe, s) for s in steps) and not any(map(_host, steps)) \
        and not (set(exe.outputs) & ({p for p, _ in exe.params} | set(exe._const_arrays)))


def _native_step(exe: Any, step: Step) -> bool:
    if isinstance(step, CONTROL_STEPS):      # its sub-programs natively too
        return native_control.eligible_step(exe, step)
    if isinstance(step, LibraryStep):
        return step.call == "gemm" and run_plan.gemm_task(exe, step, 1) is not None
    return exe._code is not None


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

    def __init__(self, exe: Any, threads: int, stepwise: bool = False) -> None:
        """`stepwise`: each step a segment of its own, timed (a profile, debug >= 2)."""
        # the executable keeps this program (its _range_cache): a weak reference back, so
        # that a program the runtime's cache drops is freed at once, its LLVM engine with
        # it, not at the next full collection (issue 33, item 17: ~80 dropped programs,
        # ~5 MB, waited for one under an 8-program cap)
        self._exe = weakref.ref(exe)
        self.name = exe.name
        self.stepwise = stepwise
        self.debug = False                # (stepwise) print each step's time
        self.outputs = list(exe.outputs)
        self.pool = get_pool(threads)
        # the plan (run_plan.py), and the order of the steps it came from (products side
        # by side, product_groups.py)
        spec, self.plan = run_plan.plan_for(exe, threads, stepwise)
        self.spec = spec
        values = exe.values
        self._inputs = [_Input(i.number, i.index, values[i.pos].dtype.np, values[i.pos].shape)
                        for i in spec.inputs]          # _Input per parameter
        self._by_value = {i.pos: param for i, param in zip(spec.inputs, self._inputs)}
        # (index, array) whose address never changes
        fixed = [(c.index, exe._const_arrays[c.pos]) for c in spec.constants]
        self._descriptors: list = []      # the gemm tasks' descriptors, kept alive
        # whether a task calls BLAS (a product of ours alone, dots or direct, does not:
        # the run then leaves BLAS's thread count alone, two calls of ~1.5 us each): set
        # with the segments below
        self.calls_blas = any(host_calls.calls_lapack(s) for s in exe.steps if _host(s))
        # parameter slots: (the donor's argument number or None, its value, [(index,
        # value, dtype, shape, bytes)] per value planned in the slot)
        self._donated: list = []
        self._outputs = set(exe.outputs)
        self._bind_slots(exe, spec, fixed)
        self._aliases = list(exe._aliases)
        # (output, the parameter it overwrites in place) for each alias
        self._alias_inputs = [(o, self._by_value[x]) for o, x in self._aliases]
        self._claim = claim_memory
        self.table = np.zeros(max(1, spec.size), np.int64)
        for index, value in spec.counts:
            self.table[index] = value
        self._partials = [self._reduction(exe, part) for part in spec.partials]
        fixed += [(part.index, red.part) for part, red in zip(spec.partials, self._partials)]
        self.segments = self._bind_segments(exe, spec, threads, fixed)
        # (stepwise) the step of each segment and the threads it runs on, for its timing
        self._timed = [_timing(exe, seg, self.pool.threads) for seg in spec.segments] \
            if stepwise else None
        # (stepwise) step number -> its segment; value -> its table entry (`run_step`)
        self._segment_of = {seg.steps[0] if type(seg) is run_plan.JobPlan else seg.step: k
                            for k, seg in enumerate(spec.segments)} if stepwise else None
        self._where = spec.entries()
        # a program with loops or branches: all its segments one call of the control
        # runner (devices/cpu/native_control.py)
        self._block = None
        controls = [job for job, _, _ in self.segments if type(job) is _CONTROL]
        if controls and all(type(job) in (Job, _CONTROL) for job, _, _ in self.segments):
            self._block = native_control.Block(*native_control.program_ops(self))
        # ... else each its own call of the runner, between the host steps
        self._control_blocks = {id(c): native_control.Block(c.ops, [c]) for c in controls} \
            if controls and self._block is None else {}
        # outputs that are a parameter or a constant: a copy is handed out
        self._given = {i.pos: i.number for i in spec.inputs if i.pos in self._outputs}
        self._given.update((c.pos, None) for c in spec.constants if c.pos in self._outputs)
        self._constants = dict(exe._const_arrays)
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
            and not only[2] and not stepwise
        self._direct = only[0].address if direct else None
        self._direct_fills = only[1] if direct else []
        self._call = code().run
        # (the direct call's arguments as ctypes objects: no conversion at each call)
        self._direct_job = ctypes.c_void_p(self._direct) if direct else None
        self._kept_outputs = self._plan_kept_outputs() if direct else None

    # ---- binding the plan ----------------------------------------------------------------

    def _bind_slots(self, exe: Any, spec: run_plan.ProgramPlan, fixed: list) -> None:
        """Slot memory: kept between runs (temporaries, the large ones within
        `KEPT_PROGRAM_BYTES` and the process's `KEPT_SCRATCH_BYTES`), or taken each run
        (slots holding an output, the other large temporaries)."""
        outputs = set(exe.outputs)
        self.views: dict = {}             # value -> array over kept memory
        self._fresh: list = []            # (index, bytes, [(value, dtype, shape)], output?)
        kept = 0                          # bytes of large temporaries kept
        room = KEPT_SCRATCH_BYTES - KEPT_SCRATCH.total   # what the process may still keep
        for slot in spec.slots:
            index, size, members = slot.index, slot.nbytes, slot.members
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
        for param_slot in spec.param_slots:
            self._param_slot(exe, param_slot)

    def _param_slot(self, exe: Any, param_slot: run_plan.ParamSlot) -> None:
        """A parameter's slot: each value planned there has its own table entry, all
        set at each run to the donated parameter's memory when it can be claimed, else
        each to fresh memory of its own."""
        entries = []
        for index, p in param_slot.entries:
            v = exe.values[p]
            entries.append((index, p, v.dtype.np, v.shape, v.nbytes))
        donor = exe._donated_slots.get(param_slot.slot)
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
    def _fresh_slot(exe: Any, index: int, size: int, members: tuple, has_output: bool) -> tuple:
        """(buffer index, bytes, views to make, output?) of a slot whose memory is new at
        each run. Outputs are views of raw memory (a donation later tells that memory
        from a caller's own array by that)."""
        outputs = set(exe.outputs)
        targets = {r["pos"] for s in exe.steps for r in run_plan.roots(s)}
        views = [(p, exe.values[p].dtype.np, exe.values[p].shape) for p in members
                 if p in outputs or p in targets]
        return index, size, views, has_output

    def _bind_segments(self, exe: Any, spec: run_plan.ProgramPlan, threads: int,
                       fixed: list) -> list:
        """(job, partials to reset before it, reductions to copy out after it) per
        segment of the plan, each bound by its kind's binder (`_BIND`)."""
        at = _Binding(spec, threads, fixed, address(self.table), spec.entries())
        return [_BIND[type(seg)](self, exe, seg, at) for seg in spec.segments]

    def _job(self, exe: Any, seg: run_plan.JobPlan, at: "_Binding") -> tuple:
        """A pool Job: the plan's tasks with their kernels' addresses."""
        reds = self._partials
        tasks = [self._task(exe, t, at.fixed) for t in seg.tasks]
        return (Job(tasks, at.spec.size, self.table, seg.go_on),
                [reds[n] for n in seg.fills], [reds[n] for n in seg.copies])

    def _call(self, exe: Any, seg: run_plan.CallPlan, at: "_Binding") -> tuple:
        """A library step between two jobs, from Python on this thread: a host call
        (NumPy's reference), or a product the native tiles do not cover (NumPy's
        matmul, library_calls.py)."""
        step = exe.steps[seg.step]
        if run_plan.host(step):
            return host_calls.HostStep(exe.values, step, list(seg.buffers), self.table), [], []
        self.calls_blas = True
        return _LibraryCall(exe.values, step, list(seg.buffers), self.table,
                            LIBRARY_CALLS[step.call]), [], []

    def _control(self, exe: Any, seg: run_plan.ControlPlan, at: "_Binding") -> tuple:
        """A loop or branch: ops of the control runner, or, where its sub-programs cannot
        run natively (native_control.py says why), driven from Python over them."""
        step = exe.steps[seg.step]
        subs = exe._subs[id(step)]
        # (stepwise: from Python, so that a profile times the sub-programs' steps too)
        if not self.stepwise and native_control.eligible_step(exe, step):
            try:
                control = native_control.ControlStep(
                    step, subs, at.threads, lambda p: at.base + 8 * at.where[p],
                    lambda p: exe.values[p].nbytes)
            except native_control.NotNative:
                pass
            else:
                self.calls_blas = self.calls_blas or control.calls_blas
                return control, [], []
        return _PythonControl(exe.values, step, subs, at.where, self.table), [], []

    def _task(self, exe: Any, task: run_plan.Task, fixed: list) -> tuple:
        """A plan's task as a pool Job's: the kernel's address, or a product's tile
        function with its descriptor (kept alive here: the table holds its address)."""
        if task.product is not None:
            step, tiles = task.product
            fn, desc, ranges = run_plan.gemm_task(exe, exe.steps[step], tiles)
            self._descriptors.append(desc)
            self.calls_blas = self.calls_blas or native_gemm.calls_blas(fn)
            fixed.append((task.args[-1], desc))
            return fn, task.args, (), (), ranges
        row = (exe._code.address(task.fn), task.args, task.partials, task.strides, task.ranges)
        return row + (task.counts,) if task.counts else row

    @staticmethod
    def _reduction(exe: Any, part: run_plan.Partial) -> _Reduction:
        acc = D.from_name(part.acc)
        arr = np.full((part.chunks,) + tuple(part.shape), part.init, acc.np)
        target = exe.values[part.pos].dtype.np if part.pos is not None else None
        return _Reduction(arr, part.init, part.kind, part.chunks, part.pos, target)

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
        if self._given:
            return [self._result(p, fresh, args) for p in self.outputs]
        return [_handed_out(fresh[p]) for p in self.outputs]

    def _result(self, p: int, fresh: dict, args: list) -> np.ndarray:
        """Output p as handed out; a parameter's or a constant's as a read-only copy."""
        if p not in self._given:
            return _handed_out(fresh[p])
        number = self._given[p]
        if number is None:
            arr = np.array(self._constants[p], copy=True)
        else:
            param = self._by_value[p]
            arr = np.array(np.asarray(args[number], dtype=param.dtype).reshape(param.shape),
                           copy=True)
        arr.setflags(write=False)
        return arr

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
        if self._timed is not None:
            self._run_timed(fresh)
            return
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
            kind = type(job)
            if kind is not Job:
                if kind is _CONTROL:
                    native_control.run(self._control_blocks[id(job)], self.pool)
                else:                     # a host step, a product from NumPy, a loop from Python
                    job.run(self.pool)
                continue
            for red in fills:
                red.part.fill(red.ident)
            self.pool.run(job)
            for red in copies:
                _copy_out(red, fresh[red.pos] if red.pos in fresh else self.views[red.pos])

    def run_step(self, number: int, arrays: dict) -> None:
        """(a stepwise program) Kernel step `number` alone over `arrays` (position ->
        C-contiguous array; a value it touches that is missing there gets scratch memory
        of its own): the CUDA stand-in runs a GPU kernel's host twin so. The table is as
        it was afterwards."""
        exe = self.exe
        step = exe.steps[number]
        job, fills, copies = self.segments[self._segment_of[number]]
        saved = self.table.copy()
        try:
            for p in run_plan.used(step):
                if p is None:
                    continue
                arr = arrays.get(p)
                if arr is None:
                    v = exe.values[p]
                    arr = arrays[p] = np.empty(v.shape, v.dtype.np)
                self.table[self._where[p]] = address(arr)
            for red in fills:
                red.part.fill(red.ident)
            self.pool.run(job)
            for red in copies:
                _copy_out(red, arrays[red.pos])
        finally:
            self.table[:] = saved

    def _run_timed(self, fresh: dict) -> None:
        """Each segment (one step: a stepwise plan) on its own, timed: a profile's
        kernels, their Python chunks on the pool attributed to them (TimedPool), and
        debug >= 2's line per step."""
        prof = profile_hooks.ACTIVE
        pool = profile_hooks.TimedPool(self.pool, prof) if prof else self.pool
        clock = time.perf_counter
        for (job, fills, copies), (step, threads) in zip(self.segments, self._timed):
            t0 = clock()
            if prof:
                pool.kernel = step.kernel
            if type(job) is Job:
                for red in fills:
                    red.part.fill(red.ident)
                pool.run(job)
                for red in copies:
                    _copy_out(red, fresh[red.pos] if red.pos in fresh else self.views[red.pos])
            else:
                job.run(pool)
            t1 = clock()
            if prof:
                prof.kernel(self.name, step.kernel, step.kind, t0, t1, threads)
                if isinstance(step, WhileStep):
                    prof.trips(job.trips)
            if self.debug:
                print(f"[lazyarray]   {self.name} {step.kernel} ({step.kind}): "
                      f"{(t1 - t0) * 1e3:.3f} ms")

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
        if not again and not self._given:
            return [_handed_out(fresh[p]) for p in self.outputs]
        out = []
        for p in self.outputs:
            given = again.get(p)
            out.append(self._result(p, fresh, args) if given is None else given)
        return out


class _Binding:
    """What binding a plan's segments shares: the plan, the thread count, the (entry,
    array) pairs whose addresses the table takes, the table's address, value -> entry."""

    def __init__(self, spec: run_plan.ProgramPlan, threads: int, fixed: list, base: int,
                 where: dict) -> None:
        self.spec, self.threads, self.fixed, self.base, self.where = spec, threads, fixed, base, where


# plan segment class -> the NativeProgram method binding it
_BIND = {run_plan.JobPlan: NativeProgram._job, run_plan.CallPlan: NativeProgram._call,
         run_plan.ControlPlan: NativeProgram._control}


class _LibraryCall(host_calls.HostStep):
    """A library step run from Python between two jobs (library_calls.py: a product the
    native tiles do not cover): a host step calling the library's function."""


class _PythonControl:
    """A while or conditional step whose sub-programs cannot run natively (a host call or
    argmax's copy inside, donated state; native_control.py): the loop or the branch's
    choice from Python (compiler/program.py's run_while, branch_index), each sub-program
    a loaded executable run on arrays over the program's memory."""

    def __init__(self, values: dict, step: Step, subs: list, where: dict, table: np.ndarray
                 ) -> None:
        self.step, self.subs, self.table = step, subs, table
        self.operands = [(where[o], values[o]) for o in step.operands]
        self.outputs = [(where[p], values[p], k) for p, k in step.outputs]
        self.trips = 0                    # iterations of the last run (a profile shows them)

    def run(self, pool: Any) -> None:
        at = self.table.item
        operands = [array_at(at(i), v) for i, v in self.operands]
        if isinstance(self.step, WhileStep):
            cond, body = self.subs
            self.trips = 0
            if body is not None:  # a body that writes its state in place: never over the
                for _, k in body._donated_slots.values():    # operands (a user's tensors)
                    operands[k] = operands[k].copy()

            def run_body(state: list) -> list:
                self.trips += 1
                return body.run(state)
            state = run_while(self.step, operands, cond.run,
                              run_body if body is not None else None, bool)
        else:
            state = self.subs[branch_index(self.step, operands[0])].run(operands[1:])
        for index, v, k in self.outputs:
            np.copyto(array_at(at(index), v), state[k])


def _timing(exe: Any, seg: Any, threads: int) -> tuple:
    """(the step of a stepwise plan's segment, the threads its chunks run on)."""
    if type(seg) is not run_plan.JobPlan:
        return exe.steps[seg.step], 1
    step = exe.steps[seg.steps[0]]
    if not isinstance(step, (LoopStep, PartialStep)):
        return step, 1
    return step, min(len(seg.tasks[0].ranges), threads)


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
_CONTROL = native_control.ControlStep
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
    """An output as it is handed out: a read-only view whose memory comes
    back to the recycled host memory when the caller drops it."""
    arr = arr.view()
    base = arr.base
    if (base.dtype is _UINT8 or base.dtype == _UINT8) and base.ndim == 1:
        HOST_MEMORY.track(arr, base)
    arr.setflags(write=False)
    return arr


_UINT8 = np.dtype(np.uint8)


native_control.PROGRAM[:] = [NativeProgram, all_native]
