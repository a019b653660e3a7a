"""`lazyarray.torch` against PyTorch itself, name by name (in the spirit of PyTorch's
OpInfo): each case is one call written once, `fn(M, *inputs)`, run with `M = torch` on
torch tensors and with `M = lazyarray.torch` on lazyarray tensors made from the same NumPy
arrays, over several shapes and dtypes; results (tensors, tuples of them, named pairs,
Python bools and numbers) must agree in value, shape and dtype. Every public name of the
namespace has a case here or an entry in NOT_VALUE_COMPARABLE saying how else it is
checked. Skipped with the reason where torch is not installed.
"""
from __future__ import annotations

import dataclasses
import math
import itertools
from typing import Any, Callable, Sequence

import numpy as np
import pytest

import lazyarray
import lazyarray.torch as lt

torch = pytest.importorskip("torch", reason="PyTorch is not installed: the parity suite "
                                            "compares lazyarray.torch against it (pip install torch)")

F32, F64, I64, I32, B = np.float32, np.float64, np.int64, np.int32, np.bool_
FLOATS = (F32, F64)
NUMERIC = (F32, F64, I32, I64)


@dataclasses.dataclass
class Case:
    name: str                       # the public name it covers ("nn.functional.relu", ...)
    fn: Callable                    # fn(M, *inputs) with M the torch module in use
    shapes: Sequence = (((3, 4),),)  # input shapes, one tuple per variant
    dtypes: Sequence = ()           # default: float32, and float64 too where gradients are checked
    domain: str = "real"            # real, positive, unit, int, bool, distinct
    tol: float = 1.0
    label: str = ""
    grad: bool = False              # also compare d sum(result) / d inputs (float inputs)

    def __post_init__(self) -> None:
        if not self.dtypes:
            self.dtypes = FLOATS if self.grad else (F32,)

    @property
    def id(self) -> str:
        return self.name + (f"[{self.label}]" if self.label else "")


def _draw(rng, shape, dtype, domain):
    if domain == "bool" or dtype is B:
        return rng.random(shape) < 0.5
    if domain == "index":
        return rng.integers(0, 3, shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        lo = 1 if domain == "positive" else -5
        return rng.integers(lo, 6, shape).astype(dtype)
    if domain == "positive":
        return rng.uniform(0.5, 2.5, shape).astype(dtype)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape).astype(dtype)
    if domain == "distinct":
        n = int(np.prod(shape))
        return (rng.permutation(n).reshape(shape) * 0.5 - n / 4).astype(dtype)
    if domain == "complex":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _to_numpy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().numpy()
    if isinstance(x, lazyarray.Tensor):
        return x.numpy()
    if isinstance(x, (tuple, list)):
        return type(x)(_to_numpy(e) for e in x) if not hasattr(x, "_fields") else \
            tuple(_to_numpy(e) for e in x)
    return x


def _agree(ours: Any, theirs: Any, tol: float, where: str) -> None:
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, (tuple, list)), f"{where}: PyTorch gives a tuple, we {type(ours)}"
        assert len(ours) == len(theirs), f"{where}: {len(ours)} results, PyTorch {len(theirs)}"
        if hasattr(theirs, "_fields") and hasattr(ours, "_fields"):
            assert tuple(ours._fields)[:2] == tuple(theirs._fields)[:2], where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _agree(a, b, tol, f"{where}[{i}]")
        return
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, lazyarray.Tensor), f"{where}: got {type(ours).__name__}"
        a, b = ours.numpy(), theirs.detach().resolve_conj().numpy()
        assert a.shape == b.shape, f"{where}: shape {a.shape}, PyTorch {b.shape}"
        assert a.dtype == b.dtype, f"{where}: dtype {a.dtype}, PyTorch {b.dtype}"
        if a.dtype.kind in "fc":
            rtol = {np.float32: 2e-5, np.float64: 1e-10, np.complex64: 2e-5,
                    np.complex128: 1e-10, np.float16: 2e-3}[a.dtype.type] * tol
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True,
                                       err_msg=where)
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
        return
    assert type(ours) is type(theirs) or (isinstance(ours, (int, float)) and
                                          isinstance(theirs, (int, float))), \
        f"{where}: {type(ours).__name__} vs PyTorch's {type(theirs).__name__}"
    if isinstance(theirs, float):
        assert abs(ours - theirs) <= 1e-5 * tol * max(1.0, abs(theirs)), where
    else:
        assert ours == theirs, f"{where}: {ours!r}, PyTorch {theirs!r}"


def run_case(case: Case, seed: int = 0) -> None:
    for k, (shapes, dtype) in enumerate(itertools.product(case.shapes, case.dtypes)):
        rng = np.random.default_rng(seed + k)
        arrays = [_draw(rng, s, dtype, case.domain) for s in shapes]
        where = f"{case.id} shapes={list(shapes)} dtype={np.dtype(dtype).name}"
        want_grad = case.grad and np.dtype(dtype).kind == "f"
        tins = [torch.from_numpy(a.copy()).requires_grad_(want_grad) for a in arrays]
        lins = [lazyarray.asarray(a.copy(), requires_grad=want_grad) for a in arrays]
        try:
            theirs = case.fn(torch, *tins)
        except Exception as e:            # PyTorch refuses: so must we, with a clear error
            with pytest.raises((ValueError, TypeError, IndexError, RuntimeError,
                                NotImplementedError)):
                ours = case.fn(lt, *lins)
                _to_numpy(ours)
            continue
        ours = case.fn(lt, *lins)
        _agree(ours, theirs, case.tol, where)
        if want_grad:
            _agree_grads(case, tins, lins, theirs, ours, where)


def _first(x: Any) -> Any:
    return x[0] if isinstance(x, (tuple, list)) else x


def _agree_grads(case, tins, lins, theirs, ours, where) -> None:
    t_out, l_out = _first(theirs), _first(ours)
    (t_out.double() * torch.linspace(0.5, 1.5, t_out.numel(), dtype=torch.float64)
     .reshape(t_out.shape)).sum().backward()
    w = lazyarray.asarray(np.linspace(0.5, 1.5, int(np.prod(l_out.shape)))
                          .reshape(tuple(l_out.shape)))
    (l_out.astype(lazyarray.float64) * w).sum().backward()
    for i, (t, l) in enumerate(zip(tins, lins)):
        tg = t.grad
        lg = l.grad
        if tg is None:
            assert lg is None or np.all(lg.numpy() == 0), f"{where}: grad {i}"
            continue
        _agree(lg, tg, case.tol * 4, f"{where} grad of input {i}")


# ---- the table --------------------------------------------------------------------------

CASES: list = []


def add(*cases: Case) -> None:
    CASES.extend(cases)


