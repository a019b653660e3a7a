"""The four benchmark models written with lazyarray's PyTorch-style API, as a PyTorch user
moving their model over would write them (`la.nn` modules, `loss.backward()`,
`la.optim.AdamW`, `la.nn.utils.clip_grad_norm_`). `torch_models.py` is the same models in
PyTorch, line for line.
"""
from __future__ import annotations

from typing import Any

import numpy as np

import lazyarray as la

nn = la.nn
F = la.nn.functional


# ---- GPT ---------------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.heads, self.width = cfg.heads, cfg.width
        self.c_attn = nn.Linear(cfg.width, 3 * cfg.width)
        self.c_proj = nn.Linear(cfg.width, cfg.width)

    def qkv(self, x: Any) -> tuple:
        B, T, C = x.shape
        qkv = self.c_attn(x)
        split = (qkv[..., i * C:(i + 1) * C] for i in range(3))
        return tuple(t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in split)

    def merge(self, y: Any) -> Any:
        B, H, T, D = y.shape
        return self.c_proj(y.transpose(1, 2).reshape(B, T, H * D))

    def forward(self, x: Any) -> Any:
        q, k, v = self.qkv(x)
        return self.merge(F.scaled_dot_product_attention(q, k, v, is_causal=True))

    def cached(self, x: Any, pos: Any, cache: tuple, visible: Any) -> tuple:
        """Attention of x's T new positions, starting at `pos` (a 0-d int tensor), over
        the key/value cache (B, H, seq, D), whose rows pos..pos+T-1 it writes."""
        q, k, v = self.qkv(x)
        ck = la.dynamic_update_slice(cache[0], k, (0, 0, pos, 0))
        cv = la.dynamic_update_slice(cache[1], v, (0, 0, pos, 0))
        return self.merge(F.scaled_dot_product_attention(q, ck, cv, visible)), (ck, cv)


class MLP(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.width, 4 * cfg.width)
        self.c_proj = nn.Linear(4 * cfg.width, cfg.width)

    def forward(self, x: Any) -> Any:
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(cfg.width), CausalSelfAttention(cfg)
        self.ln_2, self.mlp = nn.LayerNorm(cfg.width), MLP(cfg)

    def forward(self, x: Any) -> Any:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))

    def cached(self, x: Any, pos: Any, cache: tuple, visible: Any) -> tuple:
        a, cache = self.attn.cached(self.ln_1(x), pos, cache, visible)
        x = x + a
        return x + self.mlp(self.ln_2(x)), cache


