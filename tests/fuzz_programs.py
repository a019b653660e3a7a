"""Random programs run by lazyarray and by NumPy side by side, op for op, and compared.

NumPy is the oracle, not the interpreter, so an error shared by the interpreter and the
compiler is caught too. A program starts from a random leaf (special values sometimes
injected) and applies random ops, each to the lazyarray tensor and to the NumPy array:
elementwise (unary, binary with broadcasting, Python scalars, comparisons, where,
logaddexp, bitwise ops), floor division and remainder, reductions (sum, prod, mean,
max, min, all, any) with axes and keepdims, casts between dtypes, reshape, transpose,
basic slicing with steps, triu/tril, concatenation, integer-array indexing, matmul,
cumulative sums and searchsorted; now and then an op NumPy refuses, which must raise
here too and leave everything else intact. Values are kept moderate (divisors away from
0, exp of clipped values, float -> integer casts within the integer's range) so that a
difference is an error, not conditioning or undefined behaviour.

Several values of a program are synced together (a multi-output program: where buffer
assignment and multi-output fusion go wrong), sometimes one of them first and the rest
after. A crash must not take the test run with it: `run_child` runs programs in a fresh
process (`python tests/fuzz_programs.py DEVICE START STOP STEP`), which prints each
program before it syncs it, so the parent names the program that killed it.

`CASES` are the programs the fuzzer and the reliability probe found (each crashed or gave
wrong values once); they run before the random ones.
"""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Callable, Optional

import numpy as np

import lazyarray as la

FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.int32, np.int64, np.int8, np.uint8, np.uint64]
DTYPES = FLOATS + INTS + [np.bool_]
TOL = {np.dtype(np.float16): 2e-2, np.dtype(np.float32): 2e-4, np.dtype(np.float64): 1e-9}
ERRORS = (TypeError, ValueError, IndexError)


def _kind(a: np.ndarray) -> str:
    return "bool" if a.dtype == np.bool_ else "float" if a.dtype.kind == "f" else "int"


class _Skip(Exception):
    """The op does not apply to the program's values: the next op is drawn."""


class Program:
    """Values as (tensor, array) pairs, and the text of what was done (for a report)."""

    def __init__(self, seed: int, device: str) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = DTYPES[self.rng.integers(len(DTYPES))]
        self.device = device
        self.values: list = []
        self.lines: list = []
        # a float widened to float64 keeps its own rounding (1 ulp of float32 from a
        # differently ordered sum): float64 values are compared at the loosest such tolerance
        self.widened = 0.0

    def leaf(self, shape: tuple, dtype=None) -> None:
        dtype = np.dtype(dtype or self.dtype)
        if dtype.kind == "f":
            a = self.rng.uniform(-3, 3, shape)
            if a.size and self.rng.random() < 0.3:
                for i in self.rng.integers(0, a.size, 2):
                    a.reshape(-1)[i] = self.rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0])
        elif dtype == np.bool_:
            a = self.rng.random(shape) < 0.5
        else:
            a = self.rng.integers(0 if dtype.kind == "u" else -9, 10, shape)
        a = np.asarray(a).astype(dtype)
        self.add(la.asarray(a, device=self.device), a, f"asarray({a.dtype} {list(shape)})")

    def add(self, t, a, text: str) -> None:
        a = np.asarray(a)
        assert t.shape == a.shape, f"{text}: shape {t.shape} vs NumPy {a.shape}"
        assert np.dtype(t.dtype.np) == a.dtype, f"{text}: dtype {t.dtype} vs NumPy {a.dtype}"
        self.lines.append(f"v{len(self.values)} = {text}")
        self.values.append((t, a))

    def pick(self, kinds: tuple = ("float", "int", "bool")) -> tuple:
        """(position, (tensor, array)) of a value of one of `kinds`; _Skip if none."""
        fits = [k for k, (_, a) in enumerate(self.values) if _kind(a) in kinds]
        if not fits:
            raise _Skip
        k = fits[int(self.rng.integers(len(fits)))]
        return k, self.values[k]

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]


# ---- the ops: each applies one random op to picked values ----------------------------

