"""The CPU's direct convolution (compiler/primitives/conv_direct.py): 2-D convolutions
computed by our own register-blocked loop instead of im2col and a product. Every shape
below is checked against the interpreter (the NumPy reference) and against PyTorch; the
sizes hit the blocks' edges (channels, rows and row vectors that do not divide into
blocks), strides, dilations, padding, 1x1 and wide rows; gradients against finite
differences in float64."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.codegen import conv_direct
from lazyarray.compiler.primitive import apply
from lazyarray.lift import lift
from lazyarray.ops import convolution as C

import gradcheck

conv2d = lift(C.conv2d)

# (N, C, H, W), (O, KH, KW), conv2d keywords
SHAPES = [
    ((2, 3, 8, 8), (4, 3, 3), dict(padding=1)),
    ((1, 5, 9, 11), (7, 3, 3), dict(stride=2, padding=1)),
    ((2, 4, 10, 13), (6, 3, 3), dict(padding=2, dilation=2)),
    ((2, 16, 32, 32), (16, 3, 3), dict(padding=1)),
    ((1, 16, 32, 32), (32, 3, 3), dict(stride=2, padding=1)),
    ((2, 8, 7, 7), (10, 1, 1), dict()),
    ((2, 3, 5, 17), (5, 5, 5), dict(stride=3, padding=2)),
    ((1, 2, 3, 70), (13, 3, 2), dict(stride=(1, 2), padding=(0, 1))),   # several x blocks
    ((1, 3, 1, 1), (2, 1, 1), dict()),                                  # one output
    ((3, 2, 6, 5), (1, 2, 3), dict(padding=(1, 0), dilation=(2, 1))),
    ((1, 33, 4, 9), (33, 3, 3), dict(padding="same")),
    ((2, 8, 8, 8), (64, 3, 3), dict(padding=1)),                       # 2 rows a vector
    ((1, 3, 9, 4), (5, 3, 3), dict(padding=1)),                         # 4 rows a vector
    ((1, 4, 16, 16), (6, 3, 3), dict(stride=2, padding=1)),             # 8 outputs, strided
    ((1, 2, 5, 8), (3, 3, 3), dict(padding=(0, 1), dilation=(2, 1))),  # odd rows: overlap
]


def _inputs(xs, ws, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal((ws[0], xs[1]) + tuple(ws[1:])).astype(dtype)
    return x, w


def _plan_ops(y) -> str:
    return la.debug.ir([y], stage="optimized_hlo")


@pytest.mark.parametrize("xs,ws,kw", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_convolution_matches_reference_and_torch(xs, ws, kw, dtype):
    x, w = _inputs(xs, ws, dtype)
    y = conv2d(la.asarray(x), la.asarray(w), **kw)
    assert "direct_convolution" in _plan_ops(y)         # the CPU's own loop ran it
    want = conv2d(la.asarray(x, device="interpreter"), la.asarray(w, device="interpreter"), **kw)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    scale = np.sqrt(np.prod(w.shape[1:]))                # sums of C * KH * KW terms
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=tol, atol=tol * scale)
    torch = pytest.importorskip("torch")
    t = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), **kw).numpy()
    np.testing.assert_allclose(y.numpy(), t, rtol=tol, atol=tol * scale)


def _gradients(x, w, kw, device=None):
    xl, wl = la.asarray(x, device=device), la.asarray(w, device=device)
    with la.GradientTape() as tape:
        tape.watch(xl)
        tape.watch(wl)
        y = conv2d(xl, wl, **kw)
        loss = (y * y).sum()
    return y, tape.gradient(loss, [xl, wl])


def _torch_gradients(x, w, kw):
    """PyTorch's gradients of sum(conv2d(x, w) ** 2) with respect to x and w (NumPy)."""
    torch = pytest.importorskip("torch")
    xt, wt = (torch.from_numpy(a).requires_grad_() for a in (x, w))
    yt = torch.nn.functional.conv2d(xt, wt, **kw)
    (yt * yt).sum().backward()
    return xt.grad.numpy(), wt.grad.numpy()


