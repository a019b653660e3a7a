"""Run LLVM's default optimization pipeline on a module, and free all of it afterwards.

llvmlite 0.50 never frees a pipeline by itself: `ModulePassManager._dispose` resolves to
`ffi.ObjectRef`'s, a no-op, because `ObjectRef` precedes `NewPassManager` (the class that
frees) in the manager's method resolution order. So `close()` and the collector left the
whole built -O2 pipeline behind at every compile: 41 KiB for a small kernel's module, 82
KiB for a vectorized one (RSS over 370 compiles of distinct kernels), hundreds of MB over
a few thousand distinct shapes (issue 33, item 17). Here the pipeline is freed through
llvmlite's own disposer. What llvmlite still keeps of a compile is the instrumentation
callbacks object it allocates with each pass builder and no builder owns (1.06 KiB a
builder, and 0.1 KiB of callbacks a run registers in it; RSS over 3,000 calls); sharing one
builder instead would keep every run's callbacks, pointing at freed memory.
Callers hold their LLVM lock. The pipeline runs outside llvmlite's own lock (one lock
around every call into LLVM, held for the whole run), so that two threads optimizing
modules of different LLVM contexts run at the same time (compiler/driver.py
`_optimize_program`); LLVM allows that, one thread per context.
"""
from __future__ import annotations

from typing import Any

import llvmlite.binding as llvm


def run_default_pipeline(mod: Any, tm: Any, pto: Any) -> None:
    """Optimize `mod` in place with the default pipeline for `pto`'s speed level on
    `tm`; the pipeline, its builder and `pto` are freed when this returns."""
    pb = llvm.create_pass_builder(tm, pto)
    try:
        mpm = pb.getModulePassManager()
        try:
            unlocked("LLVMPY_RunNewModulePassManager")(mpm, mod, pb)
        finally:
            free_module_pass_manager(mpm)
    finally:
        pb.close()
        pto.close()


def run_vector_code_pipeline(mod: Any, tm: Any) -> None:
    """The IR passes of a function written with explicit vectors (llvm_target's
    `mark_vector_code`): its loops rotated (the form the code generator's loop strength
    reduction and LICM expect) and a convolution window's short row loop unrolled, as
    -O2 unrolls it; the rest of -O2 made such code no faster (llvm_target.py's figures)
    and took 40% of its LLVM time."""
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_loop_rotate_pass()
    mpm.add_loop_unroll_pass()
    pto = llvm.create_pipeline_tuning_options()
    pb = llvm.create_pass_builder(tm, pto)
    try:
        unlocked("LLVMPY_RunNewModulePassManager")(mpm, mod, pb)
    finally:
        free_module_pass_manager(mpm)
        pb.close()
        pto.close()


def run_passes(mod: Any, mpm: Any, tm: Any) -> None:
    """Run a module pass manager built pass by pass; it is freed when this returns."""
    pto = llvm.create_pipeline_tuning_options()
    pb = llvm.create_pass_builder(tm, pto)
    try:
        mpm.run(mod, pb)
    finally:
        free_module_pass_manager(mpm)
        pb.close()
        pto.close()


def free_module_pass_manager(mpm: Any) -> None:
    """Free a module pass manager now. Where the class's own clean-up is the no-op it
    inherits (llvmlite 0.50), through llvmlite's disposer; where a later llvmlite frees it
    itself, through that (freeing it twice would corrupt the heap)."""
    if mpm.closed:
        return
    if _frees_nothing(type(mpm)):
        llvm.ffi.lib.LLVMPY_DisposeNewModulePassManger(mpm)
        mpm.detach()
    else:
        mpm.close()


def unlocked(name: str) -> Any:
    """llvmlite's C function `name` without llvmlite's lock around it (its wrapper's
    ctypes function, which releases the GIL), where the wrapper has one."""
    fn = getattr(llvm.ffi.lib, name)
    return getattr(fn, "_cfn", fn)


def _frees_nothing(cls: type) -> bool:
    return cls._dispose is llvm.ffi.ObjectRef._dispose
