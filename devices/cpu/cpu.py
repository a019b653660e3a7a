"""The compiled CPU device: a Program from the compiler, loaded with MCJIT, run here.

`CPUDevice.compile(module)` looks the module up in the disk cache; on a miss it asks the
compiler (`lazyarray.compiler.compile(module, "cpu", donated)`) for a Program, which the
cache stores. Either way the Program's object code is loaded (devices/cpu/object_code.py)
and wrapped in a `CPUExecutable`, which runs it as one NativeProgram where it can
(native_program.py) and otherwise its steps one by one over NumPy buffers: generated
kernels and matrix products as jobs of the native worker pool, the few opaque ops through
their NumPy references (host_calls.py). Every thread a run uses is the native pool's.

Settings come from whoever makes the device (lazyarray passes its config): devices do
not import lazyarray.
"""
from __future__ import annotations

import contextlib
import ctypes
import time
from typing import Any, Callable, Optional

import numpy as np

from ...compiler.hlo import dtypes as D
from ...compiler import fork_locks, profile_hooks
from ...compiler.driver import CPU, compile as compile_program, target_id
from ...compiler.hlo.module import Module
from ...compiler.primitive import PRIMITIVES
from ...compiler.program import (CONTROL_STEPS, ConditionalStep, LibraryStep, LoopStep,
                                 PartialStep, Program, Step, ValueInfo, WhileStep,
                                 branch_index, run_while, sub_program)
from ..compile_progress import Progress
from ..compile_cache import (VERSION, DiskCache, compiler_fingerprint, default_dir,  # noqa: F401
                             entry_key, load_cached)
from . import lapack, native_control, native_gemm, native_pool, native_program, runtime_objects
from ..device import HostDevice
from ..dump_files import write_dump
from .host_calls import host_call
from .host_memory import HOST_MEMORY, claim_memory
from .object_code import ENGINE_BYTES, LoadedCode
from .blas_threads import BLAS_THREADS, blas_single_threaded
from .native_pool import NativePool, default_threads, split

SPLIT_ELEMENTS = 1 << 15      # below this much work a kernel runs on one thread
CHUNKS_PER_THREAD = 4

# The settings the CPU device reads, with its defaults when made without lazyarray's
# config (lazyarray passes its flags of the same names: lazyarray/devices_registry.py)
DEFAULT_SETTINGS = {"num_threads": 0, "cache_dir": "", "cache_max_mb": 1024, "dump": "",
                    "debug": 0, "verify": False}


def default_settings() -> dict:
    return dict(DEFAULT_SETTINGS)