UN = (((3, 4),), ((5,),), ((),), ((2, 0, 3),))
BIN = (((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((4,), ()))

for _n in ["abs", "absolute", "exp", "expm1", "sin", "cos", "tanh", "sigmoid", "relu", "neg",
           "negative", "floor", "ceil", "trunc", "sign", "square", "atan", "arctan", "sinh",
           "cosh", "asinh", "erf", "frac"]:
    add(Case(_n, lambda M, x, _n=_n: getattr(M, _n)(x), UN, tol=4,
             grad=_n not in ("floor", "ceil", "trunc", "sign", "frac")))
for _n, _dom in [("log", "positive"), ("log2", "positive"), ("log10", "positive"),
                 ("log1p", "positive"), ("sqrt", "positive"), ("rsqrt", "positive"),
                 ("reciprocal", "positive"), ("tan", "unit"), ("asin", "unit"),
                 ("arcsin", "unit"), ("acos", "unit"), ("arccos", "unit"), ("atanh", "unit")]:
    add(Case(_n, lambda M, x, _n=_n: getattr(M, _n)(x), UN, domain=_dom, tol=4, grad=True))
add(Case("acosh", lambda M, x: M.acosh(x + 2), UN, domain="positive", tol=4, grad=True),
    Case("round", lambda M, x: M.round(x * 3), UN),
    Case("round", lambda M, x: M.round(x * 30, decimals=1), UN, label="decimals", dtypes=(F64,)),
    Case("signbit", lambda M, x: M.signbit(x), UN),
    Case("isnan", lambda M, x: M.isnan(M.log(x)), UN), Case("isinf", lambda M, x: M.isinf(1 / (x * 0)), UN),
    Case("isfinite", lambda M, x: M.isfinite(M.log(x)), UN),
    Case("tan", lambda M, x: M.tan(x), UN[:2], dtypes=(np.complex64, np.complex128),
         domain="complex", tol=8, label="complex"),
    Case("angle", lambda M, x: M.angle(x), UN[:2], dtypes=(np.complex64, np.complex128),
         domain="complex", tol=4),
    Case("angle", lambda M, x: M.angle(x), UN[:2], label="real"),
    Case("real", lambda M, x: M.real(x), UN[:2], dtypes=(np.complex64, np.complex128),
         domain="complex"),
    Case("imag", lambda M, x: M.imag(x), UN[:2], dtypes=(np.complex64, np.complex128),
         domain="complex"),
    Case("conj", lambda M, x: M.conj(x), UN[:2], dtypes=(np.complex64,), domain="complex"))

for _n in ["add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide",
           "maximum", "minimum", "atan2", "arctan2", "hypot", "logaddexp", "eq", "ne", "lt",
           "le", "gt", "ge", "greater", "less", "greater_equal", "less_equal", "not_equal"]:
    add(Case(_n, lambda M, a, b, _n=_n: getattr(M, _n)(a, b), BIN, tol=4,
             grad=_n in ("add", "sub", "mul", "div", "atan2", "hypot", "logaddexp")))
add(Case("add", lambda M, a, b: M.add(a, b, alpha=-0.5), BIN, label="alpha", grad=True),
    Case("sub", lambda M, a, b: M.sub(a, b, alpha=2), BIN, label="alpha"),
    Case("rsub", lambda M, a, b: M.rsub(a, b), BIN),
    Case("div", lambda M, a, b: M.div(a, b, rounding_mode="floor"), BIN, dtypes=NUMERIC,
         domain="positive", label="floor"),
    Case("div", lambda M, a, b: M.div(a - 3, b, rounding_mode="trunc"), BIN, dtypes=NUMERIC,
         domain="positive", label="trunc"),
    Case("remainder", lambda M, a, b: M.remainder(a - 1, b), BIN, dtypes=NUMERIC,
         domain="positive", tol=8),
    Case("fmod", lambda M, a, b: M.fmod(a - 1, b), BIN, dtypes=NUMERIC, domain="positive",
         tol=8),
    Case("pow", lambda M, a, b: M.pow(a, b), BIN, domain="positive", tol=8, grad=True),
    Case("lerp", lambda M, a, b: M.lerp(a, b, 0.3), BIN[:1], grad=True),
    Case("heaviside", lambda M, a, b: M.heaviside(M.round(a), b), BIN[:1]),
    Case("logical_and", lambda M, a, b: M.logical_and(a > 0, b > 0), BIN),
    Case("logical_or", lambda M, a, b: M.logical_or(a > 0, b > 0), BIN),
    Case("logical_xor", lambda M, a, b: M.logical_xor(a > 0, b > 0), BIN),
    Case("logical_not", lambda M, a: M.logical_not(a > 0), UN),
    Case("bitwise_and", lambda M, a, b: M.bitwise_and(a, b), BIN, dtypes=(I32, I64)),
    Case("bitwise_or", lambda M, a, b: M.bitwise_or(a, b), BIN, dtypes=(I32, I64)),
    Case("bitwise_xor", lambda M, a, b: M.bitwise_xor(a, b), BIN, dtypes=(I32, I64)),
    Case("bitwise_not", lambda M, a: M.bitwise_not(a), UN, dtypes=(I32, I64)),
    Case("where", lambda M, a, b: M.where(a > 0, a, b), BIN, grad=True),
    Case("clamp", lambda M, a: M.clamp(a, -0.5, 0.5), UN, grad=True),
    Case("clamp", lambda M, a: M.clamp(a, min=0.1), UN, label="min only"),
    Case("clip", lambda M, a: M.clip(a, max=0.2), UN),
    Case("clamp_min", lambda M, a: M.clamp_min(a, 0.0), UN),
    Case("clamp_max", lambda M, a: M.clamp_max(a, 0.0), UN),
    Case("nan_to_num", lambda M, a: M.nan_to_num(M.log(a) / a.abs().round()), UN[:2]),
    Case("isclose", lambda M, a, b: M.isclose(a, a + b * 1e-6), BIN),
    Case("masked_fill", lambda M, a: M.masked_fill(a, a > 0.5, -1.0), UN, grad=True))

RED = (((3, 4, 5),),)
for _n in ["sum", "mean", "prod", "amax", "amin", "logsumexp", "std", "var"]:
    for _args, _lab in [((1,), "dim"), ((-1, True), "dim keepdim"), (((0, 2),), "dims")]:
        add(Case(_n, lambda M, x, _n=_n, _a=_args: getattr(M, _n)(x, *_a), RED, tol=16,
                 label=_lab, grad=True))
for _n in ["sum", "mean", "prod", "amax", "amin", "std", "var", "all", "any", "count_nonzero",
           "max", "min", "median", "argmax", "argmin", "norm", "numel"]:
    add(Case(_n, lambda M, x, _n=_n: getattr(M, _n)(x), RED + UN[:2], tol=16, label="all",
             domain="distinct", grad=_n in ("sum", "mean", "max", "norm", "std")))
for _n in ["max", "min", "median", "mode", "argmax", "argmin", "all", "any", "count_nonzero",
           "cumsum", "cumprod", "softmax", "log_softmax", "unbind", "argsort", "sort"]:
    add(Case(_n, lambda M, x, _n=_n: getattr(M, _n)(x, 1), RED + (((4, 6),),), domain="distinct",
             label="positional dim", tol=8,
             grad=_n in ("max", "min", "median", "cumsum", "softmax", "sort", "unbind")))
add(Case("max", lambda M, x: M.max(x, 0, True), RED, domain="distinct", label="keepdim"),
    Case("max", lambda M, a, b: M.max(a, b), BIN, label="elementwise"),
    Case("min", lambda M, a, b: M.min(a, b), BIN, label="elementwise"),
    Case("max", lambda M, x: M.max(x, dim=-1).values, RED, domain="distinct", label=".values"),
    Case("aminmax", lambda M, x: tuple(M.aminmax(x, dim=1)), RED),
    Case("var", lambda M, x: M.var(x, 1, unbiased=False), RED, label="unbiased=False"),
    Case("var", lambda M, x: M.var(x, dim=0, correction=0, keepdim=True), RED, label="correction"),
    Case("std", lambda M, x: M.std(x, 1, False, True), RED, label="old positional"),
    Case("var_mean", lambda M, x: M.var_mean(x, 1), RED, tol=16),
    Case("std_mean", lambda M, x: M.std_mean(x, dim=(0, 1)), RED, tol=16),
    Case("sort", lambda M, x: M.sort(x, descending=True), RED, domain="distinct", grad=True,
         label="descending"),
    Case("sort", lambda M, x: M.sort(x).indices, (((3, 7),),), domain="distinct", label=".indices"),
    Case("argsort", lambda M, x: M.argsort(x, descending=True), RED, domain="distinct",
         label="descending"),
    Case("topk", lambda M, x: M.topk(x, 2), RED + (((6,),),), domain="distinct", grad=True),
    Case("topk", lambda M, x: M.topk(x, 3, dim=0, largest=False), (((4, 5),),),
         domain="distinct", label="smallest"),
    Case("kthvalue", lambda M, x: M.kthvalue(x, 2, 1), RED, domain="distinct", grad=True),
    Case("kthvalue", lambda M, x: M.kthvalue(x, 1, 0, True), RED, domain="distinct",
         label="keepdim"),
    Case("median", lambda M, x: M.median(x, 0, keepdim=True), (((4, 3),), ((5, 2),)),
         domain="distinct", label="even and odd"),
    Case("mode", lambda M, x: M.mode(x, 0).values, (((6, 4),),), dtypes=(I64, F32),
         domain="index", label="ties"),
    Case("unique", lambda M, x: M.unique(x), (((12,),), ((3, 4),)), dtypes=(I64, F32),
         domain="index"),
    Case("unique", lambda M, x: M.unique(x, return_inverse=True, return_counts=True),
         (((3, 4),),), dtypes=(I64,), domain="index", label="inverse counts"),
    Case("unique", lambda M, x: M.unique(x, dim=0), (((6, 2),),), dtypes=(I64,), domain="index",
         label="dim"),
    Case("cumsum", lambda M, x: M.cumsum(x, dim=0, dtype=M.float64), RED, label="dtype"),
    Case("logsumexp", lambda M, x: M.logsumexp(x, dim=(0, 1), keepdim=True), RED,
         label="dims"),
    Case("norm", lambda M, x: M.norm(x, p=1, dim=1), RED, label="p=1 dim", grad=True),
    Case("norm", lambda M, x: M.norm(x, dim=(1, 2), keepdim=True), RED, label="fro dims"),
    Case("norm", lambda M, x: M.norm(x, p="nuc"), (((4, 3),),), label="nuc", dtypes=(F64,)),
    Case("dist", lambda M, a, b: M.dist(a, b), BIN[:1]),
    Case("dist", lambda M, a, b: M.dist(a, b, p=1), BIN[:1], label="p=1"),
    Case("equal", lambda M, a, b: M.equal(a, b), BIN[:1]),
    Case("equal", lambda M, a: M.equal(a, a.clone()), UN, label="same"),
    Case("equal", lambda M, a: M.equal(a, a.reshape(-1)), (((2, 2),),), label="other shape"),
    Case("allclose", lambda M, a: M.allclose(a, a + 1e-7), UN),
    Case("allclose", lambda M, a, b: M.allclose(a, b), BIN[:1], label="not close"),
    Case("allclose", lambda M, a: M.allclose(a, a * 1.01, rtol=0.02), UN[:1], label="rtol"))

MAT = (((3, 4), (4, 5)),)
add(Case("matmul", lambda M, a, b: M.matmul(a, b), MAT + (((2, 3, 4), (4, 2)),), tol=8,
         grad=True),
    Case("mm", lambda M, a, b: M.mm(a, b), MAT, tol=8, grad=True),
    Case("mm", lambda M, a, b: M.mm(a, b), (((2, 3, 4), (4, 2)),), label="3-D refused"),
    Case("bmm", lambda M, a, b: M.bmm(a, b), (((2, 3, 4), (2, 4, 5)),), tol=8, grad=True),
    Case("bmm", lambda M, a, b: M.bmm(a, b), (((2, 3, 4), (4, 5)),), label="no broadcast"),
    Case("mv", lambda M, a, b: M.mv(a, b), (((3, 4), (4,)),), tol=8, grad=True),
    Case("dot", lambda M, a, b: M.dot(a, b), (((4,), (4,)),), tol=8, grad=True),
    Case("outer", lambda M, a, b: M.outer(a, b), (((4,), (3,)),), grad=True),
    Case("inner", lambda M, a, b: M.inner(a, b), (((2, 4), (3, 4)),), tol=8),
    Case("addmm", lambda M, c, a, b: M.addmm(c, a, b, beta=0.5, alpha=2.0),
         (((3, 5), (3, 4), (4, 5)),), tol=8, grad=True),
    Case("einsum", lambda M, a, b: M.einsum("ij,jk->ik", a, b), MAT, tol=8, grad=True),
    Case("tensordot", lambda M, a, b: M.tensordot(a, b, dims=1) if M is torch else
         M.tensordot(a, b, axes=1), MAT, tol=8),
    Case("kron", lambda M, a, b: M.kron(a, b), (((2, 3), (2, 2)),)),
    Case("cross", lambda M, a, b: M.cross(a, b, dim=1), (((4, 3), (4, 3)),), tol=8),
    Case("cdist", lambda M, a, b: M.cdist(a, b), (((5, 3), (4, 3)),), tol=16, grad=True),
    Case("trace", lambda M, a: M.trace(a), (((4, 4),),)),
    Case("diag", lambda M, a: M.diag(a), (((4,),), ((3, 4),))),
    Case("diag", lambda M, a: M.diag(a, 1), (((3,),), ((4, 4),)), label="offset"),
    Case("diagonal", lambda M, a: M.diagonal(a, 0, 1, 2), (((2, 3, 3),),)),
    Case("triu", lambda M, a: M.triu(a, diagonal=1), (((4, 4),), ((2, 3, 5),)), grad=True),
    Case("tril", lambda M, a: M.tril(a, -1), (((4, 4),), ((3, 5),)), grad=True))

add(Case("cat", lambda M, a, b: M.cat([a, b], dim=1), (((2, 3), (2, 4)),), grad=True),
    Case("cat", lambda M, a, b: M.cat((a, b)), (((2, 3), (1, 3)),), label="dim 0"),
    Case("concat", lambda M, a, b: M.concat([a, b], 0), (((2, 3), (1, 3)),)),
    Case("concatenate", lambda M, a, b: M.concatenate([a, b], 1), (((2, 3), (2, 1)),)),
    Case("stack", lambda M, a, b: M.stack([a, b], dim=1), (((2, 3), (2, 3)),), grad=True),
    Case("hstack", lambda M, a, b: M.hstack([a, b]), (((2, 3), (2, 1)),)),
    Case("vstack", lambda M, a, b: M.vstack([a, b]), (((3,), (3,)),)),
    Case("split", lambda M, a: M.split(a, 2), (((5, 3),),), grad=True),
    Case("split", lambda M, a: M.split(a, [1, 2], dim=1), (((5, 3),),), label="sizes"),
    Case("split", lambda M, a: M.split(a, [1, 1], dim=1), (((5, 3),),), label="bad sizes"),
    Case("chunk", lambda M, a: M.chunk(a, 3), (((7, 2),), ((6, 2),), ((2, 2),)), grad=True),
    Case("chunk", lambda M, a: M.chunk(a, 2, dim=-1), (((3, 5),),), label="dim"),
    Case("tensor_split", lambda M, a: M.tensor_split(a, 3), (((7, 2),),)),
    Case("tensor_split", lambda M, a: M.tensor_split(a, [1, 4], dim=0), (((7, 2),),),
         label="indices"),
    Case("unbind", lambda M, a: M.unbind(a), (((3, 2),),), label="dim 0"),
    Case("reshape", lambda M, a: M.reshape(a, (4, -1)), (((2, 6),),), grad=True),
    Case("flatten", lambda M, a: M.flatten(a, 1), (((2, 3, 4),),)),
    Case("squeeze", lambda M, a: M.squeeze(a), (((1, 3, 1),),)),
    Case("squeeze", lambda M, a: M.squeeze(a, 1), (((2, 1, 3),), ((2, 3),)), label="dim"),
    Case("unsqueeze", lambda M, a: M.unsqueeze(a, -1), (((2, 3),),)),
    Case("transpose", lambda M, a: M.transpose(a, 0, 2), (((2, 3, 4),),), grad=True),
    Case("swapaxes", lambda M, a: M.swapaxes(a, 0, 1), (((2, 3),),)),
    Case("swapdims", lambda M, a: M.swapdims(a, 0, 1), (((2, 3),),)),
    Case("t", lambda M, a: M.t(a), (((2, 3),), ((4,),), ((2, 2, 2),))),
    Case("permute", lambda M, a: M.permute(a, (2, 0, 1)), (((2, 3, 4),),)),
    Case("movedim", lambda M, a: M.movedim(a, 0, -1), (((2, 3, 4),),)),
    Case("moveaxis", lambda M, a: M.moveaxis(a, (0, 1), (1, 0)), (((2, 3, 4),),)),
    Case("flip", lambda M, a: M.flip(a, [0, 1]), (((2, 3),),)),
    Case("roll", lambda M, a: M.roll(a, 1, 0), (((3, 4),),)),
    Case("roll", lambda M, a: M.roll(a, 2), (((3, 4),),), label="flat"),
    Case("gather", lambda M, a: M.gather(a, 1, (a.abs() * 2).long() % 4), (((3, 4),),),
         grad=True),
    Case("index_select", lambda M, a: M.index_select(a, 1, M.tensor([2, 0, 2])), (((3, 4),),),
         grad=True),
    Case("narrow", lambda M, a: M.narrow(a, 1, 1, 2), (((3, 4),),)),
    Case("repeat_interleave", lambda M, a: M.repeat_interleave(a, 2, dim=0), (((2, 3),),)),
    Case("tile", lambda M, a: M.tile(a, (2, 1)), (((2, 3),),)),
    Case("broadcast_to", lambda M, a: M.broadcast_to(a, (2, 3, 4)), (((3, 1),),)),
    Case("broadcast_tensors", lambda M, a, b: M.broadcast_tensors(a, b), (((3, 1), (4,)),)),
    Case("meshgrid", lambda M, a, b: M.meshgrid(a, b, indexing="ij"), (((3,), (4,)),)),
    Case("meshgrid", lambda M, a, b: M.meshgrid(a, b, indexing="xy"), (((3,), (4,)),),
         label="xy"),
    Case("diff", lambda M, a: M.diff(a, dim=0), (((4, 3),),)),
    Case("searchsorted", lambda M, a, b: M.searchsorted(M.sort(a).values, b),
         (((6,), (4,)),)),
    Case("searchsorted", lambda M, a, b: M.searchsorted(M.sort(a).values, b, right=True),
         (((6,), (4,)),), label="right"),
    Case("bincount", lambda M, a: M.bincount(a), (((8,),),), dtypes=(I64,), domain="index"),
    Case("bincount", lambda M, a: M.bincount(a, minlength=5), (((8,),),), dtypes=(I64,),
         domain="index", label="minlength"),
    Case("where", lambda M, a: M.where(a > 0, 1.0, a), UN, label="scalar"))

# creation, dtypes, devices
add(Case("tensor", lambda M: M.tensor([[1.0, 2.0], [3.0, 4.0]]), ((),), label="floats"),
    Case("tensor", lambda M: M.tensor([1, 2, 3]), ((),), label="ints"),
    Case("tensor", lambda M: M.tensor([True, False]), ((),), label="bools"),
    Case("tensor", lambda M: M.tensor([1, 2], dtype=M.float64), ((),), label="dtype"),
    Case("tensor", lambda M: M.tensor(2.5), ((),), label="0-d"),
    Case("as_tensor", lambda M: M.as_tensor([1.5, 2.0], dtype=M.float16), ((),)),
    Case("from_numpy", lambda M: M.from_numpy(np.arange(6, dtype=np.int32).reshape(2, 3)), ((),)),
    Case("zeros", lambda M: M.zeros(2, 3), ((),)), Case("zeros", lambda M: M.zeros((2,), dtype=M.long), ((),), label="tuple"),
    Case("ones", lambda M: M.ones(3, dtype=M.int32), ((),)),
    Case("ones", lambda M: M.ones([2, 2], requires_grad=True).requires_grad, ((),), label="requires_grad"),
    Case("empty", lambda M: M.empty(2, 3).shape == (2, 3), ((),)),
    Case("full", lambda M: M.full((2, 3), 1.5), ((),)),
    Case("full", lambda M: M.full((2,), 7), ((),), label="int"),
    Case("zeros_like", lambda M, a: M.zeros_like(a), UN),
    Case("ones_like", lambda M, a: M.ones_like(a, dtype=M.int64), UN),
    Case("empty_like", lambda M, a: M.empty_like(a).shape == a.shape, UN),
    Case("full_like", lambda M, a: M.full_like(a, 3), UN),
    Case("arange", lambda M: M.arange(5), ((),)), Case("arange", lambda M: M.arange(1, 4, 0.5), ((),), label="float"),
    Case("arange", lambda M: M.arange(0, 10, 3, dtype=M.float64), ((),), label="dtype"),
    Case("linspace", lambda M: M.linspace(0, 1, 5), ((),)),
    Case("eye", lambda M: M.eye(3), ((),)), Case("eye", lambda M: M.eye(2, 4, dtype=M.int64), ((),), label="m"),
    Case("is_tensor", lambda M, a: M.is_tensor(a) and not M.is_tensor(a.numpy()), UN[:1]),
    Case("is_floating_point", lambda M, a: M.is_floating_point(a), UN[:1], dtypes=(F32, I64)),
    Case("is_complex", lambda M, a: M.is_complex(a), UN[:1], dtypes=(F32,)),
    Case("numel", lambda M, a: M.numel(a), UN, label="shapes"),
    Case("get_default_dtype", lambda M: str(M.get_default_dtype()).split(".")[-1], ((),)),
    Case("set_default_dtype", lambda M: M.set_default_dtype(M.float32), ((),)),
    Case("device", lambda M: (str(M.device("cpu")), M.device("cpu").type, M.device("cuda:1").index,
                              M.device("cuda", 0).type, str(M.device("cuda", 2)),
                              M.device("cuda:0") == M.device("cuda", 0)), ((),)),
    Case("device", lambda M, a: a.device == M.device("cpu") and a.device.type == "cpu", UN[:1],
         label="of a tensor"),
    Case("dtype", lambda M, a: isinstance(a.dtype, M.dtype), UN[:1]),
    Case("Tensor", lambda M, a: isinstance(a * 2, M.Tensor), UN[:1]),
    Case("Size", lambda M, a: tuple(a.size()) == a.shape and a.size(1) == 4, UN[:1]),
    Case("ValuesIndices", lambda M, a: (M.max(a, 1).values, M.sort(a, 0).indices), UN[:1]))

for _n in ["float32", "float", "float64", "double", "float16", "half", "bfloat16", "int8",
           "int16", "short", "int32", "int", "int64", "long", "uint8", "bool", "complex64",
           "cfloat", "complex128", "cdouble"]:
    add(Case(_n, lambda M, a, _n=_n: str(M.ones(2, dtype=getattr(M, _n)).dtype).split(".")[-1],
             UN[:1], label="dtype name"))
for _n in ["uint16", "uint32", "uint64"]:
    add(Case(_n, lambda M, a, _n=_n: (a.abs() * 3).to(getattr(M, _n)).numpy().dtype.name,
             UN[:1], label="dtype name"))

# ---- nn.functional ------------------------------------------------------------------------

FN = "nn.functional."
X4 = (((2, 3, 8, 8),),)
add(*[Case(FN + _n, lambda M, x, _n=_n: getattr(M.nn.functional, _n)(x), UN[:3], tol=8, grad=True)
      for _n in ["relu", "silu", "sigmoid", "tanh", "gelu", "elu", "softplus", "logsigmoid",
                 "relu6", "leaky_relu", "hardtanh"]])
add(Case(FN + "gelu", lambda M, x: M.nn.functional.gelu(x, approximate="tanh"), UN[:2],
         label="tanh", tol=8, grad=True),
    Case(FN + "leaky_relu", lambda M, x: M.nn.functional.leaky_relu(x, 0.2), UN[:2], label="slope"),
    Case(FN + "softplus", lambda M, x: M.nn.functional.softplus(x * 10, beta=2, threshold=5),
         UN[:2], label="beta", tol=8),
    Case(FN + "softmax", lambda M, x: M.nn.functional.softmax(x, dim=-1), RED, tol=4, grad=True),
    Case(FN + "softmax", lambda M, x: M.nn.functional.softmax(x, 0, dtype=M.float64), RED,
         label="dtype", tol=4),
    Case(FN + "log_softmax", lambda M, x: M.nn.functional.log_softmax(x, 1), RED, tol=4, grad=True),
    Case(FN + "logsumexp", lambda M, x: M.logsumexp(x, 1), RED, tol=4),
    Case(FN + "glu", lambda M, x: M.nn.functional.glu(x, -1), (((3, 4),),), grad=True),
    Case(FN + "normalize", lambda M, x: M.nn.functional.normalize(x, dim=-1), RED, tol=4, grad=True),
    Case(FN + "cosine_similarity", lambda M, a, b: M.nn.functional.cosine_similarity(a, b, dim=1),
         BIN[:1], tol=8, grad=True),
    Case(FN + "linear", lambda M, x, w, b: M.nn.functional.linear(x, w, b),
         (((5, 4), (3, 4), (3,)),), tol=8, grad=True),
    Case(FN + "layer_norm", lambda M, x, w, b: M.nn.functional.layer_norm(x, (4,), w, b),
         (((3, 4), (4,), (4,)),), tol=16, grad=True),
    Case(FN + "batch_norm", lambda M, x: M.nn.functional.batch_norm(
        x, M.zeros(3, dtype=x.dtype), M.ones(3, dtype=x.dtype), training=True), X4, tol=16,
        grad=True),
    Case(FN + "batch_norm", lambda M, x: M.nn.functional.batch_norm(
        x, x.mean((0, 2, 3)), x.var((0, 2, 3)) + 1, training=False), X4, tol=16,
        label="eval"),
    Case(FN + "dropout", lambda M, x: M.nn.functional.dropout(x, 0.5, training=False), UN[:2],
         grad=True),
    Case(FN + "dropout", lambda M, x: M.nn.functional.dropout(x, 1.5), UN[:1], label="bad p"),
    Case(FN + "one_hot", lambda M, x: M.nn.functional.one_hot(x, 4), (((5,),),), dtypes=(I64,),
         domain="index"),
    Case(FN + "one_hot", lambda M, x: M.nn.functional.one_hot(x), (((2, 3),),), dtypes=(I64,),
         domain="index", label="inferred"),
    Case(FN + "embedding", lambda M, i, w: M.nn.functional.embedding(i.long().abs() % 4, w),
         (((2, 3), (4, 5)),), grad=True),
    Case(FN + "embedding", lambda M, i, w: M.nn.functional.embedding(
        i.long().abs() % 4, w, padding_idx=1), (((2, 5), (4, 3)),), grad=True, label="padding_idx"),
    Case(FN + "pad", lambda M, x: M.nn.functional.pad(x, (1, 2)), RED, grad=True),
    Case(FN + "pad", lambda M, x: M.nn.functional.pad(x, (1, 0, 0, 2), value=-1.0), RED,
         label="two dims"),
    Case(FN + "pad", lambda M, x: M.nn.functional.pad(x, (-1, 1)), RED, label="negative"),
    Case(FN + "conv1d", lambda M, x, w: M.nn.functional.conv1d(x, w, padding=1),
         (((2, 3, 9), (4, 3, 3)),), tol=16, grad=True),
    Case(FN + "conv2d", lambda M, x, w: M.nn.functional.conv2d(x, w, stride=2, padding=1),
         (((2, 3, 8, 8), (4, 3, 3, 3)),), tol=16, grad=True),
    Case(FN + "max_pool2d", lambda M, x: M.nn.functional.max_pool2d(x, 2), X4, grad=True),
    Case(FN + "avg_pool2d", lambda M, x: M.nn.functional.avg_pool2d(x, 2, 2), X4, grad=True),
    Case(FN + "adaptive_avg_pool2d", lambda M, x: M.nn.functional.adaptive_avg_pool2d(x, 1), X4,
         grad=True),
    Case(FN + "adaptive_avg_pool2d", lambda M, x: M.nn.functional.adaptive_avg_pool2d(x, (2, 4)),
         X4, label="2x4"),
    Case(FN + "scaled_dot_product_attention", lambda M, q, k, v:
         M.nn.functional.scaled_dot_product_attention(q, k, v), (((2, 3, 5, 4),) * 3,), tol=8,
         grad=True),
    Case(FN + "scaled_dot_product_attention", lambda M, q, k, v:
         M.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
         (((2, 3, 5, 4), (2, 3, 5, 4), (2, 3, 5, 4)), ((2, 3, 4), (2, 6, 4), (2, 6, 2))),
         tol=8, label="causal", grad=True),
    Case(FN + "scaled_dot_product_attention", lambda M, q, k, v:
         M.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=M.tril(M.ones(
             5, 5, dtype=M.bool)), scale=0.3), (((2, 5, 4),) * 3,), tol=8, label="bool mask",
         grad=True),
    Case(FN + "scaled_dot_product_attention", lambda M, q, k, v:
         M.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=q[..., :1] * 0.5),
         (((2, 5, 4), (2, 1, 4), (2, 1, 3)),), tol=8, label="float mask"),
    Case(FN + "scaled_dot_product_attention", lambda M, q, k, v:
         M.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.0, enable_gqa=True),
         (((1, 4, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2)),), tol=8, label="gqa"),
    Case(FN + "scaled_dot_product_attention", lambda M, q, k, v:
         M.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5).shape,
         (((2, 5, 4),) * 3,), label="dropout shape"))