def _unary(p: Program) -> None:
    k, (t, a) = p.pick()
    kind = _kind(a)
    if kind == "float":
        name = p.choice(["negative", "abs", "tanh", "sin", "floor", "ceil", "sign", "exp",
                         "sqrt", "square", "trunc", "log1p"])
    elif kind == "int":
        name = p.choice(["negative", "abs", "sign", "square", "bitwise_invert"])
    else:
        name = "logical_not"
    if name == "exp":
        p.add(la.exp(la.clip(t, -8, 8)), np.exp(np.clip(a, -8, 8)), f"exp(clip(v{k}))")
    elif name == "sqrt":
        p.add(la.sqrt(la.abs(t)), np.sqrt(np.abs(a)), f"sqrt(abs(v{k}))")
    elif name == "log1p":
        p.add(la.log1p(la.abs(t)), np.log1p(np.abs(a)), f"log1p(abs(v{k}))")
    else:
        ref = {"trunc": np.trunc, "bitwise_invert": np.invert}.get(name) or getattr(np, name)
        with np.errstate(all="ignore"):
            p.add(getattr(la, name)(t), ref(a), f"{name}(v{k})")


def _partner(p: Program, a: np.ndarray) -> tuple:
    """A value of a's dtype broadcastable with a (or a fresh leaf of a broadcast shape)."""
    fits = [(k, v) for k, v in enumerate(p.values)
            if v[1].dtype == a.dtype and _broadcastable(v[1].shape, a.shape)]
    if fits and p.rng.random() < 0.7:
        return fits[int(p.rng.integers(len(fits)))]
    shape = a.shape
    sub = tuple(1 if p.rng.random() < 0.3 else n
                for n in shape[int(p.rng.integers(len(shape) + 1)):])
    p.leaf(sub, a.dtype)
    return len(p.values) - 1, p.values[-1]


def _broadcastable(a: tuple, b: tuple) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(a[::-1], b[::-1]))


def _binary(p: Program) -> None:
    k, (t, a) = p.pick(("float", "int"))
    j, (u, b) = _partner(p, a)
    kind = _kind(a)
    names = ["add", "subtract", "multiply", "maximum", "minimum", "floor_divide", "remainder"]
    if kind == "float":
        names += ["divide", "logaddexp"]
    else:
        names += ["bitwise_and", "bitwise_or", "bitwise_xor"]
    name = p.choice(names)
    if name in ("divide", "floor_divide", "remainder"):
        # a divisor kept away from 0: a difference must not be conditioning
        if kind == "float":
            u = la.where(la.abs(u) < 0.5, 1.5, u)
            b = np.where(np.abs(b) < 0.5, np.asarray(1.5, a.dtype), b)
        else:
            u = la.where(u == 0, 3, u)
            b = np.where(b == 0, np.asarray(3, a.dtype), b)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, b)
    p.add(getattr(la, name)(t, u), want, f"{name}(v{k}, v{j})")


def _logical(p: Program) -> None:
    k, (t, a) = p.pick(("bool",))
    j, (u, b) = _partner(p, a)
    name = p.choice(["logical_and", "logical_or", "logical_xor", "bitwise_or",
                     "bitwise_and", "logaddexp"])
    if name == "logaddexp":      # bool operands promote to the default float
        want = np.logaddexp(a.astype(np.float32), b.astype(np.float32))
    else:
        want = getattr(np, name)(a, b)
    p.add(getattr(la, name)(t, u), want, f"{name}(v{k}, v{j})")


def _scalar(p: Program) -> None:
    k, (t, a) = p.pick(("float", "int"))
    if _kind(a) == "float":
        s = float(p.choice([2.0, -1.5, 0.5, 3.0]))
    else:
        s = int(p.choice([2, 3, 5] if a.dtype.kind == "u" else [2, -3, 5]))
    op = p.choice(["+", "-", "*", "r-"])
    with np.errstate(all="ignore"):
        if op == "+":
            p.add(t + s, a + np.asarray(s, a.dtype), f"v{k} + {s}")
        elif op == "-":
            p.add(t - s, a - np.asarray(s, a.dtype), f"v{k} - {s}")
        elif op == "*":
            p.add(t * s, a * np.asarray(s, a.dtype), f"v{k} * {s}")
        else:
            p.add(s - t, np.asarray(s, a.dtype) - a, f"{s} - v{k}")


def _compare(p: Program) -> None:
    k, (t, a) = p.pick(("float", "int"))
    j, (u, b) = _partner(p, a)
    cmp = p.choice(["less", "greater_equal", "equal", "not_equal"])
    p.add(getattr(la, cmp)(t, u), getattr(np, cmp)(a, b), f"{cmp}(v{k}, v{j})")


