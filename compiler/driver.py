"""The one entry point of compilation: `compile(module, target, donated) -> Program`.

    module --optimize, fusion, buffer assignment (passes/pipeline.py)--> ExecutionPlan
           --code generation for the target (codegen/)--------------------> Program

A target is "cpu" (the host: its triple, CPU name and features) or an NVPTX architecture
("sm_80", "sm_90", ...), optionally with the GPU's size ("sm_90:132:2048": multiprocessors
and threads per multiprocessor, which size the grids). Devices call only this module and read only the Program
(compiler/program.py); how a module is planned and emitted stays inside the compiler.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import os
import threading
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from . import profile_hooks
from .codegen.interrupts import InterruptsDeferred  # noqa: F401  (devices defer SIGINT through here)
from .hlo.module import Module
from .primitive import INDEXING, LEAF, PRIMITIVES
from .program import (CONTROL_STEPS, LaunchStep, LibraryStep, LoopStep, PartialStep,
                      Program, describe_value)

if TYPE_CHECKING:
    from .planning.plan import ExecutionPlan

# The passes and code generators are imported by the functions that use them: devices
# import this module to load a cached Program (target_id, llvm_lock, host_object), and
# a cache hit must not pay for the compiler's import (~100 ms of a process's start).

CPU = "cpu"
# a loop body's kernels run once per iteration: their optimization tier is chosen as if
# each ran this many times per call (a decoding loop's 64-wide kernels ran unoptimized)
LOOP_BODY_RUNS = 1024
CPU_LIBRARY = "cpu-library"   # the host's code for a shared library (ahead of time: PIC,
                              # small code model), not for the JIT

def compile(module: Module, target: str = CPU, donated: frozenset = frozenset(), *,
            verify: bool = False, dumps: bool = False, progress: Any = None,
            separate_buffers: bool = False, carried: Any = None, planned: Any = None
            ) -> Program:
    """Compile `module` for `target`. `donated`: parameter numbers whose buffers the
    caller gives up, so outputs and temporaries may be written into them once they are
    dead. `verify`: run the verifier after every pass. `dumps`: fill `Program.dumps`
    with the text of every stage (optimized HLO, fusion decisions, Graphviz, LLVM IR,
    assembly or PTX). `progress(stage, done, total)`, when given, hears how far the CPU
    compiler is (kernels generated, then optimizing and emitting). `separate_buffers`
    (CPU): every value in a buffer of its own but for in-place pairs, as the GPU runtime
    allocates them (the host code that stands in for a GPU program's kernels,
    devices/stand_ins/cuda_host_kernels.py). `carried` (CPU and GPU): a loop body's state,
    {parameter number: index of the output that is its next value}: those parameters
    are donated, each slot held by its own output only (buffer_assignment.py), so the
    loop updates that state in one buffer (devices/cpu/native_control.py); the module is
    a loop body (`{}`: one that donates nothing), whose kernels, run at every iteration,
    are optimized as LOOP_BODY_RUNS times their work. `planned(module, steps)` (CPU),
    when given, hears the optimized module and the program's steps as soon as they are
    planned, before LLVM builds their code: the CPU device starts building the runtime
    code the steps will call (GEMM tile functions) meanwhile. Where LLVM builds the
    program on several threads it hears the library calls first, as soon as the plan
    is made (`_early_library_steps`, with `early=True`), then every step once the
    kernels are generated."""
    with _collector_paused():
        if target in (CPU, CPU_LIBRARY):
            return _compile_cpu(module, frozenset(donated), verify, dumps, progress,
                                library=target == CPU_LIBRARY,
                                separate_buffers=separate_buffers, carried=carried,
                                planned=planned)
        return _compile_nvptx(module, target, frozenset(donated), verify, dumps, carried)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block. A compile allocates some
    100,000 short-lived objects (instructions, IR values) that die by reference count;
    the collector's passes over them were 5-15 ms of a transformer's compile."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def target_id(target: str = CPU) -> tuple:
    """What, besides the module, decides the code for `target` (strings, for cache
    keys): the host's triple, CPU name and features, or the architecture; and LLVM's
    version."""
    from .codegen import llvm_target
    if target in (CPU, CPU_LIBRARY):
        return llvm_target.host() + (llvm_target.llvm_version(),)
    return (target, llvm_target.llvm_version())


def llvm_lock() -> Any:
    """The lock around LLVM's global state (not thread-safe): the CPU compiler holds it,
    and so must a device loading object code with MCJIT."""
    from .codegen import llvm_target
    return llvm_target._LOCK


def host_objects(code: bytes) -> list:
    """The object files of a CPU Program's code: one, or a bundle's (a program compiled
    in two halves at once, codegen/object_bundle.py). ValueError for a bundle cut short."""
    from .codegen.object_bundle import unpack
    return unpack(code)


def gpu_arch(capability: tuple) -> str:
    """The NVPTX architecture for a GPU of compute capability (major, minor)."""
    from .codegen.gpu_archs import arch_of
    return arch_of(capability)


def gpu_target(capability: tuple, multiprocessors: int, threads_per_multiprocessor: int) -> str:
    """The NVPTX target for a GPU: its architecture and the size that launches are
    fitted to (codegen/gpu_target.py), e.g. "sm_90:132:2048"."""
    from .codegen.gpu_target import target_string
    return target_string(gpu_arch(capability), multiprocessors, threads_per_multiprocessor)


def runtime_ptx(mod: Any, arch: str) -> str:
    """PTX for `arch` from an llvmlite module a runtime generated for kernels of its own
    (devices/cuda/conditional_kernels.py: the kernel that sets a CUDA graph's conditional
    handle), checked and optimized as the compiler's kernels are."""
    from .codegen import nvptx
    mod.triple = nvptx.TRIPLE
    mod.data_layout = nvptx.DATA_LAYOUT
    return nvptx.to_ptx(mod, arch)[0]


