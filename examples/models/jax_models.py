"""The GPT training step, the encoder and the CNN training step in JAX, written the way
JAX users write them: pure functions of a parameter dict (the PyTorch names of
`torch_models.py`, so the same weights load into all three), the optimizer's update by
hand (AdamW with clipping, SGD with momentum, PyTorch's formulas), the step under
`jax.jit`. Greedy decoding has no JAX version here.
"""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _layer_norm(p: dict, name: str, x: Any, eps: float = 1e-5) -> Any:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]


def _linear(p: dict, name: str, x: Any) -> Any:
    return x @ p[name + ".weight"].T + p[name + ".bias"]


def _heads(x: Any, heads: int) -> Any:
    B, T, C = x.shape
    return x.reshape(B, T, heads, C // heads)       # dot_product_attention's (B, T, N, D)


# ---- GPT -------------------------------------------------------------------------------

def gpt_loss(p: dict, cfg: Any, idx: Any, targets: Any) -> Any:
    B, T = idx.shape
    x = p["wte.weight"][idx] + p["wpe.weight"][:T]
    for i in range(cfg.layers):
        pre = f"h.{i}."
        q, k, v = jnp.split(_linear(p, pre + "attn.c_attn", _layer_norm(p, pre + "ln_1", x)),
                            3, axis=-1)
        y = jax.nn.dot_product_attention(_heads(q, cfg.heads), _heads(k, cfg.heads),
                                         _heads(v, cfg.heads), is_causal=True)
        x = x + _linear(p, pre + "attn.c_proj", y.reshape(B, T, -1))
        h = jax.nn.gelu(_linear(p, pre + "mlp.c_fc", _layer_norm(p, pre + "ln_2", x)),
                        approximate=False)
        x = x + _linear(p, pre + "mlp.c_proj", h)
    logits = _layer_norm(p, "ln_f", x) @ p["wte.weight"].T
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()


def gpt_train_step(weights: dict, cfg: Any) -> Any:
    """step(tokens, targets) -> the loss as a float; AdamW (decay on 2-D parameters),
    gradients clipped to a global norm of cfg.clip, as torch_models' step."""
    b1, b2, eps = 0.9, 0.95, 1e-8

    @jax.jit
    def update(p: dict, m: dict, v: dict, t: Any, idx: Any, targets: Any) -> tuple:
        loss, g = jax.value_and_grad(gpt_loss)(p, cfg, idx, targets)
        norm = jnp.sqrt(sum(jnp.sum(x * x) for x in g.values()))
        g = {n: x * jnp.minimum(cfg.clip / (norm + 1e-6), 1.0) for n, x in g.items()}
        m = {n: b1 * m[n] + (1 - b1) * g[n] for n in p}
        v = {n: b2 * v[n] + (1 - b2) * g[n] ** 2 for n in p}
        step = cfg.lr / (1 - b1 ** t)
        root = jnp.sqrt(1 - b2 ** t)
        p = {n: (x * (1 - cfg.lr * cfg.weight_decay) if x.ndim >= 2 else x)
             - step * m[n] / (jnp.sqrt(v[n]) / root + eps) for n, x in p.items()}
        return p, m, v, loss

    state = {"p": {n: jnp.asarray(w) for n, w in weights.items()}, "t": 0}
    state["m"] = {n: jnp.zeros_like(w) for n, w in state["p"].items()}
    state["v"] = {n: jnp.zeros_like(w) for n, w in state["p"].items()}

    def step(idx: Any, targets: Any) -> float:
        state["t"] += 1
        state["p"], state["m"], state["v"], loss = update(
            state["p"], state["m"], state["v"], float(state["t"]), idx, targets)
        return float(loss)
    return step


# ---- BERT-style encoder ------------------------------------------------------------------

def encoder(p: dict, cfg: Any, ids: Any, attention_mask: Any) -> Any:
    B, T = ids.shape
    x = _layer_norm(p, "ln", p["tok.weight"][ids] + p["pos.weight"][:T], 1e-12)
    mask = attention_mask[:, None, None, :]
    for i in range(cfg.layers):
        pre = f"layers.{i}."
        q, k, v = jnp.split(_linear(p, pre + "qkv", x), 3, axis=-1)
        y = jax.nn.dot_product_attention(_heads(q, cfg.heads), _heads(k, cfg.heads),
                                         _heads(v, cfg.heads), mask=mask)
        x = _layer_norm(p, pre + "ln_1", x + _linear(p, pre + "out", y.reshape(B, T, -1)),
                        1e-12)
        h = jax.nn.gelu(_linear(p, pre + "fc_1", x), approximate=False)
        x = _layer_norm(p, pre + "ln_2", x + _linear(p, pre + "fc_2", h), 1e-12)
    m = attention_mask[..., None].astype(x.dtype)
    return (x * m).sum(1) / m.sum(1)


def encode(weights: dict, cfg: Any) -> Any:
    p = {n: jnp.asarray(w) for n, w in weights.items()}
    run = jax.jit(lambda p, ids, mask: encoder(p, cfg, ids, mask))
    return lambda ids, mask: np.asarray(run(p, ids, mask))


# ---- ResNet-style CNN ----------------------------------------------------------------------

def _conv(x: Any, w: Any, stride: int) -> Any:
    pad = w.shape[-1] // 2
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2,
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))


