"""The table of op cases: every public function of `lazyarray` and every Tensor operator
and method, each with its NumPy reference (see `harness.OpCase` for the fields).

`CASES` is the whole table; `covered_functions()` and `covered_tensor_members()` say what
it covers (the coverage tests compare them with `lazyarray.ops.__all__` and `Tensor`).
"""
from __future__ import annotations

import math
import operator

import numpy as np

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from harness import ALL, BOOL, COMPLEX, FLOATS, INTEGERS, INTS, NUMERIC, OpCase

# ---- shapes and keyword variants shared by many cases --------------------------------

UNARY = [((2, 3),), ((),), ((0,),), ((2, 0, 3),), ((5,),)]
BINARY = [((2, 3), (2, 3)), ((), ()), ((0, 3), (0, 3)), ((2, 1, 4), (3, 1)), ((3, 4), ()),
          ((1,), (0,))]
TERNARY = [((2, 3), (2, 3), (2, 3)), ((), (), ()), ((2, 1), (1, 3), (3,)), ((0,), (0,), (0,))]
REDUCE_SHAPES = [((2, 3, 4),), ((),), ((0, 3),)]
REDUCE_KW = [{}, {"axis": 0}, {"axis": -1, "keepdims": True}, {"axis": (0, 1)},
             {"axis": None, "keepdims": True}, {"axis": ()}, {"axis": (-1, 0), "keepdims": True}]
SOME_INTS = (D.int32, D.uint8, D.bool_)     # integer inputs of float functions: computed in float32

CASES: list = []


def add(*cases: OpCase) -> None:
    CASES.extend(cases)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


# ---- elementwise: float functions of one argument ------------------------------------

for _name, _ref, _domain, _tol in [
        ("exp", np.exp, "real", 1), ("expm1", np.expm1, "real", 1), ("log", np.log, "positive", 1),
        ("log1p", np.log1p, "positive", 1), ("log2", np.log2, "positive", 2),
        ("log10", np.log10, "positive", 2), ("sqrt", np.sqrt, "positive", 1),
        ("rsqrt", lambda x: 1 / np.sqrt(x), "positive", 2), ("tanh", np.tanh, "real", 1),
        ("sigmoid", _sigmoid, "real", 2), ("sin", np.sin, "real", 1), ("cos", np.cos, "real", 1),
        ("tan", np.tan, "unit", 2), ("asin", np.arcsin, "unit", 1), ("acos", np.arccos, "unit", 1),
        ("atan", np.arctan, "real", 1), ("sinh", np.sinh, "real", 1), ("cosh", np.cosh, "real", 1),
        ("asinh", np.arcsinh, "real", 1), ("acosh", np.arccosh, "ge1", 1),
        ("atanh", np.arctanh, "unit", 1), ("erf", _erf, "real", 2)]:
    add(OpCase(_name, _ref, dtypes=FLOATS + SOME_INTS, shapes=UNARY, domains=(_domain,),
               float_result=True, tol=_tol, differentiable=True))

add(OpCase("reciprocal", np.reciprocal, dtypes=FLOATS, shapes=UNARY, domains=("nonzero",),
           differentiable=True))

# ---- elementwise: numeric functions of one argument ----------------------------------

for _name, _ref, _diff in [("abs", np.abs, True), ("negative", np.negative, True),
                           ("positive", np.positive, True), ("sign", np.sign, False),
                           ("square", np.square, True), ("floor", np.floor, False),
                           ("ceil", np.ceil, False), ("trunc", np.trunc, False),
                           ("round", np.round, False)]:
    add(OpCase(_name, _ref, dtypes=NUMERIC, shapes=UNARY, differentiable=_diff))

add(OpCase("relu", lambda x: np.maximum(x, 0), dtypes=NUMERIC, shapes=UNARY, differentiable=True),
    OpCase("signbit", np.signbit, dtypes=FLOATS + INTS, shapes=UNARY, domains=("special",)),
    OpCase("isnan", np.isnan, dtypes=ALL, shapes=UNARY, domains=("special",)),
    OpCase("isinf", np.isinf, dtypes=ALL, shapes=UNARY, domains=("special",)),
    OpCase("isfinite", np.isfinite, dtypes=ALL, shapes=UNARY, domains=("special",)),
    OpCase("logical_not", np.logical_not, dtypes=ALL, shapes=UNARY, domains=("shift",)),
    OpCase("bitwise_invert", np.invert, dtypes=INTEGERS + BOOL, shapes=UNARY))

# ---- elementwise: two arguments ------------------------------------------------------

add(OpCase("add", np.add, dtypes=ALL, shapes=BINARY, differentiable=True),
    OpCase("subtract", np.subtract, dtypes=NUMERIC, shapes=BINARY, differentiable=True),
    OpCase("multiply", np.multiply, dtypes=ALL, shapes=BINARY, differentiable=True),
    OpCase("divide", np.divide, dtypes=FLOATS + SOME_INTS[:2], shapes=BINARY,
           domains=("real", "nonzero"), float_result=True, differentiable=True),
    OpCase("maximum", np.maximum, dtypes=ALL, shapes=BINARY, differentiable=True),
    OpCase("minimum", np.minimum, dtypes=ALL, shapes=BINARY, differentiable=True),
    OpCase("pow", np.power, dtypes=FLOATS, shapes=BINARY, domains=("positive", "real"),
           tol=4, differentiable=True),
    OpCase("pow", np.power, dtypes=INTEGERS, shapes=BINARY, domains=("small", "exponent"),
           label="integers"),
    OpCase("remainder", np.remainder, dtypes=NUMERIC, shapes=BINARY, domains=("real", "nonzero"),
           tol=2, differentiable=True),
    OpCase("floor_divide", np.floor_divide, dtypes=NUMERIC, shapes=BINARY,
           domains=("real", "nonzero"), differentiable=True),
    OpCase("atan2", np.arctan2, dtypes=FLOATS + SOME_INTS[:2], shapes=BINARY, float_result=True,
           tol=2, differentiable=True),
    OpCase("copysign", np.copysign, dtypes=FLOATS + SOME_INTS[:2], shapes=BINARY,
           domains=("real", "special"), float_result=True),
    OpCase("copysign", np.copysign, dtypes=FLOATS, shapes=BINARY, differentiable=True,
           label="gradient"),
    OpCase("hypot", np.hypot, dtypes=FLOATS + SOME_INTS[:2], shapes=BINARY, tol=4,
           float_result=True, differentiable=True),
    OpCase("logaddexp", np.logaddexp, dtypes=FLOATS + SOME_INTS[:2], shapes=BINARY, tol=4,
           float_result=True, differentiable=True),
    OpCase("logaddexp2", np.logaddexp2, dtypes=FLOATS + SOME_INTS[:2], shapes=BINARY, tol=4,
           float_result=True, differentiable=True))

for _name, _ref in [("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
                    ("less_equal", np.less_equal), ("greater", np.greater),
                    ("greater_equal", np.greater_equal)]:
    add(OpCase(_name, _ref, dtypes=ALL, shapes=BINARY, domains=("shift", "shift")))

for _name, _ref in [("logical_and", np.logical_and), ("logical_or", np.logical_or),
                    ("logical_xor", np.logical_xor)]:
    add(OpCase(_name, _ref, dtypes=ALL, shapes=BINARY, domains=("shift", "shift")))

for _name, _ref in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
                    ("bitwise_xor", np.bitwise_xor)]:
    add(OpCase(_name, _ref, dtypes=INTEGERS + BOOL, shapes=BINARY))

add(OpCase("bitwise_left_shift", np.left_shift, dtypes=INTEGERS, shapes=BINARY,
           domains=("real", "shift")),
    OpCase("bitwise_right_shift", np.right_shift, dtypes=INTEGERS, shapes=BINARY,
           domains=("real", "shift")))

# ---- elementwise: where, clip, astype -------------------------------------------------

add(OpCase("where", np.where, dtypes=ALL, shapes=TERNARY,
           input_dtypes=lambda d: (D.bool_, d, d), differentiable=True),
    OpCase("clip", np.clip, dtypes=FLOATS, shapes=[((2, 3),), ((),), ((0,),)],
           kwargs=[{"min": -0.5, "max": 0.5}, {"min": 0.0}, {"max": -0.25}], differentiable=True),
    OpCase("clip", np.clip, dtypes=INTS, shapes=[((2, 3),), ((),)],
           kwargs=[{"min": -3, "max": 4}, {"min": 0}], label="integers"),
    OpCase("clip", np.clip, dtypes=FLOATS + INTS, shapes=TERNARY, label="tensor bounds",
           differentiable=True),
    OpCase("astype", lambda x, dtype: x.astype(D.to_dtype(dtype).np), dtypes=ALL,
           shapes=[((2, 3),), ((),)], kwargs=[{"dtype": d} for d in ALL], domains=("shift",),
           round_back=False))

# ---- statistical, searching, utility --------------------------------------------------


def zero_d_axis(np_fn):
    """lazyarray accepts axis 0 or -1 of a 0-d tensor in every reduction and reads it as no
    axis; NumPy does so for sum, prod, max, min, all and any but not for mean, var, std or
    flip, so the reference drops the axis of a 0-d input."""
    def ref(x, *args, **kw):
        if np.ndim(x) == 0:
            for k in ("axis", "dim"):
                if isinstance(kw.get(k), tuple) and len(kw[k]) > 1:
                    raise ValueError("0 and -1 name the same axis of a 0-d array: repeated")
            kw = {k: (None if k in ("axis", "dim") and _names_no_axis(v) else v)
                  for k, v in kw.items()}
        return np_fn(x, *args, **kw)
    return ref


def _names_no_axis(axis) -> bool:
    axes = axis if isinstance(axis, tuple) else (axis,)
    return all(a in (0, -1) for a in axes)


def _reduction(name: str, ref, dtypes, domain: str = "real", float_result: bool = False,
               tol: float = 1.0, diff: bool = False, kwargs=REDUCE_KW, label: str = "") -> OpCase:
    return OpCase(name, zero_d_axis(ref), dtypes=dtypes, shapes=REDUCE_SHAPES, kwargs=kwargs,
                  domains=(domain,), float_result=float_result, tol=tol, differentiable=diff,
                  label=label)


