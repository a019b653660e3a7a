"""Layers' direct paths (tensors of one device, recorded without the lifted front ends'
searches, the composites copied from the first call's graph) give the graph the general
path gives, the values PyTorch gives, and gradients that agree with both.

Each case runs the layer twice or more (the second call is the copy of the first's
graph), compares the graph node by node with the general path's and the values with
PyTorch's and the interpreter's.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.graph.node import Node
from lazyarray.nn import layers

torch = pytest.importorskip("torch")

RNG = np.random.default_rng(7)


def _structure(node: Node, memo: dict) -> tuple:
    """A node's graph as nested tuples (op, shape, dtype, attributes, scalar value,
    whether a buffer, operands), shared nodes by their first number: what capture and
    the compiler read of it."""
    if id(node) in memo:
        return ("seen", memo[id(node)])
    memo[id(node)] = len(memo)
    if node.buffer is not None:                   # a leaf for capture, whatever it was
        return ("P", node.shape, node.dtype)
    value = node.value
    if value is not None and not isinstance(value, (bool, int, float, complex)):
        value = repr(value.array.tolist())
    elif value is not None:
        value = (type(value).__name__, repr(value))
    return (node.op, node.shape, node.dtype, tuple(sorted(node.attrs.items())), value,
            tuple(_structure(o, memo) for o in node.operands))


def _graphs(tensors: list) -> tuple:
    """The structures of several tensors' graphs, sharing one numbering, as a capture
    of them together sees them (shared scalars included)."""
    memo: dict = {}
    return tuple(_structure(t._node, memo) for t in tensors)


# ---- BatchNorm in training ---------------------------------------------------------------

BN_CASES = [(la.nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), True),
            (la.nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5), False),
            (la.nn.BatchNorm1d, torch.nn.BatchNorm1d, (8, 3), True),
            (la.nn.BatchNorm1d, torch.nn.BatchNorm1d, (6, 3, 4), True)]


@pytest.mark.parametrize("cls,_,shape,affine", BN_CASES)
def test_batch_norm_training_direct_path_records_the_general_graph(cls, _, shape, affine,
                                                                    monkeypatch):
    direct, general = cls(3, affine=affine), cls(3, affine=affine)
    for step in range(3):                      # the first call records, the next copy
        x = la.asarray(RNG.standard_normal(shape).astype(np.float32))
        with monkeypatch.context() as m:
            m.setattr(layers._BatchNorm, "_train_direct", lambda self, x: None)
            g_out = general(x)
        d_out = direct(x)
        assert _graphs([d_out, direct.running_mean, direct.running_var,
                        direct.num_batches_tracked]) == \
            _graphs([g_out, general.running_mean, general.running_var,
                     general.num_batches_tracked]), f"step {step}"
        la.sync()


def test_batch_norm_training_takes_the_direct_path(monkeypatch):
    bn = la.nn.BatchNorm2d(3)
    x = la.asarray(RNG.standard_normal((4, 3, 2, 2)).astype(np.float32))
    bn(x)                                     # the composite's template made
    monkeypatch.setattr(F, "batch_stats", None)   # the general path would call it
    monkeypatch.setattr(F, "batch_norm", None)
    bn(x)
    assert bn.num_batches_tracked.item() == 2


@pytest.mark.parametrize("cls,tcls,shape,affine", BN_CASES)
def test_batch_norm_training_steps_match_pytorch(cls, tcls, shape, affine, device):
    """Three training steps (forward, backward, SGD on the affine parameters): outputs,
    gradients of the input and the affine parameters, running statistics and the batch
    count against PyTorch's layer."""
    bn, ref = cls(3, affine=affine, device=device), tcls(3, affine=affine)
    for step in range(3):
        x = (RNG.standard_normal(shape) * 2 + 1).astype(np.float32)
        g = RNG.standard_normal(shape).astype(np.float32)
        xl = la.asarray(x, device=device).requires_grad_(True)
        out = bn(xl)
        (out * la.asarray(g, device=device)).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        out_t = ref(xt)
        (out_t * torch.tensor(g)).sum().backward()
        tol = dict(rtol=2e-4, atol=2e-4)
        np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), **tol)
        np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), **tol)
        np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), **tol)
        np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), **tol)
        assert bn.num_batches_tracked.item() == ref.num_batches_tracked.item() == step + 1
        if affine:
            for p, q in ((bn.weight, ref.weight), (bn.bias, ref.bias)):
                np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), **tol)
                p._assign((p - 0.1 * p.grad)._node)
                p.grad = None
                with torch.no_grad():
                    q -= 0.1 * q.grad
                q.grad = None