def release_ir(mod: Any) -> None:
    """Free an llvmlite `ir.Module` a runtime generated (its text made) by reference
    counting, not by the cyclic collector (codegen/module_split.py `release_ir`)."""
    from .codegen import module_split
    module_split.release_ir(mod)


# ---- the two targets -------------------------------------------------------------------

def host_object(ir_text: str, name: str, optimize: bool = True, slp: bool = True,
                library: bool = False, apart: bool = False) -> bytes:
    """Object code for the host from LLVM IR a runtime generated for its own native
    functions (devices/cpu/pool_ir.py: the worker pool, kernel trampolines, GEMM tiles),
    built with the options kernels are built with. `optimize=False` parses and emits only
    (a trampoline is a few loads and one call: the IR passes were half of its ~9 ms);
    `slp=False` skips the SLP vectorizer (code that is vector code already); `library`:
    for a shared library (CPU_LIBRARY's code model), not the JIT. `apart` (JIT code
    only): in an LLVM context of its own, without the LLVM lock, so that a thread builds
    it while the compiling thread goes on (the same object code)."""
    from .codegen import llvm_target
    if apart and not library:
        return llvm_target.optimize_apart(ir_text, name, emit=True, slp=slp) if optimize \
            else llvm_target.emit_apart(ir_text, name)
    if optimize:
        mod = llvm_target.optimize(ir_text, name, slp=slp)
    else:
        mod = llvm_target.parse(ir_text, name)
    try:
        return (llvm_target.emit_library_object if library else llvm_target.emit_object)(mod)
    finally:
        llvm_target.release(mod)


