"""The host CPU as an LLVM target: optimize a module, emit object code.

One target machine per process, for the host's CPU name and features (which also key the
disk cache). Object code is what the disk cache stores; the CPU device loads it
(devices/cpu/object_code.py).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
from typing import Any, Iterator

import llvmlite.binding as llvm

from .interrupts import InterruptsDeferred, Section
from .pass_pipeline import run_default_pipeline, run_vector_code_pipeline, unlocked

OPT_LEVEL = 2          # -O2: vectorizes loops; -O3 costs compile time for little here

# The optimization a kernel gets follows its size (elements of work), since compiling
# costs the same for a kernel of 100 elements as for one of 10 million: below
# OPTIMIZE_ELEMENTS a kernel is not optimized at all (`optnone`: no IR passes, LLVM's fast
# instruction selection and register allocation); below VECTORIZE_ELEMENTS it is optimized
# but its loops are not vectorized (the loop vectorizer is half of -O2's compile time
# here); above, the whole -O2 pipeline. A small model's first call was seconds of -O2.
OPTIMIZE_ELEMENTS = 1 << 12
VECTORIZE_ELEMENTS = 1 << 15


def opt_tier(elements: int) -> int:
    """0: not optimized; 1: optimized, scalar loops; 2: optimized and vectorized."""
    if elements < OPTIMIZE_ELEMENTS:
        return 0
    return 1 if elements < VECTORIZE_ELEMENTS else 2


# A function written with explicit vectors and its address arithmetic folded already (an
# OPAQUE stanza's `Loop.vector_code`: a convolution's register blocks) gets a short
# pipeline of IR passes (pass_pipeline.run_vector_code_pipeline) instead of -O2's, then
# the code generator at full optimization. Measured on the 24 convolution functions of
# bench/bench_models.py's ResNet (thread CPU time, parse to object code): 502 ms at
# -O2, 299 with the short pipeline, 255 with no IR pass at all; its step's convolution
# kernels took as long as at -O2 with the short pipeline (one worker thread, sum of
# per-kernel minima over three alternating runs each: 23.66 ms -O2, 23.64), 1-3% longer
# without any IR pass (the window's row loop left rolled: the smallest convolutions
# 15-40% slower). The mark lives on llvmlite's function object, which the module is cut
# from (module_split.py puts such functions in pieces of their own).
_VECTOR_CODE = "lazyarray_vector_code"


def mark_vector_code(fn: Any) -> None:
    """Mark an llvmlite `ir.Function` as explicit vector code (see above)."""
    setattr(fn, _VECTOR_CODE, True)


def is_vector_code(fn: Any) -> bool:
    """Whether the llvmlite `ir.Function` `fn` gets the vector code pipeline."""
    return getattr(fn, _VECTOR_CODE, False)


# LLVM contexts and MCJIT are not thread-safe, and llvmlite's clean-up must not be split by
# an interrupt (compiler/codegen/interrupts.py): every use of LLVM holds this section
_LOCK = Section()


@functools.lru_cache(maxsize=None)
def _initialized() -> bool:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return True


@functools.lru_cache(maxsize=None)
def host() -> tuple:
    """(triple, cpu name, features): the target the code is built for."""
    _initialized()
    with InterruptsDeferred():        # llvmlite's strings (compiler/codegen/interrupts.py)
        return llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def has_feature(name: str) -> bool:
    """Whether the host CPU has an instruction-set feature ("avx512f", ...)."""
    return f"+{name}" in host()[2].split(",")


def llvm_version() -> str:
    return ".".join(map(str, llvm.llvm_version_info))


@functools.lru_cache(maxsize=None)
def target_machine() -> Any:
    """The compiler's target machine (used under the lock)."""
    return _new_target_machine()


def _new_target_machine() -> Any:
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=OPT_LEVEL,
                                        reloc="pic", codemodel="jitdefault")


def parse(ir_text: str, name: str) -> Any:
    """Parse and verify LLVM IR text for the host target; no optimization (straight-line
    code such as the pool's trampolines gains nothing from the IR passes, which cost
    milliseconds per function)."""
    tm = target_machine()
    with _LOCK:
        mod = llvm.parse_assembly(ir_text)
        mod.name = name
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    return mod


def optimize(ir_text: str, name: str, slp: bool = True) -> Any:
    """Parse and optimize LLVM IR text; return the optimized llvmlite module. `slp`:
    whether the SLP vectorizer runs (code written with vectors gains nothing from it)."""
    mod = parse(ir_text, name)
    with _LOCK:
        _run_pipeline(mod, target_machine(), slp)
    return mod


def emit_apart(ir_text: str, name: str) -> bytes:
    """`parse` and object code, with no IR passes, in an LLVM context and with a target
    machine of its own, without the lock (see `optimize_apart`)."""
    return optimize_apart(ir_text, name, emit=True, passes=False)