def _where(p: Program) -> None:
    k, (t, a) = p.pick(("float", "int"))
    j, (u, b) = _partner(p, a)
    cmp = p.choice(["less", "greater_equal", "equal", "not_equal"])
    m = p.pick(("bool",)) if any(_kind(v[1]) == "bool" for v in p.values) else None
    if m is not None and _broadcastable(m[1][1].shape, np.broadcast_shapes(a.shape, b.shape)) \
            and p.rng.random() < 0.5:
        c, (mt, ma) = m
        p.add(la.where(mt, t, u), np.where(ma, a, b), f"where(v{c}, v{k}, v{j})")
        return
    with np.errstate(all="ignore"):
        want = np.where(getattr(np, cmp)(a, b), a, b)
    p.add(la.where(getattr(la, cmp)(t, u), t, u), want, f"where({cmp}(v{k}, v{j}), v{k}, v{j})")


def _reduce(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim == 0:
        return
    kind = _kind(a)
    name = p.choice({"float": ["sum", "max", "min", "mean", "prod"],
                     "int": ["sum", "max", "min", "all"], "bool": ["all", "any"]}[kind])
    axis = p.choice([None, int(p.rng.integers(a.ndim)), tuple(range(a.ndim))[-2:]])
    keep = bool(p.rng.random() < 0.3)
    if name in ("max", "min") and (a.size == 0 or (axis is not None and 0 in a.shape)):
        return
    if name == "prod":
        t, a = la.clip(t, -1.5, 1.5), np.clip(a, -1.5, 1.5)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, axis=axis, keepdims=keep)
    if name == "sum" and kind == "int":     # the array API sums integers in their widest kind
        want = want.astype(np.uint64 if a.dtype.kind == "u" else np.int64)
    if name == "mean" and a.dtype == np.float16:
        want = np.mean(a.astype(np.float32), axis=axis, keepdims=keep).astype(np.float16)
    p.add(getattr(la, name)(t, axis=axis, keepdims=keep), want,
          f"{name}(v{k}, axis={axis}, keepdims={keep})")


def _astype(p: Program) -> None:
    """A cast; float -> integer only of values in the integer's range (outside, C and so
    NumPy leave the result undefined)."""
    k, (t, a) = p.pick()
    to = np.dtype(p.choice(DTYPES))
    if _kind(a) == "float" and to.kind in "iu":
        info = np.iinfo(to)
        lo, hi = max(float(info.min), -100.0), min(float(info.max), 100.0)
        t = la.clip(la.where(la.isfinite(t), t, 0.0), lo, hi)
        a = np.clip(np.where(np.isfinite(a), a, np.asarray(0, a.dtype)), lo, hi)
    if _kind(a) == "float" and to.kind == "f" and to.itemsize > a.dtype.itemsize:
        p.widened = max(p.widened, TOL[a.dtype])
    with np.errstate(all="ignore"):
        want = a.astype(to)
    p.add(t.astype(getattr(la, to.name if to != np.bool_ else "bool")), want,
          f"astype(v{k}, {to.name})")


def _reshape(p: Program) -> None:
    k, (t, a) = p.pick()
    if p.rng.random() < 0.5 and a.ndim >= 2:
        perm = tuple(int(i) for i in p.rng.permutation(a.ndim))
        p.add(la.permute_dims(t, perm), np.transpose(a, perm), f"permute_dims(v{k}, {perm})")
        return
    shape = (-1,) if p.rng.random() < 0.5 or a.size % 2 else (2, -1)
    p.add(la.reshape(t, shape), a.reshape(shape), f"reshape(v{k}, {shape})")