def test_batch_norm_training_gradient_matches_finite_differences():
    """d/dx and d/dweight of sum(bn(x) * g) in float64, the layer's copied graph (the
    second call), against central differences."""
    shape = (3, 2, 2, 2)
    bn = la.nn.BatchNorm2d(2, dtype=la.float64)
    g = RNG.standard_normal(shape)
    x0 = RNG.standard_normal(shape) * 1.5 + 0.5
    w0 = np.array([1.3, 0.7])

    def loss(x, w):
        bn.weight._assign(la.asarray(w)._node)
        return float((bn(la.asarray(x)) * la.asarray(g)).sum().item())

    loss(x0, w0)                              # the template made: the next calls copy it
    x = la.asarray(x0).requires_grad_(True)
    bn.weight._assign(la.asarray(w0)._node)
    bn.weight.grad = None
    (bn(x) * la.asarray(g)).sum().backward()
    for grad, base, vary in ((x.grad.numpy(), x0, lambda v: loss(v, w0)),
                             (bn.weight.grad.numpy(), w0, lambda v: loss(x0, v))):
        t = RNG.standard_normal(base.shape)
        h = 1e-6
        numeric = (vary(base + h * t) - vary(base - h * t)) / (2 * h)
        np.testing.assert_allclose(np.sum(grad * t), numeric, rtol=1e-6, atol=1e-8)


# ---- convolutions --------------------------------------------------------------------

CONV_CASES = [
    (la.nn.Conv2d, torch.nn.Conv2d, (2, 4, 7, 7), dict(kernel_size=3, padding=1, bias=False)),
    (la.nn.Conv2d, torch.nn.Conv2d, (2, 4, 8, 8), dict(kernel_size=3, stride=2, padding=1)),
    (la.nn.Conv2d, torch.nn.Conv2d, (2, 4, 6, 6), dict(kernel_size=1, stride=2, groups=2)),
    (la.nn.Conv1d, torch.nn.Conv1d, (2, 4, 9), dict(kernel_size=3, padding="same",
                                                   dilation=2)),
]


def _conv_pair(cls, tcls, kw):
    layer, ref = cls(4, 6, **kw), tcls(4, 6, **kw)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(layer.weight.numpy()))
        if ref.bias is not None:
            ref.bias.copy_(torch.tensor(layer.bias.numpy()))
    return layer, ref


@pytest.mark.parametrize("cls,tcls,shape,kw", CONV_CASES)
def test_conv_direct_path_records_the_general_graph(cls, tcls, shape, kw):
    layer, _ = _conv_pair(cls, tcls, kw)
    fn = F.conv2d if cls is la.nn.Conv2d else F.conv1d
    for _ in range(2):                        # the second call copies the first's nodes
        x = la.asarray(RNG.standard_normal(shape).astype(np.float32))
        general = fn(x, layer.weight, layer.bias, layer.stride, layer.padding,
                     layer.dilation, layer.groups)
        assert _graphs([layer(x)]) == _graphs([general])


@pytest.mark.parametrize("cls,tcls,shape,kw", CONV_CASES)
def test_conv_direct_path_matches_pytorch(cls, tcls, shape, kw, device):
    """Values and gradients (input, weight, bias) over two calls, against PyTorch."""
    layer, ref = _conv_pair(cls, tcls, kw)
    layer.to(device)
    for _ in range(2):
        x = RNG.standard_normal(shape).astype(np.float32)
        xl = la.asarray(x, device=device).requires_grad_(True)
        for p in layer.parameters():
            p.grad = None
        out = layer(xl)
        (out * out).sum().backward()
        xt = torch.tensor(x, requires_grad=True)
        ref.zero_grad()
        out_t = ref(xt)
        (out_t * out_t).sum().backward()
        tol = dict(rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out.numpy(), out_t.detach().numpy(), **tol)
        np.testing.assert_allclose(xl.grad.numpy(), xt.grad.numpy(), **tol)
        np.testing.assert_allclose(layer.weight.grad.numpy(), ref.weight.grad.numpy(), **tol)
        if ref.bias is not None:
            np.testing.assert_allclose(layer.bias.grad.numpy(), ref.bias.grad.numpy(), **tol)


