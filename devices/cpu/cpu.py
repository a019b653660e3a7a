"""The compiled CPU device: a Program from the compiler, loaded with MCJIT, run here.

`CPUDevice.compile(module)` looks the module up in the disk cache; on a miss it asks the
compiler (`lazyarray.compiler.compile(module, "cpu", donated)`) for a Program, which the
cache stores. Either way the Program's object code is loaded (devices/cpu/object_code.py)
and wrapped in a `CPUExecutable`, which runs it through the CPU runtime's one executor: the
program's plan (run_plan.py, the plan a C library is written from too) bound by a
NativeProgram (native_program.py): generated kernels and matrix products as jobs of the
native worker pool, loops and branches in the native control runner, the few opaque ops
through their NumPy references (host_calls.py, library_calls.py) between two jobs. Every
thread a run uses is the native pool's.

Settings come from whoever makes the device (lazyarray passes its config): devices do
not import lazyarray.
"""
from __future__ import annotations

import ctypes
import time
from typing import Any, Callable, Optional

from ...compiler import fork_locks, profile_hooks
from ...compiler.driver import CPU, compile as compile_program, target_id
from ...compiler.hlo.module import Module
from ...compiler.primitive import PRIMITIVES
from ...compiler.program import (CONTROL_STEPS, LibraryStep, LoopStep, PartialStep, Program,
                                 Step, sub_program)
from ..compile_progress import Progress
from ..compile_cache import (VERSION, DiskCache, compiler_fingerprint, default_dir,  # noqa: F401
                             entry_key, load_cached)
from . import lapack, native_gemm, native_pool, native_program, run_plan, runtime_objects
from ..device import HostDevice
from ..dump_files import write_dump
from .library_calls import LIBRARY_CALLS, gemm_call, matmul_into  # noqa: F401 (their home)
from .object_code import ENGINE_BYTES, LoadedCode
from .blas_threads import BLAS_THREADS
from .native_pool import NativePool, default_threads
from .run_plan import CHUNKS_PER_THREAD, SPLIT_ELEMENTS  # noqa: F401  (the split's policy)

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


def _prefetch_runtime(module: Module, steps: list, early: bool = False) -> None:
    """A program's steps are planned: the runtime code its first run will need and this
    process lacks (the worker pool, its tasks' trampolines, its products' GEMM tile
    functions) is built on
    threads of their own while LLVM compiles the program (driver.compile's `planned`).
    `early`: only its library calls are known yet; the trampolines wait for every step
    (built as one object, the set a process loading the program from the disk cache
    asks the cache for)."""
    native_pool.prefetch()
    if not early:
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
        self._fns = {s.fn: self._function(s.fn, len(s.args), len(run_plan.roots(s)))
                     for s in kernels}
        self._fns.update({s.finish: self._function(s.finish, len(s.finish_args), len(s.roots), 1)
                          for s in kernels if isinstance(s, PartialStep) and s.finish})
        self._lock = fork_locks.lock()
        # what is planned and bound once: ("plan", threads, stepwise) -> run_plan's plan,
        # ("program", threads[, "stepwise"]) -> its NativeProgram
        self._range_cache: dict = {}
        self._uses_blas = any(calls_blas(s) for s in self.steps)
        self._plain = not self._uses_blas and not self._lapack   # (see run)
        # (the run settings it was chosen under, the NativeProgram): a run under the same
        # settings takes it without asking again
        self._fast: Optional[tuple] = None
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

    # ---- running ----------------------------------------------------------------------

    def run(self, args: list) -> list:
        """The program's outputs for `args`: its plan run by a NativeProgram (one per
        thread count; a stepwise one, each step timed, while a profile records or with
        debug >= 2)."""
        fast = self._fast
        if profile_hooks.ACTIVE:
            # timed per step; that choice is not kept (it would keep the program stepwise
            # after the profile ends)
            prog = self._native_program(stepwise=True)
        else:
            settings = self.device.run_settings()
            if fast is None or fast[0] != settings:
                fast = self._fast = (settings, self._native_program())
            prog = fast[1]
        if self._plain:                   # generated code alone: the usual tiny program
            with self._lock:
                return prog.run(args)
        with self._lock:
            if not prog.calls_blas:       # (products of our own code alone)
                out = prog.run(args)
            else:
                # BLAS on one thread while the pool splits the work: its threads would
                # fight the pool's (blas_single_threaded's calls without its generator:
                # every step of a training loop comes here)
                BLAS_THREADS.enter()
                try:
                    out = prog.run(args)
                finally:
                    BLAS_THREADS.exit()
            if self._lapack:
                self._lapack_failures()
            return out

    def _native_program(self, stepwise: bool = False) -> native_program.NativeProgram:
        """The NativeProgram for this run's thread count (stepwise: for a profile, or
        debug >= 2, each step timed)."""
        s = self.device._settings()
        debug = int(s.get("debug") or 0) >= 2
        threads = int(s.get("num_threads") or 0) or default_threads()
        stepwise = stepwise or debug
        key = ("program", threads, "stepwise") if stepwise else ("program", threads)
        prog = self._range_cache.get(key)
        if prog is None:
            prog = self._range_cache[key] = native_program.NativeProgram(self, threads, stepwise)
        prog.debug = debug
        return prog

    def run_step(self, step: Step, arrays: dict) -> None:
        """Kernel step `step` (a loop or partial reduction of this program) alone over
        `arrays` (position -> C-contiguous array of each value it touches): the CUDA
        stand-in runs a GPU kernel's host twin so (devices/stand_ins/cuda_host_kernels.py)."""
        number = next(k for k, s in enumerate(self.steps) if s is step)
        with self._lock:
            self._native_program(stepwise=True).run_step(number, arrays)

    def _lapack_failures(self) -> None:
        """Raise the first failure a LAPACK step recorded in this run (a singular or
        indefinite matrix); its outputs are never handed out."""
        for bound in self._lapack:
            bound.raise_failure()

    def _ranges(self, step: Step) -> list:
        """A kernel step's chunk ranges at the device's thread count."""
        return self._split(step, self.device.pool().threads)

    def _split(self, step: Step, threads: int) -> list:
        return run_plan.step_ranges(step, threads)


def control_executables(step: Step, device: "CPUDevice") -> list:
    """The loaded sub-programs of a control step: [cond, body or None] or the branches."""
    return [CPUExecutable(sub_program(p), device) if p is not None else None
            for p in step.sub_programs()]


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
