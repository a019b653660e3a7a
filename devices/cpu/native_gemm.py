"""Matrix products over the native pool: C split into one tile per thread, each tile one
single-threaded CBLAS gemm of the BLAS NumPy ships, called from native code (or, for a
short inner dimension or few rows, computed by code of ours: `direct`).

Why not BLAS's own threads: OpenBLAS's threads spin for a long while after each call,
taking the cores the kernel pool's workers need for the next step (a training step ran
4-5x slower with them on a 2-core machine). Here a product is a job of the same pool as
the generated kernels: while a program runs BLAS is held to one thread
(`blas_single_threaded`), the pool's threads each multiply their tile, and no thread
outlives the job. 2-D tiles (rows x columns of C, close to square) keep the packing of
A and B that each tile repeats small: with t tiles on a square product each thread packs
about 1/sqrt(t) of B, not all of it as a split by rows would.

On a CPU with AVX-512 the tiles BLAS computed are computed by our own packed GEMM
instead (`packed`, packed_gemm_ir.py), whatever kernels OpenBLAS was pinned to.

Used for float32/float64 products of 2-D operands when NumPy's BLAS is the ILP64
OpenBLAS of NumPy's wheels (`scipy_cblas_?gemm64_`); otherwise `available()` is False and
the device keeps its NumPy path.
"""
from __future__ import annotations

import ctypes
import functools
import math
import threading
from typing import Optional

import numpy as np

from ...compiler import fork_locks
from ...compiler.driver import CPU, target_id
from ...compiler.hlo.module import Module
from ...compiler.program import LibraryStep
from . import native_pool, pool_ir
from .object_code import LoadedCode
from .runtime_objects import prefetch as runtime_prefetch, runtime_object
from .blas_threads import BLAS_THREADS, blas_single_threaded

_SYMBOLS = {np.dtype(np.float32): "scipy_cblas_sgemm64_", np.dtype(np.float64): "scipy_cblas_dgemm64_"}
_LOCK = fork_locks.lock()
IR = pool_ir.LAYOUT


@functools.lru_cache(maxsize=None)
def _gemm_addresses() -> Optional[dict]:
    """dtype -> address of the ILP64 CBLAS gemm in NumPy's OpenBLAS, or None."""
    for lib in BLAS_THREADS.libs():
        if getattr(lib, "internal_api", "") != "openblas":
            continue
        try:
            handle = ctypes.CDLL(lib.filepath)          # already loaded: the same handle
            return {dt: ctypes.cast(getattr(handle, sym), ctypes.c_void_p).value
                    for dt, sym in _SYMBOLS.items()}
        except (OSError, AttributeError):
            continue
    return None


_KINDS = {"blas": IR.GEMM_KIND_BLAS, "direct": IR.GEMM_KIND_DIRECT, "dots": IR.GEMM_KIND_DOTS,
          "packed": IR.GEMM_KIND_PACKED}
_BLAS_FUNCTIONS: set = set()     # the addresses of the "blas" tile functions built
_BUILT: set = set()              # (dtype, kind) of the tile functions loaded


@functools.lru_cache(maxsize=None)
def tile_function(dt: np.dtype, kind: str) -> int:
    """The address of the tile function of `kind`: "blas" (each tile one CBLAS call),
    "direct" (`direct`), "dots" (`dots`), for dtype `dt`. Each is built (or loaded from
    the disk cache) when a product first needs it."""
    code_kind, size = _KINDS[kind], np.dtype(dt).itemsize
    with _LOCK:
        code = LoadedCode(runtime_object("gemm_tiles", code_kind, size))
        _BUILT.add((np.dtype(dt), kind))
    _KEEP.append(code)
    address = code.address(IR.GEMM_NAMES[code_kind, size])
    if kind == "blas":
        _BLAS_FUNCTIONS.add(address)
    return address


_KEEP: list = []


def available() -> bool:
    return _gemm_addresses() is not None