class GPT(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab, cfg.width)
        self.wpe = nn.Embedding(cfg.seq, cfg.width)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.layers)])
        self.ln_f = nn.LayerNorm(cfg.width)
        self.lm_head = nn.Linear(cfg.width, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight           # weight tying

    def forward(self, idx: Any, targets: Any = None, *, pos: Any = None,
                caches: Any = None) -> tuple:
        """(logits, loss) of idx's tokens; with `caches` (and `pos`), decoding with the
        key/value cache: (logits of the last token, the updated caches), see `decode`
        (the call users make, as a Hugging Face model takes `past_key_values`)."""
        if caches is not None:
            return self.decode(idx, pos, caches)
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(la.arange(T))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    def empty_cache(self, batch: int) -> list:
        c = self.cfg
        shape = (batch, c.heads, c.seq, c.width // c.heads)
        return [(la.zeros(shape), la.zeros(shape)) for _ in range(c.layers)]

    def decode(self, idx: Any, pos: Any, caches: list) -> tuple:
        """Logits of the last of idx's T tokens, which sit at positions pos..pos+T-1;
        the caches hold the keys and values of every earlier position."""
        T = idx.shape[1]
        positions = pos + la.arange(T)
        x = self.wte(idx) + self.wpe(positions)
        # query t sees cache rows up to its own position
        visible = la.arange(self.cfg.seq)[None, :] <= positions[:, None]
        new = []
        for block, cache in zip(self.h, caches):
            x, cache = block.cached(x, pos, cache, visible)
            new.append(cache)
        return self.lm_head(self.ln_f(x[:, -1])), new


def gpt_optimizer(model: GPT, cfg: Any) -> Any:
    """AdamW with weight decay on the 2-D parameters (matrices, embeddings) only."""
    params = [p for p in model.parameters()]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return la.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr,
                          betas=(0.9, 0.95))


def gpt_train_step(model: GPT, opt: Any, cfg: Any) -> Any:
    """step(tokens, targets) -> the loss as a float: zero_grad, forward, backward,
    clip_grad_norm_, step, loss.item()."""
    def step(tokens: Any, targets: Any) -> float:
        opt.zero_grad()
        _, loss = model(tokens, targets)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        opt.step()
        return loss.item()
    return step


def greedy_generate(model: GPT, prompt: Any, new_tokens: int) -> list:
    """Greedy decoding from a Python loop: the prompt in one call, then one call per new
    token, each reading its token (as a loop that checks for an end token does)."""
    with la.no_grad():
        return _greedy(model, prompt, new_tokens)


def _greedy(model: GPT, prompt: Any, new_tokens: int) -> list:
    caches = model.empty_cache(prompt.shape[0])
    logits, caches = model(prompt, pos=la.asarray(np.int64(0)), caches=caches)
    token = logits.argmax(-1)
    out = [token.numpy()]
    for i in range(prompt.shape[1], prompt.shape[1] + new_tokens - 1):
        logits, caches = model(token[:, None], pos=la.asarray(np.int64(i)), caches=caches)
        token = logits.argmax(-1)
        out.append(token.numpy())
    return np.stack(out, 1).tolist()


def greedy_generate_loop(model: GPT, prompt: Any, new_tokens: int) -> list:
    """The same decoding with the token loop as one `la.fori_loop` (one HLO while): the
    prompt in one call, then every new token inside one compiled loop."""
    with la.no_grad():
        return _greedy_loop(model, prompt, new_tokens)


def _greedy_loop(model: GPT, prompt: Any, new_tokens: int) -> list:
    B, P = prompt.shape
    caches = model.empty_cache(B)
    logits, caches = model(prompt, pos=la.asarray(np.int64(0)), caches=caches)
    tokens = la.zeros((B, new_tokens), dtype=la.int64)
    first = logits.argmax(-1)
    tokens = la.dynamic_update_slice(tokens, first[:, None], (0, 0))

    def body(i: Any, state: tuple) -> tuple:
        token, caches, tokens = state
        logits, caches = model(token[:, None], pos=P + i - 1, caches=caches)
        token = logits.argmax(-1)
        return token, caches, la.dynamic_update_slice(tokens, token[:, None], (0, i))

    _, _, tokens = la.fori_loop(1, new_tokens, body, (first, caches, tokens))
    return tokens.numpy().tolist()


# ---- BERT-style encoder ------------------------------------------------------------------

class EncoderLayer(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.out = nn.Linear(cfg.width, cfg.width)
        self.ln_1 = nn.LayerNorm(cfg.width, eps=1e-12)
        self.fc_1 = nn.Linear(cfg.width, 4 * cfg.width)
        self.fc_2 = nn.Linear(4 * cfg.width, cfg.width)
        self.ln_2 = nn.LayerNorm(cfg.width, eps=1e-12)

    def forward(self, x: Any, mask: Any) -> Any:
        B, T, C = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], mask)
        x = self.ln_1(x + self.out(y.transpose(1, 2).reshape(B, T, C)))
        return self.ln_2(x + self.fc_2(F.gelu(self.fc_1(x))))


class Encoder(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab, cfg.width)
        self.pos = nn.Embedding(cfg.seq, cfg.width)
        self.ln = nn.LayerNorm(cfg.width, eps=1e-12)
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.layers)])

    def forward(self, ids: Any, attention_mask: Any) -> Any:
        """Sentence embeddings: the mean of the last layer over each sentence's tokens."""
        T = ids.shape[1]
        x = self.ln(self.tok(ids) + self.pos(la.arange(T)))
        mask = attention_mask[:, None, None, :]          # (B, 1, 1, T): keys to attend
        for layer in self.layers:
            x = layer(x, mask)
        m = attention_mask[..., None].float()
        return (x * m).sum(1) / m.sum(1)


def encode(model: Encoder) -> Any:
    def run(ids: Any, mask: Any) -> np.ndarray:
        with la.no_grad():
            return model(ids, mask).numpy()
    return run


# ---- ResNet-style CNN ----------------------------------------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x: Any) -> Any:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, cfg: Any) -> None:
        super().__init__()
        c0 = cfg.channels[0]
        self.conv1 = nn.Conv2d(3, c0, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c0)
        blocks, cin = [], c0
        for i, c in enumerate(cfg.channels):
            for j in range(cfg.blocks):
                blocks.append(BasicBlock(cin, c, 2 if i > 0 and j == 0 else 1))
                cin = c
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, cfg.classes)

    def forward(self, x: Any) -> Any:
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        return self.fc(out.mean((2, 3)))


def cnn_train_step(model: ResNet, cfg: Any) -> Any:
    opt = la.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)

    def step(x: Any, y: Any) -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()
    return step


# ---- weights ----------------------------------------------------------------------------

def shapes(model: nn.Module) -> dict:
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def load(model: nn.Module, weights: dict) -> nn.Module:
    """Copy the named arrays into the model's parameters (a tied weight once)."""
    for name, p in model.named_parameters():
        p.copy_(la.asarray(weights[name]))
    return model
