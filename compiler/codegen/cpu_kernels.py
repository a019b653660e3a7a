"""CPU loop nests around the elemental emitter: from fused kernels to LLVM functions.

Every generated function has one signature:

    void f(ptr noalias buf0, ..., ptr noalias bufN, i64 start, i64 end[, ptr partial0, ...])

One argument per buffer slot: an output overwriting a donated input in place (a pair of
the plan's `buffers.aliases`) shares that input's argument, so `noalias` stays true.

`start`/`end` bound the outer dimension of its iteration space (the first longer than
1), so the runtime can split it over threads. The innermost loop runs over the last
(contiguous) dimension so LLVM vectorizes it. A kernel of the plan becomes one or more *steps* (plain dicts, so a
compiled program can be stored as JSON next to its object code):

- "loop": an elementwise / index-moving iteration space, or a reduction whose reduced
  axes are the trailing ones (each output element accumulated in registers: rows); or a
  decomposition calling LAPACK for each matrix of its range (lapack_kernels.py: such a
  step also holds "lapack", what the device resolves, and "host", its library step);
- "partial": any other reduction. Each chunk of the outermost dimension accumulates into
  partial arrays (its own when that dimension is reduced, a shared one otherwise); the
  runtime combines the chunks' partials and writes the reductions. argmax/argmin over a
  leading axis keep their best value and index per output element the same way;
- "library": dot_general (BLAS), sort and argsort (NumPy), half-float cumulative: the
  device runs them. scatter and the other cumulatives are generated loops ("serial"
  when their order matters across the range).

A kernel reading an operand transposed runs its two inner dimensions in tiles.
"""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ir

from ..primitive import PRIMITIVES, Loop
from ..primitives.reduction import identity, reducer_of
from ..hlo import dtypes as D
from ..hlo.module import Module
from ..planning.plan import LIBRARY, LOOP, OPAQUE, REDUCTION, ROW, ExecutionPlan, Kernel
from ..planning.buffer_assignment import updated_in_place
from ..planning.row_fusion import (MAX_ROW_BYTES, outer_shape, reused_across_passes,
                                   row_schedule, store_passes)
from ..program import LibraryStep, LoopStep, PartialStep
from .elemental import ElementalEmitter
from .control_steps import is_control
from .library_calls import library_step, opaque_loops
from . import index_rules, lane_reduce, lapack_kernels
from . import llvm_target
from .kernel_key import kernel_key, translate
from .llvm_types import HALF, I64, PTR, Value, storage_type
from .loops import const, counted_loop, no_vectorize
from .register_reduce import Accumulator, flat_inits, unflatten
from . import row_division
from . import stream_stores
from . import inner_rows, update_blocks
from .row_division import row_divisions
from .math_table import CPU_MATH, MathTable
from ..hlo.shapes import num_elements

_SHAREABLE = (LOOP, REDUCTION, ROW)     # kernels whose functions equal kernels share
# the partials a finish combines per output, as its optimization tier counts its work (the
# chunk count is known at run time only: one per thread, or one)
FINISH_CHUNKS = 8

def accumulator_dtype(dtype: D.DType) -> D.DType:
    """Half floats accumulate in float32, as the references do."""
    return D.float32 if dtype in HALF else dtype


def full_accumulator(kind: str, dtype: D.DType) -> D.DType:
    """The accumulator of a full reduction (and of rows, see `wide_row_sums`): a float32
    (or half) sum carries float64. Carried in float32 through millions of elements, a sum stops growing
    (mean of 2**28 ones was 0.984375; a mean of sixteen 1e20 was an ulp off, so their
    variance 3.1e26) where NumPy's pairwise sum is exact; the loads stay float32."""
    acc = accumulator_dtype(dtype)
    return D.float64 if kind == "sum" and acc is D.float32 else acc


