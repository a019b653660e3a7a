"""The descriptor of a GEMM task (the words a product's tiles read: sizes, leading
dimensions, transposes, tiling, a batch's strides) and the IR helpers every GEMM builder
shares: the BLAS tiles, the small and dot kernels (pool_ir.py) and the packed AVX-512
GEMM (packed_gemm_ir.py). Its own module so that those builders import it, not each other.
"""
from __future__ import annotations

import llvmlite.ir as ir

I8 = ir.IntType(8)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

GEMM_M, GEMM_N, GEMM_K, GEMM_LDA, GEMM_LDB, GEMM_LDC = range(6)
GEMM_TRANS_A, GEMM_TRANS_B, GEMM_BM, GEMM_BN, GEMM_TILES_N, GEMM_FN = range(6, 12)
# a batch of products: tile t is tile t % TILES of product t / TILES, whose A, B and C
# start STRIDE_A/B/C elements after the previous product's (one product: TILES is every
# tile, the strides 0)
GEMM_TILES, GEMM_STRIDE_A, GEMM_STRIDE_B, GEMM_STRIDE_C = range(12, 16)
GEMM_WORDS = 16
CBLAS_ROW_MAJOR, CBLAS_NO_TRANS, CBLAS_TRANS = 101, 111, 112


GEMM_KIND_BLAS, GEMM_KIND_DIRECT, GEMM_KIND_DOTS, GEMM_KIND_PACKED = range(4)
GEMM_NAMES = {(GEMM_KIND_PACKED, 4): "lzp_sgemm_packed", (GEMM_KIND_PACKED, 8): "lzp_dgemm_packed",
              (GEMM_KIND_BLAS, 4): "lzp_sgemm_tiles", (GEMM_KIND_BLAS, 8): "lzp_dgemm_tiles",
              (GEMM_KIND_DIRECT, 4): "lzp_sgemm_small", (GEMM_KIND_DIRECT, 8): "lzp_dgemm_small",
              (GEMM_KIND_DOTS, 4): "lzp_sgemm_dots", (GEMM_KIND_DOTS, 8): "lzp_dgemm_dots"}


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _word(b: ir.IRBuilder, base: ir.Value, index) -> ir.Value:
    idx = index if isinstance(index, ir.Value) else _c(index)
    return b.gep(base, [idx], source_etype=I64)


def _batch_member(b: ir.IRBuilder, d: list, t: ir.Value, bases: tuple, size: int) -> tuple:
    """(tile t's index within its product, that product's A, B and C) for tile t of a
    batch of products (GEMM_TILES)."""
    which = b.udiv(t, d[GEMM_TILES])
    at = lambda base, stride: b.gep(base, [b.mul(b.mul(which, stride), _c(size))],
                                    source_etype=I8)
    return b.urem(t, d[GEMM_TILES]), tuple(at(base, d[s]) for base, s in
                                          zip(bases, (GEMM_STRIDE_A, GEMM_STRIDE_B, GEMM_STRIDE_C)))


def _min(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y)


def tile_rect(b: ir.IRBuilder, d: list, t: ir.Value) -> tuple:
    """(r0, r1, c0, c1): the rows and columns of C that tile t (within its product) covers:
    row-major tiles of BM x BN, the last ones cut at C's edges."""
    r0 = b.mul(b.udiv(t, d[GEMM_TILES_N]), d[GEMM_BM])
    c0 = b.mul(b.urem(t, d[GEMM_TILES_N]), d[GEMM_BN])
    r1 = b.add(r0, _min(b, d[GEMM_BM], b.sub(d[GEMM_M], r0)))
    c1 = b.add(c0, _min(b, d[GEMM_BN], b.sub(d[GEMM_N], c0)))
    return r0, r1, c0, c1