class CPUDevice(HostDevice):
    name = "cpu"
    platform = "cpu"
    supports_donation = True     # compile(module, donated=...) may write into those inputs

    def __init__(self, settings: Optional[Callable[[], dict]] = None,
                 run_settings: Optional[Callable[[], tuple]] = None) -> None:
        """`settings`: the settings as a dict (read at every compile); `run_settings`:
        what a cached run depends on, (num_threads, debug), cheaply (read at every run;
        by default from `settings`)."""
        self._settings = settings or default_settings
        self.run_settings = run_settings or self._run_settings
        # the runtime's own native code is cached where this device caches programs
        runtime_objects.CACHE[0] = self._runtime_code_cache

    def _runtime_code_cache(self) -> tuple:
        return self.disk_cache(), (VERSION, compiler_fingerprint()) + target_id(CPU)

    def _run_settings(self) -> tuple:
        s = self._settings()
        return s.get("num_threads"), s.get("debug")

    # ---- buffers ----------------------------------------------------------------------

    def cache_key(self) -> tuple:
        return ("cpu",) + target_id(CPU)[1:3]

    # ---- settings ---------------------------------------------------------------------

    def settings(self) -> dict:
        s = default_settings()
        s.update(self._settings())
        return s

    def pool(self, settings: Optional[dict] = None) -> NativePool:
        """The process's native pool of the settings' thread count (every kernel, product
        and split host call of a run goes through it)."""
        return native_pool.get_pool(int((settings or self.settings())["num_threads"] or 0))

    def disk_cache(self) -> Optional[DiskCache]:
        where = self.settings()["cache_dir"] or default_dir()
        mb = self.settings().get("cache_max_mb")
        return None if where == "off" else DiskCache(where, None if mb is None else int(mb) << 20)

    # ---- compile ----------------------------------------------------------------------

    def cache_entry_key(self, module: Module, donated: frozenset = frozenset()) -> str:
        triple, cpu, features, llvm_version = target_id(CPU)
        text = str(module) + (f"\ndonated {sorted(donated)}" if donated else "")
        return entry_key(text, VERSION, compiler_fingerprint(), llvm_version,
                         triple, cpu, features)

    def compile(self, module: Module, donated: frozenset = frozenset()) -> "CPUExecutable":
        """`donated`: parameter numbers whose buffers the caller gives up, so the program
        may write outputs and temporaries into them once they are dead."""
        t0 = time.perf_counter()
        s = self.settings()
        cache = self.disk_cache()
        key = self.cache_entry_key(module, donated) if cache is not None else None
        with profile_hooks.span("cache", "disk_cache_load"):   # timed when profiling
            program = load_cached(cache, key) if cache is not None else None
        exe = self._load_hit(program, cache, key)
        hit = exe is not None
        if exe is None:
            progress = Progress(module.name)
            try:
                program = compile_program(module, CPU, donated, verify=bool(s["verify"]),
                                          dumps=bool(s["dump"]), progress=progress,
                                          planned=_prefetch_runtime)
            finally:
                progress.close()
            if cache is not None:
                cache.store(key, *program.to_cache())
            with profile_hooks.span("codegen", "load_object"):
                exe = CPUExecutable(program, self)
        if s["dump"]:
            # (a program from the disk cache carries no stage texts: made again to dump)
            texts = program if program.dumps else compile_program(module, CPU, donated, dumps=True)
            write_dump(s["dump"], module.name, texts)
        exe.from_disk_cache = hit
        exe.compile_seconds = time.perf_counter() - t0
        if int(s["debug"]) >= 1:
            print(f"[lazyarray] cpu compile {module.name}: {program.kernels()} kernels, "
                  f"{exe.compile_seconds * 1e3:.1f} ms, disk cache {'hit' if hit else 'miss'}")
        return exe

    def _load_hit(self, program: Optional[Program], cache: Any,
                  key: Optional[str]) -> Optional["CPUExecutable"]:
        """The disk cache's program loaded, or None: a miss, or an entry whose code does not
        load (cut short, or lacking a function its steps name), which is dropped so that
        the compile that follows replaces it."""
        if program is None:
            return None
        try:
            with profile_hooks.span("codegen", "load_object"):
                return CPUExecutable(program, self)
        except (ValueError, KeyError, TypeError):
            cache.remove(key)
            return None

    def stage(self, module: Module, stage: str) -> str:
        """The text of one compilation stage: optimized_hlo, fusion, dot, llvm or asm;
        and "ptx": what the module compiles to for a GPU (PTX_TARGET), which needs no GPU
        (code generation for NVPTX is LLVM's), so PTX can be read on any machine."""
        if stage == "ptx":
            return compile_program(module, PTX_TARGET, dumps=True).dumps["ptx"]
        return compile_program(module, CPU, dumps=True).dumps[stage]


def _prefetch_runtime(module: Module, steps: list) -> None:
    """A program's steps are planned: the runtime code its first run will need and this
    process lacks (the worker pool, its tasks' trampolines, its products' GEMM tile
    functions) is built on
    threads of their own while LLVM compiles the program (driver.compile's `planned`)."""
    native_pool.prefetch()
    native_pool.prefetch_trampolines(native_pool.trampoline_keys(steps))
    native_gemm.prefetch(module, steps)


