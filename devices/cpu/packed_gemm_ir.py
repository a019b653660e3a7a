"""`lzp_sgemm_packed` / `lzp_dgemm_packed`: matrix products computed by code of ours at the
CPU's AVX-512 peak, with the signature and tiles of pool_ir's `gemm_tiles` (a task of a
native job: `f(a, b, c, desc, start, end)` over tiles start..end-1 of C).

Why our own: NumPy's OpenBLAS picks its kernels by the CPU it is told it runs on, and an
environment that pins it (`OPENBLAS_CORETYPE=Haswell`) leaves it on 256-bit AVX2 kernels on
a CPU with AVX-512: half the multiply-adds per cycle. This code is built for the host's
own CPU (driver.host_object), so it uses what the CPU has whatever BLAS was told.

The method (the classic one of packed GEMMs): within a tile of C,
- B is packed, KC rows by NC columns at a time, into panels NR columns wide (k-major: the
  NR values of a row of the panel contiguous, zero past B's last column), on the stack;
- A is not packed: the micro-kernel broadcasts its elements straight from A (MR rows of A
  over KC are 12-24 KB, in L1 for every panel of B after the first), in place whether A is
  read along its rows or transposed (a weight gradient's x.T); only a last block of fewer
  than MR rows is copied, zero-padded, so that no row past A's end is read;
- the micro-kernel keeps an MR x NR block of C in MR * NR / lanes vector registers (24 of
  AVX-512's 32) over KC steps, each step 2 vector loads of the packed B, MR broadcasts of
  A and 24 multiply-adds; it then writes C (the first KC block) or adds to it. At C's
  right edge its stores (and reads) are masked to C's columns, at the bottom limited to
  C's rows.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ...compiler.codegen.loops import counted_loop
from .gemm_descriptor import (CBLAS_NO_TRANS, GEMM_K, GEMM_LDA, GEMM_LDB, GEMM_LDC, GEMM_TRANS_A,
                              GEMM_TRANS_B, GEMM_WORDS, I64, PTR, VOID, _batch_member, _c, _min,
                              _word, tile_rect)

VECTOR_BYTES = 64            # one AVX-512 register: 16 floats or 8 doubles
MR = 12                      # rows of C a micro-kernel keeps in registers ...
NV = 2                       # ... by this many vectors of columns (24 accumulators)
KC = 256                     # rows of B packed at a time (the micro-kernel's inner loop)
PACKED_B_BYTES = 256 * 1024  # the packed block of B, on the stack (a quarter of Zen 4/5's L2):
# 256 KB ran level with 512 KB or 2-4% faster (one Zen 5 core, float32, medians of 40,
# three alternating processes: 512x768x256 B transposed 222/228/217 -> 229/238/223
# GFLOP/s, 512x1024x256 232/230/228 -> 237/243/229), and leaves a thread's stack more room


def nc(size: int) -> int:
    """Columns of B packed at a time for elements of `size` bytes."""
    return PACKED_B_BYTES // (KC * size)


def build(mod: ir.Module, name: str, ftype: ir.Type, size: int) -> None:
    """Define the tile function `name` in `mod` (see the module's doc)."""
    _Packed(mod, name, ftype, size)


class _Packed:
    def __init__(self, mod: ir.Module, name: str, ftype: ir.Type, size: int) -> None:
        self.mod, self.ftype, self.size = mod, ftype, size
        self.lanes = VECTOR_BYTES // size
        self.nr = NV * self.lanes
        self.nc = nc(size)
        self.vtype = ir.VectorType(ftype, self.lanes)
        suffix = "f32" if size == 4 else "f64"
        self.fma = ir.Function(mod, ir.FunctionType(self.vtype, [self.vtype] * 3),
                               f"llvm.fma.v{self.lanes}{suffix}")
        # the micro-kernel, once for each way A is read: (r, k) at a[r * lda + k], or
        # (transposed) at a[k * lda + r]
        self.kernels = {trans: self._kernel(f"{name}.kernel{int(trans)}", trans)
                        for trans in (False, True)}
        f = ir.Function(mod, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR, I64, I64]), name)
        a, bm_, c, desc, start, end = f.args
        b = self.b = ir.IRBuilder(f.append_basic_block("entry"))
        d = self.d = [b.load(_word(b, desc, k), typ=I64) for k in range(GEMM_WORDS)]
        # the buffers (entry-block allocas: one stack frame for the whole call)
        self.bp = self._buffer(KC * self.nc, "bpack")
        self.ap = self._buffer(KC * MR, "aedge")
        self.a_trans = b.icmp_unsigned("!=", d[GEMM_TRANS_A], _c(CBLAS_NO_TRANS))
        self.b_trans = b.icmp_unsigned("!=", d[GEMM_TRANS_B], _c(CBLAS_NO_TRANS))

        def tile(t: ir.Value, _: list) -> list:
            t, (self.a, self.bm, self.c) = _batch_member(b, d, t, (a, bm_, c), size)
            self._tile(*tile_rect(b, d, t))
            return []

        counted_loop(b, start, end, [], tile)
        b.ret_void()

    def _buffer(self, elements: int, name: str) -> ir.Value:
        slot = self.b.alloca(self.ftype, size=_c(elements), name=name)
        slot.align = 64
        return self.b.inttoptr(self.b.ptrtoint(slot, I64), PTR)   # (llvmlite: an opaque pointer)

    # ---- addressing ----
    def _at(self, base: ir.Value, index: ir.Value) -> ir.Value:
        return self.b.gep(base, [index], source_etype=self.ftype)

    def _a_index(self, r: ir.Value, k: ir.Value) -> ir.Value:
        """A[r, k]'s element offset (A plain or transposed, chosen at run time)."""
        b, lda = self.b, self.d[GEMM_LDA]
        return b.select(self.a_trans, b.add(b.mul(k, lda), r), b.add(b.mul(r, lda), k))

    def _b_index(self, k: ir.Value, j: ir.Value) -> ir.Value:
        b, ldb = self.b, self.d[GEMM_LDB]
        return b.select(self.b_trans, b.add(b.mul(j, ldb), k), b.add(b.mul(k, ldb), j))

    # ---- the loops over a tile ----
    def _tile(self, r0: ir.Value, r1: ir.Value, c0: ir.Value, c1: ir.Value) -> None:
        b, d = self.b, self.d

        def col_block(jc: ir.Value, _: list) -> list:
            ncols = _min(b, _c(self.nc), b.sub(c1, jc))
            panels = b.udiv(b.add(ncols, _c(self.nr - 1)), _c(self.nr))

            def k_block(pc: ir.Value, _: list) -> list:
                kc = _min(b, _c(KC), b.sub(d[GEMM_K], pc))
                first = b.icmp_unsigned("==", pc, _c(0))
                self._pack_b(pc, kc, jc, ncols)
                self._row_blocks(r0, r1, jc, c1, pc, kc, panels, first)
                return []
            counted_loop(b, _c(0), d[GEMM_K], [], k_block, name="pc", step=_c(KC))
            return []
        counted_loop(b, c0, c1, [], col_block, name="jc", step=_c(self.nc))

    def _row_blocks(self, r0, r1, jc, c1, pc, kc, panels, first) -> None:
        b, d = self.b, self.d
        lda, ldc = d[GEMM_LDA], d[GEMM_LDC]
        full_end = b.add(r0, b.mul(b.udiv(b.sub(r1, r0), _c(MR)), _c(MR)))

        def panels_loop(i: ir.Value, a_at: ir.Value, a_ld: ir.Value, trans: ir.Value,
                        rows: ir.Value) -> None:
            def panel(jp: ir.Value, _: list) -> list:
                j = b.add(jc, b.mul(jp, _c(self.nr)))
                bp = self._at(self.bp, b.mul(b.mul(jp, kc), _c(self.nr)))
                cols = _min(b, _c(self.nr), b.sub(c1, j))
                self._call(trans, a_at, a_ld, bp, kc, self._at(self.c, b.add(b.mul(i, ldc), j)),
                           ldc, first, rows, cols)
                return []
            counted_loop(b, _c(0), panels, [], panel, name="jp")

        def full(i: ir.Value, _: list) -> list:
            a_at = self._at(self.a, self._a_index(i, pc))
            panels_loop(i, a_at, lda, self.a_trans, _c(MR))
            return []
        counted_loop(b, r0, full_end, [], full, name="ir", step=_c(MR))

        with b.if_then(b.icmp_unsigned("<", full_end, r1)):   # the last rows: A copied
            rows = b.sub(r1, full_end)
            self._pack_a_edge(full_end, rows, pc, kc)
            panels_loop(full_end, self._at(self.ap, _c(0)), _c(MR),
                        ir.Constant(ir.IntType(1), 1), rows)

    def _call(self, trans, a_at, a_ld, bp, kc, c_at, ldc, first, rows, cols) -> None:
        b = self.b
        args = [a_at, a_ld, bp, kc, c_at, ldc, first, rows, cols]
        with b.if_else(trans) as (then, other):
            with then:
                b.call(self.kernels[True], args)
            with other:
                b.call(self.kernels[False], args)

    # ---- packing ----
    def _pack_b(self, pc, kc, jc, ncols) -> None:
        """B[pc:pc+kc, jc:jc+ncols] into panels of NR columns: panel p's row k at
        bp[(p * kc + k) * NR], zero past the last column."""
        b, nr = self.b, self.nr
        full = b.mul(b.udiv(ncols, _c(nr)), _c(nr))

        def by_columns(k_lo: ir.Value) -> None:
            def col(q: ir.Value, _: list) -> list:        # q: column within the block
                p, jq = b.udiv(q, _c(nr)), b.urem(q, _c(nr))
                base = b.mul(p, b.mul(kc, _c(nr)))

                def k_step(k: ir.Value, _: list) -> list:
                    x = b.load(self._at(self.bm, self._b_index(b.add(pc, k), b.add(jc, q))),
                               typ=self.ftype)
                    b.store(x, self._at(self.bp, b.add(base, b.add(b.mul(k, _c(nr)), jq))))
                    return []
                counted_loop(b, k_lo, kc, [], k_step, name="pk")
                return []
            counted_loop(b, _c(0), full, [], col, name="pq")

        with b.if_else(self.b_trans) as (then, other):
            with then:      # B's columns are rows of memory: squares of lanes x lanes
                # read along k and transposed in registers, the last k's one by one
                k_vec = b.mul(b.udiv(kc, _c(self.lanes)), _c(self.lanes))
                self._pack_b_transposed(pc, kc, k_vec, jc, b.udiv(full, _c(nr)))
                by_columns(k_vec)
            with other:     # B's rows contiguous: a panel's row is NV vector copies
                def panel(p: ir.Value, _: list) -> list:
                    base = b.mul(p, b.mul(kc, _c(nr)))

                    def k_step(k: ir.Value, _: list) -> list:
                        src = self._b_index(b.add(pc, k), b.add(jc, b.mul(p, _c(nr))))
                        dst = b.add(base, b.mul(k, _c(nr)))
                        for v in range(NV):
                            x = b.load(self._at(self.bm, b.add(src, _c(v * self.lanes))),
                                       typ=self.vtype, align=self.size)
                            b.store(x, self._at(self.bp, b.add(dst, _c(v * self.lanes))),
                                    align=64)
                        return []
                    counted_loop(b, _c(0), kc, [], k_step, name="pk")
                    return []
                counted_loop(b, _c(0), b.udiv(full, _c(nr)), [], panel, name="pp")

        with b.if_then(b.icmp_unsigned("<", full, ncols)):     # a last, narrower panel
            base = b.mul(full, kc)
            rest = b.sub(ncols, full)

            def k_step(k: ir.Value, _: list) -> list:
                def q_step(q: ir.Value, _: list) -> list:
                    inside = b.icmp_unsigned("<", q, rest)
                    last = _min(b, q, b.sub(rest, _c(1)))     # (a column B has)
                    src = self._b_index(b.add(pc, k), b.add(jc, b.add(full, last)))
                    x = b.load(self._at(self.bm, src), typ=self.ftype)
                    x = b.select(inside, x, ir.Constant(self.ftype, 0.0))
                    b.store(x, self._at(self.bp, b.add(base, b.add(b.mul(k, _c(nr)), q))))
                    return []
                counted_loop(b, _c(0), _c(nr), [], q_step, name="pq")
                return []
            counted_loop(b, _c(0), kc, [], k_step, name="pk")

    def _pack_b_transposed(self, pc, kc, k_vec, jc, panels) -> None:
        """The whole panels' rows 0..k_vec-1 of a transposed B (column j of B is row j
        of memory): lanes x lanes squares, each `lanes` vector loads along k, a transpose
        in registers and `lanes` vector stores into the panel's rows (scalar copies were
        1 load and 1 store per element: a quarter of a small product's time, attention's
        q @ k.T with k = 32)."""
        b, nr, lanes, ldb = self.b, self.nr, self.lanes, self.d[GEMM_LDB]

        def panel(p: ir.Value, _: list) -> list:
            base = b.mul(p, b.mul(kc, _c(nr)))

            def k_step(k0: ir.Value, _: list) -> list:
                def square(col: ir.Value, _: list) -> list:    # (a loop: one copy of the
                    j = b.add(jc, b.add(b.mul(p, _c(nr)), col))  # transpose to compile)
                    rows = [b.load(self._at(self.bm, b.add(b.mul(b.add(j, _c(q)), ldb),
                                                           b.add(pc, k0))),
                                   typ=self.vtype, align=self.size) for q in range(lanes)]
                    for t, v in enumerate(self._transpose(rows)):
                        dst = b.add(base, b.add(b.mul(b.add(k0, _c(t)), _c(nr)), col))
                        b.store(v, self._at(self.bp, dst), align=64)
                    return []
                counted_loop(b, _c(0), _c(nr), [], square, name="ps", step=_c(lanes))
                return []
            counted_loop(b, _c(0), k_vec, [], k_step, name="pt", step=_c(lanes))
            return []
        counted_loop(b, _c(0), panels, [], panel, name="pp")

    def _transpose(self, rows: list) -> list:
        """The transpose of a lanes x lanes square held as `lanes` vectors: one bit of the
        row index swapped with the same bit of the lane index per stage, each stage a
        two-vector shuffle per vector (log2(lanes) stages)."""
        b, lanes = self.b, self.lanes
        bit = 1
        while bit < lanes:
            out = list(rows)
            for i in range(lanes):
                if i & bit:
                    continue
                x, y = rows[i], rows[i | bit]
                # lane t of the new vector i (i | bit): lane t with `bit` cleared (set)
                # of x where t has `bit` clear, else of y
                for target, want in ((i, False), (i | bit, True)):
                    mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                       [(0 if t & bit == 0 else lanes)
                                        + (t | bit if want else t & ~bit) for t in range(lanes)])
                    out[target] = b.shuffle_vector(x, y, mask)
            rows, bit = out, bit * 2
        return rows

    def _pack_a_edge(self, i, rows, pc, kc) -> None:
        """A[i:i+rows, pc:pc+kc] (rows < MR) into ap transposed (ap[k * MR + r]), zero
        past the last row."""
        b = self.b

        def k_step(k: ir.Value, _: list) -> list:
            def r_step(r: ir.Value, _: list) -> list:
                inside = b.icmp_unsigned("<", r, rows)
                src = self._a_index(b.add(i, _min(b, r, b.sub(rows, _c(1)))), b.add(pc, k))
                x = b.select(inside, b.load(self._at(self.a, src), typ=self.ftype),
                             ir.Constant(self.ftype, 0.0))
                b.store(x, self._at(self.ap, b.add(b.mul(k, _c(MR)), r)))
                return []
            counted_loop(b, _c(0), _c(MR), [], r_step, name="pr")
            return []
        counted_loop(b, _c(0), kc, [], k_step, name="pk")

    # ---- the micro-kernel ----
    def _kernel(self, name: str, trans: bool) -> ir.Function:
        """kernel(a, lda, bp, kc, c, ldc, first, rows, cols): C[0:rows, 0:cols] (+)=
        A[0:rows, 0:kc] @ the packed panel bp (C written when `first`, else added to);
        rows <= MR, cols <= NR, A readable for all MR rows (an edge's copy)."""
        i1 = ir.IntType(1)
        f = ir.Function(self.mod, ir.FunctionType(VOID, [PTR, I64, PTR, I64, PTR, I64, i1, I64,
                                                         I64]), name)
        f.linkage = "internal"
        f.attributes.add("noinline")        # one copy for every call site: less to compile
        a, lda, bp, kc, c, ldc, first, rows, cols = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        ft, vt, lanes, nr = self.ftype, self.vtype, self.lanes, self.nr
        at = lambda base, idx: b.gep(base, [idx], source_etype=ft)
        row_at = [at(a, b.mul(_c(r), lda)) for r in range(MR)] if not trans else None
        zero = ir.Constant(vt, None)
        undef = ir.Constant(vt, ir.Undefined)
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)

        def step(k: ir.Value, acc: list) -> list:
            row = b.mul(k, _c(nr))
            bv = [b.load(at(bp, b.add(row, _c(v * lanes))), typ=vt, align=64) for v in range(NV)]
            kk = b.mul(k, lda) if trans else None
            out = []
            for r in range(MR):
                x = b.load(at(a, b.add(kk, _c(r))) if trans else at(row_at[r], k), typ=ft)
                x = b.shuffle_vector(b.insert_element(undef, x, ir.Constant(ir.IntType(32), 0)),
                                     undef, mask)
                out += [b.call(self.fma, [x, bv[v], acc[r * NV + v]]) for v in range(NV)]
            return out

        acc = counted_loop(b, _c(0), kc, [zero] * (MR * NV), step, name="k", interleave=False)
        c_at = [[at(c, b.add(b.mul(_c(r), ldc), _c(v * lanes))) for v in range(NV)]
                for r in range(MR)]
        whole = b.and_(b.icmp_unsigned("==", rows, _c(MR)), b.icmp_unsigned("==", cols, _c(nr)))
        with b.if_else(whole) as (then, other):
            with then:
                self._store(b, acc, c_at, first, None)
            with other:     # an edge: the columns masked, the rows past `rows` left alone
                masks = [self._column_mask(b, cols, v) for v in range(NV)]
                for r in range(MR):
                    with b.if_then(b.icmp_unsigned("<", _c(r), rows)):
                        self._store(b, acc[r * NV:(r + 1) * NV], [c_at[r]], first, masks)
        b.ret_void()
        return f

    def _column_mask(self, b: ir.IRBuilder, cols: ir.Value, v: int) -> ir.Value:
        """<lanes x i1>: which lanes of vector v of a block's row lie before `cols`."""
        lanes = self.lanes
        index = ir.Constant(ir.VectorType(I64, lanes), [v * lanes + q for q in range(lanes)])
        wide = b.insert_element(ir.Constant(ir.VectorType(I64, lanes), ir.Undefined), cols,
                                ir.Constant(ir.IntType(32), 0))
        wide = b.shuffle_vector(wide, wide, ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                        [0] * lanes))
        return b.icmp_unsigned("<", index, wide)

    def _store(self, b: ir.IRBuilder, acc: list, c_at: list, first: ir.Value,
               masks: list) -> None:
        """C's block (rows of `c_at`, NV vectors each) = acc, or += acc unless `first`;
        `masks` (per vector) limit both the read and the write to C's columns."""
        vt = self.vtype
        ptrs = [p for row in c_at for p in row]
        pre = b.block
        add = b.function.append_basic_block("add")
        join = b.function.append_basic_block("store")
        b.cbranch(first, join, add)
        b.position_at_end(add)
        if masks is None:
            old = [b.load(p, typ=vt, align=self.size) for p in ptrs]
        else:
            old = [b.call(self._masked("load"), [p, ir.Constant(ir.IntType(32), self.size),
                                                 masks[q % NV], ir.Constant(vt, None)])
                   for q, p in enumerate(ptrs)]
        summed = [b.fadd(s, o) for s, o in zip(acc, old)]
        b.branch(join)
        b.position_at_end(join)
        phis = []
        for s, t in zip(acc, summed):
            phis.append(b.phi(vt))
            phis[-1].add_incoming(s, pre)
            phis[-1].add_incoming(t, add)
        for q, (v, p) in enumerate(zip(phis, ptrs)):
            if masks is None:
                b.store(v, p, align=self.size)
            else:
                b.call(self._masked("store"), [v, p, ir.Constant(ir.IntType(32), self.size),
                                               masks[q % NV]])

    def _masked(self, what: str) -> ir.Function:
        """llvm.masked.load / llvm.masked.store of one vector."""
        vt, lanes = self.vtype, self.lanes
        name = f"llvm.masked.{what}.v{lanes}{'f32' if self.size == 4 else 'f64'}.p0"
        if name in self.mod.globals:
            return self.mod.globals[name]
        mask_t = ir.VectorType(ir.IntType(1), lanes)
        ftype = ir.FunctionType(vt, [PTR, ir.IntType(32), mask_t, vt]) if what == "load" \
            else ir.FunctionType(VOID, [vt, PTR, ir.IntType(32), mask_t])
        return ir.Function(self.mod, ftype, name)