_L = (((6, 5), (6,)),)


def _labels(M, x, t, n=5):
    return (t.abs() * 3).long() % n


add(Case(FN + "cross_entropy", lambda M, x, t: M.nn.functional.cross_entropy(x, _labels(M, x, t)),
         _L, tol=8, grad=True),
    Case(FN + "cross_entropy", lambda M, x, t: M.nn.functional.cross_entropy(
        x, _labels(M, x, t), reduction="sum", label_smoothing=0.1), _L, tol=8, label="smoothing"),
    Case(FN + "cross_entropy", lambda M, x, t: M.nn.functional.cross_entropy(
        x, M.softmax(x * 2, 1)), (((4, 3), (1,)),), tol=8, label="probabilities"),
    Case(FN + "nll_loss", lambda M, x, t: M.nn.functional.nll_loss(
        M.log_softmax(x, 1), _labels(M, x, t), ignore_index=2), _L, tol=8, grad=True),
    Case(FN + "mse_loss", lambda M, a, b: M.nn.functional.mse_loss(a, b), BIN[:1], tol=8, grad=True),
    Case(FN + "l1_loss", lambda M, a, b: M.nn.functional.l1_loss(a, b, reduction="none"), BIN[:1]),
    Case(FN + "smooth_l1_loss", lambda M, a, b: M.nn.functional.smooth_l1_loss(a, b, beta=0.5),
         BIN[:1], tol=8, grad=True),
    Case(FN + "huber_loss", lambda M, a, b: M.nn.functional.huber_loss(a, b, delta=0.7),
         BIN[:1], tol=8, grad=True),
    Case(FN + "binary_cross_entropy_with_logits", lambda M, a, b:
         M.nn.functional.binary_cross_entropy_with_logits(a, (b > 0).float()), BIN[:1], tol=8,
         grad=True, dtypes=(F32,)),
    Case(FN + "binary_cross_entropy_with_logits", lambda M, a, b:
         M.nn.functional.binary_cross_entropy_with_logits(a, (b > 0).to(a.dtype),
                                                          pos_weight=M.full((4,), 2.0, dtype=a.dtype)),
         BIN[:1], tol=8, label="pos_weight"),
    Case(FN + "binary_cross_entropy", lambda M, a, b: M.nn.functional.binary_cross_entropy(
        M.sigmoid(a), (b > 0).to(a.dtype)), BIN[:1], tol=8, grad=True),
    Case(FN + "kl_div", lambda M, a, b: M.nn.functional.kl_div(
        M.log_softmax(a, 1), M.softmax(b, 1), reduction="batchmean"), BIN[:1], tol=8, grad=True))