class CPUCodegen:
    """Builds one LLVM module holding every kernel function of an execution plan."""

    def __init__(self, plan: ExecutionPlan, name: str, math: MathTable = CPU_MATH,
                 progress: Any = None, lapack: bool = True) -> None:
        self.progress = progress    # progress(stage, done, total), or None
        self.lapack = lapack        # decompositions as generated LAPACK calls (not AOT)
        self.plan = plan
        self.module: Module = plan.module
        self.ins = plan.module.instructions
        self.math = math
        self.llmod = ir.Module(name=name)
        self.steps: list = []
        self._count = 0
        self.prefix = ""            # of every function's name (a library's sub-programs)
        self._made: dict = {}       # kernel key -> (kernel, its positions, its steps)
        self.shared = 0             # kernels that call an earlier kernel's function
        self.control: Any = None    # kernel -> its control step (control_steps.py), or None
        self.repeat = 1             # runs of each kernel per call (see generate_module)
        self.vector_code: set = set()   # functions of `Loop.vector_code` loops

    # ---- the plan, kernel by kernel ---------------------------------------------------

    def run(self, ready: Any = None) -> tuple:
        """(LLVM module, steps in execution order). `ready(module, functions)`, when given,
        hears the functions each kernel adds, complete (their optimization tier chosen), as
        soon as they are: LLVM may build them while the next kernels are generated."""
        for count, kern in enumerate(self.plan.kernels):
            if self.progress is not None:
                self.progress("generating", count, len(self.plan.kernels))
            first, made = len(self.steps), len(self.llmod.globals)
            if kern.kind in _SHAREABLE or self._loops_only(kern):
                key, order = kernel_key(self.plan, kern)
                seen = self._made.get(key)
                shared = seen and translate(seen[2], seen[0], seen[1], kern, order)
                if shared:      # the same code as an earlier kernel: call its function
                    self.steps.extend(shared)
                    self.shared += 1
                    continue
                self._kernel(kern)
                self._made[key] = (kern, order, self.steps[first:])
            else:
                self._kernel(kern)
            if ready is not None:
                # (a shared kernel's steps have its shapes: its function's tier stands)
                self._choose_opt_levels(self.steps[first:])
                ready(self.llmod, [g for g in list(self.llmod.globals.values())[made:]
                                   if isinstance(g, ir.Function) and g.blocks])
        if ready is None:
            self._choose_opt_levels(self.steps)
        return self.llmod, self.steps

    def _loops_only(self, kern: Kernel) -> bool:
        """An OPAQUE kernel computed by its stanza's loops alone (a convolution's direct
        loop, a scatter): its function follows from its key like a fused loop's, so
        equal ones (a network's repeated layers) share it."""
        return kern.kind == OPAQUE and not is_control(self.plan, kern) and all(
            opaque_loops(self.module, pos) is not None for pos in kern.outputs)

    def _choose_opt_levels(self, steps: list) -> None:
        """Each function's optimization follows its size (llvm_target.opt_tier): the
        largest work of the `steps` that call it, times the runs per call (a loop body's
        small kernels, run at every iteration, are optimized)."""
        work: dict = {}
        for s in steps:
            if isinstance(s, (LoopStep, PartialStep)):
                n = int(s.extent) * max(1, int(s.work)) * self.repeat
                work[s.fn] = max(work.get(s.fn, 0), n)
            if isinstance(s, PartialStep) and s.finish:
                # a partial reduction's finish: each output's partials combined (chunks:
                # a few per thread at most) and its epilogue. It was built at -O2 with
                # vectorized loops whatever its size: a CNN's BatchNorm finishes over
                # 16-64 channels were ~20 ms of LLVM each, to save a microsecond a run
                n = int(s.finish_extent) * len(s.roots) * FINISH_CHUNKS
                work[s.finish] = max(work.get(s.finish, 0), n)
        for name, n in work.items():
            tier = llvm_target.opt_tier(n)
            fn = self.llmod.get_global(name)
            if tier == 0:
                fn.attributes.add("optnone")
                fn.attributes.add("noinline")
            elif name in self.vector_code:
                llvm_target.mark_vector_code(fn)
            elif tier == 1:
                no_vectorize(fn)

    def _kernel(self, kern: Kernel) -> None:
        if kern.kind == OPAQUE:
            self._opaque(kern)
        elif kern.kind == LIBRARY:
            self._library(kern)
        elif kern.kind == REDUCTION:
            self._reduction(kern)
        elif kern.kind == ROW:
            self._row_kernel(kern)
        else:
            self._loops(kern, list(kern.outputs))

    def _library(self, kern: Kernel) -> None:
        for pos in kern.outputs:
            host = library_step(self.module, kern.name, pos)
            operands = [self.ins[o] for o in self.ins[pos].operands]
            if self.lapack and lapack_kernels.applies(self.ins[pos], operands):
                self.steps.append(self._lapack(kern, pos, host))
            else:
                self.steps.append(host)

    def _lapack(self, kern: Kernel, pos: int, host: LibraryStep) -> LoopStep:
        """A decomposition as a function calling LAPACK for each matrix of its range;
        the step keeps its library call as the device's fallback ("host")."""
        operands = list(self.ins[pos].operands)
        name, args, e, ptr_of, start, end, _ = self._begin(kern, operands, [pos])
        info = lapack_kernels.lapack_step(self.ins[pos], [self.ins[o] for o in operands], name,
                                          self.llmod, e.b, ptr_of[pos],
                                          [ptr_of[o] for o in operands], start, end)
        return LoopStep(kernel=kern.name, fn=name, args=args, **info, host=host)

    def _loops(self, kern: Kernel, outputs: list) -> None:
        by_shape: dict = {}
        for pos in outputs:
            by_shape.setdefault(self.ins[pos].shape, []).append(pos)
        for shape, group in by_shape.items():
            self._loop_function(kern, shape, group)

    # ---- functions ----------------------------------------------------------------------

    def _begin(self, kern: Kernel, reads: list, writes: list, partials: int = 0,
               emitter: type = ElementalEmitter, counts: int = 0) -> tuple:
        """A new function over the distinct buffers of `reads` and `writes`, then start
        and end, then `partials` pointers, then `counts` more i64 arguments."""
        args: list = []
        seen: dict = {}
        slot_of = self.plan.buffers.slot_of
        for pos in list(writes) + list(reads):
            slot = slot_of.get(pos, ("pos", pos))
            if slot not in seen:
                seen[slot] = len(args)
                args.append(pos)
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(args) + [I64, I64] + [PTR] * partials
                               + [I64] * counts)
        name = f"{self.prefix}{_ident(kern.name)}_{self._count}"
        self._count += 1
        fn = ir.Function(self.llmod, fnty, name)
        fn.attributes.add("nounwind")
        for k in range(len(args)):
            fn.args[k].add_attribute("noalias")
        for k in range(partials):
            fn.args[len(args) + 2 + k].add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        ptr_of = {pos: fn.args[seen[slot_of.get(pos, ("pos", pos))]] for pos in list(writes) + list(reads)}
        buffers = {pos: ptr_of[pos] for pos in reads}
        e = emitter(b, self.llmod, self.module, buffers, self.math)
        start, end = fn.args[len(args)], fn.args[len(args) + 1]
        extra = list(fn.args[len(args) + 2:])
        return name, args, e, ptr_of, start, end, extra

    def _reads(self, kern: Kernel) -> list:
        members = set(kern.members)
        reads = set(kern.inputs)
        for pos in kern.members:
            for o in self.ins[pos].operands:
                if o not in members:
                    reads.add(o)
        return sorted(reads)

    def _loop_function(self, kern: Kernel, shape: tuple, outputs: list) -> None:
        name, args, e, ptr_of, start, end, _ = self._begin(kern, self._reads(kern), outputs)
        dus = updated_in_place(self.plan.module, self.plan.buffers, kern.members, outputs)
        if dus is not None:
            self._update_region(kern, name, args, e, ptr_of[outputs[0]], start, end, dus)
            return
        shape, sources = self._loop_space(kern, shape, outputs)

        def element(index: list) -> None:
            # every value before any store: an output may share its pointer with an input
            # it overwrites in place (compiler/planning/buffer_assignment.py)
            values = [e.at(pos, index) for pos in sources]
            for pos, value in zip(outputs, values):
                e.store(ptr_of[pos], shape, value, index)

        if self._transposes(kern) and _tileable(shape):
            tiled_nest(e, shape, start, end, element)
        else:
            nest_updates(e, self.ins, kern.members, shape, start, end, element)
        e.b.ret_void()
        self.steps.append(LoopStep(kernel=kern.name, fn=name, args=args,
                                   extent=extent(shape), work=_inner_work(shape)))

    def _update_region(self, kern: Kernel, name: str, args: list, e: ElementalEmitter,
                       out: ir.Value, start: ir.Value, end: ir.Value, dus: Any) -> None:
        """An in-place dynamic_update_slice: a loop over the update alone, each element
        stored at its place in the operand's buffer (XLA's in-place dynamic-update-slice
        emitter): the work is the update's size, not the buffer's."""
        ushape = self.ins[dus.operands[1]].shape
        starts = index_rules.update_starts(e, dus)      # once, before the loops

        def element(index: list) -> None:
            value = e.at(dus.operands[1], index)
            e.store(out, dus.shape, value,
                    [e.b.add(i, s, flags=("nsw",)) for i, s in zip(index, starts)])

        nest(e, ushape, start, end, element)
        e.b.ret_void()
        self.steps.append(LoopStep(kernel=kern.name, fn=name, args=args,
                                   extent=extent(ushape), work=_inner_work(ushape)))

    def _loop_space(self, kern: Kernel, shape: tuple, outputs: list) -> tuple:
        """(loop shape, the value each output stores). A kernel whose one output is a
        reshape of a value it computes loops over that value's shape instead: the same
        elements in the same row-major order (so the same stores), without the reshape's
        division of each index, and with the value's own innermost dimension innermost
        (im2col's patch matrix: runs of one input row, which vectorize)."""
        if len(outputs) != 1:
            return shape, outputs
        ins = self.ins[outputs[0]]
        if not PRIMITIVES[ins.op].linear or ins.operands[0] not in kern.members:
            return shape, outputs
        inner = self.ins[ins.operands[0]].shape
        if len(inner) <= len(shape) or not inner:
            return shape, outputs
        return inner, [ins.operands[0]]

    def _transposes(self, kern: Kernel) -> bool:
        """Whether the kernel reads some operand across its last dimension."""
        for p in kern.members:
            ins = self.ins[p]
            if ins.op == "transpose" and ins.attrs["permutation"][-1] != len(ins.shape) - 1:
                return True
        return False

    # ---- opaque ops: the loops their stanzas give ---------------------------------------

    def _opaque(self, kern: Kernel) -> None:
        if is_control(self.plan, kern):     # a while/conditional: its sub-programs' step
            if self.control is None:
                raise ValueError(f"{self.ins[kern.members[0]].op}: compiled control flow "
                                 "is not supported for this target")
            self.steps.append(self.control(kern))
            return
        for pos in kern.outputs:
            loops = opaque_loops(self.module, pos)
            if loops is None:
                self.steps.append(library_step(self.module, kern.name, pos))
                continue
            for loop in loops:
                self._opaque_loop(kern, pos, loop)

    def _opaque_loop(self, kern: Kernel, pos: int, loop: Loop) -> None:
        """The stanza's loop body over its space; the range splits over threads unless
        the outer dimension must run in order."""
        operands = list(self.ins[pos].operands)
        name, args, e, ptr_of, start, end, _ = self._begin(kern, operands, [pos])
        pointers = [ptr_of[o] for o in operands]
        nest(e, loop.space, start, end, lambda index: loop.body(e, ptr_of[pos], pointers, index))
        e.b.ret_void()
        if loop.vector_code:
            self.vector_code.add(name)
        self.steps.append(LoopStep(kernel=kern.name, fn=name, args=args,
                                   extent=extent(loop.space),
                                   work=_inner_work(loop.space) * loop.work,
                                   serial=outer_dim(loop.space) in loop.ordered))

    # ---- reductions -------------------------------------------------------------------

    def _reduction(self, kern: Kernel) -> None:
        """The kernel's ReductionPlan (compiler/planning/reduction_plan.py) in CPU loops: rows in
        registers, one element per result; an arg-reduction down columns in one pass in
        memory order; column, full and generic reductions in two phases (per-chunk
        partials, then their combination and the epilogue)."""
        rp = kern.reduction
        roots, late, side = list(rp.roots), list(rp.late), list(rp.side)
        shape, axes = rp.shape, rp.axes
        rows = rp.layout == "row" and not rp.has_arg
        partial = not rows and not rp.has_arg and bool(axes)
        columns = rp.layout in ("column", "generic") and len(roots) == 1 and late == roots \
            and rp.has_arg
        # side outputs are stored as the reduction's loop passes over them (each element
        # computed once, stored and accumulated); the rest get their own pass first
        passing = [p for p in side if self.ins[p].shape == shape] \
            if late and (rows or partial or columns) else []
        apart = [p for p in side if p not in passing]
        if apart:
            self._loops(kern, apart)
        if not late:
            return
        if rows:
            self._row_reduction(kern, roots, late, shape, axes, passing)
        elif columns:
            self._arg_columns(kern, roots[0], shape, axes[0], passing)
        elif rp.layout == "row" or rp.has_arg or not axes:
            self._row_reduction(kern, roots, late, shape, axes, [])
        else:
            self._partial_reduction(kern, roots, late, shape, axes, passing)

    def _arg_columns(self, kern: Kernel, root: int, shape: tuple, axis: int,
                     side: list = ()) -> None:
        """argmax/argmin over an axis that is not the last: one pass in memory order,
        keeping the best value and its index per output element (in partial arrays);
        `side` outputs of the operand's shape are stored in the same pass."""
        ins = self.ins[root]
        src = ins.operands[0]
        dtype = self.ins[src].dtype
        acc = accumulator_dtype(dtype)
        out_shape = ins.shape
        name, args, e, ptr_of, start, end, (pbest, pidx) = self._begin(
            kern, self._reads(kern), side, partials=2)
        visit = _side_writer(e, ptr_of, side, shape) if side else None

        def element(index: list) -> None:
            if visit is not None:
                visit(index)
            b = e.b
            out_index = index[:axis] + index[axis + 1:]
            v = e.at(src, index)
            best = e.load(pbest, out_shape, acc, out_index)
            take = e.arg_better(reducer_of(ins).kind, Value(v.ir, acc), best)
            e.store(pbest, out_shape, Value(b.select(take, v.ir, best.ir), acc), out_index)
            old = e.load(pidx, out_shape, D.int64, out_index)
            e.store(pidx, out_shape, Value(b.select(take, index[axis], old.ir), D.int64), out_index)

        nest(e, shape, start, end, element)
        e.b.ret_void()
        kind = reducer_of(ins).kind
        self.steps.append(PartialStep(
            kernel=kern.name, fn=name, args=args,
            extent=extent(shape), work=_inner_work(shape), per_chunk=False,
            serial=outer_dim(shape) == axis,
            roots=[{"pos": None, "kind": kind, "acc": acc.name, "dtype": acc.name,
                    "init": _plain(identity(kind, acc)), "shape": list(out_shape)},
                   {"pos": root, "kind": "index", "acc": "int64", "init": 0,
                    "dtype": ins.dtype.name, "shape": list(out_shape)}]))

    def _row_reduction(self, kern: Kernel, roots: list, late: list, shape: tuple,
                       axes: tuple, side: list) -> None:
        """Each output element's reduction in registers, then the epilogue at its index."""
        out_shape = tuple(n for d, n in enumerate(shape) if d not in axes)
        name, args, e, ptr_of, start, end, _ = self._begin(kern, self._reads(kern), late + side)
        sums = [p for p in roots if not reducer_of(self.ins[p]).arg]
        stores = [(ptr_of[p], p) for p in side]

        def element(index: list) -> None:
            if sums and axes:
                values = reduce_together(e, sums, shape, axes, index, stores)
                for pos, v in values.items():
                    e.remember(pos, index, v)
            for pos in late:
                own = _index_for(e, self.ins[pos].shape, out_shape, index)
                e.store(ptr_of[pos], self.ins[pos].shape, e.at(pos, own), own)

        nest(e, out_shape, start, end, element)
        e.b.ret_void()
        self.steps.append(LoopStep(kernel=kern.name, fn=name, args=args,
                                   extent=extent(out_shape), work=_inner_work(shape)))

    def _row_kernel(self, kern: Kernel) -> None:
        """One function: for each row of [start, end), one pass over the row per phase
        (its reductions in registers), the row values, then a pass writing the outputs
        of the row space (compiler/planning/row_fusion.py)."""
        first = next(p for p in kern.members if reducer_of(self.ins[p]) is not None)
        space = (self.ins[self.ins[first].operands[0]].shape,
                 tuple(self.ins[first].attrs["axes"]))
        sched, why = row_schedule(self.module, set(kern.members), space)
        if sched is None:
            raise ValueError(f"{kern.name}: not a valid row kernel: {why}")
        shape, axes = space
        rows = outer_shape(space)
        wide = [p for p in kern.outputs if self.ins[p].shape == shape]
        narrow = [p for p in kern.outputs if p not in wide]
        name, args, e, ptr_of, start, end, _ = self._begin(
            kern, self._reads(kern), kern.outputs, emitter=RowEmitter)
        length = num_elements(tuple(shape[a] for a in axes))
        # large outputs: computed into a row buffer, then streamed out (stream_stores.py)
        streamed = self._streamed_rows(e, wide, length)
        # outputs an earlier pass computes anyway: stored there, not computed again
        early = {} if streamed else store_passes(self.module, set(kern.members), sched, wide)
        stores = [] if streamed else [(ptr_of[p], p) for p in wide if p not in early]
        # transcendental values several passes need: computed once, kept for the row
        reused = reused_across_passes(self.module, set(kern.members), sched, kern.outputs,
                                      early)
        scratch = {p: e.b.alloca(storage_type(self.ins[p].dtype), size=length)
                   for p in reused}
        for ptr in scratch.values():
            ptr.align = 64

        # quotients by a row's value: from its reciprocal (row_division.py)
        divisions = row_divisions(self.module, set(kern.members), sched.wide)

        def keep(k: int) -> Any:
            def visit(full: list) -> None:
                for p in reused:
                    if reused[p] == k:
                        e.store(scratch[p], shape[len(rows):], e.at(p, full), full[len(rows):])
            return visit

        def row(index: list) -> None:
            e.row_values, e.scratch = {}, {}
            for k, reductions in enumerate(sched.phases):
                written = [(ptr_of[p], p) for p in wide if early.get(p) == k]
                e.row_values.update(reduce_together(e, reductions, shape, axes, index,
                                                    written, visit=keep(k)))
                e.scratch.update({p: (scratch[p], len(rows)) for p in reused if reused[p] == k})
                for pos, phase in sched.row_values:
                    if phase == k + 1:
                        own = _index_for(e, self.ins[pos].shape, rows, index)
                        e.row_values[pos] = e.at(pos, own)
            if streamed:
                self._prefetch_rows(e, kern, shape, len(rows), index)
            if stores or streamed:
                last_pass(e, divisions, lambda: reduce_together(
                    e, [], shape, axes, index, stores,
                    visit=_row_writer(e, streamed, shape[len(rows):]) if streamed else None))
            for p, buf in streamed.items():
                dst = e.element_ptr(ptr_of[p], shape, self.ins[p].dtype,
                                    list(index) + [const(0)] * len(axes))
                stream_stores.copy_row(e.b, e.llmod, dst, buf,
                                       length * self.ins[p].dtype.itemsize)
            for pos in narrow:
                own = _index_for(e, self.ins[pos].shape, rows, index)
                e.store(ptr_of[pos], self.ins[pos].shape, e.at(pos, own), own)

        nest(e, rows, start, end, row)
        if streamed:
            stream_stores.fence(e.b, e.llmod)
        e.b.ret_void()
        self.steps.append(LoopStep(kernel=kern.name, fn=name, args=args,
                                   extent=extent(rows), work=_inner_work(shape)))

    def _streamed_rows(self, e: ElementalEmitter, wide: list, length: int) -> dict:
        """Row buffers (output position -> a 64-byte aligned buffer of one row, on the
        stack) for a ROW kernel whose row-space outputs are streamed, else {}."""
        if not wide:
            return {}
        sizes = [length * self.ins[p].dtype.itemsize for p in wide]
        total = sum(sizes) * (num_elements(self.ins[wide[0]].shape) // length)
        if not all(stream_stores.applies(total, n) for n in sizes):
            return {}
        out = {}
        for p in wide:
            out[p] = e.b.alloca(storage_type(self.ins[p].dtype), size=length)
            out[p].align = 64
        return out

    def _prefetch_rows(self, e: ElementalEmitter, kern: Kernel, shape: tuple, outer: int,
                       index: list) -> None:
        """Prefetch the rows PREFETCH_ROWS ahead of the inputs read over the row space."""
        ahead = list(index)
        ahead[outer - 1] = e.b.add(ahead[outer - 1], const(stream_stores.PREFETCH_ROWS))
        tail = [const(0)] * (len(shape) - outer)
        for pos in self._reads(kern):
            ins = self.ins[pos]
            if ins.shape == shape and pos in e.buffers:
                # a plain (not inbounds) address: it may lie past the buffer's end
                at = e.b.gep(e.buffers[pos], [e.linear(shape, ahead + tail)],
                             source_etype=storage_type(ins.dtype))
                stream_stores.prefetch_row(e.b, e.llmod, at,
                                           num_elements(shape[outer:]) * ins.dtype.itemsize)

    def _partial_reduction(self, kern: Kernel, roots: list, late: list, shape: tuple,
                           axes: tuple, side: list = ()) -> None:
        """Accumulate chunks of the outermost dimension into partial arrays (see module
        docstring); the epilogue then runs as a loop over the reduced shape. `side`
        (outputs of the reduced shape S) are stored in the same loop, from the element
        code the accumulation uses: one pass over S, each element computed once."""
        out_shape = tuple(n for d, n in enumerate(shape) if d not in axes)
        per_chunk = outer_dim(shape) in axes
        name, args, e, ptr_of, start, end, partials = self._begin(
            kern, self._reads(kern), side, partials=len(roots))
        visit = _side_writer(e, ptr_of, side, shape) if side else None
        kinds = [self.ins[p].attrs["kind"] for p in roots]
        full = all(n == 1 for n in out_shape)
        accs = [full_accumulator(k, self.ins[p].dtype) if full else
                accumulator_dtype(self.ins[p].dtype) for k, p in zip(kinds, roots)]
        finish, finish_args = self._finish_partials(kern, roots, late, out_shape, accs)
        srcs = [self.ins[p].operands[0] for p in roots]
        if all(n == 1 for n in out_shape):
            # a full reduction: registers through the whole chunk, one store at the end
            inits = [e.identity(k, a) for k, a in zip(kinds, accs)]
            lanes = lane_reduce.lanes_for(accs) if llvm_target.opt_tier(
                extent(shape) * max(1, _inner_work(shape))) == 1 and lane_reduce.cheap_body(
                self.ins, set(kern.members), srcs + list(side)) else 1
            if lanes > 1:       # no loop vectorizer at this size: independent accumulators
                finals = lane_reduce.accumulate_lanes(e, srcs, kinds, inits, shape,
                                                      outer_dim(shape), start, end, lanes,
                                                      visit)
            else:
                finals = accumulate_registers(e, srcs, kinds, inits, shape, start, end,
                                              visit)
            for ptr, v in zip(partials, finals):
                e.store(ptr, out_shape, v, [const(0)] * len(out_shape))
        else:
            def element(index: list) -> None:
                if visit is not None:
                    visit(index)
                out_index = [i for d, i in enumerate(index) if d not in axes]
                for ptr, src, kind, acc in zip(partials, srcs, kinds, accs):
                    old = e.load(ptr, out_shape, acc, out_index)
                    v = e.at(src, index)
                    e.store(ptr, out_shape, e.combine(kind, old, Value(v.ir, acc)), out_index)
            nest_updates(e, self.ins, kern.members, shape, start, end, element)
        e.b.ret_void()
        self.steps.append(PartialStep(
            kernel=kern.name, fn=name, args=args,
            extent=extent(shape), work=_inner_work(shape), per_chunk=per_chunk,
            # a full reduction's chunk stores its partial whole: nothing to reset before
            partials_stored=all(n == 1 for n in out_shape),
            finish=finish, finish_args=finish_args, finish_extent=extent(out_shape),
            roots=[{"pos": p, "kind": k, "acc": a.name, "dtype": self.ins[p].dtype.name,
                    "init": _plain(identity(k, a)), "shape": list(out_shape)}
                   for p, k, a in zip(roots, kinds, accs)]))

    def _finish_partials(self, kern: Kernel, roots: list, late: list, out_shape: tuple,
                         accs: list) -> tuple:
        """The second phase of a partial reduction, in the same kernel: for each output
        index, combine the chunks' partials in chunk order, then write the reductions and
        the epilogue there. Arguments: its buffers (the outputs, and what the epilogue
        reads), start and end over the output, the partials, the chunk count. Returns
        (function name, buffer arguments)."""
        name, args, e, ptr_of, start, end, rest = self._begin(
            kern, self._reads(kern), late, partials=len(roots), counts=1)
        partials, chunks = rest[:-1], rest[-1]
        size = num_elements(out_shape)
        kinds = [self.ins[p].attrs["kind"] for p in roots]

        def element(index: list) -> None:
            lin = e.linear(out_shape, index)

            def chunk(k: ir.Value, carried: list) -> list:
                at = e.b.add(e.b.mul(k, const(size)), lin)
                return [e.combine(kind, Value(c, acc), e.load(ptr, (size,), acc, [at])).ir
                        for ptr, kind, acc, c in zip(partials, kinds, accs, carried)]

            inits = [e.identity(k, a).ir for k, a in zip(kinds, accs)]
            finals = counted_loop(e.b, const(0), chunks, inits, chunk, name="chunk",
                                  interleave=False)
            for p, v in zip(roots, finals):
                v = narrow(e, v, self.ins[p].dtype)
                e.remember(p, index, e.round(Value(v, self.ins[p].dtype)))
            for pos in late:
                own = _index_for(e, self.ins[pos].shape, out_shape, index)
                e.store(ptr_of[pos], self.ins[pos].shape, e.at(pos, own), own)

        nest(e, out_shape, start, end, element)
        e.b.ret_void()
        return name, args


class RowEmitter(ElementalEmitter):
    """A ROW kernel's emitter: values kept in the row's scratch buffers (`scratch`:
    position -> (pointer, number of outer dimensions)) are loaded, not recomputed;
    divisions by a row's value (`reciprocals`: divide position -> (divisor, its
    reciprocal)) are computed from the reciprocal."""

    scratch: dict = {}
    reciprocals: dict = {}

    def at(self, pos: int, index: list) -> Value:
        kept = self.scratch.get(pos)
        if kept is None:
            return super().at(pos, index)
        ptr, outer = kept
        ins = self.module.instructions[pos]
        return self.load(ptr, ins.shape[outer:], ins.dtype, index[outer:])

    def _generate(self, pos: int, index: list) -> Value:
        fast = self.reciprocals.get(pos)
        if fast is None:
            return super()._generate(pos, index)
        divisor, recip = fast
        a = self.at(self.module.instructions[pos].operands[0], index)
        return self.round(row_division.quotient(self, a, divisor, recip))


def _side_writer(e: ElementalEmitter, ptr_of: dict, side: list, shape: tuple) -> Any:
    """A reduction loop's visit: each side output's value stored at the loop's index,
    in the element's scope, so that the reduced value reuses the element code (a REDUCTION
    kernel's outputs never share a buffer with what it reads: in place is for LOOP
    kernels, compiler/planning/buffer_assignment.py)."""
    def visit(index: list) -> None:
        values = [e.at(p, index) for p in side]
        for p, v in zip(side, values):
            e.store(ptr_of[p], shape, v, index)
    return visit


def _row_writer(e: RowEmitter, buffers: dict, row_shape: tuple) -> Any:
    """The last pass's visit: each output's value stored into its row buffer."""
    outer = len(e.module.instructions[next(iter(buffers))].shape) - len(row_shape)

    def visit(full: list) -> None:
        for p, buf in buffers.items():
            e.store(buf, row_shape, e.at(p, full), full[outer:])
    return visit


def last_pass(e: RowEmitter, divisions: dict, emit: Any) -> None:
    """The row's last pass, emitted by `emit()`; with divisions by row values, twice: with
    quotients from reciprocals where every divisor of the row is in range, else with
    divides (row_division.py)."""
    if not divisions:
        emit()
        return
    divisors = {pos: e.row_values[v] for pos, v in divisions.items()}
    ok = None
    for d in divisors.values():
        check = row_division.safe(e, d)
        ok = check if ok is None else e.b.and_(ok, check)
    with e.b.if_else(ok) as (fast, exact):
        with fast:
            e.push_scope()
            e.reciprocals = {pos: (d, row_division.reciprocal(e, d))
                             for pos, d in divisors.items()}
            emit()
            e.reciprocals = {}
            e.pop_scope()
        with exact:
            e.push_scope()
            emit()
            e.pop_scope()


# ---- loop nests -----------------------------------------------------------------------

def outer_dim(shape: tuple) -> int:
    """The dimension a kernel's [start, end) range covers: the first one longer than 1
    (leading size-1 dimensions would leave nothing to split between threads)."""
    for d, n in enumerate(shape):
        if n != 1:
            return d
    return 0


def extent(shape: tuple) -> int:
    return shape[outer_dim(shape)] if shape else 1


def nest(e: ElementalEmitter, shape: tuple, start: ir.Value, end: ir.Value, body: Any,
         cuts: tuple = (), inner: Any = None, rows: Any = None, join: bool = False) -> None:
    """for index in shape (the outer dimension in [start, end)): body(index). `cuts`
    split the innermost dimension (when it is not the outer one) into pieces, one loop
    each, whose compile-time range the emitter knows (`index_rules.innermost_cuts`);
    `inner(index)`, if given, runs the innermost dimension instead (update_blocks);
    `rows(length)` -> m runs a piece (or the whole innermost dimension) of that length
    as rows of m (inner_rows); `join`: the two inner dimensions as one loop where nothing
    else splits the last (inner_rows.joinable)."""
    if not shape:
        body([])
        return
    outer = outer_dim(shape)
    last = len(shape) - 1
    split = last != outer and shape[last] != 1
    pieces = inner if split else None
    # the two inner dimensions as one loop where the last is narrow and whole (no pieces,
    # no rows: inner_rows.joined_loop)
    join = join and split and last - 1 != outer and pieces is None and not cuts \
        and (rows is None or rows(shape[last]) == 1)
    if pieces is None and split and not join and (cuts or rows is not None):
        bounds = (0,) + tuple(cuts) + (shape[last],)

        def pieces(index: list) -> None:
            for lo, hi in zip(bounds, bounds[1:]):
                def step(i: ir.Value) -> None:
                    e.ranges[id(i)] = (lo, hi)
                    e.push_scope()
                    body(index + [i])
                    e.pop_scope()
                    del e.ranges[id(i)]
                m = rows(hi - lo) if rows is not None else 1
                inner_rows.rows_loop(e, lo, hi - lo, m, step, name=f"d{last}")

    def level(d: int, index: list) -> None:
        if d != outer and shape[d] == 1:   # no loop: a constant index keeps memo keys equal
            inner = index + [const(0)]
            body(inner) if d + 1 == len(shape) else level(d + 1, inner)
            return
        if d == last and pieces is not None:
            pieces(index)
            return
        if join and d == last - 1:
            def both(q: ir.Value, r: ir.Value) -> None:
                e.push_scope()
                body(index + [q, r])
                e.pop_scope()
            inner_rows.joined_loop(e, shape[d], shape[last], both, name=f"d{d}")
            return
        lo, hi = (start, end) if d == outer else (const(0), const(shape[d]))

        def step(i: ir.Value, carried: list) -> list:
            e.push_scope()
            if d + 1 == len(shape):
                body(index + [i])
            else:
                level(d + 1, index + [i])
            e.pop_scope()
            return []

        counted_loop(e.b, lo, hi, [], step, name=f"d{d}")

    level(0, [])
    del level       # (a cycle through its own cell: the IR it holds is freed now, not by
                    # the collector: module_split.release_ir)


def nest_updates(e: ElementalEmitter, instructions: list, members: list, shape: tuple,
                 start: ir.Value, end: ir.Value, body: Any) -> None:
    """`nest` split at `members`' innermost cuts; where their dynamic_update_slices have
    run-time starts that may fall on blocks (update_blocks.plan), a test at the kernel's
    entry runs the last dimension block by block when they do, the plain nest if not."""
    cuts = innermost_cuts(instructions, members, shape)
    blocks = None if cuts else update_blocks.plan(instructions, members, shape)

    def rows(length: int) -> int:       # rows of m, or columns of m (phases woven)
        return max(inner_rows.row_width(instructions, members, length),
                   inner_rows.column_width(instructions, members, length))
    if blocks is None or outer_dim(shape) == len(shape) - 1:
        nest(e, shape, start, end, body, cuts, rows=rows,
             join=inner_rows.joinable(instructions, members, shape))
        return
    z, updates = blocks
    ok = update_blocks.aligned(e, instructions, z, updates)
    with e.b.if_else(ok) as (in_blocks, plain):
        with in_blocks:
            e.push_scope()
            inner = update_blocks.blocks_inner(e, instructions, z, updates, shape[-1], body,
                                               inner_rows.row_width(instructions, members, z))
            nest(e, shape, start, end, body, inner=inner)
            e.pop_scope()
        with plain:
            e.push_scope()
            nest(e, shape, start, end, body)
            e.pop_scope()


def innermost_cuts(instructions: list, members: list, shape: tuple) -> tuple:
    """Where a loop over `shape` splits its innermost dimension: the `pieces` of each
    member as long as that dimension along its own last one (a concatenate's operand
    boundaries). A cut that no read of the loop's own index meets costs only the split."""
    cuts: set = set()
    for pos in members:
        ins = instructions[pos]
        pieces = PRIMITIVES[ins.op].pieces
        if pieces is None or not shape or not ins.shape or ins.shape[-1] != shape[-1]:
            continue
        cuts.update(c for c in pieces(ins, [instructions[o] for o in ins.operands])
                    if 0 < c < shape[-1])
    return tuple(sorted(cuts))


TILE = 32


def _tileable(shape: tuple) -> bool:
    return len(shape) >= 2 and shape[-1] >= 2 * TILE and shape[-2] >= 2 * TILE


def tiled_nest(e: ElementalEmitter, shape: tuple, start: ir.Value, end: ir.Value,
               body: Any) -> None:
    """Like `nest`, but the two innermost dimensions run in TILE x TILE blocks, so that an
    operand read transposed stays in cache while the output is written contiguously."""
    outer = outer_dim(shape)
    rank = len(shape)
    a, c = rank - 2, rank - 1
    b = e.b

    def blocks(lo: ir.Value, hi: ir.Value, inner: Any, name: str) -> None:
        count = b.udiv(b.add(b.sub(hi, lo), const(TILE - 1)), const(TILE))

        def step(k: ir.Value, carried: list) -> list:
            first = b.add(lo, b.mul(k, const(TILE)))
            last = b.add(first, const(TILE))
            last = b.select(b.icmp_signed("<", last, hi), last, hi)
            inner(first, last)
            return []
        counted_loop(b, const(0), count, [], step, name=name)

    def points(index: list, ra: tuple, rc: tuple) -> None:
        def row(i: ir.Value, carried: list) -> list:
            def col(j: ir.Value, cs: list) -> list:
                e.push_scope()
                body(index + [i, j])
                e.pop_scope()
                return []
            counted_loop(b, rc[0], rc[1], [], col, name="tj")
            return []
        counted_loop(b, ra[0], ra[1], [], row, name="ti")

    def level(d: int, index: list) -> None:
        if d == a:
            ra = (start, end) if outer == a else (const(0), const(shape[a]))
            blocks(ra[0], ra[1], lambda alo, ahi: blocks(
                const(0), const(shape[c]), lambda clo, chi: points(index, (alo, ahi), (clo, chi)),
                "bj"), "bi")
            return
        if d != outer and shape[d] == 1:
            level(d + 1, index + [const(0)])
            return
        lo, hi = (start, end) if d == outer else (const(0), const(shape[d]))

        def step(i: ir.Value, carried: list) -> list:
            e.push_scope()
            level(d + 1, index + [i])
            e.pop_scope()
            return []
        counted_loop(b, lo, hi, [], step, name=f"d{d}")

    level(0, [])


def reduce_together(e: ElementalEmitter, roots: list, shape: tuple, axes: tuple,
                    out_index: list, stores: list = (), visit: Any = None) -> dict:
    """Sibling reductions over the same axes in one loop (the operand is read once);
    `stores` (pointer, position) are written at every index the loop passes, and
    `visit(index)` is called there first."""
    ins = e.module.instructions
    wide = wide_row_sums(shape, axes)
    accs = [Accumulator(ins[p].attrs["kind"],
                        full_accumulator(ins[p].attrs["kind"], ins[p].dtype) if wide
                        else accumulator_dtype(ins[p].dtype)) for p in roots]
    srcs = [ins[p].operands[0] for p in roots]
    kept = iter(out_index)
    full: list = [None if d in axes else next(kept) for d in range(len(shape))]

    def level(k: int, carried: list) -> list:
        if k == len(axes):
            if visit is not None:
                visit(list(full))
            for ptr, pos in stores:
                e.store(ptr, shape, e.at(pos, list(full)), list(full))
            out = []
            for src, acc, c in zip(srcs, accs, unflatten(accs, carried)):
                v = e.at(src, list(full))
                out.extend(acc.step(e, c, Value(v.ir, acc.dtype)))
            return out

        def step(i: ir.Value, cs: list) -> list:
            full[axes[k]] = i
            e.push_scope()
            out = level(k + 1, cs)
            e.pop_scope()
            return out
        return counted_loop(e.b, const(0), const(shape[axes[k]]), carried, step, name=f"r{k}")

    finals = unflatten(accs, level(0, flat_inits(e, accs)))
    del level       # (a cycle through its own cell, see `nest`)
    return {p: e.round(Value(narrow(e, acc.result(e, c).ir, ins[p].dtype), ins[p].dtype))
            for p, acc, c in zip(roots, accs, finals)}


def wide_row_sums(shape: tuple, axes: tuple) -> bool:
    """Whether sums over rows carry float64 (`full_accumulator`): where the loop is not
    vectorized (one accumulator through the whole row: its add's latency bounds the loop
    in either width), and where a row is longer than a row kernel's (bound by memory).
    A vectorized row that fits in cache keeps float32: LLVM's 32 lanes leave each lane
    at most 512 of a row kernel's 16,384 elements, and float64 there cost softmax ~20%."""
    row = num_elements(tuple(shape[a] for a in axes))
    return llvm_target.opt_tier(num_elements(shape)) < 2 or row * 4 > MAX_ROW_BYTES


def narrow(e: ElementalEmitter, v: ir.Value, dtype: D.DType) -> ir.Value:
    """A float32 (or half) sum carried in float64 (`full_accumulator`), back to float32."""
    if v.type == ir.DoubleType() and dtype is not D.float64 and dtype.is_float:
        return e.b.fptrunc(v, ir.FloatType())
    return v


def accumulate_registers(e: ElementalEmitter, srcs: list, kinds: list, inits: list,
                         shape: tuple, start: ir.Value, end: ir.Value,
                         visit: Any = None) -> list:
    """Combine every element of `shape` (the outer dimension in [start, end));
    `visit(index)`, if given, runs at each element first, in its scope."""
    accs = [Accumulator(kind, v.dtype) for kind, v in zip(kinds, inits)]
    outer = outer_dim(shape)

    def level(d: int, index: list, carried: list) -> list:
        lo, hi = (start, end) if d == outer else (const(0), const(shape[d]))

        def step(i: ir.Value, cs: list) -> list:
            e.push_scope()
            if d + 1 == len(shape):
                if visit is not None:
                    visit(index + [i])
                out = []
                for src, acc, c in zip(srcs, accs, unflatten(accs, cs)):
                    v = e.at(src, index + [i])
                    out.extend(acc.step(e, c, Value(v.ir, acc.dtype)))
            else:
                out = level(d + 1, index + [i], cs)
            e.pop_scope()
            return out
        return counted_loop(e.b, lo, hi, carried, step, name=f"a{d}")

    finals = level(0, [], flat_inits(e, accs))
    del level       # (a cycle through its own cell, see `nest`)
    return [acc.result(e, c) for acc, c in zip(accs, unflatten(accs, finals))]


def _index_for(e: ElementalEmitter, shape: tuple, out_shape: tuple, index: list) -> list:
    """An epilogue value's own index for the reduced shape's `index` (same linear index)."""
    if tuple(shape) == tuple(out_shape):
        return index
    ones_dropped = [i for i, n in zip(index, out_shape) if n != 1]
    if [n for n in shape if n != 1] == [n for n in out_shape if n != 1]:
        it = iter(ones_dropped)
        return [const(0) if n == 1 else next(it) for n in shape]
    lin = e.linear(out_shape, index)
    out: list = []
    for n in reversed(shape):
        out.append(e.b.urem(lin, const(n)))
        lin = e.b.udiv(lin, const(n))
    return list(reversed(out))


def _inner_work(shape: tuple) -> int:
    """Elements per unit of the outer dimension (to decide whether to split)."""
    n = 1
    for d in shape[outer_dim(shape) + 1:]:
        n *= d
    return n


def _plain(v: Any) -> Any:
    """A Python scalar for a step's JSON (NumPy scalars are not JSON)."""
    return v.item() if hasattr(v, "item") else v


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def generate(plan: ExecutionPlan, name: str, math: MathTable = CPU_MATH,
             progress: Any = None, control: Any = None, lapack: bool = True,
             prefix: str = "") -> tuple:
    """(LLVM IR text, steps) for every kernel of `plan`; `progress(stage, done, total)` is
    called as kernels are generated; `control(kernel) -> step` makes the step of a
    while/conditional kernel (compiler/codegen/control_steps.py). `lapack`: decompositions
    become generated calls of LAPACK (steps the JIT's device fills with SciPy's
    addresses), else library steps. `prefix`: of every function's name (the objects of a
    library's sub-programs are linked together)."""
    llmod, steps = generate_module(plan, name, math, progress, control, lapack, prefix)
    return str(llmod), steps


def generate_module(plan: ExecutionPlan, name: str, math: MathTable = CPU_MATH,
                    progress: Any = None, control: Any = None, lapack: bool = True,
                    prefix: str = "", repeat: int = 1, ready: Any = None) -> tuple:
    """`generate`, with the llvmlite IR module in place of its text. `repeat`: how many
    times each kernel is expected to run per call (a loop body's: once an iteration),
    which raises its optimization tier with its work. `ready`: see CPUCodegen.run."""
    gen = CPUCodegen(plan, name, math, progress, lapack)
    gen.control = control
    gen.prefix = prefix
    gen.repeat = repeat
    return gen.run(ready)
