"""A ROW kernel's large outputs written with non-temporal (streaming) stores, on x86.

An ordinary store to a line that is not in cache first reads the line (a read for
ownership): a kernel writing N bytes to memory moves 2N. Layer norm over 16 MB reads its
input (16 MB), reads the output's lines (16 MB) and writes them (16 MB); with
non-temporal stores, which fill whole lines in the core's write-combining buffers and
send them to memory without reading them, it moves a third less, and the output no
longer evicts the input rows the kernel reads. They pay only for an output too large to
stay in cache for its consumer anyway (STREAM_MIN_BYTES).

x86's non-temporal vector stores need an aligned address, and LLVM's loop vectorizer
keeps `!nontemporal` only on stores it knows to be aligned, which an element's store
never is. So the kernel computes a row's output into a row buffer on the stack (it stays
in L1) and copies it out with explicit 16-byte vectors: the bytes before the row's first
64-byte line boundary and after its last one with ordinary stores (those lines are
shared with the neighbouring rows, which another thread may write), the whole lines in
between streamed. A row not 16-byte aligned (a buffer NumPy gave unaligned) is copied with
ordinary stores. Streamed stores are weakly ordered: an `sfence` ends the function, before
the pool signals that the chunk is done.

While a row's last pass runs, the rows PREFETCH_ROWS ahead of the inputs read over the
row space are prefetched: the last pass touches no new memory (the row is in L1), so the
hardware prefetcher, driven by misses, would otherwise idle through it (measured on a
2-core AMD EPYC, layer norm 4096x1024 in C: streaming alone 5% faster, streaming and
prefetching 17%, prefetching alone nothing). A full reduction's loop, which misses all
the time, is left to the hardware prefetcher: prefetching 2-16 KB ahead (into L1, L2 or
non-temporally) made a three-input sum over 64 MB arrays up to 10% slower on one thread
and no faster on two (same machine, in C).
"""
from __future__ import annotations

import llvmlite.ir as ir

from .llvm_target import has_feature, host
from .llvm_types import I8, I32, I64, PTR
from .loops import const, counted_loop

# total bytes of a kernel's row-space outputs from which they are streamed (several L2s:
# such an output leaves the cache before a consumer could read it there)
STREAM_MIN_BYTES = 8 << 20
PREFETCH_ROWS = 2
_LINE = 64
_VEC = ir.VectorType(ir.FloatType(), 4)      # 16 bytes: bits copied, never computed


def applies(out_bytes: int, row_bytes: int) -> bool:
    """Whether a ROW kernel writing `out_bytes` in rows of `row_bytes` streams them."""
    return (host()[0].startswith(("x86_64", "i686", "i386")) and has_feature("sse2")
            and out_bytes >= STREAM_MIN_BYTES and row_bytes % 16 == 0)


def copy_row(b: ir.IRBuilder, llmod: ir.Module, dst: ir.Value, src: ir.Value,
             nbytes: int) -> None:
    """Copy `nbytes` (a multiple of 16) from the 16-byte aligned `src` to `dst`, whole
    64-byte lines of dst with non-temporal stores where dst is 16-byte aligned."""
    addr = b.ptrtoint(dst, I64)
    aligned = b.icmp_unsigned("==", b.and_(addr, const(15)), const(0))
    hint = llmod.add_metadata([ir.Constant(I32, 1)])

    def piece(at: ir.Value, stream: bool) -> None:
        v = b.load(b.gep(src, [at], source_etype=I8), typ=_VEC)
        v.align = 16
        st = b.store(v, b.gep(dst, [at], source_etype=I8))
        st.align = 16 if stream else 1
        if stream:
            st.set_metadata("nontemporal", hint)

    def lines(at: ir.Value, carried: list) -> list:
        for k in range(0, _LINE, 16):
            piece(b.add(at, const(k)), True)
        return []

    def plain(at: ir.Value, carried: list) -> list:
        piece(at, False)
        return []

    def partial_line(first: ir.Value, stop: ir.Value) -> None:
        # at most 48 bytes, straight-line (a loop here would become a memcpy call)
        for k in range(0, _LINE - 16, 16):
            at = b.add(first, const(k))
            with b.if_then(b.icmp_unsigned("<", at, stop)):
                piece(at, False)

    with b.if_else(aligned) as (streamed, unaligned):
        with streamed:
            to_line = b.and_(b.sub(const(0), addr), const(_LINE - 1))
            head = _umin(b, to_line, const(nbytes))
            body_end = b.add(head, b.and_(b.sub(const(nbytes), head), const(-_LINE)))
            partial_line(const(0), head)
            counted_loop(b, head, body_end, [], lines, name="nt_lines", step=const(_LINE))
            partial_line(body_end, const(nbytes))
        with unaligned:
            counted_loop(b, const(0), const(nbytes), [], plain, name="nt_plain",
                         step=const(16))


def prefetch_row(b: ir.IRBuilder, llmod: ir.Module, row: ir.Value, nbytes: int) -> None:
    """Prefetch the lines of `nbytes` from `row` (an address past the buffer's end is
    harmless: a prefetch never faults)."""
    fn = llmod.declare_intrinsic("llvm.prefetch", [PTR], ir.FunctionType(
        ir.VoidType(), [PTR, I32, I32, I32]))

    def line(at: ir.Value, carried: list) -> list:
        # read, keep in all cache levels, data cache
        b.call(fn, [b.gep(row, [at], source_etype=I8), ir.Constant(I32, 0),
                    ir.Constant(I32, 3), ir.Constant(I32, 1)])
        return []

    counted_loop(b, const(0), const(nbytes), [], line, name="prefetch", step=const(_LINE))


def fence(b: ir.IRBuilder, llmod: ir.Module) -> None:
    """Order the streamed stores before whatever the function's caller does next."""
    fn = llmod.globals.get("llvm.x86.sse.sfence") or ir.Function(
        llmod, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence")
    b.call(fn, [])


def _umin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_unsigned("<", x, y), x, y)
