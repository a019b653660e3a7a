"""Gradient checks against central finite differences, in float64.

- `check_direction(fn, inputs)`: one random direction t per differentiated input;
  compares <grad L, t> with (L(x + eps t) - L(x - eps t)) / (2 eps), where
  L = sum(w * fn(x)) for a random cotangent w. Works at any size (three evaluations).
- `check_full(fn, inputs)`: every element's partial derivative by finite differences, to
  locate an error (tiny inputs only: two evaluations per element).

Everything is recorded lazily and computed in one sync, so a check compiles one module.
`fn` takes tensors and returns a tensor; `inputs` are NumPy arrays; `wrt` lists the
inputs to differentiate (by default the floating-point ones).
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

import lazyarray as la

EPS = {np.dtype(np.float64): 1e-6, np.dtype(np.float32): 1e-3}
TOL = {np.dtype(np.float64): (1e-5, 1e-8), np.dtype(np.float32): (2e-3, 1e-4)}


def float_inputs(inputs: Sequence[np.ndarray]) -> list:
    return [i for i, a in enumerate(inputs) if a.dtype.kind == "f"]


def _loss(out: la.Tensor, w: la.Tensor) -> la.Tensor:
    return la.sum(out * w)


def _tensors(inputs: Sequence[np.ndarray], device: Optional[str]) -> list:
    return [la.asarray(a, device=device) for a in inputs]


def analytic_gradients(fn: Callable, inputs: Sequence[np.ndarray], wrt: Sequence[int],
                       w: np.ndarray, device: Optional[str] = None) -> tuple:
    """(loss tensor, gradient tensors) of L = sum(w * fn(x)), still pending."""
    xs = _tensors(inputs, device)
    with la.GradientTape() as tape:
        for i in wrt:
            tape.watch(xs[i])
        out = fn(*xs)
        loss = _loss(out, la.asarray(w.astype(out.dtype.np), device=device))
    grads = tape.gradient(loss, [xs[i] for i in wrt], unconnected_gradients="zero")
    return loss, grads


def _cotangent(fn: Callable, inputs: Sequence[np.ndarray], device: Optional[str],
               rng: np.random.Generator) -> tuple:
    out = fn(*_tensors(inputs, device))
    if not out.dtype.is_float:
        raise ValueError(f"gradcheck: fn returns {out.dtype.name}, not a float")
    return rng.standard_normal(out.shape), np.dtype(out.dtype.np)


def _setup(fn, inputs, wrt, device, seed, eps, rtol, atol) -> tuple:
    """What both checks start from: inputs as arrays, the inputs to differentiate, a random
    cotangent, and the step and tolerances for the output's dtype."""
    rng = np.random.default_rng(seed)
    inputs = [np.array(a) for a in inputs]      # NumPy scalars become 0-d arrays
    wrt = float_inputs(inputs) if wrt is None else list(wrt)
    w, out_dtype = _cotangent(fn, inputs, device, rng)
    d_rtol, d_atol = TOL.get(out_dtype, (2e-3, 1e-4))
    return (rng, inputs, wrt, w, out_dtype, eps or EPS.get(out_dtype, 1e-3),
            rtol or d_rtol, atol or d_atol)


def check_direction(fn: Callable, inputs: Sequence[np.ndarray], wrt: Optional[Sequence[int]] = None,
                    device: Optional[str] = None, seed: int = 0, eps: Optional[float] = None,
                    rtol: Optional[float] = None, atol: Optional[float] = None) -> tuple:
    """Assert <grad, t> == the central difference along t; return (analytic, numeric)."""
    rng, inputs, wrt, w, out_dtype, eps, rtol, atol = _setup(fn, inputs, wrt, device, seed,
                                                             eps, rtol, atol)
    ts = {i: rng.standard_normal(inputs[i].shape) for i in wrt}

    def moved(sign: float) -> list:
        return [a + sign * eps * ts[i] if i in ts else a for i, a in enumerate(inputs)]

    _, grads = analytic_gradients(fn, inputs, wrt, w, device)
    plus = _loss(fn(*_tensors(moved(1), device)), la.asarray(w.astype(out_dtype), device=device))
    minus = _loss(fn(*_tensors(moved(-1), device)), la.asarray(w.astype(out_dtype), device=device))
    la.sync()
    numeric = (float(plus) - float(minus)) / (2 * eps)
    analytic = sum(float(np.sum(g.numpy().astype(np.float64) * ts[i])) for g, i in zip(grads, wrt))
    size = sum(float(np.abs(t).sum()) for t in ts.values())
    scale = max(abs(numeric), abs(analytic), size * 1e-3)
    assert abs(analytic - numeric) <= atol + rtol * scale, (
        f"directional derivative: analytic {analytic!r} vs finite difference {numeric!r} "
        f"(eps={eps}, difference {abs(analytic - numeric):.3g})")
    return analytic, numeric