def grid(m: int, n: int, tiles: int, a_weight: float = 1.0) -> tuple:
    """(row blocks, column blocks) with product `tiles` that pack the least: each tile's
    BLAS call packs its rows of A and its columns of B, so A is packed once per column
    block and B once per row block (with equal weights: the blocks closest to square).
    `a_weight`: the cost of packing an element of A against one of B (fewer tiles when
    a side is too short to cut that often)."""
    best = (1, 1)
    score = math.inf
    for pm in range(1, tiles + 1):
        if tiles % pm:
            continue
        pn = tiles // pm
        if pm > m or pn > n:
            continue
        s = a_weight * pn * m + pm * n
        if s < score:
            best, score = (pm, pn), s
    return best


# Packing a transposed A (stored k x m, read down its columns) costs about twice a plain
# one per element: measured with NumPy's OpenBLAS on one thread, the weight gradients of
# a training step (g.T @ x: 512x784x256, 512x512x256) and 768^3, 1024x1024x512 run 2-7%
# faster split by rows of C than by columns, which packs the transposed A twice.
# Repeating A's packing still costs a little more than B's: 2048^2 on 2 threads runs ~1.5%
# faster in two row tiles than in two column tiles (their packing is alike). But a tile as
# wide as the MLP step's forward products (256x512, B = W.T) is slower than a square one:
# measured on the 2-core AVX2 machine, 2 tiles on 2 threads, medians of 150-200 runs
# interleaved in one process, rows -> columns (four runs, two at FIFO priority): 256x512x784
# 1234 -> 1204, 1293 -> 1224, 1291 -> 1259, 1209 -> 1164 us; 256x512x512 802 -> 776,
# 843 -> 824, 798 -> 791; 256x640x784 1585 -> 1512; 512x1024x512 and 1024x2048x1024 alike;
# and the tiles' CPU time on one thread agrees (256x512x784 2396 -> 2287 us). So A's repeats
# weigh 1.5x an element of B (3x transposed): on 2 threads a C more than 1.5x as wide as
# tall (3x with A transposed) is split by columns, squarer ones by rows; 2048^2 on 16
# threads in 4x4 tiles (not measured on 16 cores).
A_WEIGHT = 1.5
TRANS_A_WEIGHT = 2 * A_WEIGHT


def matrix(rows: int, cols: int, row_stride: int, col_stride: int) -> Optional[tuple]:
    """(CBLAS transpose flag, leading dimension) of a rows x cols matrix whose elements lie
    `row_stride` and `col_stride` elements apart (a stride of a dimension of size 1 is
    never used), or None where BLAS cannot read it in place."""
    if cols == 1 or col_stride == 1:
        ld = row_stride if rows > 1 else cols
        if ld >= max(1, cols):
            return IR.CBLAS_NO_TRANS, ld
    if rows == 1 or row_stride == 1:
        ld = col_stride if cols > 1 else rows
        if ld >= max(1, rows):
            return IR.CBLAS_TRANS, ld
    return None