# ---- torch.fft, torch.linalg, autograd ------------------------------------------------------

for _n, _dt, _shape in [("fft", (np.complex64, np.complex128), (4, 6)), ("ifft", (np.complex128,), (4, 6)),
                        ("rfft", FLOATS, (4, 6)), ("irfft", (np.complex128,), (4, 4)),
                        ("hfft", (np.complex128,), (3, 5)), ("ihfft", (F64,), (3, 6)),
                        ("fft2", (np.complex64,), (2, 4, 6)), ("ifft2", (np.complex128,), (4, 6)),
                        ("rfft2", FLOATS, (4, 6)), ("irfft2", (np.complex128,), (4, 4)),
                        ("fftn", (np.complex128,), (2, 3, 4)), ("ifftn", (np.complex128,), (2, 3, 4)),
                        ("rfftn", (F64,), (2, 3, 4)), ("irfftn", (np.complex128,), (2, 3, 4)),
                        ("fftshift", FLOATS, (4, 5)), ("ifftshift", FLOATS, (4, 5))]:
    add(Case("fft." + _n, lambda M, x, _n=_n: getattr(M.fft, _n)(x), (((_shape),),), dtypes=_dt,
             domain="complex" if np.dtype(_dt[0]).kind == "c" else "real", tol=64))