PTX_TARGET = "sm_80"     # la.debug.ir(cpu tensor, "ptx"): the data-center GPUs' common class


# ---- running -------------------------------------------------------------------------

class CPUExecutable:
    """A loaded Program: its object code, steps and buffer plan."""

    def __init__(self, program: Program, device: CPUDevice) -> None:
        self.program = program
        self.device = device
        self.name = program.name
        self.values = program.value_table()
        self.slot_of = {int(p): int(s) for p, s in program.slots}
        self.slot_bytes = list(program.slot_bytes)
        self.peak_bytes = int(program.peak_bytes)
        self.steps = program.steps
        self.params = [(int(p), int(n)) for p, n in program.params]
        self.outputs = list(program.outputs)
        self.from_disk_cache = False
        self.compile_seconds = 0.0
        self.kernels_per_run = len(self.steps)
        self._param_slots = {self.slot_of[p] for p, _ in self.params if p in self.slot_of}
        donated = set(program.donated)
        # slot -> (position, number) of a donated parameter: its memory may be reused
        self._donated_slots = {self.slot_of[p]: (p, n) for p, n in self.params
                               if n in donated and p in self.slot_of}
        # output -> donated parameter it overwrites in place (one slot, one kernel argument)
        self._aliases = [(int(o), int(x)) for o, x in program.aliases]
        self._const_arrays = self._constants()
        self._code = LoadedCode(program.code) if any(isinstance(s, (LoopStep, PartialStep))
                                                     for s in self.steps) else None
        # decompositions: SciPy's LAPACK from the generated code, else their NumPy fallback
        self.steps, self._lapack = bind_lapack(self._code, self.steps)
        # a while/conditional step's sub-programs, loaded once with this one
        self._subs = {id(s): control_executables(s, device) for s in self.steps
                      if isinstance(s, CONTROL_STEPS)}
        # whether a run can fail on its data (a singular or indefinite matrix): the runtime
        # then gives it copies of the inputs it donates, so a failed run loses nothing
        self.may_fail = bool(self._lapack) or any(map(fails_on_data, self.steps)) or any(
            sub is not None and sub.may_fail for subs in self._subs.values() for sub in subs)
        kernels = [s for s in self.steps if isinstance(s, (LoopStep, PartialStep))]
        self._fns = {s.fn: self._function(s.fn, len(s.args), len(_roots(s))) for s in kernels}
        self._fns.update({s.finish: self._function(s.finish, len(s.finish_args), len(s.roots), 1)
                          for s in kernels if isinstance(s, PartialStep) and s.finish})
        self._lock = fork_locks.lock()
        self._plan: Optional[tuple] = None           # see _binding_plan
        self._given: Optional[set] = None            # positions of parameters and constants
        self._run_pool: NativePool = device.pool()   # set again at each run (settings may change)
        self._range_cache: dict = {}                 # (id(step), threads) -> chunk ranges
        self._uses_blas = any(calls_blas(s) for s in self.steps)
        self._plain = not self._uses_blas and not self._lapack   # (see run)
        # (the run settings it was chosen under, the NativeProgram or None): a run under
        # the same settings takes it without asking again
        self._fast: Optional[tuple] = None
        self._trips = 0                              # iterations of the last while step run
        # what keeping this executable costs (the runtime's cache bounds the total)
        self.nbytes = len(program.code) + sum(a.nbytes for a in self._const_arrays.values())
        if self._code is not None:       # its LLVM engine: what the cache's MB cap bounds
            self.nbytes += ENGINE_BYTES * len(self._code.engines)

    def _function(self, name: str, nargs: int, npartials: int, counts: int = 0) -> Any:
        """fn(buffers..., start, end, partials..., counts...) (compiler/codegen/cpu_kernels.py)."""
        proto = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * nargs), ctypes.c_int64,
                                 ctypes.c_int64, *([ctypes.c_void_p] * npartials),
                                 *([ctypes.c_int64] * counts))
        return proto(self._code.address(name))

    def _constants(self) -> dict:
        return {p: v.constant() for p, v in self.values.items()
                if v.op == "constant" and p in self.slot_of}

    # ---- buffers of one run ---------------------------------------------------------

    def _binding_plan(self) -> tuple:
        """What `_bind` does for each value, worked out once: (parameters as (position,
        number, dtype, shape), slot values as (position, slot, bytes, dtype, shape,
        output?)). The values' dtypes and shapes are looked up here, not at every run."""
        plan = self._plan
        if plan is None:
            params = [(p, n, self.values[p].dtype.np, self.values[p].shape) for p, n in self.params]
            taken = {p for p, _ in self.params} | set(self._const_arrays)
            outputs = set(self.outputs)
            slots = [(p, slot, self.values[p].nbytes, self.values[p].dtype.np, self.values[p].shape,
                      p in outputs) for p, slot in self.slot_of.items() if p not in taken]
            plan = self._plan = (params, slots)
        return plan

    def _bind(self, args: list, temps: list) -> dict:
        """position -> array for every value with a slot: the caller's inputs, fresh
        outputs, and temporaries (listed in `temps`, to be given back after the run)."""
        params, slots = self._binding_plan()
        arrays: dict = dict(self._const_arrays)
        slot_mem: dict = {}
        # claimed before the parameters are viewed below: a view made first would count as
        # another reader of the memory and the claim would always fail (then copied in)
        for slot, (p, number) in self._donated_slots.items():
            mem = claim_memory(args[number], self.values[p])
            if mem is not None:         # never listed in temps: it stays with what lands in it
                slot_mem[slot] = mem[:self.slot_bytes[slot]]
        for p, number, dtype, shape in params:
            arr = args[number]
            if type(arr) is not np.ndarray or (arr.dtype is not dtype and arr.dtype != dtype) \
                    or arr.shape != shape:
                arr = np.asarray(arr, dtype=dtype).reshape(shape)
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)
            arrays[p] = arr
        param_slots, slot_bytes = self._param_slots, self.slot_bytes
        for p, slot, nbytes, dtype, shape, output in slots:
            if slot in param_slots and slot not in slot_mem:
                slot = ("own", p)               # never write into a caller's kept buffer
            mem = slot_mem.get(slot)
            if mem is None:
                shared = type(slot) is int
                mem = slot_mem[slot] = HOST_MEMORY.take(slot_bytes[slot] if shared else nbytes)
                if shared and not output:
                    temps.append(mem)
            arrays[p] = mem[:nbytes].view(dtype).reshape(shape)
        for o, x in self._aliases:
            # the kernel reads the parameter through the output's memory: when the caller's
            # buffer could not be taken over, that memory starts as a copy of it
            if native_pool.address(arrays[o]) != native_pool.address(arrays[x]):
                np.copyto(arrays[o], arrays[x])
        return arrays

    def _scratch(self, arrays: dict, p: int) -> np.ndarray:
        arr = arrays.get(p)
        if arr is None:
            v = self.values[p]
            arr = arrays[p] = np.empty(v.shape, v.dtype.np)
        return arr

    # ---- steps ----------------------------------------------------------------------

    def run(self, args: list) -> list:
        fast = self._fast
        if profile_hooks.ACTIVE:
            # timed per step: the fast path is skipped, and that choice is not kept (it
            # would keep the program on the slow path after the profile ends)
            prog = None
        else:
            if fast is None or fast[0] != self.device.run_settings():
                fast = self._fast = (self.device.run_settings(), self._native_program())
            prog = fast[1]
        if prog is not None:
            if self._plain:               # generated code alone: the usual tiny program
                with self._lock:
                    return prog.run(args)
            with self._lock:
                if not prog.calls_blas:   # (products of our own code alone)
                    out = prog.run(args)
                else:
                    # (blas_single_threaded's calls without its generator: every step of a
                    # training loop comes here)
                    BLAS_THREADS.enter()
                    try:
                        out = prog.run(args)
                    finally:
                        BLAS_THREADS.exit()
                if self._lapack:
                    self._lapack_failures()
                return out
        temps: list = []
        try:
            return self._run(args, temps)
        finally:
            for mem in temps:      # dead after the run: the next run (of any executable) reuses it
                HOST_MEMORY.release(mem)

    def _native_program(self) -> Optional[native_program.NativeProgram]:
        """The whole-program fast path for this run's thread count, when the program
        allows it (see native_program.py) and no per-step timing is asked for."""
        s = self.device._settings()
        ok = self._range_cache.get("eligible")
        if ok is None:
            ok = self._range_cache["eligible"] = native_program.eligible(self)
        if not ok or int(s.get("debug") or 0) >= 2 or profile_hooks.ACTIVE:
            return None
        threads = int(s.get("num_threads") or 0) or default_threads()
        key = ("program", threads)
        prog = self._range_cache.get(key)
        if prog is None:
            prog = self._range_cache[key] = native_program.NativeProgram(self, threads)
        return prog

    def _run(self, args: list, temps: list) -> list:
        # BLAS on one thread while the pool splits the work: no spinning BLAS threads
        # competing with the pool's workers for the cores
        blas = blas_single_threaded() if self._uses_blas else contextlib.nullcontext()
        with self._lock, blas:
            prof = profile_hooks.ACTIVE      # a profile records: time binding and each step
            t0 = time.perf_counter() if prof else 0.0
            arrays = self._bind(args, temps)
            if prof:
                prof.span("transfer", "bind buffers", t0, time.perf_counter(), {})
            # settings are read once per run (the steps below use this pool)
            settings = self.device.settings()
            debug = int(settings["debug"]) >= 2
            self._run_pool = self.device.pool(settings)
            if prof:
                self._run_pool = profile_hooks.TimedPool(self._run_pool, prof)
            for step in self.steps:
                t0 = time.perf_counter() if debug or prof else 0.0
                if prof:
                    self._run_pool.kernel = step.kernel
                _RUN[type(step)](self, step, arrays)
                if prof:
                    prof.kernel(self.name, step.kernel, step.kind, t0, time.perf_counter(),
                                self._threads_of(step))
                    if isinstance(step, WhileStep):
                        prof.trips(self._trips)
                if debug:
                    print(f"[lazyarray]   {self.name} {step.kernel} ({step.kind}): "
                          f"{(time.perf_counter() - t0) * 1e3:.3f} ms")
            self._lapack_failures()
            return self._results(arrays)

    def _lapack_failures(self) -> None:
        """Raise the first failure a LAPACK step recorded in this run (a singular or
        indefinite matrix); its outputs are never handed out."""
        for bound in self._lapack:
            bound.raise_failure()

    def _results(self, arrays: dict) -> list:
        out = []
        params = self._given
        if params is None:
            params = self._given = {p for p, _ in self.params} | set(self._const_arrays)
        for p in self.outputs:
            arr = arrays[p]
            if p in params:        # an input returned as is: the caller gets its own copy
                arr = np.array(arr, copy=True)
            elif arr.base is not None:
                arr = arr.view()
                if arr.base.dtype == np.uint8 and arr.base.ndim == 1:   # not a donated put() buffer
                    HOST_MEMORY.track(arr, arr.base)
            arr.setflags(write=False)
            out.append(arr)
        return out

    def _pointers(self, step: Step, arrays: dict) -> list:
        # native_pool.address: the data pointer without building a ctypes helper object
        # (a step has tens of arguments; `.ctypes.data` costs ~1.5 us each)
        return [native_pool.address(self._scratch(arrays, p)) for p in step.args]

    def _ranges(self, step: Step) -> list:
        threads = self._run_pool.threads
        cached = self._range_cache.get((id(step), threads))
        if cached is None:
            cached = self._range_cache[(id(step), threads)] = self._split(step, threads)
        return cached

    def _split(self, step: Step, threads: int) -> list:
        extent = int(step.extent)
        small = extent * max(1, int(step.work)) < SPLIT_ELEMENTS
        if threads <= 1 or small or extent < 2 or step.serial:
            return [(0, extent)]
        # a few chunks per thread, taken from a queue: balance when a core is busy
        per_thread = CHUNKS_PER_THREAD if extent * int(step.work) >= 64 * SPLIT_ELEMENTS else 1
        return split(extent, threads * per_thread)

    def _threads_of(self, step: Step) -> int:
        """Threads a step's chunks run on (for a profile: the native pool runs them in
        one call, so no chunk is timed on its own)."""
        if not isinstance(step, (LoopStep, PartialStep)):
            return 1
        return min(len(self._ranges(step)), self._run_pool.threads)

    def _native_job(self, step: Step) -> native_pool.Job:
        """One step as a job of the native pool at this run's thread count (built once):
        the kernel over its chunks, then for a partial reduction its finish (combine the
        chunks' partials, write the results and the epilogue) in the same native call.
        Buffer table: the kernel's arguments, its partials, the finish's arguments, the
        chunk count."""
        key = ("job", id(step), self._run_pool.threads)
        job = self._range_cache.get(key)
        if job is None:
            ranges = self._ranges(step)
            partial = isinstance(step, PartialStep)
            roots = step.roots if partial else []
            nargs, nparts = len(step.args), len(roots)
            parts = list(range(nargs, nargs + nparts))
            per_chunk = partial and step.per_chunk and len(ranges) > 1
            strides = [_partial_row_bytes(r) if per_chunk else 0 for r in roots]
            tasks = [(self._code.address(step.fn), range(nargs), parts, strides, ranges)]
            size = nargs + nparts
            if partial and step.finish:
                nf = len(step.finish_args)
                tasks.append((self._code.address(step.finish), range(size, size + nf),
                              parts, [0] * nparts, [(0, step.finish_extent)], [size + nf]))
                size += nf + 1
            job = self._range_cache[key] = native_pool.Job(tasks, size)
            if partial and step.finish:
                job.table[-1] = len(ranges) if step.per_chunk else 1
        return job

    def _loop(self, step: LoopStep, arrays: dict) -> None:
        # every chunk runs in one native call over the native pool (no Python between
        # chunks; an interrupt cannot arrive while a worker still writes)
        job = self._native_job(step)
        job.table[:] = self._pointers(step, arrays)
        native_pool.get_pool(self._run_pool.threads).run(job)

    def _partial(self, step: PartialStep, arrays: dict) -> None:
        job = self._native_job(step)
        chunks = len(self._ranges(step)) if step.per_chunk else 1
        partials = self._partial_arrays(step, chunks)
        pointers = self._pointers(step, arrays) + [native_pool.address(p) for p in partials]
        if step.finish:
            pointers += [native_pool.address(self._scratch(arrays, p)) for p in step.finish_args]
            job.table[:-1] = pointers
        else:
            job.table[:] = pointers
        native_pool.get_pool(self._run_pool.threads).run(job)
        if step.finish:
            return
        for r, part in zip(step.roots, partials):
            if r["pos"] is None:        # working state (argmax's best values), not a result
                continue
            target = self._scratch(arrays, r["pos"])
            target[...] = np.asarray(part[0]).astype(target.dtype)

    def _partial_arrays(self, step: Step, chunks: int) -> list:
        """A partial step's arrays of per-chunk results, set to the reduction's start value
        (kept between runs: the executable runs one call at a time, under its lock)."""
        key = ("partials", id(step), chunks)
        partials = self._range_cache.get(key)
        if partials is None:
            partials = self._range_cache[key] = [
                np.empty((chunks,) + tuple(r["shape"]), D.from_name(r["acc"]).np)
                for r in step.roots]
        for r, part in zip(step.roots, partials):
            part.fill(r["init"])
        return partials

    def _while(self, step: WhileStep, arrays: dict) -> None:
        """A while: the whole loop in one native call where it can run so, else its
        sub-programs run from here, each a loaded executable
        (compiler/codegen/control_steps.py)."""
        if self._ran_natively(step, arrays):
            return
        cond, body = self._subs[id(step)]
        operands = [self._scratch(arrays, o) for o in step.operands]
        self._trips = 0

        def run_body(state: list) -> list:
            self._trips += 1          # (a profile shows the loop with its iterations)
            return body.run(state)
        state = run_while(step, operands, cond.run, run_body if body is not None else None,
                          bool)
        self._control_outputs(step, state, arrays)

    def _conditional(self, step: ConditionalStep, arrays: dict) -> None:
        """The branch the index names: natively where it can run so, else from here."""
        if self._ran_natively(step, arrays):
            return
        operands = [self._scratch(arrays, o) for o in step.operands]
        state = self._subs[id(step)][branch_index(step, operands[0])].run(operands[1:])
        self._control_outputs(step, state, arrays)

    def _control_outputs(self, step: Step, state: list, arrays: dict) -> None:
        for p, k in step.outputs:
            np.copyto(self._scratch(arrays, p), state[k])

    def _ran_natively(self, step: Step, arrays: dict) -> bool:
        """Run a control step as one call of the native control runner; False where it
        cannot run so."""
        native = self._native_control(step)
        if native is None:
            return False
        for p in native.index:
            self._scratch(arrays, p)
        native.run(arrays, native_pool.get_pool(self._run_pool.threads))
        return True

    def _native_control(self, step: Step) -> Optional[native_control.Standalone]:
        """The step as one call of the native control runner (built once per thread
        count), or None where it cannot run so (devices/cpu/native_control.py) or a profile
        times each sub-program's steps."""
        if profile_hooks.ACTIVE or isinstance(self._run_pool, profile_hooks.TimedPool):
            return None
        pool = native_pool.get_pool(self._run_pool.threads)
        key = ("control", id(step), pool.threads)
        native = self._range_cache.get(key)
        if native is None:
            try:
                native = native_control.Standalone(step, self._subs[id(step)], pool.threads,
                                                   lambda p: self.values[p].nbytes)
            except native_control.NotNative:
                native = False
            self._range_cache[key] = native
        return native or None

    def _library(self, step: LibraryStep, arrays: dict) -> None:
        """A call the primitive's stanza names (`step.call`), see LIBRARY_CALLS."""
        operands = [self._scratch(arrays, o) for o in step.operands]
        out = self._scratch(arrays, step.pos)
        LIBRARY_CALLS[step.call](step, self.values[step.pos], operands, out,
                                    self._run_pool)


