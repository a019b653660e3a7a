"""The NVPTX target: GPU kernels around the elemental emitter, compiled to PTX.

The target is `nvptx64-nvidia-cuda` for the device's `sm_XX`, with a PTX ISA version the
CUDA driver of that generation accepts (`PTX_VERSION`). Kernels take only buffer pointers;
shapes are static, so every size is a constant in the code. Grids are sized for the GPU
(gpu_target.py): a grid-stride kernel gets at most one wave of resident blocks
(multiprocessors x blocks per multiprocessor).

Kernel shapes (the block and grid of each are in its `LaunchSpec`), chosen from the
reduction's shape:

- loop: one thread per element of the iteration space, grid-stride loop; a thread
  computes every output of the fusion at its index (multi-output fusions cost nothing
  extra).
- row reduction and ROW kernels (softmax, layer norm: the reduced axes are the innermost
  ones, rows of length K): a *team* per row, a warp when K <= WARP_ROW_MAX, else a whole
  block. Each thread folds a strided part of the row, the team combines by butterfly
  warp shuffles (and, for a block, the warps' results through shared memory in a fixed
  order), so every thread of the team holds the row's result. Rows whose length is a
  multiple of 4 are read with 128-bit vector loads (gpu_vector.py).
- column reduction (the reduced axes are the outermost ones): a block of 32x8 threads
  per 32 adjacent columns; each thread folds every 8th row, the 8 partial results are
  combined in shared memory in a fixed order.
- full reduction (all axes): one kernel, one pass over the input. Each block folds a
  grid-stride share (vector loads where the shape allows), reduces it across the block
  and writes one partial; the last block to finish (a ticket from an atomic counter, a
  module global that the last block resets) folds the partials in block order and
  writes the result. The counter only elects that block: no value is combined by an
  atomic, so the result does not depend on which block finishes last (deterministic),
  which a float `atomicAdd` of the partials would not be.
- any other reduction (interleaved axes): a warp per output element, as for rows.

Every combination order is fixed by the launch shape, so results are deterministic. LLVM
is never handed an intrinsic it cannot lower: math goes through `gpu_math`, and
`gpu_math.check_intrinsics` is the last check before LLVM parses the IR.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import llvmlite.binding as llvm
import llvmlite.ir as ir

from .interrupts import Section
from .pass_pipeline import run_default_pipeline, run_passes
from . import gpu_math, gpu_simt, gpu_vector
from .gpu_archs import PTX_VERSION, arch_of  # noqa: F401  (arch_of: re-exported)
from .gpu_target import GpuTarget, parse_target
from .gpu_vector import VEC
from ..primitives.reduction import reducer_of
from . import index_rules
from .index_rules import same_element
from ..planning.buffer_assignment import updated_in_place
from .loops import counted_loop
from ..hlo.shapes import num_elements

TRIPLE = "nvptx64-nvidia-cuda"
DATA_LAYOUT = "e-p6:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
DEFAULT_ARCH = "sm_80"
OPT_LEVEL = 3


WARP = 32
BLOCK = 256                 # threads per block of loop and row-reduction kernels
MAX_BLOCKS = 65535 * 8      # grid cap; grid-stride loops cover the rest
WARP_ROW_MAX = 1024         # rows up to this long: a warp per row; longer: a block per row

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F32 = ir.FloatType()
F64 = ir.DoubleType()
GLOBAL = 1                  # NVPTX address space of global memory
SHARED = 3                  # NVPTX address space of shared memory

# LLVM is not thread-safe, nor llvmlite's clean-up interrupt-safe (compiler/codegen/interrupts.py);
# the CPU target keeps its own section
_LOCK = Section()


@dataclass
class LaunchSpec:
    """One kernel launch: entry name, grid and block (x, y, z), dynamic shared bytes, and
    the buffers its parameters receive, as keys of the executable's buffer table."""
    name: str
    grid: tuple
    block: tuple
    params: list
    shared_bytes: int = 0


@dataclass
class GpuProgram:
    """What the NVPTX target returns for a plan: one PTX module, launches in order, and
    scratch buffers (key -> bytes) the device allocates for the run."""
    ptx: str
    arch: str
    launches: list
    scratch: dict = field(default_factory=dict)
    llvm_ir: str = ""


# ---- the LLVM target -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _initialized() -> bool:
    # all targets: NVPTX alongside the host; initializing more targets leaves the CPU JIT
    # (which asks for the native target by triple) exactly as it was
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return True


@functools.lru_cache(maxsize=None)
def target_machine(arch: str = DEFAULT_ARCH) -> Any:
    if arch not in PTX_VERSION:
        raise ValueError(f"nvptx: unsupported architecture {arch!r}; known: "
                         f"{', '.join(PTX_VERSION)}")
    _initialized()
    target = llvm.Target.from_triple(TRIPLE)
    return target.create_target_machine(cpu=arch, features=f"+ptx{PTX_VERSION[arch]}",
                                        opt=OPT_LEVEL)


def new_module(name: str, host: bool = False) -> ir.Module:
    """A module for kernels; `host`: the same kernels built for the host CPU, to be run
    by the SIMT stand-in (gpu_simt.py)."""
    mod = ir.Module(name=name)
    if host:
        return gpu_simt.mark_host(mod)
    mod.triple = TRIPLE
    mod.data_layout = DATA_LAYOUT
    return mod


def new_kernel(mod: ir.Module, name: str, nparams: int) -> tuple:
    """A kernel entry taking `nparams` global pointers; returns (function, builder). On
    the host (gpu_simt.py) it takes the thread's context after them."""
    host = gpu_simt.is_host(mod)
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * (nparams + host)),
                     name)
    if not host:
        fn.calling_convention = "ptx_kernel"
    for arg in fn.args:
        arg.add_attribute("noundef")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    return fn, b


def to_ptx(mod: ir.Module, arch: str = DEFAULT_ARCH) -> tuple:
    """Check, link libdevice if needed, optimize and emit PTX. Returns (ptx, llvm ir)."""
    gpu_math.check_intrinsics(mod, mod.name)
    text = str(mod)
    tm = target_machine(arch)
    with _LOCK:
        llmod = llvm.parse_assembly(text)
        llmod.verify()
        kernels = {f.name for f in llmod.functions if not f.is_declaration}
        if any(f.name.startswith("__nv_") and f.is_declaration for f in llmod.functions):
            _link_libdevice(llmod, kernels)
        llmod.triple = TRIPLE
        llmod.data_layout = str(tm.target_data)
        pto = llvm.create_pipeline_tuning_options(speed_level=OPT_LEVEL)
        run_default_pipeline(llmod, tm, pto)      # and frees it (pass_pipeline.py)
        return tm.emit_assembly(llmod), str(llmod)


