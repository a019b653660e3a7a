"""la.nn: every layer and functional form against a NumPy implementation of its forward
pass, and weights round-tripped through state_dict, .npz and safetensors."""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F

RNG = np.random.default_rng(0)
_erf = np.vectorize(math.erf)


def rand(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def close(actual, expected, tol=1e-5):
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=tol, atol=tol)


# ---- NumPy references -------------------------------------------------------------------

def np_softmax(x, axis=-1):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_log_softmax(x, axis=-1):
    z = x - x.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


def np_layer_norm(x, w, b, k=1, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = x.var(axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def np_attention(q, k, v, mask=None):
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    return np_softmax(s) @ v


# ---- functional -------------------------------------------------------------------------

def test_softmax_and_log_softmax_are_stable(device):
    x = rand(4, 7) * 10
    x[0] += 1000.0                             # exp would overflow without the shift
    close(F.softmax(la.asarray(x)).numpy(), np_softmax(x))
    close(F.log_softmax(la.asarray(x)).numpy(), np_log_softmax(x), 1e-4)
    close(F.softmax(la.asarray(x), axis=0).numpy(), np_softmax(x, 0))
    close(F.logsumexp(la.asarray(x), axis=1).numpy(),
          np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1), 1e-4)


@pytest.mark.parametrize("fn,reductions", [("softmax", 3), ("log_softmax", 3),
                                           ("logsumexp", 2)])
def test_softmax_gradient_does_not_go_through_the_max(fn, reductions):
    """The row max the input is shifted by carries no gradient (the result does not depend
    on it): the gradient program reduces each row for the max, the sum and (softmax,
    log_softmax) the backward's sum, with no comparison against the max (its ties) and no
    sum of what is zero."""
    x = rand(6, 9) * 3
    w = rand(6, 9) if fn != "logsumexp" else rand(6)
    t = la.asarray(x)
    with la.GradientTape() as tape:
        tape.watch(t)
        loss = (getattr(F, fn)(t, axis=-1) * la.asarray(w)).sum()
    grad = tape.gradient(loss, t)
    hlo = la.debug.ir(grad, "optimized_hlo")
    body = [ln for ln in hlo.splitlines() if ln.startswith("  %")]
    assert not [ln for ln in body if " compare(" in ln]
    assert len([ln for ln in body if " reduce(" in ln]) == reductions
    p = np_softmax(x)
    if fn == "softmax":
        want = p * (w - (w * p).sum(1, keepdims=True))
    elif fn == "log_softmax":
        want = w - p * w.sum(1, keepdims=True)
    else:
        want = p * w[:, None]
    close(grad.numpy(), want, 1e-5)


def test_activations(device):
    x = rand(50)
    t = la.asarray(x)
    close(F.relu(t).numpy(), np.maximum(x, 0))
    close(F.gelu(t).numpy(), 0.5 * x * (1 + _erf(x / math.sqrt(2))))
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    close(F.gelu(t, approximate="tanh").numpy(), tanh_form)
    close(F.silu(t).numpy(), x / (1 + np.exp(-x)))
    close(F.softplus(la.asarray(x * 50)).numpy(), np.logaddexp(0, x * 50), 1e-4)
    close(F.leaky_relu(t, 0.1).numpy(), np.where(x > 0, x, 0.1 * x))
    with pytest.raises(ValueError, match="gelu: approximate"):
        F.gelu(t, approximate="fast")


def test_layer_norm_function(device):
    x, w, b = rand(3, 4, 6), rand(6), rand(6)
    out = F.layer_norm(la.asarray(x), (6,), la.asarray(w), la.asarray(b))
    close(out.numpy(), np_layer_norm(x, w, b), 1e-4)
    out2 = F.layer_norm(la.asarray(x), (4, 6))
    close(out2.numpy(), np_layer_norm(x, 1.0, 0.0, k=2), 1e-4)
    with pytest.raises(ValueError, match="trailing dimensions"):
        F.layer_norm(la.asarray(x), (4,))


def test_cross_entropy_with_integer_labels(device):
    logits, labels = rand(8, 5) * 3, RNG.integers(0, 5, 8)
    logp = np_log_softmax(logits)
    per_row = -logp[np.arange(8), labels]
    t, y = la.asarray(logits), la.asarray(labels)
    close(F.cross_entropy(t, y).numpy(), per_row.mean(), 1e-5)
    close(F.cross_entropy(t, y, reduction="sum").numpy(), per_row.sum(), 1e-4)
    close(F.cross_entropy(t, y, reduction="none").numpy(), per_row, 1e-5)
    smooth = 0.1
    target = np.eye(5)[labels] * (1 - smooth) + smooth / 5
    close(F.cross_entropy(t, y, label_smoothing=smooth).numpy(),
          (-(target * logp).sum(1)).mean(), 1e-5)
    close(F.one_hot(y, 5).numpy(), np.eye(5, dtype=np.float32)[labels])
    with pytest.raises(ValueError, match="cross_entropy: logits"):
        F.cross_entropy(t, la.asarray(labels[:4]))
    # a float target is a distribution over the classes (PyTorch's second form)
    probs = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    close(F.cross_entropy(t, la.asarray(probs)).numpy(), (-(probs * logp).sum(1)).mean(), 1e-5)
    with pytest.raises(ValueError, match="target of the input's shape"):
        F.cross_entropy(t, la.asarray(logits[:, :3]))


def test_regression_and_binary_losses(device):
    a, b = rand(6, 3), rand(6, 3)
    close(F.mse_loss(la.asarray(a), la.asarray(b)).numpy(), ((a - b) ** 2).mean())
    close(F.l1_loss(la.asarray(a), la.asarray(b), reduction="sum").numpy(), np.abs(a - b).sum(),
          1e-4)
    logits = rand(40) * 40                         # large: the naive form overflows
    y = (RNG.random(40) > 0.5).astype(np.float32)
    expected = np.maximum(logits, 0) - logits * y + np.log1p(np.exp(-np.abs(logits)))
    close(F.binary_cross_entropy_with_logits(la.asarray(logits), la.asarray(y)).numpy(),
          expected.mean(), 1e-4)
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.mse_loss(la.asarray(a), la.asarray(b), reduction="avg")


def test_scaled_dot_product_attention_with_mask(device):
    q, k, v = rand(2, 3, 4, 8), rand(2, 3, 6, 8), rand(2, 3, 6, 5)
    mask = RNG.random((4, 6)) > 0.3
    mask[:, 0] = True                              # every query attends to something
    out = F.scaled_dot_product_attention(la.asarray(q), la.asarray(k), la.asarray(v),
                                         la.asarray(mask))
    close(out.numpy(), np_attention(q, k, v, mask), 1e-4)
    causal = F.scaled_dot_product_attention(la.asarray(q), la.asarray(k[:, :, :4]),
                                            la.asarray(v[:, :, :4]), is_causal=True)
    close(causal.numpy(), np_attention(q, k[:, :, :4], v[:, :, :4], np.tril(np.ones((4, 4), bool))),
          1e-4)
    # a mask given as a NumPy array, a float mask, a scale: the same as NumPy's
    close(F.scaled_dot_product_attention(la.asarray(q), la.asarray(k), la.asarray(v), mask)
          .numpy(), np_attention(q, k, v, mask), 1e-4)
    additive = np.where(mask, 0.0, -np.inf).astype(np.float32)
    close(F.scaled_dot_product_attention(la.asarray(q), la.asarray(k), la.asarray(v),
                                         la.asarray(additive), scale=1 / math.sqrt(8)).numpy(),
          np_attention(q, k, v, mask), 1e-4)
    elsewhere = "interpreter" if device != "interpreter" else "cpu"
    with pytest.raises(ValueError, match="different devices"):
        F.scaled_dot_product_attention(la.asarray(q), la.asarray(k), la.asarray(v),
                                       la.asarray(mask, device=elsewhere))


def test_dropout_function(device):
    x = la.asarray(np.ones((100, 100), np.float32))
    assert F.dropout(x, 0.5, training=False) is x
    y = F.dropout(x, 0.5).numpy()
    assert set(np.unique(y).tolist()) <= {0.0, 2.0}
    assert abs(y.mean() - 1.0) < 0.05
    with pytest.raises(ValueError, match=r"dropout: p must be in \[0, 1\)"):
        F.dropout(x, 1.0)


# ---- layers -----------------------------------------------------------------------------

def test_linear_layer(device):
    layer = la.nn.Linear(5, 3)
    x = rand(4, 5)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (3, 5) and b.shape == (3,)
    assert np.abs(w).max() <= 1 / math.sqrt(5) + 1e-6            # PyTorch's default bound
    close(layer(la.asarray(x)).numpy(), x @ w.T + b, 1e-5)
    close(layer(la.asarray(rand(2, 4, 5))).numpy().shape, (2, 4, 3))
    no_bias = la.nn.Linear(5, 3, bias=False)
    assert no_bias.bias is None and len(no_bias.parameters()) == 1
    with pytest.raises(ValueError, match="linear: input"):
        layer(la.asarray(rand(4, 6)))


def test_activation_modules_and_sequential(device):
    x = rand(3, 4)
    t = la.asarray(x)
    close(la.nn.ReLU()(t).numpy(), np.maximum(x, 0))
    close(la.nn.Tanh()(t).numpy(), np.tanh(x))
    close(la.nn.Sigmoid()(t).numpy(), 1 / (1 + np.exp(-x)))
    close(la.nn.GELU("tanh")(t).numpy(), F.gelu(t, approximate="tanh").numpy())
    model = la.nn.Sequential(la.nn.Linear(4, 6), la.nn.ReLU(), la.nn.Linear(6, 2))
    w1, b1, w2, b2 = [p.numpy() for p in model.parameters()]
    close(model(t).numpy(), np.maximum(x @ w1.T + b1, 0) @ w2.T + b2, 1e-5)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(model) == 3 and isinstance(model[1], la.nn.ReLU)


def test_layer_norm_layer(device):
    layer = la.nn.LayerNorm(6)
    x = rand(5, 6) * 3 + 1
    close(layer(la.asarray(x)).numpy(), np_layer_norm(x, 1.0, 0.0), 1e-4)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]


