"""The loop body of `direct_convolution` (compiler/primitives/conv_direct.py): a 2-D
convolution computed in place from its NCHW input, with no patch matrix.

One body call computes a block of the output held in vector registers: OB output
channels times `slots` vectors of V consecutive outputs along a row (XB vectors of one
row, RY rows). For each input channel and window tap it loads one input vector per slot
(V inputs `stride` apart: a contiguous load, shuffled when the stride is above 1) and one
weight per output channel (broadcast), and adds their products to every accumulator:
OB + slots loads for OB * slots fused multiply-adds. The input is read where it lies;
the output is written once. The window's rows are a loop (its columns unrolled) where the
stride is 1: the function is then a third of a 3x3 convolution's code, which is what
LLVM's time in the first step follows.

Blocks at the edges are moved back inside (the last channel block starts at O - OB, the
last row block at Ho - RY, the last vector of a row at Wo - V): they compute a few
outputs twice, with the same value, instead of needing masked code.
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from .loops import counted_loop, const
from .llvm_types import storage_type

I32 = ir.IntType(32)


@dataclass(frozen=True)
class Blocking:
    """How the output is cut into register blocks (see the module docstring)."""
    ob: int          # output channels per block
    v: int           # outputs per vector
    xb: int          # vectors per row in a block
    ry: int          # rows (row groups, with pv > 1) per block
    n_ob: int        # blocks along channels, rows and row vectors
    n_ry: int
    n_xb: int
    pv: int = 1      # whole rows per vector (rows narrower than a vector: 8 outputs in
                     # 16 lanes would leave half of every multiply-add unused)

    @property
    def space(self) -> tuple:
        return (self.n_ob, self.n_ry, self.n_xb)


def blocking(o: int, ho: int, wo: int, itemsize: int, vector_bytes: int,
             registers: int) -> Blocking:
    """The register blocks of an (O, Ho, Wo) output for vectors of `vector_bytes` and
    `registers` vector registers (a few are left for the loads and broadcasts)."""
    lanes = max(1, vector_bytes // itemsize)
    pv = lanes // wo if wo < lanes and lanes % wo == 0 and ho >= lanes // wo else 1
    v = lanes if wo >= lanes or pv > 1 else 1 << (wo.bit_length() - 1)
    vectors = 1 if pv > 1 else -(-wo // v)
    xb = min(vectors, 4)
    ry = max(1, min(ho // pv, 4 // xb))
    budget = registers * 3 // 4
    most = max(1, min(o, budget // (xb * ry)))
    ob = max(d for d in range(1, most + 1) if o % d == 0)
    if 2 * ob <= most:           # no divisor near the budget: overlap the last block
        ob = most
    return Blocking(ob, v, xb, ry, -(-o // ob), -(-ho // (ry * pv)), -(-vectors // xb), pv)


def _joined(b, parts: list) -> ir.Value:
    """Vectors of consecutive rows (a power of two of them), one after the other in one
    vector."""
    while len(parts) > 1:
        width = parts[0].type.count
        mask = ir.Constant(ir.VectorType(I32, 2 * width),
                           [ir.Constant(I32, k) for k in range(2 * width)])
        parts = [b.shuffle_vector(parts[i], parts[i + 1], mask)
                 for i in range(0, len(parts), 2)]
    return parts[0]


def _add(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """x + y of i64 offsets, folded where both are constants or one is zero: llvmlite
    folds nothing, and a register block's addresses are mostly constants (the IR of a
    conv function was half additions and multiplications of constants, each an
    instruction built and printed in Python, then folded by LLVM anyway)."""
    if isinstance(x, ir.Constant) and isinstance(y, ir.Constant):
        return const(x.constant + y.constant)
    if isinstance(y, ir.Constant) and y.constant == 0:
        return x
    if isinstance(x, ir.Constant) and x.constant == 0:
        return y
    return b.add(x, y)


def _mul(b: ir.IRBuilder, x: ir.Value, n: int, flags: tuple = ()) -> ir.Value:
    """x * n (n a Python int), folded as `_add`."""
    if isinstance(x, ir.Constant):
        return const(x.constant * n)
    if n == 1:
        return x
    return b.mul(x, const(n), flags=flags)


def _first(b: ir.IRBuilder, i: ir.Value, size: int, total: int) -> ir.Value:
    """Block i's first position (i * size), moved back inside the extent `total`."""
    at = _mul(b, i, size, flags=("nsw",))
    if isinstance(at, ir.Constant):
        return const(min(at.constant, total - size))
    last = const(total - size)
    return b.select(b.icmp_signed("<", at, last), at, last)