def test_conv_direct_path_still_raises_on_bad_input():
    conv = la.nn.Conv2d(4, 6, 3)
    conv(la.asarray(RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)))
    for _ in range(2):                        # never remembered: raises every time
        with pytest.raises(ValueError, match="conv2d"):
            conv(la.asarray(RNG.standard_normal((1, 3, 5, 5)).astype(np.float32)))
        with pytest.raises(ValueError, match="conv2d: expects input"):
            conv(la.asarray(np.ones((4, 5, 5), np.float32)))


def test_batch_norm_subclass_with_its_own_running_update_is_called():
    """A subclass overriding `_update_running` (here: no momentum on the variance) takes
    the general path, which calls it."""
    class MeanOnly(la.nn.BatchNorm2d):
        def _update_running(self, mean, var, count):
            self.running_mean._assign((self.running_mean * 0.5 + mean * 0.5)._node)

    bn = MeanOnly(3)
    x = RNG.standard_normal((4, 3, 2, 2)).astype(np.float32)
    for _ in range(2):
        bn(la.asarray(x))
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.75 * x.mean((0, 2, 3)), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(3, np.float32))
    assert bn.num_batches_tracked.item() == 0


# ---- BatchNorm in eval ---------------------------------------------------------------------

@pytest.mark.parametrize("cls,tcls,shape,affine", BN_CASES)
def test_batch_norm_eval_direct_path_matches_pytorch_and_the_general_graph(cls, tcls, shape,
                                                                           affine, device):
    """After two training steps, eval: the direct path's graph is F.batch_norm's (the
    second call a copy), its values PyTorch's eval output."""
    bn, ref = cls(3, affine=affine, device=device), tcls(3, affine=affine)
    for _ in range(2):
        x = (RNG.standard_normal(shape) * 2 + 1).astype(np.float32)
        bn(la.asarray(x, device=device)).numpy()
        ref(torch.tensor(x))
    bn.eval()
    ref.eval()
    for _ in range(2):
        x = RNG.standard_normal(shape).astype(np.float32)
        xl = la.asarray(x, device=device)
        with la.config.override(module_reuse=False):    # the layer's own graph, not a
            out = bn(xl)                                # replayed call of it
        general = F.batch_norm(xl, bn.running_mean, bn.running_var, bn.weight, bn.bias, bn.eps)
        assert _graphs([out]) == _graphs([general])
        np.testing.assert_allclose(out.numpy(), ref(torch.tensor(x)).detach().numpy(),
                                   rtol=2e-4, atol=2e-4)


def test_batch_norm_eval_takes_the_direct_path(monkeypatch):
    bn = la.nn.BatchNorm2d(3).eval()
    x = la.asarray(RNG.standard_normal((4, 3, 2, 2)).astype(np.float32))
    bn(x)
    monkeypatch.setattr(F, "batch_norm", None)          # the general path would call it
    np.testing.assert_allclose(bn(x).numpy(), x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-6)


def test_batch_norm_of_nodes_still_raises_on_bad_input():
    x = la.asarray(RNG.standard_normal((4, 3, 2, 2)).astype(np.float32))
    stats = la.asarray(np.ones(3, np.float32))
    F.batch_norm(x, stats, stats, None, None, 1e-5)          # the composite remembered
    for _ in range(2):                                      # errors never are
        with pytest.raises(ValueError, match="batch_norm: needs"):
            F.batch_norm(x, la.asarray(np.ones(4, np.float32)), stats, None, None, 1e-5)
        with pytest.raises(ValueError, match="batch_norm: needs"):
            F.batch_norm(la.asarray(np.ones(3, np.float32)), stats, stats, None, None, 1e-5)
