"""Shape buckets: la.pad_to_bucket pads a batch on the host so that an encoder over
sentences of varying length compiles once per bucket; recompile reasons name the input
whose shape changed."""
import numpy as np
import pytest

import lazyarray as la
from lazyarray.graph_break import GraphBreakError


class _Encoder:
    def __init__(self, width=32, heads=2, layers=2, vocab=50):
        nn = la.nn
        self.embed = nn.Embedding(vocab, width)
        self.layers = [(nn.MultiheadAttention(width, heads, batch_first=True), nn.LayerNorm(width),
                        nn.Linear(width, 2 * width), nn.Linear(2 * width, width),
                        nn.LayerNorm(width)) for _ in range(layers)]

    def __call__(self, tokens, padding=None):
        """padding: bool (N, S), True at padded keys (PyTorch's key_padding_mask)."""
        x = self.embed(tokens)
        for attn, n1, f1, f2, n2 in self.layers:
            x = n1(x + attn(x, x, x, key_padding_mask=padding, need_weights=False)[0])
            x = n2(x + f2(la.nn.functional.gelu(f1(x))))
        return x


def test_encoder_compiles_once_per_bucket_and_matches_unpadded():
    model = _Encoder()
    la.sync()                   # the parameters' initial values: computed now
    rng = np.random.default_rng(0)
    la.debug.reset_metrics()
    compiles = 0
    for length in (3, 5, 8, 7, 9, 16, 12, 4):
        tokens = rng.integers(1, 50, (2, length))
        padded, mask = la.pad_to_bucket(tokens, buckets=(8, 16))
        assert padded.shape == (2, 8 if length <= 8 else 16) and mask.shape == padded.shape
        np.testing.assert_array_equal(mask.numpy()[0], np.arange(padded.shape[1]) < length)
        before = la.debug.metrics().cache_misses
        out = model(padded, ~mask).numpy()
        compiles += la.debug.metrics().cache_misses - before
        want = model(la.asarray(tokens)).numpy()
        np.testing.assert_allclose(out[:, :length], want, rtol=2e-4, atol=2e-5)
    assert compiles == 2, la.debug.metrics().recompiles


def test_recompile_reason_names_the_changed_input_shape():
    la.debug.reset_metrics()
    w = la.asarray(np.ones((4,), np.float32))
    for n in (8, 16):
        x = la.asarray(np.ones((2, n, 4), np.float32))
        (x * w).sum().numpy()
    reasons = [r for _, r in la.debug.metrics().recompiles]
    assert any("input" in r and "changed shape" in r and "[2, 8, 4]" in r and "[2, 16, 4]" in r
               for r in reasons), reasons


def test_pad_to_bucket_details():
    x = la.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    padded, mask = la.pad_to_bucket(x * 2, buckets=[4, 2], value=-1.0)   # a pending input
    np.testing.assert_array_equal(padded.numpy(), [[0, 2, 4, -1], [6, 8, 10, -1]])
    assert mask.dtype == la.bool and mask.numpy().tolist() == [[1, 1, 1, 0], [1, 1, 1, 0]]
    p0, m0 = la.pad_to_bucket(np.ones((5, 3)), axis=0)          # default buckets: 8, 16, ...
    assert p0.shape == (8, 3) and m0.shape == (8,) and int(m0.numpy().sum()) == 5
    assert la.bucket_size(9) == 16 and la.bucket_size(8, (8, 16)) == 8
    with pytest.raises(ValueError, match="length 5 exceeds the largest bucket 4"):
        la.pad_to_bucket(np.ones((2, 5)), buckets=(2, 4))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        la.pad_to_bucket(np.ones((2, 5)), axis=2)


# ---- buckets chosen by lazyarray: la.config.length_buckets -----------------------------