def _zero(vt: ir.VectorType) -> ir.Constant:
    """A vector of zeros (printed `zeroinitializer`, not lane by lane)."""
    return ir.Constant(vt, None)


class StridedRows:
    """Inputs `sx` apart along rows, for taps at offsets 0 ... `reach` (kx * dx): each
    row's block (the part * sx inputs under a vector of taps) is loaded once, every tap's
    inputs picked from it, one shuffle per phase (offset % sx), shifted by offset // sx
    along the few inputs past the block (the operand holds them: its rows are at least
    Wo * sx + (KW - 1) * dx long). A wide load and a shuffle per tap read each input
    about three times at stride 2 (3x3)."""

    def __init__(self, b: ir.IRBuilder, base: ir.Value, ft: ir.Type, part: int, sx: int,
                 reach: int, align: int) -> None:
        self.b, self.base, self.ft, self.part, self.sx, self.align = b, base, ft, part, sx, align
        self.block = ir.VectorType(ft, part * sx)
        self.after = reach - sx + 1             # inputs past the block the taps reach

    def _mask(self, picks: list) -> ir.Constant:
        return ir.Constant(ir.VectorType(I32, len(picks)), [ir.Constant(I32, k) for k in picks])

    def tap(self, cache: dict, key: object, at: ir.Value, off: int) -> ir.Value:
        """The `part` inputs sx apart from at + off, at the row whose block starts at `at`
        (`key` names it in `cache`, which the caller keeps while the row is read)."""
        b, part, sx = self.b, self.part, self.sx
        phase, shift = off % sx, off // sx
        row = cache.get(key)
        if row is None:
            ptr = b.gep(self.base, [at], inbounds=True, source_etype=self.ft)
            row = cache[key] = {"block": b.load(ptr, typ=self.block, align=self.align)}
        if phase not in row:
            row[phase] = b.shuffle_vector(row["block"], ir.Constant(self.block, ir.Undefined),
                                          self._mask([phase + k * sx for k in range(part)]))
        if not shift:
            return row[phase]
        if "next" not in row:
            few = ir.VectorType(self.ft, self.after)
            ptr = b.gep(self.base, [_add(b, at, const(part * sx))], inbounds=True,
                        source_etype=self.ft)
            row["next"] = b.shuffle_vector(
                b.load(ptr, typ=few, align=self.align), ir.Constant(few, ir.Undefined),
                self._mask([min(k, self.after - 1) for k in range(part)]))
        return b.shuffle_vector(row[phase], row["next"], self._mask(
            [shift + k for k in range(part - shift)]
            + [part + phase + k * sx for k in range(shift)]))


