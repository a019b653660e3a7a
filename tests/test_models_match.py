"""The benchmark models (examples/models) compute what PyTorch computes: on the same
weights and batches, the GPT's and the CNN's losses over 20 training steps, the encoder's
sentence embeddings and greedy decoding's tokens (Python loop and `la.fori_loop`) agree
with PyTorch's within float32 tolerance. Small sizes (`config.small`), so it is quick."""
from __future__ import annotations

import os
import sys
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models are compared with PyTorch's")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from models import config as C                                   # noqa: E402
from models import lazyarray_models as LM                         # noqa: E402
from models import torch_models as TM                             # noqa: E402

import lazyarray as la                                            # noqa: E402

STEPS = 20


def _pair(la_cls, torch_cls, cfg):
    m = la_cls(cfg)
    weights = C.weights_for(LM.shapes(m))
    t = torch_cls(cfg)
    assert LM.shapes(m) == {n: tuple(p.shape) for n, p in t.named_parameters()}
    return LM.load(m, weights), TM.load(t, weights)


def test_gpt_training_losses_match_pytorch():
    # a larger learning rate over two batches in turn: the loss falls within 20 steps
    # (at 1e-2 the last steps amplified rounding differences to 1e-3 in some runs)
    cfg = replace(C.small(C.GPTConfig()), lr=3e-3)
    m, t = _pair(LM.GPT, TM.GPT, cfg)
    la_step = LM.gpt_train_step(m, LM.gpt_optimizer(m, cfg), cfg)
    t_step = TM.gpt_train_step(t, TM.gpt_optimizer(t, cfg), cfg)
    got, want = [], []
    for x, y in C.gpt_batches(cfg, 2) * (STEPS // 2):
        got.append(la_step(la.asarray(x), la.asarray(y)))
        want.append(t_step(torch.from_numpy(x), torch.from_numpy(y)))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    assert want[-1] < want[0] - 0.05            # it trained (the step is not a no-op)
    for (name, p), q in zip(m.named_parameters(), t.parameters()):
        got_p, want_p = p.numpy(), q.detach().numpy()
        if name.endswith("c_attn.bias"):
            # the keys' bias adds the same q.b to every score of a query: its gradient is
            # 0 in exact arithmetic, and Adam scales each side's rounding noise up to a
            # full step, so only the query and value parts are compared
            keys = slice(cfg.width, 2 * cfg.width)
            got_p[keys] = want_p[keys] = 0
        np.testing.assert_allclose(got_p, want_p, rtol=1e-3, atol=2e-5, err_msg=name)


def test_cnn_training_losses_match_pytorch():
    cfg = C.small(C.CNNConfig())
    m, t = _pair(LM.ResNet, TM.ResNet, cfg)
    la_step, t_step = LM.cnn_train_step(m, cfg), TM.cnn_train_step(t, cfg)
    got, want = [], []
    for x, y in C.cnn_batches(cfg, STEPS):
        got.append(la_step(la.asarray(x), la.asarray(y)))
        want.append(t_step(torch.from_numpy(x), torch.from_numpy(y)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # BatchNorm's running statistics follow too
    for (name, b), (_, c) in zip(m.named_buffers(), t.named_buffers()):
        np.testing.assert_allclose(b.numpy(), c.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


def test_encoder_embeddings_match_pytorch():
    cfg = C.small(C.EncoderConfig())
    m, t = _pair(LM.Encoder, TM.Encoder, cfg)
    ids, mask = C.encoder_batch(cfg)
    assert not mask.all()                       # the padding mask matters
    got = LM.encode(m.eval())(la.asarray(ids), la.asarray(mask))
    want = TM.encode(t.eval())(torch.from_numpy(ids), torch.from_numpy(mask))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_greedy_decoding_matches_pytorch():
    cfg = C.small(C.DecodeConfig())
    m, t = _pair(LM.GPT, TM.GPT, cfg.gpt)
    prompt = C.decode_prompt(cfg)
    want = TM.greedy_generate(t, torch.from_numpy(prompt), cfg.new_tokens)
    assert LM.greedy_generate(m, la.asarray(prompt), cfg.new_tokens) == want
    assert LM.greedy_generate_loop(m, la.asarray(prompt), cfg.new_tokens) == want
    # the cached decoding is the model's own forward pass: the last prompt position's
    # logits equal the uncached forward's
    with la.no_grad():
        full, _ = m(la.asarray(prompt))
        cached, _ = m.decode(la.asarray(prompt), la.asarray(np.int64(0)),
                             m.empty_cache(cfg.batch))
    np.testing.assert_allclose(cached.numpy(), full.numpy()[:, -1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", ["gpt", "encoder", "cnn"])
def test_jax_versions_match_pytorch(model):
    """The benchmark's JAX versions (a third writing of the models) agree with PyTorch's
    too, so bench_models compares the same computation in every column."""
    pytest.importorskip("jax", reason="the JAX versions need JAX")
    import jax.numpy as jnp
    from models import jax_models as JM
    if model == "encoder":
        cfg = C.small(C.EncoderConfig())
        _, t = _pair(LM.Encoder, TM.Encoder, cfg)
        ids, mask = C.encoder_batch(cfg)
        weights = {n: p.detach().numpy() for n, p in t.named_parameters()}
        want = TM.encode(t.eval())(torch.from_numpy(ids), torch.from_numpy(mask))
        got = JM.encode(weights, cfg)(jnp.asarray(ids), jnp.asarray(mask))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        return
    if model == "gpt":
        cfg = replace(C.small(C.GPTConfig()), lr=1e-2)
        _, t = _pair(LM.GPT, TM.GPT, cfg)
        t_step = TM.gpt_train_step(t, TM.gpt_optimizer(t, cfg), cfg)
        batches = C.gpt_batches(cfg, 2) * 3
    else:
        cfg = C.small(C.CNNConfig())
        _, t = _pair(LM.ResNet, TM.ResNet, cfg)
        t_step = TM.cnn_train_step(t, cfg)
        batches = C.cnn_batches(cfg, 6)
    weights = {n: p.detach().numpy().copy() for n, p in t.named_parameters()}
    j_step = (JM.gpt_train_step if model == "gpt" else JM.cnn_train_step)(weights, cfg)
    got = [j_step(jnp.asarray(x), jnp.asarray(y)) for x, y in batches]
    want = [t_step(torch.from_numpy(x), torch.from_numpy(y)) for x, y in batches]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