def _compile_cpu(module: Module, donated: frozenset, verify: bool, dumps: bool,
                 progress: Any = None, library: bool = False,
                 separate_buffers: bool = False, carried: Any = None, planned: Any = None
                 ) -> Program:
    from .codegen import cpu_kernels, llvm_target, module_split
    from .codegen.control_steps import control_step
    from .passes.expand_convolution import direct_convolutions
    from .passes.inline_calls import holds_calls, inline_calls
    from .passes.pipeline import compile_plan
    if carried:
        donated = frozenset(carried)
    # a program of a replayed module call runs at every step of a Python loop: its
    # kernels are optimized as a loop body's (compiler/passes/inline_calls.py)
    steps_of_a_loop = holds_calls(module)
    module = inline_calls(module)
    if not separate_buffers:    # (a GPU stand-in's host mirror of a GPU plan keeps its kernels)
        module = direct_convolutions(module)    # the CPU's own convolution loops (no im2col)
    plan = compile_plan(module, verify=verify, donate_inputs=dict(carried) if carried else donated)
    if separate_buffers:
        plan = _separate_buffers(plan)
    span = profile_hooks.span         # a profile times each stage (no-op otherwise)
    sub_dumps: dict = {}
    made = [0]

    def compile_sub(m: Module, carried: Any = None) -> Program:
        if library:     # a library links every sub-program's object: names of their own
            m = Module(f"{module.name}_{made[0]}{m.name}", m.instructions, m.outputs)
            made[0] += 1
        # a loop's state updated in place where the native runner or a GPU runs it (the
        # AOT library's C loop keeps two buffers)
        in_place = {} if carried is not None and library else carried
        sub = compile(m, CPU_LIBRARY if library else CPU, dumps=dumps,
                      separate_buffers=separate_buffers, carried=in_place, planned=planned)
        _keep_sub_dumps(sub_dumps, m.name, sub)
        return sub
    control = functools.partial(control_step, plan, compile_sub=compile_sub)
    generate = functools.partial(
        cpu_kernels.generate_module, plan, module.name, progress=progress, control=control,
        lapack=not library, prefix=f"{_c_ident(module.name)}__" if library else "",
        repeat=LOOP_BODY_RUNS if carried is not None or steps_of_a_loop else 1)
    workers = min(_cores(), MAX_LLVM_THREADS) if not library and not dumps else 1
    llmod = None
    if workers >= 2:
        # LLVM builds the first kernels' functions on other threads while Python
        # generates the next ones; then every thread takes the pieces left
        steps, code = _build_streamed(generate, module.name, workers, span, planned, plan,
                                      progress)
    else:
        with span("codegen", "cpu_kernels"):
            ir_module, steps = generate()
            # equal functions made once (module_split.merge_equal), their steps renamed
            texts = module_split.function_texts(ir_module)
            steps = _renamed(steps, module_split.merge_equal(ir_module, texts))
        if planned is not None:
            planned(plan.module, steps)
        functions = sum(1 for s in steps if isinstance(s, (LoopStep, PartialStep)))
        if progress is not None:
            progress("optimizing", functions, functions)
        apart = module_split.vector_code_apart(ir_module, texts)
        parts = module_split.halves(ir_module, texts) if _cores() >= 2 and apart is None \
            else None
        with span("codegen", "llvm_optimize"):
            llmod = _optimize_program(ir_module, module.name, parts, apart)
        module_split.release_ir(ir_module)      # (its texts are made: freed now)
        if progress is not None:
            progress("emitting", functions, functions)
        with span("codegen", "emit_object"):
            code = (llvm_target.emit_library_object if library else llvm_target.emit_object)(llmod)
    program = _program(plan, CPU_LIBRARY if library else CPU, code, steps, donated)
    if dumps:
        program.dumps = _plan_texts(plan)
        program.dumps.update(llvm=str(llmod), asm=llvm_target.emit_assembly(llmod))
        program.dumps.update(sub_dumps)
    if llmod is not None:
        llvm_target.release(llmod)
    return program


# threads that build a large program's pieces at once (the compiling one among them)
MAX_LLVM_THREADS = 4


def _renamed(steps: list, merged: dict) -> list:
    """`steps` calling the kept function in place of each merged one ({dropped: kept})."""
    if not merged:
        return steps
    out = []
    for s in steps:
        if isinstance(s, (LoopStep, PartialStep)) and s.fn in merged:
            s = dataclasses.replace(s, fn=merged[s.fn])
        if isinstance(s, PartialStep) and s.finish in merged:
            s = dataclasses.replace(s, finish=merged[s.finish])
        out.append(s)
    return out


