"""Ahead-of-time compilation, as tfcompile does: an HLO module becomes a shared library
and a C header, with no Python at run time.

`build_library(module, name, out_dir, inputs)` compiles the module through the compile
entry point for the "cpu-library" target (the CPU device's passes, fusion, buffer plan
and generated kernels, as object code for a shared library), writes a C driver from the
program's plan (devices/cpu/run_plan.py: the one plan an in-process run binds too: the
address table, the jobs of tasks with their barriers, reductions through their partial
arrays), and links both with the system C compiler. The library exports

    int NAME_run(const void *const *inputs, void *const *outputs);   /* 0: done */
    int NAME(const float *x0, ..., float *y0, ...);                   /* the same, typed */

Parameter k of the module is input k. Each job of the plan runs on the native worker
pool's own code (devices/cpu/pool_ir.py: the job runner, worker loop and kernel
trampolines the in-process runtime runs, linked in as object code): on the caller's
thread, or, after `NAME_set_threads(n)`, with large loops split over n threads as
in-process (n - 1 workers started by `set_threads` and stopped by it or when the
library is unloaded). Matrix products call a BLAS named at build time (`find_blas`):
NumPy's bundled OpenBLAS (scipy_openblas) or the system's. Loops and branches
(la.fori_loop, while_loop, scan, cond) become C loops and switches over their sub-plans,
each a static function of the same source. An op whose CPU step is a NumPy reference
(sort, argsort, half-float cumulatives) has no C form: `AOTError` names it.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np

from ...compiler.hlo import dtypes as D
from ...compiler.driver import (CPU, CPU_LIBRARY, compile as compile_program, host_object,
                               target_id)
from ...compiler.hlo.module import Module
from ...compiler.program import ConditionalStep, LibraryStep, Program, WhileStep, sub_program
from . import pool_ir, run_plan


class AOTError(ValueError):
    """The module cannot become a library (an op without a C form, no C compiler)."""


C_TYPES = {D.float32: "float", D.float64: "double", D.int8: "int8_t", D.int16: "int16_t",
           D.int32: "int32_t", D.int64: "int64_t", D.uint8: "uint8_t", D.uint16: "uint16_t",
           D.uint32: "uint32_t", D.uint64: "uint64_t", D.bool_: "uint8_t",
           D.float16: "uint16_t", D.bfloat16: "uint16_t"}
ALIGN = 64


# ---- BLAS named at build time ---------------------------------------------------------

@dataclass
class Blas:
    path: str           # the shared library
    sgemm: str          # its cblas_sgemm / cblas_dgemm symbols
    dgemm: str
    int_type: str       # its integer type (ILP64 builds take int64_t)


def _blas_at(path: str) -> Optional[Blas]:
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for s, d, it in (("scipy_cblas_sgemm64_", "scipy_cblas_dgemm64_", "int64_t"),
                     ("cblas_sgemm64_", "cblas_dgemm64_", "int64_t"),
                     ("scipy_cblas_sgemm", "scipy_cblas_dgemm", "int"),
                     ("cblas_sgemm", "cblas_dgemm", "int")):
        if hasattr(lib, s) and hasattr(lib, d):
            return Blas(os.path.abspath(path), s, d, it)
    return None


def find_blas(path: Optional[str] = None) -> Blas:
    """The BLAS a library links: `path` when given, else the OpenBLAS NumPy ships, else
    the system's openblas/cblas/blas."""
    if path:
        blas = _blas_at(path)
        if blas is None:
            raise AOTError(f"aot: {path} is not a CBLAS library (no cblas_sgemm/dgemm symbol)")
        return blas
    libs = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    candidates = sorted(glob.glob(os.path.join(libs, "libscipy_openblas*.so*")))
    candidates += [p for p in (ctypes.util.find_library(n) for n in ("openblas", "cblas", "blas"))
                   if p]
    for c in candidates:
        blas = _blas_at(c) if os.path.isabs(c) else _blas_at(c)
        if blas is not None:
            return blas
    raise AOTError("aot: no CBLAS library found (NumPy's numpy.libs/libscipy_openblas*.so "
                   "or a system openblas/cblas); name one with blas=PATH")


def find_cc(cc: Optional[str] = None) -> str:
    found = shutil.which(cc or os.environ.get("CC", "cc"))
    if not found:
        raise AOTError(f"aot: no C compiler found ({cc or os.environ.get('CC', 'cc')!r} is not "
                       "on PATH); install one or pass cc=")
    return found


# ---- the C driver ---------------------------------------------------------------------

def _size(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64))