def check_full(fn: Callable, inputs: Sequence[np.ndarray], wrt: Optional[Sequence[int]] = None,
               device: Optional[str] = None, seed: int = 0, eps: Optional[float] = None,
               rtol: Optional[float] = None, atol: Optional[float] = None) -> None:
    """Assert every partial derivative against finite differences; the message names the
    input and the element whose gradient is wrong."""
    rng, inputs, wrt, w, out_dtype, eps, rtol, atol = _setup(fn, inputs, wrt, device, seed,
                                                             eps, rtol, atol)
    _, grads = analytic_gradients(fn, inputs, wrt, w, device)
    wt = la.asarray(w.astype(out_dtype), device=device)
    pending = []
    for i in wrt:
        for k in range(inputs[i].size):
            pair = []
            for sign in (1.0, -1.0):
                args = [a.copy() for a in inputs]
                args[i].reshape(-1)[k] += sign * eps
                pair.append(_loss(fn(*_tensors(args, device)), wt))
            pending.append((i, k, pair))
    la.sync()
    for g, i in zip(grads, wrt):
        got = g.numpy().astype(np.float64).reshape(-1)
        for j, k, (p, m) in pending:
            if j != i:
                continue
            want = (float(p) - float(m)) / (2 * eps)
            assert abs(got[k] - want) <= atol + rtol * max(abs(want), abs(got[k]), 1e-3), (
                f"d/d input {i} element {np.unravel_index(k, inputs[i].shape)}: analytic "
                f"{got[k]!r} vs finite difference {want!r}")


# ---- complex inputs and results (the conjugate-Wirtinger convention) -------------------

def inexact_inputs(inputs: Sequence[np.ndarray]) -> list:
    return [i for i, a in enumerate(inputs) if a.dtype.kind in "fc"]


def _complex_loss(out: la.Tensor, w: np.ndarray) -> la.Tensor:
    """L = sum(re(conj(w) out)): a real loss whose cotangent for `out` is w."""
    wt = la.asarray(w.astype(out.dtype.np), device=out.device)
    return la.sum(la.real(la.conj(wt) * out))


def check_complex_direction(fn: Callable, inputs: Sequence[np.ndarray],
                            wrt: Optional[Sequence[int]] = None, device: Optional[str] = None,
                            seed: int = 0, eps: float = 1e-6, rtol: float = 1e-5,
                            atol: float = 1e-8) -> tuple:
    """The gradient of a real loss of a (possibly) complex fn, PyTorch's convention: the
    cotangent of z = x + iy is dL/dx + i dL/dy, so along a direction t the derivative of L
    is sum(re(conj(grad) t)); compared with a central difference in float64/complex128."""
    rng = np.random.default_rng(seed)
    inputs = [np.array(a) for a in inputs]
    wrt = inexact_inputs(inputs) if wrt is None else list(wrt)
    out = fn(*_tensors(inputs, device))
    w = rng.standard_normal(out.shape)
    if out.dtype.is_complex:
        w = w + 1j * rng.standard_normal(out.shape)

    def direction(a: np.ndarray) -> np.ndarray:
        t = rng.standard_normal(a.shape)
        return t + 1j * rng.standard_normal(a.shape) if a.dtype.kind == "c" else t
    ts = {i: direction(inputs[i]) for i in wrt}
    xs = _tensors(inputs, device)
    with la.GradientTape() as tape:
        for i in wrt:
            tape.watch(xs[i])
        loss = _complex_loss(fn(*xs), w)
    grads = tape.gradient(loss, [xs[i] for i in wrt], unconnected_gradients="zero")

    def moved(sign: float) -> list:
        return [(a + sign * eps * ts[i]).astype(a.dtype) if i in ts else a
                for i, a in enumerate(inputs)]
    plus = _complex_loss(fn(*_tensors(moved(1), device)), w)
    minus = _complex_loss(fn(*_tensors(moved(-1), device)), w)
    la.sync()
    numeric = (float(plus) - float(minus)) / (2 * eps)
    analytic = sum(float(np.sum(np.real(np.conj(g.numpy().astype(np.complex128)) * ts[i])))
                   for g, i in zip(grads, wrt))
    scale = max(abs(numeric), abs(analytic), 1e-3)
    assert abs(analytic - numeric) <= atol + rtol * scale, (
        f"directional derivative: analytic {analytic!r} vs finite difference {numeric!r}")
    return analytic, numeric
