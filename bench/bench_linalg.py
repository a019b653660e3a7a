"""linalg and fft beside NumPy and PyTorch (issue 14): batched solves and decompositions
(on the CPU generated kernels calling SciPy's LAPACK per matrix, or numpy.linalg's LAPACK
without SciPy), FFTs (pocketfft), the same ops with fused work around them, and tiny
calls where the per-call overhead is all there is. `python bench/report.py` writes the
table of ratios."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from peers import FRAMEWORKS, namespace

PEERS = ("lazyarray", "numpy", "torch")


def _spd(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    a = rng.standard_normal((b, n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _hpd(rng: np.random.Generator, b: int, n: int) -> np.ndarray:
    a = rng.standard_normal((b, n, n)) + 1j * rng.standard_normal((b, n, n))
    return a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)


def _linalg(xp: Any) -> Any:
    return xp.linalg


def _fft(xp: Any) -> Any:
    return xp.fft


# name -> (fn(xp, *arrays) -> array to compare, inputs(rng) -> arrays)
WORKLOADS: dict[str, tuple[Callable, Callable]] = {
    "solve 256x32x32": (lambda xp, a, b: _linalg(xp).solve(a, b),
                        lambda r: (_spd(r, 256, 32), r.standard_normal((256, 32, 4)))),
    "inv 64x128x128": (lambda xp, a: _linalg(xp).inv(a), lambda r: (_spd(r, 64, 128),)),
    "cholesky 256x32x32": (lambda xp, a: _linalg(xp).cholesky(a), lambda r: (_spd(r, 256, 32),)),
    "eigvalsh 128x64x64": (lambda xp, a: _linalg(xp).eigvalsh(a), lambda r: (_spd(r, 128, 64),)),
    "svdvals 512x256": (lambda xp, a: _linalg(xp).svdvals(a),
                        lambda r: (r.standard_normal((512, 256)),)),
    "qr R 1024x256": (lambda xp, a: xp.abs(_linalg(xp).qr(a)[1]),
                      lambda r: (r.standard_normal((1024, 256)),)),
    "cholesky 4x4 (per-call overhead)": (lambda xp, a: _linalg(xp).cholesky(a),
                                         lambda r: (_spd(r, 1, 4)[0],)),
    "solve complex128 256x16x16": (lambda xp, a, b: _linalg(xp).solve(a, b),
                                   lambda r: (_hpd(r, 256, 16),
                                              r.standard_normal((256, 16, 2)) + 0j)),
    "eigvalsh complex128 64x32x32": (lambda xp, a: _linalg(xp).eigvalsh(a),
                                     lambda r: (_hpd(r, 64, 32),)),
    "rfft 256x4096": (lambda xp, x: _fft(xp).rfft(x), lambda r: (r.standard_normal((256, 4096)),)),
    "rfft 256 (per-call overhead)": (lambda xp, x: _fft(xp).rfft(x),
                                     lambda r: (r.standard_normal(256),)),
    "fftn complex 8x256x256": (lambda xp, z: _fft(xp).fftn(z),
                               lambda r: ((r.standard_normal((8, 256, 256))
                                           + 1j * r.standard_normal((8, 256, 256))),)),
    "power spectrum (rfft, fused abs^2 and mean)": (
        lambda xp, x: xp.mean(xp.abs(_fft(xp).rfft(x * 0.5 + 1.0)) ** 2, axis=0),
        lambda r: (r.standard_normal((256, 4096)),)),
    "einsum bij,bjk->bik 64x128": (lambda xp, a, b: xp.einsum("bij,bjk->bik", a, b),
                                   lambda r: (r.standard_normal((64, 128, 128)),
                                              r.standard_normal((64, 128, 128)))),
}

_INPUTS: dict = {}


def inputs(name: str) -> tuple:
    if name not in _INPUTS:
        _INPUTS.clear()
        _INPUTS[name] = WORKLOADS[name][1](np.random.default_rng(0))
    return _INPUTS[name]


@pytest.mark.parametrize("framework", PEERS)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_linalg_workload(benchmark, workload, framework):
    fw = FRAMEWORKS[framework]
    if not fw.available:
        pytest.skip(fw.skip_reason())
    fn, _ = WORKLOADS[workload]
    xp = namespace(framework)
    args = [fw.put(a) for a in inputs(workload)]
    expect = fn(np, *inputs(workload))
    got = np.asarray(fw.finish(fn(xp, *args)))
    np.testing.assert_allclose(got, expect, rtol=1e-6, atol=1e-6)
    benchmark.group = "linalg/fft: " + workload
    benchmark.extra_info.update(framework=framework)
    benchmark(lambda: fw.finish(fn(xp, *args)))