def test_linear_layer_on_sequences(device):
    """nn.Linear on a batch of sequences (the composite's form) and on rows (the direct
    form) gives x @ W.T + b; a mismatched input raises naming the op and the shapes."""
    layer = la.nn.Linear(4, 3)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    for shape in [(2, 5, 4), (1, 1, 4), (5, 4), (2, 2, 2, 4)]:
        x = rand(*shape)
        close(layer(la.asarray(x)).numpy(), x @ w.T + b, 1e-5)
    layer.bias = None
    x = rand(2, 5, 4)
    close(layer(la.asarray(x)).numpy(), x @ w.T, 1e-5)
    with pytest.raises(ValueError, match=r"linear: input \(2, 5, 3\) does not match weight"):
        layer(la.asarray(rand(2, 5, 3)))


def test_embedding_layer_every_form(device):
    """Rows picked by a tensor, with a padding row; float indices raise naming
    the op; indices on another device raise."""
    layer = la.nn.Embedding(6, 3)
    w = layer.weight.numpy()
    idx = np.array([[0, 5], [2, 2]])
    np.testing.assert_array_equal(layer(la.asarray(idx)).numpy(), w[idx])
    padded = la.nn.Embedding(6, 3, padding_idx=2)
    assert not padded(la.asarray(idx)).numpy()[1].any()
    with pytest.raises(TypeError, match="embedding: indices must be integers"):
        layer(la.asarray(np.array([0.0, 1.0])))
    elsewhere = "interpreter" if device != "interpreter" else "cpu"
    with pytest.raises(ValueError, match="different devices"):
        layer(la.asarray(idx, device=elsewhere))


