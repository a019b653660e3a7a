"""A differential fuzzer: random programs run by lazyarray (each device) and by NumPy
itself, op for op, and compared. Not the interpreter: NumPy is the oracle, so an error
shared by the interpreter and the compiler is caught too.

A program starts from a few random leaves (special values sometimes injected) and applies
random ops, each to the lazyarray tensor and to the NumPy array side by side:
elementwise (unary, binary with broadcasting, Python scalars, comparisons and where),
floor division and remainder, reductions with axes and keepdims, reshape, transpose,
basic slicing with steps, concatenation, integer-array indexing, matmul and cumulative
sums. Values are kept moderate (no division by small numbers, exp of clipped values) so
that a difference is an error, not conditioning.

Profiles (tests/hypothesis_profiles.py names them): "ci" runs a fixed seed over 40
programs per device, "long" 10,000 (by hand):
`HYPOTHESIS_PROFILE=long pytest tests/test_fuzz_numpy.py`. A failure prints the seed and
the program; fixed findings become op-table cases (tests/op_table.py, "fuzzer findings").
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

import lazyarray as la
from harness import device_names

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.float16]
TOL = {np.float16: 2e-2, np.float32: 2e-4, np.float64: 1e-9, np.int32: 0, np.int64: 0}
CHUNKS = 8


def _programs() -> int:
    name = os.environ.get("HYPOTHESIS_PROFILE") or settings.get_current_profile_name()
    return 10_000 if name == "long" else 40


class Program:
    """Values as (tensor, array) pairs, and the text of what was done (for a report)."""

    def __init__(self, seed: int, device: str) -> None:
        self.rng = np.random.default_rng(seed)
        self.dtype = DTYPES[self.rng.integers(len(DTYPES))]
        self.device = device
        self.values: list = []
        self.lines: list = []

    @property
    def is_float(self) -> bool:
        return np.dtype(self.dtype).kind == "f"

    def leaf(self, shape: tuple) -> None:
        if self.is_float:
            a = self.rng.uniform(-3, 3, shape)
            if a.size and self.rng.random() < 0.3:
                for i in self.rng.integers(0, a.size, 2):
                    a.reshape(-1)[i] = self.rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0])
        else:
            a = self.rng.integers(-9, 10, shape)
        a = np.asarray(a).astype(self.dtype)
        self.add(la.asarray(a, device=self.device), a, f"leaf {a.dtype}{list(shape)}")

    def add(self, t, a, text: str) -> None:
        a = np.asarray(a)
        assert t.shape == a.shape, f"{text}: shape {t.shape} vs NumPy {a.shape}"
        assert np.dtype(t.dtype.np) == a.dtype, f"{text}: dtype {t.dtype} vs NumPy {a.dtype}"
        self.lines.append(f"v{len(self.values)} = {text}")
        self.values.append((t, a))

    def pick(self) -> tuple:
        k = int(self.rng.integers(len(self.values)))
        return k, self.values[k]

    def choice(self, options):
        return options[int(self.rng.integers(len(options)))]


# ---- the ops: each applies one random op to a picked value ---------------------------

def _unary(p: Program) -> None:
    k, (t, a) = p.pick()
    if p.is_float:
        name = p.choice(["negative", "abs", "tanh", "sin", "floor", "ceil", "sign", "exp",
                         "sqrt", "square", "trunc"])
    else:
        name = p.choice(["negative", "abs", "sign", "square"])
    if name == "exp":
        lo, hi = (-8, 8)
        p.add(la.exp(la.clip(t, lo, hi)), np.exp(np.clip(a, lo, hi)), f"exp(clip(v{k}))")
        return
    if name == "sqrt":
        p.add(la.sqrt(la.abs(t)), np.sqrt(np.abs(a)), f"sqrt(abs(v{k}))")
        return
    ref = {"trunc": np.trunc}.get(name) or getattr(np, name)
    p.add(getattr(la, name)(t), ref(a), f"{name}(v{k})")


def _partner(p: Program, shape: tuple) -> tuple:
    """A value broadcastable with `shape` (or a fresh leaf of a broadcast shape)."""
    fits = [(k, v) for k, v in enumerate(p.values)
            if _broadcastable(v[1].shape, shape)]
    if fits and p.rng.random() < 0.7:
        return fits[int(p.rng.integers(len(fits)))]
    sub = tuple(1 if p.rng.random() < 0.3 else n for n in shape[int(p.rng.integers(len(shape) + 1)):])
    p.leaf(sub)
    return len(p.values) - 1, p.values[-1]


def _broadcastable(a: tuple, b: tuple) -> bool:
    return all(x == y or x == 1 or y == 1 for x, y in zip(a[::-1], b[::-1]))


def _binary(p: Program) -> None:
    k, (t, a) = p.pick()
    j, (u, b) = _partner(p, a.shape)
    names = ["add", "subtract", "multiply", "maximum", "minimum"]
    name = p.choice(names + (["divide", "floor_divide", "remainder"] if p.is_float else
                             ["floor_divide", "remainder"]))
    if name in ("divide", "floor_divide", "remainder"):
        # a divisor kept away from 0: a difference must not be conditioning
        if p.is_float:
            u = la.where(la.abs(u) < 0.5, 1.5, u)
            b = np.where(np.abs(b) < 0.5, np.asarray(1.5, a.dtype), b)
        else:
            u = la.where(u == 0, 3, u)
            b = np.where(b == 0, np.asarray(3, a.dtype), b)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, b)
    p.add(getattr(la, name)(t, u), want, f"{name}(v{k}, v{j})")


def _scalar(p: Program) -> None:
    k, (t, a) = p.pick()
    s = float(p.choice([2.0, -1.5, 0.5, 3.0])) if p.is_float else int(p.choice([2, -3, 5]))
    op = p.choice(["+", "-", "*", "r-"])
    with np.errstate(all="ignore"):
        if op == "+":
            p.add(t + s, a + s, f"v{k} + {s}")
        elif op == "-":
            p.add(t - s, a - s, f"v{k} - {s}")
        elif op == "*":
            p.add(t * s, a * s, f"v{k} * {s}")
        else:
            p.add(s - t, s - a, f"{s} - v{k}")


def _where(p: Program) -> None:
    k, (t, a) = p.pick()
    j, (u, b) = _partner(p, a.shape)
    cmp = p.choice(["less", "greater_equal", "equal", "not_equal"])
    with np.errstate(all="ignore"):
        want = np.where(getattr(np, cmp)(a, b), a, b)
    p.add(la.where(getattr(la, cmp)(t, u), t, u), want, f"where({cmp}(v{k}, v{j}), v{k}, v{j})")


def _reduce(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim == 0:
        return
    name = p.choice(["sum", "max", "min", "mean", "prod"] if p.is_float else
                    ["sum", "max", "min"])
    axis = p.choice([None, int(p.rng.integers(a.ndim)), tuple(range(a.ndim))[-2:]])
    keep = bool(p.rng.random() < 0.3)
    if name in ("max", "min") and (a.size == 0 or (axis is not None and 0 in a.shape)):
        return
    if name == "prod":
        t, a = la.clip(t, -1.5, 1.5), np.clip(a, -1.5, 1.5)
    with np.errstate(all="ignore"):
        want = getattr(np, name)(a, axis=axis, keepdims=keep)
    if name == "sum" and not p.is_float:
        want = want.astype(np.int64)
    if name == "mean" and a.dtype == np.float16:
        want = np.mean(a.astype(np.float32), axis=axis, keepdims=keep).astype(np.float16)
    p.add(getattr(la, name)(t, axis=axis, keepdims=keep), want,
          f"{name}(v{k}, axis={axis}, keepdims={keep})")


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
            and v[1].ndim == a.ndim]
    j, (u, b) = same[int(p.rng.integers(len(same)))]
    p.add(la.concat([t, u], axis=0), np.concatenate([a, b], axis=0), f"concat(v{k}, v{j})")


def _matmul(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim < 1 or not p.is_float or a.dtype == np.float16:
        return
    n = a.shape[-1]
    p.leaf((n, int(p.rng.integers(1, 5))))
    u, b = p.values[-1]
    t, a = la.clip(t, -4, 4), np.clip(a, -4, 4)
    u, b = la.clip(u, -4, 4), np.clip(b, -4, 4)
    with np.errstate(all="ignore"):
        p.add(t @ u, a @ b, f"v{k} @ v{len(p.values) - 1}")


def _cumsum(p: Program) -> None:
    k, (t, a) = p.pick()
    if a.ndim == 0 or not p.is_float or a.dtype == np.float16:
        return
    axis = int(p.rng.integers(a.ndim))
    p.add(la.cumulative_sum(t, axis=axis), np.cumsum(a, axis=axis), f"cumsum(v{k}, {axis})")


OPS = [_unary, _unary, _binary, _binary, _scalar, _where, _reduce, _reshape, _slice,
       _index, _concat, _matmul, _cumsum]


def build(seed: int, device: str) -> Program:
    p = Program(seed, device)
    shape = tuple(int(n) for n in p.rng.integers(0 if p.rng.random() < 0.05 else 1, 5,
                                                 int(p.rng.integers(0, 4))))
    p.leaf(shape)
    for _ in range(int(p.rng.integers(2, 9))):
        op = OPS[int(p.rng.integers(len(OPS)))]
        op(p)
    return p


def compare(p: Program, seed: int) -> None:
    outs = p.values[-3:]
    got = [t.numpy() for t, _ in outs]          # one sync computes them all
    tol = TOL[p.dtype]
    for (t, want), g in zip(outs, got):
        ok = np.isnan(g) == np.isnan(want) if np.dtype(p.dtype).kind == "f" else True
        if np.dtype(p.dtype).kind == "f":
            finite = np.isfinite(want) & np.isfinite(g)
            scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
            with np.errstate(invalid="ignore"):
                close = np.abs(g.astype(np.float64) - want.astype(np.float64)) <= tol * scale
            same_special = (g == want) | (np.isnan(g) & np.isnan(want))
            ok = ok & np.where(finite, close, same_special)
        else:
            ok = g == want
        if not np.all(ok):
            program = "\n  ".join(p.lines)
            pytest.fail(f"seed {seed} on {p.device}: lazyarray differs from NumPy at "
                        f"{int(np.size(ok) - np.count_nonzero(ok))} elements\n  {program}\n"
                        f"ours:  {g!r}\nNumPy: {want!r}")


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("device_name", device_names())
def test_random_programs_agree_with_numpy(device_name, chunk):
    n = _programs()
    for seed in range(chunk, n, CHUNKS):
        p = build(seed, device_name)
        compare(p, seed)
