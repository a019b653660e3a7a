"""Greedy generation with a small transformer decoder and a fixed-size KV cache, compiled
once for any number of new tokens.

Run: python examples/generate.py [--new-tokens N] [--prompt 3 14 15 9] [--loop python]

Each decoding step has the same shapes whatever the position: the key/value caches hold
`CONTEXT` positions, the new token's keys and values are written at the position with
`la.dynamic_update_slice`, and positions after it are masked out. The position is a
runtime value, so every step -- the prompt's tokens and the new ones -- is the same
computation (XLA users get the same effect from padded, static shapes).

`--loop compiled` (the default): the whole token loop is one `la.fori_loop` -- an HLO
`while` whose trip count is a runtime value -- so one program, compiled once, runs every
step for any prompt length and any number of new tokens, with one sync at the end.
`--loop python`: a Python loop calls the decoder (an `la.nn.Module`, as a PyTorch user
writes one) once per token under `la.no_grad()`. The first call runs its forward and is
remembered; each later call, whose weights and argument types are the same, is recorded
as one node that replays it (module-call reuse, docs/module_reuse.md), so a token costs
the call, one sync of a small graph and the compiled step program.
The tokens are checked against the same decoder written in NumPy.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import lazyarray as la

VOCAB, WIDTH, HEADS, LAYERS, CONTEXT = 96, 64, 4, 2, 64
HEAD = WIDTH // HEADS


def make_weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    weights = {"embed": rng.standard_normal((VOCAB, WIDTH)).astype(np.float32),
               "pos": (rng.standard_normal((CONTEXT, WIDTH)) * 0.1).astype(np.float32)}
    for i in range(LAYERS):
        for name in ("q", "k", "v", "o"):
            weights[f"{name}{i}"] = w(WIDTH, WIDTH)
        weights[f"up{i}"], weights[f"down{i}"] = w(WIDTH, 4 * WIDTH), w(4 * WIDTH, WIDTH)
    weights["head"] = w(WIDTH, VOCAB)
    return weights


# ---- lazyarray: one decoding step, the same program at every position ------------------

def la_weights(weights: dict) -> dict:
    """The weights as lazyarray tensors, uploaded once (as a model's parameters live on
    its device): the generate functions take these (NumPy arrays work too, uploaded at
    each call)."""
    return {k: la.asarray(v) for k, v in weights.items()}


def _norm(x: Any) -> Any:
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    return d / la.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)


def la_step(w: dict, token: Any, pos: Any, caches: list) -> tuple:
    """token: int64 (1,); pos: int64 0-d tensor; caches: per layer (k, v) of
    (HEADS, CONTEXT, HEAD). -> (next token, updated caches)."""
    x = w["embed"][token] + la.dynamic_slice(w["pos"], (pos, 0), (1, WIDTH))
    visible = la.arange(CONTEXT) <= pos                     # positions written so far
    new_caches = []
    for i, (ck, cv) in enumerate(caches):
        h = _norm(x)
        q, k, v = (la.permute_dims((h @ w[f"{n}{i}"]).reshape(1, HEADS, HEAD), (1, 0, 2))
                   for n in ("q", "k", "v"))
        ck = la.dynamic_update_slice(ck, k, (0, pos, 0))
        cv = la.dynamic_update_slice(cv, v, (0, pos, 0))
        scores = (q @ la.permute_dims(ck, (0, 2, 1))) * (1.0 / np.sqrt(HEAD))
        scores = la.where(visible, scores, -1e9)
        p = la.exp(scores - scores.max(axis=-1, keepdims=True))
        p = p / p.sum(axis=-1, keepdims=True)
        att = la.permute_dims(p @ cv, (1, 0, 2)).reshape(1, WIDTH)
        x = x + att @ w[f"o{i}"]
        x = x + la.maximum(_norm(x) @ w[f"up{i}"], 0.0) @ w[f"down{i}"]
        new_caches.append((ck, cv))
    logits = _norm(x) @ w["head"]
    return la.argmax(logits, axis=-1), new_caches


class Decoder(la.nn.Module):
    """The decoder as a model: its weights (lazyarray tensors) a dict attribute, one
    decoding step per call (`la_step`), as a PyTorch user writes a module."""

    def __init__(self, weights: dict) -> None:
        super().__init__()
        self.w = weights

    def forward(self, token: Any, pos: Any, caches: list) -> tuple:
        return la_step(self.w, token, pos, caches)


def la_generate(weights: dict, prompt: list, new_tokens: int) -> tuple:
    """(generated tokens, programs compiled while generating)."""
    decoder = _decoder(weights)
    caches = [(la.zeros((HEADS, CONTEXT, HEAD)), la.zeros((HEADS, CONTEXT, HEAD)))
              for _ in range(LAYERS)]
    la.sync()                 # (else the first step's program, zeroing them, is another)
    before = la.debug.metrics().cache_misses
    out: list = []
    token = la.asarray(np.array([prompt[0]], np.int64))
    with la.no_grad():
        for pos in range(len(prompt) + new_tokens - 1):
            nxt, caches = decoder(token, la.asarray(np.int64(pos)), caches)
            la.sync()
            if pos + 1 < len(prompt):
                token = la.asarray(np.array([prompt[pos + 1]], np.int64))
            else:
                token = nxt
                out.append(int(nxt.numpy()[0]))
    return out, la.debug.metrics().cache_misses - before


_DECODER: list = [None, None]       # (weights, their decoder): the last made


def _decoder(weights: dict) -> Decoder:
    """The decoder of these weights, made once (as a program keeps its model, its
    weights uploaded once; no copy for weights that are tensors already)."""
    if _DECODER[0] is not weights:
        _DECODER[:] = [weights, Decoder(la_weights(weights))]
    return _DECODER[1]


def la_generate_compiled(weights: dict, prompt: list, new_tokens: int) -> tuple:
    """(generated tokens, programs compiled while generating): the token loop is one
    `la.fori_loop`; the prompt is padded to CONTEXT and its length is a runtime value."""
    w = la_weights(weights)                  # no copy for weights that are tensors already
    before = la.debug.metrics().cache_misses
    padded = np.zeros(CONTEXT, np.int64)
    padded[:len(prompt)] = prompt
    prompt_t, plen = la.asarray(padded), la.asarray(np.int32(len(prompt)))
    caches = [(la.zeros((HEADS, CONTEXT, HEAD)), la.zeros((HEADS, CONTEXT, HEAD)))
              for _ in range(LAYERS)]        # zeroed inside the loop's program

    def step(pos: Any, state: tuple) -> tuple:
        token, caches, seq = state
        nxt, caches = la_step(w, token, pos, caches)
        # inside the prompt the next input is the prompt's token, after it the prediction
        fed = la.dynamic_slice(prompt_t, (pos + 1,), (1,))
        token = la.where(pos + 1 < plen, fed, nxt)
        seq = la.dynamic_update_slice(seq, token, (pos + 1,))
        return token, caches, seq

    steps = len(prompt) + new_tokens - 1
    state = (prompt_t[:1], caches, prompt_t)
    _, _, seq = la.fori_loop(0, steps, step, state)
    tokens = seq.numpy()[len(prompt):len(prompt) + new_tokens].tolist()
    return tokens, la.debug.metrics().cache_misses - before


# ---- the same decoder in NumPy ------------------------------------------------------------

def _np_norm(x: np.ndarray) -> np.ndarray:
    d = x - x.mean(axis=-1, keepdims=True)
    return d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5)


def np_generate(w: dict, prompt: list, new_tokens: int) -> list:
    caches = [(np.zeros((HEADS, CONTEXT, HEAD), np.float32),
               np.zeros((HEADS, CONTEXT, HEAD), np.float32)) for _ in range(LAYERS)]
    out, token = [], prompt[0]
    for pos in range(len(prompt) + new_tokens - 1):
        x = w["embed"][[token]] + w["pos"][pos:pos + 1]
        for i, (ck, cv) in enumerate(caches):
            h = _np_norm(x)
            q, k, v = ((h @ w[f"{n}{i}"]).reshape(1, HEADS, HEAD).transpose(1, 0, 2)
                       for n in ("q", "k", "v"))
            ck[:, pos:pos + 1], cv[:, pos:pos + 1] = k, v
            scores = (q @ ck.transpose(0, 2, 1)) * np.float32(1.0 / np.sqrt(HEAD))
            scores = np.where(np.arange(CONTEXT) <= pos, scores, np.float32(-1e9))
            p = np.exp(scores - scores.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            x = x + (p @ cv).transpose(1, 0, 2).reshape(1, WIDTH) @ w[f"o{i}"]
            x = x + np.maximum(_np_norm(x) @ w[f"up{i}"], 0) @ w[f"down{i}"]
        nxt = int(np.argmax(_np_norm(x) @ w["head"], axis=-1)[0])
        if pos + 1 < len(prompt):
            token = prompt[pos + 1]
        else:
            token = nxt
            out.append(nxt)
    return out


def main(argv: Any = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--prompt", type=int, nargs="+", default=[3, 14, 15, 9, 26])
    p.add_argument("--loop", choices=("compiled", "python"), default="compiled",
                   help="compiled: the token loop is one la.fori_loop (one program, one "
                        "sync); python: a Python loop runs the step program per token")
    p.add_argument("--repeat", type=int, default=5,
                   help="timed generations after the first (the tokens/s are medians)")
    args = p.parse_args(argv)
    if len(args.prompt) + args.new_tokens > CONTEXT:
        p.error(f"prompt + new tokens must fit the cache ({CONTEXT} positions)")
    weights = make_weights()
    generate = la_generate_compiled if args.loop == "compiled" else la_generate
    t0 = time.perf_counter()
    w = la_weights(weights)
    tokens, programs = generate(w, args.prompt, args.new_tokens)
    first_s = time.perf_counter() - t0
    # steady state: the same generation again, its program a cache hit (medians)
    la_s = _median_seconds(lambda: generate(w, args.prompt, args.new_tokens), args.repeat)
    reference = np_generate(weights, args.prompt, args.new_tokens)
    np_s = _median_seconds(lambda: np_generate(weights, args.prompt, args.new_tokens),
                           args.repeat)
    print(f"prompt {args.prompt} -> {tokens}")
    how = "in one la.fori_loop" if args.loop == "compiled" else "from a Python loop"
    steps = len(args.prompt) + args.new_tokens - 1
    print(f"{steps} decoding steps ({how}) ran {programs} "
          f"compiled program{'s' if programs != 1 else ''} (one program for any number of "
          "new tokens)")
    rate = lambda s: args.new_tokens / s
    print(f"first call {first_s:.2f} s (compile included); then lazyarray "
          f"{rate(la_s):.0f} tokens/s, NumPy {rate(np_s):.0f} tokens/s "
          f"({np_s / la_s:.1f}x; medians of {args.repeat}, the prompt's steps included); "
          f"tokens {'match' if tokens == reference else 'DIFFER from'} the NumPy decoder")
    return {"tokens": tokens, "reference": reference, "compiles": programs, "loop": args.loop,
            "tokens_per_s": rate(la_s), "numpy_tokens_per_s": rate(np_s)}


def _median_seconds(fn: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


if __name__ == "__main__":
    main()
