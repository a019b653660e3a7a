"""Microseconds to record each public elementwise form (issue 11 point 6: <= 3 us each).

    python bench/recording_sweep.py [--over 3.0] [--only SUBSTRING] [--rounds 15]

Every public elementwise function of `lazyarray` and every elementwise operator and
method of `Tensor`, over 4,096-element tensors of bool, int32, int64, uint8, float16,
float32 and float64, with a tensor, a Python int/float/bool or a NumPy scalar on either
side. Each form is recorded (nothing runs; a sync after each batch with nothing live keeps
the pending list short) in batches, one batch of every form per round; the figure is the
median of the batches' per-op thread CPU times (time.thread_time_ns: other processes on a
shared machine count only through the core they share), the loop's own call included. Forms that raise (a float shifted, a bool
subtracted) are left out. Not a test: speed is never asserted (bench/bench_recording.py
holds the pytest-benchmark rows beside the peers).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np

import lazyarray as la

N = 4096


def _tensors() -> dict:
    rng = np.random.default_rng(0)
    f = rng.standard_normal(N).astype(np.float32)
    return {"f32": la.asarray(f), "f16": la.asarray(f.astype(np.float16)),
            "f64": la.asarray(f.astype(np.float64)), "i32": la.asarray(np.arange(N, dtype=np.int32)),
            "i64": la.asarray(np.arange(N, dtype=np.int64)), "u8": la.asarray(np.arange(N).astype(np.uint8)),
            "bool": la.asarray(f > 0)}


UNARY_FNS = ["exp", "expm1", "log", "log1p", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos",
             "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf",
             "log2", "log10", "floor", "ceil", "trunc", "round", "negative", "positive", "abs",
             "sign", "square", "reciprocal", "logical_not", "bitwise_invert", "isnan", "isinf",
             "isfinite", "signbit", "real", "imag", "conj", "relu"]
BINARY_FNS = ["add", "subtract", "multiply", "maximum", "minimum", "pow", "divide", "atan2",
              "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
              "floor_divide", "remainder", "logical_and", "logical_or", "logical_xor",
              "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift",
              "bitwise_right_shift", "copysign", "nextafter", "hypot", "logaddexp"]
OPERATORS = {"+": "__add__", "-": "__sub__", "*": "__mul__", "/": "__truediv__",
             "//": "__floordiv__", "%": "__mod__", "**": "__pow__", "&": "__and__",
             "|": "__or__", "^": "__xor__", "<<": "__lshift__", ">>": "__rshift__",
             "==": "__eq__", "!=": "__ne__", "<": "__lt__", "<=": "__le__", ">": "__gt__",
             ">=": "__ge__"}
UNARY_METHODS = ["__neg__", "__pos__", "__abs__", "__invert__", "exp", "log", "sqrt", "tanh",
                 "sigmoid", "relu", "square", "round", "floor", "ceil", "sign", "log1p",
                 "rsqrt", "float", "double", "long", "int", "bool", "half"]


def _scalars(dtype_name: str) -> dict:
    """The other operand's kinds: a Python int, float, bool, a NumPy scalar of the
    tensor's own dtype (and np.float32 beside floats)."""
    out = {"2": 2, "2.5": 2.5, "True": True}
    np_own = {"f32": np.float32(2.5), "f16": np.float16(2.5), "f64": np.float64(2.5),
              "i32": np.int32(2), "i64": np.int64(2), "u8": np.uint8(2), "bool": np.bool_(True)}
    out[f"np.{type(np_own[dtype_name]).__name__}"] = np_own[dtype_name]
    return out