def _var(x, axis=None, keepdims=False, correction=0):
    return np.var(x, axis=axis, keepdims=keepdims, ddof=correction)


def _std(x, axis=None, keepdims=False, correction=0):
    return np.std(x, axis=axis, keepdims=keepdims, ddof=correction)


ARG_KW = [{}, {"axis": 0}, {"axis": -1, "keepdims": True}, {"axis": None, "keepdims": True}]
VAR_KW = REDUCE_KW + [{"axis": 1, "correction": 1}]

add(_reduction("sum", np.sum, ALL, tol=4, diff=True),
    _reduction("prod", np.prod, NUMERIC, domain="near1", tol=8, diff=True),
    _reduction("mean", np.mean, FLOATS + SOME_INTS, float_result=True, tol=4, diff=True),
    _reduction("var", _var, FLOATS + SOME_INTS[:1], float_result=True, tol=16, diff=True,
               kwargs=VAR_KW),
    _reduction("std", _std, FLOATS + SOME_INTS[:1], float_result=True, tol=16, diff=True,
               kwargs=VAR_KW),
    _reduction("max", np.max, ALL, diff=True),
    _reduction("min", np.min, ALL, diff=True),
    _reduction("all", np.all, ALL, domain="shift"),
    _reduction("any", np.any, ALL, domain="shift"),
    _reduction("argmax", np.argmax, ALL, domain="shift", kwargs=ARG_KW),
    _reduction("argmin", np.argmin, ALL, domain="shift", kwargs=ARG_KW),
    OpCase("cumulative_sum", np.cumulative_sum, dtypes=NUMERIC, shapes=[((2, 3),), ((0, 2),)],
           kwargs=[{"axis": 0}, {"axis": -1}, {"axis": 1, "include_initial": True}], tol=4,
           differentiable=True),
    OpCase("cumulative_sum", np.cumulative_sum, dtypes=(D.float32, D.int8), shapes=[((5,),)],
           kwargs=[{}], label="1-d"),
    OpCase("cumulative_prod", np.cumulative_prod, dtypes=NUMERIC, shapes=[((2, 3),)],
           kwargs=[{"axis": 0}, {"axis": 1}], domains=("near1",), tol=4, differentiable=True))

def _with_np_dtype(np_fn):
    """The reference with a lazyarray dtype keyword turned into NumPy's."""
    def ref(x, dtype=None, **kw):
        return np_fn(x, dtype=None if dtype is None else D.to_dtype(dtype).np, **kw)
    return ref


ACC_KW = [{"dtype": D.float64}, {"dtype": D.int32, "axis": 1}, {"dtype": D.float32, "axis": 0}]
add(OpCase("sum", _with_np_dtype(np.sum), dtypes=(D.int8, D.uint8, D.bool_, D.float32),
           shapes=[((2, 3),)], kwargs=ACC_KW, label="dtype keyword", domains=("small",)),
    OpCase("prod", _with_np_dtype(np.prod), dtypes=(D.int8, D.float32),
           shapes=[((2, 3),)], kwargs=ACC_KW, label="dtype keyword", domains=("small",)),
    OpCase("cumulative_sum", _with_np_dtype(np.cumulative_sum), dtypes=(D.int8, D.bool_),
           shapes=[((2, 3),)], kwargs=[{"dtype": D.int16, "axis": 1}, {"dtype": D.float64, "axis": 0}],
           label="dtype keyword", domains=("small",)))

# ---- sorting, searching, indexing functions, utility ---------------------------------


def _sort(x, axis=-1, descending=False):
    out = np.sort(x, axis=axis)
    return np.flip(out, axis=axis) if descending else out


def _argsort(x, axis=-1, descending=False):
    if np.ndim(x) == 0:     # NumPy's argsort takes a 0-d array, its sort does not; we take neither
        raise ValueError("argsort of a 0-d array")
    if not descending:
        return np.argsort(x, axis=axis, stable=True)
    # stable descending: sort the reversed array stably, then undo the reversal
    n = x.shape[axis]
    order = np.argsort(np.flip(x, axis=axis), axis=axis, stable=True)
    return np.flip(n - 1 - order, axis=axis)


def _searchsorted(a, v, side="left"):
    return np.searchsorted(np.sort(a), v, side=side)


def _la_searchsorted(a, v, **kw):
    return la.searchsorted(la.sort(a), v, **kw)


def _nonzero_static(x, size, fill_value=0):
    return tuple(np.concatenate([i[:size], np.full(max(0, size - len(i)), fill_value)]).astype(np.int64)
                 for i in np.nonzero(x))


SORT_KW = [{}, {"axis": 0}, {"descending": True}]
SORT_SHAPES = [((5,),), ((3, 4),), ((0,),), ((),)]

add(OpCase("sort", _sort, dtypes=ALL, shapes=SORT_SHAPES, kwargs=SORT_KW, domains=("shift",),
           differentiable=True),
    OpCase("argsort", _argsort, dtypes=ALL, shapes=SORT_SHAPES, kwargs=SORT_KW, domains=("shift",)),
    OpCase("searchsorted", _searchsorted, fn=_la_searchsorted, dtypes=NUMERIC,
           shapes=[((5,), (3,)), ((5,), ()), ((0,), (2,)), ((4,), (2, 3))],
           kwargs=[{}, {"side": "right"}], domains=("shift", "shift"), requires="sort"),
    # ("shift": small integers, so values repeat; 80 elements in x2: sorted and searched)
    OpCase("isin", np.isin, dtypes=NUMERIC,
           shapes=[((4, 3), (5,)), ((6,), ()), ((3,), (0,)), ((2, 5), (80,))],
           kwargs=[{}, {"invert": True}], domains=("shift", "shift"), requires="sort"),
    _reduction("count_nonzero", np.count_nonzero, ALL, domain="shift"),
    OpCase("nonzero_static", _nonzero_static, dtypes=(D.float32, D.int8, D.bool_),
           shapes=[((2, 3),), ((5,),), ((0,),), ((),)], domains=("shift",),
           kwargs=[{"size": 3}, {"size": 8, "fill_value": -1}]),
    OpCase("real", np.real, dtypes=NUMERIC, shapes=UNARY[:3], differentiable=True),
    OpCase("imag", np.imag, dtypes=NUMERIC, shapes=UNARY[:3]),
    OpCase("conj", np.conj, dtypes=NUMERIC, shapes=UNARY[:3], differentiable=True),
    OpCase("take", np.take, dtypes=(D.float32, D.int16, D.bool_), differentiable=True,
           pairs=[(((3, 4),), {"indices": np.array([0, 2, 1]), "axis": 0}),
                  (((3, 4),), {"indices": np.array([[3], [0]]), "axis": 1}),
                  (((5,),), {"indices": np.array([4, 0, 4])}),
                  (((3, 4),), {"indices": np.array([-1, 0]), "axis": -1})]),
    OpCase("take_along_axis", np.take_along_axis, dtypes=(D.float32, D.int16, D.bool_),
           differentiable=True,
           pairs=[(((3, 4),), {"indices": np.array([[0], [2], [3]]), "axis": 1}),
                  (((3, 4),), {"indices": np.array([[2, 0, 1, 1]]), "axis": 0}),
                  (((4,),), {"indices": np.array([3, 3, 0]), "axis": -1})]),
    OpCase("dynamic_slice", lambda x, start_indices, slice_sizes: _np_dynamic_slice(
               x, start_indices, slice_sizes), dtypes=(D.float32, D.int16, D.bool_),
           differentiable=True,
           pairs=[(((5, 4),), {"start_indices": (1, 2), "slice_sizes": (3, 2)}),
                  (((5, 4),), {"start_indices": (4, -3), "slice_sizes": (3, 2)}),   # clamped
                  (((6,),), {"start_indices": (9,), "slice_sizes": (0,)}),
                  (((), ), {"start_indices": (), "slice_sizes": ()})]),
    OpCase("dynamic_update_slice", lambda x, u, start_indices: _np_dynamic_update_slice(
               x, u, start_indices), dtypes=(D.float32, D.int16, D.bool_),
           differentiable=True,
           pairs=[(((5, 4), (2, 3)), {"start_indices": (1, 0)}),
                  (((5, 4), (2, 3)), {"start_indices": (7, -2)}),               # clamped
                  (((3,), (0,)), {"start_indices": (2,)})]),
    OpCase("diff", np.diff, dtypes=NUMERIC + BOOL, shapes=[((2, 5),), ((4,),), ((0,),), ((),)],
           kwargs=[{}, {"axis": 0}, {"n": 2}], differentiable=True))

def _np_clamped(shape, sizes, starts):
    return tuple(slice(min(max(int(s), 0), n - z), min(max(int(s), 0), n - z) + z)
                 for s, n, z in zip(starts, shape, sizes))


def _np_dynamic_slice(x, start_indices, slice_sizes):
    """HLO's dynamic_slice in NumPy: each start clamped into [0, n - size]."""
    return x[_np_clamped(x.shape, slice_sizes, start_indices)]


def _np_dynamic_update_slice(x, u, start_indices):
    out = x.copy()
    out[_np_clamped(x.shape, u.shape, start_indices)] = u
    return out


# ---- data-dependent shapes: graph breaks, still compared with NumPy ----------------------


def _unique_counts(x):
    v, c = np.unique(x, return_counts=True)
    return v, c.astype(np.int64)


def _unique_inverse(x):
    v, inv = np.unique(x, return_inverse=True)
    return v, inv.reshape(x.shape).astype(np.int64)


def _unique_all(x):
    v, i, inv, c = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    return v, i.astype(np.int64), inv.reshape(x.shape).astype(np.int64), c.astype(np.int64)


def _nonzero(x):
    return tuple(i.astype(np.int64) for i in np.nonzero(x))


