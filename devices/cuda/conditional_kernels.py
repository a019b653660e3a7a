"""The tiny kernels that end a loop's condition (or a branch index's computation) inside a
CUDA graph: each reads the value our generated code left in device memory and sets the
conditional handle(s) of the graph's conditional node(s) with `cudaGraphSetConditional`.

`cudaGraphSetConditional(handle: u64, value: u32)` is a device function of the CUDA
runtime (cuda_device_runtime_api.h, a `__cudart_builtin__`). nvcc (12.4 to 13.0) compiles
a call to it, with or without relocatable device code, to an `.extern .func` declaration
and a plain `call.uni` in the PTX, and leaves the symbol undefined in the cubin that
ptxas or nvlink makes (nvlink with libcudadevrt.a defines it no more than without): the
driver resolves it when it loads the module. So our kernels declare it as an external
function in LLVM IR, which the NVPTX backend emits as that same declaration, and the PTX
is loaded as it is, with no cudadevrt link (docs/cuda_loops.md says what a GPU must still
confirm).

The handles live in a device table, so that every kernel argument is a device pointer
(as for the compiler's kernels): table = [count, handle 0, handle 1, ...] as u64 words.

- `lzg_set_while(table, pred)`: handle 0 = (pred byte != 0);
- `lzg_set_branch(table, index)`: k = clamp(*(s32 *)index, 0, count - 1) as HLO clamps a
  conditional's index; handle j = (j == k) for each j (one IF node per branch).

The same IR is built for the host (`host=True`) so that the stand-in driver runs this
code itself, its `cudaGraphSetConditional` resolved to the stand-in's
(devices/stand_ins/cuda_conditional_host.py).
"""
from __future__ import annotations

import functools

import llvmlite.ir as ir

from ...compiler.codegen.loops import counted_loop

I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
SET_CONDITIONAL = "cudaGraphSetConditional"
SET_WHILE = "lzg_set_while"
SET_BRANCH = "lzg_set_branch"
ENTRIES = (SET_WHILE, SET_BRANCH)        # each takes two pointers: (table, value)


def module(host: bool = False) -> ir.Module:
    """The two kernels; `host`: built for the host CPU (plain C functions)."""
    mod = ir.Module(name="lazyarray_conditional")
    setter = ir.Function(mod, ir.FunctionType(ir.VoidType(), [I64, I32]), SET_CONDITIONAL)
    _set_while(mod, setter, host)
    _set_branch(mod, setter, host)
    return mod


def _entry(mod: ir.Module, name: str, host: bool) -> tuple:
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [PTR, PTR]), name)
    if not host:
        fn.calling_convention = "ptx_kernel"
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def _handle(b: ir.IRBuilder, table: ir.Value, k: ir.Value) -> ir.Value:
    """Handle k of the table (word 1 + k)."""
    return b.load(b.gep(table, [b.add(k, ir.Constant(I64, 1))], source_etype=I64), typ=I64)


def _set_while(mod: ir.Module, setter: ir.Function, host: bool) -> None:
    fn, b = _entry(mod, SET_WHILE, host)
    table, pred = fn.args
    holds = b.icmp_unsigned("!=", b.load(pred, typ=I8), ir.Constant(I8, 0))
    b.call(setter, [_handle(b, table, ir.Constant(I64, 0)), b.zext(holds, I32)])
    b.ret_void()


def _set_branch(mod: ir.Module, setter: ir.Function, host: bool) -> None:
    fn, b = _entry(mod, SET_BRANCH, host)
    table, index = fn.args
    count = b.load(table, typ=I64)
    k = b.sext(b.load(index, typ=I32), I64)
    last = b.sub(count, ir.Constant(I64, 1))
    k = b.select(b.icmp_signed("<", k, ir.Constant(I64, 0)), ir.Constant(I64, 0), k)
    k = b.select(b.icmp_signed(">", k, last), last, k)

    def body(j: ir.Value, carried: list) -> list:
        b.call(setter, [_handle(b, table, j), b.zext(b.icmp_signed("==", j, k), I32)])
        return []
    counted_loop(b, ir.Constant(I64, 0), count, [], body, name="branch", interleave=False)
    b.ret_void()


@functools.lru_cache(maxsize=None)
def ptx(arch: str) -> str:
    """The kernels' PTX for `arch` (what a GPU loads; the driver resolves the setter)."""
    from ...compiler.driver import runtime_ptx
    return runtime_ptx(module(), arch)