def _optimize_program(ir_module: Any, name: str, parts: Any = None, apart: Any = None
                      ) -> Any:
    """The optimized LLVM module of a CPU program. Where it was cut in two halves
    (`parts`, codegen/module_split.py: two cores or more, a large program), they are
    optimized at the same time, the second on a thread of its own in a context of its
    own, then linked into the first: the IR passes take about half the time. Object
    code is then emitted from the one module. `apart` (module_split.vector_code_apart):
    the texts of the functions that are not vector code and of those that are, the
    second optimized by its own pipeline on a thread meanwhile, linked into the first."""
    from .codegen import llvm_target
    if apart is not None:
        parts, vector_code = apart, True
    else:
        vector_code = False
    if parts is None:
        return llvm_target.optimize(str(ir_module), name)
    with _second_half(parts[1], name, emit=False, vector_code=vector_code) as result:
        llmod = llvm_target.optimize(parts[0], name)
    if isinstance(result[0], BaseException):
        llvm_target.release(llmod)
        raise result[0]
    llvm_target.link_bitcode(llmod, result[0])
    return llmod


def _build_streamed(generate: Any, name: str, workers: int, span: Any, planned: Any,
                    plan: Any, progress: Any) -> tuple:
    """(steps, code): the program's functions generated (`generate(ready=...)`) and
    handed to LLVM in pieces as they come (codegen/module_split.py: Stream), built by
    `workers - 1` threads meanwhile and by this one too once generation ends; the code
    is the bundle of the pieces' objects (codegen/object_bundle.py)."""
    from .codegen import module_split, object_bundle
    if planned is not None:
        early = _early_library_steps(plan)
        if early:
            planned(plan.module, early, early=True)
    with _PieceBuilder(name, workers) as builder:
        with span("codegen", "cpu_kernels"):
            stream = module_split.Stream(workers, builder.send)
            ir_module, steps = generate(ready=stream.add)
            builder.generated = True
            steps = _renamed(steps, stream.finish(ir_module))
            module_split.release_ir(ir_module)      # (its texts are made: freed now)
        builder.close()
        if planned is not None:
            planned(plan.module, steps)
        functions = sum(1 for s in steps if isinstance(s, (LoopStep, PartialStep)))
        if progress is not None:
            progress("optimizing", functions, functions)
        builder.work(lambda stage: profile_hooks.span("codegen", stage))
    if progress is not None:
        progress("emitting", functions, functions)
    return steps, object_bundle.pack(builder.objects)


def _early_library_steps(plan: ExecutionPlan) -> list:
    """The library calls of `plan`'s LIBRARY kernels (matrix products among them), known
    before any kernel is generated: the CPU device's `planned` starts building the GEMM
    tile functions they call at once, on the core that is otherwise idle until the
    first piece of the program reaches LLVM, not once every kernel is generated. (A
    decomposition that the CPU's kernels call LAPACK for is listed by its fallback.)"""
    from .codegen.library_calls import library_step
    from .planning.plan import LIBRARY
    return [library_step(plan.module, k.name, pos)
            for k in plan.kernels if k.kind == LIBRARY for pos in k.outputs]


