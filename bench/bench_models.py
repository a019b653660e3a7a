"""Issue 29: whole models, each written once per framework (examples/models) with the same
weights and batches, measured in the same run: lazyarray, PyTorch eager, torch.compile and
jax.jit (where examples/models/jax_models.py has the model).

- GPT training step: 4 layers, width 256, 4 heads, sequence 128, batch 8, vocabulary 512;
  zero_grad, forward, loss.backward(), clip_grad_norm_(1.0), AdamW step, loss.item().
- encoder inference: BERT-style, 6 layers, width 384, 12 heads, sequence 128, batch 8,
  padding mask, mean pooling.
- CNN training step: ResNet-style, 3 stages of 2 basic blocks (16/32/64 channels),
  BatchNorm, ReLU, global average pooling, 32x32x3, batch 32, SGD with momentum.
- greedy decoding: the GPT generating 64 tokens after a 16-token prompt with a key/value
  cache, a Python loop calling the model per token (torch.compile: the model's decode
  compiled); beside it lazyarray's compiled-loop form (`la.fori_loop`).

Each row records the first call (compile included) as `first_step_s` and the number of
programs lazyarray compiled (or graphs torch.compile captured) as `compiles`. The
`interleaved` tests run every framework in turn, round by round, so that a loaded
machine's drift falls on all alike (their medians are the ratios to quote).

    python -m pytest bench/bench_models.py --benchmark-only --benchmark-json=bench/results/models.json
    python bench/report.py bench/results/models.json
"""
from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import time
from typing import Any, Callable, Iterator

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

from peers import installed                                      # noqa: E402
from models import config as C                                   # noqa: E402

MODELS = {
    "gpt": "GPT training step",
    "encoder": "encoder inference",
    "cnn": "CNN training step",
    "decode": "greedy decoding, 64 tokens",
}
LA_LOOP = "lazyarray (la.fori_loop)"
FRAMEWORKS = {
    "gpt": ["lazyarray", "torch", "torch.compile", "jax.jit"],
    "encoder": ["lazyarray", "torch", "torch.compile", "jax.jit"],
    "cnn": ["lazyarray", "torch", "torch.compile", "jax.jit"],
    "decode": ["lazyarray", LA_LOOP, "torch", "torch.compile"],
}
BATCHES = 4         # training steps cycle over this many batches (same shapes)


def _cycle(batches: list, put: Callable) -> Callable:
    it = itertools.cycle([tuple(put(a) for a in b) for b in batches])
    return lambda: next(it)


def _weights(model: str) -> dict:
    from models import lazyarray_models as LM
    build = {"gpt": LM.GPT, "decode": LM.GPT, "encoder": LM.Encoder, "cnn": LM.ResNet}[model]
    cfg = _config(model)
    return C.weights_for(LM.shapes(build(cfg.gpt if model == "decode" else cfg)))


def _config(model: str) -> Any:
    return {"gpt": C.GPTConfig(), "encoder": C.EncoderConfig(), "cnn": C.CNNConfig(),
            "decode": C.DecodeConfig()}[model]


# ---- one call of each model by each framework -------------------------------------------

def la_runner(model: str, loop: bool = False) -> Callable[[], Any]:
    """One lazyarray step (training), inference or generation of `model`."""
    import lazyarray as la
    from models import lazyarray_models as LM
    cfg, w = _config(model), _weights(model)
    if model == "gpt":
        m = LM.load(LM.GPT(cfg), w)
        step, batch = LM.gpt_train_step(m, LM.gpt_optimizer(m, cfg), cfg), \
            _cycle(C.gpt_batches(cfg, BATCHES), la.asarray)
        return lambda: step(*batch())
    if model == "cnn":
        m = LM.load(LM.ResNet(cfg), w)
        step, batch = LM.cnn_train_step(m, cfg), _cycle(C.cnn_batches(cfg, BATCHES), la.asarray)
        return lambda: step(*batch())
    if model == "encoder":
        run = LM.encode(LM.load(LM.Encoder(cfg), w).eval())
        ids, mask = (la.asarray(a) for a in C.encoder_batch(cfg))
        return lambda: run(ids, mask)
    m = LM.load(LM.GPT(cfg.gpt), w)
    prompt = la.asarray(C.decode_prompt(cfg))
    gen = LM.greedy_generate_loop if loop else LM.greedy_generate
    return lambda: gen(m, prompt, cfg.new_tokens)


def torch_runner(model: str, compiled: bool) -> Callable[[], Any]:
    import torch
    from models import torch_models as TM
    torch.set_grad_enabled(True)
    cfg, w = _config(model), _weights(model)
    wrap = torch.compile if compiled else (lambda f: f)
    if model == "gpt":
        m = TM.load(TM.GPT(cfg), w)
        step = wrap(TM.gpt_train_step(m, TM.gpt_optimizer(m, cfg), cfg))
        batch = _cycle(C.gpt_batches(cfg, BATCHES), torch.from_numpy)
        return lambda: step(*batch())
    if model == "cnn":
        m = TM.load(TM.ResNet(cfg), w)
        step = wrap(TM.cnn_train_step(m, cfg))
        batch = _cycle(C.cnn_batches(cfg, BATCHES), torch.from_numpy)
        return lambda: step(*batch())
    if model == "encoder":
        m = TM.load(TM.Encoder(cfg), w).eval()
        run = TM.encode(wrap(m) if compiled else m)
        ids, mask = (torch.from_numpy(a) for a in C.encoder_batch(cfg))
        return lambda: run(ids, mask)
    m = TM.load(TM.GPT(cfg.gpt), w)
    if compiled:
        m.decode = torch.compile(m.decode)
    prompt = torch.from_numpy(C.decode_prompt(cfg))
    return lambda: TM.greedy_generate(m, prompt, cfg.new_tokens)


