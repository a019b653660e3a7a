"""The one op-test harness: a case describes a public function, the harness runs it.

An `OpCase` names a public function of `lazyarray` (or a Tensor operator or method), its
NumPy reference, the dtypes it supports, input shapes (0-d, size-0 and broadcasting
included), keyword variants, and how to draw inputs. `check_case` records the calls of a
case on one device, syncs once, and compares with NumPy: result dtype, shape and values
(within the dtype's tolerance); where NumPy raises, lazyarray must raise a ValueError,
TypeError or IndexError; and recording must not sync (except for graph-break cases).
`plan` picks the calls: the interpreter runs the full product of dtypes and variants,
compiled devices a smaller tier (see `--op-matrix` in conftest.py).

The table lives in `op_table.py`; other suites reuse it:

    from op_table import CASES
    for case in CASES:
        for dtype in case.dtypes:
            for shapes, kwargs in case.variants():
                inputs = case.make_inputs(rng, dtype, shapes)      # NumPy arrays
                out = case.fn(*[la.asarray(a) for a in inputs], **kwargs)

`case.differentiable` says whether the result is differentiable in its float inputs.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler.hlo import dtypes as D

# ---- devices --------------------------------------------------------------------------


def _usable(name: str) -> bool:
    try:
        runtime.get_device(name)
    except Exception:          # e.g. "cuda" registered but no GPU or driver here
        return False
    return True


def device_names() -> list:
    """The devices the suite runs on: LAZYARRAY_TEST_DEVICES (comma list) if set, else
    every registered device usable here ("interpreter" always, "cpu" when registered,
    "cuda" only when a GPU answers)."""
    chosen = la.config.test_devices.strip()
    if chosen:
        return [n.strip() for n in chosen.split(",") if n.strip()]
    names = ["interpreter"]
    for name in ("cpu", "cuda"):
        if name in runtime.registered_devices() and _usable(name):
            names.append(name)
    return names


# ---- dtypes and tolerances ------------------------------------------------------------

BOOL = (D.bool_,)
INTS = D.INTS
UINTS = D.UINTS
INTEGERS = D.INTEGERS
FLOATS = D.FLOATS
NUMERIC = D.NUMERIC
ALL = D.ALL
LOW_PRECISION = (D.float16, D.bfloat16)

# (rtol, atol) for one rounding of a simple op; a case scales them by `tol`
BASE_TOL = {D.float16: (2e-3, 2e-3), D.bfloat16: (1.6e-2, 1.6e-2),
            D.float32: (2e-6, 2e-6), D.float64: (1e-13, 1e-13),
            D.complex64: (2e-6, 2e-6), D.complex128: (1e-13, 1e-13)}
COMPLEX = D.COMPLEX


def tolerance(dtype: D.DType, scale: float) -> tuple:
    rtol, atol = BASE_TOL.get(dtype, (0.0, 0.0))
    return rtol * scale, atol * scale


# ---- input generators -----------------------------------------------------------------

def _floats(rng: np.random.Generator, domain: str, shape: tuple) -> np.ndarray:
    if domain == "positive":
        return rng.uniform(0.5, 3.0, shape)
    if domain == "unit":
        return rng.uniform(-0.9, 0.9, shape)
    if domain == "ge1":
        return rng.uniform(1.1, 3.0, shape)
    if domain == "nonzero":
        return rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    if domain == "near1":
        return rng.uniform(0.6, 1.4, shape)
    if domain == "special":
        pool = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 3.0])
        return rng.choice(pool, shape)
    if domain == "shift":
        return rng.integers(0, 5, shape).astype(np.float64)
    return rng.standard_normal(shape)


def _integers(rng: np.random.Generator, domain: str, shape: tuple, dtype: D.DType) -> np.ndarray:
    signed = dtype.kind == "int"
    lo, hi = {"positive": (1, 10), "nonzero": (1, 10), "shift": (0, 6), "exponent": (0, 4),
              "near1": (-2, 3), "small": (-3, 4)}.get(domain, (-9, 10))
    if not signed:
        lo = max(lo, 0) if domain not in ("positive", "nonzero") else 1
    a = rng.integers(lo, hi, shape)
    if domain == "nonzero" and signed:
        a = a * rng.choice([-1, 1], shape)
    return a


def make_array(rng: np.random.Generator, dtype: D.DType, shape: tuple, domain: str = "real") -> np.ndarray:
    """A NumPy array of `dtype` and `shape` drawn for `domain` ("real", "positive", "unit",
    "ge1", "nonzero", "near1", "special", "shift", "exponent", "small", "bool")."""
    shape = tuple(shape)
    if dtype is D.bool_ or domain == "bool":
        return rng.random(shape) < 0.5 if dtype is D.bool_ else \
            (rng.random(shape) < 0.5).astype(dtype.np)
    if dtype.is_complex:       # both parts drawn from the domain
        parts = _floats(rng, domain, shape), _floats(rng, domain, shape)
        return (np.asarray(parts[0]) + 1j * np.asarray(parts[1])).astype(dtype.np)
    if dtype.is_float:
        return np.asarray(_floats(rng, domain, shape)).astype(dtype.np)
    return np.asarray(_integers(rng, domain, shape, dtype)).astype(dtype.np)


# ---- the case -------------------------------------------------------------------------

@dataclasses.dataclass
class OpCase:
    """One public function (or operator / method) and how to check it against NumPy.

    fn(*tensors, **kwargs) runs it on lazyarray; ref(*arrays, **kwargs) on NumPy.
    dtypes: the dtypes the inputs are drawn in (every input the same, unless
    `input_dtypes` maps the case dtype to one dtype per input).
    shapes: a list of input-shape tuples (one shape per input).
    kwargs: keyword variants; each is tried with every shape.
    domains: one input domain per input (see `make_array`).
    float_result: integer and bool inputs compute in the default float (float32), as
    lazyarray's float functions do, so the reference gets float32 inputs too.
    dtype_kwarg: the dtype is passed as `dtype=` (creation functions) and inputs are empty.
    compare: "value" or "shape" (values unspecified, e.g. `empty`).
    tol: scale of the base tolerance (ops that round several times).
    differentiable: the result is differentiable in its float inputs.
    """
    name: str
    ref: Callable
    dtypes: Sequence = FLOATS
    shapes: Sequence = ((),)
    kwargs: Sequence = ({},)
    fn: Optional[Callable] = None
    domains: Optional[Sequence] = None
    float_result: bool = False
    dtype_kwarg: bool = False
    input_dtypes: Optional[Callable] = None
    compare: str = "value"
    tol: float = 1.0
    differentiable: bool = False
    label: str = ""
    pairs: Optional[Sequence] = None      # explicit (shapes, kwargs) list instead of the product
    round_back: bool = True               # low-precision inputs: round a float32 reference back
    requires: str = ""                    # a module (lazyarray.x) or lazyarray attribute not yet written
    graph_break: bool = False             # the output shape depends on data: recording may sync

    def __post_init__(self) -> None:
        if self.fn is None:
            self.fn = getattr(la, self.name, None) or _not_written(self.name)

    @property
    def id(self) -> str:
        return self.name + (f"[{self.label}]" if self.label else "")

    def variants(self) -> list:
        """Every (shapes, kwargs) pair of the case."""
        if self.pairs is not None:
            return list(self.pairs)
        return list(itertools.product(self.shapes, self.kwargs))

    def missing(self) -> str:
        """Why the case cannot run yet ("" if it can): a piece another engineer is writing."""
        if not self.requires:
            return ""
        if self.requires.startswith("lazyarray."):
            found = importlib.util.find_spec(self.requires) is not None
        else:
            found = hasattr(la, self.requires)
        return "" if found else f"{self.requires} is not written yet"

    def dtypes_of_inputs(self, dtype: D.DType, n: int) -> list:
        if self.input_dtypes is not None:
            return list(self.input_dtypes(dtype))
        return [dtype] * n

    def make_inputs(self, rng: np.random.Generator, dtype: D.DType, shapes: Sequence) -> list:
        """NumPy inputs for one variant (reusable by the gradient checks)."""
        domains = self.domains or ("real",) * len(shapes)
        dts = self.dtypes_of_inputs(dtype, len(shapes))
        return [make_array(rng, d, s, dom) for d, s, dom in zip(dts, shapes, domains)]

    def reference(self, inputs: list, dtype: D.DType, kwargs: dict) -> Any:
        """NumPy's answer, computed in float32 for float16/bfloat16 and rounded back."""
        args = [_ref_input(a, self.float_result) for a in inputs]
        kw = dict(kwargs)
        if self.dtype_kwarg:
            kw["dtype"] = dtype.np
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)   # e.g. var with ddof >= n
            out = self.ref(*args, **kw)
        return _round_back(out, inputs) if self.round_back else out


