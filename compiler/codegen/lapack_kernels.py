"""Batched LAPACK kernels for the CPU: one generated function per decomposition step,
calling LAPACK for each matrix of its range with no Python between the matrices.

The function has the CPU kernels' signature (`f(buf0..bufN, start, end)`, cpu_kernels.py)
with the range over the matrices of the batch, so the native pool splits a batch over its
threads as it splits any loop, and a cached program of such steps runs in one native call.

The routines are SciPy's `scipy.linalg.cython_lapack` C entry points: Fortran's
conventions (every argument by pointer, matrices column-major). The code reads their
addresses from a table in the module's data, `<fn>_lapack` (one pointer per name in the
step's "routines"), which the device fills when it loads the code (devices/cpu/lapack.py):
object code in the disk cache never holds an address of one process. Without SciPy the
device runs the step's "host" fallback (the stanza's NumPy reference) instead.

A routine reporting failure (info != 0) is recorded in `<fn>_status` as [matrix + 1, info,
check]: the first failure wins (compare-and-swap), and the device raises the check's
message ("is singular", naming the op and the input's shape) once the run is over. Work
space is malloc'd once per call (one chunk of the batch), sized by LAPACK's own query.

What each decomposition calls is in its stanza's `LibraryCall.lapack` (compiler/
primitives/lapack_calls.py), written with the helpers of `LapackKernel`.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import llvmlite.ir as ir

from ..hlo import dtypes as D
from ..primitive import PRIMITIVES
from .llvm_types import F32, F64, I8, I32, I64, PTR, storage_type
from .loops import const, counted_loop

PREFIX = {D.float32: "s", D.float64: "d", D.complex64: "c", D.complex128: "z"}
STATUS_WORDS = 3
_SEQ = "monotonic"


def _i32(v: int) -> ir.Constant:
    return ir.Constant(I32, int(v))


class _Callee:
    """A routine's address from the table, called with an explicit function type
    (llvmlite reads a call's type from its callee, which an opaque `ptr` does not carry)."""

    def __init__(self, value: ir.Value, nargs: int) -> None:
        self.value, self.type = value, value.type
        self.function_type = ir.FunctionType(ir.VoidType(), [PTR] * nargs)

    def get_reference(self) -> str:
        return self.value.get_reference()


class LapackKernel:
    """The function being built: the prologue (scalars, work space), the loop over the
    matrices start..end-1, and the epilogue (work space freed)."""

    def __init__(self, llmod: ir.Module, fn_name: str, b: ir.IRBuilder, ins: Any,
                 operands: list, out_ptr: ir.Value, operand_ptrs: list, start: ir.Value,
                 end: ir.Value) -> None:
        self.llmod, self.fn_name, self.b = llmod, fn_name, b
        self.ins, self.operands = ins, operands
        self.dtype: D.DType = operands[0].dtype
        self.complex = self.dtype.is_complex
        self.real = D.real_dtype(self.dtype) if self.complex else self.dtype
        self.T = storage_type(self.dtype)
        self.R = storage_type(self.real)
        self.routines: list = []
        self.checks: list = []
        self._out, self._ptrs = out_ptr, operand_ptrs
        self._start, self._end = start, end
        self._frees: list = []
        self.table = ir.GlobalVariable(llmod, ir.ArrayType(PTR, 16), fn_name + "_lapack")
        self.table.initializer = ir.Constant(self.table.value_type, None)
        self.status = ir.GlobalVariable(llmod, ir.ArrayType(I64, STATUS_WORDS), fn_name + "_status")
        self.status.initializer = ir.Constant(self.status.value_type, None)
        self.info = self.b.alloca(I32, name="info")
        self._index: Optional[ir.Value] = None

    # ---- scalars and memory ------------------------------------------------------------

    def int(self, v: Any) -> ir.Value:
        """A pointer to an int32 holding v (a Python int or an i32 value)."""
        p = self.b.alloca(I32)
        self.b.store(v if isinstance(v, ir.Value) else _i32(v), p)
        return p

    def char(self, c: str) -> ir.Value:
        p = self.b.alloca(I8)
        self.b.store(ir.Constant(I8, ord(c)), p)
        return p

    def alloc(self, kind: str, count: Any) -> ir.Value:
        """malloc'd memory for `count` elements of "T" (the matrix dtype), "R" (its real
        part) or "int" (int32), freed when the call ends."""
        size = {"T": self.dtype.itemsize, "R": self.real.itemsize, "int": 4}[kind]
        n = count if isinstance(count, ir.Value) else const(max(1, int(count)))
        if n.type != I64:
            n = self.b.sext(n, I64)
        p = self.b.call(_libc(self.llmod, "malloc", PTR, [I64]), [self.b.mul(n, const(size))])
        self._frees.append(p)
        return p

    def query(self, routine: str, args: list, work_slots: dict) -> dict:
        """Call `routine` as a work-space query: `work_slots` maps argument positions to the
        kind ("T", "R", "int") of the array whose size LAPACK writes into its first
        element; its size argument (the next position) is -1. Returns position -> the
        size as an i32."""
        full = list(args)
        cells = {}
        for pos, kind in work_slots.items():
            ty = {"T": self.T, "R": self.R, "int": I32}[kind]
            cells[pos] = (self.b.alloca(ty), kind)
            full[pos] = cells[pos][0]
            full[pos + 1] = self.int(-1)
        self.call(routine, *full)
        sizes = {}
        for pos, (cell, kind) in cells.items():
            if kind == "int":
                sizes[pos] = self.b.load(cell, typ=I32)
                continue
            first = self.b.gep(cell, [const(0)], source_etype=I8)
            x = self.b.load(first, typ=self.R)
            x = self.b.fpext(x, F64) if self.R == F32 else x
            # float32 work sizes round down for large values: a little more is harmless
            x = self.b.fadd(self.b.fmul(x, ir.Constant(F64, 1.0001)), ir.Constant(F64, 16.0))
            sizes[pos] = self.b.fptosi(x, I32)
        return sizes

    def at(self, ptr: ir.Value, index: Any, kind: str = "T") -> ir.Value:
        ty = self.T if kind == "T" else (self.R if kind == "R" else I32)
        idx = index if isinstance(index, ir.Value) else const(index)
        return self.b.gep(ptr, [idx], source_etype=ty)

    # ---- routines ----------------------------------------------------------------------

    def name(self, real: str, complex_: str) -> str:
        """The routine's base name for the dtype where real and complex ones differ
        (syevd / heevd)."""
        return complex_ if self.complex else real

    def call(self, routine: str, *args: ir.Value) -> None:
        """LAPACK's `routine` (a base name: the dtype's prefix makes dpotrf of potrf)."""
        full = PREFIX[self.dtype] + routine
        if full not in self.routines:
            self.routines.append(full)
        slot = self.b.gep(_opaque(self.b, self.table), [const(self.routines.index(full))],
                          source_etype=PTR)
        fn = self.b.load(slot, typ=PTR)
        self.b.call(_Callee(fn, len(args)), list(args))

    def check(self, what: str, routine: str = "") -> None:
        """After a routine: record a failure (info != 0) of this matrix, `what` naming it
        ("is singular"); the rest of the matrix's work still runs on what LAPACK left (its
        result is never handed out: the device raises)."""
        code = len(self.checks)
        self.checks.append([routine or (self.routines[-1] if self.routines else ""), what])
        info = self.b.load(self.info, typ=I32)
        with self.b.if_then(self.b.icmp_signed("!=", info, _i32(0)), likely=False):
            status = _opaque(self.b, self.status)
            word0 = self.b.gep(status, [const(0)], source_etype=I64)
            won = self.b.extract_value(self.b.cmpxchg(word0, const(0), self.b.add(self._index, const(1)),
                                                      "seq_cst", _SEQ), 1)
            with self.b.if_then(won):
                for k, v in ((1, self.b.sext(info, I64)), (2, const(code))):
                    word = self.b.gep(status, [const(k)], source_etype=I64)
                    self.b.atomic_rmw("xchg", word, v, _SEQ)

    # ---- the loop over matrices ----------------------------------------------------------

    def each_matrix(self, body: Callable[..., None]) -> None:
        """The loop over the matrices of the range: body(out, *operands) with the
        pointers of one matrix (its number, for failure records, in `self._index`);
        then the work space is freed."""
        nbatch = len(self.operands[0].shape) - 2
        strides = [_elements(x.shape[nbatch:]) for x in [self.ins] + list(self.operands)]
        dtypes = [self.ins.dtype] + [x.dtype for x in self.operands]

        def one(i: ir.Value, _: list) -> list:
            self._index = i
            ptrs = [self.b.gep(p, [self.b.mul(i, const(s * dt.itemsize))], source_etype=I8)
                    for p, s, dt in zip([self._out] + list(self._ptrs), strides, dtypes)]
            body(*ptrs)
            return []
        counted_loop(self.b, self._start, self._end, [], one, name="matrix", interleave=False)
        free = _libc(self.llmod, "free", ir.VoidType(), [PTR])
        for p in self._frees:
            self.b.call(free, [p])
        self.b.ret_void()

    # ---- element loops -------------------------------------------------------------------

    def loop(self, n: int, body: Callable[[ir.Value], None], name: str = "k") -> None:
        counted_loop(self.b, const(0), const(n), [], lambda i, _: (body(i), [])[1], name=name,
                     interleave=False)

    def fold(self, n: int, carried: list, step: Callable[[ir.Value, list], list]) -> list:
        """carried = step(j, carried) for j < n; the values after the loop."""
        return counted_loop(self.b, const(0), const(n), carried, step, name="j", interleave=False)

    def copy(self, dst: ir.Value, src: ir.Value, count: int, kind: str = "T") -> None:
        size = {"T": self.dtype.itemsize, "R": self.real.itemsize}[kind]
        self.b.call(_memcpy(self.llmod), [dst, src, const(count * size), ir.Constant(ir.IntType(1), 0)])

    def zero(self, dst: ir.Value, count: int) -> None:
        self.b.call(_memset(self.llmod), [dst, ir.Constant(I8, 0), const(count * self.dtype.itemsize),
                                          ir.Constant(ir.IntType(1), 0)])

    def transpose(self, dst: ir.Value, src: ir.Value, rows: int, cols: int,
                  src_ld: Optional[int] = None, dst_ld: Optional[int] = None,
                  conj: bool = False) -> None:
        """dst[c * dst_ld + r] = src[r * src_ld + c] for r < rows, c < cols: a row-major
        rows x cols matrix into column-major (and back: the same map)."""
        src_ld, dst_ld = src_ld or cols, dst_ld or rows

        def row(r: ir.Value) -> None:
            def col(c: ir.Value) -> None:
                v = self.b.load(self.at(src, self.b.add(self.b.mul(r, const(src_ld)), c)), typ=self.T)
                self.b.store(self.conj_value(v) if conj else v,
                             self.at(dst, self.b.add(self.b.mul(c, const(dst_ld)), r)))
            self.loop(cols, col, "c")
        self.loop(rows, row, "r")

    def conj_value(self, v: ir.Value) -> ir.Value:
        if not self.complex:
            return v
        return self.b.insert_value(v, self.b.fneg(self.b.extract_value(v, 1)), 1)

    def conj(self, ptr: ir.Value, count: int) -> None:
        if not self.complex:
            return

        def one(k: ir.Value) -> None:
            p = self.at(ptr, k)
            self.b.store(self.conj_value(self.b.load(p, typ=self.T)), p)
        self.loop(count, one)

    def widen(self, dst: ir.Value, src: ir.Value, count: int) -> None:
        """dst (T) = src (R): real values into the matrix dtype (imaginary parts zero)."""
        if not self.complex:
            self.copy(dst, src, count, "T")
            return

        def one(k: ir.Value) -> None:
            x = self.b.load(self.at(src, k, "R"), typ=self.R)
            z = self.b.insert_value(ir.Constant(self.T, None), x, 0)
            self.b.store(z, self.at(dst, k))
        self.loop(count, one)

    def zero_value(self) -> ir.Constant:
        return ir.Constant(self.T, None)



def _opaque(b: ir.IRBuilder, g: ir.GlobalVariable) -> ir.Value:
    """A global's address as an opaque `ptr` (llvmlite types a global's pointer by its
    value type, and a GEP over it then keeps the wrong element type)."""
    return b.inttoptr(b.ptrtoint(g, I64), PTR)


def _elements(shape: tuple) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _libc(llmod: ir.Module, name: str, ret: ir.Type, args: list) -> ir.Function:
    try:
        return llmod.get_global(name)
    except KeyError:
        return ir.Function(llmod, ir.FunctionType(ret, args), name)


def _memcpy(llmod: ir.Module) -> ir.Function:
    return _libc(llmod, "llvm.memcpy.p0.p0.i64", ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)])


