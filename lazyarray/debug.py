"""Seeing inside: metrics of what ran, and the IR of pending tensors at each stage."""
from __future__ import annotations

from typing import Any

from .compiler.graph.trace import capture
from . import metrics as _metrics
from .tensor import Tensor


def metrics() -> _metrics.Metrics:
    """Counters since the start (or the last `reset_metrics`)."""
    _metrics.refresh()           # what devices count themselves (transfers, graphs, memory)
    return _metrics.METRICS


def reset_metrics() -> None:
    _metrics.reset()


def _nodes(tensors: Any) -> list:
    if isinstance(tensors, Tensor):
        tensors = [tensors]
    return [t._node for t in tensors]


STAGES = {}


def ir(tensors: Any, stage: str = "hlo") -> str:
    """The module that computing `tensors` would run, as text: "hlo" (as traced), and the
    later stages the tensors' device's compiler adds: "optimized_hlo", "fusion" (the
    fusion decisions), "dot" (Graphviz), "llvm", and "asm" on the CPU or "ptx" on CUDA.
    "ptx" of a CPU tensor is the PTX the module compiles to for a GPU (sm_80): code
    generation for a GPU needs no GPU."""
    cap = capture(_nodes(tensors))
    module = cap.module("ir")
    if stage == "hlo":
        return str(module)
    if stage in STAGES:
        ts = [tensors] if isinstance(tensors, Tensor) else list(tensors)
        return STAGES[stage](module, ts[0]._state.device)
    raise ValueError(f"ir: unknown stage {stage!r}; valid: {', '.join(['hlo'] + sorted(STAGES))}")
