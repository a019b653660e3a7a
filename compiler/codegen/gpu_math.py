"""The CUDA math table: how each math function of the primitives is computed on a GPU.

LLVM's NVPTX back end cannot lower `llvm.exp`, `llvm.log`, `llvm.sin`, `llvm.pow` and
most other math intrinsics: it aborts the whole process (not a Python exception). So the
GPU never uses them. Each math op's stanza names one of (`MathCode.cuda`):

- an LLVM intrinsic that NVPTX does lower to one PTX instruction (`sqrt.rn`, `cvt.rmi`...);
- a function of NVIDIA's libdevice (`__nv_expf`...), linked in from `libdevice.10.bc` of
  the CUDA install (or of the `nvidia-cuda-nvcc` wheel) after the kernels are emitted;
- a short composite of those (`logistic`, `is_finite` below).

An op with no entry, or a libdevice function when no libdevice file is found, raises
`NotImplementedError` naming the op here, in Python, before any IR reaches LLVM.
`INTRINSICS_OK` lists the intrinsics known to lower; `check_intrinsics` refuses any other
declaration in a module about to be compiled, as a last guard.

Accuracy: libdevice's functions carry NVIDIA's documented bounds (CUDA Math API,
"Mathematical Functions", maximum ulp error over the full range, no flush-to-zero): float32
`expf` 2, `expm1f` 1, `logf` 1, `log1pf` 1, `sinf`/`cosf` 2, `tanf` 4, `asinf` 2,
`acosf` 2, `atanf` 2, `sinhf` 3, `coshf` 2, `tanhf` 2, `asinhf` 3, `acoshf` 4, `atanhf` 3,
`erff` 2, `powf` 4, `atan2f` 3, `hypotf` 3, `rsqrtf` 2; `sqrt` is IEEE-rounded (0 ulp); float64: 1-2
ulp. All are well inside the float32 tolerance the op tests use (rtol 1e-5, i.e. ~80 ulp)
when compared with NumPy. float16 and bfloat16 are computed in float32 and rounded once,
as the NumPy references do. These bounds are NVIDIA's; they have not been re-measured
against NumPy on a GPU from this code base yet (no GPU in the session that wrote it).
"""
from __future__ import annotations

import functools
import glob
import os
import sys
from typing import Any, Optional

import llvmlite.ir as ir

from ..hlo import dtypes as D
from ..primitive import PRIMITIVES, MathCode
from .math_table import MathTable

# Intrinsic families (name without the type suffix) that the NVPTX back end lowers for
# every integer and float type the emitters use. Checked by tests/test_ptx.py, one
# subprocess per family, so that a wrong entry fails a test instead of aborting a user.
INTRINSICS_OK = (
    "llvm.sqrt", "llvm.fabs", "llvm.floor", "llvm.ceil", "llvm.trunc", "llvm.rint",
    "llvm.nearbyint", "llvm.roundeven", "llvm.round", "llvm.copysign", "llvm.fma",
    "llvm.fmuladd", "llvm.minnum", "llvm.maxnum", "llvm.minimum", "llvm.maximum",
    "llvm.smax", "llvm.smin", "llvm.umax", "llvm.umin", "llvm.abs", "llvm.ctpop",
    "llvm.ctlz", "llvm.cttz", "llvm.fshl", "llvm.fshr", "llvm.memcpy", "llvm.memset",
    "llvm.lifetime", "llvm.assume", "llvm.expect", "llvm.fptosi.sat", "llvm.fptoui.sat",
    "llvm.nvvm",
)


def _entry(name: str) -> Optional[str]:
    """What op `name`'s stanza says for CUDA (`MathCode.cuda`), or None."""
    prim = PRIMITIVES.get(name)
    code = prim.math_code if prim is not None else None
    return code.cuda if code is not None else None


# the math ops a GPU lowers, from their stanzas
FLOAT_NAMES = tuple(sorted(n for n in PRIMITIVES if _entry(n) is not None))


def supported(name: str) -> bool:
    return _entry(name) is not None


def check(name: str, op: Optional[str] = None) -> None:
    """Raise NotImplementedError (in Python, before LLVM) if `name` cannot run on a GPU."""
    entry = _entry(name)
    if entry is None:
        raise NotImplementedError(
            f"{op or name}: no CUDA lowering for math function {name!r}; the GPU math table "
            f"(the stanzas' MathCode.cuda) has {', '.join(FLOAT_NAMES)}")
    kind = MathCode.kind(entry)
    if kind == "library" or (kind == "code" and getattr(MathCode.code(entry), "needs_libdevice",
                                                         False)):
        if libdevice_path() is None:
            raise NotImplementedError(
                f"{op or name}: math function {name!r} needs NVIDIA's libdevice, and no "
                f"libdevice.10.bc was found (set CUDA_HOME, install the CUDA toolkit, or "
                f"`pip install nvidia-cuda-nvcc`)")