def optimize_apart(ir_text: str, name: str, emit: bool = False, slp: bool = True,
                   passes: bool = True, stages: Any = None, vector_code: bool = False
                   ) -> bytes:
    """`optimize` in an LLVM context and with a target machine of its own (0.2 ms to
    make), without the lock: nothing shared is touched, so another thread may optimize
    meanwhile. Returns the optimized module's bitcode, for `link_bitcode`, or with
    `emit` its object code. `slp` as for `optimize`; `passes=False`: no IR passes;
    `vector_code`: the vector code pipeline (`mark_vector_code`), not -O2's.
    `stages(name)`, when given, is a context manager around each stage ("llvm_optimize",
    "emit_object": a profile's spans)."""
    stages = stages or _no_stage
    context = llvm.create_context()
    try:
        tm = _new_target_machine()
        with stages("llvm_optimize"):
            mod = llvm.parse_assembly(ir_text, context=context)
        try:
            mod.name = name
            mod.triple = tm.triple
            mod.data_layout = str(tm.target_data)
            with stages("llvm_optimize"):
                mod.verify()
                if vector_code:
                    run_vector_code_pipeline(mod, tm)
                elif passes:
                    _run_pipeline(mod, tm, slp)
            if not emit:
                return mod.as_bitcode()
            with stages("emit_object"):
                return _emit_unlocked(tm, mod)
        finally:
            mod.close()
    finally:
        context.close()


@contextlib.contextmanager
def _no_stage(name: str) -> Iterator[None]:
    yield


def link_bitcode(mod: Any, bitcode: bytes) -> None:
    """Link the module `bitcode` holds (from `optimize_apart`) into `mod`."""
    with _LOCK:
        other = llvm.parse_bitcode(bitcode)
        mod.link_in(other)      # `other` is destroyed by the link


def _run_pipeline(mod: Any, tm: Any, slp: bool) -> None:
    """The IR passes on `mod` (unless all its functions are `optnone`)."""
    if not _all_optnone(mod):
        pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        pto.loop_vectorization = True
        pto.slp_vectorization = slp
        # unrolling and interleaving double the code (and the compile time) of loops that
        # are bound by memory bandwidth anyway; vectorization is what matters
        pto.loop_unrolling = False
        pto.loop_interleaving = False
        # a pipeline per module (one runs once: a second run aborts), freed after it
        # (pass_pipeline.py: llvmlite 0.50 would keep 41-82 KiB of each for good)
        run_default_pipeline(mod, tm, pto)


def _all_optnone(mod: Any) -> bool:
    """Whether every function `mod` defines is `optnone` (opt_tier 0: a small shape's
    kernels). The IR passes then change nothing of its object code (byte-identical for
    414 of 414 such modules, elementwise, reductions, scans, gathers), so they are not
    run: ~0.5 ms of a small kernel's compile, and the ~1.1 KiB llvmlite keeps of each
    pass builder (pass_pipeline.py), saved."""
    defined = [f for f in mod.functions if not f.is_declaration]
    return bool(defined) and all(b"optnone" in b" ".join(f.attributes).split() for f in defined)


def release(mod: Any) -> None:
    """Free an LLVM module now, inside the section, rather than whenever the collector
    reaches it: perhaps while another thread compiles, or with a Ctrl-C swallowed by its
    `__del__`."""
    with _LOCK:
        mod.close()


def emit_object(mod: Any) -> bytes:
    with _LOCK:
        return _emit_unlocked(target_machine(), mod)


def _emit_unlocked(tm: Any, mod: Any) -> bytes:
    """`tm.emit_object(mod)` with the code generation outside llvmlite's own lock
    (pass_pipeline.py `unlocked`), so that a thread emitting a module of another LLVM
    context runs meanwhile."""
    with llvm.ffi.OutputString() as err:
        buf = unlocked("LLVMPY_TargetMachineEmitToMemory")(tm, mod, 1, err)
        if not buf:
            raise RuntimeError(str(err))
    try:
        return ctypes.string_at(llvm.ffi.lib.LLVMPY_GetBufferStart(buf),
                                llvm.ffi.lib.LLVMPY_GetBufferSize(buf))
    finally:
        llvm.ffi.lib.LLVMPY_DisposeMemoryBuffer(buf)


@functools.lru_cache(maxsize=None)
def library_target_machine() -> Any:
    """A target machine for object code linked into a shared library (ahead-of-time
    compilation): position-independent, small code model (the JIT's is large)."""
    triple, cpu, features = host()
    target = llvm.Target.from_triple(triple)
    return target.create_target_machine(cpu=cpu, features=features, opt=OPT_LEVEL,
                                        reloc="pic", codemodel="default")


def emit_library_object(mod: Any) -> bytes:
    with _LOCK:
        return library_target_machine().emit_object(mod)


def emit_assembly(mod: Any) -> str:
    with _LOCK:
        return target_machine().emit_assembly(mod)