# step class -> the method that runs it (one handler per kind of step)
_RUN = {LoopStep: CPUExecutable._loop, PartialStep: CPUExecutable._partial,
        LibraryStep: CPUExecutable._library, WhileStep: CPUExecutable._while,
        ConditionalStep: CPUExecutable._conditional}


def control_executables(step: Step, device: "CPUDevice") -> list:
    """The loaded sub-programs of a control step: [cond, body or None] or the branches."""
    return [CPUExecutable(sub_program(p), device) if p is not None else None
            for p in step.sub_programs()]


def gemm_call(step: LibraryStep, v: ValueInfo, operands: list, out: np.ndarray,
              pool: NativePool) -> None:
    """dot_general through BLAS, with the layout the compiler worked out."""
    matmul_into(out, operands[0], operands[1], step.args, pool)


# what the CPU runs for each library call a stanza can name (compiler/primitive.py)
LIBRARY_CALLS = {"gemm": gemm_call, "host": host_call}


def _roots(step: Step) -> list:
    """A partial step's reduced values (none for a loop)."""
    return step.roots if isinstance(step, PartialStep) else []


def calls_blas(step: Step) -> bool:
    """Whether a step calls BLAS or LAPACK (then BLAS is held to one thread while the
    program runs: its threads would fight the pool's, and on small matrices OpenBLAS's
    threads cost more than they give): matrix products and decompositions, whether
    generated LAPACK calls or their NumPy fallback; not FFTs or sorts."""
    if isinstance(step, LoopStep) and step.lapack is not None:
        return True
    if not isinstance(step, LibraryStep):
        return False
    return step.call != "host" or PRIMITIVES[step.op].library.lapack is not None