@pytest.mark.parametrize("xs,ws,kw", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_direct_gradients_match_reference_and_torch(xs, ws, kw, dtype):
    """The weight gradient (direct_filter_grad) and the input gradient (a convolution
    itself: direct where its stride is 1) against the interpreter and PyTorch."""
    x, w = _inputs(xs, ws, dtype, seed=2)
    y, (gx, gw) = _gradients(x, w, kw)
    assert "direct_filter_grad" in _plan_ops(gw)
    _, want = _gradients(x, w, kw, device="interpreter")
    tgx, tgw = _torch_gradients(x, w, kw)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for got, ref, t in ((gx, want[0], tgx), (gw, want[1], tgw)):
        for other in (ref.numpy(), t):
            scale = np.abs(other).max()
            np.testing.assert_allclose(got.numpy(), other, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("xs,ws,kw", [SHAPES[i] for i in (0, 1, 2, 6, 9)], ids=str)
def test_direct_convolution_gradient(xs, ws, kw):
    x, w = _inputs(xs, ws, np.float64, seed=3)
    gradcheck.check_direction(lambda a, b: conv2d(a, b, **kw), [x, w])


def test_grouped_and_dilated_input_convolutions_keep_im2col():
    """What the loop does not cover (groups, lhs dilation) goes to im2col and a product,
    as on other targets."""
    x, w = _inputs((1, 4, 6, 6), (4, 3, 3), np.float32)
    grouped = conv2d(la.asarray(x), la.asarray(w[:, :2]), groups=2, padding=1)
    dilated = lift(lambda a, b: apply("convolution", a, b, window_strides=(1, 1),
                                      padding_low=(1, 1), padding_high=(1, 1),
                                      lhs_dilation=(2, 1), rhs_dilation=(1, 1),
                                      feature_group_count=1))(la.asarray(x), la.asarray(w))
    for y in (grouped, dilated):
        text = _plan_ops(y)
        assert "direct_convolution" not in text and "dot_general" in text


@pytest.mark.parametrize("o,ho,wo", [(16, 32, 32), (7, 5, 3), (1, 1, 1), (64, 8, 8),
                                     (33, 3, 70), (5, 2, 17), (8, 9, 4), (3, 1, 8), (4, 7, 2)])
@pytest.mark.parametrize("itemsize,vector_bytes,registers", [(4, 64, 32), (4, 32, 16),
                                                             (8, 32, 16)])
def test_blocks_cover_the_output(o, ho, wo, itemsize, vector_bytes, registers):
    """Every output lies in some block, no block leaves the output (blocks at the edges
    are moved back inside), and the accumulators fit the registers."""
    blk = conv_direct.blocking(o, ho, wo, itemsize, vector_bytes, registers)
    rows, width = blk.ry * blk.pv, blk.v // blk.pv      # a block's rows; a row's outputs
    assert blk.ob * blk.ry * blk.xb <= registers
    assert blk.ob <= o and rows <= ho and width <= wo and blk.v * itemsize <= vector_bytes
    assert blk.pv == 1 or width == wo                    # whole rows in a vector
    seen = np.zeros((o, ho, wo), bool)
    vectors = -(-wo // width)
    for b in range(blk.n_ob):
        o0 = min(b * blk.ob, o - blk.ob)
        for r in range(blk.n_ry):
            y0 = min(r * rows, ho - rows)
            for xb in range(blk.n_xb):
                for j in range(blk.xb):
                    x0 = min((xb * blk.xb + j) * width, wo - width)
                    assert (xb * blk.xb + j) < vectors or x0 == wo - width
                    seen[o0:o0 + blk.ob, y0:y0 + rows, x0:x0 + width] = True
    assert seen.all()


@pytest.mark.parametrize("o,kernel,wo", [(16, (3, 3), 32), (7, (3, 3), 5), (1, (1, 1), 1),
                                         (64, (1, 1), 8), (5, (7, 7), 70), (3, (5, 5), 17)])
@pytest.mark.parametrize("itemsize,vector_bytes,registers", [(4, 64, 32), (4, 32, 16),
                                                             (8, 32, 16)])
def test_filter_blocks_cover_every_tap(o, kernel, wo, itemsize, vector_bytes, registers):
    """The weight gradient's tap groups cover each tap once; accumulators and output-
    gradient vectors fit the registers; channel blocks cover every output channel."""
    blk = conv_direct.filter_blocking(o, kernel, 8, wo, itemsize, vector_bytes, registers)
    taps = [t for group in blk.taps for t in group]
    assert sorted(taps) == [(a, b) for a in range(kernel[0]) for b in range(kernel[1])]
    assert all(blk.ob * (len(group) + 1) <= registers for group in blk.taps)
    assert blk.v // blk.pv <= wo and blk.v * itemsize <= vector_bytes
    assert blk.pv == 1 or (blk.v // blk.pv == wo and 8 % blk.pv == 0)
    covered = set()
    for b in range(blk.n_ob):
        o0 = min(b * blk.ob, o - blk.ob)
        covered.update(range(o0, o0 + blk.ob))
    assert covered == set(range(o))


# (x shape, w shape, convolution attributes): strided convolutions whose input gradient
# is one stride-1 convolution per phase (compiler/primitives/convolution.py)
PHASES = [
    ((2, 3, 9, 8), (4, 3, 3, 3), dict(window_strides=(2, 2), padding_low=(1, 1),
                                      padding_high=(1, 1), rhs_dilation=(1, 1), groups=1)),
    ((1, 2, 7, 7), (3, 2, 1, 1), dict(window_strides=(2, 2), padding_low=(0, 0),
                                      padding_high=(0, 0), rhs_dilation=(1, 1), groups=1)),
    ((1, 2, 11, 10), (2, 2, 3, 2), dict(window_strides=(3, 2), padding_low=(2, 0),
                                        padding_high=(1, 1), rhs_dilation=(2, 3), groups=1)),
    ((2, 4, 8, 9), (6, 2, 3, 3), dict(window_strides=(2, 1), padding_low=(1, -1),
                                      padding_high=(0, 1), rhs_dilation=(1, 1), groups=2)),
    ((1, 1, 12, 5), (1, 1, 4, 5), dict(window_strides=(4, 1), padding_low=(0, 2),
                                       padding_high=(3, 2), rhs_dilation=(1, 1), groups=1)),
    ((1, 2, 13), (3, 2, 3), dict(window_strides=(3,), padding_low=(1,), padding_high=(2,),
                                 rhs_dilation=(2,), groups=1)),
]


def _strided(attrs):
    nsp = len(attrs["window_strides"])
    return lift(lambda a, b: apply(
        "convolution", a, b, window_strides=attrs["window_strides"],
        padding_low=attrs["padding_low"], padding_high=attrs["padding_high"],
        lhs_dilation=(1,) * nsp, rhs_dilation=attrs["rhs_dilation"],
        feature_group_count=attrs["groups"]))


@pytest.mark.parametrize("xs,ws,attrs", PHASES, ids=str)
def test_strided_input_gradient_by_phases(xs, ws, attrs):
    """Against finite differences (float64) and the interpreter's gradient; the strided
    gradient holds no convolution over a dilated gradient."""
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    fn = _strided(attrs)
    gradcheck.check_direction(fn, [x, w])
    xl = la.asarray(x)
    with la.GradientTape() as tape:
        tape.watch(xl)
        loss = la.sum(fn(xl, la.asarray(w)) ** 2)
    gx = tape.gradient(loss, xl)
    xi = la.asarray(x, device="interpreter")
    with la.GradientTape() as tape:
        tape.watch(xi)
        loss = la.sum(fn(xi, la.asarray(w, device="interpreter")) ** 2)
    np.testing.assert_allclose(gx.numpy(), tape.gradient(loss, xi).numpy(), rtol=1e-10,
                               atol=1e-10)
    assert "lhs_dilation={2" not in la.debug.ir([gx], stage="hlo")


def test_avx2_blocking_computes_the_same(monkeypatch):
    """The loops' blocks for 8-lane vectors and 16 registers (a CPU without AVX-512), on
    this CPU: forward and gradients against the interpreter."""
    from lazyarray.compiler.codegen import llvm_target
    real = llvm_target.has_feature
    monkeypatch.setattr(llvm_target, "has_feature", lambda name: False if name == "avx512f"
                        else real(name))
    monkeypatch.setattr(la.config, "cache_dir", "off")
    la.runtime.clear_caches()
    try:
        for xs, ws, kw in (SHAPES[3], SHAPES[12], SHAPES[6]):
            x, w = _inputs(xs, ws, np.float32, seed=5)
            y, (gx, gw) = _gradients(x, w, kw)
            want_y, want = _gradients(x, w, kw, device="interpreter")
            for got, ref in ((y, want_y), (gx, want[0]), (gw, want[1])):
                scale = np.abs(ref.numpy()).max()
                np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5 * scale)
    finally:
        la.runtime.clear_caches()       # no program built for the pretend CPU stays cached


def _tanh_gradients(x, w, kw, device=None):
    xl, wl = la.asarray(x, device=device), la.asarray(w, device=device)
    with la.GradientTape() as tape:
        tape.watch(xl)
        tape.watch(wl)
        loss = (la.tanh(conv2d(xl, wl, **kw)) * 3).sum()
    return tape.gradient(loss, [xl, wl])


def _operands(text: str, op: str) -> list:
    """The operand names of each `op` instruction in an HLO text."""
    out = []
    for line in text.splitlines():
        if f" {op}(" in line:
            args = line.split(f" {op}(")[1].split(")")[0].split(", ")
            out.append([a.split(" ")[-1] for a in args])
    return out


@pytest.mark.parametrize("xs,ws,kw,shared", [
    ((2, 16, 32, 32), (16, 3, 3), dict(padding=1), True),
    ((2, 3, 8, 20), (4, 3, 3), dict(padding=1), True),
    ((1, 4, 6, 33), (5, 3, 3), dict(padding=(1, 2)), True),
    ((2, 4, 10, 16), (6, 3, 3), dict(padding=2, dilation=2), True),
    ((2, 8, 8, 8), (64, 3, 3), dict(padding=1), False)], ids=str)   # rows packed in vectors
def test_weight_gradient_reads_the_padded_output_gradient(xs, ws, kw, shared):
    """Without window strides the input gradient convolves g padded; the weight gradient
    reads g's window in that same buffer, so that g is written once, padded, by its
    producer (no kernel that only pads g). Rows narrower than 64 bytes (packed several
    to a vector) read g itself."""
    x, w = _inputs(xs, ws, np.float32, seed=4)
    got = _tanh_gradients(x, w, kw)
    text = la.debug.ir(got, stage="optimized_hlo")
    g_read = _operands(text, "direct_filter_grad")[0][1]
    assert shared == any(ops[0] == g_read for ops in _operands(text, "direct_convolution"))
    want = _tanh_gradients(x, w, kw, device="interpreter")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5,
                                   atol=1e-5 * np.abs(b.numpy()).max())


@pytest.mark.parametrize("xs,ws,kw", [((8, 16, 32, 32), (16, 3, 3), dict(padding=1)),
                                      ((6, 24, 32, 32), (8, 3, 3), dict(stride=2, padding=1)),
                                      ((24, 64, 16, 16), (64, 1, 1), dict())], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_gradient_over_tiles_of_the_batch(xs, ws, kw, dtype):
    """Batches whose input planes pass conv_direct.TILE_BYTES: the weight gradient runs
    over tiles of images (each channel block's tiles in order, the first storing, the
    others adding) and matches the interpreter and PyTorch."""
    itemsize = np.dtype(dtype).itemsize
    pad, stride = kw.get("padding", 0), kw.get("stride", 1)
    plane = xs[1] * (xs[2] + 2 * pad) * (xs[3] + 2 * pad) * itemsize
    ho = (xs[2] + 2 * pad - ws[1]) // stride + 1
    blk = conv_direct.filter_blocking(ws[0], ws[1:], ho, ho, itemsize, 64, 32, xs[0], plane)
    assert blk.nt and blk.n_nt * blk.nt == xs[0] and blk.n_nt > 1
    x, w = _inputs(xs, ws, dtype, seed=5)
    _, (gx, gw) = _gradients(x, w, kw)
    _, want = _gradients(x, w, kw, device="interpreter")
    _, tgw = _torch_gradients(x, w, kw)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for other in (want[1].numpy(), tgw):
        np.testing.assert_allclose(gw.numpy(), other, rtol=tol, atol=tol * np.abs(other).max())


@pytest.mark.parametrize("xs,ws,kw", [SHAPES[i] for i in (0, 1, 5, 11, 12)], ids=str)
@pytest.mark.parametrize("c_outer", [True, False])
def test_weight_gradient_with_input_channels_outside(xs, ws, kw, c_outer, monkeypatch):
    """The untiled weight gradient's loop over (input channel, channel block) or
    (channel block, input channel), forced either way: the interpreter's values."""
    import dataclasses
    real = conv_direct.filter_blocking

    def forced(*args, **kwargs):
        blk = real(*args, **kwargs)
        return dataclasses.replace(blk, c_outer=c_outer and not blk.nt)
    monkeypatch.setattr(conv_direct, "filter_blocking", forced)
    monkeypatch.setattr(la.config, "cache_dir", "off")
    la.runtime.clear_caches()
    try:
        x, w = _inputs(xs, ws, np.float32, seed=7)
        _, (_, gw) = _gradients(x, w, kw)
        _, want = _gradients(x, w, kw, device="interpreter")
        np.testing.assert_allclose(gw.numpy(), want[1].numpy(), rtol=1e-5,
                                   atol=1e-5 * np.abs(want[1].numpy()).max())
    finally:
        la.runtime.clear_caches()       # no program built with the forced loops stays


@pytest.mark.parametrize("kernel", [(3, 3), (1, 1), (5, 5)])
def test_tiled_weight_gradient_blocks_never_overlap(kernel):
    """Tiles of the batch add into the output after the first: channel blocks that
    overlap (the last moved back inside) would then add the shared channels twice, or
    race on them from two threads. Tiles only where the blocks divide the channels."""
    for o in range(1, 70):
        blk = conv_direct.filter_blocking(o, kernel, 32, 32, 4, 64, 32, 64, 8 * 34 * 34 * 4)
        assert not blk.nt or o % blk.ob == 0, (o, blk)


@pytest.mark.parametrize("o,c,xside,gside,kernel,c_outer", [
    (64, 64, 10, 8, 3, True),   # the CNN's 8x8 stage: g (0.5 MB) stays in L2, x does not
    (64, 32, 16, 8, 1, True),   # its 1x1 stride-2 shortcut
    (64, 32, 8, 8, 1, False),   # both in L2: g whole 32 times is more than x 8 times
    (256, 2, 10, 8, 3, False)])  # g past L2, x in it
def test_untiled_weight_gradient_rereads_what_stays_in_cache(o, c, xside, gside, kernel,
                                                             c_outer):
    n = 32
    blk = conv_direct.filter_blocking(o, (kernel, kernel), gside, gside, 4, 64, 32, n,
                                      c * xside * xside * 4, n * o * gside * gside * 4, c)
    assert not blk.nt and blk.c_outer == c_outer


@pytest.mark.parametrize("xs,ws,kw", [SHAPES[i] for i in (1, 4, 6, 13)], ids=str)
def test_strided_input_gradient_interleaves_the_phases(xs, ws, kw):
    """A strided convolution's input gradient weaves its phases' convolutions together
    (a stack reshaped to the input: one read per element) instead of summing pads with
    holes (each computing its index, test and clamp per element); the values match."""
    x, w = _inputs(xs, ws, np.float32, seed=6)
    got = _tanh_gradients(x, w, kw)
    text = la.debug.ir([got[0]], stage="optimized_hlo")
    holes = [line for line in text.splitlines() if " pad(" in line
             and "interior_padding={" in line
             and set(line.split("interior_padding={")[1].split("}")[0].split(",")) != {"0"}]
    assert not holes, holes
    want = _tanh_gradients(x, w, kw, device="interpreter")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5,
                                   atol=1e-5 * np.abs(b.numpy()).max())


def test_interleaving_the_phases_leaves_no_reference_cycle():
    """Building a strided input gradient leaves no garbage cycle: a cycle holding the
    step's nodes keeps their tensors' buffers alive until the cyclic collector runs, and
    a buffer still referenced is not donated to the next step (a profiled CNN step then
    compiled its program again, its donations changed)."""
    import gc
    from lazyarray.compiler.graph.node import Node
    from lazyarray.compiler.hlo import dtypes as D
    from lazyarray.compiler.primitives.convolution import _conv_vjp
    g = Node("parameter", (), (2, 6, 4, 4), D.float32, {})
    lhs = Node("parameter", (), (2, 3, 8, 8), D.float32, {})
    rhs = Node("parameter", (), (6, 3, 3, 3), D.float32, {})
    attrs = dict(window_strides=(2, 2), padding_low=(1, 1), padding_high=(1, 1),
                 lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=1)
    gc.collect()
    gc.disable()
    try:
        dx, _ = _conv_vjp(g, g, lhs, rhs, **attrs)
        assert dx.shape == lhs.shape
        del dx
        found = gc.collect()
    finally:
        gc.enable()
    assert found == 0


@pytest.mark.parametrize("xs,ws,kw,rows_looped", [
    ((1, 4, 16, 16), (8, 3, 3), dict(padding=1), True),
    ((1, 4, 16, 16), (8, 3, 3), dict(stride=2, padding=1), False),    # gathered rows
    ((1, 4, 16, 16), (8, 1, 1), dict(), False)], ids=str)
def test_window_rows_run_in_a_loop(xs, ws, kw, rows_looped):
    """A window's rows are a loop of the forward function, not unrolled (a third of a 3x3
    convolution's code for LLVM to build in the first step), except where a stride
    gathers the inputs (unrolled, a row's gathered vectors serve several taps): one row
    of taps' multiply-adds in the function, or all of them. The values: the interpreter."""
    from lazyarray.compiler.codegen import llvm_target
    x, w = _inputs(xs, ws, np.float32, seed=3)
    y = conv2d(la.asarray(x), la.asarray(w), **kw)
    text = la.debug.ir([y], stage="llvm")
    wide = llvm_target.has_feature("avx512f")
    blk = conv_direct.blocking(ws[0], *y.shape[2:], 4, 64 if wide else 32, 32 if wide else 16)
    rows = 1 if rows_looped else ws[1]
    fmas = sum(line.count("@llvm.fma.v") for line in text.splitlines()
               if "call" in line)
    assert fmas == blk.ob * blk.xb * blk.ry * rows * ws[2]
    want = conv2d(la.asarray(x, device="interpreter"), la.asarray(w, device="interpreter"), **kw)
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)



class _Emitter:
    """What conv_direct's helpers read of an emitter: the builder and the module."""
    def __init__(self, b, llmod):
        self.b, self.llmod = b, llmod


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lane_sum_is_one_reduction(dtype):
    """The weight gradient sums each accumulator's lanes with LLVM's reassociated
    reduction: one call in the IR (a tree of halves was 2 log2(lanes) shuffles and
    log2(lanes) additions, a third of the function's IR for LLVM to optimize); LLVM
    parses it. The values: the gradient tests above, against the interpreter and PyTorch."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    lanes = 16
    ft = ir.FloatType() if dtype == np.float32 else ir.DoubleType()
    llmod = ir.Module("lane_sum")
    fn = ir.Function(llmod, ir.FunctionType(ft, [ir.PointerType()]), "lane_sum")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    v = b.load(fn.args[0], typ=ir.VectorType(ft, lanes), align=dtype().itemsize)
    b.ret(conv_direct._hsum(_Emitter(b, llmod), v, lanes))
    text = str(fn)
    assert text.count("call") == 1 and "reassoc" in text and "shufflevector" not in text
    llvm.parse_assembly(str(llmod)).verify()



class _LoopEmitter(_Emitter):
    """What filter_body reads of an emitter: the builder, the module, intrinsic calls."""
    def call_intrinsic(self, name, ret, args):
        from llvmlite import ir
        fn = self.llmod.globals.get(name)
        if fn is None:
            fn = ir.Function(self.llmod, ir.FunctionType(ret, [a.type for a in args]), name)
        return self.b.call(fn, args)


def test_strided_weight_gradient_loads_each_input_row_once():
    """At stride 2 the weight gradient loads each input row's block once per row of g
    and picks every tap's inputs from it (one shuffle per phase, a shift for the taps
    past it): a wide load per tap read each input about three times (3x3, stride 2: 15
    wide loads an iteration of two rows of g, 5 input rows). LLVM parses the function;
    the values: the strided gradient tests above, against the interpreter and PyTorch."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    from lazyarray.compiler.hlo import dtypes as D
    xs, gs, kernel = (2, 3, 34, 35), (2, 4, 16, 16), (3, 3)
    blk = conv_direct.filter_blocking(gs[1], kernel, 16, 16, 4, 64, 32)
    assert blk.v == 16 and len(blk.taps) == 1
    llmod = ir.Module("strided_filter")
    fn = ir.Function(llmod, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 3
                                            + [ir.IntType(64)] * 2), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    conv_direct.filter_body(_LoopEmitter(b, llmod), fn.args[0], list(fn.args[1:3]),
                            list(fn.args[3:5]), (xs, gs, (4, 3) + kernel), D.float32,
                            (2, 2), (1, 1), blk, blk.taps[0], (0, 0), (16, 16))
    b.ret_void()
    text = str(fn)
    assert text.count("load <32 x float>") == 5          # the 5 input rows, once each
    llvm.parse_assembly(str(llmod)).verify()


def test_strided_convolution_loads_each_input_row_once_per_window_row():
    """The stride-2 forward loop loads each slot's input row block once per window row
    and picks its three taps from it (36 wide loads a channel were 12: 4 slots, 3 window
    rows); LLVM parses the function. The values: the strided tests above."""
    import llvmlite.binding as llvm
    from llvmlite import ir
    from lazyarray.compiler.hlo import dtypes as D
    xs, ws, out = (1, 3, 34, 34), (4, 3, 3, 3), (1, 4, 16, 16)
    blk = conv_direct.blocking(4, 16, 16, 4, 64, 32)
    assert blk.pv == 1 and blk.v == 16 and blk.ry * blk.xb == 4
    llmod = ir.Module("strided_conv")
    fn = ir.Function(llmod, ir.FunctionType(ir.VoidType(), [ir.PointerType()] * 3
                                            + [ir.IntType(64)] * 4), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    conv_direct.body(_LoopEmitter(b, llmod), fn.args[0], list(fn.args[1:3]),
                     list(fn.args[3:7]), (xs, ws, out), D.float32, (2, 2), (1, 1), blk)
    b.ret_void()
    assert str(fn).count("load <32 x float>") == 12
    llvm.parse_assembly(str(llmod)).verify()