def test_layer_norm_layer_every_form(device):
    """The layer's forms (affine or not, a weight set to None, a (2, 6) shape, a bad input
    shape, a weight on another device) give what F.layer_norm gives, or its error."""
    x = rand(5, 2, 6) * 3 + 1
    t = la.asarray(x)
    layer = la.nn.LayerNorm(6)
    with la.no_grad():
        layer.weight.copy_(la.asarray(np.linspace(0.5, 2.0, 6).astype(np.float32)))
    close(layer(t).numpy(), F.layer_norm(t, (6,), layer.weight, layer.bias).numpy(), 1e-6)
    close(la.nn.LayerNorm(6, elementwise_affine=False)(t).numpy(), np_layer_norm(x, 1.0, 0.0),
          1e-4)
    layer.bias = None
    close(layer(t).numpy(), F.layer_norm(t, (6,), layer.weight, None).numpy(), 1e-6)
    close(la.nn.LayerNorm((2, 6))(t).numpy(), F.layer_norm(t, (2, 6)).numpy(), 1e-6)
    with pytest.raises(ValueError, match=r"layer_norm: normalized_shape \(6,\)"):
        la.nn.LayerNorm(6)(la.asarray(rand(5, 4)))
    other = la.nn.LayerNorm(6)
    other.weight = la.nn.Parameter(la.ones(6, device="interpreter" if device != "interpreter"
                                           else "cpu"))
    with pytest.raises(ValueError, match="different devices"):
        other(t)


