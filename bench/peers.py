"""The frameworks a workload is measured with, side by side in one run.

Each framework turns NumPy inputs into its own arrays (`put`) and runs a function to
completion (`run`): lazyarray syncs, PyTorch is eager, torch.compile and jax.jit are
compiled once before timing (their first call is measured separately).
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@dataclass
class Framework:
    name: str
    available: bool
    put: Callable[[np.ndarray], Any]
    finish: Callable[[Any], Any]
    compile: Callable[[Callable], Callable] = lambda f: f

    def skip_reason(self) -> str:
        return f"{self.name} is not installed"


def _la() -> Framework:
    import lazyarray as la

    def finish(out: Any) -> Any:
        la.sync()
        return out
    return Framework("lazyarray", True, la.asarray, finish)


def _numpy() -> Framework:
    return Framework("numpy", True, lambda a: a, lambda out: out)


def _torch(compiled: bool) -> Framework:
    name = "torch.compile" if compiled else "torch"
    if not installed("torch"):
        return Framework(name, False, None, None)
    import torch
    torch.set_grad_enabled(False)
    comp = (lambda f: torch.compile(f)) if compiled else (lambda f: f)
    return Framework(name, True, torch.from_numpy, lambda out: out, comp)


def _jax() -> Framework:
    if not installed("jax"):
        return Framework("jax.jit", False, None, None)
    import jax
    import jax.numpy as jnp

    def finish(out: Any) -> Any:
        return jax.block_until_ready(out)
    return Framework("jax.jit", True, jnp.asarray, finish, jax.jit)


FRAMEWORKS = {f.name: f for f in (_la(), _numpy(), _torch(False), _torch(True), _jax())}


def namespace(framework: str) -> Any:
    """The array namespace whose functions a workload calls (la, np, torch, jnp)."""
    if framework == "lazyarray":
        import lazyarray
        return lazyarray
    if framework == "numpy":
        return np
    if framework.startswith("torch"):
        import torch
        return torch
    import jax.numpy as jnp
    return jnp