add(Case("fft.fft", lambda M, x: M.fft.fft(x, n=8, dim=0, norm="ortho"), (((4, 3),),),
         dtypes=(np.complex128,), domain="complex", label="n dim norm", tol=64),
    Case("fft.rfft2", lambda M, x: M.fft.rfft2(x, s=(3, 6), dim=(0, 1)), (((4, 5),),),
         dtypes=(F64,), label="s dim", tol=64),
    Case("fft.fftfreq", lambda M: M.fft.fftfreq(7, 0.5), ((),)),
    Case("fft.rfftfreq", lambda M: M.fft.rfftfreq(8), ((),)))

SQ = (((4, 4),),)
add(Case("linalg.inv", lambda M, a: M.linalg.inv(a + 4 * M.eye(4, dtype=a.dtype)), SQ, tol=64,
         grad=True),
    Case("linalg.det", lambda M, a: M.linalg.det(a), SQ, tol=64, grad=True),
    Case("linalg.solve", lambda M, a, b: M.linalg.solve(a + 4 * M.eye(4, dtype=a.dtype), b),
         (((4, 4), (4, 2)),), tol=64),
    Case("linalg.cholesky", lambda M, a: M.linalg.cholesky(a @ a.mT + M.eye(4, dtype=a.dtype)),
         SQ, tol=64),
    Case("linalg.eigh", lambda M, a: M.linalg.eigh(a + a.mT)[0], SQ, tol=256),
    Case("linalg.qr", lambda M, a: M.linalg.qr(a)[1].abs(), (((5, 3),),), tol=256),
    Case("linalg.svd", lambda M, a: M.linalg.svd(a)[1], (((5, 3),),), tol=256),
    Case("linalg.vector_norm", lambda M, a: M.linalg.vector_norm(a, ord=3, dim=1, keepdim=True),
         RED, tol=16, grad=True),
    Case("linalg.matrix_norm", lambda M, a: M.linalg.matrix_norm(a), RED, tol=16),
    Case("linalg.norm", lambda M, a: M.linalg.norm(a), RED, tol=16, label="vector"),
    Case("linalg.norm", lambda M, a: M.linalg.norm(a, dim=(0, 1)), RED, tol=16, label="matrix"))


def _autograd_grad(M, x):
    x.requires_grad_(True)
    y = (x * x).sum()
    (g,) = M.autograd.grad(y, x)
    return g


def _autograd_backward(M, x):
    x.requires_grad_(True)
    y = (x.exp() * 2).sum()
    M.autograd.backward(y)
    return x.grad


add(Case("autograd.grad", _autograd_grad, UN[:2], dtypes=(F64,)),
    Case("autograd.backward", _autograd_backward, UN[:2], dtypes=(F64,)))


def _with_grad_mode(M, x):
    x.requires_grad_(True)
    with M.no_grad():
        a = (x * 2).requires_grad
    with M.enable_grad():
        b = (x * 2).requires_grad
    with M.set_grad_enabled(False):
        c = M.is_grad_enabled()
    with M.inference_mode():
        d = (x * 2).requires_grad
    with M.autograd.no_grad():
        e = (x + 1).requires_grad
    return a, b, c, d, e, M.is_grad_enabled(), x.is_leaf, (x * 2).is_leaf, \
        (x * 2).requires_grad, x.detach().requires_grad


add(Case("no_grad", _with_grad_mode, UN[:1], label="grad modes"))
for _n in ["enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled",
           "autograd.no_grad", "autograd.enable_grad", "autograd.set_grad_enabled"]:
    add(Case(_n, _with_grad_mode, UN[:1], label="grad modes"))


