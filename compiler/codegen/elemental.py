"""The elemental emitter: the value of any instruction at an index, as LLVM IR.

This is the one place that knows how each primitive computes an element (XLA's elemental
IR emitter): elementwise ops through their stanza's `emit` rule against the methods below,
index-moving ops through their stanza's index rule (`index_rules`), reductions as a loop
at the index. Targets wrap it in loops (cpu_kernels.py) and give it their math table;
nothing here is CPU-specific.

An index is a list of i64 LLVM values, one per dimension. Values carry their dtype; half
floats are computed in float32 and rounded after every op, as the references do.
"""
from __future__ import annotations

from typing import Any, Optional

import llvmlite.ir as ir
import numpy as np

from ..hlo import dtypes as D
from ..hlo.module import Module
from ..primitive import ELEMENTWISE, PRIMITIVES
from ..primitives.reduction import identity, reducer_of
from . import complex_values as cx
from . import inner_rows
from .llvm_types import (F16, F32, HALF, I1, I16, I32, I64, Value, compute_type, constant,
                         storage_type)
from .loops import const, counted_loop
from .math_table import MathTable

REASSOC = ("reassoc",)     # float reductions may reassociate (vectorize); nothing else


def _memo_key(pos: int, index: list) -> tuple:
    """Index values by identity, constants by value."""
    return (pos,) + tuple(("c", v.constant) if isinstance(v, ir.Constant) else id(v)
                          for v in index)


