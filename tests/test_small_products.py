"""Small matrix products on the CPU are generated reductions, not library calls
(compiler/primitives/linalg.py SMALL_PRODUCT: no GEMM tile function for LLVM to build in
a first step): every layout of dot_general's dimension numbers at that size matches the
reference interpreter and NumPy in float64; one past the bound, or with batch dimensions,
stays a library call; a linear layer's forward and gradients, as a CNN's classifier,
match the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.compiler.primitives.linalg import SMALL_PRODUCT
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

_DEVICE: list = []


def _device() -> CPUDevice:
    if not _DEVICE:
        _DEVICE.append(CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2}))
    return _DEVICE[0]


def _dot(lhs: tuple, rhs: tuple, lc: tuple, rc: tuple, dtype: D.DType,
         lb: tuple = (), rb: tuple = ()) -> Module:
    from lazyarray.compiler.primitives.linalg import _dot_infer
    from lazyarray.compiler.primitive import TypedArray
    shape, _ = _dot_infer((TypedArray(np.zeros(lhs, dtype.np)), TypedArray(np.zeros(rhs, dtype.np))),
                          lc, rc, lb, rb)
    attrs = {"lhs_contracting": lc, "rhs_contracting": rc, "lhs_batch": lb, "rhs_batch": rb}
    ins = [I("parameter", (), lhs, dtype, {"number": 0}),
           I("parameter", (), rhs, dtype, {"number": 1}),
           I("dot_general", (0, 1), shape, dtype, attrs)]
    return Module("small_product", ins, [2])


def _library_products(exe) -> int:
    return sum(1 for s in exe.steps if s.kind == "library")


# (lhs shape, rhs shape, lhs contracting, rhs contracting): x @ W.T, x @ W, g.T @ x,
# two contracting dimensions, an outer product, a vector's dot, a matrix-vector product
CASES = [((32, 64), (10, 64), (1,), (1,)),
         ((32, 10), (10, 64), (1,), (0,)),
         ((32, 10), (32, 64), (0,), (0,)),
         ((4, 3, 5), (5, 6, 3), (1, 2), (2, 0)),
         ((7, 3), (5,), (), ()),
         ((50,), (50,), (0,), (0,)),
         ((9, 40), (40,), (1,), (0,)),
         ((1, 1), (1, 1), (1,), (0,))]


@pytest.mark.parametrize("dtype", [D.float32, D.float64], ids=lambda d: d.name)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_small_products_are_generated_and_match(case, dtype: D.DType) -> None:
    lhs, rhs, lc, rc = case
    module = _dot(lhs, rhs, lc, rc, dtype)
    rng = np.random.default_rng(len(lhs) + len(rhs))
    args = [rng.standard_normal(s).astype(dtype.np) for s in (lhs, rhs)]
    exe = _device().compile(module)
    assert _library_products(exe) == 0
    got = exe.run(args)[0]
    want = InterpreterDevice().compile(module).run(args)[0]
    exact = np.tensordot(args[0].astype(np.float64), args[1].astype(np.float64), (lc, rc))
    tol = 1e-5 if dtype is D.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, exact, rtol=tol, atol=tol)


def test_larger_or_batched_products_stay_library_calls() -> None:
    # m*n*k one past the bound
    m, n, k = 2, 128, SMALL_PRODUCT // 256 + 1
    assert m * n * k > SMALL_PRODUCT
    big = _device().compile(_dot((m, k), (k, n), (1,), (0,), D.float32))
    assert _library_products(big) == 1
    at = _device().compile(_dot((m, SMALL_PRODUCT // 256), (SMALL_PRODUCT // 256, n), (1,), (0,),
                                D.float32))
    assert _library_products(at) == 0
    batched = _device().compile(_dot((2, 3, 4), (2, 4, 5), (2,), (1,), D.float32, (0,), (0,)))
    assert _library_products(batched) == 1
    ints = _device().compile(_dot((3, 4), (4, 5), (1,), (0,), D.int32))
    assert _library_products(ints) == 1
    # one row times a matrix (a decoder's token through a layer): its columns would be
    # read with a stride
    for lhs, rhs in (((1, 64), (64, 256)), ((64,), (64, 32))):
        row = _device().compile(_dot(lhs, rhs, (len(lhs) - 1,), (0,), D.float32))
        assert _library_products(row) == 1


def test_a_small_classifier_and_its_gradients_match_the_interpreter() -> None:
    """A CNN's last layer (32x64 @ 64x10 + b, cross-entropy) and the gradients of its
    input, weight and bias: three small products, all generated."""
    rng = np.random.default_rng(7)
    xs = rng.standard_normal((32, 64)).astype(np.float32)
    ws = rng.standard_normal((10, 64)).astype(np.float32)
    bs = rng.standard_normal(10).astype(np.float32)
    labels = rng.integers(0, 10, 32)

    def run() -> list:
        x, w, b = la.asarray(xs), la.asarray(ws), la.asarray(bs)
        with la.GradientTape() as tape:
            tape.watch([x, w, b])
            loss = la.nn.functional.cross_entropy(x @ w.T + b, la.asarray(labels))
        return [loss.numpy()] + [g.numpy() for g in tape.gradient(loss, [x, w, b])]
    got = run()
    with la.config.override(device="interpreter"):
        want = run()
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