@functools.lru_cache(maxsize=1)
def _libdevice_bytes() -> bytes:
    path = gpu_math.libdevice_path()
    if path is None:
        raise NotImplementedError("libdevice.10.bc not found: GPU math functions are unavailable")
    with open(path, "rb") as f:
        return f.read()


# The libdevice functions some module of this process needed, with what they call, as
# bitcode: (names, bytes). Parsing all of libdevice (~500 functions) for every compile took
# 87 ms of a first GPU compile; this subset parses in a fraction of that, and libdevice
# itself is parsed again only when a module needs a function not in it yet.
_SUBSET: list = [frozenset(), b""]


def _libdevice_subset(needed: set) -> Any:
    """A parsed module holding at least the libdevice functions `needed` (and their
    callees); the others are gone."""
    names, code = _SUBSET
    if not needed <= names:
        names = frozenset(names | needed)
        lib = llvm.parse_bitcode(_libdevice_bytes())
        for f in lib.functions:
            if not f.is_declaration and f.name not in names:
                f.linkage = "internal"
        for g in lib.global_variables:
            if not g.is_declaration:
                g.linkage = "internal"
        mpm = llvm.create_new_module_pass_manager()
        mpm.add_global_dead_code_eliminate_pass()
        run_passes(lib, mpm, target_machine(DEFAULT_ARCH))
        code = lib.as_bitcode()
        _SUBSET[:] = [names, code]
    return llvm.parse_bitcode(code)


def _link_libdevice(llmod: Any, keep: set) -> None:
    """Link the libdevice functions the kernels call and make all of it internal, so that
    only what the kernels use survives optimization."""
    needed = {f.name for f in llmod.functions if f.name.startswith("__nv_") and f.is_declaration}
    lib = _libdevice_subset(needed)
    lib.triple = TRIPLE
    llmod.link_in(lib)
    for f in llmod.functions:
        if f.name not in keep and not f.is_declaration:
            f.linkage = "internal"
    for g in llmod.global_variables:
        if not g.is_declaration:
            g.linkage = "internal"


# ---- GPU building blocks ---------------------------------------------------------------

def _intrinsic(b: ir.IRBuilder, name: str, ret: ir.Type, args: list) -> ir.Value:
    mod = b.module
    fn = mod.globals.get(name)
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(ret, [a.type for a in args]), name)
    return b.call(fn, args)


def sreg(b: ir.IRBuilder, reg: str) -> ir.Value:
    """A special register (tid.x, ctaid.x, ntid.x, nctaid.x...) as an i64."""
    if gpu_simt.is_host(b.module):
        return gpu_simt.sreg(b, reg)
    v = _intrinsic(b, f"llvm.nvvm.read.ptx.sreg.{reg}", I32, [])
    return b.zext(v, I64)


def barrier(b: ir.IRBuilder) -> None:
    if gpu_simt.is_host(b.module):
        return gpu_simt.barrier(b)
    _intrinsic(b, "llvm.nvvm.barrier0", ir.VoidType(), [])


def shuffle_xor(b: ir.IRBuilder, value: ir.Value, lane_mask: int) -> ir.Value:
    """The value of the lane `lane ^ lane_mask` of the warp (all 32 lanes take part)."""
    ty = value.type
    if ty == F32:
        return _shfl(b, value, lane_mask, "f32")
    if ty == I32:
        return _shfl(b, value, lane_mask, "i32")
    if isinstance(ty, ir.IntType) and ty.width < 32:
        wide = _shfl(b, b.zext(value, I32), lane_mask, "i32")
        return b.trunc(wide, ty)
    if ty in (I64, F64):
        bits = b.bitcast(value, I64) if ty == F64 else value
        lo = _shfl(b, b.trunc(bits, I32), lane_mask, "i32")
        hi = _shfl(b, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), lane_mask, "i32")
        joined = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
        return b.bitcast(joined, F64) if ty == F64 else joined
    if isinstance(ty, ir.LiteralStructType):      # complex: each part on its own
        out = ir.Constant(ty, ir.Undefined)
        for k in range(len(ty.elements)):
            out = b.insert_value(out, shuffle_xor(b, b.extract_value(value, k), lane_mask), k)
        return out
    raise NotImplementedError(f"nvptx: warp shuffle of {ty} values")


def _shfl(b: ir.IRBuilder, value: ir.Value, lane_mask: int, suffix: str) -> ir.Value:
    if gpu_simt.is_host(b.module):
        bits = value if suffix == "i32" else b.bitcast(value, I32)
        got = gpu_simt.shuffle_xor_i32(b, bits, lane_mask)
        return got if suffix == "i32" else b.bitcast(got, value.type)
    args = [ir.Constant(I32, -1), value, ir.Constant(I32, lane_mask), ir.Constant(I32, WARP - 1)]
    return _intrinsic(b, f"llvm.nvvm.shfl.sync.bfly.{suffix}", value.type, args)


def shared_array(mod: ir.Module, name: str, ty: ir.Type, count: int) -> ir.GlobalVariable:
    arr = ir.ArrayType(_shared_type(ty), count)
    g = ir.GlobalVariable(mod, arr, name, addrspace=0 if gpu_simt.is_host(mod) else SHARED)
    g.linkage = "internal"
    g.initializer = ir.Constant(arr, ir.Undefined)
    g.align = 8
    return g


def _shared_type(ty: ir.Type) -> ir.Type:
    return I8 if ty == I1 else ty


def shared_store(b: ir.IRBuilder, arr: ir.GlobalVariable, i: ir.Value, v: ir.Value) -> None:
    ptr = b.gep(arr, [ir.Constant(I32, 0), i])
    b.store(b.zext(v, I8) if v.type == I1 else v, ptr)


def shared_load(b: ir.IRBuilder, arr: ir.GlobalVariable, i: ir.Value, ty: ir.Type) -> ir.Value:
    ptr = b.gep(arr, [ir.Constant(I32, 0), i])
    v = b.load(ptr)
    return b.trunc(v, I1) if ty == I1 else v


def strided_loop(b: ir.IRBuilder, start: ir.Value, end: ir.Value, step: ir.Value,
                 carried: list, body: Callable[[ir.Value, list], list], name: str = "i") -> list:
    """for (i = start; i < end; i += step) carried = body(i, carried); returns carried."""
    return counted_loop(b, start, end, carried, body, name, step=step, interleave=False)


def if_then(b: ir.IRBuilder, cond: ir.Value, then: Callable[[], None]) -> None:
    with b.if_then(cond):
        then()