def _memset(llmod: ir.Module) -> ir.Function:
    return _libc(llmod, "llvm.memset.p0.i64", ir.VoidType(), [PTR, I8, I64, ir.IntType(1)])


# ---- the step ------------------------------------------------------------------------------

def applies(ins: Any, operands: list) -> bool:
    """Whether `ins` gets a LAPACK kernel: its stanza names one, its dtype is one LAPACK
    has, and no size is zero (those need no call: the host path answers)."""
    call = PRIMITIVES[ins.op].library
    if call is None or getattr(call, "lapack", None) is None:
        return False
    if any(o.dtype not in PREFIX for o in operands) or not ins.shape or \
            any(d == 0 for o in operands for d in o.shape) or 0 in ins.shape:
        return False
    return True


def lapack_step(ins: Any, operands: list, fn_name: str, llmod: ir.Module, b: ir.IRBuilder,
                out_ptr: ir.Value, operand_ptrs: list, start: ir.Value, end: ir.Value) -> dict:
    """Emit the function's body (the stanza's `lapack` over each matrix); what the step
    records about it: routines to resolve, its table and status, the failure checks."""
    k = LapackKernel(llmod, fn_name, b, ins, operands, out_ptr, operand_ptrs, start, end)
    work = PRIMITIVES[ins.op].library.lapack(k, ins, operands, **ins.attrs)
    if len(k.routines) > k.table.value_type.count:
        raise ValueError(f"{ins.op}: more LAPACK routines than the table holds")
    nbatch = len(operands[0].shape) - 2
    shape = tuple(operands[0].shape)
    return {"extent": _elements(shape[:nbatch]), "work": max(1, int(work)),
            "lapack": {"routines": list(k.routines), "table": k.table.name,
                       "status": k.status.name, "checks": k.checks, "op": ins.op,
                       "shape": list(shape)}}