BREAK_SHAPES = [((2, 5),), ((6,),), ((0,),)]
add(OpCase("nonzero", _nonzero, dtypes=(D.float32, D.int8, D.bool_),
           shapes=BREAK_SHAPES + [((),)], domains=("shift",), graph_break=True),
    OpCase("unique_values", np.unique, dtypes=(D.float32, D.int16, D.uint8, D.bool_),
           shapes=BREAK_SHAPES, domains=("shift",), graph_break=True),
    OpCase("unique_counts", _unique_counts, dtypes=(D.float32, D.int16, D.bool_),
           shapes=BREAK_SHAPES, domains=("shift",), graph_break=True),
    OpCase("unique_inverse", _unique_inverse, dtypes=(D.float32, D.int16, D.bool_),
           shapes=BREAK_SHAPES, domains=("shift",), graph_break=True),
    OpCase("unique_all", _unique_all, dtypes=(D.float32, D.int16, D.bool_),
           shapes=BREAK_SHAPES, domains=("shift",), graph_break=True))

add(OpCase("stop_gradient", lambda x: x, dtypes=ALL, shapes=UNARY[:3], requires="stop_gradient"))

# public functions of lazyarray that are not in lazyarray.ops (they need the runtime)
RUNTIME_FUNCTIONS = ("nonzero", "unique_values", "unique_counts", "unique_inverse", "unique_all",
                     "stop_gradient", "unique", "multinomial", "unbind")

# ---- special values: NaN, infinities, signed zeros --------------------------------------