class ElementalEmitter:
    """Generates values at indices inside the builder's current block.

    `buffers` maps module positions that live in memory to their base pointers; every
    other position is computed from its operands, at the index asked for.
    """

    def __init__(self, builder: ir.IRBuilder, llmod: ir.Module, module: Module,
                 buffers: dict, math: MathTable) -> None:
        self.b = builder
        self.llmod = llmod
        self.module = module
        self.buffers = buffers
        self.math_table = math
        self.scopes: list = [{}]
        self._globals = 0
        # a ROW kernel's current row: its reductions and row values, read at any index
        # (fusion guarantees a row value is only read for its own row; row_fusion.py)
        self.row_values: dict = {}
        self._linear: dict = {}     # (block, shape, index) -> offset (see `linear`)
        # id(loop variable) -> the [lo, hi) it runs over, where known at compile time (a
        # piece of an innermost loop split at a concatenate's boundaries; index_rules)
        self.ranges: dict = {}
        # id(loop variable) -> (its offset in its block, {id(dynamic_update_slice): i1
        # whether its update covers the block}) (update_blocks)
        self.blocks: dict = {}
        # id(index value) -> (value, q, m, r): it is q * m + r with 0 <= r < m (a loop
        # run as rows of m; inner_rows.py)
        self.offsets: dict = {}
        # (id(q), id(r)) -> (i, m, q, r): the index pair (q, r) is i's split into rows of m,
        # i a loop variable (inner_rows.joined_loop); `linear` reads it as i
        self.joined: dict = {}

    # ---- scopes: a value may be reused only where it dominates ----------------------

    def push_scope(self) -> None:
        self.scopes.append({})

    def pop_scope(self) -> None:
        self.scopes.pop()

    def _memo_get(self, key: tuple) -> Optional[Value]:
        for scope in reversed(self.scopes):
            hit = scope.get(key)
            if hit is not None:
                return hit[0]
        return None

    def reused(self, key: tuple) -> Any:
        """What `keep` stored under `key` where it is still valid, or None: a primitive's
        emission shared by several nodes (the two words of one Threefry call)."""
        return self._memo_get(key)

    def keep(self, key: tuple, value: Any, alive: tuple) -> None:
        """Store `value` for `reused` in the current scope; `alive` holds the objects
        whose ids the key names (so that the ids stay theirs)."""
        self.scopes[-1][key] = (value, alive)

    # ---- the value of a position at an index ----------------------------------------

    def at(self, pos: int, index: list) -> Value:
        held = self.row_values.get(pos)
        if held is not None:
            return held
        key = _memo_key(pos, index)
        hit = self._memo_get(key)
        if hit is not None:
            return hit
        value = self._generate(pos, index)
        self.remember(pos, index, value)
        return value

    def remember(self, pos: int, index: list, value: Value) -> None:
        """Record pos's value at index (valid where the current block is dominated)."""
        self.scopes[-1][_memo_key(pos, index)] = (value, list(index))  # keeps the ids valid

    def _generate(self, pos: int, index: list) -> Value:
        ins = self.module.instructions[pos]
        if pos in self.buffers:
            return self.load(self.buffers[pos], ins.shape, ins.dtype, index)
        if ins.op == "constant":
            return self._constant(ins, index)
        prim = PRIMITIVES[ins.op]
        if prim.kind == ELEMENTWISE:
            args = [self.at(o, index) for o in ins.operands]
            return self.round(prim.emit(self, *args, **ins.attrs))
        if callable(prim.emit):       # the index form (index moves, iota, reductions):
                                      # emit(e, instruction, index)
            return prim.emit(self, ins, index)
        raise ValueError(f"{ins.op}: cannot be computed element by element "
                         f"({prim.kind} op); it must run as its own step and be read from memory")

    # ---- memory ------------------------------------------------------------------------

    def linear(self, shape: tuple, index: list) -> ir.Value:
        """Row-major offset of `index` in `shape`. Computed once per basic block for the
        same shape and index values (an earlier value of the block dominates the rest of
        it), constant parts folded here: every load and store of a kernel asks for it,
        and LLVM's compile time grows with the instructions it is given, even those it
        would fold itself."""
        if not shape:
            return const(0)
        block = self.b.block
        key = ("linear", id(block), shape) + _memo_key(-1, index)[1:]
        hit = self._linear.get(key)
        if hit is not None:
            return hit[0]
        lin, k = index[0], 1
        if len(shape) > 1 and self.joined:
            lin, k = self._joined_pair(index, shape, 0, None)
        while k < len(shape):
            if k + 1 < len(shape) and self.joined:
                lin, k = self._joined_pair(index, shape, k, lin)
                continue
            lin, k = self._mul_add(lin, shape[k], index[k]), k + 1
        self._linear[key] = (lin, block, list(index))     # keeps the ids valid
        return lin

    def _joined_pair(self, index: list, shape: tuple, k: int, lin: Any) -> tuple:
        """(offset, next dimension) after dimension k of `linear`'s walk (lin: the offset
        of the dimensions before k, None for none): dimensions k and k + 1 at once where
        their indices are a joined loop's (q, r) of one variable i (inner_rows.joined_loop),
        lin * (n_k * n_k+1) + i, consecutive in i; dimension k alone otherwise."""
        i = inner_rows.joined(self, index[k], index[k + 1], shape[k + 1])
        if i is None:
            return (index[k] if lin is None else self._mul_add(lin, shape[k], index[k])), k + 1
        if lin is None:
            return i, k + 2
        return self._mul_add(lin, shape[k] * shape[k + 1], i), k + 2

    def _mul_add(self, x: ir.Value, n: int, i: ir.Value) -> ir.Value:
        """x * n + i (no signed overflow: offsets stay inside an array)."""
        if isinstance(x, ir.Constant) and isinstance(i, ir.Constant):
            return const(x.constant * n + i.constant)
        if isinstance(x, ir.Constant) and x.constant == 0:
            return i
        scaled = self.b.mul(x, const(n), flags=("nsw",))
        if isinstance(i, ir.Constant) and i.constant == 0:
            return scaled
        return self.b.add(scaled, i, flags=("nsw",))

    def element_ptr(self, base: ir.Value, shape: tuple, dtype: D.DType, index: list) -> ir.Value:
        return self.b.gep(base, [self.linear(shape, index)], inbounds=True,
                          source_etype=storage_type(dtype))

    def load(self, base: ir.Value, shape: tuple, dtype: D.DType, index: list) -> Value:
        raw = self.b.load(self.element_ptr(base, shape, dtype, index), typ=storage_type(dtype))
        return Value(self.from_storage(raw, dtype), dtype)

    def store(self, base: ir.Value, shape: tuple, value: Value, index: list) -> None:
        ptr = self.element_ptr(base, shape, value.dtype, index)
        self.b.store(self.to_storage(value), ptr)

    def from_storage(self, raw: ir.Value, dtype: D.DType) -> ir.Value:
        b = self.b
        if dtype is D.bool_:
            return b.icmp_unsigned("!=", raw, ir.Constant(raw.type, 0))
        if dtype is D.float16:
            return b.fpext(raw, F32)
        if dtype is D.bfloat16:
            return b.bitcast(b.shl(b.zext(raw, I32), ir.Constant(I32, 16)), F32)
        return raw

    def to_storage(self, value: Value) -> ir.Value:
        b, dtype, v = self.b, value.dtype, value.ir
        if dtype is D.bool_:
            return b.zext(v, storage_type(dtype))
        if dtype is D.float16:
            return b.fptrunc(v, F16)
        if dtype is D.bfloat16:          # already rounded: the top half is the value
            return b.trunc(b.lshr(b.bitcast(v, I32), ir.Constant(I32, 16)), I16)
        return v

    def round(self, value: Value) -> Value:
        """Round a float32-held half value to its dtype (and back to float32)."""
        b, v = self.b, value.ir
        if value.dtype is D.float16:
            return Value(b.fpext(b.fptrunc(v, F16), F32), value.dtype)
        if value.dtype is D.bfloat16:
            bits = b.bitcast(v, I32)
            lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
            up = b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb)
            rounded = b.bitcast(b.and_(up, ir.Constant(I32, 0xFFFF0000 - (1 << 32))), F32)
            isnan = b.fcmp_unordered("uno", v, v)
            return Value(b.select(isnan, v, rounded), value.dtype)
        return value

    def _constant(self, ins: Any, index: list) -> Value:
        array = np.asarray(ins.attrs["value"].array).astype(ins.dtype.np).reshape(ins.shape)
        if array.size == 1:
            return Value(constant(ins.dtype, array.reshape(()).item()), ins.dtype)
        flat = array.reshape(-1)
        ety = storage_type(ins.dtype)
        if ins.dtype.is_complex:
            items = [constant(ins.dtype, complex(x)).constant for x in flat]
        elif ins.dtype is D.bfloat16:
            items = [int(x) for x in flat.view(np.uint16)]
        elif ins.dtype is D.float16:
            items = [float(x) for x in flat.astype(np.float32)]
        else:
            items = [int(x) if not ins.dtype.is_float else float(x) for x in flat]
        arr_ty = ir.ArrayType(ety, len(items))
        g = ir.GlobalVariable(self.llmod, arr_ty, f"const.{self._globals}")
        self._globals += 1
        g.global_constant = True
        g.linkage = "internal"
        g.initializer = ir.Constant(arr_ty, [ir.Constant(ety, x) for x in items])
        return self.load(g, ins.shape, ins.dtype, index)

    # ---- index arithmetic (shared with index_rules) -----------------------------------

    def index_to(self, i: ir.Value, dtype: D.DType) -> Value:
        if dtype.is_complex:
            return cx.convert(self, self.index_to(i, D.real_dtype(dtype)), dtype)
        ty = compute_type(dtype)
        if dtype.is_float:
            return Value(self.b.sitofp(i, ty), dtype)
        if ty.width < 64:
            return Value(self.b.trunc(i, ty), dtype)
        return Value(i, dtype)

    def to_index(self, value: Value) -> ir.Value:
        """An integer value as i64 (sign- or zero-extended by its dtype)."""
        v = value.ir
        if v.type.width == 64:
            return v
        if value.dtype.kind == "int":
            return self.b.sext(v, I64)
        return self.b.zext(v, I64)

    def boolean(self, bit: ir.Value) -> Value:
        """An i1 comparison result as a bool value."""
        return Value(bit, D.bool_)

    def const(self, n: int) -> ir.Value:
        """An index constant (i64)."""
        return const(n)

    def clamp_index(self, i: ir.Value, lo: int, hi: int) -> ir.Value:
        if isinstance(i, ir.Constant):           # a constant start: clamped here
            return const(min(max(i.constant, lo), hi))
        b = self.b
        i = b.select(b.icmp_signed("<", i, const(lo)), const(lo), i)
        return b.select(b.icmp_signed(">", i, const(hi)), const(hi), i)

    # ---- reductions at an index -------------------------------------------------------

    def identity(self, kind: str, dtype: D.DType) -> Value:
        if dtype.is_complex:
            return cx.identity(kind, dtype)
        return Value(constant(dtype, identity(kind, dtype)), dtype)

    def combine(self, kind: str, acc: Value, v: Value) -> Value:
        """acc (kind) v, with reassociation allowed for float sums and products."""
        b, dtype = self.b, acc.dtype
        if dtype.is_complex:
            return cx.add(self, acc, v) if kind == "sum" else cx.mul(self, acc, v)
        if kind == "sum":
            if dtype.is_float:
                return Value(b.fadd(acc.ir, v.ir, flags=REASSOC), dtype)
            return Value(b.add(acc.ir, v.ir), dtype)
        if kind == "prod":
            if dtype.is_float:
                return Value(b.fmul(acc.ir, v.ir, flags=REASSOC), dtype)
            return Value(b.mul(acc.ir, v.ir), dtype)
        if kind == "max":
            return self.max(acc, v)
        if kind == "min":
            return self.min(acc, v)
        if kind == "and":
            return Value(b.and_(acc.ir, v.ir), dtype)
        return Value(b.or_(acc.ir, v.ir), dtype)

    def iota(self, ins: Any, index: list) -> Value:
        return self.round(self.index_to(index[ins.attrs["dimension"]], ins.dtype))

    def reduce_at(self, ins: Any, index: list) -> Value:
        return self.round(self._reduce_at(ins, index))

    def arg_at(self, ins: Any, index: list) -> Value:
        return self._arg_at(ins, index)

    def _reduce_at(self, ins: Any, index: list) -> Value:
        (src,) = ins.operands
        shape = self.module.instructions[src].shape
        axes, kind = tuple(ins.attrs["axes"]), ins.attrs["kind"]
        kept = iter(index)
        full: list = [None if d in axes else next(kept) for d in range(len(shape))]
        return self.reduce_loops(src, shape, axes, kind, full, self.identity(kind, ins.dtype))

    def reduce_loops(self, src: int, shape: tuple, axes: tuple, kind: str, full: list,
                     init: Value) -> Value:
        """Loop over `axes` of `shape` (the other entries of `full` are given) and combine
        src's values into `init`."""
        dtype = init.dtype

        def level(k: int, acc: ir.Value) -> ir.Value:
            if k == len(axes):
                v = self.at(src, list(full))
                return self.combine(kind, Value(acc, dtype), v).ir

            def body(i: ir.Value, carried: list) -> list:
                full[axes[k]] = i
                self.push_scope()
                out = level(k + 1, carried[0])
                self.pop_scope()
                return [out]
            return counted_loop(self.b, const(0), const(shape[axes[k]]), [acc], body,
                                name=f"r{k}")[0]

        return Value(level(0, init.ir), dtype)

    def _arg_at(self, ins: Any, index: list) -> Value:
        """Two vectorizable passes: the extreme value, then the first index holding it
        (a min-reduction of indices). NaN propagates through max/min, so a NaN row finds
        its first NaN, as NumPy's argmax does."""
        (src,) = ins.operands
        axis = ins.attrs["axis"]
        src_ins = self.module.instructions[src]
        n = src_ins.shape[axis]
        kind = reducer_of(ins).kind
        full = list(index[:axis]) + [const(0)] + list(index[axis:])
        best = self.reduce_loops(src, src_ins.shape, (axis,), kind, list(full),
                                 self.identity(kind, src_ins.dtype))

        def body(i: ir.Value, carried: list) -> list:
            full[axis] = i
            self.push_scope()
            v = self.at(src, list(full))
            self.pop_scope()
            cand = self.b.select(self._same_value(v, best), i, const(n))
            return [self.b.select(self.b.icmp_signed("<", cand, carried[0]), cand, carried[0])]

        (first,) = counted_loop(self.b, const(0), const(n), [const(n)], body, name="arg")
        return self.index_to(self.clamp_index(first, 0, n - 1), ins.dtype)

    def _same_value(self, v: Value, best: Value) -> ir.Value:
        b = self.b
        if v.dtype.is_float:
            both_nan = b.and_(b.fcmp_unordered("uno", v.ir, v.ir),
                              b.fcmp_unordered("uno", best.ir, best.ir))
            return b.or_(b.fcmp_ordered("==", v.ir, best.ir), both_nan)
        return b.icmp_unsigned("==", v.ir, best.ir)

    def arg_better(self, kind: str, v: Value, best: Value) -> ir.Value:
        """Whether v replaces best for an arg-reduction of `kind` (max or min): strictly
        better; NaN beats numbers; the first one wins."""
        b = self.b
        if v.dtype.is_float:
            strict = b.fcmp_ordered(">" if kind == "max" else "<", v.ir, best.ir)
            v_nan = b.fcmp_unordered("uno", v.ir, v.ir)
            best_num = b.fcmp_ordered("ord", best.ir, best.ir)
            return b.or_(strict, b.and_(v_nan, best_num))
        cmp = b.icmp_signed if v.dtype.kind == "int" else b.icmp_unsigned
        return cmp(">" if kind == "max" else "<", v.ir, best.ir)

    # ---- the interface the primitives' `emit` rules use -------------------------------

    def call_intrinsic(self, name: str, ret: ir.Type, args: list) -> ir.Value:
        fn = self.llmod.globals.get(name)
        if fn is None:
            fn = ir.Function(self.llmod, ir.FunctionType(ret, [a.type for a in args]), name)
        return self.b.call(fn, args)

    def math(self, name: str, *xs: Value) -> Value:
        dtype = xs[0].dtype
        if dtype.is_complex:
            return cx.math(self, name, xs[0])
        out = self.math_table.emit(self, name, [x.ir for x in xs], dtype)
        return Value(out, D.bool_ if out.type == I1 else dtype)

    def _zero(self, dtype: D.DType) -> ir.Constant:
        return constant(dtype, 0)

    def neg(self, x: Value) -> Value:
        if x.dtype.is_complex:
            return cx.neg(self, x)
        if x.dtype.is_float:
            return Value(self.b.fneg(x.ir), x.dtype)
        return Value(self.b.sub(self._zero(x.dtype), x.ir), x.dtype)

    def abs(self, x: Value) -> Value:
        if x.dtype.is_complex:
            return cx.abs_(self, x)
        if x.dtype.is_float:
            return Value(self.math_table.intrinsic(self, "llvm.fabs", [x.ir]), x.dtype)
        if x.dtype.kind == "uint":
            return x
        negative = self.b.icmp_signed("<", x.ir, self._zero(x.dtype))
        return Value(self.b.select(negative, self.neg(x).ir, x.ir), x.dtype)

    def sign(self, x: Value) -> Value:
        b, d = self.b, x.dtype
        one, minus = constant(d, 1), constant(d, -1)
        if d.is_float:
            pos = b.fcmp_ordered(">", x.ir, self._zero(d))
            neg = b.fcmp_ordered("<", x.ir, self._zero(d))
            # zeros give +0.0 (NumPy's sign(-0.0)), NaN stays NaN
            rest = b.select(b.fcmp_ordered("==", x.ir, self._zero(d)), self._zero(d), x.ir)
            return Value(b.select(pos, one, b.select(neg, minus, rest)), d)
        if d.kind == "uint":
            return Value(b.zext(b.icmp_unsigned("!=", x.ir, self._zero(d)), x.ir.type), d)
        pos = b.zext(b.icmp_signed(">", x.ir, self._zero(d)), x.ir.type)
        neg = b.zext(b.icmp_signed("<", x.ir, self._zero(d)), x.ir.type)
        return Value(b.sub(pos, neg), d)

    def complex_part(self, z: Value, which: int) -> Value:
        return cx.parts(self, z)[which]

    def conj(self, z: Value) -> Value:
        return cx.conj(self, z)

    def make_complex(self, re: Value, im: Value) -> Value:
        return cx.make(self, re, im, D.complex_dtype(re.dtype))

    def not_(self, x: Value) -> Value:
        return Value(self.b.xor(x.ir, ir.Constant(x.ir.type, -1)), x.dtype)

    def add(self, a: Value, b: Value) -> Value:
        if a.dtype.is_complex:
            return cx.add(self, a, b)
        if a.dtype.is_float:
            return Value(self.b.fadd(a.ir, b.ir), a.dtype)
        if a.dtype is D.bool_:
            return Value(self.b.or_(a.ir, b.ir), a.dtype)
        return Value(self.b.add(a.ir, b.ir), a.dtype)

    def sub(self, a: Value, b: Value) -> Value:
        if a.dtype.is_complex:
            return cx.sub(self, a, b)
        if a.dtype.is_float:
            return Value(self.b.fsub(a.ir, b.ir), a.dtype)
        return Value(self.b.sub(a.ir, b.ir), a.dtype)

    def mul(self, a: Value, b: Value) -> Value:
        if a.dtype.is_complex:
            return cx.mul(self, a, b)
        if a.dtype.is_float:
            return Value(self.b.fmul(a.ir, b.ir), a.dtype)
        if a.dtype is D.bool_:
            return Value(self.b.and_(a.ir, b.ir), a.dtype)
        return Value(self.b.mul(a.ir, b.ir), a.dtype)

    def _safe_divisor(self, a: Value, b: Value) -> tuple:
        """(divisor that cannot trap, b == 0, b == -1): x / 0 and MIN / -1 are defined."""
        bb, d = self.b, a.dtype
        zero = bb.icmp_unsigned("==", b.ir, self._zero(d))
        minus = (bb.icmp_signed("==", b.ir, constant(d, -1)) if d.kind == "int"
                 else ir.Constant(I1, 0))
        safe = bb.select(bb.or_(zero, minus), constant(d, 1), b.ir)
        return safe, zero, minus

    def div(self, a: Value, b: Value) -> Value:
        bb, d = self.b, a.dtype
        if d.is_complex:
            return cx.div(self, a, b)
        if d.is_float:
            return Value(bb.fdiv(a.ir, b.ir), d)
        safe, zero, minus = self._safe_divisor(a, b)
        q = bb.sdiv(a.ir, safe) if d.kind == "int" else bb.udiv(a.ir, safe)
        q = bb.select(minus, self.neg(a).ir, q)
        return Value(bb.select(zero, self._zero(d), q), d)

    def rem(self, a: Value, b: Value) -> Value:
        bb, d = self.b, a.dtype
        if d.is_float:
            if self.math_table.lowers("remainder"):
                # the GPU: NVPTX expands frem as x - trunc(x/y)*y (fmod(inf, inf) gave inf,
                # and large quotients lose the result); libdevice's fmod is exact
                return self.math("remainder", a, b)
            return Value(bb.frem(a.ir, b.ir), d)
        safe, zero, minus = self._safe_divisor(a, b)
        r = bb.srem(a.ir, safe) if d.kind == "int" else bb.urem(a.ir, safe)
        return Value(bb.select(bb.or_(zero, minus), self._zero(d), r), d)

    # Floored division (Python's // and %, NumPy's floor_divide and remainder), written
    # here from the truncating div/rem above: a dozen scalar instructions per element,
    # where expanding it into HLO before fusion would put ~20 nodes per use into every
    # module (compile time, fusion's chain limits) for the same code.

    def floor_div(self, a: Value, b: Value) -> Value:
        """Integers: x // 0 = 0 and MIN // -1 = MIN (wraps), NumPy's values."""
        if a.dtype.is_float:
            return self._float_divmod(a, b)[0]
        q = self.div(a, b)
        if a.dtype.kind == "uint":
            return q
        fix = self._floor_fix(self.rem(a, b), b)
        return Value(self.b.sub(q.ir, self.b.zext(fix, q.ir.type)), a.dtype)

    def floor_mod(self, a: Value, b: Value) -> Value:
        """The sign of the divisor; integers: x % 0 = 0, NumPy's value."""
        if a.dtype.is_float:
            return self._float_divmod(a, b)[1]
        r = self.rem(a, b)
        if a.dtype.kind == "uint":
            return r
        fix = self._floor_fix(r, b)
        return Value(self.b.select(fix, self.b.add(r.ir, b.ir), r.ir), a.dtype)

    def _floor_fix(self, r: Value, b: Value) -> ir.Value:
        """Where a truncated remainder r is nonzero and of the other sign than b, the
        floored quotient is one less and the floored remainder r + b."""
        bb, zero = self.b, self._zero(r.dtype)
        other_sign = bb.xor(bb.icmp_signed("<", r.ir, zero), bb.icmp_signed("<", b.ir, zero))
        return bb.and_(bb.icmp_signed("!=", r.ir, zero), other_sign)

    def _float_divmod(self, a: Value, b: Value) -> tuple:
        """(a // b, a % b) bit for bit as NumPy's divmod (npy_divmod, Python's too):

            mod = fmod(a, b); div = (a - mod) / b            (exact: a - mod is k*b)
            mod != 0 and sign(mod) != sign(b): mod += b, div -= 1
            mod == 0: mod = copysign(0, b)
            div != 0: floordiv = floor(div), + 1 where div - floor(div) > 0.5
            div == 0: floordiv = copysign(0, a / b)
            b == 0: a / b and fmod(a, b)

        A NaN takes the "!= 0" branches, as in C. Half floats arrive as float32 and are
        rounded once after (`_generate`), as NumPy's half loops compute."""
        bb, d, x, y = self.b, a.dtype, a.ir, b.ir
        zero, one = ir.Constant(x.type, 0.0), ir.Constant(x.type, 1.0)
        fmod = self.rem(a, b).ir         # the GPU's is libdevice's exact fmod
        div = bb.fdiv(bb.fsub(x, fmod), y)
        fix = bb.and_(bb.fcmp_unordered("!=", fmod, zero),
                      bb.xor(bb.fcmp_ordered("<", y, zero), bb.fcmp_ordered("<", fmod, zero)))
        mod = bb.select(fix, bb.fadd(fmod, y), fmod)
        div = bb.select(fix, bb.fsub(div, one), div)
        mod = bb.select(bb.fcmp_ordered("==", fmod, zero), self._zero_signed_as(y), mod)
        floored = self.math("floor", Value(div, d)).ir
        up = bb.fcmp_ordered(">", bb.fsub(div, floored), ir.Constant(x.type, 0.5))
        floored = bb.select(up, bb.fadd(floored, one), floored)
        quotient = bb.fdiv(x, y)
        floored = bb.select(bb.fcmp_ordered("==", div, zero), self._zero_signed_as(quotient),
                            floored)
        by_zero = bb.fcmp_ordered("==", y, zero)
        return (Value(bb.select(by_zero, quotient, floored), d),
                Value(bb.select(by_zero, fmod, mod), d))

    def _zero_signed_as(self, x: ir.Value) -> ir.Value:
        """copysign(0, x) from x's sign bit (set for -0.0 and some NaNs too)."""
        bb = self.b
        bits = bb.bitcast(x, I64 if isinstance(x.type, ir.DoubleType) else I32)
        negative = bb.icmp_signed("<", bits, ir.Constant(bits.type, 0))
        return bb.select(negative, ir.Constant(x.type, -0.0), ir.Constant(x.type, 0.0))

    def pow(self, a: Value, b: Value) -> Value:
        if a.dtype.is_complex:
            return cx.power(self, a, b)
        if a.dtype.is_float:
            return self.math("power", a, b)
        return self._int_pow(a, b)

    def _int_pow(self, a: Value, e: Value) -> Value:
        bb, d = self.b, a.dtype
        ty = a.ir.type
        one = constant(d, 1)

        def body(i: ir.Value, carried: list) -> list:
            result, base, rest = carried
            bit = bb.trunc(rest, I1)
            result = bb.select(bit, bb.mul(result, base), result)
            return [result, bb.mul(base, base), bb.lshr(rest, ir.Constant(ty, 1))]

        result, _, _ = counted_loop(bb, const(0), const(d.bits), [one, a.ir, e.ir], body, "pow")
        if d.kind == "uint":
            return Value(result, d)
        negative = bb.icmp_signed("<", e.ir, self._zero(d))
        odd = bb.trunc(e.ir, I1)
        is_one = bb.icmp_signed("==", a.ir, one)
        is_minus = bb.icmp_signed("==", a.ir, constant(d, -1))
        negpow = bb.select(is_one, one, bb.select(is_minus, bb.select(odd, constant(d, -1), one),
                                                  self._zero(d)))
        return Value(bb.select(negative, negpow, result), d)

    def max(self, a: Value, b: Value) -> Value:
        return self._extremum(a, b, "maximum", ">")

    def min(self, a: Value, b: Value) -> Value:
        return self._extremum(a, b, "minimum", "<")

    def _extremum(self, a: Value, b: Value, llname: str, op: str) -> Value:
        bb, d = self.b, a.dtype
        if d.is_float:       # NaN-propagating, as NumPy's maximum / minimum
            return Value(self.math_table.intrinsic(self, f"llvm.{llname}", [a.ir, b.ir]), d)
        cmp = bb.icmp_signed if d.kind == "int" else bb.icmp_unsigned
        return Value(bb.select(cmp(op, a.ir, b.ir), a.ir, b.ir), d)

    def clamp(self, lo: Value, x: Value, hi: Value) -> Value:
        """max(x, lo) then min(., hi), the first operand kept where they are equal (x's
        own signed zero), NaN-propagating: NumPy's clip with scalar bounds (the stanza's
        reference); hi where lo > hi."""
        bb, d = self.b, x.dtype
        if d.is_float:
            keep_x = bb.or_(bb.fcmp_unordered("uno", x.ir, x.ir),
                            bb.fcmp_ordered(">=", x.ir, lo.ir))
            t = bb.select(keep_x, x.ir, lo.ir)
            keep_t = bb.or_(bb.fcmp_unordered("uno", t, t), bb.fcmp_ordered("<=", t, hi.ir))
            return Value(bb.select(keep_t, t, hi.ir), d)
        cmp = bb.icmp_signed if d.kind == "int" else bb.icmp_unsigned
        t = bb.select(cmp(">=", x.ir, lo.ir), x.ir, lo.ir)
        return Value(bb.select(cmp("<=", t, hi.ir), t, hi.ir), d)

    def copysign(self, a: Value, b: Value) -> Value:
        """|a| with b's sign bit (one instruction on every target; half floats arrive as
        float32, whose sign is theirs)."""
        return Value(self.math_table.intrinsic(self, "llvm.copysign", [a.ir, b.ir]), a.dtype)

    _LN2 = 0.6931471805599453
    _LOG2E = 1.4426950408889634

    def logaddexp(self, a: Value, b: Value, base2: bool) -> Value:
        """NumPy's npy_logaddexp (base2: npy_logaddexp2), step for step:

            a == b: a + log 2 (a + 1): equal infinities stay themselves
            t = a - b > 0: a + log1p(exp(-t)); t <= 0: b + log1p(exp(t)); else (NaN): t

        with exp2(t) as exp(t ln 2) and log2(1 + u) as log1p(u) / ln 2 for base 2. Half
        floats arrive as float32 and are rounded once after (`_generate`)."""
        bb, d, x, y = self.b, a.dtype, a.ir, b.ir
        ty = x.type
        t = bb.fsub(x, y)
        positive = bb.fcmp_ordered(">", t, ir.Constant(ty, 0.0))
        big = bb.select(positive, x, y)
        neg_abs = bb.select(positive, bb.fneg(t), t)          # -|t| (NaN stays NaN)
        if base2:
            neg_abs = bb.fmul(neg_abs, ir.Constant(ty, self._LN2))
        ex = self.math("exponential", Value(neg_abs, d)).ir
        tail = self.math("log_plus_one", Value(ex, d)).ir
        if base2:
            tail = bb.fmul(tail, ir.Constant(ty, self._LOG2E))
        out = bb.fadd(big, tail)
        out = bb.select(bb.fcmp_unordered("uno", t, t), t, out)
        same = bb.fadd(x, ir.Constant(ty, 1.0 if base2 else self._LN2))
        return Value(bb.select(bb.fcmp_ordered("==", x, y), same, out), d)

    def nextafter(self, a: Value, b: Value) -> Value:
        """The next value of a's own dtype after a toward b, by one step of its bit
        pattern (sign-magnitude): away from zero when b lies beyond a on a's side of
        zero, toward it otherwise; from a zero, the smallest subnormal with b's sign;
        b where a == b (float16: a, as NumPy's loop); a + b (NaN) where either is NaN.
        float16 and bfloat16 step their
        16 stored bits (their values arrive exactly as float32)."""
        bb, d, x, y = self.b, a.dtype, a.ir, b.ir
        ty = x.type
        if d in HALF:
            bits = self.to_storage(a)
            if bits.type != I16:
                bits = bb.bitcast(bits, I16)
            ity = I16
        else:
            ity = I64 if isinstance(ty, ir.DoubleType) else I32
            bits = bb.bitcast(x, ity)
        zero = ir.Constant(ty, 0.0)
        away = bb.xor(bb.fcmp_ordered("<", x, y), bb.fcmp_ordered("<", x, zero))
        one = ir.Constant(ity, 1)
        stepped = bb.select(away, bb.add(bits, one), bb.sub(bits, one))
        minus_tiny = ir.Constant(ity, 1 - (1 << (ity.width - 1)))    # the sign bit and 1
        from_zero = bb.select(bb.fcmp_ordered("<", y, zero), minus_tiny, one)
        out_bits = bb.select(bb.fcmp_ordered("==", x, zero), from_zero, stepped)
        out = self._from_bits(out_bits, d, ty)
        # equal: b (C99), but a for float16, as NumPy's npy_half_nextafter (0.0 vs -0.0)
        out = bb.select(bb.fcmp_ordered("==", x, y), x if d is D.float16 else y, out)
        either_nan = bb.fcmp_unordered("uno", x, y)
        return Value(bb.select(either_nan, bb.fadd(x, y), out), d)

    def _from_bits(self, bits: ir.Value, d: D.DType, ty: ir.Type) -> ir.Value:
        if d in HALF:
            raw = bits if d is D.bfloat16 else self.b.bitcast(bits, F16)
            return self.from_storage(raw, d)
        return self.b.bitcast(bits, ty)

    def and_(self, a: Value, b: Value) -> Value:
        return Value(self.b.and_(a.ir, b.ir), a.dtype)

    def or_(self, a: Value, b: Value) -> Value:
        return Value(self.b.or_(a.ir, b.ir), a.dtype)

    def xor(self, a: Value, b: Value) -> Value:
        return Value(self.b.xor(a.ir, b.ir), a.dtype)

    def _shift_ok(self, a: Value, b: Value) -> tuple:
        bb = self.b
        ok = bb.icmp_unsigned("<", b.ir, constant(a.dtype, a.dtype.bits))
        return ok, bb.select(ok, b.ir, self._zero(a.dtype))

    def shl(self, a: Value, b: Value) -> Value:
        ok, amount = self._shift_ok(a, b)
        return Value(self.b.select(ok, self.b.shl(a.ir, amount), self._zero(a.dtype)), a.dtype)

    def lshr(self, a: Value, b: Value) -> Value:
        ok, amount = self._shift_ok(a, b)
        return Value(self.b.select(ok, self.b.lshr(a.ir, amount), self._zero(a.dtype)), a.dtype)

    def ashr(self, a: Value, b: Value) -> Value:
        bb, d = self.b, a.dtype
        ok, amount = self._shift_ok(a, b)
        if d.kind == "uint":
            fill = self._zero(d)
        else:
            fill = bb.ashr(a.ir, constant(d, d.bits - 1))
        shifted = bb.lshr(a.ir, amount) if d.kind == "uint" else bb.ashr(a.ir, amount)
        return Value(bb.select(ok, shifted, fill), d)

    _FCMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}

    def compare(self, direction: str, a: Value, b: Value) -> Value:
        bb, op = self.b, self._FCMP[direction]
        if a.dtype.is_complex:
            return cx.compare(self, direction, a, b)
        if a.dtype.is_float:
            if direction == "NE":
                return Value(bb.fcmp_unordered("!=", a.ir, b.ir), D.bool_)
            return Value(bb.fcmp_ordered(op, a.ir, b.ir), D.bool_)
        if a.dtype.kind == "int":
            return Value(bb.icmp_signed(op, a.ir, b.ir), D.bool_)
        return Value(bb.icmp_unsigned(op, a.ir, b.ir), D.bool_)

    def select(self, p: Value, a: Value, b: Value) -> Value:
        return Value(self.b.select(p.ir, a.ir, b.ir), a.dtype)

    def convert(self, x: Value, dtype: D.DType) -> Value:
        bb, src = self.b, x.dtype
        ty = compute_type(dtype)
        if src is dtype:
            return x
        if src.is_complex or dtype.is_complex:
            return cx.convert(self, x, dtype)
        if dtype is D.bool_:
            if src.is_float:
                return Value(bb.fcmp_unordered("!=", x.ir, ir.Constant(x.ir.type, 0.0)), dtype)
            return Value(bb.icmp_unsigned("!=", x.ir, self._zero(src)), dtype)
        if src is D.bool_:
            return Value(bb.uitofp(x.ir, ty) if dtype.is_float else bb.zext(x.ir, ty), dtype)
        if src.is_int and dtype.is_int:
            if ty.width < src.bits:
                return Value(bb.trunc(x.ir, ty), dtype)
            if ty.width == src.bits:
                return Value(x.ir, dtype)
            return Value(bb.sext(x.ir, ty) if src.kind == "int" else bb.zext(x.ir, ty), dtype)
        if src.is_int:
            return Value(bb.sitofp(x.ir, ty) if src.kind == "int" else bb.uitofp(x.ir, ty), dtype)
        if dtype.is_float:
            if ty == x.ir.type:
                return Value(x.ir, dtype)
            if ty == F32 and dtype is D.float16 and x.ir.type == ir.DoubleType():
                return Value(self._round_to_odd(x.ir), dtype)
            if ty == F32:
                return Value(bb.fptrunc(x.ir, ty), dtype)
            return Value(bb.fpext(x.ir, ty), dtype)
        # float -> integer: saturating, NaN -> 0 (LLVM's fpto[su]i.sat defines exactly that)
        kind = "fptosi" if dtype.kind == "int" else "fptoui"
        fsuffix = "f32" if x.ir.type == F32 else "f64"
        name = f"llvm.{kind}.sat.i{dtype.bits}.{fsuffix}"
        return Value(self.call_intrinsic(name, ty, [x.ir]), dtype)

    def _round_to_odd(self, x: ir.Value) -> ir.Value:
        """A float64 as float32 rounded to odd (toward zero, the last bit set if inexact),
        so that rounding it on to float16 rounds once, as NumPy's direct conversion does
        (float32 keeps 13 more bits). (bfloat16 goes through float32 as ml_dtypes, its
        reference, does.) Plain
        fptrunc twice rounds twice; and LLVM folds that pair into one double -> half
        fptrunc, which x86 lowers to a call of __truncdfhf2, a symbol the JIT may not
        resolve (a SIGSEGV in issue 33's fuzzing)."""
        bb = self.b
        f = bb.fptrunc(x, F32)
        back = bb.fpext(f, x.type)
        fabs = self.llmod.declare_intrinsic("llvm.fabs", [x.type])
        away = bb.fcmp_ordered(">", bb.call(fabs, [back]), bb.call(fabs, [x]))
        bits = bb.bitcast(f, I32)
        bits = bb.select(away, bb.sub(bits, ir.Constant(I32, 1)), bits)
        inexact = bb.fcmp_ordered("!=", back, x)
        bits = bb.select(inexact, bb.or_(bits, ir.Constant(I32, 1)), bits)
        return bb.bitcast(bits, F32)

    def bitcast(self, x: Value, dtype: D.DType) -> Value:
        bb = self.b
        if x.dtype in HALF or dtype in HALF:
            bits = self.to_storage(x)                       # i16 or half
            raw = bb.bitcast(bits, storage_type(dtype)) if bits.type != storage_type(dtype) else bits
            return Value(self.from_storage(raw, dtype), dtype)
        return Value(bb.bitcast(x.ir, compute_type(dtype)), dtype)