class _EncoderModule(la.nn.Module):
    """An encoder as PyTorch users write one: forward(tokens, key_padding_mask=None)."""

    def __init__(self, width=32, heads=2, vocab=50, batch_first=True):
        super().__init__()
        nn = la.nn
        self.batch_first = batch_first
        self.embed = nn.Embedding(vocab, width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=batch_first)
        self.n1, self.n2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.f1, self.f2 = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, tokens, key_padding_mask=None):
        x = self.embed(tokens)
        a, w = self.attn(x, x, x, key_padding_mask=key_padding_mask)
        x = self.n1(x + a)
        return self.n2(x + self.f2(la.nn.functional.gelu(self.f1(x)))), w


LENGTHS = (3, 5, 8, 7, 9, 16, 12, 4, 21, 30, 2, 11, 17)


def test_length_buckets_compile_a_handful_of_programs_equal_to_unpadded():
    model = _EncoderModule()
    la.sync()
    rng = np.random.default_rng(1)
    batches = [rng.integers(1, 50, (2, n)) for n in LENGTHS]
    with la.no_grad():
        want = [tuple(t.numpy() for t in model(la.asarray(b))) for b in batches]
        la.debug.reset_metrics()
        with la.config.override(length_buckets=True):
            got = [tuple(t.numpy() for t in model(la.asarray(b))) for b in batches]
    assert la.debug.metrics().cache_misses == 3   # buckets 8, 16 and 32 for 13 lengths
    for n, (out, w), (out0, w0) in zip(LENGTHS, got, want):
        # the sequence axis is sliced back; the weights' key axis keeps the bucket's
        # length, the padded keys weighing 0
        assert out.shape == (2, n, 32) and w.shape == (2, n, la.bucket_size(n))
        np.testing.assert_array_equal(w[:, :, n:], 0)
        np.testing.assert_allclose(out, out0, rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(w[:, :, :n], w0, rtol=2e-4, atol=2e-6)


def test_length_buckets_keep_the_callers_mask_and_layout():
    """A mask the caller gave stays in force (padded with True); batch_first=False pads
    axis 0."""
    model = _EncoderModule(batch_first=False)
    la.sync()
    rng = np.random.default_rng(2)
    tokens = rng.integers(1, 50, (5, 3))                    # (L, N)
    mask = np.zeros((3, 5), bool)
    mask[:, 4] = True                                       # the last token ignored
    with la.no_grad():
        want = model(la.asarray(tokens), key_padding_mask=la.asarray(mask))[0].numpy()
        with la.config.override(length_buckets=True):
            got = model(la.asarray(tokens), key_padding_mask=la.asarray(mask))[0].numpy()
    assert got.shape == (5, 3, 32)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def test_length_buckets_let_gradients_through():
    """With gradients on, the outputs are sliced in the graph: backward reaches the
    padded forward, and the gradients are those of the unpadded call."""
    model = _EncoderModule()
    rng = np.random.default_rng(3)
    tokens = rng.integers(1, 50, (2, 6))
    weights = la.asarray(rng.standard_normal((2, 6, 32)).astype(np.float32))
    grads = []
    for on in (False, True):
        with la.config.override(length_buckets=on):
            loss = la.sum(model(la.asarray(tokens))[0] * weights)
        model.zero_grad()
        loss.backward()
        grads.append([p.grad.numpy() for p in model.parameters()])
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-5)


def test_recompile_reason_for_a_changed_length_suggests_the_setting():
    la.debug.reset_metrics()
    w = la.asarray(np.ones((3,), np.float32))
    for n in (5, 6):
        (la.asarray(np.ones((2, n, 3), np.float32)) * w + 1.5).max().numpy()
    reasons = [r for _, r in la.debug.metrics().recompiles]
    assert any("axis 1" in r and "la.config.length_buckets = True" in r for r in reasons), \
        reasons


def test_strict_mode_names_what_to_do_about_the_bucket_slice():
    """The slice back to the true length is a graph break; strict mode refuses it with a
    hint of its own (not the generic one)."""
    model = _EncoderModule()
    la.sync()
    with la.no_grad(), la.config.override(length_buckets=True, strict=True):
        with pytest.raises(GraphBreakError, match="length bucket slice.*pad_to_bucket"):
            model(la.asarray(np.ones((2, 5), np.int64)))