def _clip_scalarwise(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """np.clip element by element with NumPy scalar bounds: its scalar-bound loop, whose
    rule lazyarray's clamp follows everywhere (x's own zero where it equals a bound of the
    other sign; NumPy's float32/float64 loop over whole bound arrays takes the bound's)."""
    x, lo, hi = np.broadcast_arrays(x, lo, hi)
    out = [np.clip(a, b, c) for a, b, c in zip(x.ravel(), lo.ravel(), hi.ravel())]
    return np.array(out, x.dtype).reshape(x.shape)


SPECIAL = dict(dtypes=FLOATS, label="special values")
SPECIAL_SHAPES = [((4, 6),), ((),)]
for _name, _ref in [("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("tanh", np.tanh),
                    ("sigmoid", _sigmoid), ("abs", np.abs), ("sign", np.sign),
                    ("floor", np.floor), ("ceil", np.ceil), ("round", np.round),
                    ("negative", np.negative), ("square", np.square), ("expm1", np.expm1),
                    ("log1p", np.log1p), ("reciprocal", np.reciprocal)]:
    add(OpCase(_name, _ref, shapes=SPECIAL_SHAPES, domains=("special",), **SPECIAL))

for _name, _ref in [("maximum", np.maximum), ("minimum", np.minimum), ("add", np.add),
                    ("multiply", np.multiply), ("divide", np.divide), ("less", np.less),
                    ("equal", np.equal), ("not_equal", np.not_equal), ("pow", np.power),
                    ("atan2", np.arctan2), ("copysign", np.copysign), ("hypot", np.hypot),
                    ("logaddexp", np.logaddexp), ("logaddexp2", np.logaddexp2),
                    ("remainder", np.remainder),
                    ("floor_divide", np.floor_divide)]:
    add(OpCase(_name, _ref, shapes=[((4, 6), (4, 6)), ((4, 1), (6,))],
               domains=("special", "special"), **SPECIAL))

SPECIAL_KW = [{}, {"axis": 1}, {"axis": 0, "keepdims": True}]
for _name, _ref in [("max", np.max), ("min", np.min), ("sum", np.sum), ("prod", np.prod),
                    ("mean", np.mean), ("argmax", np.argmax), ("argmin", np.argmin),
                    ("any", np.any), ("all", np.all)]:
    add(OpCase(_name, _ref, shapes=[((4, 6),)], kwargs=SPECIAL_KW, domains=("special",),
               tol=4, **SPECIAL))

add(OpCase("sort", _sort, shapes=[((4, 6),)], kwargs=[{}, {"axis": 0}], domains=("special",),
           **SPECIAL),
    OpCase("cumulative_sum", np.cumulative_sum, shapes=[((4, 6),)], kwargs=[{"axis": 1}],
           domains=("special",), **SPECIAL),
    OpCase("clip", np.clip, shapes=[((4, 6),)], kwargs=[{"min": -1.0, "max": 2.0},
                                                         {"min": 0.0}, {"max": -0.0}],
           domains=("special",), **SPECIAL),
    OpCase("clip", _clip_scalarwise, shapes=[((4, 6), (4, 6), (4, 6)), ((4, 1), (6,), ())],
           domains=("special", "special", "special"), **{**SPECIAL, "label": "special bounds"}),
    OpCase("where", np.where, shapes=[((4, 6), (4, 6), (4, 6))], domains=("bool", "special", "special"),
           input_dtypes=lambda d: (D.bool_, d, d), **SPECIAL),
    OpCase("astype", lambda x, dtype: x.astype(D.to_dtype(dtype).np), shapes=[((4, 6),)],
           kwargs=[{"dtype": d} for d in FLOATS + BOOL], domains=("special",), round_back=False,
           **SPECIAL))

# ---- large inputs: kernels the compiled CPU device splits over its threads -----------------

BIG = (181, 203)        # > 2**15 elements, odd extents: uneven thread ranges
LARGE = dict(dtypes=(D.float32, D.float64, D.int32), label="large")
add(OpCase("add", np.add, shapes=[(BIG, BIG), (BIG, (203,))], **LARGE),
    OpCase("exp", np.exp, dtypes=(D.float32, D.float64), shapes=[(BIG,)], label="large"),
    OpCase("where", np.where, shapes=[(BIG, BIG, ())], input_dtypes=lambda d: (D.bool_, d, d),
           **LARGE),
    OpCase("sum", np.sum, shapes=[(BIG,)], kwargs=[{}, {"axis": 0}, {"axis": 1}],
           domains=("positive",), tol=50, **LARGE),
    OpCase("mean", np.mean, dtypes=(D.float32, D.float64), shapes=[(BIG,)],
           kwargs=[{}, {"axis": 0}, {"axis": 1}], domains=("positive",), tol=50, label="large"),
    OpCase("max", np.max, shapes=[(BIG,)], kwargs=[{}, {"axis": 0}, {"axis": 1}], **LARGE),
    OpCase("argmin", np.argmin, dtypes=(D.float32, D.float64), shapes=[(BIG,)],
           kwargs=[{}, {"axis": 0}, {"axis": 1}], label="large"),
    OpCase("cumulative_sum", np.cumulative_sum, shapes=[(BIG,)], kwargs=[{"axis": 0}, {"axis": 1}],
           domains=("positive",), tol=50, **LARGE),
    OpCase("matrix_transpose", np.matrix_transpose, shapes=[(BIG,)], **LARGE),
    OpCase("matmul", np.matmul, dtypes=(D.float32, D.float64), shapes=[((64, 300), (300, 70))],
           tol=50, label="large"))

# ---- creation -------------------------------------------------------------------------

SHAPE_KW = [{"shape": (2, 3)}, {"shape": ()}, {"shape": (0, 4)}, {"shape": 3}]
NO_INPUTS = [()]

add(OpCase("zeros", np.zeros, dtypes=ALL, shapes=NO_INPUTS, kwargs=SHAPE_KW, dtype_kwarg=True),
    OpCase("ones", np.ones, dtypes=ALL, shapes=NO_INPUTS, kwargs=SHAPE_KW, dtype_kwarg=True),
    OpCase("empty", np.empty, dtypes=ALL, shapes=NO_INPUTS, kwargs=SHAPE_KW, dtype_kwarg=True,
           compare="shape"),
    OpCase("full", np.full, dtypes=ALL, shapes=NO_INPUTS, dtype_kwarg=True,
           kwargs=[{"shape": (2, 3), "fill_value": 3}, {"shape": (), "fill_value": 1},
                   {"shape": (0,), "fill_value": 0}]),
    OpCase("full", lambda shape, fill_value: np.full(shape, fill_value, np.float32), dtypes=BOOL,
           shapes=NO_INPUTS, kwargs=[{"shape": (2,), "fill_value": 2.5}], label="default dtype"),
    OpCase("zeros_like", np.zeros_like, dtypes=ALL, shapes=UNARY[:3]),
    OpCase("ones_like", np.ones_like, dtypes=ALL, shapes=UNARY[:3]),
    OpCase("empty_like", np.empty_like, dtypes=ALL, shapes=UNARY[:3], compare="shape"),
    OpCase("full_like", np.full_like, dtypes=NUMERIC, shapes=UNARY[:3],
           kwargs=[{"fill_value": 2}]),
    OpCase("arange", np.arange, dtypes=INTS + FLOATS, shapes=NO_INPUTS, dtype_kwarg=True,
           kwargs=[{"start": 0, "stop": 5}, {"start": 2, "stop": 11, "step": 3},
                   {"start": 5, "stop": 0, "step": -2}, {"start": 3, "stop": 3}]),
    OpCase("arange", lambda **kw: np.arange(**kw).astype(np.float32), dtypes=BOOL,
           shapes=NO_INPUTS, kwargs=[{"start": 0.0, "stop": 1.0, "step": 0.25}],
           label="default float"),
    OpCase("linspace", np.linspace, dtypes=FLOATS, shapes=NO_INPUTS, dtype_kwarg=True, tol=4,
           kwargs=[{"start": 0.0, "stop": 1.0, "num": 5},
                   {"start": -2.0, "stop": 3.0, "num": 7, "endpoint": False},
                   {"start": 0.0, "stop": 1.0, "num": 0}, {"start": 2.0, "stop": 4.0, "num": 1}]),
    OpCase("eye", lambda n_rows, n_cols=None, k=0, dtype=None: np.eye(n_rows, n_cols, k, dtype),
           dtypes=ALL, shapes=NO_INPUTS, dtype_kwarg=True,
           kwargs=[{"n_rows": 3}, {"n_rows": 2, "n_cols": 4, "k": 1}, {"n_rows": 3, "k": -1}]),
    OpCase("tril", np.tril, dtypes=ALL, shapes=[((3, 4),), ((2, 3, 3),), ((0, 2),)],
           kwargs=[{}, {"k": 1}, {"k": -1}], differentiable=True),
    OpCase("triu", np.triu, dtypes=ALL, shapes=[((3, 4),), ((2, 3, 3),), ((0, 2),)],
           kwargs=[{}, {"k": 1}, {"k": -1}], differentiable=True),
    OpCase("meshgrid", np.meshgrid, dtypes=(D.float32, D.int64),
           shapes=[((3,), (4,)), ((2,), (3,), (4,)), ((0,), (2,))],
           kwargs=[{}, {"indexing": "ij"}], fn=la.meshgrid, differentiable=True))

# ---- manipulation ---------------------------------------------------------------------


def _transpose(x, axis0=None, axis1=None):
    return np.transpose(x) if axis0 is None else np.swapaxes(x, axis0, axis1)


def _concat(*xs, axis=0):
    return np.concatenate(xs, axis=axis)


def _stack(*xs, axis=0):
    return np.stack(xs, axis=axis)


MOVE = dict(dtypes=ALL, differentiable=True)

add(OpCase("reshape", np.reshape, pairs=[(((2, 3),), {"shape": (3, 2)}),
                                          (((2, 3),), {"shape": (-1,)}),
                                          (((2, 3),), {"shape": (1, 6, 1)}),
                                          (((),), {"shape": (1, 1)}),
                                          (((0, 3),), {"shape": (3, 0)}),
                                          (((2, 3),), {"shape": (4, 2)})], **MOVE),
    OpCase("permute_dims", np.permute_dims, pairs=[(((2, 3, 4),), {"axes": (2, 0, 1)}),
                                                    (((),), {"axes": ()}),
                                                    (((0, 2),), {"axes": (1, 0)})], **MOVE),
    OpCase("transpose", _transpose, pairs=[(((2, 3, 4),), {}), (((2, 3, 4),), {"axis0": 0, "axis1": 2}),
                                            (((),), {}), (((3,),), {})], **MOVE),
    OpCase("matrix_transpose", np.matrix_transpose, shapes=[((2, 3),), ((4, 2, 3),), ((2, 0),), ((3,),)],
           **MOVE),
    OpCase("expand_dims", np.expand_dims, shapes=[((2, 3),), ((),)],
           kwargs=[{"axis": 0}, {"axis": -1}, {"axis": 1}], **MOVE),
    OpCase("squeeze", np.squeeze, shapes=[((1, 3, 1),)],
           kwargs=[{}, {"axis": 0}, {"axis": (0, 2)}, {"axis": 1}], **MOVE),
    OpCase("broadcast_to", np.broadcast_to, pairs=[(((3,),), {"shape": (2, 3)}),
                                                    (((),), {"shape": (2, 2)}),
                                                    (((2, 1),), {"shape": (2, 0)}),
                                                    (((2,),), {"shape": (3,)})], **MOVE),
    OpCase("broadcast_arrays", np.broadcast_arrays, shapes=[((2, 1), (3,)), ((), (2,)), ((2,), (3,))],
           fn=la.broadcast_arrays, **MOVE),
    OpCase("concat", _concat, fn=lambda *xs, **kw: la.concat(list(xs), **kw),
           pairs=[(((2, 3), (4, 3)), {}), (((2, 3), (2, 1)), {"axis": 1}),
                  (((2, 3), (2, 3)), {"axis": None}), (((0, 3), (2, 3)), {"axis": 0}),
                  (((2,),), {}), (((2, 3), (3, 3)), {"axis": 1})], **MOVE),
    OpCase("stack", _stack, fn=lambda *xs, **kw: la.stack(list(xs), **kw),
           pairs=[(((2, 3), (2, 3)), {}), (((2, 3), (2, 3), (2, 3)), {"axis": -1}),
                  (((), ()), {}), (((0,), (0,)), {"axis": 1}), (((2,), (3,)), {})], **MOVE),
    OpCase("unstack", np.unstack, shapes=[((3, 2),), ((2, 0),)], kwargs=[{}, {"axis": 1}], **MOVE),
    OpCase("flip", zero_d_axis(np.flip), shapes=[((2, 3),), ((),)], kwargs=[{}, {"axis": 0}, {"axis": (0, 1)}],
           **MOVE),
    OpCase("roll", np.roll, shapes=[((2, 3),), ((0, 2),)],
           kwargs=[{"shift": 1}, {"shift": -2, "axis": 1}, {"shift": (1, 2), "axis": (0, 1)}],
           **MOVE),
    OpCase("moveaxis", np.moveaxis, shapes=[((2, 3, 4),)],
           kwargs=[{"source": 0, "destination": -1}, {"source": (0, 1), "destination": (2, 0)}],
           **MOVE),
    OpCase("tile", lambda x, repetitions: np.tile(x, repetitions), shapes=[((2, 3),), ((),), ((3,),)],
           kwargs=[{"repetitions": (2, 1)}, {"repetitions": (2,)}, {"repetitions": (1, 0, 2)}],
           **MOVE),
    OpCase("repeat", np.repeat, shapes=[((2, 3),), ((0,),)],
           kwargs=[{"repeats": 2}, {"repeats": 3, "axis": 0}, {"repeats": 2, "axis": -1}], **MOVE))

# ---- linear algebra -------------------------------------------------------------------

LINALG = dict(dtypes=(D.float16, D.bfloat16, D.float32, D.float64, D.int32, D.int64, D.uint8),
              tol=8, differentiable=True)

add(OpCase("matmul", np.matmul, shapes=[((2, 3), (3, 4)), ((3,), (3,)), ((2, 2, 3), (3, 4)),
                                         ((2, 1, 2, 3), (3, 3, 2)), ((3,), (2, 3, 4)),
                                         ((0, 3), (3, 2)), ((2, 0), (0, 3)), ((2, 3), (2, 3))],
           **LINALG),
    OpCase("tensordot", np.tensordot, pairs=[(((2, 3, 4), (3, 4, 5)), {}),
                                              (((2, 3), (3, 2)), {"axes": ([1], [0])}),
                                              (((2, 3), (4,)), {"axes": 0}),
                                              (((2, 3), (2, 3)), {"axes": ((0, 1), (0, 1))}),
                                              (((2, 3), (4, 3)), {"axes": ([1], [0])})], **LINALG),
    OpCase("vecdot", np.vecdot, shapes=[((2, 3), (2, 3)), ((3,), (2, 3)), ((0, 3), (0, 3))],
           kwargs=[{}, {"axis": -1}], **LINALG),
    OpCase("outer", np.outer, shapes=[((3,), (4,)), ((0,), (2,))], **LINALG))

# complex numbers: arithmetic, math, parts, reductions and products (complex64/complex128)
_CX = dict(dtypes=D.COMPLEX, label="complex")
add(OpCase("add", np.add, shapes=BINARY, **_CX),
    OpCase("subtract", np.subtract, shapes=BINARY, **_CX),
    OpCase("multiply", np.multiply, shapes=BINARY, **_CX),
    OpCase("divide", np.divide, shapes=BINARY, domains=("real", "nonzero"), tol=4, **_CX),
    OpCase("pow", np.power, shapes=BINARY[:2], domains=("positive", "real"), tol=64, **_CX),
    OpCase("negative", np.negative, shapes=UNARY, **_CX),
    OpCase("abs", np.abs, shapes=UNARY, tol=2, **_CX),
    OpCase("real", np.real, shapes=UNARY, **_CX), OpCase("imag", np.imag, shapes=UNARY, **_CX),
    OpCase("conj", np.conj, shapes=UNARY, **_CX),
    OpCase("equal", np.equal, shapes=BINARY, domains=("shift", "shift"), **_CX),
    OpCase("not_equal", np.not_equal, shapes=BINARY, domains=("shift", "shift"), **_CX),
    OpCase("where", np.where, shapes=TERNARY, input_dtypes=lambda d: (D.bool_, d, d), **_CX),
    OpCase("sum", np.sum, shapes=REDUCE_SHAPES[:2], kwargs=[{}, {"axis": 0}], tol=8, **_CX),
    OpCase("prod", np.prod, shapes=REDUCE_SHAPES[:2], kwargs=[{}, {"axis": -1}],
           domains=("near1",), tol=16, **_CX),
    OpCase("matmul", np.matmul, shapes=[((2, 3), (3, 4)), ((2, 2, 3), (3, 4)), ((3,), (3,))],
           tol=8, **_CX),
    OpCase("einsum", lambda *xs, subscripts: np.einsum(subscripts, *xs),
           fn=lambda *xs, subscripts: la.einsum(subscripts, *xs),
           pairs=[(((2, 3), (3, 4)), {"subscripts": "ij,jk->ik"})], tol=8, **_CX),
    OpCase("astype", lambda x, dtype: x.astype(D.to_dtype(dtype).np), shapes=[((2, 3),)],
           kwargs=[{"dtype": d} for d in D.COMPLEX + (D.float64, D.float32)], round_back=False,
           **_CX))
for _name, _ref, _tol in [("exp", np.exp, 4), ("log", np.log, 4), ("sqrt", np.sqrt, 4),
                          ("sin", np.sin, 8), ("cos", np.cos, 8), ("sinh", np.sinh, 8),
                          ("cosh", np.cosh, 8), ("tanh", np.tanh, 16), ("expm1", np.expm1, 8),
                          ("log1p", np.log1p, 8), ("asin", np.arcsin, 16),
                          ("acos", np.arccos, 16), ("atan", np.arctan, 16),
                          ("asinh", np.arcsinh, 16), ("acosh", np.arccosh, 16),
                          ("atanh", np.arctanh, 16), ("sign", np.sign, 2)]:
    add(OpCase(_name, _ref, shapes=UNARY, tol=_tol, **_CX))

# (half floats step their own bits, which a float32 reference cannot: tests/test_one_node_ops.py)
add(OpCase("nextafter", np.nextafter, dtypes=(D.float32, D.float64), shapes=BINARY,
           domains=("special", "special")),
    OpCase("nextafter", np.nextafter, dtypes=(D.float32, D.float64), shapes=BINARY,
           differentiable=True, label="ordinary"),
    OpCase("cumulative_prod", np.cumulative_prod, dtypes=NUMERIC, shapes=[((2, 3),), ((4,),)],
           kwargs=[{"axis": 1, "include_initial": True}, {"axis": 0, "include_initial": True}],
           label="include_initial"))

# einsum: lowered to dot_general / transpose / reduce (ops/einsum.py)
_EINSUM = [(((2, 3), (3, 4)), {"subscripts": "ij,jk->ik"}),
           (((2, 2, 3), (2, 3, 4)), {"subscripts": "bij,bjk->bik"}),
           (((3, 3),), {"subscripts": "ii->i"}), (((3, 3),), {"subscripts": "ii"}),
           (((2, 3),), {"subscripts": "ij->ji"}), (((3,), (2,)), {"subscripts": "i,j->ij"}),
           (((2, 1, 2, 3), (3, 3, 4)), {"subscripts": "...ij,...jk->...ik"}),
           (((2, 3, 4), (4, 5), (5, 2)), {"subscripts": "abc,cd,de->abe"}),
           (((2, 2, 3),), {"subscripts": "iij->j"}), (((2, 3),), {"subscripts": "ij->"}),
           (((2, 3), (3,)), {"subscripts": "...i,...i"}), (((0, 3), (3, 2)), {"subscripts": "ij,jk"}),
           (((2, 3), (4, 3)), {"subscripts": "ij,jk->ik"}), (((2, 3),), {"subscripts": "ij->k"})]
add(OpCase("einsum", lambda *xs, subscripts: np.einsum(subscripts, *xs),
           fn=lambda *xs, subscripts: la.einsum(subscripts, *xs), pairs=_EINSUM,
           dtypes=(D.float32, D.float64, D.int32, D.int64), tol=8, differentiable=True))

# the linalg extension's traceable part (ops/linalg.py)
_LA_FLOATS = dict(dtypes=(D.float32, D.float64), tol=8, differentiable=True)
add(OpCase("diagonal", np.linalg.diagonal, shapes=[((3, 4),), ((2, 3, 3),), ((2, 0),)],
           kwargs=[{}, {"offset": 1}, {"offset": -2}], dtypes=ALL, differentiable=True),
    OpCase("trace", np.linalg.trace, shapes=[((3, 4),), ((2, 3, 3),)],
           kwargs=[{}, {"offset": 1}, {"offset": -1}], **_LA_FLOATS),
    OpCase("vector_norm", np.linalg.vector_norm, shapes=[((2, 3, 4),), ((5,),)],
           kwargs=[{}, {"axis": -1, "ord": 1}, {"axis": 0, "keepdims": True, "ord": np.inf},
                   {"ord": 3}], **_LA_FLOATS),
    OpCase("matrix_norm", np.linalg.matrix_norm, shapes=[((2, 3, 4),), ((3, 3),)],
           kwargs=[{}, {"ord": 1}, {"ord": -np.inf, "keepdims": True}], **_LA_FLOATS),
    OpCase("cross", np.linalg.cross, shapes=[((2, 3), (2, 3)), ((4, 3), (3,))], **_LA_FLOATS),
    OpCase("matrix_power", np.linalg.matrix_power, shapes=[((3, 3),), ((2, 2, 2),)],
           kwargs=[{"n": 0}, {"n": 1}, {"n": 3}], **_LA_FLOATS))

# ---- Tensor operators -----------------------------------------------------------------


def _dunder(name: str, fn, dtypes, shapes=BINARY, domains=None, float_result: bool = False,
            diff: bool = False, label: str = "", tol: float = 1.0) -> OpCase:
    """An operator, checked with NumPy's own operator on arrays as the reference (NumPy 2
    treats Python scalars as weak, as lazyarray does)."""
    return OpCase("Tensor." + name, fn, fn=fn, dtypes=dtypes, shapes=shapes, domains=domains,
                  float_result=float_result, differentiable=diff, label=label, tol=tol)


def _reflected(method: str, scalar):
    def fn(x):
        return getattr(x, method)(scalar)
    return fn


def _r_ref(op, scalar):
    def ref(x):
        return op(scalar, x)
    return ref


UNARY_SCALAR = [((2, 3),), ((),)]

add(_dunder("__add__", operator.add, ALL, diff=True),
    _dunder("__sub__", operator.sub, NUMERIC, diff=True),
    _dunder("__mul__", operator.mul, ALL, diff=True),
    _dunder("__truediv__", operator.truediv, FLOATS + SOME_INTS[:2], domains=("real", "nonzero"),
            float_result=True, diff=True),
    _dunder("__floordiv__", operator.floordiv, NUMERIC, domains=("real", "nonzero"), diff=True),
    _dunder("__mod__", operator.mod, NUMERIC, domains=("real", "nonzero"), tol=2, diff=True),
    _dunder("__pow__", operator.pow, FLOATS, domains=("positive", "real"), diff=True, tol=4),
    _dunder("__matmul__", operator.matmul, FLOATS + INTS, shapes=[((2, 3), (3, 4)), ((3,), (3,))],
            diff=True, tol=8),
    _dunder("__and__", operator.and_, INTEGERS + BOOL),
    _dunder("__or__", operator.or_, INTEGERS + BOOL),
    _dunder("__xor__", operator.xor, INTEGERS + BOOL),
    _dunder("__lshift__", operator.lshift, INTEGERS, domains=("real", "shift")),
    _dunder("__rshift__", operator.rshift, INTEGERS, domains=("real", "shift")),
    _dunder("__eq__", operator.eq, ALL, domains=("shift", "shift")),
    _dunder("__ne__", operator.ne, ALL, domains=("shift", "shift")),
    _dunder("__lt__", operator.lt, ALL, domains=("shift", "shift")),
    _dunder("__le__", operator.le, ALL, domains=("shift", "shift")),
    _dunder("__gt__", operator.gt, ALL, domains=("shift", "shift")),
    _dunder("__ge__", operator.ge, ALL, domains=("shift", "shift")),
    _dunder("__neg__", operator.neg, NUMERIC, shapes=UNARY, diff=True),
    _dunder("__pos__", operator.pos, NUMERIC, shapes=UNARY, diff=True),
    _dunder("__abs__", operator.abs, NUMERIC, shapes=UNARY, diff=True),
    _dunder("__invert__", operator.invert, INTEGERS + BOOL, shapes=UNARY))

add(OpCase("Tensor.__rmatmul__", operator.matmul, fn=lambda a, b: b.__rmatmul__(a),
           dtypes=FLOATS + INTS, shapes=[((2, 3), (3, 4))], tol=8, differentiable=True))

# reflected operators and weak Python scalars: tensor OP scalar and scalar OP tensor
for _name, _op, _scalar, _dtypes, _domain, _fr in [
        ("__radd__", operator.add, 3, NUMERIC, "real", False),
        ("__radd__", operator.add, 2.5, FLOATS + INTS, "real", True),
        ("__rsub__", operator.sub, 3, NUMERIC, "small", False),
        ("__rmul__", operator.mul, -1.5, FLOATS + INTS, "real", True),
        ("__rtruediv__", operator.truediv, 2.0, FLOATS + INTS, "nonzero", True),
        ("__rfloordiv__", operator.floordiv, 7, NUMERIC, "nonzero", False),
        ("__rmod__", operator.mod, 7, NUMERIC, "nonzero", False),
        ("__rpow__", operator.pow, 2, FLOATS, "real", False),
        ("__rand__", operator.and_, 6, INTEGERS, "real", False),
        ("__ror__", operator.or_, 6, INTEGERS, "real", False),
        ("__rxor__", operator.xor, True, INTEGERS + BOOL, "real", False),
        ("__rlshift__", operator.lshift, 3, INTEGERS, "shift", False),
        ("__rrshift__", operator.rshift, 64, INTEGERS, "shift", False)]:
    add(OpCase("Tensor." + _name, _r_ref(_op, _scalar), fn=_reflected(_name, _scalar),
               dtypes=_dtypes, shapes=UNARY_SCALAR, domains=(_domain,), float_result=_fr,
               label=f"scalar {_scalar!r}", tol=2))

for _op, _scalar, _dtypes in [(operator.add, 1, NUMERIC), (operator.mul, 0.5, FLOATS),
                              (operator.pow, 2, NUMERIC), (operator.sub, 1.0, FLOATS),
                              (operator.truediv, 4, FLOATS), (operator.lt, 0.5, NUMERIC),
                              (operator.floordiv, 3, NUMERIC), (operator.mod, -3, INTS),
                              (operator.mod, 2.5, FLOATS), (operator.floordiv, -0.75, FLOATS)]:
    add(OpCase(f"Tensor.__{_op.__name__.strip('_')}__", _r_ref(lambda a, b, o=_op: o(b, a), _scalar),
               fn=_r_ref(lambda a, b, o=_op: o(b, a), _scalar), dtypes=_dtypes, shapes=UNARY_SCALAR,
               domains=("small",), label=f"scalar {_scalar!r}", tol=2))


def _getitem(x, key):
    return x[key]


def _setitem(x, key, value):
    x = x.copy() if isinstance(x, np.ndarray) else x
    x[key] = value
    return x


KEYS = [1, -1, (slice(None), 1), (Ellipsis, None, slice(None, None, -2)),
        (slice(1, None), slice(None, 2)), (None,), np.array([0, 2, 1]),
        (slice(None), np.array([[0], [1]])), (slice(None, None, -1), slice(1, None, 2)),
        (1, Ellipsis, None), (np.array([0, 2]), np.array([1, 0])), (slice(5, 10),), 3, (0, 3)]
MASKS = [np.array([True, False, True]), (slice(None), np.array([False, True, True])),
         np.array([[True, False, False], [False, False, True], [True, True, False]])]

add(OpCase("Tensor.__getitem__", _getitem, fn=_getitem, dtypes=(D.float32, D.int8, D.bool_),
           shapes=[((3, 3),)], kwargs=[{"key": k} for k in KEYS], requires="lazyarray.indexing",
           differentiable=True),
    OpCase("Tensor.__getitem__", _getitem, fn=_getitem, dtypes=(D.float32, D.int8, D.bool_),
           shapes=[((3, 3),)], kwargs=[{"key": k} for k in MASKS], requires="lazyarray.indexing",
           label="boolean mask", graph_break=True),
    OpCase("Tensor.__setitem__", _setitem, fn=_setitem, dtypes=(D.float32, D.int32),
           pairs=[(((3, 3), ()), {"key": 1}), (((3, 3), (3,)), {"key": (slice(None), 0)}),
                  (((4,), ()), {"key": slice(None, None, 2)}),
                  (((3, 3), (1, 3)), {"key": slice(0, 2)}),
                  (((3, 3), ()), {"key": (Ellipsis, -1)}),
                  (((3, 3), (2, 3)), {"key": np.array([2, 0])}),
                  (((3, 3), (2,)), {"key": (1, slice(None, 2))})],
           requires="lazyarray.indexing", differentiable=True),
    OpCase("Tensor.__setitem__", _setitem, fn=_setitem, dtypes=(D.float32, D.int32),
           pairs=[(((3, 3), ()), {"key": np.array([True, False, True])}),
                  (((3, 3), (3,)), {"key": np.array([False, True, False])})],
           requires="lazyarray.indexing", label="boolean mask", graph_break=True))

# ---- Tensor methods -------------------------------------------------------------------


def _method(name: str, ref, **kw) -> OpCase:
    def fn(x, *args, **kwargs):
        return getattr(x, name)(*args, **kwargs)
    fn.__name__ = name
    return OpCase("Tensor." + name, ref, fn=fn, **kw)


def _torch_style(np_fn):
    """NumPy's reduction with PyTorch's dim/keepdim names accepted too."""
    def ref(x, axis=None, keepdims=False, dim=None, keepdim=None, **kw):
        axis = dim if dim is not None else axis
        keepdims = keepdim if keepdim is not None else keepdims
        return np_fn(x, axis=axis, keepdims=keepdims, **kw)
    return ref


def _torch_pair(np_fn, np_arg):
    """max/min: with dim= (PyTorch's form) the pair (values, indices); NumPy's otherwise."""
    plain = _torch_style(np_fn)

    def ref(x, axis=None, keepdims=False, dim=None, keepdim=None):
        if dim is None:
            return plain(x, axis=axis, keepdims=keepdims)
        keep = bool(keepdim)
        return plain(x, dim=dim, keepdim=keep), np_arg(x, axis=dim, keepdims=keep)
    return ref


def _torch_unbiased(np_ref):
    """var/std methods: unbiased (correction 1) by default (PyTorch's), NumPy's correction 0
    when NumPy's axis= or keepdims= is given."""
    plain = _torch_style(np_ref)

    def ref(x, axis=None, keepdims=False, dim=None, keepdim=None, correction=None):
        if correction is None:
            correction = 1 if (dim is not None or keepdim is not None) else 0
        return plain(x, axis=axis, keepdims=keepdims, dim=dim, keepdim=keepdim,
                     correction=correction)
    return ref


METHOD_KW = [{"axis": None}, {"axis": 0}, {"dim": 1, "keepdim": True}, {"axis": (0, 1)}]
METHOD_SHAPES = [((2, 3, 4),), ((),)]

for _name, _np_fn, _dtypes, _fr, _domain, _tol in [
        ("sum", np.sum, NUMERIC, False, "real", 4), ("prod", np.prod, FLOATS, False, "near1", 8),
        ("mean", np.mean, FLOATS, False, "real", 4), ("max", np.max, ALL, False, "real", 1),
        ("min", np.min, ALL, False, "real", 1), ("var", _var, FLOATS, False, "real", 16),
        ("std", _std, FLOATS, False, "real", 16), ("all", np.all, ALL, False, "shift", 1),
        ("any", np.any, ALL, False, "shift", 1)]:
    _ref = _torch_pair(_np_fn, {"max": np.argmax, "min": np.argmin}[_name]) \
        if _name in ("max", "min") else \
        _torch_unbiased(_np_fn) if _name in ("var", "std") else _torch_style(_np_fn)
    add(_method(_name, zero_d_axis(_ref), dtypes=_dtypes, shapes=METHOD_SHAPES,
                kwargs=METHOD_KW, domains=(_domain,), tol=_tol, differentiable=True))

for _name, _np_fn in [("argmax", np.argmax), ("argmin", np.argmin)]:
    add(_method(_name, _torch_style(_np_fn), dtypes=NUMERIC, shapes=METHOD_SHAPES[:1],
                kwargs=[{}, {"axis": 1}, {"dim": -1, "keepdim": True}]))

for _name, _ref, _domain in [("abs", np.abs, "real"), ("exp", np.exp, "real"),
                             ("log", np.log, "positive"), ("sqrt", np.sqrt, "positive"),
                             ("tanh", np.tanh, "real"), ("sigmoid", _sigmoid, "real"),
                             ("sin", np.sin, "real"), ("cos", np.cos, "real"),
                             ("relu", lambda x: np.maximum(x, 0), "real"),
                             ("square", np.square, "real"), ("round", np.round, "real"),
                             ("floor", np.floor, "real"), ("ceil", np.ceil, "real"),
                             ("sign", np.sign, "real")]:
    add(_method(_name, _ref, dtypes=FLOATS, shapes=UNARY[:3], domains=(_domain,), tol=2,
                differentiable=True))

SHAPE_METHODS = dict(dtypes=(D.float32, D.int32, D.bool_), differentiable=True)

_LAMBDA_METHODS = [
    ("reshape", lambda x: x.reshape(3, 2), lambda x: x.reshape(3, 2), ""),
    ("reshape", lambda x: x.reshape((6,)), lambda x: x.reshape((6,)), "tuple"),
    ("view", lambda x: x.view(-1, 2), lambda x: x.reshape(-1, 2), ""),
    ("flatten", lambda x: x.flatten(), lambda x: x.flatten(), ""),
    ("transpose", lambda x: x.transpose(), lambda x: x.transpose(), ""),
    ("transpose", lambda x: x.transpose(0, 1), lambda x: x.swapaxes(0, 1), "two axes"),
    ("permute", lambda x: x.permute(1, 0), lambda x: x.transpose(1, 0), ""),
    ("T", lambda x: x.T, lambda x: x.T, ""),
    ("mT", lambda x: x.mT, lambda x: np.swapaxes(x, -1, -2), ""),
    ("squeeze", lambda x: x.reshape(1, 2, 3).squeeze(dim=0), lambda x: x, ""),
    ("unsqueeze", lambda x: x.unsqueeze(1), lambda x: np.expand_dims(x, 1), ""),
    ("expand_dims", lambda x: x.expand_dims(0), lambda x: np.expand_dims(x, 0), ""),
    ("broadcast_to", lambda x: x.broadcast_to(4, 2, 3), lambda x: np.broadcast_to(x, (4, 2, 3)), ""),
    ("expand", lambda x: x.reshape(2, 1, 3).expand(-1, 4, -1),
     lambda x: np.broadcast_to(x.reshape(2, 1, 3), (2, 4, 3)), ""),
    ("flip", lambda x: x.flip(dims=(1,)), lambda x: np.flip(x, 1), ""),
    ("flip", lambda x: x.flip(), lambda x: np.flip(x), "all axes"),
    ("cumsum", lambda x: x.cumsum(dim=1), lambda x: np.cumsum(x, 1), ""),
    ("astype", lambda x: x.astype("float64"), lambda x: x.astype(np.float64), ""),
    ("type", lambda x: x.type(la.int16), lambda x: x.astype(np.int16), ""),
    ("float", lambda x: x.float(), lambda x: x.astype(np.float32), ""),
    ("double", lambda x: x.double(), lambda x: x.astype(np.float64), ""),
    ("long", lambda x: x.long(), lambda x: x.astype(np.int64), ""),
    ("int", lambda x: x.int(), lambda x: x.astype(np.int32), ""),
    ("bool", lambda x: x.bool(), lambda x: x.astype(np.bool_), ""),
    ("half", lambda x: x.half(), lambda x: x.astype(np.float16), ""),
    ("detach", lambda x: x.detach(), lambda x: x, ""),
    ("clone", lambda x: x.clone(), lambda x: x.copy(), ""),
    ("bfloat16", lambda x: x.bfloat16().float(),
     lambda x: x.astype(D.bfloat16.np).astype(np.float32), ""),
]


def _in_place(name, *args):
    """An in-place method: the tensor object takes the new value and is returned."""
    def fn(x):
        y = x.clone()
        out = getattr(y, name)(*args)
        assert out is y
        return y
    return fn


_IN_PLACE_METHODS = [
    ("add_", _in_place("add_", 1.5), lambda x: x + 1.5),
    ("sub_", _in_place("sub_", 0.5), lambda x: x - 0.5),
    ("mul_", _in_place("mul_", 2.0), lambda x: x * 2.0),
    ("div_", _in_place("div_", 4.0), lambda x: x / 4.0),
    ("pow_", _in_place("pow_", 2.0), lambda x: x ** 2.0),
    ("clamp_", _in_place("clamp_", -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5)),
    ("zero_", _in_place("zero_"), np.zeros_like),
    ("fill_", _in_place("fill_", 3.0), lambda x: np.full_like(x, 3.0)),
    ("copy_", _in_place("copy_", np.float32(7.0)), lambda x: np.full_like(x, 7.0)),
]
for _name, _fn, _ref in _IN_PLACE_METHODS:
    add(OpCase("Tensor." + _name, _ref, fn=_fn, shapes=[((2, 3),)], dtypes=FLOATS,
               differentiable=_name not in ("zero_", "fill_", "copy_")))

for _name, _ref, _domain in [("expm1", np.expm1, "real"), ("log1p", np.log1p, "positive"),
                             ("rsqrt", lambda x: 1 / np.sqrt(x), "positive"),
                             ("neg", np.negative, "real")]:
    add(_method(_name, _ref, dtypes=FLOATS, shapes=UNARY[:3], domains=(_domain,), tol=4,
                differentiable=True))
for _name, _ref, _dt in [("add", np.add, FLOATS), ("sub", np.subtract, FLOATS),
                         ("mul", np.multiply, FLOATS), ("div", np.divide, FLOATS),
                         ("pow", np.power, FLOATS), ("eq", np.equal, ALL),
                         ("ne", np.not_equal, ALL), ("lt", np.less, NUMERIC),
                         ("le", np.less_equal, NUMERIC), ("gt", np.greater, NUMERIC),
                         ("ge", np.greater_equal, NUMERIC), ("maximum", np.maximum, NUMERIC),
                         ("minimum", np.minimum, NUMERIC)]:
    add(_method(_name, _ref, dtypes=_dt, shapes=[((2, 3), (2, 3)), ((2, 3), (3,))],
                domains=("positive", "real") if _name == "pow" else ("real", "real"), tol=4,
                differentiable=_dt is FLOATS))
add(OpCase("Tensor.contiguous", lambda x: x, fn=lambda x: x.contiguous(), shapes=[((2, 3),)],
           **SHAPE_METHODS),
    OpCase("Tensor.masked_fill", lambda x: np.where(x > 0, np.float32(-1), x),
           fn=lambda x: x.masked_fill(x > 0, -1.0), shapes=[((2, 3),)], dtypes=FLOATS))
add(_method("sort", np.sort, dtypes=FLOATS, shapes=[((3, 4),)], kwargs=[{"axis": -1}, {"axis": 0}]),
    _method("sort", lambda x, dim=-1: (np.sort(x, dim), np.argsort(x, dim, kind="stable")),
            dtypes=FLOATS, shapes=[((3, 4),)], kwargs=[{}, {"dim": 0}], label="pair"))
for _name, _fn, _ref, _label in _LAMBDA_METHODS:
    add(OpCase("Tensor." + _name, _ref, fn=_fn, shapes=[((2, 3),)], label=_label,
               requires="stop_gradient" if _name == "detach" else "", **SHAPE_METHODS))

add(_method("clip", np.clip, dtypes=FLOATS, shapes=[((2, 3),)], kwargs=[{"min": -0.5, "max": 0.5}],
            differentiable=True),
    _method("clamp", np.clip, dtypes=FLOATS, shapes=[((2, 3),)], kwargs=[{"min": -0.5}],
            differentiable=True),
    _method("matmul", np.matmul, dtypes=FLOATS, shapes=[((2, 3), (3, 4))], tol=8,
            differentiable=True),
    _method("dot", np.matmul, dtypes=FLOATS, shapes=[((2, 3), (3, 4))], tol=8,
            differentiable=True))


# ---- splitting, top-k, unique, angle, complex tan; PyTorch's Tensor methods ---------------

def _np_chunk(x, chunks, axis=0):
    n = x.shape[axis]
    size = max(1, -(-n // chunks))
    return tuple(np.split(x, list(range(size, n, size)), axis=axis))


def _np_topk(x, k, axis=-1, largest=True):
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)


def _np_split_sizes(x, split_size_or_sections, dim=0):
    size, n = split_size_or_sections, x.shape[dim]
    if not isinstance(size, int) and sum(size) != n:
        raise ValueError("split sizes must add up to the length")
    cuts = list(range(size, n, size)) if isinstance(size, int) else np.cumsum(size)[:-1].tolist()
    return tuple(np.split(x, cuts, axis=dim))


def _np_lower_median(x, dim=-1, keepdim=False):
    order = np.argsort(x, axis=dim, kind="stable")
    m = (x.shape[dim] - 1) // 2
    idx = np.take(order, [m], axis=dim)
    v = np.take_along_axis(x, idx, axis=dim)
    return (v, idx) if keepdim else (np.squeeze(v, dim), np.squeeze(idx, dim))


def _np_mode(x, dim=-1, keepdim=False):
    a = np.moveaxis(x, dim, -1)
    flat = a.reshape(-1, a.shape[-1])
    vals, idxs = [], []
    for row in flat:
        u, c = np.unique(row, return_counts=True)
        v = u[np.argmax(c)]
        vals.append(v)
        idxs.append(np.nonzero(row == v)[0][-1])
    v = np.array(vals, x.dtype).reshape(a.shape[:-1])
    i = np.array(idxs, np.int64).reshape(a.shape[:-1])
    if keepdim:
        v, i = np.expand_dims(v, dim), np.expand_dims(i, dim)
    return v, i


def _multinomial_shape(p, num_samples, replacement=False):
    if not replacement and num_samples > p.shape[-1]:
        raise ValueError("more samples than categories without replacement")
    return np.zeros(p.shape[:-1] + (num_samples,), np.int64)


add(OpCase("split", np.split, dtypes=(D.float32, D.float64, D.int32, D.bool_),
           pairs=[(((6, 4),), {"indices_or_sections": 3}),
                  (((6, 4),), {"indices_or_sections": [1, 3], "axis": 1}),
                  (((6, 4),), {"indices_or_sections": [4, 2, -1]}),
                  (((5,),), {"indices_or_sections": 2}),           # NumPy raises: not equal
                  (((0, 3),), {"indices_or_sections": 1})], differentiable=True),
    OpCase("chunk", _np_chunk, dtypes=(D.float32, D.float64, D.int64),
           pairs=[(((7, 3),), {"chunks": 3}), (((6, 4),), {"chunks": 2, "axis": 1}),
                  (((2, 3),), {"chunks": 5}), (((4,),), {"chunks": 4})], differentiable=True),
    OpCase("unbind", lambda x, dim=0: tuple(np.moveaxis(x, dim, 0)),
           dtypes=(D.float32, D.float64, D.int32),
           pairs=[(((3, 4),), {}), (((2, 3, 2),), {"dim": 1}), (((2, 3),), {"dim": -1})],
           differentiable=True),
    OpCase("topk", _np_topk, dtypes=(D.float32, D.float64, D.int32),
           pairs=[(((3, 6),), {"k": 2}), (((3, 6),), {"k": 3, "axis": 0}),
                  (((5,),), {"k": 5, "largest": False}), (((4, 3),), {"k": 0}),
                  (((4, 3),), {"k": 4})], differentiable=True),
    OpCase("unique", np.unique, dtypes=(D.float32, D.int64, D.bool_), graph_break=True,
           domains=("shift",),
           pairs=[(((12,),), {}), (((3, 4),), {"return_counts": True}),
                  (((3, 4),), {"return_index": True, "return_inverse": True}),
                  (((4, 2),), {"axis": 0})]),
    OpCase("multinomial", _multinomial_shape, fn=la.multinomial, dtypes=(D.float32, D.float64),
           domains=("positive",), compare="shape",
           pairs=[(((5,),), {"num_samples": 3}), (((2, 4),), {"num_samples": 7, "replacement": True}),
                  (((4,),), {"num_samples": 5})]),                 # too many without replacement
    OpCase("angle", np.angle, dtypes=FLOATS + COMPLEX + (D.int32,), shapes=UNARY,
           float_result=True, tol=2),
    OpCase("tan", np.tan, dtypes=COMPLEX, shapes=UNARY, domains=("unit",), tol=4,
           label="complex"))

add(_method("split", _np_split_sizes, dtypes=FLOATS, differentiable=True,
            pairs=[(((7, 3),), {"split_size_or_sections": 3}),
                   (((7, 3),), {"split_size_or_sections": [1, 2], "dim": 1}),
                   (((4, 2),), {"split_size_or_sections": [1, 2]})]),     # sizes != 4: raises
    _method("chunk", lambda x, chunks, dim=0: _np_chunk(x, chunks, dim), dtypes=FLOATS,
            pairs=[(((7, 3),), {"chunks": 3})], differentiable=True),
    _method("unbind", lambda x, dim=0: tuple(np.moveaxis(x, dim, 0)), dtypes=FLOATS,
            pairs=[(((3, 2),), {"dim": 1})], differentiable=True),
    _method("topk", lambda x, k, dim=-1, largest=True: _np_topk(x, k, dim, largest),
            dtypes=FLOATS, pairs=[(((3, 5),), {"k": 2}), (((3, 5),), {"k": 2, "dim": 0,
                                                                   "largest": False})],
            differentiable=True),
    _method("kthvalue", lambda x, k, dim=-1, keepdim=False: tuple(
                (lambda v, i: (v, i))(*[np.squeeze(a, dim) if not keepdim else a for a in (
                    np.take_along_axis(x, np.take(np.argsort(x, dim, kind="stable"), [k - 1],
                                                  axis=dim), dim),
                    np.take(np.argsort(x, dim, kind="stable"), [k - 1], axis=dim))])),
            dtypes=FLOATS, pairs=[(((3, 5),), {"k": 2}), (((3, 5),), {"k": 1, "dim": 0,
                                                                   "keepdim": True})],
            differentiable=True),
    _method("median", lambda x, dim=None, keepdim=False: np.sort(x.reshape(-1))[
                (x.size - 1) // 2] if dim is None else _np_lower_median(x, dim, keepdim),
            dtypes=FLOATS, pairs=[(((4, 5),), {}), (((4, 5),), {"dim": 1}),
                                  (((4, 6),), {"dim": 0, "keepdim": True})], differentiable=True),
    _method("mode", _np_mode, dtypes=(D.float32, D.int32), domains=("shift",),
            pairs=[(((4, 6),), {}), (((4, 6),), {"dim": 0, "keepdim": True})]),
    _method("unique", lambda x, return_inverse=False, return_counts=False: np.unique(
                x, return_inverse=return_inverse, return_counts=return_counts),
            dtypes=(D.float32, D.int64), domains=("shift",), graph_break=True,
            pairs=[(((3, 4),), {}), (((8,),), {"return_inverse": True, "return_counts": True})]),
    _method("argsort", lambda x, dim=-1, descending=False: np.argsort(
                -x if descending else x, dim, kind="stable"), dtypes=(D.float32, D.int32),
            pairs=[(((3, 4),), {}), (((3, 4),), {"dim": 0, "descending": True})]),
    _method("t", lambda x: x.T if x.ndim <= 2 else np.transpose(x, (9,)), dtypes=(D.float32, D.int32), differentiable=True,
            pairs=[(((2, 3),), {}), (((3,),), {}), (((2, 2, 2),), {})]),   # 3-D: raises
    _method("norm", lambda x, p="fro", dim=None, keepdim=False: np.linalg.norm(
                x.reshape(-1) if dim is None else x, ord=None if p == "fro" else p,
                axis=dim, keepdims=keepdim) if dim is not None or p != "fro" else
            np.sqrt(np.sum(x * x)), dtypes=FLOATS, tol=8, differentiable=True,
            pairs=[(((3, 4),), {}), (((3, 4),), {"p": 1, "dim": 1}),
                   (((3, 4),), {"dim": 0, "keepdim": True})]),
    _method("var", lambda x, dim=None: np.var(x, axis=dim, ddof=1), dtypes=FLOATS, tol=16,
            pairs=[(((3, 4),), {}), (((3, 4),), {"dim": 1})], label="unbiased",
            differentiable=True),
    _method("max", lambda x, dim: (np.max(x, dim), np.argmax(x, dim)), dtypes=NUMERIC,
            pairs=[(((3, 4),), {"dim": 1})], label="positional pair", differentiable=True),
    _method("angle", np.angle, dtypes=COMPLEX + (D.float32,), shapes=UNARY[:2], tol=2),
    _method("tan", np.tan, dtypes=COMPLEX + FLOATS, shapes=UNARY[:2], domains=("unit",), tol=4,
            differentiable=True),
    _method("conj", np.conj, dtypes=COMPLEX + FLOATS, shapes=UNARY[:2]),
    _method("softmax", lambda x, dim: np.exp(x - x.max(dim, keepdims=True)) / np.exp(
                x - x.max(dim, keepdims=True)).sum(dim, keepdims=True),
            dtypes=FLOATS, pairs=[(((3, 4),), {"dim": 1})], tol=4, differentiable=True),
    _method("log_softmax", lambda x, dim: x - x.max(dim, keepdims=True) - np.log(np.exp(
                x - x.max(dim, keepdims=True)).sum(dim, keepdims=True)),
            dtypes=FLOATS, pairs=[(((3, 4),), {"dim": 0})], tol=4, differentiable=True),
    OpCase("Tensor.repeat", lambda x: np.tile(x, (2, 1, 3)), fn=lambda x: x.repeat(2, 1, 3),
           shapes=[((2, 3),)], dtypes=(D.float32, D.int32), differentiable=True),
    OpCase("Tensor.gather", lambda x: np.take_along_axis(x, np.array(
               [[0, 1], [2, 2], [1, 0]]), 1), fn=lambda x: x.gather(1, la.asarray(
               [[0, 1], [2, 2], [1, 0]])), shapes=[((3, 4),)], dtypes=FLOATS, differentiable=True),
    OpCase("Tensor.index_select", lambda x: x[[2, 0]], fn=lambda x: x.index_select(
               0, la.asarray([2, 0])), shapes=[((3, 4),)], dtypes=FLOATS + (D.int32,),
           differentiable=True),
    OpCase("Tensor.narrow", lambda x: x[:, 1:3], fn=lambda x: x.narrow(1, 1, 2),
           shapes=[((3, 4),)], dtypes=FLOATS, differentiable=True),
    OpCase("Tensor.type_as", lambda x: x.astype(np.float64),
           fn=lambda x: x.type_as(la.zeros(1, dtype=la.float64)), shapes=[((3,),)],
           dtypes=(D.float32, D.int32)),
    OpCase("Tensor.real", np.real, fn=lambda x: x.real, shapes=UNARY[:2],
           dtypes=COMPLEX + FLOATS),
    OpCase("Tensor.imag", np.imag, fn=lambda x: x.imag, shapes=UNARY[:2],
           dtypes=COMPLEX + FLOATS),
    OpCase("Tensor.data", lambda x: x, fn=lambda x: x.data, shapes=[((2, 3),)],
           dtypes=(D.float32,)),
    OpCase("Tensor.is_leaf", lambda x: np.bool_(True), fn=lambda x: la.asarray(x.is_leaf),
           shapes=[((2,),)], dtypes=(D.float32,)),
    OpCase("Tensor.is_floating_point", lambda x: np.bool_(x.dtype.kind == "f"),
           fn=lambda x: la.asarray(x.is_floating_point()), shapes=[((2,),)],
           dtypes=(D.float32, D.int32)),
    OpCase("Tensor.element_size", lambda x: np.int64(x.dtype.itemsize),
           fn=lambda x: la.asarray(x.element_size()), shapes=[((2,),)],
           dtypes=(D.float32, D.int8, D.float64)),
    OpCase("Tensor.is_contiguous", lambda x: np.bool_(True),
           fn=lambda x: la.asarray(x.T.is_contiguous()), shapes=[((2, 3),)], dtypes=(D.float32,)),
    OpCase("Tensor.nelement", lambda x: np.int64(x.size), fn=lambda x: la.asarray(x.nelement()),
           shapes=[((2, 3),)], dtypes=(D.float32,)),
    OpCase("Tensor.new_zeros", lambda x: np.zeros((2, 2), x.dtype),
           fn=lambda x: x.new_zeros(2, 2), shapes=[((3,),)], dtypes=(D.float32, D.int32)),
    OpCase("Tensor.new_ones", lambda x: np.ones((3,), x.dtype),
           fn=lambda x: x.new_ones((3,)), shapes=[((3,),)], dtypes=(D.float32, D.int32)),
    OpCase("Tensor.new_empty", lambda x: np.zeros((2,), x.dtype),
           fn=lambda x: x.new_empty(2), shapes=[((3,),)], dtypes=(D.float32,), compare="shape"),
    OpCase("Tensor.new_full", lambda x: np.full((2, 1), 7, x.dtype),
           fn=lambda x: x.new_full((2, 1), 7), shapes=[((3,),)], dtypes=(D.float32, D.int32)),
    OpCase("Tensor.new_tensor", lambda x: np.array([1, 2], x.dtype),
           fn=lambda x: x.new_tensor([1, 2]), shapes=[((3,),)], dtypes=(D.float32, D.int32)))

for _name, _fn, _ref in [
        ("addcmul_", _in_place("addcmul_", 2.0, 3.0), lambda x: x + 6.0),
        ("addcdiv_", _in_place("addcdiv_", 2.0, 4.0), lambda x: x + 0.5),
        ("lerp_", _in_place("lerp_", 1.0, 0.25), lambda x: x + 0.25 * (1.0 - x)),
        ("exp_", _in_place("exp_"), np.exp), ("sqrt_", lambda x: _in_place("sqrt_")(x * x),
                                              lambda x: np.sqrt(x * x)),
        ("abs_", _in_place("abs_"), np.abs), ("neg_", _in_place("neg_"), np.negative),
        ("relu_", _in_place("relu_"), lambda x: np.maximum(x, 0)),
        ("sigmoid_", _in_place("sigmoid_"), _sigmoid), ("tanh_", _in_place("tanh_"), np.tanh)]:
    add(OpCase("Tensor." + _name, _ref, fn=_fn, shapes=[((2, 3),)], dtypes=FLOATS, tol=4,
               differentiable=True))
add(OpCase("Tensor.masked_fill_", lambda x: np.where(x > 0, np.float32(-1), x),
           fn=lambda x: _in_place("masked_fill_", x > 0, -1.0)(x), shapes=[((2, 3),)],
           dtypes=FLOATS),
    OpCase("Tensor.normal_", lambda x: x, fn=_in_place("normal_", 0.0, 0.02), compare="shape",
           shapes=[((2, 3),)], dtypes=FLOATS),
    OpCase("Tensor.uniform_", lambda x: x, fn=_in_place("uniform_", -1.0, 1.0),
           compare="shape", shapes=[((2, 3),)], dtypes=FLOATS))


# ---- what the table covers ------------------------------------------------------------

def covered_functions() -> set:
    return {c.name for c in CASES if not c.name.startswith("Tensor.")}


def covered_tensor_members() -> set:
    return {c.name[len("Tensor."):] for c in CASES if c.name.startswith("Tensor.")}


def case_ids() -> list:
    """Unique ids (a name may have several cases: label, then a counter)."""
    seen: dict = {}
    out = []
    for c in CASES:
        n = seen[c.id] = seen.get(c.id, 0) + 1
        out.append(c.id if n == 1 else f"{c.id}#{n}")
    return out

# ---- findings of the reliability probe and of the differential fuzzer -----------------
# (tests/test_fuzz_numpy.py compares random programs with NumPy; each fixed finding is
# kept here as a case so that the op-test harness guards it on every device)

FINDINGS_KEYS = [(slice(None), np.array([0, 1]), Ellipsis, np.array([2, 0])),
                 (slice(None), np.array([1, 0]), Ellipsis, 1),
                 (slice(None), 0, Ellipsis, np.array([1, 2]))]


def _f32_stat(fn):
    """NumPy's statistic of a float16 array, computed in float32 (as NumPy's mean is)."""
    def ref(x, **kw):
        return fn(x.astype(np.float32) * 300, **kw).astype(x.dtype)
    return ref


add(OpCase("concat", _concat, fn=lambda *xs, **kw: la.concat(list(xs), **kw),
           pairs=[(((0,), (0,)), {}), (((0, 3), (0, 3)), {"axis": 1}),
                  (((2,), (0,), (1,)), {}), (((0,), (2,), (0,)), {})],
           label="fuzzer findings: empty operands", **MOVE),
    OpCase("Tensor.__getitem__", _getitem, fn=_getitem, dtypes=(D.float32, D.int32),
           shapes=[((3, 3, 3),)], kwargs=[{"key": k} for k in FINDINGS_KEYS],
           label="fuzzer findings: ellipsis between advanced indices",
           requires="lazyarray.indexing", differentiable=True),
    OpCase("floor_divide", np.floor_divide, dtypes=FLOATS, shapes=[((4, 6), (4, 6))],
           domains=("special", "special"), label="fuzzer findings: NumPy's divmod"),
    OpCase("remainder", np.remainder, dtypes=FLOATS, shapes=[((4, 6), (4, 6))],
           domains=("special", "special"), label="fuzzer findings: NumPy's divmod"))
for _name, _ref in [("mean", np.mean), ("var", np.var), ("std", np.std)]:
    add(OpCase(_name, _f32_stat(_ref), fn=lambda x, _n=_name, **kw: getattr(la, _n)(x * 300, **kw),
               dtypes=(D.float16,), shapes=[((512, 4),)], kwargs=[{}, {"axis": 0}],
               domains=("positive",), tol=4, label="fuzzer findings: float32 accumulation"))