@pytest.mark.parametrize("cls,shape", [(la.nn.BatchNorm1d, (8, 3)), (la.nn.BatchNorm1d, (8, 3, 5)),
                                       (la.nn.BatchNorm2d, (4, 3, 5, 5))])
def test_batch_norm_train_and_eval(device, cls, shape):
    bn = cls(3, momentum=0.1)
    x = rand(*shape) * 2 + 3
    axes = (0,) + tuple(range(2, len(shape)))
    view = (1, 3) + (1,) * (len(shape) - 2)
    mu, var = x.mean(axes), x.var(axes)
    expected = (x - mu.reshape(view)) / np.sqrt(var.reshape(view) + 1e-5)
    close(bn(la.asarray(x)).numpy(), expected, 1e-4)
    n = x.size // 3
    close(bn.running_mean.numpy(), 0.1 * mu, 1e-5)
    close(bn.running_var.numpy(), 0.9 + 0.1 * var * n / (n - 1), 1e-4)
    bn.eval()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    close(bn(la.asarray(x)).numpy(), (x - rm.reshape(view)) / np.sqrt(rv.reshape(view) + 1e-5),
          1e-4)
    close(bn.running_mean.numpy(), rm)                         # eval leaves the stats alone
    assert sorted(bn.state_dict()) == ["bias", "num_batches_tracked", "running_mean",
                                       "running_var", "weight"]       # PyTorch's keys
    with pytest.raises(ValueError, match="channels on axis 1"):
        bn(la.asarray(rand(8, 4)))


def test_batch_norm_training_reads_its_input_in_two_reduction_passes():
    """The batch statistics are one pass (mean and variance of shifted data side by side)
    and their gradient has no reduction that waits for another: a training step's
    BatchNorm is one reduction forward and one backward (four before: the variance
    waited for the mean, and so did its gradient)."""
    bn = la.nn.BatchNorm2d(4)
    x = la.asarray(rand(8, 4, 6, 6)).requires_grad_(True)
    la.sync()
    with la.profiler.profile() as prof:
        y = bn(x)
        (y * y).sum().backward()
        la.sync()
    assert sorted(r.kind for r in prof.key_averages()).count("reduction") == 2