class _PieceBuilder:
    """Threads that optimize and emit module texts (llvm_target.optimize_apart: an LLVM
    context each, no lock; -O2 or the vector code pipeline, as each is `send`) as they
    are `send`: helpers start with the first piece sent
    while functions are still generated (or at `close`, where there are several: a
    small program's one piece is built by the compiling thread alone); the compiling
    thread joins them with `work` once it has nothing else to do. Leaving the block
    waits for them, and raises the first error any of them met."""

    def __init__(self, name: str, workers: int) -> None:
        self.name, self.workers = name, workers
        self.texts: list = []
        self.objects: list = []
        self.taken = 0
        self.closed = False
        self.failed: list = []
        self.cond = threading.Condition()
        self.helpers: list = []
        self.started = False
        self.generated = False      # every function generated: no helper for one piece

    def __enter__(self) -> "_PieceBuilder":
        return self

    def send(self, text: str, vector_code: bool = False) -> None:
        with self.cond:
            self.texts.append((text, vector_code))
            self.objects.append(None)
            self.cond.notify()
        if not self.started and not self.generated:
            self._start()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        if not self.started and len(self.texts) > 1:
            self._start()

    def work(self, stages: Any = None) -> None:
        """Build pieces until none is left (or one failed)."""
        from .codegen import llvm_target
        while True:
            with self.cond:
                while self.taken >= len(self.texts) and not self.closed and not self.failed:
                    self.cond.wait()
                if self.failed or self.taken >= len(self.texts):
                    return
                k = self.taken
                self.taken += 1
            text, vector_code = self.texts[k]
            try:
                # (on the main thread a SIGINT waits for the piece: llvmlite's clean-up
                # must not be split)
                with InterruptsDeferred():
                    self.objects[k] = llvm_target.optimize_apart(
                        text, self.name, emit=True, stages=stages, vector_code=vector_code)
            except BaseException as e:     # raised again on the compiling thread
                with self.cond:
                    self.failed.append(e)
                    self.cond.notify_all()
                return

    def _start(self) -> None:
        self.started = True
        with InterruptsDeferred():      # (every helper started is one the exit joins)
            for _ in range(self.workers - 1):
                t = threading.Thread(target=self.work, name="lazyarray-llvm", daemon=True)
                t.start()
                self.helpers.append(t)

    def __exit__(self, kind: Any, error: Any, tb: Any) -> None:
        with self.cond:
            if kind is not None:
                self.failed.append(error)   # helpers stop after their piece
            self.closed = True
            self.cond.notify_all()
        for t in self.helpers:
            t.join()
        if kind is None and self.failed:
            raise self.failed[0]


@contextlib.contextmanager
def _second_half(text: str, name: str, emit: bool, vector_code: bool = False
                 ) -> Iterator[list]:
    """The block runs while a thread optimizes `text` in an LLVM context of its own
    (llvm_target.optimize_apart; `vector_code`: with that pipeline); when it ends, the
    list yielded holds the thread's bitcode (object code with `emit`) or the exception
    it raised."""
    from .codegen import llvm_target
    result: list = []

    def second() -> None:
        try:
            result.append(llvm_target.optimize_apart(text, name, emit=emit,
                                                     vector_code=vector_code))
        except BaseException as e:     # raised again on the compiling thread
            result.append(e)
    worker = threading.Thread(target=second, name="lazyarray-llvm", daemon=True)
    worker.start()
    try:
        yield result
    finally:
        worker.join()


@functools.lru_cache(maxsize=None)
def _cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                # not on Linux
        return os.cpu_count() or 1


def _c_ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _keep_sub_dumps(into: dict, name: str, sub: Program) -> None:
    """A control step's sub-program's dump texts (its condition, body, branches), under
    "sub.<name>.<stage>" ("<name>-<k>" for the k-th other sub-program of that name; a
    nested one's keys gain its parent's prefix)."""
    if not sub.dumps:
        return
    k = len({key.split(".")[1] for key in into
             if key.split(".")[1] == name or key.split(".")[1].startswith(name + "-")})
    where = name if k == 0 else f"{name}-{k}"
    for stage, text in sub.dumps.items():
        into[f"sub.{where}.{stage}"] = text


def _control_kernels(plan: ExecutionPlan) -> list:
    from .codegen.control_steps import is_control
    return [k for k in plan.kernels if k.kind == "opaque" and is_control(plan, k)]


