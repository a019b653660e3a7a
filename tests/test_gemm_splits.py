"""Matrix products split into tiles of C over the native pool (devices/cpu/native_gemm.py
`grid`): each shape class the split rule tells apart -- C much wider than tall (column
tiles), squarer or taller (row tiles), A transposed (a weight gradient g.T @ x), B
transposed (a layer's x @ W.T), narrow (dot products of rows), a short inner dimension or
few rows (our own direct code) -- in float32 and float64, on 1, 2 and 3 threads, as a
compiled program and as a standalone call, against NumPy in float64."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cpu import native_gemm

pytestmark = pytest.mark.skipif(not native_gemm.available(),
                                reason="NumPy's BLAS is not its ILP64 OpenBLAS")
IR = native_gemm.IR

# name -> (m, n, k, A transposed, B transposed, (row tiles, column tiles) on 2 threads)
SHAPES = {
    "wide": (48, 160, 96, False, False, (1, 2)),
    "wide, B transposed": (48, 160, 96, False, True, (1, 2)),     # x @ W.T
    "square": (96, 96, 64, False, False, (2, 1)),
    "tall": (160, 48, 64, False, True, (2, 1)),
    "A transposed": (160, 200, 48, True, False, (2, 1)),          # g.T @ x
    "A transposed, very wide": (24, 400, 64, True, False, (1, 2)),
    "narrow": (300, 10, 200, False, True, (2, 1)),                # dots
    "short inner dimension": (200, 128, 9, False, False, (2, 1)), # direct
    "few rows": (10, 256, 256, True, False, (1, 2)),              # direct
}


def _operands(m: int, n: int, k: int, ta: bool, tb: bool, dtype, seed: int) -> tuple:
    """(stored A, stored B, A as multiplied, B as multiplied)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    return a, b, (a.T if ta else a), (b.T if tb else b)