# names compared otherwise (random draws, files, the namespace's structure); each says where
NOT_VALUE_COMPARABLE = {
    "rand": "random: test_random_draws (shape, dtype, range, mean)",
    "randn": "random: test_random_draws", "randint": "random: test_random_draws",
    "rand_like": "random: test_random_draws", "randn_like": "random: test_random_draws",
    "randint_like": "random: test_random_draws", "randperm": "random: test_random_draws",
    "normal": "random: test_random_draws", "bernoulli": "random: test_random_draws",
    "multinomial": "random: test_multinomial_distribution",
    "manual_seed": "test_random_draws (same seed, same numbers)",
    "seed": "test_random_draws", "initial_seed": "test_random_draws",
    "save": "test_save_load_round_trip", "load": "test_save_load_round_trip",
    "compile": "test_compile_and_cuda_answers", "cuda": "test_compile_and_cuda_answers",
    "backends": "test_compile_and_cuda_answers",
    "set_num_threads": "test_num_threads", "get_num_threads": "test_num_threads",
    "nn": "the nn cases and test_torch_namespace_programs.py",
    "optim": "test_torch_namespace_programs.py (SGD, Adam, AdamW, schedulers)",
    "utils": "test_data_loader", "autograd": "the autograd cases",
    "fft": "the fft cases", "linalg": "the linalg cases",
}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_matches_pytorch(case):
    run_case(case)


def _public(module) -> set:
    return {n for n in getattr(module, "__all__", dir(module)) if not n.startswith("_")}


def test_every_public_name_has_a_parity_case():
    covered = {c.name for c in CASES}
    missing = sorted(_public(lt) - covered - set(NOT_VALUE_COMPARABLE))
    assert not missing, f"lazyarray.torch names without a parity case: {missing}"
    fns = {n for n in dir(lt.nn.functional) if not n.startswith("_") and
           callable(getattr(lt.nn.functional, n)) and n not in ("Any", "Optional", "Tensor")}
    missing = sorted(fns - {c.name[len(FN):] for c in CASES if c.name.startswith(FN)})
    assert not missing, f"lazyarray.torch.nn.functional names without a parity case: {missing}"
    for sub in ("fft", "linalg", "autograd"):
        names = {n for n in dir(getattr(lt, sub)) if not n.startswith("_")
                 and callable(getattr(getattr(lt, sub), n)) and n not in ("Any", "Optional",
                                                                          "Sequence", "Tensor")}
        missing = sorted(names - {c.name[len(sub) + 1:] for c in CASES
                                  if c.name.startswith(sub + ".")})
        assert not missing, f"lazyarray.torch.{sub} names without a parity case: {missing}"


def test_case_names_are_public():
    names = {c.name for c in CASES if "." not in c.name}
    assert not sorted(names - _public(lt))


# ---- what is compared otherwise -----------------------------------------------------------

def test_random_draws():
    for M in (lt,):
        M.manual_seed(3)
        a = M.rand(2000)
        M.manual_seed(3)
        assert np.array_equal(M.rand(2000).numpy(), a.numpy())       # a seed repeats
        assert M.initial_seed() == 3
        assert a.dtype == lt.float32 and a.shape == (2000,)
        assert 0 <= float(a.min()) and float(a.max()) < 1 and abs(float(a.mean()) - 0.5) < 0.03
        z = M.randn(3000, dtype=M.float64)
        assert z.dtype == lt.float64 and abs(float(z.std()) - 1) < 0.05
        i = M.randint(2, 7, (1000,))
        assert i.dtype == lt.int64 and int(i.min()) == 2 and int(i.max()) == 6
        j = M.randint(5, size=(3, 4))
        assert j.shape == (3, 4) and int(j.max()) < 5
        x = M.zeros(4, 5)
        assert M.rand_like(x).shape == (4, 5) and M.randn_like(x).dtype == lt.float32
        assert M.randint_like(x, 3).dtype == lt.float32
        p = M.randperm(10)
        assert sorted(p.tolist()) == list(range(10)) and p.dtype == lt.int64
        n = M.normal(2.0, 0.5, size=(4000,))
        assert abs(float(n.mean()) - 2.0) < 0.05
        m = M.normal(M.zeros(3), M.ones(3))
        assert m.shape == (3,)
        b = M.bernoulli(M.full((4000,), 0.25))
        assert b.dtype == lt.float32 and abs(float(b.mean()) - 0.25) < 0.03
        s = M.seed()
        assert isinstance(s, int)


def test_multinomial_distribution():
    lt.manual_seed(0)
    p = lt.tensor([0.0, 0.2, 0.8, 0.0])
    draws = lt.multinomial(p, 4000, replacement=True)
    counts = np.bincount(draws.numpy(), minlength=4) / 4000
    np.testing.assert_allclose(counts, [0, 0.2, 0.8, 0], atol=0.03)
    rows = lt.multinomial(lt.tensor([[1.0, 1, 1, 1, 1], [0, 0, 5, 5, 0]]), 2)
    assert rows.shape == (2, 2) and rows.dtype == lt.int64
    r = rows.numpy()
    assert r[0, 0] != r[0, 1] and set(r[1]) == {2, 3}        # no repeats, zeros never drawn
    # without replacement, first draws follow the weights
    firsts = np.array([lt.multinomial(lt.tensor([1.0, 3.0]), 2)[0].item() for _ in range(300)])
    assert abs(np.mean(firsts == 1) - 0.75) < 0.08
    with pytest.raises(ValueError, match="without replacement"):
        lt.multinomial(p, 5)


def test_save_load_round_trip(tmp_path):
    state = {"w": lt.arange(6.0).reshape(2, 3), "step": 3}
    lt.save(state, tmp_path / "s.pt")
    back = lt.load(tmp_path / "s.pt")
    assert back["step"] == 3 and lt.equal(back["w"], state["w"])


def test_compile_and_cuda_answers():
    f = lambda x: x * 2   # noqa: E731
    assert lt.compile(f) is f and lt.compile()(f) is f
    assert isinstance(lt.cuda.is_available(), bool)
    assert lt.cuda.device_count() == (1 if lt.cuda.is_available() else 0)
    assert lt.backends.mps.is_available() is False
    lt.cuda.manual_seed(1)
    lt.cuda.synchronize()


def test_num_threads():
    """torch.set_num_threads sizes the CPU pool of the programs run after it."""
    before = lazyarray.config.num_threads
    try:
        lt.set_num_threads(1)
        assert lt.get_num_threads() == 1 == lazyarray.config.num_threads
        x = lt.arange(1 << 16, dtype=lt.float32)
        assert float((x * 2).sum()) == float(np.arange(1 << 16, dtype=np.float64).sum() * 2)
        with pytest.raises(ValueError, match="positive int"):
            lt.set_num_threads(0)
    finally:
        lazyarray.config.num_threads = before


def test_unsupported_names_raise_saying_why():
    with pytest.raises(NotImplementedError, match="default float"):
        lt.set_default_dtype(lt.float64)
    with pytest.raises(TypeError, match="generator"):
        lt.rand(3, generator=object())
    with pytest.raises(NotImplementedError, match="weight"):
        lt.nn.CrossEntropyLoss(weight=lt.ones(3))
    with pytest.raises(NotImplementedError, match="weight"):
        lt.nn.functional.cross_entropy(lt.ones(2, 3), lt.tensor([0, 1]), lt.ones(3))
    with pytest.raises(ValueError, match="lazyarray has no 'mps' device"):
        lt.device("mps")


