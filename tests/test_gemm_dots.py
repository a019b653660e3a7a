"""Narrow products of a transposed B (x @ W.T with a few outputs) as dot products of rows
(devices/cpu/native_gemm.py `dots`, pool_ir's `_RowDots`): exact against NumPy in float64 for
every width it takes, inner dimensions with and without a vector tail, tiles split over
threads, and in a program against the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cpu import native_gemm
from lazyarray.devices.cpu import native_pool as NP

pytestmark = pytest.mark.skipif(not native_gemm.available(),
                                reason="NumPy's BLAS is not its ILP64 OpenBLAS")
IR = native_gemm.IR


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_row_dots_match_numpy(dtype, threads: int) -> None:
    dt = np.dtype(dtype)
    rng = np.random.default_rng(threads)
    fn = native_gemm.tile_function(dt, "dots")
    pool = NP.NativePool(threads)
    shapes = [(m, n, k) for n in range(1, native_gemm.DOTS_N[dt] + 1)
              for m, k in ((1, 32), (7, 33), (256, 512), (13, 45))]
    shapes += [(1000, 5, 40), (3, 2, 1027), (1, 300, 64), (1, 97, 1027)]   # one row: any width
    shapes += [(1, 64, 16), (1, 33, 9)]                  # one row: a short inner dimension
    try:
        for m, n, k in shapes:
            x = rng.standard_normal((m, k)).astype(dtype)
            w = rng.standard_normal((n, k)).astype(dtype)
            b = w.T                                   # B transposed: the rows of w
            out = np.full((m, n), np.nan, dtype)
            task_fn, desc, ranges = native_gemm.task(dt, m, n, k, (IR.CBLAS_NO_TRANS, k),
                                                     (IR.CBLAS_TRANS, k), threads)
            assert task_fn == fn, (m, n, k)           # this path, not BLAS
            job = NP.Job([(task_fn, [0, 1, 2, 3], [], [], ranges)], 4)
            job.table[:] = [NP.address(v) for v in (x, w, out, desc)]
            pool.run(job)
            want = x.astype(np.float64) @ b.astype(np.float64)
            tol = 1e-4 if dtype == np.float32 else 1e-12
            np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.sqrt(k),
                                       err_msg=str((m, n, k)))
            assert native_gemm.matmul(x, b, out, threads)       # the standalone call too
            np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.sqrt(k))
    finally:
        pool.close()


def test_row_dots_take_only_the_layouts_they_do_better() -> None:
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    no, yes = IR.CBLAS_NO_TRANS, IR.CBLAS_TRANS
    big = "packed" if native_gemm.packed() else "blas"     # what takes the rest
    assert native_gemm.kind(f32, 256, 10, 512, no, yes) == "dots"     # an MLP's output layer
    assert native_gemm.kind(f32, 256, 10, 512, yes, yes) == big    # A read down columns
    assert native_gemm.kind(f32, 256, 10, 512, no, no) == big      # B not transposed
    assert native_gemm.kind(f32, 256, 12, 512, no, yes) == big     # too wide
    assert native_gemm.kind(f32, 1, 768, 256, no, yes) == "dots"      # ... but one row (GEMV)
    assert native_gemm.kind(f64, 1, 1024, 256, no, yes) == "dots"
    assert native_gemm.kind(f32, 2, 768, 256, no, yes) == big
    assert native_gemm.kind(f64, 256, 9, 512, no, yes) == big      # (sums past registers)
    assert native_gemm.kind(f32, 256, 10, 16, no, yes) == big      # too short
    assert native_gemm.kind(f32, 256, 512, 10, no, no) == "direct"
    # one row: attention's per-head products in a decoding step
    assert native_gemm.kind(f32, 1, 64, 16, no, yes) == "dots"       # q @ k.T
    assert native_gemm.kind(f32, 1, 16, 64, no, no) == "direct"      # p @ v
    assert native_gemm.kind(f32, 1, 64, 4, no, yes) == big        # (too short)
    assert native_gemm.kind(f32, 2, 64, 16, no, yes) == big       # (two rows)


def test_a_linear_layer_with_few_outputs_matches_the_interpreter() -> None:
    """x @ W.T + b with 10 outputs, its input gradient too, in a compiled program."""
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((64, 100)).astype(np.float32)
    ws = rng.standard_normal((10, 100)).astype(np.float32)

    def run() -> list:
        x, w = la.asarray(xs), la.asarray(ws)
        with la.GradientTape() as tape:
            tape.watch(x)
            y = x @ w.T
            loss = (y * y).sum()
        return [y.numpy(), tape.gradient(loss, [x])[0].numpy()]
    got = run()
    with la.config.override(device="interpreter"):
        want = run()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[0], xs.astype(np.float64) @ ws.T.astype(np.float64),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(6, 3, 32), (64, 10, 100), (256, 512, 10)])
def test_the_general_path_sums_small_products_as_a_native_program(shape) -> None:
    """Products our own code computes (dots, direct) are computed by it on the general
    path too, however small (NumPy's BLAS sums in another order): a step run step by
    step (a profile, LAZYARRAY_DEBUG >= 2) equals the native program's bit for bit."""
    m, n, k = shape
    rng = np.random.default_rng(5)
    xs = rng.standard_normal((m, k)).astype(np.float32)
    ws = rng.standard_normal((n, k) if n <= 11 else (k, n)).astype(np.float32)

    def run() -> np.ndarray:
        x, w = la.asarray(xs), la.asarray(ws)
        return ((x @ w.T if n <= 11 else x @ w) + 1.0).numpy()
    plain = run()
    with la.config.override(debug=2):
        stepwise = run()
    assert np.array_equal(plain, stepwise)