def body(e, out: ir.Value, operands: list, index: list, shapes: tuple, dtype,
         strides: tuple, dilation: tuple, blk: Blocking) -> None:
    """Compute the output block at `index` = (n, channel block, row block, vector block)."""
    b = e.b
    (n_, c_, hp, wp), (o_, _, kh, kw), (_, _, ho, wo) = shapes
    sy, sx = strides
    dy, dx = dilation
    ft = storage_type(dtype)
    vt = ir.VectorType(ft, blk.v)
    align = dtype.itemsize
    n, ob, ry, xb = index

    pv = blk.pv
    o0 = _first(b, ob, blk.ob, o_)
    y0 = _first(b, ry, blk.ry * pv, ho)
    xs = []
    for j in range(blk.xb):     # each vector of the block: its first output along the row
        at = _mul(b, _add(b, _mul(b, xb, blk.xb), const(j)), blk.v)
        last = wo - blk.v if pv == 1 else 0
        if isinstance(at, ir.Constant):
            xs.append(const(min(at.constant, last)))
        else:
            xs.append(b.select(b.icmp_signed("<", at, const(last)), at, const(last)))
    slots = [(r * pv, x) for r in range(blk.ry) for x in xs]    # (first row, first output)
    zero = _zero(vt)
    fma = f"llvm.fma.v{blk.v}f{8 * dtype.itemsize}"
    splat = ir.Constant(ir.VectorType(I32, blk.v), [ir.Constant(I32, 0)] * blk.v)
    part = blk.v // pv          # outputs of one row in a vector
    pt = ir.VectorType(ft, part)
    # where each slot's rows start in an input plane, and each channel's weights in w:
    # the same for every input channel and tap (the taps add constants)
    top = _mul(b, y0, sy * wp)
    starts = [[_add(b, top, _add(b, const((r + p) * sy * wp), _mul(b, x, sx)))
               for p in range(pv)] for r, x in slots]
    w_rows = [_mul(b, _add(b, o0, const(k)), c_) for k in range(blk.ob)]

    pick = ir.Constant(ir.VectorType(I32, part), [ir.Constant(I32, k * sx) for k in range(part)])
    wide = ir.VectorType(ft, part * sx)

    def load_row(base: ir.Value, x: ir.Value) -> ir.Value:
        """`part` inputs sx apart from offset x: a wide load and a shuffle where whole rows
        share a vector (the picker's shift per tap cost the 8x8 stride-2 forward ~8%)."""
        ptr = b.gep(base, [x], inbounds=True, source_etype=ft)
        if sx == 1:
            return b.load(ptr, typ=pt, align=align)
        raw = b.load(ptr, typ=wide, align=align)
        return b.shuffle_vector(raw, ir.Constant(wide, ir.Undefined), pick)

    picker = StridedRows(b, operands[0], ft, part, sx, (kw - 1) * dx, align)

    def window_row(ky: ir.Value, at: list, w_at: list, accs: list) -> list:
        """The taps of window row ky (a loop counter, or the constant 0 of a one-row
        window): OB * slots * KW multiply-adds."""
        y_off = _mul(b, ky, dy * wp)
        w_off = _mul(b, ky, kw)
        accs = list(accs)
        rows_read: dict = {}        # strided: each input row's block, loaded once
        for kx in range(kw):
            if sx > 1 and pv == 1:
                vals = [_joined(b, [picker.tap(rows_read, (s, p), _add(b, a, y_off), kx * dx)
                                    for p, a in enumerate(rows)]) for s, rows in enumerate(at)]
            else:
                tap = _add(b, y_off, const(kx * dx))
                vals = [_joined(b, [load_row(operands[0], _add(b, a, tap)) for a in rows])
                        for rows in at]
            for k in range(blk.ob):
                ptr = b.gep(operands[1], [_add(b, w_at[k], _add(b, w_off, const(kx)))],
                            inbounds=True, source_etype=ft)
                w = b.load(ptr, typ=ft)
                wv = b.shuffle_vector(b.insert_element(ir.Constant(vt, ir.Undefined), w,
                                                       ir.Constant(I32, 0)),
                                      ir.Constant(vt, ir.Undefined), splat)
                for s, val in enumerate(vals):
                    i = k * len(slots) + s
                    accs[i] = e.call_intrinsic(fma, vt, [wv, val, accs[i]])
        return accs

    def channel(c: ir.Value, accs: list) -> list:
        plane = _mul(b, _add(b, _mul(b, n, c_), c), hp * wp, flags=("nsw",))
        at = [[_add(b, plane, s) for s in rows] for rows in starts]
        w_at = [_mul(b, _add(b, row, c), kh * kw) for row in w_rows]
        if kh > 1 and sx == 1:
            # the window's rows in a loop, not unrolled: each row's OB * slots * KW
            # multiply-adds keep the units busy, and a 3x3 convolution's function is a
            # third of the code for LLVM to optimize and select (the first step's compile)
            return counted_loop(b, const(0), const(kh), accs,
                                lambda ky, a: window_row(ky, at, w_at, a), name="ky",
                                interleave=False)
        # strided: unrolled, so that a row's gathered inputs (a wide load and a shuffle)
        # serve every tap that reads them (loops cost the 3x3 stride-2 convolution ~15%)
        for ky in range(kh):
            accs = window_row(const(ky), at, w_at, accs)
        return accs

    accs = counted_loop(b, const(0), const(c_), [zero] * (blk.ob * len(slots)), channel,
                        name="c", interleave=False)
    for k in range(blk.ob):
        o = _add(b, o0, const(k))
        for s, (r, x) in enumerate(slots):
            row = _mul(b, _add(b, _mul(b, _add(b, _mul(b, n, o_), o), ho), _add(b, y0, const(r))),
                       wo)
            ptr = b.gep(out, [_add(b, row, x)], inbounds=True, source_etype=ft)
            b.store(accs[k * len(slots) + s], ptr, align=align)


