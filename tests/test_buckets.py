"""Shape buckets: la.pad_to_bucket pads a batch on the host so that an encoder over
sentences of varying length compiles once per bucket; recompile reasons name the input
whose shape changed."""
import numpy as np
import pytest

import lazyarray as la


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