class _Driver:
    """Writes the C source that runs one Program: its plan (run_plan.py, the plan an
    in-process run binds too) as C. The plan's address table is a local array `t` of
    each (sub-)program's function, its entries set from the inputs and the arena; each
    job a static table of tasks (kernel and trampoline symbols, the entries they read)
    run by the native pool's code (`la_job` -> `lzp_run`); matrix products calls of BLAS
    between jobs; loops and branches C loops and switches over their sub-plans' functions."""

    def __init__(self, name: str, view: run_plan.ProgramView, blas: Optional[Blas],
                 parent: Optional["_Driver"] = None,
                 plan: Optional[run_plan.ProgramPlan] = None) -> None:
        self.name, self.view, self.blas = name, view, blas
        self.program = view.program
        # one thread's plan: a C library chooses its thread count at run time, so a
        # loop's range is split then (its task's `split`), partials have one row
        self.plan = plan or run_plan.plan(view, 1, products_in_jobs=False)
        self.values = view.values
        self.where = self.plan.entries()
        # a loop's or branch's sub-program is a C function of its own (`_sub`) in the
        # same source: it shares its parent's declarations, its constants are named apart
        self.tag = "la"
        self.arena = 0
        self.statics: list = []       # C text of constant arrays and task tables
        self.kernels: dict = {}       # function name -> declaration
        self.tramps: set = set()      # trampoline keys (nargs, npartials, ncounts)
        self.functions: list = []     # C functions of the sub-programs
        self.objects: list = []       # the sub-programs' object code
        self.jobs = 0                 # task tables written (their names)
        if parent is not None:
            self.kernels, self.statics, self.tramps = parent.kernels, parent.statics, parent.tramps
            self.functions, self.objects = parent.functions, parent.objects
            self.jobs = parent.jobs

    def reserve(self, nbytes: int) -> int:
        off = self.arena
        self.arena += -(-max(nbytes, 1) // ALIGN) * ALIGN
        return off

    def ptr(self, pos: int) -> str:
        """C expression of the address of a value's buffer."""
        index = self.where.get(pos)
        if index is not None:
            return self.entry(index)
        self._constant(pos)           # (a constant no step reads as a buffer: an output)
        return f"((char *){self.tag}_c{pos})"

    @staticmethod
    def entry(index: int) -> str:
        return f"((char *)(intptr_t)t[{index}])"

    def _constant(self, pos: int) -> None:
        name = f"{self.tag}_c{pos}"
        if any(s.startswith(f"static const unsigned char {name}[") for s in self.statics):
            return
        raw = self.values[pos].constant().tobytes() or b"\0"
        body = ",".join(str(b) for b in raw)
        self.statics.append(f"static const unsigned char {name}[{len(raw)}] "
                            f"__attribute__((aligned({ALIGN}))) = {{{body}}};")

    def declare(self, fn: str, nptrs: int, npartials: int, counts: int = 0) -> None:
        args = ["void *"] * nptrs + ["int64_t", "int64_t"] + ["void *"] * npartials
        args += ["int64_t"] * counts
        self.kernels[fn] = f"extern void {fn}({', '.join(args)});"

    # ---- the table ------------------------------------------------------------------

    def table(self) -> list:
        """The lines that set each entry of the plan's address table."""
        plan = self.plan
        lines = [f"int64_t t[{max(1, plan.size)}];", "(void)t;"]
        at = lambda index, expr: lines.append(f"t[{index}] = (int64_t)(intptr_t)({expr});")
        for i in plan.inputs:
            at(i.index, f"inputs[{i.number}]")
        for c in plan.constants:         # a buffer a kernel may write (a loop's operand)
            self._copied_constant(c.pos, c.index, lines)
        for slot in plan.slots:
            p = slot.members[0]
            if len(slot.members) == 1 and self.values[p].op == "constant":
                self._copied_constant(p, slot.index, lines)
                continue
            at(slot.index, f"arena + {self.reserve(slot.nbytes)}")
        for param_slot in plan.param_slots:  # (a library donates nothing: each its own)
            for index, p in param_slot.entries:
                at(index, f"arena + {self.reserve(self.values[p].nbytes)}")
        for part in plan.partials:
            at(part.index, f"arena + {self.reserve(part.chunks * part.row_bytes)}")
        lines += [f"t[{index}] = {value};" for index, value in plan.counts]
        return lines

    def _copied_constant(self, pos: int, index: int, lines: list) -> None:
        self._constant(pos)
        off, n = self.reserve(self.values[pos].nbytes), self.values[pos].nbytes
        lines += [f"memcpy(arena + {off}, {self.tag}_c{pos}, {n});",
                  f"t[{index}] = (int64_t)(intptr_t)(arena + {off});"]

    # ---- segments -------------------------------------------------------------------

    def segments(self) -> list:
        """The C lines of the plan's segments, each by its writer (a table by type)."""
        lines = []
        for seg in self.plan.segments:
            lines += _SEGMENT_LINES[type(seg)](self, seg)
        return lines

    def _job(self, job: run_plan.JobPlan) -> list:
        """Partials reset, one job of the pool over a static task table, reductions
        without a finish copied out."""
        lines = []
        for n in job.fills:
            part = self.plan.partials[n]
            acc = D.from_name(part.acc)
            one = np.asarray(part.init).astype(acc.np).tobytes()
            count = part.chunks * _size(part.shape)
            lines.append(f"{{ static const unsigned char init[{len(one)}] = "
                         f"{{{','.join(str(b) for b in one)}}}; "
                         f"la_fill({self.entry(part.index)}, init, {len(one)}, {count}); }}")
        name = f"la_job{self.jobs}"
        self.jobs += 1
        rows = [self._task(f"{name}_{k}", task, k in job.go_on) for k, task in enumerate(job.tasks)]
        self.statics.append(f"static const la_task {name}[{len(rows)}] = {{{', '.join(rows)}}};")
        lines.append(f"la_job({name}, {len(rows)}, t);")
        for n in job.copies:
            part = self.plan.partials[n]
            out = self.values[part.pos].dtype
            lines.append(_convert(self.entry(part.index), D.from_name(part.acc),
                                  self.ptr(part.pos), out, _size(part.shape)))
        return lines

    def _task(self, name: str, task: run_plan.Task, go_on: bool) -> str:
        """One task's row of a job's table (its index arrays written as statics)."""
        self.declare(task.fn, len(task.args), len(task.partials), len(task.counts))
        key = (len(task.args), len(task.partials), len(task.counts))
        self.tramps.add(key)
        arrays = {}
        for part, values in (("argv", task.args + task.counts), ("parts", task.partials),
                             ("strides", task.strides),
                             ("ranges", sum(task.ranges, ()) if task.split is None else ())):
            arrays[part] = f"{name}_{part}"
            body = ", ".join(map(str, values)) or "0"
            self.statics.append(f"static const int64_t {name}_{part}[] = {{{body}}};")
        extent, work = task.split or (0, 0)
        ranges = "0" if task.split is not None else arrays["ranges"]
        return (f"{{(void *){pool_ir.trampoline_name(key)}, (void *){task.fn}, {arrays['argv']}, "
                f"{arrays['parts']}, {arrays['strides']}, {ranges}, {len(task.ranges)}, "
                f"{extent}, {work}, {int(go_on)}}}")

    def _call(self, call: run_plan.CallPlan) -> list:
        """A library step outside the jobs: a matrix product through BLAS."""
        s = self.view.steps[call.step]
        ins = self.values[s.pos]
        if s.call != "gemm":
            raise AOTError(f"aot: {ins.op} ({ins.dtype.short}{list(ins.shape)}) runs as a NumPy "
                           "reference on the CPU device and has no C form; it cannot be "
                           "compiled ahead of time (remove it from the function)")
        if ins.dtype not in (D.float32, D.float64):
            raise AOTError(f"aot: dot_general of {ins.dtype.name} has no BLAS routine; AOT "
                           "libraries support float32 and float64 matrix products")
        if self.blas is None:
            raise AOTError("aot: the function has a matrix product but no BLAS was found")
        return self._gemm(ins, s)
    def _gemm(self, ins: Any, s: dict) -> list:
        lhs, rhs = (self.values[o] for o in s.operands)
        a = ins.attrs
        lb, rb = list(a["lhs_batch"]), list(a["rhs_batch"])
        lc, rc = list(a["lhs_contracting"]), list(a["rhs_contracting"])
        lf = [d for d in range(len(lhs.shape)) if d not in lc and d not in lb]
        rf = [d for d in range(len(rhs.shape)) if d not in rc and d not in rb]
        g = s.args           # the compiler's layout: (batch, m, k) @ (batch, k, n)
        b, m, k, n = g["batch"], g["m"], g["k"], g["n"]
        out = self.ptr(s.pos)
        isz = ins.dtype.itemsize
        if b * m * n == 0:
            return []
        if k == 0:
            return [f"memset({out}, 0, {b * m * n * isz});"]
        lines: list = []
        A, ta = self._operand(lhs, s.operands[0], list(g["lhs_perm"]), lb + lc + lf, lines)
        B, tb = self._operand(rhs, s.operands[1], list(g["rhs_perm"]), rb + rf + rc, lines)
        fn = self.blas.sgemm if ins.dtype is D.float32 else self.blas.dgemm
        ctype = C_TYPES[ins.dtype]
        lda, ldb = (m if ta else k), (k if tb else n)
        lines.append(
            f"for (int64_t bi = 0; bi < {b}; bi++) {fn}(101, {112 if ta else 111}, "
            f"{112 if tb else 111}, {m}, {n}, {k}, ({ctype})1, "
            f"(const {ctype} *)({A} + bi * {m * k * isz}), {lda}, "
            f"(const {ctype} *)({B} + bi * {k * n * isz}), {ldb}, ({ctype})0, "
            f"({ctype} *)({out} + bi * {m * n * isz}), {n});")
        return lines

    def _operand(self, x: Any, pos: int, plain: list, flipped: list, lines: list) -> tuple:
        """(address, transposed) of a gemm operand laid out as (batch, rows, cols): read in
        place when its dimensions already are in that order (or with rows and cols
        swapped: BLAS's transpose flag), else copied into that order."""
        ident = list(range(len(x.shape)))
        if plain == ident:
            return self.ptr(pos), False
        if flipped == ident:
            return self.ptr(pos), True
        off = self.reserve(x.nbytes)
        shape = ", ".join(str(d) for d in x.shape) or "0"
        perm = ", ".join(str(d) for d in plain) or "0"
        lines.append(f"{{ static const int64_t shape[] = {{{shape}}}; static const int perm[] = "
                     f"{{{perm}}}; la_permute({self.ptr(pos)}, arena + {off}, {len(x.shape)}, shape, "
                     f"perm, {x.dtype.itemsize}); }}")
        return f"(arena + {off})", False

    # ---- loops and branches: their sub-plans as C functions --------------------------

    def _control(self, control: run_plan.ControlPlan) -> list:
        step = self.view.steps[control.step]
        subs = [None if v is None else (v, p)
                for v, p in zip(self.view._subs[id(step)], control.subs)]
        if isinstance(step, WhileStep):
            return self._while(step, subs)
        return self._conditional(step, subs)

    def _sub(self, sub: tuple) -> tuple:
        """(C function name, arena offset of its temporaries, its driver) of a control
        step's sub-program: `static int f(inputs, outputs, arena)` runs its plan."""
        view, plan = sub
        fname = f"la_sub{len(self.functions)}"
        self.functions.append("")                  # (its place: nested ones come after)
        at = len(self.functions) - 1
        child = _Driver(fname, view, self.blas, parent=self, plan=plan)
        child.tag = f"la_s{at}"
        if view.program.code:
            self.objects.append(view.program.code)
        lines = child.table() + child.segments()
        for k, pos in enumerate(view.outputs):
            nbytes = child.values[pos].nbytes
            if nbytes:
                lines.append(f"memcpy(outputs[{k}], {child.ptr(pos)}, {nbytes});")
        self.jobs = child.jobs
        self.functions[at] = "\n".join(
            [f"static int {fname}(const void *const *inputs, void *const *outputs, char *arena) {{",
             "    (void)inputs; (void)arena;", *("    " + line for line in lines),
             "    return 0;", "}", ""])
        return fname, self.reserve(child.arena), child

    def _while(self, s: WhileStep, subs: list) -> list:
        """The loop in C: the state double-buffered in the arena (the body reads the
        current buffers and writes the next, then they swap), as the CPU device runs it."""
        if s.body is None:
            raise AOTError("aot: a while loop whose body changes none of its state")
        fc, oc, _ = self._sub(subs[0])
        fb, ob, body = self._sub(subs[1])
        vary, ops = s.varying, s.operands
        nbytes = [body.values[body.view.outputs[j]].nbytes for j in range(len(vary))]
        lines = ["{", f"    char *cur[{max(1, len(vary))}], *nxt[{max(1, len(vary))}], *sw;",
                 "    unsigned char go = 0;"]
        for j, k in enumerate(vary):
            a, b = self.reserve(nbytes[j]), self.reserve(nbytes[j])
            lines += [f"    cur[{j}] = arena + {a}; nxt[{j}] = arena + {b};",
                      f"    memcpy(cur[{j}], {self.ptr(ops[k])}, {nbytes[j]});"]
        state = [f"cur[{vary.index(k)}]" if k in vary else self.ptr(o) for k, o in enumerate(ops)]
        lines += [f"    const void *in[{len(ops)}] = {{{', '.join(state)}}};",
                  "    void *pred[1] = {&go};",
                  f"    {fc}(in, pred, arena + {oc});",
                  "    while (go) {"]
        lines += [f"        in[{k}] = cur[{j}];" for j, k in enumerate(vary)]
        outs = ", ".join([f"nxt[{j}]" for j in range(len(vary))] + ["&go"])
        lines += [f"        void *out[{len(vary) + 1}] = {{{outs}}};",
                  f"        {fb}(in, out, arena + {ob});"]
        lines += [f"        sw = cur[{j}]; cur[{j}] = nxt[{j}]; nxt[{j}] = sw;"
                  for j in range(len(vary))]
        lines.append("    }")
        for p, k in s.outputs:
            src = f"cur[{vary.index(k)}]" if k in vary else self.ptr(ops[k])
            lines.append(f"    memcpy({self.ptr(p)}, {src}, {self.values[p].nbytes});")
        return lines + ["}"]

    def _conditional(self, s: ConditionalStep, subs: list) -> list:
        """The branch the index names (clamped), on the operands, into the outputs."""
        subs = [self._sub(b) for b in subs]
        first = subs[0][2]
        outs = [None] * len(first.view.outputs)
        for p, j in s.outputs:
            outs[j] = self.ptr(p)
        for j, o in enumerate(outs):       # results nothing reads: scratch
            if o is None:
                outs[j] = f"(arena + {self.reserve(first.values[first.view.outputs[j]].nbytes)})"
        args = [self.ptr(o) for o in s.operands[1:]] or ["0"]
        last = len(subs) - 1
        lines = ["{", f"    int32_t k = *(const int32_t *){self.ptr(s.operands[0])};",
                 f"    k = k < 0 ? 0 : (k > {last} ? {last} : k);",
                 f"    const void *in[] = {{{', '.join(args)}}};",
                 f"    void *out[] = {{{', '.join(outs) or '0'}}};",
                 "    switch (k) {"]
        lines += [f"    case {k}: {f}(in, out, arena + {off}); break;"
                  for k, (f, off, _) in enumerate(subs)]
        return lines + ["    }", "}"]


    # ---- the whole source ---------------------------------------------------------

    def source(self, inputs: list, outputs: list) -> str:
        body = self.table() + self.segments()
        for k, pos in enumerate(self.view.outputs):
            nbytes = self.values[pos].nbytes
            if nbytes:
                body.append(f"memcpy(outputs[{k}], {self.ptr(pos)}, {nbytes});")
        blas = ""
        if self.blas is not None:
            it = self.blas.int_type
            for fn, t in ((self.blas.sgemm, "float"), (self.blas.dgemm, "double")):
                blas += (f"extern void {fn}(int, int, int, {it}, {it}, {it}, {t}, const {t} *, "
                         f"{it}, const {t} *, {it}, {t}, {t} *, {it});\n")
        tramps = [f"extern void {pool_ir.trampoline_name(k)}(void *, const int64_t *, int64_t, "
                  "int64_t, void *, const int64_t *, int64_t, const int64_t *);"
                  for k in sorted(self.tramps)]
        typed_in = [f"const {C_TYPES[d]} *x{k}" for k, (_, d) in enumerate(inputs)]
        typed_out = [f"{C_TYPES[d]} *y{k}" for k, (_, d) in enumerate(outputs)]
        ins_list = ", ".join(f"x{k}" for k in range(len(inputs))) or "0"
        outs_list = ", ".join(f"y{k}" for k in range(len(outputs))) or "0"
        n = self.name
        return "\n".join([
            f"/* {n}: generated by lazyarray.aot; runs the compiled module's plan. */",
            "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
            "#include <pthread.h>", "#include <sched.h>",
            f'#include "{n}.h"', "", _HELPERS, parallel_source(), blas, *self.kernels.values(),
            *tramps, "", *self.statics, "",
            *(f"static int la_sub{k}(const void *const *, void *const *, char *);"
              for k in range(len(self.functions))), "", *self.functions,
            f"size_t {n}_temp_bytes(void) {{ return {self.arena}; }}", "",
            f"void {n}_set_threads(int threads) {{ la_set_threads(threads); }}",
            "",
            f"int {n}_run(const void *const *inputs, void *const *outputs) {{",
            f"    char *arena = (char *)aligned_alloc({ALIGN}, {max(self.arena, ALIGN)});",
            "    if (!arena) return -1;",
            "    (void)inputs;",
            *("    " + line for line in body),
            "    free(arena);", "    return 0;", "}", "",
            f"int {n}({', '.join(typed_in + typed_out) or 'void'}) {{",
            f"    const void *ins[] = {{{ins_list}}};",
            f"    void *outs[] = {{{outs_list}}};",
            f"    return {n}_run(ins, outs);", "}", ""])


# plan segment class -> the _Driver method writing its C lines
_SEGMENT_LINES = {run_plan.JobPlan: _Driver._job, run_plan.CallPlan: _Driver._call,
                  run_plan.ControlPlan: _Driver._control}


def _convert(src: str, acc: D.DType, dst: str, out: D.DType, count: int) -> str:
    """C statement: `count` values of dtype `acc` at src, converted to `out` at dst."""
    if acc is out:
        return f"memcpy({dst}, {src}, {count * acc.itemsize});"
    if acc is D.float32 and out in (D.float16, D.bfloat16):
        fn = "la_f32_to_f16" if out is D.float16 else "la_f32_to_bf16"
        return (f"for (int64_t i = 0; i < {count}; i++) ((uint16_t *){dst})[i] = "
                f"{fn}(((const float *){src})[i]);")
    if acc in (D.float16, D.bfloat16) or out in (D.float16, D.bfloat16):
        raise AOTError(f"aot: no C conversion from {acc.name} to {out.name}")
    value = f"((const {C_TYPES[acc]} *){src})[i]"
    if out is D.bool_:
        value = f"({value} != 0)"
    return (f"for (int64_t i = 0; i < {count}; i++) (({C_TYPES[out]} *){dst})[i] = "
            f"({C_TYPES[out]}){value};")


def parallel_source() -> str:
    """The C side of the native pool (`la_job`, `la_set_threads`): each job of the plan is
    a job of the pool's job runner (`lzp_run`), its chunks taken by the caller and the
    workers (`lzp_worker`), with the word layout the pool's code reads (pool_ir.LAYOUT);
    a loop's range is split for the thread count as in-process (run_plan.split_ranges)."""
    L = pool_ir.LAYOUT
    return _PARALLEL % dict(
        state_words=L.STATE_WORDS, mutex=L.STATE_MUTEX, cond=L.STATE_COND, spin=L.STATE_SPIN,
        shutdown=L.STATE_SHUTDOWN, task_words=L.TASK_WORDS, tramp=L.TASK_TRAMP, fn=L.TASK_FN,
        argv=L.TASK_ARGV, ranges=L.TASK_RANGES, chunks=L.TASK_CHUNKS,
        partials=L.TASK_PARTIALS, strides=L.TASK_STRIDES, go_on=L.TASK_GO_ON,
        spin_rounds=SPIN_ROUNDS, split=run_plan.SPLIT_ELEMENTS,
        per_thread=run_plan.CHUNKS_PER_THREAD)


SPIN_ROUNDS = 2000          # as the in-process pool's workers (native_pool.SPIN_ROUNDS)

_PARALLEL = r"""
/* the native pool's code (pool_ir.py), linked in as object code */
extern void lzp_run(int64_t *state, int64_t *job, int64_t use_workers);
extern void *lzp_worker(void *state);

static int la_threads = 1;      /* NAME_set_threads: 1 runs every job on the caller's thread */
static int64_t la_state[%(state_words)d] __attribute__((aligned(64)));
static pthread_t la_workers[255];
static int la_started = 0;      /* workers running */
static int la_busy = 0;         /* a run uses the workers (another runs alone meanwhile) */

static void la_stop(void) {
    if (!la_started) return;
    pthread_mutex_t *m = (pthread_mutex_t *)(la_state + %(mutex)d);
    pthread_mutex_lock(m);
    __atomic_store_n(&la_state[%(shutdown)d], 1, __ATOMIC_SEQ_CST);
    pthread_cond_broadcast((pthread_cond_t *)(la_state + %(cond)d));
    pthread_mutex_unlock(m);
    for (int k = 0; k < la_started; k++) pthread_join(la_workers[k], 0);
    la_started = 0;
}

/* no worker may outlive the library's code */
__attribute__((destructor)) static void la_unload(void) { la_stop(); }

static void la_set_threads(int threads) {
    while (__atomic_exchange_n(&la_busy, 1, __ATOMIC_ACQUIRE)) sched_yield();
    la_stop();
    la_threads = threads < 1 ? 1 : threads;
    memset(la_state, 0, sizeof la_state);
    if (la_threads > 1 && !pthread_mutex_init((pthread_mutex_t *)(la_state + %(mutex)d), 0)
            && !pthread_cond_init((pthread_cond_t *)(la_state + %(cond)d), 0)) {
        la_state[%(spin)d] = %(spin_rounds)d;
        for (int k = 0; k < la_threads - 1 && k < 255; k++) {
            if (pthread_create(&la_workers[la_started], 0, lzp_worker, la_state)) break;
            la_started++;     /* fewer workers than asked: the others share the work */
        }
    }
    __atomic_store_n(&la_busy, 0, __ATOMIC_RELEASE);
}

/* a task of the plan: its trampoline and kernel, the table entries it reads (argv,
   partials), its chunk ranges, or (ranges 0) a loop's extent and work, split per run */
typedef struct {
    void *tramp, *fn;
    const int64_t *argv, *partials, *strides, *ranges;
    int64_t chunks, extent, work, go_on;
} la_task;

/* run_plan.split_ranges: the chunks of a loop's range on `threads` threads */
static int64_t la_chunks(int64_t extent, int64_t work, int threads) {
    if (threads <= 1 || extent < 2 || extent * (work > 1 ? work : 1) < %(split)d) return 1;
    int64_t parts = (int64_t)threads * (extent * work >= 64 * (int64_t)%(split)d ? %(per_thread)d : 1);
    return parts < extent ? parts : extent;
}

/* one job of the pool: the tasks in order, a barrier after each not marked go_on */
static void la_job(const la_task *tasks, int n, int64_t *table) {
    int threads = la_threads, parallel = 0;
    int64_t total = 0;
    for (int k = 0; k < n; k++)
        total += tasks[k].ranges ? 0 : la_chunks(tasks[k].extent, tasks[k].work, threads);
    int64_t words[n * %(task_words)d], counters[2 * n], ranges[2 * total + 2], at = 0;
    memset(words, 0, sizeof words);
    memset(counters, 0, sizeof counters);
    for (int k = 0; k < n; k++) {
        const la_task *task = &tasks[k];
        int64_t *w = words + k * %(task_words)d, chunks = task->chunks;
        const int64_t *r = task->ranges;
        if (!r) {
            chunks = la_chunks(task->extent, task->work, threads);
            for (int64_t c = 0; c < chunks; c++) {
                ranges[at + 2 * c] = task->extent * c / chunks;
                ranges[at + 2 * c + 1] = task->extent * (c + 1) / chunks;
            }
            r = ranges + at;
            at += 2 * chunks;
        }
        w[%(tramp)d] = (int64_t)(intptr_t)task->tramp;
        w[%(fn)d] = (int64_t)(intptr_t)task->fn;
        w[%(argv)d] = (int64_t)(intptr_t)task->argv;
        w[%(partials)d] = (int64_t)(intptr_t)task->partials;
        w[%(strides)d] = (int64_t)(intptr_t)task->strides;
        w[%(ranges)d] = (int64_t)(intptr_t)r;
        w[%(chunks)d] = chunks;
        w[%(go_on)d] = task->go_on;
        parallel |= chunks > 1 || task->go_on;
    }
    int64_t job[4] = {n, (int64_t)(intptr_t)words, (int64_t)(intptr_t)counters,
                      (int64_t)(intptr_t)table};
    /* one run at a time uses the workers; another runs its job alone, as in-process */
    int shared = parallel && !__atomic_exchange_n(&la_busy, 1, __ATOMIC_ACQUIRE);
    if (shared && !la_started) { __atomic_store_n(&la_busy, 0, __ATOMIC_RELEASE); shared = 0; }
    lzp_run(shared ? la_state : 0, job, shared);
    if (shared) __atomic_store_n(&la_busy, 0, __ATOMIC_RELEASE);
}
"""

_HELPERS = r"""
static void la_fill(char *dst, const unsigned char *one, size_t size, int64_t count) {
    for (int64_t i = 0; i < count; i++) memcpy(dst + i * size, one, size);
}

/* dst = src transposed by perm (dst dimension d is src dimension perm[d]) */
static void la_permute(const char *src, char *dst, int nd, const int64_t *shape,
                       const int *perm, size_t size) {
    int64_t stride[16], index[16], total = 1;
    for (int d = nd - 1; d >= 0; d--) { stride[d] = total; total *= shape[d]; }
    for (int d = 0; d < nd; d++) index[d] = 0;
    for (int64_t t = 0; t < total; t++) {
        int64_t off = 0;
        for (int d = 0; d < nd; d++) off += index[d] * stride[perm[d]];
        memcpy(dst + t * size, src + off * size, size);
        for (int d = nd - 1; d >= 0; d--) {
            if (++index[d] < shape[perm[d]]) break;
            index[d] = 0;
        }
    }
}

static uint16_t la_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);                 /* nearest even */
}

static uint16_t la_f32_to_f16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);                     /* NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                    /* overflow */
    if (a < 0x38800000u) {                                                       /* subnormal */
        if (a < 0x33000000u) return (uint16_t)sign;
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(a >> 23) + 14;
        uint32_t r = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rest > half || (rest == half && (r & 1u))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u;                                                /* rebias */
    uint32_t h = r >> 13, rest = r & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
"""


# ---- building ---------------------------------------------------------------------------

def _type_text(shape: Sequence[int], dtype: D.DType) -> str:
    return f"{dtype.short}[{','.join(map(str, shape))}]"


def header(name: str, inputs: list, outputs: list) -> str:
    lines = [f"/* {name}: an ahead-of-time compiled lazyarray function (no Python needed).",
             " *",
             f" * int {name}_run(const void *const *inputs, void *const *outputs);",
             " *   inputs[k] / outputs[k]: C-contiguous buffers of the types below.",
             " *   Returns 0, or -1 when the temporary buffers could not be allocated.",
             " *   Thread-safe: each call allocates its own temporaries.", " *"]
    for k, (shape, dtype) in enumerate(inputs):
        lines.append(f" * input {k}: {_type_text(shape, dtype)}")
    for k, (shape, dtype) in enumerate(outputs):
        lines.append(f" * output {k}: {_type_text(shape, dtype)}")
    lines += [" */", f"#ifndef LA_AOT_{name.upper()}_H",
              f"#define LA_AOT_{name.upper()}_H", "#include <stddef.h>",
              "#include <stdint.h>", "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
              f"#define {name.upper()}_NUM_INPUTS {len(inputs)}",
              f"#define {name.upper()}_NUM_OUTPUTS {len(outputs)}"]
    for kind, items in (("INPUT", inputs), ("OUTPUT", outputs)):
        for k, (shape, dtype) in enumerate(items):
            lines.append(f"#define {name.upper()}_{kind}{k}_SIZE {_size(shape)}  "
                         f"/* elements of {C_TYPES[dtype]} */")
    typed = [f"const {C_TYPES[d]} *x{k}" for k, (_, d) in enumerate(inputs)]
    typed += [f"{C_TYPES[d]} *y{k}" for k, (_, d) in enumerate(outputs)]
    lines += ["", f"int {name}_run(const void *const *inputs, void *const *outputs);",
              f"int {name}({', '.join(typed) or 'void'});",
              f"size_t {name}_temp_bytes(void);",
              f"void {name}_set_threads(int threads);  /* default 1: the caller's thread */",
              "", "#ifdef __cplusplus", "}", "#endif",
              "#endif", ""]
    return "\n".join(lines)


@dataclass
class Library:
    name: str
    path: str               # the shared library
    header: str             # its C header
    inputs: list            # (shape, dtype) per input
    outputs: list           # (shape, dtype) per output
    blas: Optional[str]     # the BLAS it links, if any

    def load(self) -> "LoadedLibrary":
        return LoadedLibrary(self)


class LoadedLibrary:
    """The library opened with ctypes (for tests and Python callers; C needs none)."""

    def __init__(self, lib: Library) -> None:
        self.lib = lib
        self._dll = ctypes.CDLL(lib.path)
        self._run = getattr(self._dll, f"{lib.name}_run")
        self._run.restype = ctypes.c_int

    def set_threads(self, n: int) -> None:
        """Split large loop steps over n threads from now on (1: the caller's thread)."""
        getattr(self._dll, f"{self.lib.name}_set_threads")(ctypes.c_int(int(n)))

    def __call__(self, *arrays: Any) -> list:
        if len(arrays) != len(self.lib.inputs):
            raise ValueError(f"{self.lib.name}: {len(arrays)} inputs given, "
                             f"{len(self.lib.inputs)} expected")
        ins = [np.ascontiguousarray(np.asarray(a, dtype=d.np).reshape(s))
               for a, (s, d) in zip(arrays, self.lib.inputs)]
        outs = [np.empty(s, d.np) for s, d in self.lib.outputs]
        in_ptrs = (ctypes.c_void_p * max(1, len(ins)))(*[a.ctypes.data for a in ins])
        out_ptrs = (ctypes.c_void_p * max(1, len(outs)))(*[a.ctypes.data for a in outs])
        if self._run(in_ptrs, out_ptrs) != 0:
            raise MemoryError(f"{self.lib.name}: could not allocate its temporaries")
        return outs


def _all_steps(program: Program) -> list:
    """The program's steps and those of its loops' and branches' sub-programs."""
    out = []
    for s in program.steps:
        out.append(s)
        subs = s.sub_programs() if isinstance(s, (WhileStep, ConditionalStep)) else []
        for data in subs:
            if data is not None:
                out += _all_steps(sub_program(data))
    return out


def pool_object() -> bytes:
    """The native pool's code (pool_ir.PoolIR) as position-independent object code for a
    shared library."""
    return host_object(pool_ir.PoolIR(target_id(CPU)[0]).text(), "lazyarray_pool", library=True)


def trampolines_object(keys: list) -> bytes:
    """The pool's trampolines for `keys` ((nargs, npartials, ncounts) each, named by
    pool_ir.trampoline_name) as object code for a shared library."""
    ir_text = pool_ir.trampolines_ir(target_id(CPU)[0], keys)
    return host_object(ir_text, "lazyarray_trampolines", optimize=False, library=True)


def build_library(module: Module, name: str, out_dir: str, inputs: list,
                  blas: Optional[str] = None, cc: Optional[str] = None) -> Library:
    """Compile `module` (parameter k = input k, of type inputs[k] = (shape, dtype)) into
    `out_dir/lib<name>.so` and `out_dir/<name>.h`."""
    if not name.isidentifier():
        raise AOTError(f"aot: the library name {name!r} must be a C identifier")
    compiler = find_cc(cc)
    try:
        program = compile_program(module, CPU_LIBRARY)
    except ValueError as e:     # the compiler refuses what has no C form (control flow)
        if str(e).startswith("ahead-of-time compilation"):
            raise AOTError(f"aot: {e}") from None
        raise
    values = program.value_table()
    needs_blas = any(isinstance(s, LibraryStep) and s.call == "gemm"
                     for s in _all_steps(program))
    found = find_blas(blas) if needs_blas else None
    outputs = [(values[p].shape, values[p].dtype) for p in program.outputs]
    driver = _Driver(name, run_plan.ProgramView(program), found)
    source = driver.source(inputs, outputs)   # AOTError: no C form
    obj = program.code
    os.makedirs(out_dir, exist_ok=True)
    paths = {k: os.path.join(out_dir, f) for k, f in (
        ("c", f"{name}.c"), ("h", f"{name}.h"), ("o", f"{name}_kernels.o"),
        ("map", f"{name}.map"), ("so", f"lib{name}.so"), ("pool", f"{name}_pool.o"),
        ("tramps", f"{name}_trampolines.o"))}
    with open(paths["c"], "w") as f:
        f.write(source)
    with open(paths["h"], "w") as f:
        f.write(header(name, inputs, outputs))
    if obj:
        with open(paths["o"], "wb") as f:
            f.write(obj)
    with open(paths["pool"], "wb") as f:    # the native pool's job runner and workers
        f.write(pool_object())
    with open(paths["tramps"], "wb") as f:  # ... and the trampolines its tasks call
        f.write(trampolines_object(sorted(driver.tramps)))
    subs = []                           # the loops' and branches' sub-programs' code
    for k, code in enumerate(driver.objects):
        subs.append(os.path.join(out_dir, f"{name}_sub{k}.o"))
        with open(subs[-1], "wb") as f:
            f.write(code)
    with open(paths["map"], "w") as f:      # only the entry points are exported
        f.write(f"{{ global: {name}; {name}_run; {name}_temp_bytes; {name}_set_threads; "
                "local: *; };\n")
    cmd = [compiler, "-O2", "-std=c11", "-shared", "-fPIC", "-o", paths["so"], paths["c"]]
    cmd += [paths["o"]] if obj else []          # no object when every step is a library call
    cmd += subs + [paths["pool"], paths["tramps"]]
    cmd += [f"-Wl,--version-script={paths['map']}", "-Wl,-Bsymbolic"]
    if found is not None:
        cmd += [found.path, f"-Wl,-rpath,{os.path.dirname(found.path)}"]
    cmd += ["-lm", "-pthread"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise AOTError(f"aot: the C compiler failed ({' '.join(cmd)}):\n{done.stderr[-4000:]}")
    return Library(name, paths["so"], paths["h"], list(inputs), outputs,
                   found.path if found else None)
