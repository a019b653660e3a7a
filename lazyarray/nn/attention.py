"""`MultiheadAttention`, with PyTorch's conventions throughout.

- Inputs are (L, N, E) unless `batch_first=True` (then (N, L, E)); unbatched (L, E) too.
- A boolean `attn_mask` or `key_padding_mask` marks with True the positions that may NOT
  be attended (the opposite of `scaled_dot_product_attention`'s boolean mask, as in
  PyTorch); a float mask is added to the scores.
- `attn_mask` is (L, S) or (N * num_heads, L, S); `key_padding_mask` is (N, S).
- `forward` returns (output, weights): the attention weights averaged over the heads
  (or per head with `average_attn_weights=False`), None with `need_weights=False`.
- The parameters are PyTorch's: `in_proj_weight` (3E, E), `in_proj_bias` (3E,), and
  `out_proj` (a Linear), so a state_dict moves between the two unchanged.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from .. import api
from ..compiler.hlo import dtypes as D
from ..tensor import Tensor
from . import functional as F
from . import init
from .layers import Linear
from .module import Module, Parameter


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False,
                 kdim: Optional[int] = None, vdim: Optional[int] = None,
                 batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim {embed_dim} must be divisible by "
                             f"num_heads {num_heads}")
        if add_bias_kv or add_zero_attn or (kdim not in (None, embed_dim)) or \
                (vdim not in (None, embed_dim)):
            raise ValueError("MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim "
                             "other than embed_dim are not supported")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.head_dim, self.batch_first = embed_dim // num_heads, batch_first
        self.in_proj_weight = Parameter(init.xavier_uniform((3 * embed_dim, embed_dim),
                                                            dtype=dtype, device=device))
        self.in_proj_bias = Parameter(api.zeros((3 * embed_dim,), dtype=dtype, device=device)) \
            if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias, device, dtype)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query: Tensor, key: Optional[Tensor] = None,
                value: Optional[Tensor] = None, key_padding_mask: Optional[Tensor] = None,
                need_weights: bool = True, attn_mask: Optional[Tensor] = None,
                average_attn_weights: bool = True, is_causal: bool = False) -> tuple:
        key = query if key is None else key
        value = key if value is None else value
        unbatched = query.ndim == 2
        q, k, v = (self._batch_major(t, name, unbatched) for t, name in
                   ((query, "query"), (key, "key"), (value, "value")))
        n, length, _ = q.shape
        s = k.shape[1]
        qp, kp, vp = self._project(q, k, v)
        scores = (qp @ kp.mT) * (1.0 / math.sqrt(self.head_dim))       # (N, H, L, S)
        scores = self._masked(scores, attn_mask, key_padding_mask, is_causal, n, length, s)
        weights = F.softmax(scores, -1)
        if self.training and self.dropout > 0:
            weights = F.dropout(weights, self.dropout, True)
        out = (weights @ vp).permute(0, 2, 1, 3).reshape(n, length, self.embed_dim)
        out = self.out_proj(out)
        out = out[0] if unbatched else (out if self.batch_first else out.permute(1, 0, 2))
        if not need_weights:
            return out, None
        w = weights.mean(axis=1) if average_attn_weights else weights
        return out, (w[0] if unbatched else w)

    # ---- the steps ---------------------------------------------------------------------

    def _batch_major(self, t: Tensor, name: str, unbatched: bool) -> Tensor:
        """(N, L, E) from the caller's layout, with a clear error for the wrong one."""
        want = 2 if unbatched else 3
        if t.ndim != want or t.shape[-1] != self.embed_dim:
            layout = "(L, E)" if unbatched else ("(N, L, E)" if self.batch_first else "(L, N, E)")
            raise ValueError(f"MultiheadAttention: {name} must be {layout} with "
                             f"E = {self.embed_dim}, got shape {t.shape}")
        if unbatched:
            return t.reshape(1, *t.shape)
        return t if self.batch_first else t.permute(1, 0, 2)

    def _project(self, q: Tensor, k: Tensor, v: Tensor) -> tuple:
        e = self.embed_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        parts = []
        for i, x in enumerate((q, k, v)):
            bias = None if b is None else b[i * e:(i + 1) * e]
            y = F.linear(x, w[i * e:(i + 1) * e], bias)
            n, length, _ = y.shape
            parts.append(y.reshape(n, length, self.num_heads, self.head_dim).permute(0, 2, 1, 3))
        return tuple(parts)

    def _masked(self, scores: Tensor, attn_mask: Any, key_padding_mask: Any, is_causal: bool,
                n: int, length: int, s: int) -> Tensor:
        h = self.num_heads
        if is_causal and attn_mask is None:
            attn_mask = api.triu(api.ones((length, s), dtype=D.bool_), k=1)
        if attn_mask is not None:
            m = _check_mask("attn_mask", attn_mask, [(length, s), (n * h, length, s)], scores)
            if m.ndim == 3:
                m = m.reshape(n, h, length, s)
            scores = _apply_mask(scores, m)
        if key_padding_mask is not None:
            m = _check_mask("key_padding_mask", key_padding_mask, [(n, s)], scores)
            scores = _apply_mask(scores, m.reshape(n, 1, 1, s))
        return scores


def _check_mask(name: str, mask: Any, shapes: list, scores: Tensor) -> Tensor:
    mask = mask if type(mask) is Tensor else api.asarray(mask, device=scores.device)
    if mask.dtype is not D.bool_ and not mask.dtype.is_float:
        raise TypeError(f"MultiheadAttention: {name} must be bool (True = masked out) or "
                        f"float (added to the scores), got {mask.dtype.name}")
    if mask.shape not in shapes:
        raise ValueError(f"MultiheadAttention: {name} has shape {mask.shape}; expected "
                         + " or ".join(str(sh) for sh in shapes))
    return mask


def _apply_mask(scores: Tensor, mask: Tensor) -> Tensor:
    if mask.dtype is D.bool_:
        return api.where(mask, -math.inf, scores)
    return scores + mask.astype(scores.dtype)


__all__ = ["MultiheadAttention"]
