"""CUDA code generation checked without a GPU: PTX from the NVPTX target, assembled by
`ptxas` for sm_80 and sm_90, for every case of the primitive table and for random graphs.
Also: the GPU math table lowers or raises in Python, never aborts LLVM; cuBLAS argument
mapping and kernel-argument packing, checked against NumPy."""
from __future__ import annotations

import concurrent.futures
import ctypes
import subprocess
import sys
import textwrap
import warnings

import llvmlite.ir as ir
import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.primitive import PRIMITIVES
from lazyarray.compiler.codegen import gpu_math, nvptx, ptxas
from lazyarray.compiler.passes.pipeline import compile_plan
from lazyarray.compiler.graph.trace import capture
from lazyarray.devices.cuda import cuda as cuda_device

from primitive_cases import build_module, case_dtype_pairs
from ptx_marks import needs_libdevice, needs_ptxas

ARCHS = ("sm_80", "sm_90")
CHUNK = 300


def _assemble_all_archs(ptx: str, name: str) -> None:
    with concurrent.futures.ThreadPoolExecutor(len(ARCHS)) as pool:
        for f in [pool.submit(ptxas.assemble, ptx, arch, name) for arch in ARCHS]:
            f.result()


@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("chunk", range(-(-len(case_dtype_pairs()) // CHUNK)))
def test_primitive_cases_assemble(chunk: int) -> None:
    """Every (case, dtype) of the primitive table: its kernels, in one PTX module per
    chunk of cases (one ptxas run per architecture instead of one per case)."""
    pairs = case_dtype_pairs()[chunk * CHUNK:(chunk + 1) * CHUNK]
    mod = nvptx.new_module(f"cases{chunk}")
    kernels = 0
    unplanned = []
    for j, (case, dtype) in enumerate(pairs):
        try:
            plan = compile_plan(build_module(case, dtype))
        except Exception as e:   # the passes/fusion (not this target) cannot take it yet
            unplanned.append(f"{case.id}[{dtype.name}]: {type(e).__name__}: {e}")
            continue
        launches, _ = nvptx.emit_kernels(mod, plan, f"c{j}_")
        kernels += sum(isinstance(s, nvptx.LaunchSpec) for s in launches)
    if unplanned:
        warnings.warn("not planned by the compiler, so no PTX to check:\n" + "\n".join(unplanned))
    if not kernels:
        return
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    assert ptx.count(".entry ") == kernels
    _assemble_all_archs(ptx, f"cases{chunk}")


def _random_graph(rng: np.random.Generator) -> list:
    """A small random lazy graph: elementwise, broadcast, reshape, transpose, slice,
    concatenate, select and reductions over random shapes."""
    shape = tuple(int(n) for n in rng.integers(1, 40, size=rng.integers(1, 4)))
    dtype = [la.float32, la.float16, la.float64, la.int32][rng.integers(0, 4)]
    x = la.asarray(rng.standard_normal(shape).astype(D.to_dtype(dtype.name).np))
    y = la.asarray(rng.standard_normal(shape).astype(D.to_dtype(dtype.name).np))
    values = [x, y]
    for _ in range(int(rng.integers(2, 7))):
        a = values[int(rng.integers(0, len(values)))]
        b = values[int(rng.integers(0, len(values)))]
        if a.shape != b.shape:
            b = values[0] if values[0].shape == a.shape else a
        pick = int(rng.integers(0, 9))
        if pick == 0:
            values.append(a + b * 3)
        elif pick == 1:
            values.append(la.maximum(a, b) - a)
        elif pick == 2 and a.dtype.is_float if hasattr(a.dtype, "is_float") else False:
            values.append(la.exp(a) * b)
        elif pick == 3 and a.ndim >= 1:
            axis = int(rng.integers(0, a.ndim))
            values.append(a.sum(axis=axis))
        elif pick == 4 and a.ndim >= 2:
            values.append(la.permute_dims(a, tuple(reversed(range(a.ndim)))))
        elif pick == 5 and a.ndim >= 1 and a.shape[0] > 1:
            values.append(a[1:])
        elif pick == 6:
            values.append(la.where(a > b, a, b))
        elif pick == 7 and a.ndim >= 1:
            values.append(la.concat([a, b], axis=0))
        else:
            values.append(a.max() + a)
    outs = values[2:] or [x + y]
    return [outs[-1], outs[0]]


@needs_ptxas
@needs_libdevice
def test_random_graphs_assemble() -> None:
    rng = np.random.default_rng(1234)
    mod = nvptx.new_module("random")
    kernels = 0
    for g in range(40):
        tensors = _random_graph(rng)
        module = capture([t._node for t in tensors]).module(f"g{g}")
        launches, _ = nvptx.emit_kernels(mod, compile_plan(module), f"g{g}_")
        kernels += sum(isinstance(s, nvptx.LaunchSpec) for s in launches)
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    assert ptx.count(".entry ") == kernels > 0
    _assemble_all_archs(ptx, "random")


def _plan_of(tensors: list) -> object:
    return compile_plan(capture([t._node for t in tensors]).module("m"))


@needs_ptxas
@needs_libdevice
def test_reduction_strategies_and_launch_shapes() -> None:
    x = la.asarray(np.ones((64, 100), np.float32))
    cases = {"row": [x.sum(axis=1)], "column": [x.sum(axis=0)], "full": [(3 * x ** 2 + x).mean()],
             "argmax": [x.argmax(axis=1)], "layer_norm": [x.mean(axis=1), (x * x).mean(axis=1)]}
    for label, tensors in cases.items():
        prog = nvptx.emit_plan(_plan_of(tensors), "sm_80", label)
        ptxas.check(prog.ptx, ARCHS, label)
        specs = [s for s in prog.launches if isinstance(s, nvptx.LaunchSpec)]
        assert specs, label
        for s in specs:
            assert 1 <= s.block[0] * s.block[1] * s.block[2] <= 1024
            assert all(g >= 1 for g in s.grid)
    full = nvptx.emit_plan(_plan_of(cases["full"]), "sm_80")
    assert len(full.launches) == 1            # one pass; the atomic only elects the last block
    assert full.ptx.count("atom.") == 1
    assert full.scratch and all(v > 0 for v in full.scratch.values())
    column = nvptx.emit_plan(_plan_of(cases["column"]), "sm_80")
    assert column.launches[0].block == (32, 8, 1) and "bar.sync" in column.ptx
    row = nvptx.emit_plan(_plan_of(cases["row"]), "sm_80")
    assert "shfl.sync.bfly" in row.ptx
    # layer norm's two means over the same rows: one kernel with two outputs
    ln = nvptx.emit_plan(_plan_of(cases["layer_norm"]), "sm_80")
    assert len(ln.launches) == 1


@needs_ptxas
@needs_libdevice
def test_reduction_epilogues_of_another_shape_assemble() -> None:
    """A reduction kernel writes epilogue outputs whose shape differs from the reduced
    shape (keepdims, a 0-d result) at their own index: these once raised StopIteration
    (reshape rule) or IndexError (a 0-d store) in a batched sync on the GPU."""
    x = la.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    cases = {
        "any_bf16_keepdims": [la.any(x.astype(la.bfloat16), axis=1, keepdims=True)],
        "column_keepdims": [la.sum(x.reshape(6, 4), axis=0, keepdims=True),
                            la.max(x.reshape(6, 4), axis=0, keepdims=True)],
        "full_keepdims": [la.count_nonzero(x, keepdims=True), la.sum(x, keepdims=True)],
        "argmax_keepdims": [la.argmax(x, axis=1, keepdims=True), la.argmin(x, axis=0, keepdims=True)],
        "generic_keepdims": [la.sum(x, axis=(0, 2), keepdims=True)],
        "row_reshaped": [la.sum(x, axis=2).reshape(6)],
    }
    mod = nvptx.new_module("epilogues")
    for label, tensors in cases.items():
        nvptx.emit_kernels(mod, _plan_of(tensors), label + "_")
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    _assemble_all_archs(ptx, "epilogues")


@needs_ptxas
@needs_libdevice
def test_libdevice_is_parsed_only_for_functions_not_linked_before(monkeypatch) -> None:
    monkeypatch.setattr(nvptx, "_SUBSET", [frozenset(), b""])         # as a new process
    x = la.asarray(np.linspace(0.1, 1, 64, dtype=np.float32))
    nvptx.emit_plan(_plan_of([la.exp(x), la.log(x)]), "sm_80")        # both now kept
    parses = []
    real = nvptx._libdevice_bytes
    monkeypatch.setattr(nvptx, "_libdevice_bytes", lambda: parses.append(1) or real())
    again = nvptx.emit_plan(_plan_of([la.log(x) + la.exp(x)]), "sm_80")
    assert not parses
    ptxas.check(again.ptx, ARCHS, "again")
    nvptx.emit_plan(_plan_of([la.erf(x) * 2]), "sm_80")
    assert len(parses) == 1 and {"__nv_expf", "__nv_logf", "__nv_erff"} <= nvptx._SUBSET[0]


@needs_ptxas
@needs_libdevice
def test_float_remainder_is_libdevice_fmod_on_the_gpu() -> None:
    """NVPTX's own frem expansion returned x for fmod(inf, inf) (NumPy: nan; the H100 run
    failed remainder[special values] for float16) and loses large quotients."""
    x = la.asarray(np.array([np.inf, 1e30, 5.5], np.float32))
    y = la.asarray(np.array([np.inf, 3.0, -2.0], np.float32))
    mod = nvptx.new_module("fmod")
    nvptx.emit_kernels(mod, _plan_of([la.remainder(x, y),
                                      la.remainder(x.astype(la.float16), y.astype(la.float16)),
                                      la.remainder(x.astype(la.float64), y.astype(la.float64))]))
    text = str(mod)
    assert '@"__nv_fmodf"(' in text and '@"__nv_fmod"(' in text and "frem " not in text
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    _assemble_all_archs(ptx, "fmod")


# ---- math: lowers through libdevice, or raises in Python ------------------------------

@needs_ptxas
@needs_libdevice
@pytest.mark.parametrize("ty", [ir.FloatType(), ir.DoubleType()], ids=["f32", "f64"])
def test_every_gpu_math_function_assembles(ty: ir.Type) -> None:
    mod = nvptx.new_module("math")
    for name in gpu_math.FLOAT_NAMES:
        fn, b = nvptx.new_kernel(mod, f"m_{name}", 1)
        x = b.load(b.gep(fn.args[0], [nvptx.c64(0)], source_etype=ty), typ=ty)
        y = gpu_math.lower(b, name, [x] * PRIMITIVES[name].arity)
        if y.type == nvptx.I1:
            y = b.uitofp(y, ty)
        b.store(y, b.gep(fn.args[0], [nvptx.c64(1)], source_etype=ty))
        b.ret_void()
    ptx, _ = nvptx.to_ptx(mod, "sm_80")
    assert "__nv_" not in ptx.split(".entry")[0] or ".func" in ptx   # linked, not external
    ptxas.check(ptx, ARCHS, "math")


def test_unknown_math_raises_before_llvm() -> None:
    mod = nvptx.new_module("bad")
    fn, b = nvptx.new_kernel(mod, "k", 1)
    with pytest.raises(NotImplementedError, match="lgamma"):
        gpu_math.lower(b, "lgamma", [ir.Constant(ir.FloatType(), 1.0)])


def test_missing_libdevice_raises_naming_the_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_math, "libdevice_path", lambda: None)
    with pytest.raises(NotImplementedError, match="exponential.*libdevice"):
        gpu_math.check("exponential")
    gpu_math.check("sqrt")              # one PTX instruction: needs no libdevice


def test_intrinsic_guard_refuses_what_nvptx_cannot_lower() -> None:
    mod = nvptx.new_module("guard")
    fn, b = nvptx.new_kernel(mod, "k", 1)
    f32 = ir.FloatType()
    exp = ir.Function(mod, ir.FunctionType(f32, [f32]), "llvm.exp.f32")
    b.call(exp, [ir.Constant(f32, 1.0)])
    b.ret_void()
    with pytest.raises(NotImplementedError, match="llvm.exp.f32"):
        nvptx.to_ptx(mod)


def test_allowed_intrinsics_really_lower() -> None:
    """Each allow-listed family, in a child process: an LLVM abort fails this test rather
    than a user's program."""
    script = textwrap.dedent("""
        import llvmlite.ir as ir
        from lazyarray.compiler.codegen import nvptx
        F = {"f32": ir.FloatType(), "f64": ir.DoubleType()}
        I = {f"i{w}": ir.IntType(w) for w in (8, 16, 32, 64)}
        unary_f = ["sqrt", "fabs", "floor", "ceil", "trunc", "rint", "nearbyint",
                   "roundeven", "round"]
        binary_f = ["copysign", "minnum", "maxnum", "minimum", "maximum"]
        binary_i = ["smax", "smin", "umax", "umin"]
        for name, tys, n in ([(u, F, 1) for u in unary_f] + [(u, F, 2) for u in binary_f]
                             + [("fma", F, 3), ("fmuladd", F, 3)]
                             + [(u, I, 2) for u in binary_i] + [("ctpop", I, 1)]):
            for suffix, ty in tys.items():
                mod = nvptx.new_module("t")
                fn, b = nvptx.new_kernel(mod, "k", 1)
                f = ir.Function(mod, ir.FunctionType(ty, [ty] * n), f"llvm.{name}.{suffix}")
                x = b.load(fn.args[0], typ=ty)
                b.store(b.call(f, [x] * n), fn.args[0])
                b.ret_void()
                print("lowering", name, suffix, flush=True)
                nvptx.to_ptx(mod)
        for kind in ("fptosi", "fptoui"):
            for fs, fty in F.items():
                for isuf, ity in I.items():
                    mod = nvptx.new_module("t")
                    fn, b = nvptx.new_kernel(mod, "k", 1)
                    f = ir.Function(mod, ir.FunctionType(ity, [fty]), f"llvm.{kind}.sat.{isuf}.{fs}")
                    b.store(b.call(f, [b.load(fn.args[0], typ=fty)]), fn.args[0])
                    b.ret_void()
                    nvptx.to_ptx(mod)
        print("all lowered")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0 and "all lowered" in proc.stdout, proc.stdout[-500:] + proc.stderr[-2000:]


def test_ptxas_error_carries_its_message() -> None:
    if ptxas.find_ptxas() is None:
        with pytest.raises(FileNotFoundError, match="ptxas"):
            ptxas.assemble(".version 7.8\n")
        return
    with pytest.raises(ptxas.PtxasError, match="sm_80"):
        ptxas.assemble(".version 7.8\n.target sm_80\n.address_size 64\nnot ptx;\n", "sm_80")


def test_arch_and_ptx_version() -> None:
    assert nvptx.arch_of((8, 0)) == "sm_80"
    assert nvptx.arch_of((9, 0)) == "sm_90"
    assert nvptx.arch_of((8, 9)) == "sm_89"
    assert nvptx.arch_of((8, 7)) == "sm_86"
    with pytest.raises(ValueError, match="sm_11"):
        nvptx.target_machine("sm_11")


def test_emitting_ptx_leaves_the_cpu_target_alone() -> None:
    import llvmlite.binding as llvm
    nvptx.emit_plan(_plan_of([la.asarray(np.ones(8, np.float32)) * 2]), "sm_80")
    assert llvm.get_process_triple() != nvptx.TRIPLE
    host = llvm.Target.from_triple(llvm.get_process_triple())
    assert "nvptx" not in host.name.lower()


# ---- runtime pieces that need no GPU --------------------------------------------------

def _column_major_gemm(g: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """What cuBLAS computes from gemm_arguments over flat row-major buffers (a = rhs
    buffer, b = lhs buffer), written out with NumPy."""
    out = np.zeros(g["batch"] * g["stride_c"], a.dtype)
    for i in range(g["batch"]):
        def mat(buf, stride, rows, cols, ld, trans):
            flat = buf[i * stride:]
            if trans:
                rows, cols = cols, rows
            m = np.array([[flat[r + c * ld] for c in range(cols)] for r in range(rows)])
            return m.T if trans else m
        A = mat(a, g["stride_a"], g["m"], g["k"], g["lda"], g["transa"] == cuda_device.OP_T)
        B = mat(b, g["stride_b"], g["k"], g["n"], g["ldb"], g["transb"] == cuda_device.OP_T)
        C = A @ B
        for r in range(g["m"]):
            for c in range(g["n"]):
                out[i * g["stride_c"] + r + c * g["ldc"]] = C[r, c]
    return out


@pytest.mark.parametrize("lhs_t,rhs_t,batch", [(False, False, 1), (True, False, 1),
                                               (False, True, 2), (True, True, 3)])
def test_cublas_arguments_match_numpy(lhs_t: bool, rhs_t: bool, batch: int) -> None:
    rng = np.random.default_rng(0)
    m, k, n = 3, 4, 5
    lhs = rng.standard_normal((batch, k, m) if lhs_t else (batch, m, k))
    rhs = rng.standard_normal((batch, n, k) if rhs_t else (batch, k, n))

    class Ins:
        dtype = D.float64
        attrs = {"lhs_batch": (0,), "rhs_batch": (0,),
                 "lhs_contracting": (1,) if lhs_t else (2,),
                 "rhs_contracting": (2,) if rhs_t else (1,)}

    g = cuda_device.gemm_arguments(Ins, lhs.shape, rhs.shape)
    want = np.matmul(np.swapaxes(lhs, 1, 2) if lhs_t else lhs, np.swapaxes(rhs, 1, 2) if rhs_t else rhs)
    got = _column_major_gemm(g, rhs.reshape(-1), lhs.reshape(-1)).reshape(batch, m, n)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_cublas_refuses_layouts_it_cannot_read() -> None:
    class Ins:
        dtype = D.float32
        attrs = {"lhs_batch": (1,), "rhs_batch": (0,), "lhs_contracting": (2,),
                 "rhs_contracting": (1,)}
    assert cuda_device.gemm_arguments(Ins, (3, 2, 4), (2, 4, 5)) is None


def test_kernel_arguments_are_pointers_to_64bit_values() -> None:
    packed = cuda_device.PackedArgs([0x1000, 0xDEADBEEF00])
    slots = (ctypes.c_void_p * 2).from_address(packed.address)
    assert [ctypes.c_uint64.from_address(s).value for s in slots] == [0x1000, 0xDEADBEEF00]


def test_cuda_without_a_gpu_says_what_is_missing() -> None:
    """'cuda' is always a known name; where no GPU is usable, making it says why (the GPU,
    the driver or the `cuda` extra), not "unknown device"."""
    from lazyarray import runtime
    assert "cuda" in runtime._FACTORIES
    if cuda_device.available():
        pytest.skip(reason="a CUDA device is usable here")
    with pytest.raises(RuntimeError, match="'cuda' is not available: .*(GPU|driver|extra)"):
        la.asarray(np.ones(3, np.float32)).to("cuda")
