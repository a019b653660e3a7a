"""Training steps for bench_cuda.py, written once per framework from the same weights:
an MLP (Linear/ReLU, softmax cross-entropy, Adam) and a GPT-style transformer block
(pre-norm, causal scaled-dot-product attention, 4x GELU MLP, loss mean(block(x)^2),
Adam). Each builder returns a `step()` that runs one step and waits for the GPU.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

WIDTH, HEADS, SEQ, BATCH = 512, 8, 512, 16
LR = 1e-3


def _uniform(rng: np.random.Generator, fan_in: int, shape: tuple) -> np.ndarray:
    bound = 1 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, shape).astype(np.float32)


def mlp_weights(sizes: tuple) -> list:
    rng = np.random.default_rng(1)
    out = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        out += [_uniform(rng, fan_in, (fan_in, fan_out)), _uniform(rng, fan_in, (fan_out,))]
    return out


def mlp_data(sizes: tuple, batch: int) -> tuple:
    rng = np.random.default_rng(0)
    return rng.standard_normal((batch, sizes[0]), dtype=np.float32), rng.integers(0, sizes[-1], batch)


def la_mlp_step(la: Any, sizes: tuple, batch: int, device: str = "cuda") -> Callable:
    F = la.nn.functional
    params = [la.nn.Parameter(la.asarray(w, device=device)) for w in mlp_weights(sizes)]
    xs, ys = mlp_data(sizes, batch)
    x, y = la.asarray(xs, device=device), la.asarray(ys, device=device)
    opt = la.optim.Adam(params, lr=LR)

    def forward() -> Any:
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i + 2 < len(params):
                h = la.maximum(h, 0)
        return F.cross_entropy(h, y)

    def step() -> Any:
        with la.GradientTape() as tape:
            loss = forward()
        opt.apply_gradients(tape.gradient(loss, params))
        la.sync()
        la.cuda.synchronize(device)
        return loss
    return step


def torch_mlp_step(torch: Any, sizes: tuple, batch: int, compiled: bool) -> Callable:
    params = [torch.tensor(w, device="cuda", requires_grad=True) for w in mlp_weights(sizes)]
    xs, ys = mlp_data(sizes, batch)
    x, y = torch.tensor(xs, device="cuda"), torch.tensor(ys, device="cuda")
    opt = torch.optim.Adam(params, lr=LR)

    def forward() -> Any:
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i + 2 < len(params):
                h = torch.relu(h)
        return torch.nn.functional.cross_entropy(h, y)
    run = torch.compile(forward) if compiled else forward

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = run()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        return loss
    return step


# ---- a transformer block ---------------------------------------------------------------

NAMES = ("ln1_w", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_w", "ln2_b",
         "w_1", "b_1", "w_2", "b_2")


def block_params(width: int = WIDTH, seq: int = SEQ, batch: int = BATCH) -> tuple:
    """(name -> array, input x (batch, seq, width)), the same for every framework."""
    rng = np.random.default_rng(2)
    c = width
    p = {"ln1_w": np.ones(c, np.float32), "ln1_b": np.zeros(c, np.float32),
         "w_qkv": _uniform(rng, c, (c, 3 * c)), "b_qkv": np.zeros(3 * c, np.float32),
         "w_o": _uniform(rng, c, (c, c)), "b_o": np.zeros(c, np.float32),
         "ln2_w": np.ones(c, np.float32), "ln2_b": np.zeros(c, np.float32),
         "w_1": _uniform(rng, c, (c, 4 * c)), "b_1": np.zeros(4 * c, np.float32),
         "w_2": _uniform(rng, 4 * c, (4 * c, c)), "b_2": np.zeros(c, np.float32)}
    x = rng.standard_normal((batch, seq, width)).astype(np.float32)
    return p, x


def _block(F: Any, permute: Callable, p: dict, x: Any, heads: int) -> Any:
    b, t, c = x.shape
    d = c // heads
    h = F.layer_norm(x, (c,), p["ln1_w"], p["ln1_b"])
    qkv = h @ p["w_qkv"] + p["b_qkv"]

    def split(k: int) -> Any:
        part = qkv[:, :, k * c:(k + 1) * c].reshape(b, t, heads, d)
        return permute(part, (0, 2, 1, 3))
    att = F.scaled_dot_product_attention(split(0), split(1), split(2), is_causal=True)
    att = permute(att, (0, 2, 1, 3)).reshape(b, t, c)
    x = x + (att @ p["w_o"] + p["b_o"])
    h = F.layer_norm(x, (c,), p["ln2_w"], p["ln2_b"])
    m = F.gelu(h @ p["w_1"] + p["b_1"], approximate="tanh") @ p["w_2"] + p["b_2"]
    return x + m


def la_block_step(la: Any, params: dict, x: np.ndarray, heads: int = HEADS,
                  device: str = "cuda") -> Callable:
    p = {n: la.nn.Parameter(la.asarray(params[n], device=device)) for n in NAMES}
    xt = la.asarray(x, device=device)
    opt = la.optim.Adam(list(p.values()), lr=LR)

    def step() -> Any:
        with la.GradientTape() as tape:
            loss = la.mean(_block(la.nn.functional, la.permute_dims, p, xt, heads) ** 2)
        opt.apply_gradients(tape.gradient(loss, list(p.values())))
        la.sync()
        la.cuda.synchronize(device)
        return loss
    return step


def torch_block_step(torch: Any, params: dict, x: np.ndarray, compiled: bool,
                     heads: int = HEADS) -> Callable:
    p = {n: torch.tensor(params[n], device="cuda", requires_grad=True) for n in NAMES}
    xt = torch.tensor(x, device="cuda")
    opt = torch.optim.Adam(list(p.values()), lr=LR)

    def loss_of() -> Any:
        return (_block(torch.nn.functional, torch.permute, p, xt, heads) ** 2).mean()
    run = torch.compile(loss_of) if compiled else loss_of

    def step() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = run()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        return loss
    return step