def _batch_norm(p: dict, stats: dict, name: str, x: Any) -> Any:
    """Training-mode batch norm; records the batch's mean and unbiased variance in
    `stats` (the caller folds them into the running statistics)."""
    mean = x.mean((0, 2, 3))
    var = x.var((0, 2, 3))
    n = x.size // x.shape[1]
    stats[name] = (mean, var * n / (n - 1))
    xhat = (x - mean[:, None, None]) / jnp.sqrt(var[:, None, None] + 1e-5)
    return xhat * p[name + ".weight"][:, None, None] + p[name + ".bias"][:, None, None]


def _block(p: dict, stats: dict, pre: str, x: Any, stride: int) -> Any:
    out = jax.nn.relu(_batch_norm(p, stats, pre + "bn1", _conv(x, p[pre + "conv1.weight"], stride)))
    out = _batch_norm(p, stats, pre + "bn2", _conv(out, p[pre + "conv2.weight"], 1))
    if pre + "shortcut.0.weight" in p:
        x = _batch_norm(p, stats, pre + "shortcut.1", _conv(x, p[pre + "shortcut.0.weight"], stride))
    return jax.nn.relu(out + x)


def cnn_loss(p: dict, cfg: Any, x: Any, y: Any) -> tuple:
    stats: dict = {}
    out = jax.nn.relu(_batch_norm(p, stats, "bn1", _conv(x, p["conv1.weight"], 1)))
    i = 0
    for s in range(len(cfg.channels)):
        for j in range(cfg.blocks):
            out = _block(p, stats, f"layers.{i}.", out, 2 if s > 0 and j == 0 else 1)
            i += 1
    logits = out.mean((2, 3)) @ p["fc.weight"].T + p["fc.bias"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(logp, y[:, None], axis=1).mean(), stats


def cnn_train_step(weights: dict, cfg: Any) -> Any:
    """step(x, y) -> the loss as a float: SGD with momentum (PyTorch's: the first step's
    buffer is the gradient), BatchNorm's running statistics updated with momentum 0.1."""
    @jax.jit
    def update(p: dict, buf: dict, running: dict, first: Any, x: Any, y: Any) -> tuple:
        (loss, stats), g = jax.value_and_grad(cnn_loss, has_aux=True)(p, cfg, x, y)
        buf = {n: jnp.where(first, g[n], cfg.momentum * buf[n] + g[n]) for n in p}
        p = {n: p[n] - cfg.lr * buf[n] for n in p}
        running = {n: (0.9 * running[n][0] + 0.1 * mean, 0.9 * running[n][1] + 0.1 * var)
                   for n, (mean, var) in stats.items()}
        return p, buf, running, loss

    p = {n: jnp.asarray(w) for n, w in weights.items()}
    running = {n[:-len(".weight")]: (jnp.zeros_like(w), jnp.ones_like(w))
               for n, w in p.items() if w.ndim == 1 and n != "fc.bias" and n.endswith("weight")}
    state = {"p": p, "buf": {n: jnp.zeros_like(w) for n, w in p.items()},
             "running": running, "first": True}

    def step(x: Any, y: Any) -> float:
        state["p"], state["buf"], state["running"], loss = update(
            state["p"], state["buf"], state["running"], state["first"], x, y)
        state["first"] = False
        return float(loss)
    return step
