"""Sizes of the four benchmark models and the weights and batches every framework gets.

The same NumPy arrays (drawn here, seeded) are loaded into the lazyarray, PyTorch and JAX
versions of each model, by parameter name (the PyTorch names; lazyarray's modules use
the same ones), so their losses and outputs can be compared step by step.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class GPTConfig:
    """A decoder-only transformer (GPT-2 layout): pre-norm blocks, GELU MLP, causal
    attention, the token embedding tied to the output head."""
    vocab: int = 512
    seq: int = 128
    layers: int = 4
    width: int = 256
    heads: int = 4
    batch: int = 8
    lr: float = 3e-4
    weight_decay: float = 0.1
    clip: float = 1.0


@dataclass(frozen=True)
class EncoderConfig:
    """A BERT-style encoder (post-norm, GELU), inference with a padding mask and mean
    pooling over the real tokens: a small sentence-embedding model."""
    vocab: int = 1024
    seq: int = 128
    layers: int = 6
    width: int = 384
    heads: int = 12
    batch: int = 8


@dataclass(frozen=True)
class CNNConfig:
    """A CIFAR-style ResNet: a 3x3 stem, 3 stages of 2 basic blocks, global average
    pooling, a linear classifier; SGD with momentum."""
    channels: tuple = (16, 32, 64)
    blocks: int = 2
    side: int = 32
    batch: int = 32
    classes: int = 10
    lr: float = 0.05
    momentum: float = 0.9


@dataclass(frozen=True)
class DecodeConfig:
    """Greedy decoding with the GPT and a key/value cache of `gpt.seq` positions."""
    gpt: GPTConfig = GPTConfig()
    prompt: int = 16
    new_tokens: int = 64
    batch: int = 1


def small(config):
    """The test sizes of a config: a few steps at these run in well under a second."""
    if isinstance(config, GPTConfig):
        return replace(config, vocab=64, seq=16, layers=2, width=32, heads=4, batch=2)
    if isinstance(config, EncoderConfig):
        return replace(config, vocab=64, seq=16, layers=2, width=32, heads=4, batch=3)
    if isinstance(config, CNNConfig):
        return replace(config, channels=(4, 8, 8), blocks=1, side=8, batch=4)
    if isinstance(config, DecodeConfig):
        return replace(config, gpt=small(config.gpt), prompt=4, new_tokens=6)
    raise TypeError(f"small: no test sizes for {type(config).__name__}")


# ---- weights, by parameter name --------------------------------------------------------

def weights_for(shapes: dict, seed: int = 1) -> dict:
    """name -> float32 array for each (name -> shape) of a model's parameters: matrices and
    embeddings N(0, 0.02) (GPT-2's init), convolutions He-normal, norms' scales 1 and
    shifts 0 perturbed a little (so a test sees them used), biases small."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 4:
            std = np.sqrt(2.0 / np.prod(shape[1:]))
            w = rng.standard_normal(shape) * std
        elif len(shape) == 2:
            w = rng.standard_normal(shape) * 0.02
        elif name.endswith("weight"):       # a norm's scale
            w = 1.0 + 0.1 * rng.standard_normal(shape)
        else:
            w = 0.02 * rng.standard_normal(shape)
        out[name] = w.astype(np.float32)
    return out


# ---- batches ---------------------------------------------------------------------------

def gpt_batches(cfg: GPTConfig, steps: int, seed: int = 0) -> list:
    """(tokens, targets) int64 (batch, seq) pairs: targets are tokens shifted by one."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        seq = rng.integers(0, cfg.vocab, (cfg.batch, cfg.seq + 1))
        out.append((seq[:, :-1].copy(), seq[:, 1:].copy()))
    return out


def encoder_batch(cfg: EncoderConfig, seed: int = 0) -> tuple:
    """(token ids int64 (batch, seq), attention mask bool (batch, seq)): each sentence has
    a length between a quarter of `seq` and `seq`, padded with token 0 after it."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(max(cfg.seq // 4, 1), cfg.seq + 1, cfg.batch)
    lengths[0] = cfg.seq                    # one full row
    mask = np.arange(cfg.seq)[None, :] < lengths[:, None]
    ids = np.where(mask, rng.integers(1, cfg.vocab, (cfg.batch, cfg.seq)), 0)
    return ids.astype(np.int64), mask


def cnn_batches(cfg: CNNConfig, steps: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((cfg.batch, 3, cfg.side, cfg.side)).astype(np.float32),
             rng.integers(0, cfg.classes, cfg.batch)) for _ in range(steps)]


def decode_prompt(cfg: DecodeConfig, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, cfg.gpt.vocab, (cfg.batch, cfg.prompt)).astype(np.int64)