def _slice(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim == 0:
        return
    key = []
    for n in a.shape:
        start, stop = sorted(int(v) for v in p.rng.integers(-n - 1, n + 2, 2))
        step = p.choice([1, 1, 2, -1, -2])
        key.append(slice(start, stop, step) if step > 0 else slice(stop, start, step))
    key = tuple(key)
    p.add(t[key], a[key], f"v{k}[{key}]")


def _triangle(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim < 2:
        return
    name, off = p.choice(["triu", "tril"]), int(p.rng.integers(-2, 3))
    p.add(getattr(la, name)(t, k=off), getattr(np, name)(a, k=off), f"{name}(v{k}, k={off})")


def _index(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim == 0 or 0 in a.shape:
        return
    axis = int(p.rng.integers(a.ndim))
    idx = p.rng.integers(-a.shape[axis], a.shape[axis], int(p.rng.integers(1, 5)))
    key = (slice(None),) * axis + (idx,)
    if a.ndim - axis > 1 and p.rng.random() < 0.5:
        key = key + (Ellipsis, int(p.rng.integers(a.shape[-1])))
    p.add(t[key], a[key], f"v{k}[{key}]")


def _concat(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim == 0:
        return
    same = [(j, v) for j, v in enumerate(p.values) if v[1].shape[1:] == a.shape[1:]
            and v[1].ndim == a.ndim and v[1].dtype == a.dtype]
    j, (u, b) = same[int(p.rng.integers(len(same)))]
    p.add(la.concat([t, u], axis=0), np.concatenate([a, b], axis=0), f"concat(v{k}, v{j})")


def _matmul(p: Program) -> None:
    k, (t, a) = p.pick(("float",))
    if a.ndim < 1 or a.dtype == np.float16:
        return
    n = a.shape[-1]
    p.leaf((n, int(p.rng.integers(1, 5))), a.dtype)
    u, b = p.values[-1]
    t, a = la.clip(t, -4, 4), np.clip(a, -4, 4)
    u, b = la.clip(u, -4, 4), np.clip(b, -4, 4)
    with np.errstate(all="ignore"):
        p.add(t @ u, a @ b, f"v{k} @ v{len(p.values) - 1}")


def _cumsum(p: Program) -> None:
    k, (t, a) = p.pick(("float",))
    if a.ndim == 0 or a.dtype == np.float16:
        return
    axis = int(p.rng.integers(a.ndim))
    p.add(la.cumulative_sum(t, axis=axis), np.cumsum(a, axis=axis), f"cumsum(v{k}, {axis})")


def _searchsorted(p: Program) -> None:
    k, (t, a) = p.pick(("float", "int"))
    if a.ndim != 1 or (_kind(a) == "float" and np.isnan(a).any()):
        return
    j, (u, b) = _partner(p, a)
    side = p.choice(["left", "right"])
    s, order = la.sort(t), np.sort(a)
    p.add(la.searchsorted(s, u, side=side), np.searchsorted(order, b, side=side),
          f"searchsorted(sort(v{k}), v{j}, side={side!r})")


def _refused(p: Program) -> None:
    """An op NumPy refuses: lazyarray must raise too, and the program goes on."""
    k, (t, a) = p.pick(("float",))
    j, (u, b) = _partner(p, a)
    try:
        np.bitwise_or(a, b)
    except TypeError:
        pass
    else:
        raise AssertionError("NumPy accepted bitwise_or of floats")
    try:
        la.bitwise_or(t, u)
    except ERRORS:
        p.lines.append(f"bitwise_or(v{k}, v{j})  # raises, as in NumPy")
        return
    raise AssertionError(f"bitwise_or(v{k}, v{j}) of floats did not raise")


OPS = [_unary, _unary, _binary, _binary, _logical, _scalar, _compare, _where, _reduce,
       _reduce, _astype, _reshape, _slice, _triangle, _index, _concat, _matmul, _cumsum,
       _searchsorted, _refused]


def build(seed: int, device: str) -> Program:
    p = Program(seed, device)
    shape = tuple(int(n) for n in p.rng.integers(0 if p.rng.random() < 0.12 else 1, 5,
                                                 int(p.rng.integers(0, 4))))
    p.leaf(shape)
    for _ in range(int(p.rng.integers(2, 12))):
        op = OPS[int(p.rng.integers(len(OPS)))]
        try:
            op(p)
        except _Skip:
            pass
    return p


def synced(p: Program) -> list:
    """The values to read, in the order read: the last three and up to two earlier ones,
    all computed by one sync; or, now and then, one read first and the others after."""
    n = len(p.values)
    chosen = sorted(set(range(max(0, n - 3), n)) |
                    {int(i) for i in p.rng.integers(0, n, int(p.rng.integers(0, 3)))})
    return chosen


def differs(got: np.ndarray, want: np.ndarray, widened: float = 0.0) -> int:
    """How many elements of `got` are not NumPy's `want` (within the dtype's tolerance,
    or `widened`'s where that is looser: see Program.widened)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return max(1, want.size)
    if want.dtype.kind != "f":
        return int(np.count_nonzero(got != want))
    tol = max(TOL[want.dtype], widened)
    finite = np.isfinite(want) & np.isfinite(got)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    with np.errstate(invalid="ignore"):
        close = np.abs(got.astype(np.float64) - want.astype(np.float64)) <= tol * scale
    same_special = (got == want) | (np.isnan(got) & np.isnan(want))
    return int(np.count_nonzero(~np.where(finite, close, same_special)))


def check(p: Program, report: Callable = print) -> Optional[str]:
    """Sync the chosen values (the program is reported first: a crash names it); the
    differences from NumPy in words, or None."""
    chosen = synced(p)
    first = p.rng.random() < 0.3
    report("\n  ".join(["program:"] + p.lines + [f"read: {['v%d' % i for i in chosen]}"]))
    if first:                    # one value read first, the others synced after it
        p.values[chosen[0]][0].numpy()
    la.sync()
    wrong = []
    for i in chosen:
        t, want = p.values[i]
        got = t.numpy()
        n = differs(got, want, p.widened)
        if n:
            wrong.append(f"v{i} differs at {n} elements\n  ours:  {got!r}\n  NumPy: {want!r}")
    return "\n".join(wrong) or None


# ---- programs found by the fuzzer and the probe (each crashed or was wrong once) -----

def _case_all_logaddexp_triu(device: str) -> list:
    rng = np.random.default_rng(1)
    a1 = rng.integers(-3, 3, (33, 3, 33, 3)).astype(np.int8)
    a4 = rng.random((33, 3)) < 0.5
    v1, v4 = la.asarray(a1, device=device), la.asarray(a4, device=device)
    v3 = la.all(v1, axis=(3, 2))
    a3 = np.all(a1, axis=(3, 2))
    return [(v3, a3), (la.logaddexp(v3, v4), np.logaddexp(a3, a4).astype(np.float32)),
            (la.triu(v4, k=2), np.triu(a4, k=2))]


def _case_prod_refused_log1p_minimum(device: str) -> list:
    rng = np.random.default_rng(2)
    a0, a6 = rng.uniform(-1, 1, (3, 16)), rng.uniform(0, 2, (3,))
    v0, v6 = la.asarray(a0, device=device), la.asarray(a6, device=device)
    v5 = la.prod(v0, axis=-1)
    try:
        la.bitwise_or(v6, v5)
    except ERRORS:
        pass
    else:
        raise AssertionError("bitwise_or of floats did not raise")
    a5 = np.prod(a0, axis=-1)
    return [(v5, a5), (la.log1p(v6[:]), np.log1p(a6)), (la.minimum(v6, v5), np.minimum(a6, a5))]


def _case_where_sum_beside_mask_product(device: str) -> list:
    a, m = np.ones((4, 3), np.float32), np.array([True, False, True, False])
    ta, tm = la.asarray(a, device=device), la.asarray(m, device=device)
    return [(la.where(tm, 0.0, ta.sum(axis=-1)), np.where(m, np.float32(0), a.sum(axis=-1))),
            (tm * 2.0, m * np.float32(2.0))]


def _case_searchsorted_astype_compare(device: str) -> list:
    s = np.arange(5.0)
    t = la.asarray(s, device=device)
    i = la.searchsorted(t, t)
    want_i = np.searchsorted(s, s)
    return [(i, want_i), (t.astype(la.float32), s.astype(np.float32)), (i >= t, want_i >= s)]


def _case_empty_mean_beside_read(device: str) -> list:
    x = la.asarray(np.ones(4, np.float32), device=device)
    a = x * la.mean(la.zeros((4, 0), device=device), axis=-1)
    b = (x * 2.0).numpy()            # read first: the other value stays pending
    assert np.array_equal(b, np.full(4, 2.0, np.float32)), b
    with np.errstate(invalid="ignore"):
        want = np.ones(4, np.float32) * np.mean(np.zeros((4, 0), np.float32), axis=-1)
    return [(a, want)]


def _case_int8_through_float_to_unsigned(device: str) -> list:
    """int8 -> float32 -> uint8/uint64: the float -> unsigned step saturates (-52 -> 0), as
    a cast from the float32 tensor does; folding the two casts into one wrapped (204)."""
    a = np.array([-52, 100, -1, 0, 127, -128] * 6, np.int8)
    t = la.asarray(a, device=device)
    f = t.astype(la.float32)
    sat8 = np.clip(a.astype(np.float32), 0, 255).astype(np.uint8)
    sat64 = np.clip(a.astype(np.float32), 0, None).astype(np.uint64)
    return [(f.astype(la.uint8), sat8), (f.astype(la.uint64), sat64),
            (f.astype(la.int16), a.astype(np.int16)), (t.astype(la.uint8), a.astype(np.uint8))]


def _case_float64_to_float16_beside_tanh(device: str) -> list:
    """LLVM folded float64 -> float32 -> float16 into one conversion, lowered to a call of
    __truncdfhf2 that the JIT left unresolved (SIGSEGV; fuzzer seed 101638)."""
    a = np.random.default_rng(3).uniform(-3, 3, (2, 3))
    h = la.asarray(a, device=device).astype(la.float16)
    return [(h, a.astype(np.float16)), (la.tanh(h), np.tanh(a.astype(np.float16)))]


def _case_reduction_to_size_zero(device: str) -> list:
    """A column reduction whose result has no element launched a CUDA grid of 0 blocks
    (CUDA_ERROR_INVALID_VALUE; fuzzer seeds 120523 and 8 others on the stand-in)."""
    out = []
    for shape, axis in (((4, 0), 0), ((0, 4, 3), (0, 2)), ((2, 0), 0), ((0, 0), 1)):
        a = np.ones(shape, np.float32)
        out.append((la.sum(la.asarray(a, device=device), axis=axis), np.sum(a, axis=axis)))
    b = np.zeros((0, 3), np.bool_)
    out.append((la.all(la.asarray(b, device=device), axis=1), np.all(b, axis=1)))
    return out


CASES = {
    "all_logaddexp_triu": _case_all_logaddexp_triu,
    "prod_refused_log1p_minimum": _case_prod_refused_log1p_minimum,
    "where_sum_beside_mask_product": _case_where_sum_beside_mask_product,
    "searchsorted_astype_compare": _case_searchsorted_astype_compare,
    "empty_mean_beside_read": _case_empty_mean_beside_read,
    "int8_through_float_to_unsigned": _case_int8_through_float_to_unsigned,
    "float64_to_float16_beside_tanh": _case_float64_to_float16_beside_tanh,
    "reduction_to_size_zero": _case_reduction_to_size_zero,
}


def check_case(name: str, device: str) -> Optional[str]:
    pairs = CASES[name](device)
    la.sync()
    wrong = []
    for i, (t, want) in enumerate(pairs):
        got = t.numpy()
        n = differs(got, np.asarray(want))
        if n:
            wrong.append(f"value {i} differs at {n} elements\n  ours:  {got!r}\n  NumPy: {want!r}")
    return "\n".join(wrong) or None


# ---- a fresh process per batch: a crash fails a test, not the run -----------------------

def run_child(device: str, what: list, timeout: float = 600) -> dict:
    """Run case names or seeds (ints) in a fresh Python. Returns {"ok": count, "failed":
    [(what, text)], "crashed": None or (what, program text, how it ended)}."""
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    args = [sys.executable, os.path.abspath(__file__), device] + [str(w) for w in what]
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
        out, err, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, rc = f"timed out after {timeout} s", None
    return _parse(out, err, rc)


def _parse(out: str, err: str, rc: Optional[int]) -> dict:
    result = {"ok": 0, "failed": [], "crashed": None}
    current, text = None, []
    for block in out.split("\x1e")[1:]:
        tag, _, body = block.partition("\n")
        if tag.startswith("START "):
            current, text = tag[6:], [body]
        elif tag == "PROGRAM":
            text = [body]
        elif tag == "OK":
            result["ok"] += 1
            current = None
        elif tag == "FAIL":
            result["failed"].append((current, "".join(text) + "\n" + body))
            current = None
    if rc != 0 or current is not None:
        how = f"exit status {rc}" if rc is not None else "timed out"
        result["crashed"] = (current, "".join(text), f"{how}\n{err[-3000:]}")
    return result


def _child(device: str, what: list) -> None:
    if device == "fakecuda":
        import conftest  # noqa: F401  (registers the CUDA device over its driver stand-in)

    def emit(tag: str, body: str = "") -> None:
        sys.stdout.write(f"\x1e{tag}\n{body}")
        sys.stdout.flush()

    for w in what:
        emit(f"START {w}")
        try:
            if w in CASES:
                why = check_case(w, device)
            else:
                why = check(build(int(w), device), lambda s: emit("PROGRAM", s))
        except Exception as exc:            # an error NumPy does not raise is a finding
            import traceback
            why = f"raised {type(exc).__name__}: {exc}\n{traceback.format_exc()[-2000:]}"
        if why is None:
            emit("OK")
        else:
            emit("FAIL", why)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2:])