def _separate_buffers(plan: ExecutionPlan) -> ExecutionPlan:
    """The plan with each value in a slot of its own, except an output updated in place,
    which keeps its donated parameter's."""
    from .planning.plan import BufferPlan, ExecutionPlan
    ins = plan.module.instructions
    slot_of = {pos: pos for pos in range(len(ins)) if not isinstance(ins[pos].dtype, tuple)}
    aliases = dict(plan.buffers.aliases)
    for out, param in aliases.items():
        slot_of[out] = param
    # a tuple (a while's result) is never in memory: its elements are
    sizes = [0 if isinstance(i.dtype, tuple) else
             int(np.prod(i.shape, dtype=np.int64)) * i.dtype.itemsize for i in ins]
    buffers = BufferPlan(slot_of, sizes, sum(sizes), aliases=aliases)
    return ExecutionPlan(plan.module, plan.kernels, buffers, plan.decisions)


def _compile_nvptx(module: Module, arch: str, donated: frozenset, verify: bool,
                   dumps: bool, carried: Any = None) -> Program:
    from .codegen import nvptx
    from .codegen.control_steps import control_step, is_control
    from .codegen.library_calls import library_step
    from .passes.pipeline import compile_plan
    # donation: an elementwise update may write over its donated parameter in place (the
    # plan's aliases); the device gives such a pair one buffer
    donate = dict(carried) if carried else donated     # (a loop body's state: as the CPU's)
    plan = compile_plan(module, verify=verify, donate_inputs=donate) if donate \
        else compile_plan(module, verify=verify)
    with profile_hooks.span("codegen", "nvptx"):
        gpu = nvptx.emit_plan(plan, arch, module.name)
    steps = []
    for s in gpu.launches:
        if isinstance(s, nvptx.LaunchSpec):
            steps.append(_launch_step(s))
        elif is_control(plan, s):   # a while/conditional: sub-programs for this GPU
            steps.append(control_step(plan, s, compile_sub=lambda m, carried=None: compile(
                m, arch, carried=carried)))
        else:           # a LIBRARY or OPAQUE kernel: its stanza's library call
            steps += [library_step(plan.module, s.name, pos) for pos in s.outputs]
    program = _program(plan, arch, gpu.ptx.encode(), steps, donated)
    program.scratch = dict(gpu.scratch)
    if dumps:
        program.dumps = _plan_texts(plan)
        program.dumps.update(llvm=gpu.llvm_ir, ptx=gpu.ptx)
    return program


def simt_layout() -> tuple:
    """(context word offsets by name, words, bytes per barrier) that the host-built GPU
    kernels of `compile_gpu_for_host` and their runner (devices/stand_ins/cuda_simt.py) share."""
    from .codegen import gpu_simt
    return dict(gpu_simt.CTX), gpu_simt.CTX_WORDS, gpu_simt.BARRIER_BYTES


def compile_gpu_for_host(module: Module, target: str) -> Program:
    """The GPU program of `module` for `target` — the same kernels, launches and scratch
    buffers — with its kernels built as host object code (codegen/gpu_simt.py), for
    devices/stand_ins/cuda_simt.py to run thread by thread without a GPU. Each kernel takes the
    thread's context after its buffers."""
    from .codegen import llvm_target, nvptx
    from .passes.pipeline import compile_plan
    plan = compile_plan(module)
    gpu = nvptx.emit_plan(plan, target, module.name, host=True)
    steps = []
    for s in gpu.launches:
        if not isinstance(s, nvptx.LaunchSpec):
            raise NotImplementedError(f"{module.name}: kernel {s.name} is a library call; "
                                      f"the host stand-in runs generated kernels only")
        steps.append(_launch_step(s))
    llmod = llvm_target.optimize(gpu.llvm_ir, module.name)
    code = llvm_target.emit_object(llmod)
    llvm_target.release(llmod)
    program = _program(plan, "simt:" + target, code, steps, frozenset())
    program.scratch = dict(gpu.scratch)
    return program


def _launch_step(spec: Any) -> LaunchStep:
    return LaunchStep(kernel=spec.name, fn=spec.name, grid=list(spec.grid),
                      block=list(spec.block), shared_bytes=int(spec.shared_bytes),
                      args=list(spec.params))


# ---- the Program ---------------------------------------------------------------------------