# ---- the weight gradient ------------------------------------------------------------------

@dataclass(frozen=True)
class FilterBlocking:
    """The weight gradient's blocks: OB output channels times a group of window taps per
    body call (one per input channel), each a vector accumulator summed over the batch,
    the rows and the row vectors, then across its lanes."""
    ob: int
    taps: tuple      # groups of (ky, kx): one Loop each
    v: int           # outputs per vector along a row
    n_ob: int
    pv: int = 1      # whole rows per vector (narrow rows, see Blocking)
    nt: int = 0      # images per tile (0: the whole batch in one body call)
    n_nt: int = 1    # tiles along the batch
    c_outer: bool = False   # without tiles: input channels outside the channel blocks

    @property
    def space(self) -> tuple:
        """The loop's space: (channel block, tile, input channel), the tiles in order;
        without tiles (channel block, input channel), or (input channel, channel block)
        with `c_outer`."""
        if self.nt:
            return (self.n_ob, self.n_nt, None)
        return (None, self.n_ob) if self.c_outer else (self.n_ob, None)


# The input planes of a tile of images, all input channels, kept within this many bytes
# (a share of a core's L2): a thread runs each channel block's tiles in order and every
# input channel within a tile, so that block's output gradient is read from memory once
# and the tile's input from cache for each channel. Over the whole batch per body call
# (no tiles), g was read again for every input channel and x for every channel block:
# 50 MB of cache misses for a 2 MB layer, the weight gradient bound by memory.
TILE_BYTES = 256 << 10


# Output-gradient planes smaller than this many elements: no tiles (a tile's body call
# then runs few row iterations, and its horizontal sums and partial stores weigh: the
# 8x8 planes of the CNN's last stage were ~8% slower in tiles, A/B in one process).
MIN_TILED_PLANE = 256


# What a loop reads again and again stays in a core's cache up to this many bytes (half of
# a 1 MB L2: the other operand streams through it meanwhile).
REREAD_BYTES = 512 << 10


def images_per_tile(n: int, plane_bytes: int, n_ob: int, g_plane: int = MIN_TILED_PLANE) -> int:
    """The largest divisor of the batch n whose input planes fit TILE_BYTES; 0 where
    tiles gain nothing (one tile; one channel block: the loop's outer dimension, split
    over threads, would be the ordered tiles; small output-gradient planes)."""
    fit = max(d for d in range(1, n + 1)
              if n % d == 0 and (d == 1 or d * plane_bytes <= TILE_BYTES))
    return 0 if fit >= n or n_ob < 2 or g_plane < MIN_TILED_PLANE else fit