@functools.lru_cache(maxsize=None)
def libdevice_path() -> Optional[str]:
    """libdevice.10.bc from $CUDA_HOME / $CUDA_PATH, /usr/local/cuda*, or a pip wheel."""
    roots = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", "")]
    roots += sorted(glob.glob("/usr/local/cuda*"), reverse=True)
    roots += [os.path.join(p, "nvidia", sub) for p in sys.path
              for sub in ("cuda_nvcc", "cu13", "cu12")]
    for root in roots:
        if not root:
            continue
        for found in glob.glob(os.path.join(root, "nvvm", "libdevice", "libdevice*.bc")):
            return found
    return None


def lower(builder: ir.IRBuilder, name: str, args: list, op: Optional[str] = None) -> ir.Value:
    """The value of math function `name` of `args`: LLVM float or double values, all of
    one type (half types are widened to float by the caller). is_finite returns an i1."""
    check(name, op)
    ty = args[0].type
    if not isinstance(ty, (ir.FloatType, ir.DoubleType)):
        raise NotImplementedError(f"{op or name}: GPU math on {ty} values; widen half "
                                  f"types to float first")
    entry = _entry(name)
    kind = MathCode.kind(entry)
    if kind == "intrinsic":
        return builder.call(_intrinsic(builder.module, entry, ty, len(args)), args)
    if kind == "code":
        return MathCode.code(entry)(builder, *args)
    return builder.call(_libdevice_fn(builder.module, entry, ty, len(args)), args)


class GPUMath(MathTable):
    """The elemental emitter's math table for NVPTX: asks `lower` for every name, so that
    nothing outside this file decides what reaches the NVPTX back end."""

    target = "cuda"
    field = "cuda"

    def emit(self, e, name: str, args: list, dtype: D.DType) -> ir.Value:
        return lower(e.b, name, args, op=name)

    def supported(self) -> set:
        return set(FLOAT_NAMES)


GPU_MATH = GPUMath()


def _suffix(ty: ir.Type) -> str:
    return "f64" if isinstance(ty, ir.DoubleType) else "f32"


def _intrinsic(module: ir.Module, base: str, ty: ir.Type, nargs: int) -> ir.Function:
    name = f"{base}.{_suffix(ty)}"
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ty, [ty] * nargs), name)


def _libdevice_fn(module: ir.Module, base: str, ty: ir.Type, nargs: int) -> ir.Function:
    name = "__nv_" + base + ("" if isinstance(ty, ir.DoubleType) else "f")
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(ty, [ty] * nargs), name)


def is_finite(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    # |x| < inf is false for inf and (ordered compare) for NaN
    fabs = _intrinsic(builder.module, "llvm.fabs", x.type, 1)
    return builder.fcmp_ordered("<", builder.call(fabs, [x]), ir.Constant(x.type, float("inf")))


def logistic(builder: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """1/(1+e^-x) for x >= 0 and e^x/(1+e^x) below: exp never overflows."""
    ty = x.type
    one = ir.Constant(ty, 1.0)
    fabs = _intrinsic(builder.module, "llvm.fabs", ty, 1)
    e = builder.call(_libdevice_fn(builder.module, "exp", ty, 1),
                     [builder.fneg(builder.call(fabs, [x]))])
    denom = builder.fadd(one, e)
    positive = builder.fcmp_ordered(">=", x, ir.Constant(ty, 0.0))
    return builder.select(positive, builder.fdiv(one, denom), builder.fdiv(e, denom))


logistic.needs_libdevice = True      # its exp is libdevice's


def check_intrinsics(module: Any, where: str = "kernel") -> None:
    """Refuse a module (llvmlite.ir.Module) that declares an intrinsic NVPTX may not lower.

    The emitters should never produce one (the table above is complete for every math op),
    so this fires only on an emitter bug; it fires in Python, which beats an abort."""
    for value in module.globals.values():
        if not isinstance(value, ir.Function) or not value.name.startswith("llvm."):
            continue
        if not any(value.name == ok or value.name.startswith(ok + ".") for ok in INTRINSICS_OK):
            raise NotImplementedError(
                f"{where}: LLVM intrinsic {value.name} has no NVPTX lowering known to be safe "
                f"(LLVM would abort the process); lower it through compiler/codegen/gpu_math.py")