def _not_written(name: str) -> Callable:
    """Stands for a public function that does not exist yet (the table stays importable)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        raise AttributeError(f"lazyarray has no function {name!r}")
    return call


def _ref_input(a: np.ndarray, float_result: bool) -> np.ndarray:
    if a.dtype in (D.float16.np, D.bfloat16.np):
        return a.astype(np.float32)
    if float_result and a.dtype.kind in "biu":
        return a.astype(np.float32)
    return a


def _round_back(out: Any, inputs: list) -> Any:
    if isinstance(out, (list, tuple)):
        return type(out)(_round_back(o, inputs) for o in out)
    out = np.asarray(out)
    low = [a.dtype for a in inputs if a.dtype in (D.float16.np, D.bfloat16.np)]
    if low and out.dtype == np.float32 and all(d == low[0] for d in low):
        return out.astype(low[0])
    return out


# ---- running a case -------------------------------------------------------------------

class Variant:
    """One call of a case: its inputs, the recorded result and the reference."""

    def __init__(self, case: OpCase, dtype: D.DType, shapes: tuple, kwargs: dict,
                 inputs: list) -> None:
        self.case, self.dtype, self.shapes, self.kwargs, self.inputs = case, dtype, shapes, kwargs, inputs
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.input_tensors: list = []     # (tensor, its node when recorded)
        self.expected: Any = None
        self.expected_error: Optional[BaseException] = None

    def describe(self) -> str:
        return (f"{self.case.id} dtype={self.dtype.name} shapes={list(self.shapes)} "
                f"kwargs={self.kwargs}")


def plan(case: OpCase, tier: str = "full", index: int = 0) -> list:
    """The (dtype, shapes, kwargs) calls to check. "full": every dtype with every variant;
    "diagonal": every dtype and every variant at least once; "smoke": two calls (the first
    variant, and another one, in dtypes that rotate with `index` so that a run of the whole
    table covers every dtype and many variants)."""
    dtypes, variants = list(case.dtypes), case.variants()
    if tier == "full":
        return [(d, s, k) for d in dtypes for s, k in variants]
    if tier == "diagonal":
        n = max(len(dtypes), len(variants))
        return [(dtypes[i % len(dtypes)],) + tuple(variants[i % len(variants)]) for i in range(n)]
    if tier == "smoke":
        first = (dtypes[index % len(dtypes)],) + tuple(variants[0])
        second = (dtypes[(index + 1) % len(dtypes)],) + tuple(variants[index % len(variants)])
        return [first] if second == first else [first, second]
    raise ValueError(f"unknown tier {tier!r}; valid: full, diagonal, smoke")


def record(case: OpCase, calls: Sequence, device: str, rng: np.random.Generator) -> list:
    """Record each (dtype, shapes, kwargs) call of `case` on `device` (nothing runs yet)."""
    out = []
    for dtype, shapes, kwargs in calls:
        inputs = [] if case.dtype_kwarg else case.make_inputs(rng, dtype, shapes)
        v = Variant(case, dtype, shapes, kwargs, inputs)
        try:
            v.expected = case.reference(inputs, dtype, kwargs)
        except Exception as e:          # NumPy refuses: lazyarray must refuse too
            v.expected_error = e
        kw = dict(kwargs)
        if case.dtype_kwarg:
            kw["dtype"] = dtype
        try:
            tensors = [la.asarray(a, device=device) for a in inputs]
            v.input_tensors = [(t, t._node) for t in tensors]
            if case.dtype_kwarg:
                kw["device"] = device
            v.result = case.fn(*tensors, **kw)
        except Exception as e:
            v.error = e
        out.append(v)
    return out


def _flat(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [y for e in x for y in _flat(e)]
    return [x]


def inputs_changed(v: Variant) -> Optional[str]:
    """An op must leave its input tensors as they were (no buffer reused for an output while
    still referenced). A tensor that the op rebinds (functional __setitem__) is exempt."""
    for i, (t, node) in enumerate(v.input_tensors):
        if t._node is not node:
            continue
        got = np.asarray(t.numpy())
        if got.shape != v.inputs[i].shape or not np.array_equal(got, v.inputs[i], equal_nan=True):
            return f"input {i} changed its value"
    return None


def compare(v: Variant) -> Optional[str]:
    """None if the variant matches NumPy, else what differs."""
    changed = inputs_changed(v)
    if changed:
        return changed
    if v.expected_error is not None:
        if v.error is None:
            return f"NumPy raised {v.expected_error!r} but lazyarray returned a result"
        if not isinstance(v.error, (ValueError, TypeError, IndexError)):
            return f"raised {type(v.error).__name__} (expected ValueError/TypeError/IndexError): {v.error}"
        return None
    if v.error is not None:
        return f"raised {type(v.error).__name__}: {v.error}"
    got, want = _flat(v.result), _flat(v.expected)
    if len(got) != len(want):
        return f"{len(got)} results, NumPy gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        problem = _compare_one(v, g, np.asarray(w))
        if problem:
            return (f"result {i}: " if len(got) > 1 else "") + problem
    return None


def _compare_one(v: Variant, got: Any, want: np.ndarray) -> Optional[str]:
    if not isinstance(got, la.Tensor):
        return f"returned {type(got).__name__}, not a Tensor"
    if tuple(got.shape) != want.shape:
        return f"shape {tuple(got.shape)}, NumPy {want.shape}"
    if got.dtype.np != want.dtype:
        return f"dtype {got.dtype.name}, NumPy {D.from_numpy(want.dtype).name}"
    if v.case.compare == "shape":
        return None
    g = got.numpy()
    if g.shape != want.shape or g.dtype != want.dtype:
        return f"materialized as {g.dtype}{g.shape}, traced as {got.dtype.name}{tuple(got.shape)}"
    return _values_differ(g, want, D.from_numpy(want.dtype), v.case.tol)


def _values_differ(got: np.ndarray, want: np.ndarray, dtype: D.DType, scale: float) -> Optional[str]:
    if dtype.is_float or dtype.is_complex:
        rtol, atol = tolerance(dtype, scale)
        wide = np.complex128 if dtype.is_complex else np.float64
        g, w = got.astype(wide), want.astype(wide)
        ok = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    else:
        ok = got == want
    if np.all(ok):
        return None
    bad = np.argwhere(~np.asarray(ok))[:3]
    where = ", ".join(f"{tuple(i)}: got {got[tuple(i)]!r} want {want[tuple(i)]!r}" for i in bad)
    return f"{int(np.size(ok) - np.count_nonzero(ok))} of {np.size(ok)} values differ ({where})"


def _safe_compare(v: Variant) -> Optional[str]:
    try:
        return compare(v)
    except Exception as e:
        return f"reading the result raised {type(e).__name__}: {e}"


def _drop_pending(device: str) -> None:
    # after a failed sync the tensors stay pending; later tests must not inherit them
    runtime.get_device(device).pending.clear()


def check_case(case: OpCase, dtypes: Sequence, device: str, seed: int = 0,
               calls: Optional[Sequence] = None) -> None:
    """Run every variant of `case` in `dtypes` (or exactly `calls`, from `plan`) on `device`
    in one sync; fail listing every call that differs from NumPy."""
    if calls is None:
        calls = [c for c in plan(case) if c[0] in dtypes]
    rng = np.random.default_rng(seed)
    syncs = la.debug.metrics().syncs
    variants = record(case, calls, device, rng)
    recording_synced = la.debug.metrics().syncs != syncs and not case.graph_break
    try:
        la.sync(device)
    except Exception as e:
        _drop_pending(device)
        problems = _locate_failure(case, calls, device, seed, e)
    else:
        problems = [f"{v.describe()}: {p}" for v in variants if (p := _safe_compare(v))]
    if recording_synced:
        problems.append(f"recording {case.id} ran a sync: an op must only be recorded")
    if problems:
        raise AssertionError(f"{len(problems)} of {len(variants)} variants of {case.id} on "
                             f"{device} differ from NumPy:\n  " + "\n  ".join(problems))


def _locate_failure(case: OpCase, calls: Sequence, device: str, seed: int, err: Exception) -> list:
    """The batched sync failed: sync each call alone to say which ones fail."""
    rng = np.random.default_rng(seed)
    problems = [f"the batched sync failed with {type(err).__name__}: {err}"]
    for call in calls:
        (v,) = record(case, [call], device, rng)
        try:
            la.sync(device)
            p = _safe_compare(v)
        except Exception as e:
            _drop_pending(device)
            p = f"sync raised {type(e).__name__}: {e}"
        if p:
            problems.append(f"{v.describe()}: {p}")
    return problems
