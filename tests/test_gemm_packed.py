"""Our own packed GEMM (devices/cpu/packed_gemm_ir.py, native_gemm's "packed" kind), which
takes the products BLAS took on a CPU with AVX-512: against NumPy in float64 on shapes that
end inside a micro-kernel's block on every side, inner dimensions and widths past one
packed block (KC, NC), A and B plain or transposed, leading dimensions past the width (a
slice), batches, tiles split over threads; and in a program, with its gradients, against
the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cpu import native_gemm, packed_gemm_ir as P
from lazyarray.devices.cpu import native_pool as NP

pytestmark = pytest.mark.skipif(not (native_gemm.available() and native_gemm.packed()),
                                reason="needs NumPy's ILP64 OpenBLAS and a CPU with AVX-512")
IR = native_gemm.IR

# (m, n, k): one block and less; edges in rows (MR = 12) and columns (NR = 32 / 16);
# k past KC (256) with a tail; n past NC (512 floats, 256 doubles); one row; one column
SHAPES = [(1, 1, 1), (12, 32, 256), (13, 33, 257), (11, 31, 5), (37, 45, 300),
          (25, 530, 40), (130, 70, 600), (1, 100, 64), (100, 1, 64), (24, 64, 1)]
LAYOUTS = [(False, False), (True, False), (False, True), (True, True)]


def _operands(rng, dt, m, n, k, ta: bool, tb: bool, pad: int) -> tuple:
    """A (m x k) and B (k x n) as views: transposed where asked, rows `pad` elements
    longer than they need (a leading dimension past the width)."""
    def mat(rows, cols, trans):
        store = rng.standard_normal((cols, rows + pad) if trans else (rows, cols + pad)).astype(dt)
        return store[:, :rows].T if trans else store[:, :cols]
    return mat(m, k, ta), mat(k, n, tb)


def _flag(x: np.ndarray) -> tuple:
    """(CBLAS flag, leading dimension) of a 2-D view."""
    s0, s1 = (s // x.itemsize for s in x.strides)
    return (IR.CBLAS_NO_TRANS, s0) if s1 == 1 else (IR.CBLAS_TRANS, s1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 3])
def test_packed_tiles_match_numpy(dtype, threads: int) -> None:
    dt = np.dtype(dtype)
    rng = np.random.default_rng(threads)
    fn = native_gemm.tile_function(dt, "packed")
    pool = NP.NativePool(threads)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    try:
        for (m, n, k) in SHAPES:
            for ta, tb in LAYOUTS:
                a, b = _operands(rng, dt, m, n, k, ta, tb, pad=3)
                out = np.full((m, n), np.nan, dt)
                _, desc, ranges = native_gemm.task(dt, m, n, k, _flag(a), _flag(b), threads)
                job = NP.Job([(fn, [0, 1, 2, 3], [], [], ranges)], 4)
                job.table[:] = [NP.address(v) for v in (a, b, out, desc)]
                pool.run(job)
                want = a.astype(np.float64) @ b.astype(np.float64)
                scale = np.abs(a).max() * np.abs(b).max() * k
                np.testing.assert_allclose(out, want, rtol=0, atol=tol * scale,
                                           err_msg=str((m, n, k, ta, tb)))
    finally:
        pool.close()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_blas_took_are_packed_and_match_numpy(dtype) -> None:
    """`matmul` (the standalone call) sends them to the packed kind: 2-D views and a
    batch of transposed B's (attention's q @ k.T), over 2 threads."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(7)
    tol = 1e-5 if dtype == np.float32 else 1e-13
    assert native_gemm.kind(dt, 128, 96, 64, IR.CBLAS_NO_TRANS, IR.CBLAS_TRANS) == "packed"
    assert native_gemm.kind(dt, 64, 96, 128, IR.CBLAS_TRANS, IR.CBLAS_NO_TRANS) == "packed"
    a, b = _operands(rng, dt, 70, 300, 270, True, False, pad=1)
    out = np.empty((70, 300), dt)
    assert native_gemm.matmul(a, b, out, 2)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=0, atol=tol * 270 * 25)
    q = rng.standard_normal((6, 40, 24)).astype(dt)
    kk = rng.standard_normal((6, 50, 24)).astype(dt)
    out = np.empty((6, 40, 50), dt)
    assert native_gemm.matmul(q, kk.transpose(0, 2, 1), out, 2)
    np.testing.assert_allclose(out, q.astype(np.float64) @ kk.transpose(0, 2, 1),
                               rtol=0, atol=tol * 24 * 25)


def test_packing_fits_its_stack_budget() -> None:
    """The packed block of B is PACKED_B_BYTES for either element size (it lives on the
    pool threads' stacks)."""
    for size in (4, 8):
        assert P.KC * P.nc(size) * size == P.PACKED_B_BYTES
        assert P.nc(size) % (P.NV * P.VECTOR_BYTES // size) == 0   # whole panels


def test_a_transformer_sized_layer_and_its_gradients_match_the_interpreter() -> None:
    """x @ W.T, its input and weight gradients (A transposed: x.T @ g) and a batched
    q @ k.T, in a compiled program, against the reference interpreter."""
    rng = np.random.default_rng(4)
    xs = rng.standard_normal((70, 96)).astype(np.float32)
    ws = rng.standard_normal((130, 96)).astype(np.float32)
    qs = rng.standard_normal((3, 33, 16)).astype(np.float32)

    def run() -> list:
        x, w, q = la.asarray(xs), la.asarray(ws), la.asarray(qs)
        with la.GradientTape() as tape:
            tape.watch(x)
            tape.watch(w)
            y = x @ w.T
            s = q @ q.transpose(0, 2, 1)
            loss = (y * y).sum() + s.sum()
        gx, gw = tape.gradient(loss, [x, w])
        return [y.numpy(), s.numpy(), gx.numpy(), gw.numpy()]
    got = run()
    with la.config.override(device="interpreter"):
        want = run()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[0], xs.astype(np.float64) @ ws.T, rtol=1e-4, atol=1e-3)


def test_the_profilers_gemm_peak_is_that_of_the_devices_products(monkeypatch) -> None:
    """peaks.gemm_throughput (the profiler's %GEMM) times native_gemm's products, not
    NumPy's matmul (half our peak with OpenBLAS pinned to its AVX2 kernels)."""
    from lazyarray import peaks
    calls = []
    real = native_gemm.matmul
    monkeypatch.setattr(native_gemm, "matmul", lambda *a: (calls.append(a[0].shape), real(*a))[1])
    assert peaks.gemm_throughput(64) > 0
    assert calls and calls[0] == (64, 64)


@pytest.mark.parametrize("size", [4, 8])
def test_the_micro_kernel_is_24_multiply_adds_on_512_bit_registers(size: int) -> None:
    """The code LLVM makes of each micro-kernel: its MR x NV accumulators in zmm registers
    (no vector split in two, no accumulator spilled to the stack)."""
    from lazyarray.compiler.codegen import llvm_target
    from lazyarray.devices.cpu import pool_ir
    text = pool_ir.gemm_tiles_ir(llvm_target.host()[0], pool_ir.GEMM_KIND_PACKED, size)
    asm = llvm_target.target_machine().emit_assembly(llvm_target.optimize(text, "t", slp=False))
    for trans in (0, 1):
        body = asm[asm.index(f"kernel{trans},@function"):]
        body = body[:body.index(".Lfunc_end")]
        fmas = [line for line in body.splitlines() if "vfmadd" in line]
        assert len(fmas) == P.MR * P.NV and all("zmm" in f for f in fmas), fmas
        assert not any("zmm" in line and "rsp" in line for line in body.splitlines())