def _tol(dtype, k: int) -> dict:
    tol = 1e-4 if dtype == np.float32 else 1e-12
    return {"rtol": tol, "atol": tol * np.sqrt(k)}


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_shape_class_has_its_split(name: str) -> None:
    m, n, k, ta, tb, want = SHAPES[name]
    pa = (IR.CBLAS_TRANS, m) if ta else (IR.CBLAS_NO_TRANS, k)
    pb = (IR.CBLAS_TRANS, k) if tb else (IR.CBLAS_NO_TRANS, n)
    _, desc, ranges = native_gemm.task(np.dtype(np.float32), m, n, k, pa, pb, 2)
    per_row = int(desc[IR.GEMM_TILES_N])
    assert (len(ranges) // per_row, per_row) == want
    assert native_gemm.work(m, n, k) >= native_gemm.SPLIT_WORK     # split when called alone


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", list(SHAPES))
def test_products_of_each_shape_class_match_numpy(name: str, threads: int, dtype) -> None:
    m, n, k, ta, tb, _ = SHAPES[name]
    a, b, am, bm = _operands(m, n, k, ta, tb, dtype, threads)
    want = am.astype(np.float64) @ bm.astype(np.float64)
    out = np.full((m, n), np.nan, dtype)
    assert native_gemm.matmul(am, bm, out, threads)
    np.testing.assert_allclose(out, want, **_tol(dtype, k))
    with la.config.override(num_threads=threads):
        x, w = la.asarray(a), la.asarray(b)
        got = (x.T if ta else x) @ (w.T if tb else w)        # a compiled program's step
        np.testing.assert_allclose(got.numpy(), want, **_tol(dtype, k))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_a_layer_whose_products_split_by_columns_matches_numpy(threads: int) -> None:
    """A linear layer of a 48-row batch with 160 outputs: its forward product (C three
    times as wide as tall: column tiles), its weight gradient (A transposed) and input
    gradient, in one program, against NumPy in float64."""
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((48, 96))
    ws = rng.standard_normal((160, 96))
    with la.config.override(num_threads=threads):
        x, w = la.asarray(xs), la.asarray(ws)
        with la.GradientTape() as tape:
            tape.watch(x)
            tape.watch(w)
            y = x @ w.T
            loss = (y * y).sum() / 2
        gx, gw = tape.gradient(loss, [x, w])
        y, gx, gw = y.numpy(), gx.numpy(), gw.numpy()
    ys = xs @ ws.T
    np.testing.assert_allclose(y, ys, rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(gx, ys @ ws, rtol=1e-12, atol=1e-10)
    np.testing.assert_allclose(gw, ys.T @ xs, rtol=1e-12, atol=1e-10)


def test_a_program_of_our_own_products_leaves_blas_threads_alone(monkeypatch) -> None:
    """A program whose products are all our own code (dots, direct, packed) calls no BLAS,
    so its run does not set BLAS's thread count to one and back (~3 us a sync); one with a
    BLAS tile does, and both match NumPy."""
    from lazyarray.devices.cpu import blas_threads
    entered = []
    real = blas_threads.BLAS_THREADS.enter
    monkeypatch.setattr(blas_threads.BLAS_THREADS, "enter", lambda: (entered.append(1), real())[1])
    rng = np.random.default_rng(11)
    f32 = lambda *shape: rng.standard_normal(shape, dtype=np.float32)
    h, w3, g, w2 = f32(256, 64), f32(10, 64), f32(256, 10), f32(10, 96)
    x, w = la.asarray(h), la.asarray(w3)
    gg, ww = la.asarray(g), la.asarray(w2)
    for _ in range(2):                           # compiled, then a cached run
        entered.clear()
        y, z = x @ w.T, gg @ ww                  # dots and direct
        la.sync()
        assert entered == []
    np.testing.assert_allclose(y.numpy(), h.astype(np.float64) @ w3.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(z.numpy(), g.astype(np.float64) @ w2, rtol=1e-4, atol=1e-4)
    big = la.asarray(rng.standard_normal((64, 64)))
    for _ in range(2):
        entered.clear()
        q = big @ big                            # our packed GEMM's tile, or BLAS's
        la.sync()
        assert (entered == []) == native_gemm.packed()
    np.testing.assert_allclose(q.numpy(), big.numpy() @ big.numpy(), rtol=1e-12, atol=1e-11)


# batched products in a whole-program job: (batch dims, m, n, k, B transposed); each
# shape class of a 2-D product and one the tiles of a product split (batch < threads)
BATCHED = [((4,), 1, 64, 16, True), ((4,), 1, 16, 64, False), ((2, 3), 5, 9, 7, False),
           ((2,), 40, 70, 33, True), ((3,), 10, 256, 256, False), ((2,), 300, 10, 200, True),
           ((1,), 96, 96, 64, False)]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch,m,n,k,tb", BATCHED)
def test_batched_products_run_in_the_native_program_and_match_numpy(
        batch: tuple, m: int, n: int, k: int, tb: bool, dtype, threads: int, monkeypatch) -> None:
    """A batched product (attention's q @ k.T, p @ v) is tiles of one task of the
    program's native job (each product's operands one after another), not a library call
    from Python: checked by the run never reaching the general path's product call."""
    from lazyarray.devices.cpu import cpu
    rng = np.random.default_rng(len(batch) + m + n)
    a = rng.standard_normal(batch + (m, k)).astype(dtype)
    b = rng.standard_normal(batch + ((n, k) if tb else (k, n))).astype(dtype)
    bm = np.swapaxes(b, -1, -2) if tb else b
    want = (a.astype(np.float64) @ bm.astype(np.float64)) * 2 + 1
    monkeypatch.setitem(cpu.LIBRARY_CALLS, "gemm", None)     # the general path would fail
    with la.config.override(num_threads=threads):
        x, w = la.asarray(a), la.asarray(b)
        got = (x @ (la.matrix_transpose(w) if tb else w)) * 2 + 1
        np.testing.assert_allclose(got.numpy(), want, **_tol(dtype, k))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n,k", [(7, 40, 64), (7, 40, 65), (10, 256, 130),
                                   (1, 16, 64), (1, 9, 70)])     # (one row: narrow C too)
def test_direct_products_over_their_inner_chunks_match_numpy(m: int, n: int, k: int,
                                                             dtype) -> None:
    """Our direct code walks the inner dimension in chunks of SMALL_K_CHUNK, the first
    starting C from zero: one, two or three chunks add up to NumPy's product. (An empty
    inner dimension never reaches it: `matmul` declines it and NumPy's zeros are the
    result, test_empty_inner_dimension_gives_zeros.)"""
    assert native_gemm.kind(np.dtype(dtype), m, n, k, IR.CBLAS_NO_TRANS,
                            IR.CBLAS_NO_TRANS) == "direct"
    _, _, a, b = _operands(m, n, k, False, False, dtype, k)
    out = np.full((m, n), np.nan, dtype)
    assert native_gemm.matmul(a, b, out, 1)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.astype(np.float64),
                               **_tol(dtype, max(k, 1)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m,n", [(4, 64), (200, 128)])
def test_empty_inner_dimension_gives_zeros(m: int, n: int, dtype) -> None:
    """An empty inner dimension: the native path declines it (nothing written) and the
    product is NumPy's zeros, as the interpreter's."""
    a, b = np.ones((m, 0), dtype), np.ones((0, n), dtype)
    assert not native_gemm.matmul(a, b, np.full((m, n), np.nan, dtype), 1)
    for device in ("cpu", "interpreter"):
        got = (la.asarray(a, device=device) @ la.asarray(b, device=device)).numpy()
        np.testing.assert_array_equal(got, np.zeros((m, n), dtype))


def test_a_product_on_one_thread_is_one_chunk_of_all_its_tiles() -> None:
    """A small batch (attention's per-head products in a decoding step) planned for one
    thread: its tiles one chunk, so the job it is in runs on the calling thread rather
    than waking the workers for a chunk a matrix."""
    pa = pc = (IR.CBLAS_NO_TRANS, 64)
    _, _, ranges = native_gemm.task(np.dtype(np.float32), 1, 64, 64, pa, pc, 1, batch=4,
                                    strides=(64, 64 * 64, 64))
    assert ranges == [(0, 4)]
    _, _, ranges = native_gemm.task(np.dtype(np.float32), 1, 64, 64, pa, pc, 2, batch=4,
                                    strides=(64, 64 * 64, 64))
    assert len(ranges) == 4