def _referenced(plan: ExecutionPlan, steps: list) -> set:
    from .codegen.control_steps import step_positions
    refs = set(plan.module.outputs) | set(plan.buffers.slot_of) | set(plan.module.parameters)
    for s in steps:
        refs.update(a for a in getattr(s, "args", None) or [] if isinstance(a, int))
        if isinstance(s, LibraryStep):
            refs.add(s.pos)
            refs.update(s.operands)
        elif isinstance(s, CONTROL_STEPS):
            refs.update(step_positions(s))
        elif isinstance(s, PartialStep):
            refs.update(r["pos"] for r in s.roots if r["pos"] is not None)
    return refs


def _program(plan: ExecutionPlan, target: str, code: bytes, steps: list,
             donated: frozenset) -> Program:
    from .planning.kernel_cost import kernel_info
    m, buffers = plan.module, plan.buffers
    values = {str(p): describe_value(m.instructions[p]) for p in sorted(_referenced(plan, steps))}
    return Program(
        name=m.name, target=target, code=code, steps=steps, values=values,
        params=[[p, m.instructions[p].attrs["number"]] for p in m.parameters],
        outputs=list(m.outputs),
        slots=[[p, s] for p, s in buffers.slot_of.items()],
        slot_bytes=list(buffers.slot_bytes), peak_bytes=int(buffers.peak_bytes),
        aliases=[[int(o), int(x)] for o, x in buffers.aliases.items()],
        donated=sorted(int(n) for n in donated),
        kernel_info=kernel_info(plan))


# ---- dump texts --------------------------------------------------------------------------

def _plan_texts(plan: ExecutionPlan) -> dict:
    from .hlo import graphviz
    return {"optimized_hlo": str(plan.module) + kernel_summary(plan),
            "fusion": fusion_report(plan),
            "dot": graphviz.plan_dot(plan)}


def _moves(op: str) -> bool:
    """Whether `op` only moves, repeats or holds values (an index move or a leaf): counted,
    not listed, in a kernel's summary line."""
    return PRIMITIVES[op].kind in (INDEXING, LEAF)


def kernel_summary(plan: ExecutionPlan) -> str:
    """One `//` comment line per kernel (the parser skips them): its kind, the ops fused
    into it (index moves only counted), what it reads and what it writes; then the
    temporaries' peak."""
    from .hlo.printer import instruction_name
    ins = plan.module.instructions
    lines = [f"// {len(plan.kernels)} kernel{'s' * (len(plan.kernels) != 1)}:"]
    for k in plan.kernels:
        counts: dict = {}
        for p in k.members:
            counts[ins[p].op] = counts.get(ins[p].op, 0) + 1
        ops = ", ".join(op if n == 1 else f"{op} x{n}" for op, n in counts.items()
                        if not _moves(op))
        moves = sum(n for op, n in counts.items() if _moves(op))
        names = lambda ps: ", ".join(instruction_name(plan.module, p) for p in ps) or "nothing"
        lines.append(f"//   {k.name} ({k.kind}): {ops or 'no arithmetic'}"
                     f"{f' (+{moves} index moves)' if moves else ''}; reads {names(k.inputs)};"
                     f" writes {names(k.outputs)}")
    if plan.buffers is not None:
        lines.append(f"// buffers (inputs, temporaries, outputs) at their peak: "
                     f"{plan.buffers.peak_bytes} bytes")
    return "\n".join(lines) + "\n"


def fusion_report(plan: ExecutionPlan) -> str:
    """Every kernel with its members and the reasons its inputs were not fused, then
    every fusion decision, then the peak memory of the buffer plan."""
    lines = []
    for k in plan.kernels:
        lines.append(f"kernel {k.name} ({k.kind}): members {k.members} outputs {k.outputs} "
                     f"inputs {k.inputs}")
        lines.extend(f"    {r}" for r in k.reasons)
    lines.append("")
    lines.append("decisions:")
    lines.extend(f"  {d}" for d in plan.decisions)
    lines.append(f"peak bytes: {plan.buffers.peak_bytes}")
    return "\n".join(lines) + "\n"