def fails_on_data(step: Step) -> bool:
    """Whether a step can raise on valid input: a decomposition (LAPACK generated, or its
    NumPy fallback, raises LinAlgError for a singular or indefinite matrix)."""
    if isinstance(step, LoopStep) and step.lapack is not None:
        return True
    return isinstance(step, LibraryStep) and step.call == "host" \
        and PRIMITIVES[step.op].library.lapack is not None


def bind_lapack(code: Optional[LoadedCode], steps: list) -> tuple:
    """(steps, bound LAPACK steps): each generated LAPACK step with its routine table
    filled from SciPy (devices/cpu/lapack.py), or replaced by its NumPy fallback where SciPy
    or a routine is missing."""
    calls = [isinstance(s, LoopStep) and s.lapack is not None for s in steps]
    if not any(calls):
        return steps, []
    out, bound = [], []
    for s, calls_lapack in zip(steps, calls):
        found = lapack.addresses(s.lapack["routines"]) if calls_lapack else None
        if calls_lapack and found is None:
            out.append(s.host)
            continue
        if found is not None:
            bound.append(lapack.Bound(code, s, found))
        out.append(s)
    return out, bound


def _partial_row_bytes(root: dict) -> int:
    """Bytes of one chunk's row of a partial array (see `_partial`)."""
    return int(np.prod(root["shape"], dtype=np.int64)) * D.from_name(root["acc"]).itemsize