def test_batch_stats_keep_their_precision_far_from_zero(device):
    x = (rand(16, 3, 7, 7) + np.array([1e3, -2e3, 0.5]).reshape(1, 3, 1, 1)).astype(np.float32)
    mu, var = F.batch_stats(la.asarray(x, device=device))
    wide = x.astype(np.float64)
    np.testing.assert_allclose(mu.numpy(), wide.mean((0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(var.numpy(), wide.var((0, 2, 3)), rtol=2e-3)


def test_embedding_and_dropout_layers(device):
    emb = la.nn.Embedding(10, 4)
    idx = np.array([[1, 2, 9], [0, 0, 3]])
    close(emb(la.asarray(idx)).numpy(), emb.weight.numpy()[idx])
    drop = la.nn.Dropout(0.5)
    x = la.asarray(np.ones((50, 50), np.float32))
    assert drop(x).numpy().min() == 0.0
    drop.eval()
    assert drop(x) is x


def test_multihead_attention_against_numpy(device):
    """PyTorch's conventions (issue 13): (L, N, E) unless batch_first, a bool mask marks
    with True what may NOT be attended, in_proj_weight holds q, k, v, (output, weights)."""
    mha = la.nn.MultiheadAttention(8, 2, batch_first=True)
    x = rand(2, 5, 8)
    allowed = np.tril(np.ones((5, 5), bool))
    out, weights = mha(la.asarray(x), la.asarray(x), la.asarray(x),
                       attn_mask=la.asarray(~allowed))
    w_in, b_in = mha.in_proj_weight.numpy(), mha.in_proj_bias.numpy()

    def proj(i, a):
        return a @ w_in[8 * i:8 * (i + 1)].T + b_in[8 * i:8 * (i + 1)]

    def heads(a):
        return a.reshape(2, 5, 2, 4).transpose(0, 2, 1, 3)
    q, k, v = heads(proj(0, x)), heads(proj(1, x)), heads(proj(2, x))
    o = np_attention(q, k, v, allowed).transpose(0, 2, 1, 3).reshape(2, 5, 8)
    out_proj = mha.out_proj
    close(out.numpy(), o @ out_proj.weight.numpy().T + out_proj.bias.numpy(), 1e-4)
    assert weights.shape == (2, 5, 5) and np.allclose(weights.numpy().sum(-1), 1, atol=1e-5)
    close(mha(la.asarray(x), is_causal=True)[0].numpy(), out.numpy(), 1e-5)
    seq_first = la.asarray(x.transpose(1, 0, 2))
    mha.batch_first = False
    close(mha(seq_first, attn_mask=la.asarray(~allowed))[0].numpy(),
          out.numpy().transpose(1, 0, 2), 1e-5)
    assert len(mha.parameters()) == 4
    assert list(mha.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight",
                                      "out_proj.bias"]


def _np_conv2d(x, w, b, stride, padding):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out + b.reshape(1, -1, 1, 1)


def _np_pool(x, k, reduce):
    n, c, h, w = x.shape
    return reduce(x.reshape(n, c, h // k, k, w // k, k), axis=(3, 5))


needs_conv = pytest.mark.skipif(importlib.util.find_spec("lazyarray.ops.convolution") is None,
                                reason="lazyarray.ops.convolution (the convolution and pooling "
                                       "ops of the autodiff work) is not present in this tree")


@needs_conv
def test_conv2d_and_pooling_layers(device):
    conv = la.nn.Conv2d(3, 4, 3, stride=1, padding=1)
    x = rand(2, 3, 6, 6)
    expected = _np_conv2d(x, conv.weight.numpy(), conv.bias.numpy(), 1, 1)
    close(conv(la.asarray(x)).numpy(), expected, 1e-4)
    strided = la.nn.Conv2d(3, 2, 2, stride=2, bias=False)
    close(strided(la.asarray(x)).numpy(),
          _np_conv2d(x, strided.weight.numpy(), np.zeros(2), 2, 0), 1e-4)
    close(la.nn.MaxPool2d(2)(la.asarray(x)).numpy(), _np_pool(x, 2, np.max))
    close(la.nn.AvgPool2d(2)(la.asarray(x)).numpy(), _np_pool(x, 2, np.mean), 1e-5)


# ---- modules: state, modes, devices --------------------------------------------------------

class Net(la.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = la.nn.Sequential(la.nn.Linear(4, 8), la.nn.ReLU())
        self.norm = la.nn.BatchNorm1d(8)
        self.head = la.nn.Linear(8, 2)
        self.scale = la.nn.Parameter(la.ones((2,)))

    def forward(self, x):
        return self.head(self.norm(self.body(x))) * self.scale


def test_module_registration_and_modes():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "norm.weight", "norm.bias",
                     "head.weight", "head.bias"]
    assert [n for n, _ in net.named_buffers()] == ["norm.running_mean", "norm.running_var",
                                                   "norm.num_batches_tracked"]
    assert net.training and net.norm.training
    net.eval()
    assert not net.training and not net.norm.training and not net.body[0].training
    net.train()
    assert net.norm.training
    assert la.nn.count_parameters(net) == 4 * 8 + 8 + 8 + 8 + 8 * 2 + 2 + 2
    assert type(net.scale) is la.Tensor                  # Parameter marks, it does not wrap
    net.offset = la.zeros((2,))                          # a plain tensor is not a parameter
    assert "offset" not in dict(net.named_parameters())
    net.head.bias = None                                 # removing a parameter
    assert "head.bias" not in dict(net.named_parameters())


def _roundtrip(tmp_path, save, load, suffix):
    net, other = Net(), Net()
    net(la.asarray(rand(5, 4)))                     # moves the running statistics
    path = str(tmp_path / f"weights{suffix}")
    save(net, path)
    state = load(path)
    expected = net.state_dict()
    assert sorted(state) == sorted(expected)
    kept = other.parameters()
    other.load_state_dict(state)
    assert other.parameters() == kept               # same tensor objects, new values
    for name, value in other.state_dict().items():
        np.testing.assert_array_equal(value, expected[name])
    x = la.asarray(rand(3, 4))
    net.eval(), other.eval()
    np.testing.assert_array_equal(net(x).numpy(), other(x).numpy())


def test_state_dict_roundtrip_npz(tmp_path):
    _roundtrip(tmp_path, la.nn.save_npz, la.nn.load_npz, ".npz")


@pytest.mark.skipif(importlib.util.find_spec("safetensors") is None,
                    reason="the optional safetensors package is not installed")
def test_state_dict_roundtrip_safetensors(tmp_path):
    _roundtrip(tmp_path, la.nn.save, la.nn.load, ".safetensors")


def test_load_state_dict_errors():
    net = Net()
    state = net.state_dict()
    bad = dict(state)
    bad["head.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(ValueError, match="head.weight"):
        net.load_state_dict(bad)
    del bad["head.weight"]
    with pytest.raises(KeyError, match="missing keys"):
        net.load_state_dict(bad)
    net.load_state_dict(bad, strict=False)


def test_to_device_keeps_tensor_identity():
    from harness import device_names
    names = device_names()
    net = Net()
    params = net.parameters()
    before = {n: v.copy() for n, v in net.state_dict().items()}
    for name in names[::-1] + names:
        net.to(name)
        assert net.parameters() == params
        assert all(p.device is la.device(name) for p in params + net.buffers())
    for n, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[n])
    net.to(dtype=la.float64)
    assert all(p.dtype is la.float64 for p in net.parameters())


# ---- gradients of the composites (float64, random direction) -------------------------------

def _f64(*shape):
    return RNG.standard_normal(shape)


GRADIENT_CASES = {
    "softmax": (lambda x: F.softmax(x, -1), [_f64(3, 5)]),
    "log_softmax": (lambda x: F.log_softmax(x, 0), [_f64(4, 3)]),
    "gelu_erf": (lambda x: F.gelu(x), [_f64(7)]),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), [_f64(7)]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (6,), w, b), [_f64(3, 6), _f64(6), _f64(6)]),
    "batch_norm": (lambda x, w, b: F.batch_norm(x, *F.batch_stats(x), w, b),
                   [_f64(5, 3, 2), _f64(3), _f64(3)]),
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y), [_f64(6, 4), RNG.integers(0, 4, 6)]),
    "bce_logits": (lambda x, y: F.binary_cross_entropy_with_logits(x, y),
                   [_f64(8) * 3, (RNG.random(8) > 0.5).astype(np.float64)]),
    "attention": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                  [_f64(2, 4, 3), _f64(2, 4, 3), _f64(2, 4, 2)]),
    "linear": (lambda x, w, b: F.linear(x, w, b), [_f64(3, 4), _f64(2, 4), _f64(2)]),
}


@pytest.mark.parametrize("name", list(GRADIENT_CASES))
def test_composite_gradients(device, name):
    from gradcheck import check_direction
    fn, inputs = GRADIENT_CASES[name]
    wrt = [i for i, a in enumerate(inputs) if a.dtype.kind == "f"]
    if name == "bce_logits":
        wrt = [0]
    check_direction(fn, inputs, wrt=wrt, device=device)


def test_cross_entropy_gradient_is_softmax_minus_one_hot(device):
    logits, labels = rand(5, 4), RNG.integers(0, 4, 5)
    x = la.asarray(logits)
    with la.GradientTape() as tape:
        tape.watch(x)
        loss = F.cross_entropy(x, la.asarray(labels))
    grad = tape.gradient(loss, x)
    close(grad.numpy(), (np_softmax(logits) - np.eye(4)[labels]) / 5, 1e-6)