def test_data_loader():
    from lazyarray.torch.utils.data import (DataLoader, TensorDataset, random_split, Subset,
                                            ConcatDataset, default_collate)
    from torch.utils.data import DataLoader as TDL, TensorDataset as TTD
    x = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10)
    ours = list(DataLoader(TensorDataset(lt.tensor(x), lt.tensor(y)), batch_size=4))
    theirs = list(TDL(TTD(torch.tensor(x), torch.tensor(y)), batch_size=4))
    assert len(ours) == len(theirs) == 3
    for (a, b), (c, d) in zip(ours, theirs):
        _agree(a, c, 1, "x batch")
        _agree(b, d, 1, "y batch")
    loader = DataLoader(TensorDataset(lt.tensor(x), lt.tensor(y)), batch_size=3, shuffle=True,
                        drop_last=True, generator=0)
    got = np.concatenate([b.numpy() for _, b in loader])
    assert len(loader) == 3 and len(got) == 9 and len(set(got.tolist())) == 9
    parts = random_split(TensorDataset(lt.tensor(x)), [0.7, 0.3], generator=1)
    assert [len(p) for p in parts] == [7, 3] and isinstance(parts[0], Subset)
    both = ConcatDataset(parts)
    assert len(both) == 10
    dicts = default_collate([{"a": 1.0, "b": np.ones(2)}, {"a": 2.0, "b": np.zeros(2)}])
    assert dicts["a"].shape == (2,) and dicts["b"].shape == (2, 2)

    class Squares(lt.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return lt.tensor([float(i)]), i * i
    batches = list(DataLoader(Squares(), batch_size=2))
    assert batches[-1][0].shape == (1, 1) and batches[0][1].tolist() == [0, 1]


# ---- torch.nn: every module class, built both ways with the same weights -------------------

MODULES = {
    "Linear": ((5, 3), (4, 5)), "Conv1d": ((2, 4, 3), (2, 2, 9)),
    "Conv2d": ((2, 3, 3, 1, 1), (2, 2, 6, 6)), "BatchNorm1d": ((4,), (6, 4)),
    "BatchNorm2d": ((3,), (2, 3, 4, 4)), "LayerNorm": ((5,), (3, 5)),
    "Embedding": ((7, 3, 0), None), "Dropout": ((0.0,), (3, 4)), "ReLU": ((), (3, 4)),
    "GELU": ((), (3, 4)), "SiLU": ((), (3, 4)), "Tanh": ((), (3, 4)), "Sigmoid": ((), (3, 4)),
    "Softmax": ((1,), (3, 4)), "LogSoftmax": ((1,), (3, 4)), "LeakyReLU": ((0.2,), (3, 4)),
    "ELU": ((0.5,), (3, 4)), "ReLU6": ((), (3, 4)), "Softplus": ((2.0,), (3, 4)),
    "Identity": ((), (3, 4)), "Flatten": ((), (2, 3, 4)), "Unflatten": ((1, (2, 2)), (3, 4)),
    "MaxPool2d": ((2,), (1, 2, 4, 4)), "AvgPool2d": ((2,), (1, 2, 4, 4)),
    "AdaptiveAvgPool2d": ((1,), (1, 2, 4, 4)), "MultiheadAttention": ((4, 2), None),
    "Sequential": (None, (3, 5)), "ModuleList": (None, None), "ModuleDict": (None, None),
    "ParameterList": (None, None), "ParameterDict": (None, None),
    "CrossEntropyLoss": ((), None), "NLLLoss": ((), None), "MSELoss": ((), (3, 4)),
    "L1Loss": ((), (3, 4)), "SmoothL1Loss": ((), (3, 4)), "BCELoss": ((), None),
    "BCEWithLogitsLoss": ((), (3, 4)),
}


def _build(M, name, args):
    nn = M.nn
    if name == "Embedding":
        return nn.Embedding(*args[:2], padding_idx=args[2])
    if name == "MultiheadAttention":
        return nn.MultiheadAttention(*args, batch_first=True)
    if name == "Sequential":
        return nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 2))
    if name in ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict"):
        kids = [nn.Linear(2, 2), nn.Linear(2, 3)]
        return getattr(nn, name)(kids if name == "ModuleList" else
                                 {"a": kids[0]} if name == "ModuleDict" else
                                 [nn.Parameter(M.ones(2))] if name == "ParameterList" else
                                 {"p": nn.Parameter(M.ones(3))})
    return getattr(nn, name)(*args)


def _call(M, m, name, shape):
    """The module's output on inputs drawn the same for both libraries."""
    rng = np.random.default_rng(0)
    x = M.tensor(rng.standard_normal(shape).astype(np.float32)) if shape else None
    if name == "Embedding":
        return m(M.tensor([[0, 3, 6], [2, 0, 1]]))
    if name == "MultiheadAttention":
        q = M.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
        return m(q, q, q)[0]
    if name in ("ModuleList", "ModuleDict", "ParameterList", "ParameterDict"):
        return len(m)
    if name in ("CrossEntropyLoss", "NLLLoss"):
        logits = M.tensor(rng.standard_normal((4, 3)).astype(np.float32))
        return m(logits if name == "CrossEntropyLoss" else M.log_softmax(logits, 1),
                 M.tensor([0, 2, 1, 2]))
    if name == "BCELoss":
        p = M.tensor(rng.uniform(0.1, 0.9, (3, 4)).astype(np.float32))
        return m(p, M.tensor((rng.random((3, 4)) > 0.5).astype(np.float32)))
    if name.endswith("Loss"):
        return m(x, x * 0.5 + 0.1)
    return m(x)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_matches_pytorch(name):
    args, shape = MODULES[name]
    theirs_m = _build(torch, name, args)
    state = {k: v.detach().numpy() for k, v in theirs_m.state_dict().items()}
    ours_m = _build(lt, name, args)
    assert list(ours_m.state_dict()) == list(state), "state_dict names differ from PyTorch's"
    ours_m.load_state_dict(state)
    _agree(_call(lt, ours_m, name, shape), _call(torch, theirs_m, name, shape), 16, name)


def test_every_nn_class_has_a_module_case():
    import inspect
    classes = {n for n in dir(lt.nn) if inspect.isclass(getattr(lt.nn, n)) and not n.startswith("_")
               and n != "Module"}       # the base class: every case and program subclasses it
    assert not sorted(classes - set(MODULES))
    assert all(hasattr(torch.nn, n) for n in MODULES), "a class PyTorch's nn does not have"


def test_nn_init_draws_pytorch_distributions():
    init, tinit = lt.nn.init, torch.nn.init
    names = {n for n in dir(init) if n.endswith("_") and not n.startswith("_")}
    checked = set()

    def both(name, shape, *args, bounded=False, **kw):
        checked.add(name)
        w, tw = lt.empty(*shape), torch.empty(*shape)
        assert getattr(init, name)(w, *args, **kw) is w
        getattr(tinit, name)(tw, *args, **kw)
        a, b = w.numpy(), tw.numpy()
        np.testing.assert_allclose([a.mean(), a.std()], [b.mean(), b.std()],
                                   atol=0.02 * max(1, b.std()), rtol=0.02, err_msg=name)
        if bounded:              # the same range: its ends within 5% of the spread
            slack = 0.05 * (b.max() - b.min()) + 1e-6
            assert abs(a.min() - b.min()) <= slack and abs(a.max() - b.max()) <= slack, name
        return a

    lt.manual_seed(0)
    torch.manual_seed(0)
    both("normal_", (300, 200), 0.0, 0.02)
    both("uniform_", (300, 200), -0.5, 0.5, bounded=True)
    both("trunc_normal_", (300, 200), std=1.0, a=-1.0, b=1.5, bounded=True)
    both("kaiming_normal_", (256, 128), nonlinearity="relu")
    both("kaiming_uniform_", (256, 128), a=math.sqrt(5), bounded=True)
    both("xavier_uniform_", (256, 128), bounded=True)
    both("xavier_normal_", (256, 128), gain=2.0)
    both("constant_", (3, 4), 0.25, bounded=True)
    both("zeros_", (3, 4))
    both("ones_", (3, 4))
    both("eye_", (3, 4), bounded=True)
    q = both("orthogonal_", (20, 30))
    np.testing.assert_allclose(q @ q.T, np.eye(20), atol=1e-5)
    assert init.calculate_gain("leaky_relu", 0.2) == tinit.calculate_gain("leaky_relu", 0.2)
    assert init.calculate_gain("tanh") == tinit.calculate_gain("tanh")
    assert not sorted(names - checked), "an initializer without a check"


def test_a_name_not_offered_says_so():
    for namespace, name in [(lt, "stft"), (lt.nn, "LSTM"), (lt.nn.functional, "interpolate")]:
        with pytest.raises(AttributeError, match="is not among them yet"):
            getattr(namespace, name)
    assert not hasattr(lt, "no_such_name") and "missing" not in lt.__all__


# ---- Tensor methods: every member lazyarray's Tensor shares with PyTorch's ------------------

M2 = (((3, 4),),)
_UNARY_METHODS = ["abs", "ceil", "cos", "exp", "expm1", "floor", "neg", "relu", "round",
                  "sigmoid", "sign", "sin", "square", "tanh", "clone", "contiguous", "detach",
                  "flatten", "t", "float", "double", "half", "int", "long", "bool", "numel",
                  "dim", "nelement", "element_size", "is_floating_point", "is_contiguous",
                  "tolist", "all", "any", "sum", "mean", "prod", "max", "min", "argmax",
                  "argmin", "std", "var", "median", "norm", "unique", "item", "cpu", "squeeze",
                  "real", "conj", "is_leaf", "requires_grad", "ndim", "shape", "dtype", "T", "mT",
                  "data", "grad"]
_ATTRIBUTES = {"real", "is_leaf", "requires_grad", "ndim", "shape", "dtype", "T", "mT", "data",
               "grad"}


def _method_value(x, name):
    got = getattr(x, name)
    value = got if name in _ATTRIBUTES else got()
    if name == "dtype":
        return str(value).split(".")[-1]
    if name == "shape":
        return tuple(value)
    return value