def delinearize(b: ir.IRBuilder, flat: ir.Value, shape: tuple) -> list:
    """Row-major multi-index of a flat i64 index into a static shape."""
    index = []
    rest = flat
    for n in reversed(shape):
        if n == 1:
            index.append(ir.Constant(I64, 0))
            continue
        index.append(b.urem(rest, ir.Constant(I64, n)))
        rest = b.udiv(rest, ir.Constant(I64, n))
    return index[::-1]


def c64(n: int) -> ir.Constant:
    return ir.Constant(I64, int(n))


def grid_for(n: int, per_block: int = BLOCK, gpu: GpuTarget = None,
             threads: int = 0) -> int:
    """Blocks for `n` work items, `per_block` to a block of `threads` (default:
    per_block) threads: no more than one wave of resident blocks of `gpu` (grid-stride
    loops cover the rest)."""
    cap = gpu.resident_blocks(threads or per_block) if gpu is not None else MAX_BLOCKS
    return max(1, min(-(-n // per_block), cap, MAX_BLOCKS))


# ---- kernel shapes ---------------------------------------------------------------------

@dataclass
class Reduction:
    """What a reduction kernel computes, as callbacks into the elemental emitter.

    accumulators are flat lists of LLVM values (a sum: one; argmax: value and index).
    - init(b) -> accs: the identity
    - fold(b, args, index, accs) -> accs: take the element at `index` of the reduced
      operand shape S (and write any side outputs at that index)
    - combine(b, accs, accs) -> accs: merge two partial results (associative; the order
      of combination is fixed by the kernel)
    - finish(b, args, out_index, accs): write the results and the epilogue at `out_index`
      of the result shape R
    - fold_vector: see below
    """
    shape: tuple                 # S
    axes: tuple                  # A, increasing
    init: Callable
    fold: Callable
    combine: Callable
    finish: Callable
    # fold_vector(b, args, flat, indices, accs) -> accs: fold the VEC elements at
    # `indices` (flat positions flat.. in S), reading inputs with vector loads; None
    # where the kernel has no vector path
    fold_vector: Callable = None

    @property
    def out_shape(self) -> tuple:
        return tuple(n for i, n in enumerate(self.shape) if i not in self.axes)

    @property
    def reduced_shape(self) -> tuple:
        return tuple(self.shape[a] for a in self.axes)

    def full_index(self, b: ir.IRBuilder, out_flat: ir.Value, red_flat: ir.Value) -> tuple:
        """(index into S, index into R) from flat positions in R and in the reduced axes."""
        r_idx = delinearize(b, out_flat, self.out_shape)
        a_idx = delinearize(b, red_flat, self.reduced_shape)
        full, ri, ai = [], iter(r_idx), iter(a_idx)
        for d in range(len(self.shape)):
            full.append(next(ai) if d in self.axes else next(ri))
        return full, r_idx


def emit_loop(mod: ir.Module, name: str, shape: tuple, nparams: int,
              body: Callable[[ir.IRBuilder, list, list], None],
              gpu: GpuTarget = None) -> LaunchSpec:
    """One thread per element of `shape` (grid-stride): body(b, args, index) computes and
    stores every output of the fusion at `index`."""
    fn, b = new_kernel(mod, name, nparams)
    n = num_elements(shape)
    tid = b.add(b.mul(sreg(b, "ctaid.x"), sreg(b, "ntid.x")), sreg(b, "tid.x"))
    stride = b.mul(sreg(b, "nctaid.x"), sreg(b, "ntid.x"))

    def step(i: ir.Value, carried: list) -> list:
        body(b, list(fn.args), delinearize(b, i, shape))
        return carried

    strided_loop(b, tid, c64(n), stride, [], step)
    b.ret_void()
    return LaunchSpec(name, (grid_for(n, BLOCK, gpu), 1, 1), (BLOCK, 1, 1), [])


def emit_vector_loop(mod: ir.Module, name: str, shape: tuple, nparams: int,
                     body: Callable[[ir.IRBuilder, list, ir.Value, list], None],
                     gpu: GpuTarget = None) -> LaunchSpec:
    """One thread per VEC consecutive elements of `shape` (its last axis a multiple of
    VEC; grid-stride): body(b, args, flat, indices) computes and stores every output at
    the VEC indices from flat position `flat`, reading and writing with vector accesses
    where it can (gpu_vector.py)."""
    fn, b = new_kernel(mod, name, nparams)
    groups = num_elements(shape) // VEC
    tid = b.add(b.mul(sreg(b, "ctaid.x"), sreg(b, "ntid.x")), sreg(b, "tid.x"))
    stride = b.mul(sreg(b, "nctaid.x"), sreg(b, "ntid.x"))

    def step(g: ir.Value, carried: list) -> list:
        flat = b.mul(g, c64(VEC))
        body(b, list(fn.args), flat, gpu_vector.split_index(b, delinearize(b, flat, shape)))
        return carried

    strided_loop(b, tid, c64(groups), stride, [], step, "g")
    b.ret_void()
    return LaunchSpec(name, (grid_for(groups, BLOCK, gpu), 1, 1), (BLOCK, 1, 1), [])


def emit_ordered_loop(mod: ir.Module, name: str, shape: tuple, ordered: tuple, nparams: int,
                      body: Callable[[ir.IRBuilder, list, list], None],
                      gpu: GpuTarget = None) -> LaunchSpec:
    """One thread per index of the axes of `shape` not in `ordered` (grid-stride); each
    thread runs the `ordered` axes in row-major order: body(b, args, index)."""
    fn, b = new_kernel(mod, name, nparams)
    free = [d for d in range(len(shape)) if d not in ordered]
    n = num_elements(tuple(shape[d] for d in free))
    tid = b.add(b.mul(sreg(b, "ctaid.x"), sreg(b, "ntid.x")), sreg(b, "tid.x"))
    stride = b.mul(sreg(b, "nctaid.x"), sreg(b, "ntid.x"))

    def thread(i: ir.Value, carried: list) -> list:
        index: list = [None] * len(shape)
        for d, v in zip(free, delinearize(b, i, tuple(shape[d] for d in free))):
            index[d] = v

        def level(k: int) -> None:
            if k == len(ordered):
                body(b, list(fn.args), list(index))
                return

            def step(j: ir.Value, cs: list) -> list:
                index[ordered[k]] = j
                level(k + 1)
                return cs
            strided_loop(b, c64(0), c64(shape[ordered[k]]), c64(1), [], step, f"o{k}")
        level(0)
        return carried

    strided_loop(b, tid, c64(n), stride, [], thread)
    b.ret_void()
    block = BLOCK if n >= BLOCK else max(1, n)
    return LaunchSpec(name, (grid_for(n, block, gpu), 1, 1), (block, 1, 1), [])


def _warp_reduce(b: ir.IRBuilder, red: Reduction, accs: list) -> list:
    """Butterfly over the warp: afterwards every lane holds the warp's combined value."""
    return _butterfly(b, lambda x, y: red.combine(b, x, y), accs)


def _butterfly(b: ir.IRBuilder, combine: Callable[[list, list], list], accs: list) -> list:
    for mask in (16, 8, 4, 2, 1):
        accs = combine(accs, [shuffle_xor(b, a, mask) for a in accs])
    return accs


@dataclass
class Team:
    """The threads that share one row: a warp (`size` 32) or a whole block. `rank` is a
    thread's place in the team, `row` the team's first row and `rows_step` the stride to
    its next (grid-stride over rows)."""
    size: int
    rank: ir.Value
    row: ir.Value
    rows_step: ir.Value
    name: str

    def allreduce(self, mod: ir.Module, b: ir.IRBuilder, combine: Callable[[list, list], list],
                  accs: list, tag: str) -> list:
        """Every thread's partial values combined over the team, valid in every thread
        of it. A block: the warps' butterflies, then each thread folds the warps' results
        from shared memory in warp order (the same order in every thread: deterministic),
        and a barrier before the shared slots can be written again."""
        accs = _butterfly(b, combine, accs)
        if self.size == WARP:
            return accs
        nwarps = self.size // WARP
        lane, warp = b.urem(self.rank, c64(WARP)), b.udiv(self.rank, c64(WARP))
        arrays = [shared_array(mod, f"{self.name}.{tag}{j}", a.type, nwarps)
                  for j, a in enumerate(accs)]
        with b.if_then(b.icmp_unsigned("==", lane, c64(0))):
            for arr, a in zip(arrays, accs):
                shared_store(b, arr, b.trunc(warp, I32), a)
        barrier(b)
        total = [shared_load(b, arr, ir.Constant(I32, 0), a.type) for arr, a in zip(arrays, accs)]
        for w in range(1, nwarps):
            total = combine(total, [shared_load(b, arr, ir.Constant(I32, w), a.type)
                                    for arr, a in zip(arrays, accs)])
        barrier(b)
        return total


def row_team(b: ir.IRBuilder, row_length: int, rows: int, name: str,
             gpu: GpuTarget = None) -> tuple:
    """The team for rows of `row_length` elements, and its launch grid: a warp per row
    for rows up to WARP_ROW_MAX long (8 rows per block of 256), else a block per row."""
    tid = sreg(b, "tid.x")
    if row_length <= WARP_ROW_MAX:
        per_block = BLOCK // WARP
        team = Team(WARP, b.urem(tid, c64(WARP)),
                    b.add(b.mul(sreg(b, "ctaid.x"), c64(per_block)), b.udiv(tid, c64(WARP))),
                    b.mul(sreg(b, "nctaid.x"), c64(per_block)), name)
        return team, grid_for(rows, per_block, gpu, BLOCK)
    team = Team(BLOCK, tid, sreg(b, "ctaid.x"), sreg(b, "nctaid.x"), name)
    return team, grid_for(rows, 1, gpu, BLOCK)


def emit_warp_reduction(mod: ir.Module, name: str, red: Reduction, nparams: int,
                        gpu: GpuTarget = None) -> LaunchSpec:
    """A team per output element (rows, or any interleaving of kept and reduced axes):
    a warp, or a block when the reduced length is over WARP_ROW_MAX."""
    fn, b = new_kernel(mod, name, nparams)
    args = list(fn.args)
    rows, length = num_elements(red.out_shape), num_elements(red.reduced_shape)
    team, grid = row_team(b, length, rows, name, gpu)
    # every thread of a team runs the same number of row iterations: shuffles and
    # barriers stay uniform

    def row(r: ir.Value, carried: list) -> list:
        def element(k: ir.Value, accs: list) -> list:
            index, _ = red.full_index(b, r, k)
            return red.fold(b, args, index, accs)

        accs = strided_loop(b, team.rank, c64(length), c64(team.size), red.init(b), element, "k")
        accs = team.allreduce(mod, b, lambda x, y: red.combine(b, x, y), accs, "red")
        with b.if_then(b.icmp_unsigned("==", team.rank, c64(0))):
            red.finish(b, args, delinearize(b, r, red.out_shape), accs)
        return carried

    strided_loop(b, team.row, c64(rows), team.rows_step, [], row, "r")
    b.ret_void()
    return LaunchSpec(name, (grid, 1, 1), (BLOCK, 1, 1), [])


COLUMN_TILE = (32, 8)


def emit_column_reduction(mod: ir.Module, name: str, red: Reduction, nparams: int) -> LaunchSpec:
    """32 adjacent columns per block, 8 row groups; partials combined in shared memory in
    the order 0..7 (deterministic)."""
    fn, b = new_kernel(mod, name, nparams)
    args = list(fn.args)
    cols, length = num_elements(red.out_shape), num_elements(red.reduced_shape)
    tx, ty = sreg(b, "tid.x"), sreg(b, "tid.y")
    col = b.add(b.mul(sreg(b, "ctaid.x"), c64(COLUMN_TILE[0])), tx)
    inside = b.icmp_unsigned("<", col, c64(cols))
    safe_col = b.select(inside, col, c64(0))
    init = red.init(b)
    entry = b.block
    with b.if_then(inside):
        def element(k: ir.Value, accs: list) -> list:
            index, _ = red.full_index(b, safe_col, k)
            return red.fold(b, args, index, accs)
        folded = strided_loop(b, ty, c64(length), c64(COLUMN_TILE[1]), init, element, "k")
        folded_block = b.block
    accs = [_phi(b, v, folded_block, i, entry) for v, i in zip(folded, init)]
    slots = COLUMN_TILE[0] * COLUMN_TILE[1]
    arrays = [shared_array(mod, f"{name}.part{j}", a.type, slots) for j, a in enumerate(accs)]
    here = b.trunc(b.add(b.mul(ty, c64(COLUMN_TILE[0])), tx), I32)
    for arr, a in zip(arrays, accs):
        shared_store(b, arr, here, a)
    barrier(b)
    with b.if_then(b.and_(inside, b.icmp_unsigned("==", ty, c64(0)))):
        total = [shared_load(b, arr, b.trunc(tx, I32), a.type) for arr, a in zip(arrays, accs)]
        for g in range(1, COLUMN_TILE[1]):
            at = b.trunc(b.add(tx, c64(g * COLUMN_TILE[0])), I32)
            total = red.combine(b, total, [shared_load(b, arr, at, a.type)
                                           for arr, a in zip(arrays, accs)])
        red.finish(b, args, delinearize(b, col, red.out_shape), total)
    b.ret_void()
    # at least one block, as grid_for gives: a grid of 0 blocks (no columns: a reduction
    # to a size-0 result) is an invalid launch; the one block's threads are all outside
    grid = max(1, -(-cols // COLUMN_TILE[0]))
    return LaunchSpec(name, (grid, 1, 1), (COLUMN_TILE[0], COLUMN_TILE[1], 1), [])


def _phi(b: ir.IRBuilder, inner: ir.Value, inner_block: Any, outer: ir.Value,
         outer_block: Any) -> ir.Value:
    p = b.phi(inner.type)
    p.add_incoming(inner, inner_block)
    p.add_incoming(outer, outer_block)
    return p


def _block_reduce(mod: ir.Module, b: ir.IRBuilder, red: Reduction, accs: list, name: str) -> list:
    """Combine across the block (BLOCK threads): warps by shuffles, then warp 0 over the
    warps' results from shared memory. The result is valid in thread 0."""
    tid = sreg(b, "tid.x")
    lane = b.urem(tid, c64(WARP))
    warp = b.udiv(tid, c64(WARP))
    nwarps = BLOCK // WARP
    accs = _warp_reduce(b, red, accs)
    arrays = [shared_array(mod, f"{name}.warps{j}", a.type, nwarps) for j, a in enumerate(accs)]
    with b.if_then(b.icmp_unsigned("==", lane, c64(0))):
        for arr, a in zip(arrays, accs):
            shared_store(b, arr, b.trunc(warp, I32), a)
    barrier(b)
    have = b.icmp_unsigned("<", lane, c64(nwarps))
    at = b.trunc(b.select(have, lane, c64(0)), I32)
    init = red.init(b)
    mine = [b.select(have, shared_load(b, arr, at, a.type), i)
            for arr, a, i in zip(arrays, accs, init)]
    return _warp_reduce(b, red, mine)


def emit_full_reduction(mod: ir.Module, name: str, red: Reduction, nparams: int,
                        partial_types: list, gpu: GpuTarget = None) -> tuple:
    """One kernel, one pass (see the module doc): each block folds a grid-stride share of
    the input (VEC elements at a time, with vector loads, when the innermost axis is a
    multiple of VEC and `red.fold_vector` is given) and writes its partial (scratch
    buffers, one per accumulator, parameters after the `nparams` buffers); the last
    block to take a ticket folds the partials in block order and finishes. Returns the
    LaunchSpec and the scratch sizes in bytes."""
    n = num_elements(red.shape)
    vec = red.fold_vector is not None and bool(red.shape) and red.shape[-1] % VEC == 0
    per_thread = VEC if vec else 1
    blocks = grid_for(-(-n // per_thread), BLOCK, gpu)
    nacc = len(partial_types)
    fn, b = new_kernel(mod, name, nparams + nacc)
    args = list(fn.args)
    tid, block, nblocks = sreg(b, "tid.x"), sreg(b, "ctaid.x"), sreg(b, "nctaid.x")
    first = b.add(b.mul(block, c64(BLOCK)), tid)
    stride = b.mul(nblocks, c64(BLOCK))

    def element(i: ir.Value, accs: list) -> list:
        return red.fold(b, args[:nparams], delinearize(b, i, red.shape), accs)

    def group(g: ir.Value, accs: list) -> list:
        flat = b.mul(g, c64(VEC))
        indices = gpu_vector.split_index(b, delinearize(b, flat, red.shape))
        return red.fold_vector(b, args[:nparams], flat, indices, accs)

    if vec:
        accs = strided_loop(b, first, c64(n // VEC), stride, red.init(b), group, "g")
    else:
        accs = strided_loop(b, first, c64(n), stride, red.init(b), element)
    accs = _block_reduce(mod, b, red, accs, name + "_blk")          # valid in thread 0
    ticket = ir.GlobalVariable(mod, I32, name + ".ticket",
                               addrspace=0 if gpu_simt.is_host(mod) else GLOBAL)
    ticket.linkage = "internal"
    ticket.initializer = ir.Constant(I32, 0)      # zero when the module loads
    ticket.align = 4
    flag = shared_array(mod, name + ".last", I32, 1)
    zero32 = ir.Constant(I32, 0)
    with b.if_then(b.icmp_unsigned("==", tid, c64(0))):
        for j, a in enumerate(accs):
            _store_partial(b, args[nparams + j], block, a)
        _fence(b)                                 # the partial before the ticket
        taken = b.atomic_rmw("add", ticket, ir.Constant(I32, 1), "monotonic")
        last = b.icmp_unsigned("==", taken, b.trunc(b.sub(nblocks, c64(1)), I32))
        shared_store(b, flag, zero32, b.zext(last, I32))
    barrier(b)
    with b.if_then(b.icmp_unsigned("!=", shared_load(b, flag, zero32, I32), zero32)):
        _fence(b)                                 # every block's partial is visible

        def partial(i: ir.Value, accs: list) -> list:
            return red.combine(b, accs, [_load_partial(b, args[nparams + j], i, t, fresh=True)
                                         for j, t in enumerate(partial_types)])

        accs = strided_loop(b, tid, nblocks, c64(BLOCK), red.init(b), partial, "p")
        accs = _block_reduce(mod, b, red, accs, name + "_fin")
        with b.if_then(b.icmp_unsigned("==", tid, c64(0))):
            red.finish(b, args[:nparams], [c64(0)] * len(red.out_shape), accs)
            b.store(zero32, ticket)               # ready for the next launch
    b.ret_void()
    spec = LaunchSpec(name, (blocks, 1, 1), (BLOCK, 1, 1), [])
    return spec, [blocks * _bytes(t) for t in partial_types]


def _fence(b: ir.IRBuilder) -> None:
    """Order this thread's memory operations for the whole GPU (fence.acq_rel.gpu)."""
    if gpu_simt.is_host(b.module):
        b.fence("acq_rel")
    else:
        b.fence("acq_rel", "device")


def _math(mod: ir.Module) -> Any:
    """The math table: libdevice and PTX on the GPU, the CPU's for the host stand-in."""
    if gpu_simt.is_host(mod):
        from .math_table import CPU_MATH
        return CPU_MATH
    return gpu_math.GPU_MATH


def _bytes(ty: ir.Type) -> int:
    if isinstance(ty, ir.LiteralStructType):          # complex: its parts
        return sum(_bytes(t) for t in ty.elements)
    if ty == I1:
        return 1
    if isinstance(ty, ir.IntType):
        return ty.width // 8
    return 8 if ty == F64 else (2 if isinstance(ty, ir.HalfType) else 4)


def _store_partial(b: ir.IRBuilder, base: ir.Value, i: ir.Value, v: ir.Value) -> None:
    ty = I8 if v.type == I1 else v.type
    b.store(b.zext(v, I8) if v.type == I1 else v, b.gep(base, [i], source_etype=ty))


def _load_partial(b: ir.IRBuilder, base: ir.Value, i: ir.Value, ty: ir.Type,
                  fresh: bool = False) -> ir.Value:
    """A partial result; `fresh`: one another block wrote in this launch, read past the
    (incoherent) L1 cache with a relaxed atomic load of its bits."""
    st = I8 if ty == I1 else ty
    ptr = b.gep(base, [i], source_etype=st)
    v = _fresh_load(b, ptr, st) if fresh else b.load(ptr, typ=st)
    return b.trunc(v, I1) if ty == I1 else v


def _fresh_load(b: ir.IRBuilder, ptr: ir.Value, ty: ir.Type) -> ir.Value:
    if isinstance(ty, ir.LiteralStructType):
        out = ir.Constant(ty, ir.Undefined)
        for k, t in enumerate(ty.elements):
            part = b.gep(ptr, [ir.Constant(I32, 0), ir.Constant(I32, k)], source_etype=ty)
            out = b.insert_value(out, _fresh_load(b, part, t), k)
        return out
    bits = ty if isinstance(ty, ir.IntType) else ir.IntType(_bytes(ty) * 8)
    v = b.load_atomic(ptr, "monotonic", _bytes(ty), typ=bits)
    return v if bits == ty else b.bitcast(v, ty)


# ---- a whole execution plan --------------------------------------------------------------

def emit_plan(plan: Any, arch: str = DEFAULT_ARCH, name: str = "module",
              host: bool = False) -> GpuProgram:
    """PTX for every LOOP and REDUCTION kernel of an ExecutionPlan, in one PTX module.
    `arch`: a GPU target string (gpu_target.py: "sm_90", or "sm_90:132:2048" with the
    GPU's size, which sizes the grids). `host`: build the kernels for the host CPU
    instead (gpu_simt.py): `llvm_ir` holds them, `ptx` is empty.

    LIBRARY and OPAQUE kernels produce no code: the device runs them (cuBLAS, or the
    host). Each launch's `params` are module positions (kernel inputs, then outputs) and,
    for full reductions, scratch keys (strings) whose sizes are in `scratch`."""
    gpu = parse_target(arch)
    mod = new_module(_ident(name), host)
    launches, scratch = emit_kernels(mod, plan, gpu=gpu)
    if host:            # no PTX: the kernels' LLVM IR for the host (gpu_simt.py)
        return GpuProgram("", gpu.arch, launches, scratch, str(mod))
    if not any(isinstance(s, LaunchSpec) for s in launches):
        return GpuProgram("", gpu.arch, launches, scratch)
    ptx, llvm_ir = to_ptx(mod, gpu.arch)
    return GpuProgram(ptx, gpu.arch, launches, scratch, llvm_ir)


def emit_kernels(mod: ir.Module, plan: Any, prefix: str = "", gpu: GpuTarget = None) -> tuple:
    """Add the plan's kernels to `mod` (names start with `prefix`); return the steps
    (LaunchSpecs, and the plan's LIBRARY/OPAQUE kernels as they are) and scratch sizes.
    `gpu` sizes the grids (default: the default GPU of DEFAULT_ARCH)."""
    gpu = gpu if gpu is not None else GpuTarget(DEFAULT_ARCH)
    from ..planning.plan import LOOP, OPAQUE, REDUCTION, ROW
    from .control_steps import is_control
    launches: list = []
    scratch: dict = {}
    for k, kernel in enumerate(plan.kernels):
        name = prefix + kernel_entry_name(k, kernel.name)
        if kernel.kind == LOOP:
            launches.append(_loop_kernel(mod, plan, kernel, name, gpu))
        elif kernel.kind == REDUCTION:
            specs, sizes = _reduction_kernel(mod, plan, kernel, name, gpu)
            launches.extend(specs)
            scratch.update(sizes)
        elif kernel.kind == ROW:
            launches.append(_row_kernel(mod, plan, kernel, name, gpu))
        elif kernel.kind == OPAQUE and is_control(plan, kernel):
            launches.append(kernel)     # a control step (compiler/driver.py makes it)
        else:
            specs = _opaque_kernels(mod, plan, kernel, name, gpu) if kernel.kind == OPAQUE else None
            # None: the stanza's library call (compiler/driver.py makes the step)
            launches.extend(specs) if specs is not None else launches.append(kernel)
    return launches, scratch


def kernel_entry_name(k: int, kernel_name: str) -> str:
    """The PTX entry of the plan's k-th kernel (an opaque op's loops add _0, _1, ...)."""
    return f"k{k}_{_ident(kernel_name)}"


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _params(kernel: Any) -> list:
    return list(kernel.inputs) + [o for o in kernel.outputs if o not in kernel.inputs]


def _emitter(b: ir.IRBuilder, mod: ir.Module, plan: Any, kernel: Any, args: list) -> Any:
    from .elemental import ElementalEmitter
    params = _params(kernel)
    inputs = {pos: args[i] for i, pos in enumerate(params) if pos in kernel.inputs}
    em = ElementalEmitter(b, mod, plan.module, inputs, _math(mod))
    em.out_ptr = {pos: args[i] for i, pos in enumerate(params)}
    return em


def _store(em: Any, pos: int, index: list, value: Any = None) -> None:
    ins = em.module.instructions[pos]
    em.store(em.out_ptr[pos], ins.shape, value if value is not None else em.at(pos, index), index)


def _update_kernel(mod: ir.Module, plan: Any, kernel: Any, name: str, gpu: GpuTarget,
                   dus: Any) -> LaunchSpec:
    """A dynamic_update_slice written over its own operand (buffer_assignment's
    updated_in_place: a KV cache carried by a loop, or donated to a program): a
    grid-stride loop over the *update's* elements, each stored at its place in the
    operand's buffer, which already holds every element outside the update (the CPU's
    is cpu_kernels._update_region). The work is the update's size, not the buffer's."""
    ushape = plan.module.instructions[dus.operands[1]].shape

    def body(b: ir.IRBuilder, args: list, index: list) -> None:
        em = _emitter(b, mod, plan, kernel, args)
        starts = index_rules.update_starts(em, dus)       # clamped: the update fits
        value = em.at(dus.operands[1], index)
        em.store(em.out_ptr[kernel.outputs[0]], dus.shape, value,
                 [b.add(i, s, flags=("nsw",)) for i, s in zip(index, starts)])

    spec = emit_loop(mod, name, ushape, len(_params(kernel)), body, gpu)
    spec.params = _params(kernel)
    return spec


def _loop_kernel(mod: ir.Module, plan: Any, kernel: Any, name: str,
                 gpu: GpuTarget = None) -> LaunchSpec:
    dus = updated_in_place(plan.module, plan.buffers, kernel.members, kernel.outputs)
    if dus is not None:                                   # a KV cache's row, in place
        return _update_kernel(mod, plan, kernel, name, gpu, dus)
    shape = plan.module.instructions[kernel.outputs[0]].shape
    params = _params(kernel)

    def body(b: ir.IRBuilder, args: list, index: list) -> None:
        em = _emitter(b, mod, plan, kernel, args)
        # every value before any store: an output may overwrite an input in place
        # (compiler/planning/buffer_assignment.py); the pointers carry no noalias
        values = [em.at(pos, index) for pos in kernel.outputs]
        for pos, value in zip(kernel.outputs, values):
            _store(em, pos, index, value)

    outs = kernel.outputs
    if shape and shape[-1] % VEC == 0 and all(ins.shape == shape for ins in
                                               (plan.module.instructions[p] for p in outs)):
        def group(b: ir.IRBuilder, args: list, flat: ir.Value, indices: list) -> None:
            em = _emitter(b, mod, plan, kernel, args)
            gpu_vector.preload(em, b, gpu_vector.vector_inputs(plan.module, em.buffers, outs,
                                                               shape), flat, indices)
            values = [[em.at(pos, index) for index in indices] for pos in outs]
            for pos, vs in zip(outs, values):
                gpu_vector.store(em, b, em.out_ptr[pos], shape, flat, vs, indices)

        spec = emit_vector_loop(mod, name, shape, len(params), group, gpu)
    else:
        spec = emit_loop(mod, name, shape, len(params), body, gpu)
    spec.params = params
    return spec


def _opaque_kernels(mod: ir.Module, plan: Any, kernel: Any, name: str,
                    gpu: GpuTarget = None) -> Any:
    """One launch per loop of the opaque op's stanza, or None (then its library call)."""
    from .library_calls import opaque_loops
    (pos,) = kernel.outputs
    loops = opaque_loops(plan.module, pos)
    if loops is None:
        return None
    params = _params(kernel)
    operands = plan.module.instructions[pos].operands
    specs = []
    for j, loop in enumerate(loops):
        def body(b: ir.IRBuilder, args: list, index: list, loop: Any = loop) -> None:
            em = _emitter(b, mod, plan, kernel, args)
            loop.body(em, em.out_ptr[pos], [em.out_ptr[o] for o in operands], index)
        spec = emit_ordered_loop(mod, f"{name}_{j}", loop.space, loop.ordered, len(params),
                                 body, gpu)
        spec.params = params
        specs.append(spec)
    return specs


class _ReductionCode:
    """The callbacks of `Reduction` for one fused REDUCTION kernel."""

    def __init__(self, mod: ir.Module, plan: Any, kernel: Any) -> None:
        self.mod, self.plan, self.kernel = mod, plan, kernel
        rp = kernel.reduction          # compiler/planning/reduction_plan.py
        self.layout = rp.layout
        self.roots, self.shape, self.axes = list(rp.roots), rp.shape, rp.axes
        self.side, self.late = list(rp.side), list(rp.late)
        self.em = None

    def _em(self, b: ir.IRBuilder, args: list) -> Any:
        # one emitter per kernel function
        if self.em is None or self.em.b is not b or self.em.args is not args[0]:
            self.em = _emitter(b, self.mod, self.plan, self.kernel, args)
            self.em.args = args[0]
        return self.em

    def init(self, b: ir.IRBuilder) -> list:
        from .llvm_types import constant
        ins = self.plan.module.instructions
        accs = []
        for p in self.roots:
            src, r = ins[ins[p].operands[0]], reducer_of(ins[p])
            if not r.arg:
                accs.append(constant(ins[p].dtype, r.start(ins[p].dtype)))
            else:       # the best value so far and its index
                accs += [constant(src.dtype, r.start(src.dtype)), c64(2 ** 63 - 1)]
        return accs

    def fold(self, b: ir.IRBuilder, args: list, index: list, accs: list) -> list:
        em = self._em(b, args)
        ins = self.plan.module.instructions
        em.push_scope()
        values = []
        for p in self.roots:
            src = ins[p].operands[0]
            v = em.at(src, index)
            values.append(v.ir)
            if reducer_of(ins[p]).arg:
                values.append(index[self.axes[0]])
        for pos in self.side:
            _store(em, pos, index)
        em.pop_scope()
        return self.combine(b, accs, values)

    def fold_vector(self, b: ir.IRBuilder, args: list, flat: ir.Value, indices: list,
                    accs: list) -> list:
        """fold at each of `indices` (consecutive, from `flat`), the inputs read there
        loaded as vectors first (gpu_vector.py)."""
        em = self._em(b, args)
        ins = self.plan.module.instructions
        starts = [ins[p].operands[0] for p in self.roots] + list(self.side)
        em.push_scope()
        gpu_vector.preload(em, b, gpu_vector.vector_inputs(self.plan.module, em.buffers,
                                                           starts, self.shape), flat, indices)
        for index in indices:
            accs = self.fold(b, args, index, accs)
        em.pop_scope()
        return accs

    def combine(self, b: ir.IRBuilder, a: list, c: list) -> list:
        from .llvm_types import Value
        from .elemental import ElementalEmitter
        em = ElementalEmitter(b, self.mod, self.plan.module, {}, _math(self.mod))
        ins = self.plan.module.instructions
        out, j = [], 0
        for p in self.roots:
            src_dtype, r = ins[ins[p].operands[0]].dtype, reducer_of(ins[p])
            if not r.arg:
                d = ins[p].dtype
                out.append(em.combine(r.kind, Value(a[j], d), Value(c[j], d)).ir)
                j += 1
                continue
            va, vc = Value(a[j], src_dtype), Value(c[j], src_dtype)
            ia, ic = a[j + 1], c[j + 1]
            c_better = em.arg_better(r.kind, vc, va)
            a_better = em.arg_better(r.kind, va, vc)
            tie_c = b.and_(b.not_(a_better), b.icmp_signed("<", ic, ia))
            take = b.or_(c_better, tie_c)
            out += [b.select(take, vc.ir, va.ir), b.select(take, ic, ia)]
            j += 2
        return out

    def finish(self, b: ir.IRBuilder, args: list, out_index: list, accs: list) -> None:
        from .llvm_types import Value
        em = self._em(b, args)
        ins = self.plan.module.instructions
        em.push_scope()
        j = 0
        for p in self.roots:
            if not reducer_of(ins[p]).arg:
                value = em.round(Value(accs[j], ins[p].dtype))
                j += 1
            else:
                value = em.index_to(accs[j + 1], ins[p].dtype)
                j += 2
            # the memo's own key (constants by value): a lookup at the same index hits
            em.remember(p, out_index, value)
        out_shape = tuple(n for d, n in enumerate(self.shape) if d not in self.axes)
        for pos in self.late:
            # an epilogue output may have another shape of the same size (keepdims, 0-d)
            _store(em, pos, same_element(em, ins[pos].shape, out_shape, out_index))
        em.pop_scope()

    def partial_types(self) -> list:
        return [a.type for a in self.init(ir.IRBuilder())]


def _reduction_kernel(mod: ir.Module, plan: Any, kernel: Any, name: str,
                      gpu: GpuTarget = None) -> tuple:
    """The kernel shape for the reduction's layout (compiler/planning/reduction_plan.py)."""
    code = _ReductionCode(mod, plan, kernel)
    red = Reduction(code.shape, code.axes, code.init, code.fold, code.combine, code.finish)
    params = _params(kernel)
    strategy = code.layout
    if strategy == "full":
        types = code.partial_types()
        red.fold_vector = code.fold_vector
        spec, sizes = emit_full_reduction(mod, name, red, len(params), types, gpu)
        keys = [f"{name}.partial{j}" for j in range(len(types))]
        spec.params = params + keys
        return [spec], dict(zip(keys, sizes))
    if strategy == "column":
        spec = emit_column_reduction(mod, name, red, len(params))
    else:
        spec = emit_warp_reduction(mod, name, red, len(params), gpu)
    spec.params = params
    return [spec], {}


def _row_kernel(mod: ir.Module, plan: Any, kernel: Any, name: str,
                gpu: GpuTarget = None) -> LaunchSpec:
    """A team per row (compiler/planning/row_fusion.py; a warp, or a block for long rows): each
    phase's reductions strided over the team and combined by `Team.allreduce`, so every
    thread holds the row's results; then the row values, and the team writes the outputs
    of the row space. Rows whose last axis is a multiple of VEC go VEC elements at a
    time, the inputs read with vector loads."""
    from .llvm_types import Value, constant
    from ..primitives.reduction import identity
    from ..planning.row_fusion import outer_shape, row_schedule
    ins = plan.module.instructions
    first = next(p for p in kernel.members if reducer_of(ins[p]) is not None)
    space = (ins[ins[first].operands[0]].shape, tuple(ins[first].attrs["axes"]))
    sched, why = row_schedule(plan.module, set(kernel.members), space)
    if sched is None:
        raise ValueError(f"{kernel.name}: not a valid row kernel: {why}")
    shape, axes = space
    rows_shape, row_shape = outer_shape(space), tuple(shape[a] for a in axes)
    length, rows = num_elements(row_shape), num_elements(rows_shape)
    vec = row_shape[-1] % VEC == 0
    params = _params(kernel)
    fn, b = new_kernel(mod, name, len(params))
    em = _emitter(b, mod, plan, kernel, list(fn.args))
    wide = [p for p in kernel.outputs if ins[p].shape == shape]
    narrow = [p for p in kernel.outputs if p not in wide]
    team, grid = row_team(b, length, rows, name, gpu)

    def over_row(r: ir.Value, rindex: list, starts: list, carried: list,
                 visit: Callable[[list, list], list], tag: str) -> list:
        """carried = visit(index, carried) for the team's elements of row r (VEC at a
        time with the inputs that `starts` read loaded as vectors, when `vec`)."""
        if not vec:
            def one(k: ir.Value, cs: list) -> list:
                em.push_scope()
                out = visit(list(rindex) + delinearize(b, k, row_shape), cs)
                em.pop_scope()
                return out
            return strided_loop(b, team.rank, c64(length), c64(team.size), carried, one, tag)
        inputs = gpu_vector.vector_inputs(plan.module, em.buffers, starts, shape)

        def group(q: ir.Value, cs: list) -> list:
            k = b.mul(q, c64(VEC))
            em.push_scope()
            indices = [list(rindex) + i for i in
                       gpu_vector.split_index(b, delinearize(b, k, row_shape))]
            gpu_vector.preload(em, b, inputs, b.add(b.mul(r, c64(length)), k), indices)
            for index in indices:
                em.push_scope()
                cs = visit(index, cs)
                em.pop_scope()
            em.pop_scope()
            return cs
        return strided_loop(b, team.rank, c64(length // VEC), c64(team.size), carried, group, tag)

    def phase(r: ir.Value, rindex: list, reductions: list, number: int) -> None:
        dtypes = [ins[p].dtype for p in reductions]
        kinds = [ins[p].attrs["kind"] for p in reductions]

        def combine(a: list, c: list) -> list:
            return [em.combine(kd, Value(x, d), Value(y, d)).ir
                    for kd, d, x, y in zip(kinds, dtypes, a, c)]

        def element(index: list, accs: list) -> list:
            return combine(accs, [em.at(ins[p].operands[0], index).ir for p in reductions])

        inits = [constant(d, identity(kd, d)) for kd, d in zip(kinds, dtypes)]
        starts = [ins[p].operands[0] for p in reductions]
        accs = over_row(r, rindex, starts, inits, element, "k")
        accs = team.allreduce(mod, b, combine, accs, f"phase{number}_")
        for p, a, d in zip(reductions, accs, dtypes):
            em.row_values[p] = em.round(Value(a, d))

    def row(r: ir.Value, carried: list) -> list:
        em.push_scope()
        em.row_values = {}
        rindex = delinearize(b, r, rows_shape)
        for k, reductions in enumerate(sched.phases, start=1):
            phase(r, rindex, reductions, k)
            for pos, level in sched.row_values:
                if level == k:
                    em.row_values[pos] = em.at(pos, delinearize(b, r, ins[pos].shape))

        def write(index: list, cs: list) -> list:
            for pos in wide:
                _store(em, pos, index)
            return cs

        if wide:
            over_row(r, rindex, wide, [], write, "w")
        if narrow:
            with b.if_then(b.icmp_unsigned("==", team.rank, c64(0))):
                for pos in narrow:
                    _store(em, pos, delinearize(b, r, ins[pos].shape))
        em.pop_scope()
        return carried

    strided_loop(b, team.row, c64(rows), team.rows_step, [], row, "r")
    b.ret_void()
    spec = LaunchSpec(name, (grid, 1, 1), (BLOCK, 1, 1), [])
    spec.params = params
    return spec
