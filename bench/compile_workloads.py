"""Workloads whose first call is dominated by compiling (issue 12, point 4): a BERT-style
encoder (6 layers, width 384), one transformer block, and the MLP training step.

Each `make_*` returns a function that runs the workload once and reads its result, so
that calling it the first time traces, compiles and runs, and later calls hit the cache.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

WIDTH, HEADS, LAYERS, FFN = 384, 6, 6, 1536


class EncoderLayer:
    """Post-norm transformer encoder layer (BERT's): attention, add & norm, FFN, add & norm."""

    def __init__(self, la: Any, width: int = WIDTH, heads: int = HEADS, ffn: int = FFN) -> None:
        nn = la.nn
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.fc1, self.fc2 = nn.Linear(width, ffn), nn.Linear(ffn, width)
        self.act = nn.GELU()

    def __call__(self, x: Any, padding: Any = None) -> Any:
        attended, _ = self.attn(x, x, x, key_padding_mask=padding, need_weights=False)
        x = self.norm1(x + attended)
        return self.norm2(x + self.fc2(self.act(self.fc1(x))))


class Encoder:
    def __init__(self, la: Any, layers: int = LAYERS, vocab: int = 1000) -> None:
        self.embed = la.nn.Embedding(vocab, WIDTH)
        self.layers = [EncoderLayer(la) for _ in range(layers)]

    def __call__(self, tokens: Any, padding: Any = None) -> Any:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, padding)
        return x


def make_encoder(layers: int = LAYERS, batch: int = 2, length: int = 32) -> Callable[[], Any]:
    import lazyarray as la
    model = Encoder(la, layers)
    tokens = la.asarray(np.random.default_rng(0).integers(0, 1000, (batch, length)))
    la.sync()
    return lambda: model(tokens).numpy()


def make_mlp_step() -> Callable[[], Any]:
    import lazyarray as la
    import lazyarray.nn.functional as F
    rng = np.random.default_rng(0)
    model = la.nn.Sequential(la.nn.Linear(784, 512), la.nn.ReLU(), la.nn.Linear(512, 512),
                             la.nn.ReLU(), la.nn.Linear(512, 10))
    opt = la.optim.Adam(model.parameters(), lr=1e-3)
    x = la.asarray(rng.standard_normal((256, 784), dtype=np.float32))
    y = la.asarray(rng.integers(0, 10, 256))
    params = model.parameters()
    la.sync()

    def step():
        with la.GradientTape() as tape:
            loss = F.cross_entropy(model(x), y)
        opt.apply_gradients(tape.gradient(loss, params))
        return loss.item()
    return step