def jax_runner(model: str) -> Callable[[], Any]:
    import jax.numpy as jnp
    from models import jax_models as JM
    cfg, w = _config(model), _weights(model)
    if model == "encoder":
        run = JM.encode(w, cfg)
        ids, mask = (jnp.asarray(a) for a in C.encoder_batch(cfg))
        return lambda: run(ids, mask)
    step = (JM.gpt_train_step if model == "gpt" else JM.cnn_train_step)(w, cfg)
    batches = C.gpt_batches(cfg, BATCHES) if model == "gpt" else C.cnn_batches(cfg, BATCHES)
    batch = _cycle(batches, jnp.asarray)
    return lambda: step(*batch())


def _available(framework: str) -> bool:
    if framework.startswith("lazyarray"):
        return True
    return installed("jax" if framework == "jax.jit" else "torch")


def _compiles(framework: str) -> int:
    """Programs compiled so far: lazyarray's compile count, torch.compile's captured
    graphs; 0 for the rest (eager, or counted by JAX's own cache)."""
    if framework.startswith("lazyarray"):
        import lazyarray as la
        return la.debug.metrics().compiles
    if framework == "torch.compile":
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    return 0


@contextlib.contextmanager
def _cold(framework: str) -> Iterator[None]:
    """lazyarray's first call with its disk cache off: the compile is timed, not read back
    from an earlier run's cache."""
    if not framework.startswith("lazyarray"):
        yield
        return
    import lazyarray as la
    saved, la.config.cache_dir = la.config.cache_dir, "off"
    try:
        yield
    finally:
        la.config.cache_dir = saved


_RUNNERS: dict = {}


def runner(model: str, framework: str) -> tuple:
    """(call, first call's seconds, compiles during the first call), made once per process:
    the interleaved test reuses the runners (and compiles) of the per-framework rows."""
    key = (model, framework)
    if key not in _RUNNERS:
        if framework.startswith("lazyarray"):
            import lazyarray as la
            la.runtime.clear_caches()       # the first step compiles (no earlier program)
            call = la_runner(model, loop=framework == LA_LOOP)
            la.sync()
        elif framework == "jax.jit":
            call = jax_runner(model)
        else:
            call = torch_runner(model, framework == "torch.compile")
        before = _compiles(framework)
        with _cold(framework):
            t0 = time.perf_counter()
            call()
            first = time.perf_counter() - t0
        _RUNNERS[key] = (call, first, _compiles(framework) - before)
    return _RUNNERS[key]


# ---- the rows ---------------------------------------------------------------------------

CASES = [(m, f) for m in MODELS for f in FRAMEWORKS[m]]


@pytest.mark.parametrize("model,framework", CASES, ids=[f"{m}-{f}" for m, f in CASES])
def test_model(benchmark, model, framework):
    if not _available(framework):
        pytest.skip(f"{framework} is not installed")
    call, first, compiles = runner(model, framework)
    call()                                  # the second call: shapes seen, caches warm
    before = _compiles(framework)
    benchmark.group = MODELS[model]
    benchmark.extra_info.update(framework=framework, first_step_s=first, compiles=compiles)
    benchmark.pedantic(call, rounds=5, warmup_rounds=1)
    again = _compiles(framework) - before
    benchmark.extra_info["compiles_after_first"] = again
    if model == "decode":
        benchmark.extra_info["tokens_per_s"] = \
            _config(model).new_tokens / benchmark.stats.stats.median
    if framework.startswith("lazyarray"):
        assert again == 0                   # every timed call was a cache hit


INTERLEAVED_ROUNDS = 4      # rounds of: each framework one untimed call, then TIMED_PER_ROUND
TIMED_PER_ROUND = 1


@pytest.mark.parametrize("model", list(MODELS))
def test_interleaved(benchmark, model):
    """Every framework's call in turn, round by round (the order rotated each round):
    the ratios a loaded machine's drift does not bias. Medians go to
    `extra_info["interleaved"]` (report.py's second table)."""
    from bench_fused import interleaved_rounds
    calls = {f: runner(model, f)[0] for f in FRAMEWORKS[model] if _available(f)}
    if len(calls) < 2:
        pytest.skip("no peer (torch, jax) is installed")
    for call in calls.values():     # steady state: the per-framework rows of other models
        call()                      # ran since (lazyarray's cleared its caches to time a
        call()                      # first step), so this model's programs load again here
    times: dict = {}
    benchmark.group = MODELS[model] + " (interleaved)"
    benchmark.pedantic(lambda: times.update(interleaved_rounds(
        calls, INTERLEAVED_ROUNDS, TIMED_PER_ROUND)), rounds=1, iterations=1)
    benchmark.extra_info.update(
        interleaved={name: statistics.median(ts) for name, ts in times.items()},
        rounds=INTERLEAVED_ROUNDS, load=os.getloadavg()[0])