def matmul_into(out: np.ndarray, lhs: np.ndarray, rhs: np.ndarray, layout: dict,
                pool: Optional[NativePool] = None) -> None:
    """out = the product as (batch, m, k) @ (batch, k, n) (`layout`, from dot_general's
    stanza): float32/float64 as the tiles a native program runs for it, on the native pool
    (native_gemm.run_product); other dtypes through NumPy's matmul, written straight
    into the planned buffer (a large one split by batches or rows over the pool)."""
    if not out.size:
        return
    threads = pool.threads if pool is not None else 1
    if native_gemm.run_product(layout, lhs, rhs, out, threads):
        return
    # transposed operands are strided views (reshaped without a copy where they allow)
    a, c = np.transpose(lhs, layout["lhs_perm"]), np.transpose(rhs, layout["rhs_perm"])
    b, m, k, n = layout["batch"], layout["m"], layout["k"], layout["n"]
    a, c = a.reshape(b, m, k), c.reshape(b, k, n)
    target = out.reshape(b, m, n)
    if out.dtype in (np.float16, D.bfloat16.np):
        # an overflow to inf is the result (a GradScaler step looks for it), not a warning
        with np.errstate(over="ignore", invalid="ignore"):
            target[...] = np.matmul(a.astype(np.float32), c.astype(np.float32)).astype(out.dtype)
    elif threads <= 1 or b * m * n * k < SPLIT_FLOPS or (b < threads and m < 2 * threads):
        np.matmul(a, c, out=target)
    elif b >= threads:
        pool.run_python(lambda _, s, e: np.matmul(a[s:e], c[s:e], out=target[s:e]),
                        split(b, threads))
    else:
        pool.run_python(lambda _, s, e: np.matmul(a[:, s:e], c, out=target[:, s:e]),
                        split(m, threads))


SPLIT_FLOPS = 1 << 22    # an integer or complex product this large is split over the pool