def filter_blocking(o: int, kernel: tuple, ho: int, wo: int, itemsize: int,
                    vector_bytes: int, registers: int, n: int = 1,
                    plane_bytes: int = 0, g_bytes: int = 0,
                    channels: int = 0) -> FilterBlocking:
    """`plane_bytes`: the input's bytes per image (C * Hp * Wp * itemsize), for tiles of
    the batch n (0: no tiles); `g_bytes`: the output gradient's (N * O * Hg * Wg *
    itemsize) and `channels` C: without tiles, the loop runs the input channels outside
    the channel blocks (g whole again per input channel, each channel's input once)
    where g stays in cache (REREAD_BYTES) and the input would not, or where that reads
    less: the other way round (the input whole again per channel block, g's block once),
    the CNN's 8x8 weight gradients (64 channels, 32 blocks) read their 0.8-1.3 MB input
    32 times from past L2: 6-11% slower than g (0.5 MB) 32-64 times from L2."""
    lanes = max(1, vector_bytes // itemsize)
    pv = lanes // wo if wo < lanes and lanes % wo == 0 and ho % (lanes // wo) == 0 else 1
    v = lanes if wo >= lanes or pv > 1 else 1 << (wo.bit_length() - 1)
    taps = [(ky, kx) for ky in range(kernel[0]) for kx in range(kernel[1])]
    budget = registers * 3 // 4           # accumulators and the output-gradient vectors
    per = max(1, min(len(taps), budget - 1))
    groups = tuple(tuple(taps[i:i + per]) for i in range(0, len(taps), per))
    most = max(1, min(o, budget // (len(groups[0]) + 1)))
    ob = max(d for d in range(1, most + 1) if o % d == 0)
    if 2 * ob <= most:
        ob = most
    n_ob = -(-o // ob)
    # no tiles where blocks overlap (the last one moved back inside computes some
    # channels of the one before it again): each block stores its first tile and adds
    # the others, so two such blocks on two threads would race on those channels
    nt = images_per_tile(n, plane_bytes, n_ob, ho * wo) if plane_bytes and o % ob == 0 \
        else 0
    x_bytes = n * plane_bytes
    c_outer = not nt and g_bytes > 0 and (
        g_bytes <= REREAD_BYTES < x_bytes if (g_bytes <= REREAD_BYTES) != (
            x_bytes <= REREAD_BYTES) else channels * g_bytes < n_ob * x_bytes)
    return FilterBlocking(ob, groups, v, n_ob, pv, nt, n // nt if nt else 1, c_outer)


def _hsum(e, v: ir.Value, lanes: int) -> ir.Value:
    """The sum of a vector's lanes: LLVM's reduction, reassociated (the same tree of
    halves in the object code; one call in the IR, not 2 log2(lanes) shuffles). NVPTX
    has no safe lowering of that intrinsic (gpu_math.check_intrinsics): the tree itself."""
    ft = v.type.element
    if "nvptx" in (e.llmod.triple or ""):
        b = e.b
        while lanes > 1:
            half = lanes // 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half), list(range(half))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half),
                                                    list(range(half, 2 * half))))
            v, lanes = b.fadd(lo, hi), half
        return b.extract_element(v, ir.Constant(I32, 0))
    name = f"llvm.vector.reduce.fadd.v{lanes}{ft.intrinsic_name}"
    fn = e.llmod.globals.get(name)
    if fn is None:
        fn = ir.Function(e.llmod, ir.FunctionType(ft, [ft, v.type]), name)
    return e.b.call(fn, [ir.Constant(ft, -0.0), v], fastmath=("reassoc",))


def filter_body(e, out: ir.Value, operands: list, index: list, shapes: tuple, dtype,
                strides: tuple, dilation: tuple, blk: FilterBlocking, taps: tuple,
                g_offset: tuple, g_size: tuple, registers: int = 32) -> None:
    """gW[o, c, ky, kx] for the block's channels and `taps`, at `index` = (channel block,
    input channel), or (channel block, tile, input channel) with tiles of the batch (the
    first tile stores, the others add): sums over n, y and the row's vectors of
    g[n, o, y, x] * xp[...], g the (Ho, Wo) window at `g_offset` of the operand's
    (Hg, Wg) rows and columns."""
    b = e.b
    (n_, c_, hp, wp), (_, o_, hg, wg), (_, _, kh, kw) = shapes
    (ho, wo), (oy, ox) = g_size, g_offset
    sy, sx = strides
    dy, dx = dilation
    ft = storage_type(dtype)
    vt = ir.VectorType(ft, blk.v)
    align = dtype.itemsize
    ob, tile, c = index if blk.nt else (index[1], None, index[0]) if blk.c_outer \
        else (index[0], None, index[1])
    o0 = _first(b, ob, blk.ob, o_)
    zero = _zero(vt)
    fma = f"llvm.fma.v{blk.v}f{8 * dtype.itemsize}"
    pv = blk.pv
    part = blk.v // pv          # outputs of one row in a vector
    pt = ir.VectorType(ft, part)
    vectors = []                # (first output, lanes counted already by the vector before)
    for j in range(-(-wo // part)):
        x0 = min(j * part, wo - part)
        vectors.append((x0, j * part - x0))
    picker = StridedRows(b, operands[0], ft, part, sx, max(kx for _, kx in taps) * dx, align)

    def load_x(rows_read: dict, q: int, at: ir.Value, kx: int) -> ir.Value:
        """`part` inputs sx apart from at + kx * dx, `at` where input row q's block
        starts."""
        if sx > 1:
            return picker.tap(rows_read, q, at, kx * dx)
        ptr = b.gep(operands[0], [_add(b, at, const(kx * dx))], inbounds=True,
                    source_etype=ft)
        return b.load(ptr, typ=pt, align=align)

    def load_g(at: ir.Value) -> ir.Value:
        """One vector of g from `at`: pv rows of `part`, joined where g's rows are wider
        than the window (padded), one load where they lie one after the other."""
        if pv == 1 or wg == wo:
            return b.load(b.gep(operands[1], [at], inbounds=True, source_etype=ft), typ=vt,
                          align=align)
        return _joined(b, [b.load(b.gep(operands[1], [_add(b, at, const(p * wg))],
                                        inbounds=True, source_etype=ft), typ=pt, align=align)
                           for p in range(pv)])

    # rows of g per iteration when whole rows are not packed: two, where they divide and
    # fit the registers, so that an input vector serves both rows' taps it meets
    per = 2 if pv == 1 and ho % 2 == 0 and blk.ob * (len(taps) + 2) < registers else 1

    def row(yg: ir.Value, n: ir.Value, accs: list) -> list:
        """Row group yg: rows yg * pv ... (yg + 1) * pv - 1, whole when pv > 1; or rows
        yg * per ... (yg + 1) * per - 1, one vector a row."""
        accs = list(accs)
        y = _mul(b, yg, pv * per)
        g_row = _add(b, _mul(b, _add(b, _mul(b, _add(b, _mul(b, n, o_), o0), hg),
                                     _add(b, y, const(oy))), wg), const(ox))
        x_plane = _mul(b, _add(b, _mul(b, n, c_), c), hp * wp, flags=("nsw",))
        x_top = _add(b, x_plane, _mul(b, y, sy * wp))
        for x0, seen in vectors:
            gs = []             # gs[r][k]: row r of the group, channel k of the block
            for r in range(per):
                gs.append([])
                for k in range(blk.ob):
                    gv = load_g(_add(b, g_row, const(k * hg * wg + r * wg + x0)))
                    if seen:    # lanes the vector before summed already: zero here
                        keep = ir.Constant(ir.VectorType(ir.IntType(1), blk.v),
                                           [ir.Constant(ir.IntType(1), int(l >= seen))
                                            for l in range(blk.v)])
                        gv = b.select(keep, gv, zero)
                    gs[r].append(gv)
            loaded: dict = {}   # input rows (offsets from the group's first) read once
            rows_read: dict = {}    # strided: each input row's block, loaded once
            for r in range(per):
                for t, (ky, kx) in enumerate(taps):
                    rows = tuple((r + p) * sy + ky * dy for p in range(pv))
                    if (rows, kx) not in loaded:
                        loaded[rows, kx] = _joined(b, [load_x(rows_read, q, _add(
                            b, x_top, const(q * wp + x0 * sx)), kx) for q in rows])
                    xv = loaded[rows, kx]
                    for k in range(blk.ob):
                        i = k * len(taps) + t
                        accs[i] = e.call_intrinsic(fma, vt, [gs[r][k], xv, accs[i]])
        return accs

    def image(n: ir.Value, accs: list) -> list:
        return counted_loop(b, const(0), const(ho // (pv * per)), accs,
                            lambda y, a: row(y, n, a),
                            name="y", interleave=False)

    first_n = _mul(b, tile, blk.nt) if blk.nt else const(0)
    end_n = _add(b, first_n, const(blk.nt)) if blk.nt else const(n_)
    accs = counted_loop(b, first_n, end_n, [zero] * (blk.ob * len(taps)), image,
                        name="n", interleave=False)
    later = b.icmp_signed(">", tile, const(0)) if blk.nt else None
    for k in range(blk.ob):
        for t, (ky, kx) in enumerate(taps):
            at = _add(b, _mul(b, _add(b, _mul(b, _add(b, o0, const(k)), c_), c), kh * kw),
                      const(ky * kw + kx))
            ptr = b.gep(out, [at], inbounds=True, source_etype=ft)
            total = _hsum(e, accs[k * len(taps) + t], blk.v)
            if later is not None:   # a later tile adds to the tiles before (the first's
                # store comes first: the tiles of a channel block run in order)
                total = b.select(later, b.fadd(b.load(ptr, typ=ft, align=align), total),
                                 total)
            b.store(total, ptr, align=align)