def _operand(x: np.ndarray) -> Optional[tuple]:
    """(array, CBLAS transpose flag, leading dimension) of a 2-D operand read in place."""
    if x.ndim != 2 or any(s % x.itemsize for s in x.strides):
        return None
    flag = matrix(*x.shape, *(s // x.itemsize for s in x.strides))
    return None if flag is None else (x,) + flag


def canonical(dims: list, sizes: tuple) -> Optional[tuple]:
    """The element strides of an operand read as `sizes` (batch, rows, cols): `dims` are
    its (size, stride) dimensions in the order the product reads them (the stored ones
    permuted); each group of them whose sizes multiply to one of `sizes` must lie at one
    stride (a reshape that needs no copy). None where they do not."""
    dims = [d for d in dims if d[0] != 1]
    out = []
    for size in sizes:
        group, n = [], 1
        while n < size and dims:
            group.append(dims.pop(0))
            n *= group[-1][0]
        if n != size:
            return None
        if any(s0 != s1 * n1 for (_, s0), (n1, s1) in zip(group, group[1:])):
            return None
        out.append(group[-1][1] if group else 0)
    return tuple(out) if not dims else None


def _stored_dims(shape: tuple, perm: list) -> list:
    """(size, element stride) of a C-contiguous operand's dimensions, in `perm`'s order."""
    strides, step = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d], step = step, step * shape[d]
    return [(shape[p], strides[p]) for p in perm]


def _read(dims: list, batch: int, rows: int, cols: int) -> Optional[tuple]:
    """(CBLAS flag, leading dimension, batch stride) of an operand read as `batch`
    rows x cols matrices in place, or None."""
    strides = canonical(dims, (batch, rows, cols))
    if strides is None:
        return None
    flag = matrix(rows, cols, strides[1], strides[2])
    return None if flag is None else flag + (strides[0] if batch > 1 else 0,)


def matmul(a: np.ndarray, c: np.ndarray, out: np.ndarray, threads: int) -> bool:
    """out = a @ c for float32/float64 operands, 2-D or a batch of matrices (3-D, of one
    batch size), each read in place (a view: transposed, a slice of rows) over `threads`
    threads of the native pool; False (nothing done) when this path does not apply."""
    dt = out.dtype
    if dt not in _SYMBOLS or a.dtype != dt or c.dtype != dt or not 2 <= a.ndim == c.ndim <= 3 \
            or not out.flags.c_contiguous or not available():
        return False
    m, k = a.shape[-2:]
    n = c.shape[-1]
    batch = a.shape[0] if a.ndim == 3 else 1
    if c.shape[:-2] != a.shape[:-2] or c.shape[-2] != k or out.shape != a.shape[:-2] + (m, n) \
            or not (m and n and k and batch):
        return False
    sa, sc = ([(d, s // x.itemsize) for d, s in zip(x.shape, x.strides)] for x in (a, c))
    pa, pc = _read(sa, batch, m, k), _read(sc, batch, k, n)
    if pa is None or pc is None or any(s % x.itemsize for x in (a, c) for s in x.strides):
        return False
    if batch * work(m, n, k) < SPLIT_WORK:    # one tile, on this thread: no worker to wake
        threads = 1
    _run(_job(dt, m, n, k, pa, pc, threads, batch), a, c, out, threads)
    return True


def run_product(layout: dict, lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray,
                threads: int) -> bool:
    """A dot_general step of the general path: `program_task`'s tiles (those a native
    program runs for it, so both paths sum alike) over C-contiguous operands, on
    `threads` threads; False (nothing done) where `program_task` does not apply."""
    dt = out.dtype
    if not (lhs.flags.c_contiguous and rhs.flags.c_contiguous and out.flags.c_contiguous) \
            or lhs.dtype != dt or rhs.dtype != dt:
        return False
    jobs = _thread_jobs()
    key = ("step", dt, lhs.shape, rhs.shape, out.shape, tuple(layout["lhs_perm"]),
           tuple(layout["rhs_perm"]), threads)
    hit = jobs.get(key)
    if hit is None:
        made = program_task(layout, lhs.shape, rhs.shape, out.shape, dt, threads)
        if made is None:
            return False
        fn, desc, ranges = made
        hit = _remember(jobs, key, (native_pool.Job([(fn, [0, 1, 2, 3], [], [], ranges)], 4), desc))
    _run(hit, lhs, rhs, out, threads)
    return True


def _run(hit: tuple, a: np.ndarray, c: np.ndarray, out: np.ndarray, threads: int) -> None:
    job, desc = hit
    job.table[:] = (native_pool.address(a), native_pool.address(c), native_pool.address(out),
                    native_pool.address(desc))
    with blas_single_threaded():
        native_pool.get_pool(threads).run(job)


_JOBS = threading.local()      # per Python thread: a job's table is written at each call


def _job(dt: np.dtype, m: int, n: int, k: int, pa: tuple, pc: tuple, threads: int,
         batch: int) -> tuple:
    """The pool job and the descriptor of one product's shape and layout (built once:
    building them costs more than the call of a small product); pa/pc: (CBLAS flag,
    leading dimension, batch stride) of A and B."""
    jobs = _thread_jobs()
    key = (dt, m, n, k, pa, pc, threads, batch)
    hit = jobs.get(key)
    if hit is None:
        strides = (pa[2], pc[2], m * n) if batch > 1 else (0, 0, 0)
        fn, desc, ranges = task(dt, m, n, k, pa[:2], pc[:2], threads, batch, strides)
        job = native_pool.Job([(fn, [0, 1, 2, 3], [], [], ranges)], 4)
        hit = _remember(jobs, key, (job, desc))
    return hit


def _thread_jobs() -> dict:
    jobs = getattr(_JOBS, "jobs", None)
    if jobs is None:
        jobs = _JOBS.jobs = {}
    return jobs


def _remember(jobs: dict, key: tuple, hit: tuple) -> tuple:
    if len(jobs) > 256:            # a program of many shapes: keep the cache bounded
        jobs.clear()
    jobs[key] = hit
    return hit


def task(dt: np.dtype, m: int, n: int, k: int, pa: tuple, pc: tuple, threads: int,
         batch: int = 1, strides: tuple = (0, 0, 0)) -> tuple:
    """(tile function address, descriptor, chunk ranges) of C = A B as one task of a
    native job whose arguments are (A, B, C, descriptor); pa/pc: (CBLAS transpose flag,
    leading dimension) of A and B. `batch` products, the i-th's A, B, C `strides`
    elements after the first's: each product gets `threads / batch` tiles (at least
    one)."""
    per = max(1, threads // batch)
    pm, pn = grid(m, n, per, TRANS_A_WEIGHT if pa[0] == IR.CBLAS_TRANS else A_WEIGHT)
    bm, bn = -(-m // pm), -(-n // pn)
    pm, pn = -(-m // bm), -(-n // bn)    # no empty block (m = 5 in 4 blocks of 2 is 3 blocks)
    desc = np.zeros(IR.GEMM_WORDS, np.int64)
    desc[:IR.GEMM_FN + 1] = (m, n, k, pa[1], pc[1], max(1, n), pa[0], pc[0], bm, bn, pn,
                             _gemm_addresses()[dt])
    desc[IR.GEMM_TILES:IR.GEMM_STRIDE_C + 1] = (pm * pn,) + tuple(strides)
    fn = tile_function(dt, kind(dt, m, n, k, pa[0], pc[0]))
    if threads <= 1:
        # one thread: every tile in one chunk (a batch's tiles one chunk each made the
        # job wake the workers for a small product, attention's in a decoding step)
        return fn, desc, [(0, batch * pm * pn)]
    return fn, desc, [(t, t + 1) for t in range(batch * pm * pn)]


def calls_blas(fn: int) -> bool:
    """Whether the tile function at address `fn` (from `task`) calls BLAS."""
    return fn in _BLAS_FUNCTIONS


def kind(dt: np.dtype, m: int, n: int, k: int, trans_a: int, trans_b: int) -> str:
    """Which code computes the tiles of C = A B: "direct", "dots", "packed" or "blas"."""
    if direct(m, n, k, trans_b):
        return "direct"
    if dots(dt, m, n, k, trans_a, trans_b):
        return "dots"
    return "packed" if packed() else "blas"


@functools.lru_cache(maxsize=None)
def packed() -> bool:
    """Whether the products BLAS would compute go to our own packed GEMM
    (packed_gemm_ir.py): on a CPU with AVX-512 it runs at the CPU's peak, where NumPy's
    OpenBLAS runs at its AVX2 kernels' half of it whenever the environment pins it to
    them (OPENBLAS_CORETYPE=Haswell), and level with its own AVX-512 kernels otherwise.
    Measured on one Zen 5 core (bench/gemm_shapes.py, best of interleaved runs, GFLOP/s
    float32): see bench/gemm_shapes.py."""
    return "+avx512f" in target_id(CPU)[2].split(",")


# C = A B by dot products of rows (pool_ir's `_RowDots`): A read along its rows, B
# transposed (the rows of a W in x @ W.T), C a few columns wide, an inner dimension of a
# few vectors at least. Measured on one AVX2 core (Zen 3; CPU time of one tile, medians,
# with other programs running): 256 x n x 512 float32 n = 1..11 0.55-0.70 of BLAS's time
# (n = 10: 68.5 -> 47.1 us), n = 12 0.90; 256x10x784 0.87; float64 n <= 8 0.44-0.60, but
# 9, 11 and 12 columns slower than BLAS (their sums no longer fit the registers).
DOTS_N = {np.dtype(np.float32): 11, np.dtype(np.float64): 8}   # C at most this wide
DOTS_K = 32             # an inner dimension at least this long
# ... or C this few rows wide however wide, W read once per row of C: a decoding step's
# x @ W.T (one token: a matrix-vector product), where BLAS's gemm packs all of W at every
# call. Measured on one core (Zen 4, float32, thread CPU time of `matmul`, BLAS -> dots,
# NumPy's sgemv beside): 1x256 @ (768x256).T 49.8 -> 13.6 us (9.0), (1024x256).T 61.1 ->
# 16.1 (11.5), 1x1024 @ (256x1024).T 62.3 -> 16.9 (10.5), 1x64 @ (64x64).T 6.2 -> 5.5 (1.0:
# most of it this call's own overhead, which a native program's task does not pay).
DOTS_M = 1
# One row of C takes a shorter inner dimension too, and so does `direct` a narrower C
# (ROW_K, ROW_N): a decoding step's attention, per head q @ k.T (1x16 @ 16x64, k read
# transposed) and p @ v (1x64 @ 64x16), where BLAS's packing and its buffer's lock were
# most of each call. Measured in a loop of both products over 4 heads (one core, thread
# CPU time per iteration, medians): 1.46 -> 0.55-0.70 us.
ROW_K = 8
ROW_N = 8


def dots(dt: np.dtype, m: int, n: int, k: int, trans_a: int, trans_b: int) -> bool:
    """Whether C = A B is computed as dot products of rows (see DOTS_N, DOTS_M, ROW_K)."""
    return trans_a == IR.CBLAS_NO_TRANS and trans_b == IR.CBLAS_TRANS and dt in DOTS_N \
        and (n <= DOTS_N[dt] or m <= DOTS_M) \
        and (k >= DOTS_K or (m <= DOTS_M and k >= ROW_K))


# Products computed by our own code (pool_ir's `_SmallGemm`: C in registers, no packing,
# C written once) rather than BLAS: B read along its rows, C at least a few vectors wide,
# and a short inner dimension or few rows, where BLAS's clearing of C and packing cost
# more than its arithmetic. Measured on one AVX2 core (CPU time of one tile, float32 /
# float64): 256x512x10 0.72 / 0.45 of BLAS's time, 10x512x256 0.64 / 0.72, 256x512x16
# 0.81 / 0.64, 4x4096x256 0.58 / 0.52, 1000x32x4 0.70 / 0.63; it lost where C is narrow
# (256x10x32: 1.5x), with 16 rows and a long inner dimension (16x1024x256: 0.95-1.17),
# or an inner dimension of 32 (256x256x32: 0.94-1.32), which these bounds leave to BLAS.
DIRECT_K = 16           # an inner dimension this short ...
DIRECT_M = 12           # ... or this few rows of C
DIRECT_N = 32           # C at least this wide
DIRECT_WORK = 1 << 22   # and at most this many multiply-adds


def direct(m: int, n: int, k: int, trans_b: int) -> bool:
    """Whether C = A B of this shape is computed directly (see DIRECT_K)."""
    return trans_b == IR.CBLAS_NO_TRANS and (n >= DIRECT_N or (m <= DOTS_M and n >= ROW_N)) \
        and (k <= DIRECT_K or m <= DIRECT_M) and m * n * k <= DIRECT_WORK


def program_task(layout: dict, lhs: tuple, rhs: tuple, out: tuple, dt: np.dtype,
                 threads: int) -> Optional[tuple]:
    """`task` for a dot_general step (devices/cpu/native_program.py, and the general
    path's `run_product`): lhs/rhs/out are the stored (C-contiguous) shapes, `layout` the
    stanza's gemm layout, (batch, m, k) @ (batch, k, n). Covered whenever each operand
    reads as that in place: its dimensions, permuted, merge into batch, rows and columns
    (x @ W.T with x of (B, T, C) is one (B*T, C) matrix; attention's q @ k.T a batch
    of matrices, k's transposed). None when the product is not one this path covers."""
    m, n, k, batch = layout["m"], layout["n"], layout["k"], layout["batch"]
    if dt not in _SYMBOLS or not available() or not (m and n and k and batch) \
            or math.prod(out) != batch * m * n:
        return None
    pa, pc = _operands(layout, lhs, rhs)
    if pa is None or pc is None:
        return None
    strides = (pa[2], pc[2], m * n) if batch > 1 else (0, 0, 0)
    return task(dt, m, n, k, pa[:2], pc[:2], threads if batch * work(m, n, k) >= SPLIT_WORK else 1,
                batch, strides)


def _operands(layout: dict, lhs: tuple, rhs: tuple) -> tuple:
    """(A's, B's) (CBLAS flag, leading dimension, batch stride) read in place, or None."""
    m, n, k, batch = layout["m"], layout["n"], layout["k"], layout["batch"]
    return (_read(_stored_dims(tuple(lhs), layout["lhs_perm"]), batch, m, k),
            _read(_stored_dims(tuple(rhs), layout["rhs_perm"]), batch, k, n))


def prefetch(module: Module, steps: list) -> None:
    """Start building the tile functions that the products among a program's `steps`
    will call, each on a thread of its own (runtime_objects.prefetch), where none is
    built yet. The CPU device calls this when the steps are planned (driver.compile's
    `planned`), so the tiles are built while the program's own code is: they were built
    one after the other inside its first run (0.3-0.5 s of a CNN's first step)."""
    if not available():
        return
    ins, wanted = module.instructions, []
    for s in steps:
        if not isinstance(s, LibraryStep) or s.call != "gemm":
            continue
        (lhs, rhs), out = (ins[o] for o in s.operands), ins[s.pos]
        m, n, k, batch = (s.args[x] for x in ("m", "n", "k", "batch"))
        dt = out.dtype.np
        if not lhs.dtype == rhs.dtype == out.dtype or dt not in _SYMBOLS \
                or not (m and n and k and batch) or math.prod(out.shape) != batch * m * n:
            continue
        pa, pc = _operands(s.args, lhs.shape, rhs.shape)
        if pa is not None and pc is not None:
            wanted.append((dt, kind(dt, m, n, k, pa[0], pc[0])))
    for dt, how in dict.fromkeys(wanted):
        if (dt, how) not in _BUILT:
            runtime_prefetch("gemm_tiles", _KINDS[how], dt.itemsize)


# Inside a whole-program job a split costs no dispatch (the job is parallel already; the
# other threads would only wait at the task's barrier), so a product is split as soon as
# its tiles take more than a few microseconds. Its time is not its multiply-adds alone:
# BLAS clears C first (beta = 0) and writes it again, so a product with a short inner
# dimension (a training step's 256x512 = 256x10 @ 10x512) is bound by its C and its
# packed operands, not by its m*n*k (measured on one thread: 1.3M multiply-adds over a
# 256x512 C take 55 us warm and 80-100 us inside the step, 2-3x their arithmetic alone).
SPLIT_WORK = 1 << 19       # below this estimated work a product is one tile (one thread)
C_WEIGHT = 24              # work per element of C (cleared, written, read back)
PACK_WEIGHT = 4            # work per element of A and B (read and packed)


def work(m: int, n: int, k: int) -> int:
    """A product's estimated cost in multiply-add units: its arithmetic plus the memory
    traffic of C and of packing A and B."""
    return m * n * k + C_WEIGHT * m * n + PACK_WEIGHT * k * (m + n)