def forms() -> dict:
    """name -> a function of no arguments recording the form once."""
    T = _tensors()
    x, c = T["f32"], T["bool"]
    y = la.asarray(np.ones(N, np.float32))
    out: dict = {}
    for dn, t in T.items():
        for fn in UNARY_FNS:
            f = getattr(la, fn)
            out[f"la.{fn}({dn})"] = (lambda f=f, t=t: f(t))
        for m in UNARY_METHODS:
            out[f"{dn}.{m}()"] = getattr(t, m)
        u = la.asarray(np.ones(N, t.dtype.np))
        for fn in BINARY_FNS:
            f = getattr(la, fn)
            out[f"la.{fn}({dn}, {dn})"] = (lambda f=f, t=t, u=u: f(t, u))
            for sn, s in _scalars(dn).items():
                out[f"la.{fn}({dn}, {sn})"] = (lambda f=f, t=t, s=s: f(t, s))
                out[f"la.{fn}({sn}, {dn})"] = (lambda f=f, t=t, s=s: f(s, t))
        for sym, dunder in OPERATORS.items():
            op = getattr(t, dunder)
            out[f"{dn} {sym} {dn}"] = (lambda op=op, u=u: op(u))
            for sn, s in _scalars(dn).items():
                out[f"{dn} {sym} {sn}"] = (lambda op=op, s=s: op(s))
                rname = dunder.replace("__", "__r", 1)
                if hasattr(t, rname) and sym not in ("==", "!=", "<", "<=", ">", ">="):
                    rop = getattr(t, rname)
                    out[f"{sn} {sym} {dn}"] = (lambda rop=rop, s=s: rop(s))
        for p in (2, 3, 0.5, -1, 2.0, -1.0, 0, 1):
            out[f"{dn} ** {p!r}"] = (lambda t=t, p=p: t ** p)
        for lo, hi in ((0, 1), (0.0, 1.0), (0, None), (None, 1), (-1.5, 2.5)):
            out[f"la.clip({dn}, {lo}, {hi})"] = (lambda t=t, lo=lo, hi=hi: la.clip(t, lo, hi))
            out[f"{dn}.clip({lo}, {hi})"] = (lambda t=t, lo=lo, hi=hi: t.clip(lo, hi))
        out[f"{dn}.clamp(min=0)"] = (lambda t=t: t.clamp(min=0))
        out[f"la.where(c, {dn}, {dn})"] = (lambda t=t, u=u: la.where(c, t, u))
        for s in (0, 0.0, 2.5, True):
            out[f"la.where(c, {dn}, {s!r})"] = (lambda t=t, s=s: la.where(c, t, s))
            out[f"la.where(c, {s!r}, {dn})"] = (lambda t=t, s=s: la.where(c, s, t))
        out[f"la.where(c, 1.0, 0.0) [{dn} unused]"] = (lambda: la.where(c, 1.0, 0.0))
        out[f"{dn}.maximum({dn})"] = (lambda t=t, u=u: t.maximum(u))
        out[f"{dn}.astype(float32)"] = (lambda t=t: t.astype(la.float32))
        out[f"la.astype({dn}, int32)"] = (lambda t=t: la.astype(t, la.int32))
        out[f"{dn}.masked_fill(c, 0)"] = (lambda t=t: t.masked_fill(c, 0))
    out["x * y"] = lambda: x * y
    return out


def _batch(fn: Callable, batch: int) -> float:
    """Thread-CPU microseconds per call of one batch of `batch` calls."""
    t0 = time.thread_time_ns()
    for _ in range(batch):
        fn()
    dt = (time.thread_time_ns() - t0) * 1e-3 / batch
    la.sync()                              # nothing is live: cheap, resets the counters
    return dt


def measure_all(fns: dict, rounds: int, batch: int) -> dict:
    """name -> median thread-CPU microseconds per call. The rounds go over every form in
    turn (one batch of each per round, the first round a warm-up), so that a burst of
    load from other processes lands on one batch of many forms, not on every batch of a
    few: the median drops it."""
    times: dict = {name: [] for name in fns}
    for r in range(rounds + 1):
        for name, fn in fns.items():
            dt = _batch(fn, batch)
            if r:
                times[name].append(dt)
    return {name: statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--over", type=float, default=0.0, help="list only forms above this (us)")
    ap.add_argument("--only", default="", help="forms whose name contains this")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batch", type=int, default=200)
    args = ap.parse_args()
    fns = {}
    for name, fn in forms().items():
        if args.only and args.only not in name:
            continue
        try:
            fn()
        except (TypeError, ValueError, OverflowError):
            continue                       # a form the op refuses
        fns[name] = fn
    fns["<empty call>"] = lambda: None
    us = measure_all(fns, args.rounds, args.batch)
    base = us.pop("<empty call>")
    print(f"# {len(us)} forms; an empty call costs {base:.2f} us (included below)")
    for name, t in sorted(us.items(), key=lambda kv: kv[1], reverse=True):
        if t > args.over:
            print(f"{t:7.2f}  {name}")


if __name__ == "__main__":
    main()
