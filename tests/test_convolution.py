"""Convolution and pooling: forward against plain NumPy loops (strides, padding, dilation,
groups), gradients against finite differences, on every test device."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.primitive import apply
from lazyarray.lift import lift
from lazyarray.ops import convolution as C

import gradcheck

conv1d, conv2d = lift(C.conv1d), lift(C.conv2d)
max_pool2d, avg_pool2d = lift(C.max_pool2d), lift(C.avg_pool2d)


# ---- NumPy loops: the oracle ------------------------------------------------------------

def np_conv2d(x, w, stride=(1, 1), pad=((0, 0), (0, 0)), dilation=(1, 1), groups=1,
              lhs_dilation=(1, 1)):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xd = np.zeros((n, c, (h - 1) * lhs_dilation[0] + 1, (wd - 1) * lhs_dilation[1] + 1))
    xd[:, :, ::lhs_dilation[0], ::lhs_dilation[1]] = x
    (t, b), (l, r) = pad
    xp = np.zeros((n, c, xd.shape[2] + max(t, 0) + max(b, 0), xd.shape[3] + max(l, 0) + max(r, 0)))
    xp[:, :, max(t, 0):max(t, 0) + xd.shape[2], max(l, 0):max(l, 0) + xd.shape[3]] = xd
    xp = xp[:, :, -min(t, 0):xp.shape[2] + min(b, 0), -min(l, 0):xp.shape[3] + min(r, 0)]
    ekh, ekw = (kh - 1) * dilation[0] + 1, (kw - 1) * dilation[1] + 1
    oh = (xp.shape[2] - ekh) // stride[0] + 1
    ow = (xp.shape[3] - ekw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                for ci in range(cg):
                    for a in range(kh):
                        for bb in range(kw):
                            tap = xp[:, g * cg + ci, i * stride[0] + a * dilation[0],
                                     j * stride[1] + bb * dilation[1]]
                            out[:, oc, i, j] += tap * w[oc, ci, a, bb]
    return out


def np_pool2d(x, k, s, p, kind):
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=fill)
    oh = (xp.shape[2] - k[0]) // s[0] + 1
    ow = (xp.shape[3] - k[1]) // s[1] + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * s[0]:i * s[0] + k[0], j * s[1]:j * s[1] + k[1]]
            out[:, :, i, j] = win.max(axis=(2, 3)) if kind == "max" else win.mean(axis=(2, 3))
    return out


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


CONV2D = [
    dict(),
    dict(stride=2),
    dict(stride=(2, 1), padding=(1, 2)),
    dict(padding="same", dilation=2),
    dict(dilation=(1, 2), padding=1),
    dict(groups=2, stride=(1, 2)),
    dict(groups=4, padding=1),            # depthwise
]


@pytest.mark.parametrize("kw", CONV2D, ids=str)
def test_conv2d_forward(kw, device):
    groups = kw.get("groups", 1)
    x, w = _rand(2, 4, 7, 6), _rand(4, 4 // groups, 3, 2, seed=1)
    got = conv2d(la.asarray(x), la.asarray(w), **kw).numpy()
    stride = kw.get("stride", 1)
    stride = (stride, stride) if isinstance(stride, int) else stride
    dil = kw.get("dilation", 1)
    dil = (dil, dil) if isinstance(dil, int) else dil
    pad = kw.get("padding", 0)
    if pad == "same":
        tot = [(k - 1) * d for k, d in zip(w.shape[2:], dil)]
        pads = tuple((t // 2, t - t // 2) for t in tot)
    else:
        pad = (pad, pad) if isinstance(pad, int) else pad
        pads = tuple((p, p) for p in pad)
    np.testing.assert_allclose(got, np_conv2d(x, w, stride, pads, dil, groups), rtol=1e-10,
                               atol=1e-10)


def test_conv2d_float32_and_bias(device):
    x, w, b = _rand(1, 3, 5, 5).astype(np.float32), _rand(2, 3, 3, 3, seed=2).astype(np.float32), \
        np.array([0.5, -1.0], np.float32)
    got = conv2d(la.asarray(x), la.asarray(w), la.asarray(b), padding=1)
    assert got.dtype == la.float32
    want = np_conv2d(x, w, pad=((1, 1), (1, 1))) + b.reshape(1, 2, 1, 1)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_conv1d_matches_conv2d_with_height_one(device):
    x, w = _rand(2, 3, 9), _rand(4, 3, 3, seed=3)
    got = conv1d(la.asarray(x), la.asarray(w), stride=2, padding=1, dilation=2).numpy()
    want = np_conv2d(x[:, :, None], w[:, :, None], (1, 2), ((0, 0), (1, 1)), (1, 2))[:, :, 0]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_convolution_lhs_dilation_and_negative_padding(device):
    x, w = _rand(1, 2, 4, 5), _rand(3, 2, 2, 3, seed=4)
    attrs = dict(window_strides=(1, 2), padding_low=(2, -1), padding_high=(1, 0),
                 lhs_dilation=(2, 1), rhs_dilation=(1, 1), feature_group_count=1)
    got = lift(lambda a, b: apply("convolution", a, b, **attrs))(la.asarray(x), la.asarray(w))
    want = np_conv2d(x, w, (1, 2), ((2, 1), (-1, 0)), lhs_dilation=(2, 1))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-10)


POOLS = [((2, 2), None, (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 2), (1, 0))]


@pytest.mark.parametrize("k,s,p", POOLS, ids=str)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_forward(kind, k, s, p, device):
    x = _rand(2, 3, 7, 6)
    fn = max_pool2d if kind == "max" else avg_pool2d
    got = fn(la.asarray(x), k, stride=s, padding=p).numpy()
    np.testing.assert_allclose(got, np_pool2d(x, k, s or k, p, kind), rtol=1e-12)


def test_bad_arguments_raise_clear_errors():
    x, w = la.asarray(_rand(1, 4, 5, 5)), la.asarray(_rand(2, 3, 3, 3))
    with pytest.raises(ValueError, match="groups"):
        conv2d(x, w)
    with pytest.raises(ValueError, match="rank"):
        conv2d(x, la.asarray(_rand(2, 4, 3)))
    with pytest.raises(ValueError, match="stride"):
        conv2d(x, la.asarray(_rand(2, 4, 3, 3)), stride=0)
    with pytest.raises(ValueError, match="half the kernel"):
        max_pool2d(x, 2, padding=2)


# ---- gradients ----------------------------------------------------------------------------

@pytest.mark.parametrize("kw", CONV2D, ids=str)
def test_conv2d_gradient(kw, device):
    groups = kw.get("groups", 1)
    x, w = _rand(2, 4, 6, 5), _rand(4, 4 // groups, 3, 2, seed=1)
    fn = lambda a, b: conv2d(a, b, **kw)  # noqa: E731
    gradcheck.check_direction(fn, [x, w], device=device)


@pytest.mark.parametrize("kw", CONV2D[:4], ids=str)
def test_conv2d_gradient_every_element(kw):
    x, w = _rand(1, 2, 5, 4), _rand(2, 2 // kw.get("groups", 1), 2, 2, seed=5)
    gradcheck.check_full(lambda a, b: conv2d(a, b, **kw), [x, w], device="interpreter")


def test_transposed_convolution_gradient(device):
    attrs = dict(window_strides=(2, 1), padding_low=(1, -1), padding_high=(2, 1),
                 lhs_dilation=(2, 3), rhs_dilation=(2, 1), feature_group_count=2)
    fn = lift(lambda a, b: apply("convolution", a, b, **attrs))
    x, w = _rand(1, 4, 4, 3), _rand(6, 2, 2, 2, seed=6)
    gradcheck.check_direction(fn, [x, w], device=device)
    if device == "interpreter":
        gradcheck.check_full(fn, [x, w], device=device)


@pytest.mark.parametrize("k,s,p", POOLS, ids=str)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_gradient(kind, k, s, p, device):
    x = _rand(1, 2, 7, 6, seed=7)
    fn = max_pool2d if kind == "max" else avg_pool2d
    gradcheck.check_direction(lambda a: fn(a, k, stride=s, padding=p), [x], device=device)
    if device == "interpreter":
        gradcheck.check_full(lambda a: fn(a, k, stride=s, padding=p), [x], device=device)


@pytest.mark.parametrize("stride", [2, 1])
def test_max_pool_gradient_splits_ties(stride):
    x = la.asarray(np.array([[[[1.0, 5.0], [5.0, 2.0]]]]), device="interpreter")
    g = la.grad(lambda t: la.sum(max_pool2d(t, 2, stride=stride)))(x)
    np.testing.assert_array_equal(g.numpy(), [[[[0.0, 0.5], [0.5, 0.0]]]])


def test_second_derivative_through_convolution(device):
    x, w = _rand(1, 1, 4, 4), _rand(1, 1, 2, 2, seed=8)

    def f(a):
        return la.sum(la.tanh(conv2d(a, la.asarray(w))) ** 2)

    def directional(a):
        return la.sum(la.grad(f)(a) * la.asarray(np.ones_like(x)))
    gradcheck.check_direction(directional, [x], device=device)


# ---- the expansion pass (what compiled devices run) ------------------------------------------

def _module_and_args(out):
    from lazyarray.compiler.graph.trace import capture
    cap = capture([out._node])
    return cap.module("conv_case"), cap.args


def _run(module, args):
    from lazyarray.devices.interpreter import InterpretedExecutable
    return InterpretedExecutable(module).run(args)[0]


EXPANSIONS = [
    lambda x, w: conv2d(x, w),
    lambda x, w: conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
    lambda x, w: conv2d(x, w[:, :2], groups=2, padding="same"),
    lambda x, w: lift(lambda a, b: apply("convolution", a, b, window_strides=(1, 2),
                                         padding_low=(2, -1), padding_high=(1, 0),
                                         lhs_dilation=(2, 1), rhs_dilation=(1, 1),
                                         feature_group_count=1))(x, w),
    lambda x, w: max_pool2d(x, 2),
    lambda x, w: max_pool2d(x, 3, stride=2, padding=1),
    lambda x, w: avg_pool2d(x, (3, 2), stride=(1, 2), padding=(1, 0)),
    lambda x, w: avg_pool2d(x, (7, 6)),
    lambda x, w: la.sum(conv2d(x, w) ** 2) * 0 + la.sum(max_pool2d(x, 3, stride=2)),
]


@pytest.mark.parametrize("k", range(len(EXPANSIONS)))
def test_expand_convolution_pass_preserves_values(k):
    from lazyarray.compiler.passes.expand_convolution import expand_convolution
    x = la.asarray(_rand(2, 4, 7, 6), device="interpreter")
    w = la.asarray(_rand(4, 4, 3, 2, seed=9), device="interpreter")
    module, args = _module_and_args(EXPANSIONS[k](x, w))
    expanded = expand_convolution(module)
    assert not any(i.op in ("convolution", "reduce_window") for i in expanded.instructions)
    np.testing.assert_allclose(_run(expanded, args), _run(module, args), rtol=1e-12, atol=1e-12)


def test_expand_convolution_of_the_backward_pass():
    from lazyarray.compiler.passes.expand_convolution import expand_convolution
    x = la.asarray(_rand(1, 2, 6, 5), device="interpreter")
    w = la.asarray(_rand(4, 1, 3, 3, seed=10), device="interpreter")
    with la.GradientTape() as tape:
        tape.watch([x, w])
        y = la.sum(max_pool2d(conv2d(x, w, groups=2, stride=2, padding=1), 2) ** 2)
    gx, gw = tape.gradient(y, [x, w])
    for g in (gx, gw):
        module, args = _module_and_args(g)
        expanded = expand_convolution(module)
        np.testing.assert_allclose(_run(expanded, args), _run(module, args), rtol=1e-12,
                                   atol=1e-12)


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(stride=(2, 1), groups=2)],
                         ids=str)
def test_strided_input_gradient_multiplies_no_holes(kw):
    """A strided convolution's input gradient is one stride-1 convolution per phase of
    the input grid (the taps that reach it), each over the output gradient's own size,
    not a convolution over the gradient dilated by the stride (whose patch matrix and
    product are mostly zeros)."""
    x = la.asarray(_rand(2, 4, 7, 6), device="interpreter")
    w = la.asarray(_rand(4, 4 // kw.get("groups", 1), 3, 2, seed=11), device="interpreter")
    with la.GradientTape() as tape:
        tape.watch(x)
        y = conv2d(x, w, **kw)
        loss = la.sum(y * y)
    gx = tape.gradient(loss, x)
    module, args = _module_and_args(gx)
    convs = [i for i in module.instructions if i.op == "convolution"]
    assert convs and all(set(i.attrs["lhs_dilation"]) == {1} for i in convs)
    from lazyarray.compiler.passes.expand_convolution import expand_convolution
    products = [i for i in expand_convolution(module).instructions if i.op == "dot_general"]
    stride = kw["stride"] if isinstance(kw["stride"], tuple) else (kw["stride"],) * 2
    pad = kw.get("padding", 0)
    phase = [-(-(n + 2 * pad) // s) for n, s in zip(x.shape[2:], stride)]
    most = y.shape[0] * phase[0] * phase[1]                 # a phase's columns: N * Q
    assert products and all(i.shape[-1] <= most for i in products), \
        [i.shape for i in products]
    np.testing.assert_allclose(gx.numpy(), _run(module, args), rtol=1e-12)


def _function(llvm: str, prefix: str) -> str:
    start = llvm.index(f"define void @{prefix}")
    return llvm[start:llvm.index("\n}\n", start)]


@pytest.mark.parametrize("kw", [dict(padding=1), dict(padding=1, stride=2),
                                dict(padding=2, dilation=2)])
def test_im2col_reads_one_input_element_per_patch_element(kw):
    """The patch matrix's kernel (im2col: a concatenate of one strided slice per window
    tap) reads one input element per element it writes, at the start of its tap, not all
    nine taps and a select chain; and it loops over the patches' own dimensions, so
    a tap's run along one input row is the inner loop. Results stay the interpreter's.
    (Grouped: the CPU computes ungrouped float convolutions by its own loop, no im2col.)"""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    kw = dict(kw, groups=3)
    y = la.nn.functional.conv2d(la.asarray(x), la.asarray(w), **kw)
    kernel = _function(la.debug.ir([y], stage="llvm"), "loop_0")
    reads = kernel.count("masked.gather") + kernel.count(" = load ")
    assert 1 <= reads <= 2, kernel               # (a vector and a scalar remainder)
    assert "d5." in kernel                       # the (G, C, taps, N, H, W) loop nest
    want = la.nn.functional.conv2d(la.asarray(x, device="interpreter"),
                                   la.asarray(w, device="interpreter"), **kw)
    np.testing.assert_allclose(y.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
