"""ROW kernels (compiler/planning/row_fusion.py): row normalizations compile to one kernel on the
CPU and match the interpreter, over several outer and inner shapes, dtypes, values that
leave per row and per element, several phases, and the row-sized scratch buffers."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.graph import builders as A
from lazyarray.compiler.codegen import nvptx, ptxas, stream_stores
from lazyarray.compiler.primitive import apply
from lazyarray.compiler.passes.pipeline import compile_plan
from lazyarray.compiler.planning.plan import LOOP, ROW
from lazyarray.compiler.planning.row_fusion import (MAX_ROW_BYTES, reused_across_passes,
                                                    row_schedule)
from lazyarray.compiler.graph.trace import capture
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpretedExecutable
from lazyarray.lift import lift

_CPU = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})


def _t(*shape, dtype=np.float32, seed=0):
    return la.asarray(np.random.default_rng(seed).standard_normal(shape).astype(dtype))


def _softmax(x, axis=-1):
    e = la.exp(x - la.max(x, axis=axis, keepdims=True))
    return e / la.sum(e, axis=axis, keepdims=True)


def compiled_vs_interpreter(*tensors, rtol=1e-5, atol=1e-6):
    """Compile on the CPU, run, compare with the interpreter; return the plan."""
    cap = capture([t._node for t in tensors])
    module = cap.module()
    args = [np.asarray(a) for a in cap.args]
    want = InterpretedExecutable(module).run(args)
    exe = _CPU.compile(module)
    got = [_CPU.get(b) for b in exe.run([_CPU.put(a) for a in args])]
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=rtol, atol=atol)
    return compile_plan(module)


def _kinds(plan) -> list:
    return [k.kind for k in plan.kernels]


@pytest.mark.parametrize("shape,axes", [((64, 300), (1,)), ((3, 5, 70), (2,)),
                                        ((4, 6, 8), (1, 2)), ((1, 40), (1,)), ((50,), (0,))],
                         ids=["rows", "two-outer", "two-inner", "one-row", "vector"])
def test_softmax_is_one_kernel_and_exact(shape, axes):
    plan = compiled_vs_interpreter(_softmax(_t(*shape), axis=axes))
    assert _kinds(plan) == [ROW]


def test_layer_norm_with_affine_and_log_softmax():
    x, w, b = _t(33, 96), _t(96, seed=1), _t(96, seed=2)
    plan = compiled_vs_interpreter(F.layer_norm(x, (96,), w, b), rtol=1e-4, atol=1e-5)
    assert _kinds(plan) == [ROW]
    plan = compiled_vs_interpreter(F.log_softmax(x, axis=-1))
    assert _kinds(plan) == [ROW]


def test_row_values_and_row_wide_values_both_leave_the_kernel():
    x = _t(20, 50)
    m = la.max(x, axis=1)                 # a reduction output (no keepdims)
    s = la.sum(la.exp(x - m[:, None]), axis=1, keepdims=True)
    lse = la.log(s) + m[:, None]          # a row value computed after phase 2
    plan = compiled_vs_interpreter(m, lse, x - lse)
    assert _kinds(plan) == [ROW]
    outputs = plan.kernels[0].outputs
    shapes = sorted(plan.module.instructions[o].shape for o in outputs)
    assert (20, 50) in shapes and any(s != (20, 50) for s in shapes)


def test_three_phases():
    x = _t(16, 64)
    mu = la.mean(x, axis=1, keepdims=True)
    d = x - mu
    var = la.mean(d * d, axis=1, keepdims=True)
    z = d / la.sqrt(var + 1e-5)
    plan = compiled_vs_interpreter(z / la.max(la.abs(z), axis=1, keepdims=True), rtol=1e-4)
    assert _kinds(plan) == [ROW]
    kern = plan.kernels[0]
    sched, _ = row_schedule(plan.module, set(kern.members), ((16, 64), (1,)))
    assert len(sched.phases) == 3


def test_exp_is_kept_for_the_row_not_recomputed():
    plan = compile_plan(capture([_softmax(_t(8, 32))._node]).module())
    kern = plan.kernels[0]
    sched, _ = row_schedule(plan.module, set(kern.members), ((8, 32), (1,)))
    reused = reused_across_passes(plan.module, set(kern.members), sched, kern.outputs)
    assert [plan.module.instructions[p].op for p in reused] == ["exponential"]
    assert list(reused.values()) == [1]     # first needed by the sum's pass
    text = _CPU.stage(capture([_softmax(_t(8, 32))._node]).module("m"), "llvm")
    assert text.count("alloca") == 1


def test_a_value_read_at_another_row_is_not_kept():
    x = _t(8, 32)
    e = la.exp(x)
    # flip(e) reads e at other rows: e must be recomputed there, not read from the scratch
    y = e / la.sum(e, axis=1, keepdims=True) + la.flip(e, axis=0)
    compiled_vs_interpreter(y)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_dtypes(dtype):
    x = _t(12, 40, dtype=dtype)
    tol = 2e-3 if dtype == np.float16 else 1e-12
    plan = compiled_vs_interpreter(_softmax(x), F.layer_norm(x, (40,)), rtol=tol, atol=tol)
    assert ROW in _kinds(plan)


def test_integer_row_reductions():
    x = la.asarray(np.random.default_rng(0).integers(-50, 50, (9, 17)).astype(np.int32))
    plan = compiled_vs_interpreter(x - la.max(x, axis=1, keepdims=True)
                                   + la.sum(x, axis=1, keepdims=True))
    assert _kinds(plan) == [ROW]


def test_nan_and_inf_propagate_like_the_reference():
    a = np.random.default_rng(0).standard_normal((6, 16)).astype(np.float32)
    a[1, 3] = np.nan
    a[2, 5] = np.inf
    a[3, :] = -np.inf
    with np.errstate(all="ignore"):
        compiled_vs_interpreter(_softmax(la.asarray(a)))


def test_rows_split_over_threads_match():
    # enough rows that the runtime splits the kernel into several ranges
    plan = compiled_vs_interpreter(_softmax(_t(2048, 64)))
    assert _kinds(plan) == [ROW]


def test_long_rows_are_not_row_kernels():
    n = MAX_ROW_BYTES // 4 + 16
    plan = compiled_vs_interpreter(_softmax(_t(2, n)))
    assert ROW not in _kinds(plan)


def test_ptx_row_kernel_is_one_launch_per_row_kernel():
    plan = compile_plan(capture([_softmax(_t(8, 32))._node]).module())
    mod = nvptx.new_module("rows")
    launches, scratch = nvptx.emit_kernels(mod, plan)
    assert len(launches) == 1 and not scratch
    assert launches[0].block == (nvptx.BLOCK, 1, 1)
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    assert "shfl.sync.bfly" in ptx


@pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas is not installed")
def test_ptx_row_kernels_assemble():
    x, w = _t(8, 40), _t(40, seed=1)
    mod = nvptx.new_module("rows")
    tensors = [_softmax(x), F.layer_norm(x, (40,), w, w), F.log_softmax(_t(3, 4, 40), -1),
               _softmax(x.astype(la.float16))]
    for j, t in enumerate(tensors):
        plan = compile_plan(capture([t._node]).module())
        assert ROW in _kinds(plan)
        nvptx.emit_kernels(mod, plan, f"r{j}_")
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    ptxas.check(ptx, ["sm_80"], "row kernels")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_division_by_a_row_value_is_the_correctly_rounded_quotient(dtype):
    """A row's last pass divides by a row value through its reciprocal and one
    correction (compiler/codegen/row_division.py): every quotient equals NumPy's division
    bit for bit, for divisors in the fast range and outside it (tiny, huge, subnormal,
    zero, infinite, NaN: such rows take the divides), and for infinite, NaN, zero, huge
    and tiny dividends."""
    rng = np.random.default_rng(5)
    rows, n = 24, 203
    info = np.finfo(dtype)
    a = (rng.standard_normal((rows, n)) * 10.0 ** rng.integers(-3, 4, (rows, 1)))
    a = a.astype(dtype)
    a[:, :8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, info.max, -info.max, info.tiny]
    a[:, 8] = info.smallest_subnormal * 7
    d = np.abs(rng.standard_normal((rows, n))).astype(dtype) + dtype(0.5)
    d[1, :] = 1 / 3                                      # quotients overflow past max
    d[2, :] = info.tiny * 3                              # tiny divisor
    d[3, :] = info.max / 4                               # huge divisor
    d[4, :] = 0.0                                        # zero divisor
    d[5, 7] = np.inf
    d[6, 9] = np.nan
    d[7, :] = info.smallest_subnormal * 5
    d[8, :] = 3.0                                        # subnormal quotients
    with np.errstate(all="ignore"):
        d[9, :] = info.max * 0.999 / np.abs(a[9, :]).max()
    got = np.asarray(la.asarray(a) / la.max(la.asarray(d), axis=1, keepdims=True))
    with np.errstate(all="ignore"):
        want = a / np.max(d, axis=1, keepdims=True)
    # subnormal quotients: within one unit of their spacing (documented)
    with np.errstate(invalid="ignore"):
        near = (np.abs(want) < info.tiny) & (np.abs(got.astype(np.float64) - want) <=
                                             info.smallest_subnormal)
    same = (got == want) | (np.isnan(got) & np.isnan(want)) | near
    assert same.all(), f"rows {np.unique(np.argwhere(~same)[:, 0])} differ from NumPy"
    assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()
    assert (got == want)[np.abs(want) >= info.tiny].all()


# ---- large outputs streamed with non-temporal stores (compiler/codegen/stream_stores.py) ----

_X86 = stream_stores.applies(stream_stores.STREAM_MIN_BYTES, 64)
needs_streaming = pytest.mark.skipif(not _X86, reason="non-temporal stores are emitted on x86 only")


@pytest.fixture
def stream_all(monkeypatch):
    """Every ROW kernel streams its row-space outputs, whatever their size."""
    monkeypatch.setattr(stream_stores, "STREAM_MIN_BYTES", 0)


@needs_streaming
@pytest.mark.parametrize("shape,dtype", [((37, 20), np.float32), ((9, 1024), np.float32),
                                         ((5, 24), np.float64), ((6, 40), np.float16),
                                         ((3, 4, 36), np.float32)],
                         ids=["80-byte-rows", "4k-rows", "f64", "f16", "two-outer"])
def test_streamed_rows_match_the_interpreter(stream_all, shape, dtype):
    x = _t(*shape, dtype=dtype)
    z = x - la.max(x, axis=-1, keepdims=True)
    lse = la.log(la.sum(la.exp(z), axis=-1, keepdims=True))
    tol = 2e-3 if dtype == np.float16 else 1e-5
    # two row-space outputs (two row buffers) and one row value
    plan = compiled_vs_interpreter(z - lse, la.exp(z - lse), lse, rtol=tol, atol=tol)
    assert _kinds(plan) == [ROW]
    module = capture([(z - lse)._node, la.exp(z - lse)._node]).module("m")
    assert "!nontemporal" in _CPU.stage(module, "llvm")


@needs_streaming
def test_streamed_rows_at_every_alignment_of_the_output(stream_all):
    """The kernel called on outputs at each 4-byte offset of a 64-byte line: rows 16-byte
    aligned stream their whole lines (the partial lines at either end stored plainly);
    others are stored plainly; every element is written, none past the row."""
    rows, n = 7, 52                         # 208-byte rows: lines cut at both ends
    x = _t(rows, n)
    module = capture([_softmax(x)._node]).module("m")
    exe = _CPU.compile(module)
    (step,) = [s for s in exe.steps if hasattr(s, "fn")]
    fn = exe._fns[step.fn]
    src = np.ascontiguousarray(np.asarray(x))
    want = InterpretedExecutable(module).run([src])[0]
    out_pos = exe.outputs[0]
    for offset in range(0, 64, 4):
        raw = np.full(rows * n * 4 + 192, 0xAB, np.uint8)
        skip = (-raw.ctypes.data) % 64 + offset
        out = raw[skip:skip + rows * n * 4].view(np.float32).reshape(rows, n)
        ptrs = [out.ctypes.data if p == out_pos else src.ctypes.data for p in step.args]
        fn(*ptrs, 0, rows)
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)
        assert (raw[:skip] == 0xAB).all() and (raw[skip + rows * n * 4:] == 0xAB).all()


def test_small_outputs_are_not_streamed():
    module = capture([_softmax(_t(64, 256))._node]).module("m")
    assert "nontemporal" not in _CPU.stage(module, "llvm")


def test_layer_norm_gradient_pads_a_row_value_inside_the_row_kernel():
    """layer_norm's shift by the row's first element has a gradient that pads a row value
    back over the row: a row-wide value of the row kernel, not a loop of its own."""
    x, w, b, g = _t(24, 40), _t(40, seed=1), _t(40, seed=2), _t(24, 40, seed=3)
    grads = la.grad(lambda x, w, b: (F.layer_norm(x, (40,), w, b) * g).sum(),
                    argnums=(0, 1, 2))(x, w, b)
    plan = compiled_vs_interpreter(*grads, rtol=1e-4, atol=1e-5)
    assert _kinds(plan).count(ROW) == 1 and LOOP not in _kinds(plan)


def test_a_pad_over_other_rows_is_not_row_wide():
    x = _t(6, 16)
    m = la.sum(x, axis=1, keepdims=True)                       # (6, 1)
    # row r reads row r - 1: padded over the outer dimension too
    shifted = lift(lambda a: apply("pad", a, A.const(0.0, a.dtype), edge_padding_low=(1, 0),
                                   edge_padding_high=(-1, 15), interior_padding=(0, 0)))(m)
    plan = compiled_vs_interpreter(x - m + shifted)
    assert ROW not in _kinds(plan)


@pytest.mark.skipif(ptxas.find_ptxas() is None, reason="ptxas is not installed")
def test_ptx_row_kernel_with_a_padded_row_value_assembles():
    x, w, g = _t(8, 40), _t(40, seed=1), _t(8, 40, seed=3)
    dx = la.grad(lambda x: (F.layer_norm(x, (40,), w, w) * g).sum())(x)
    plan = compile_plan(capture([dx._node]).module())
    assert ROW in _kinds(plan) and LOOP not in _kinds(plan)
    mod = nvptx.new_module("rows")
    nvptx.emit_kernels(mod, plan, "pad_")
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    ptxas.check(ptx, ["sm_80"], "row kernel with a padded row value")