for _n in _UNARY_METHODS:
    _shapes = (((1,),),) if _n == "item" else (((3, 4),), ((2, 3, 4),)) if _n in ("mT",) else M2
    _grad = _n in ("abs", "exp", "sigmoid", "tanh", "sum", "mean", "max", "norm", "std", "var",
                   "flatten", "t", "clone", "square", "cos", "sin")
    add(Case("Tensor." + _n, lambda M, x, _n=_n: _method_value(x, _n), _shapes,
             domain="distinct" if _n in ("max", "min", "argmax", "argmin", "median") else
             "positive" if _n in ("std",) else "real", tol=8, grad=_grad))

_ARG_METHODS = [
    ("add", lambda x: x.add(x * 2, alpha=0.5)), ("sub", lambda x: x.sub(1.5)),
    ("mul", lambda x: x.mul(x)), ("div", lambda x: x.div(x.abs() + 1)),
    ("pow", lambda x: x.abs().pow(1.5)), ("maximum", lambda x: x.maximum(x.flip(0))),
    ("minimum", lambda x: x.minimum(x.flip(0))), ("eq", lambda x: x.eq(x.round())),
    ("ne", lambda x: x.ne(0.5)), ("lt", lambda x: x.lt(0)), ("le", lambda x: x.le(0)),
    ("gt", lambda x: x.gt(0)), ("ge", lambda x: x.ge(0)),
    ("matmul", lambda x: x.matmul(x.t())), ("dot", lambda x: x[0].dot(x[1])),
    ("dot", lambda x: x.dot(x)),                                     # 2-D: PyTorch refuses
    ("log", lambda x: x.abs().log()), ("log1p", lambda x: x.abs().log1p()),
    ("sqrt", lambda x: x.abs().sqrt()), ("rsqrt", lambda x: (x.abs() + 1).rsqrt()),
    ("tan", lambda x: x.tan()), ("angle", lambda x: x.angle()),
    ("imag", lambda x: (x * 1j).imag), ("clamp", lambda x: x.clamp(-0.5, 0.5)),
    ("clip", lambda x: x.clip(min=0.0)), ("cumsum", lambda x: x.cumsum(1)),
    ("sum", lambda x: x.sum(1, keepdim=True)), ("mean", lambda x: x.mean(dim=0)),
    ("prod", lambda x: x.prod(1)), ("max", lambda x: x.max(1)), ("min", lambda x: x.min(0, True)),
    ("max", lambda x: x.max(dim=-1).indices), ("argmax", lambda x: x.argmax(1)),
    ("argmin", lambda x: x.argmin(dim=0, keepdim=True)), ("all", lambda x: (x > -9).all(1)),
    ("any", lambda x: (x > 0).any(dim=0)), ("std", lambda x: x.std(1)),
    ("var", lambda x: x.var(0, unbiased=False)), ("var", lambda x: x.var(dim=1, keepdim=True)),
    ("sort", lambda x: x.sort()), ("sort", lambda x: x.sort(0, descending=True)),
    ("argsort", lambda x: x.argsort(1)), ("topk", lambda x: x.topk(2)),
    ("kthvalue", lambda x: x.kthvalue(2, 0)), ("median", lambda x: x.median(1)),
    ("mode", lambda x: x.round().mode(0)), ("unique", lambda x: x.round().unique(return_counts=True)),
    ("norm", lambda x: x.norm(dim=1)), ("norm", lambda x: x.norm(p=1)),
    ("softmax", lambda x: x.softmax(1)), ("log_softmax", lambda x: x.log_softmax(dim=0)),
    ("split", lambda x: x.split(3, dim=1)), ("split", lambda x: x.split([1, 2])),
    ("chunk", lambda x: x.chunk(2, 1)), ("unbind", lambda x: x.unbind(1)),
    ("reshape", lambda x: x.reshape(2, -1)), ("reshape", lambda x: x.reshape((4, 3))),
    ("view", lambda x: x.view(-1)), ("view", lambda x: x.view(2, 6)),
    ("permute", lambda x: x.permute(1, 0)), ("transpose", lambda x: x.transpose(0, 1)),
    ("squeeze", lambda x: x[None].squeeze(0)), ("unsqueeze", lambda x: x.unsqueeze(1)),
    ("flatten", lambda x: x[None].flatten(1)), ("flip", lambda x: x.flip(0)),
    ("flip", lambda x: x.flip((0, 1))), ("expand", lambda x: x[:1].expand(5, -1)),
    ("broadcast_to", lambda x: x.broadcast_to((2, 3, 4))), ("repeat", lambda x: x.repeat(2, 3)),
    ("gather", lambda x: x.gather(0, (x.abs() * 3).long() % 3)),
    ("index_select", lambda x: x.index_select(1, x.new_tensor([3, 0]).long())),
    ("narrow", lambda x: x.narrow(0, 1, 2)), ("masked_fill", lambda x: x.masked_fill(x > 0, 2.0)),
    ("type", lambda x: x.type(x.new_zeros(1).long().dtype)),
    ("type", lambda x: (x.type(), x.long().type(), x.bool().type(), x.half().type())), ("type_as", lambda x: x.type_as(x.long())),
    ("to", lambda x: x.to(x.double().dtype)), ("new_zeros", lambda x: x.new_zeros(2, 3)),
    ("new_ones", lambda x: x.new_ones((2,))), ("new_full", lambda x: x.new_full((2,), 3.5)),
    ("new_empty", lambda x: x.new_empty(2, 2).shape), ("new_tensor", lambda x: x.new_tensor([1, 2])),
    ("size", lambda x: (tuple(x.size()), x.size(1), x.size(-1))), ("bfloat16", lambda x: x.bfloat16().float()),
    ("numpy", lambda x: x.numpy().shape), ("device", lambda x: x.device.type),
    ("cuda", lambda x: callable(x.cuda)), ("backward", lambda x: callable(x.backward)),
    ("requires_grad_", lambda x: x.requires_grad_().is_leaf),
]
for _n, _f in _ARG_METHODS:
    add(Case("Tensor." + _n, lambda M, x, _f=_f: _f(x), M2, domain="distinct",
             tol=8, label="args"))


def _in_place_case(fn):
    def run(M, x):
        y = x.clone()
        out = fn(M, y)
        assert out is y
        return y
    return run


for _n, _f in [("add_", lambda M, y: y.add_(y * 2, alpha=-0.5)), ("sub_", lambda M, y: y.sub_(1.0)),
               ("mul_", lambda M, y: y.mul_(3)), ("div_", lambda M, y: y.div_(4)),
               ("pow_", lambda M, y: y.abs_().pow_(2)), ("zero_", lambda M, y: y.zero_()),
               ("fill_", lambda M, y: y.fill_(2.5)), ("copy_", lambda M, y: y.copy_(y * 3)),
               ("clamp_", lambda M, y: y.clamp_(-0.1, 0.1)), ("abs_", lambda M, y: y.abs_()),
               ("neg_", lambda M, y: y.neg_()), ("exp_", lambda M, y: y.exp_()),
               ("sqrt_", lambda M, y: y.abs_().sqrt_()), ("relu_", lambda M, y: y.relu_()),
               ("sigmoid_", lambda M, y: y.sigmoid_()), ("tanh_", lambda M, y: y.tanh_()),
               ("masked_fill_", lambda M, y: y.masked_fill_(y < 0, 0.0)),
               ("addcmul_", lambda M, y: y.addcmul_(y, y, value=0.5)),
               ("addcdiv_", lambda M, y: y.addcdiv_(y, y.abs() + 1, value=2)),
               ("lerp_", lambda M, y: y.lerp_(y * 0, 0.25))]:
    add(Case("Tensor." + _n, _in_place_case(_f), M2, label="in place"))
add(Case("Tensor.normal_", lambda M, x: (x.normal_(1.0, 0.01) is x, bool(abs(x.mean() - 1) < 0.01),
                                          bool(abs(x.std() - 0.01) < 0.002), tuple(x.shape)),
         (((50, 50),),), label="draws"),
    Case("Tensor.uniform_", lambda M, x: (x.uniform_(2, 3) is x, bool((x >= 2).all()),
                                          bool((x < 3).all()), bool(abs(x.mean() - 2.5) < 0.02)),
         (((50, 50),),), label="draws"))

TENSOR_NOT_COMPARED = {"cuda": "moves to a GPU: test_cuda_device.py"}


def test_every_shared_tensor_member_has_a_parity_case():
    shared = {n for n in dir(lazyarray.Tensor) if not n.startswith("_")} & \
        {n for n in dir(torch.Tensor) if not n.startswith("_")}
    covered = {c.name[len("Tensor."):] for c in CASES if c.name.startswith("Tensor.")}
    missing = sorted(shared - covered - set(TENSOR_NOT_COMPARED))
    assert not missing, f"Tensor members shared with PyTorch without a parity case: {missing}"
