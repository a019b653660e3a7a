"""The primitive case table: at least one case per primitive in compiler.PRIMITIVES.

A case names a primitive, the shapes and dtypes of its operands, its attributes, and how
to draw valid random inputs. `T` stands for the dtype under test: `dtypes_for(case)` lists
the dtypes a case can run with (those its primitive's shape and dtype rule accepts), and
`build_module(case, dtype)` / `make_inputs(case, dtype)` give a module (parameters -> the
primitive -> outputs) and inputs for it. The text round trip, the verifier, the CPU code
generator and the gradient tests all iterate this one table:

    for case in CASES:
        for dtype in dtypes_for(case):
            module = build_module(case, dtype)
            args = make_inputs(case, dtype, seed=0)
            want = reference_outputs(case, dtype, args)

Input kinds (`Operand.values`): "any"; "positive"; "unit" (|x| < 1); "ge1" (x >= 1);
"nonzero"; "fraction" (0 < x < 1, away from the ends); "octaves" (positive, 2^-4 to 2^4:
several exponents); "small" (small magnitudes, so integer products do not overflow);
"exponent";
"shift" (0 <= s < bit width); "wide_shift" (also past the bit width); "index:N"
(0 <= i < N); "unique_index:N" (distinct indices); "special" (NaN, infinities, -0.0 and
the integer extremes, for constants).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import numpy as np

from lazyarray.compiler import PRIMITIVES
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction, Module

T = "T"   # the dtype under test, substituted in operand dtypes and attribute values


@dataclass(frozen=True)
class Operand:
    shape: tuple
    dtype: Any = T             # a DType, or T
    values: str = "any"        # how to draw a random input (see the module docstring)


@dataclass(frozen=True)
class Case:
    id: str                    # readable and unique: "reduce_sum_rows"
    prim: str
    operands: tuple = ()
    attrs: Any = field(default_factory=dict)   # or dtype -> attrs (sub-computations)
    dtypes: Optional[tuple] = None   # restrict further than the primitive's rule

    def __repr__(self) -> str:
        return f"Case({self.id})"


def _op(shape: tuple, dtype: Any = T, values: str = "any") -> Operand:
    return Operand(tuple(shape), dtype, values)


# ---- elementwise ---------------------------------------------------------------------

_UNARY_VALUES = {
    "log": "positive", "log_plus_one": "positive", "sqrt": "positive", "rsqrt": "positive",
    "asin": "unit", "acos": "unit", "atanh": "unit", "acosh": "ge1", "tan": "small",
}
_UNARY = ("negate", "abs", "sign", "not", "exponential", "exponential_minus_one", "log",
          "log_plus_one", "sqrt", "rsqrt", "tanh", "logistic", "sine", "cosine", "tan", "asin",
          "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "floor", "ceil",
          "round_nearest_even", "truncate", "is_finite")
_BINARY_VALUES = {
    "divide": ("any", "nonzero"), "remainder": ("any", "nonzero"),
    "floor_divide": ("any", "nonzero"), "floor_mod": ("any", "nonzero"),
    "power": ("positive", "exponent"), "multiply": ("small", "small"),
    "shift_left": ("any", "shift"), "shift_right_arithmetic": ("any", "shift"),
    "shift_right_logical": ("any", "shift"),
}
_BINARY = ("add", "subtract", "multiply", "divide", "remainder", "floor_divide", "floor_mod",
           "power", "maximum", "minimum", "atan2", "and", "or", "xor", "shift_left",
           "shift_right_arithmetic", "shift_right_logical", "hypot", "logaddexp", "logaddexp2",
           "copysign", "nextafter")


def _elementwise_cases() -> list:
    shape = (2, 3)
    cases = [Case(name, name, (_op(shape, T, _UNARY_VALUES.get(name, "any")),))
             for name in _UNARY]
    for name in _BINARY:
        va, vb = _BINARY_VALUES.get(name, ("any", "any"))
        cases.append(Case(name, name, (_op(shape, T, va), _op(shape, T, vb))))
    cases += [
        Case("add_scalar", "add", (_op(()), _op(()))),
        Case("add_empty", "add", (_op((0, 3)), _op((0, 3)))),
        Case("add_3d", "add", (_op((2, 3, 4)), _op((2, 3, 4)))),
        Case("divide_scalar", "divide", (_op(()), _op((), T, "nonzero"))),
        Case("shift_left_wide", "shift_left", (_op(shape), _op(shape, T, "wide_shift"))),
        Case("shift_right_logical_wide", "shift_right_logical",
             (_op(shape), _op(shape, T, "wide_shift"))),
    ]
    for direction in ("EQ", "NE", "LT", "LE", "GT", "GE"):
        cases.append(Case(f"compare_{direction}", "compare", (_op(shape, T, "small"),
                          _op(shape, T, "small")), {"direction": direction}))
    cases += [
        Case("select", "select", (_op(shape, D.bool_), _op(shape), _op(shape))),
        Case("clamp", "clamp", (_op(shape, T, "small"), _op(shape), _op(shape, T, "positive"))),
    ]
    for target in (D.float32, D.float64, D.bfloat16, D.int32, D.uint8, D.bool_):
        cases.append(Case(f"convert_to_{target.short}", "convert", (_op(shape),),
                          {"dtype": target}))
    for target in (D.uint8, D.int16, D.int32, D.uint64):
        cases.append(Case(f"bitcast_convert_to_{target.short}", "bitcast_convert",
                          (_op(shape),), {"dtype": target}))
    cases.append(Case("bitcast_convert_to_f32", "bitcast_convert", (_op(shape),),
                      {"dtype": D.float32}, dtypes=(D.int32, D.uint32)))
    # the counter-based generator: any key words and counters (its known answers are in
    # tests/test_random.py)
    for word in (0, 1):
        cases.append(Case(f"threefry2x32_word{word}", "threefry2x32",
                          tuple(_op(shape) for _ in range(4)), {"word": word}))
    # the generator's portable log and cos(2 pi u), over their domains
    cases.append(Case("portable_log", "portable_log", (_op(shape, T, "positive"),)))
    cases.append(Case("portable_log_octaves", "portable_log", (_op(shape, T, "octaves"),)))
    cases.append(Case("portable_cos_two_pi", "portable_cos_two_pi",
                      (_op(shape, T, "fraction"),)))
    # complex numbers: parts, conjugate, and conversions in and out
    cases += [Case(name, name, (_op(shape),)) for name in ("real", "imag", "conj")]
    cases.append(Case("complex", "complex", (_op(shape), _op(shape))))
    for target in D.COMPLEX:
        cases.append(Case(f"convert_to_{target.short}", "convert", (_op(shape),),
                          {"dtype": target}, dtypes=(D.float32, D.float64, D.int32) + D.COMPLEX))
    return cases


# ---- everything else -----------------------------------------------------------------

def _dot(lc, rc, lb=(), rb=()) -> dict:
    return {"lhs_contracting": lc, "rhs_contracting": rc, "lhs_batch": lb, "rhs_batch": rb}


def _other_cases() -> list:
    s32, s64 = D.int32, D.int64
    return [
        Case("parameter", "parameter", (), {}),
        Case("constant", "constant", (_op((2, 3)),), {}),
        Case("constant_special", "constant", (_op((8,), T, "special"),), {}),
        Case("constant_scalar", "constant", (_op(()),), {}),
        Case("iota_cols", "iota", (), {"shape": (3, 4), "dtype": T, "dimension": 1}),
        Case("iota_vector", "iota", (), {"shape": (5,), "dtype": T, "dimension": 0}),
        Case("dot_general_matmul", "dot_general", (_op((3, 4), T, "small"), _op((4, 5), T, "small")),
             _dot((1,), (0,))),
        Case("dot_general_batched", "dot_general",
             (_op((2, 3, 4), T, "small"), _op((2, 4, 5), T, "small")),
             _dot((2,), (1,), (0,), (0,))),
        Case("dot_general_transposed_lhs", "dot_general",
             (_op((4, 3), T, "small"), _op((4, 5), T, "small")), _dot((0,), (0,))),
        Case("dot_general_vector", "dot_general", (_op((4,), T, "small"), _op((4,), T, "small")),
             _dot((0,), (0,))),
        Case("reduce_sum_rows", "reduce", (_op((3, 4), T, "small"),), {"axes": (1,), "kind": "sum"}),
        Case("reduce_sum_middle", "reduce", (_op((2, 3, 4), T, "small"),),
             {"axes": (1,), "kind": "sum"}),
        Case("reduce_sum_empty", "reduce", (_op((0, 3)),), {"axes": (0,), "kind": "sum"}),
        Case("reduce_prod_cols", "reduce", (_op((2, 3), T, "small"),),
             {"axes": (0,), "kind": "prod"}),
        Case("reduce_max_all", "reduce", (_op((3, 4)),), {"axes": (0, 1), "kind": "max"}),
        Case("reduce_min_cols", "reduce", (_op((3, 4)),), {"axes": (0,), "kind": "min"}),
        Case("reduce_and_rows", "reduce", (_op((3, 4)),), {"axes": (1,), "kind": "and"}),
        Case("reduce_or_cols", "reduce", (_op((3, 4)),), {"axes": (0,), "kind": "or"}),
        Case("argmax_rows", "argmax", (_op((3, 4)),), {"axis": 1, "index_dtype": s64}),
        Case("argmax_cols_s32", "argmax", (_op((3, 4)),), {"axis": 0, "index_dtype": s32}),
        Case("argmin_rows", "argmin", (_op((3, 4)),), {"axis": 1, "index_dtype": s64}),
        Case("cumulative_sum", "cumulative", (_op((3, 4), T, "small"),),
             {"axis": 1, "kind": "sum", "reverse": False}),
        Case("cumulative_prod_reverse", "cumulative", (_op((3, 4), T, "small"),),
             {"axis": 0, "kind": "prod", "reverse": True}),
        Case("cumulative_max", "cumulative", (_op((3, 4)),),
             {"axis": 1, "kind": "max", "reverse": False}),
        Case("cumulative_min_reverse", "cumulative", (_op((3, 4)),),
             {"axis": 1, "kind": "min", "reverse": True}),
        Case("sort_rows", "sort", (_op((3, 5)),), {"dimension": 1, "descending": False}),
        # collectives, in the group of one process the suite runs as
        Case("all_reduce_sum", "all_reduce", (_op((3, 4)),), {"kind": "sum"}),
        Case("all_reduce_max", "all_reduce", (_op((5,)),), {"kind": "max"}),
        Case("all_gather", "all_gather", (_op((2, 3)),), {"size": 1}),
        Case("broadcast_root0", "broadcast", (_op((4,)),), {"root": 0}),
        Case("sort_cols_descending", "sort", (_op((4, 3)),), {"dimension": 0, "descending": True}),
        Case("argsort_rows", "argsort", (_op((3, 5), T, "small"),),
             {"dimension": 1, "descending": False, "index_dtype": s64}),
        Case("argsort_cols_descending", "argsort", (_op((4, 3), T, "small"),),
             {"dimension": 0, "descending": True, "index_dtype": s32}),
        Case("broadcast_in_dim_rows", "broadcast_in_dim", (_op((3,)),),
             {"shape": (2, 3), "broadcast_dimensions": (1,)}),
        Case("broadcast_in_dim_ones", "broadcast_in_dim", (_op((3, 1)),),
             {"shape": (3, 4), "broadcast_dimensions": (0, 1)}),
        Case("broadcast_in_dim_scalar", "broadcast_in_dim", (_op(()),),
             {"shape": (2, 2), "broadcast_dimensions": ()}),
        Case("reshape", "reshape", (_op((2, 3, 4)),), {"shape": (6, 4)}),
        Case("reshape_scalar", "reshape", (_op(()),), {"shape": (1, 1)}),
        Case("reshape_empty", "reshape", (_op((0, 3)),), {"shape": (3, 0)}),
        Case("transpose_3d", "transpose", (_op((2, 3, 4)),), {"permutation": (2, 0, 1)}),
        Case("transpose_2d", "transpose", (_op((2, 3)),), {"permutation": (1, 0)}),
        Case("slice_strided", "slice", (_op((5, 6)),),
             {"start_indices": (1, 0), "limit_indices": (4, 6), "strides": (2, 3)}),
        Case("slice_empty", "slice", (_op((5, 6)),),
             {"start_indices": (2, 0), "limit_indices": (2, 6), "strides": (1, 1)}),
        Case("dynamic_slice", "dynamic_slice",
             (_op((5, 6)), _op((), s32, "index:4"), _op((), s32, "index:4")),
             {"slice_sizes": (2, 3)}),
        Case("dynamic_slice_clamped", "dynamic_slice",
             (_op((5, 6)), _op((), s64, "any"), _op((), s64, "any")), {"slice_sizes": (2, 3)}),
        Case("dynamic_update_slice", "dynamic_update_slice",
             (_op((5, 6)), _op((2, 3)), _op((), s32, "index:4"), _op((), s32, "index:4"))),
        Case("concatenate_rows", "concatenate", (_op((2, 3)), _op((4, 3))), {"dimension": 0}),
        Case("concatenate_three_cols", "concatenate", (_op((2, 1)), _op((2, 2)), _op((2, 3))),
             {"dimension": 1}),
        Case("pad_interior", "pad", (_op((2, 3)), _op(())),
             {"edge_padding_low": (1, 0), "edge_padding_high": (0, 2), "interior_padding": (1, 0)}),
        Case("pad_negative_crop", "pad", (_op((3, 4)), _op(())),
             {"edge_padding_low": (-1, 0), "edge_padding_high": (1, -1), "interior_padding": (0, 2)}),
        Case("reverse_both", "reverse", (_op((3, 4)),), {"dimensions": (0, 1)}),
        Case("reverse_cols", "reverse", (_op((3, 4)),), {"dimensions": (1,)}),
        Case("gather_rows", "gather", (_op((5, 3)), _op((4,), s32, "index:5")), {"axis": 0}),
        Case("gather_2d_indices", "gather", (_op((2, 5)), _op((2, 3), s64, "index:5")), {"axis": 1}),
        Case("scatter_add", "scatter", (_op((5, 3), T, "small"), _op((4,), s32, "index:5"),
                                        _op((4, 3), T, "small")), {"axis": 0, "mode": "add"}),
        Case("scatter_set", "scatter", (_op((3, 5)), _op((3,), s64, "unique_index:5"),
                                        _op((3, 3))), {"axis": 1, "mode": "set"}),
        Case("tuple", "tuple", (_op((2, 3)), _op((4,), s32))),
    ] + _convolution_cases()


def _conv(strides, low, high, lhs_dilation, rhs_dilation, groups=1) -> dict:
    return {"window_strides": strides, "padding_low": low, "padding_high": high,
            "lhs_dilation": lhs_dilation, "rhs_dilation": rhs_dilation,
            "feature_group_count": groups}


def _convolution_cases() -> list:
    small = "small"
    return [
        Case("convolution_2d_same", "convolution",
             (_op((2, 3, 5, 5), T, small), _op((4, 3, 3, 3), T, small)),
             _conv((1, 1), (1, 1), (1, 1), (1, 1), (1, 1))),
        Case("convolution_1d_strided_dilated_grouped", "convolution",
             (_op((1, 4, 7), T, small), _op((6, 2, 3), T, small)),
             _conv((2,), (0,), (1,), (1,), (2,), groups=2)),
        Case("convolution_2d_transposed", "convolution",
             (_op((1, 2, 3, 3), T, small), _op((3, 2, 2, 2), T, small)),
             _conv((1, 1), (1, 1), (1, 1), (2, 2), (1, 1))),
        Case("convolution_filter_grad_same", "convolution_filter_grad",
             (_op((2, 3, 5, 5), T, small), _op((2, 4, 5, 5), T, small)),
             dict(_conv((1, 1), (1, 1), (1, 1), (1, 1), (1, 1)), kernel_size=(3, 3))),
        Case("convolution_filter_grad_1d_strided_grouped", "convolution_filter_grad",
             (_op((1, 4, 7), T, small), _op((1, 6, 2), T, small)),
             dict(_conv((2,), (0,), (1,), (1,), (2,), groups=2), kernel_size=(3,))),
        Case("direct_convolution_same", "direct_convolution",
             (_op((2, 3, 7, 9), T, small), _op((5, 3, 3, 3), T, small)),
             {"window_strides": (1, 1), "rhs_dilation": (1, 1), "out_size": (5, 7)}),
        Case("direct_convolution_strided_dilated", "direct_convolution",
             (_op((1, 2, 9, 12), T, small), _op((3, 2, 2, 3), T, small)),
             {"window_strides": (2, 3), "rhs_dilation": (2, 1), "out_size": (4, 3)}),
        Case("direct_filter_grad_same", "direct_filter_grad",
             (_op((2, 3, 7, 9), T, small), _op((2, 5, 5, 7), T, small)),
             {"window_strides": (1, 1), "rhs_dilation": (1, 1), "kernel_size": (3, 3),
              "g_offset": (0, 0), "g_size": (5, 7)}),
        Case("direct_filter_grad_padded_g", "direct_filter_grad",
             (_op((2, 3, 7, 9), T, small), _op((2, 5, 7, 9), T, small)),
             {"window_strides": (1, 1), "rhs_dilation": (1, 1), "kernel_size": (3, 3),
              "g_offset": (1, 1), "g_size": (5, 7)}),
        Case("direct_filter_grad_strided_dilated", "direct_filter_grad",
             (_op((1, 2, 9, 12), T, small), _op((1, 3, 4, 3), T, small)),
             {"window_strides": (2, 3), "rhs_dilation": (2, 1), "kernel_size": (2, 3),
              "g_offset": (0, 0), "g_size": (4, 3)}),
        Case("reduce_window_max_pool", "reduce_window", (_op((1, 2, 4, 4)),),
             _window("max", (1, 1, 2, 2), (1, 1, 2, 2), (0, 0, 0, 0), (0, 0, 0, 0))),
        Case("reduce_window_sum_padded", "reduce_window", (_op((3, 5), T, small),),
             _window("sum", (2, 3), (1, 2), (1, 0), (0, 1))),
        Case("reduce_window_min_1d", "reduce_window", (_op((7,)),),
             _window("min", (3,), (2,), (1,), (1,))),
    ]


def _window(kind, window, strides, low, high) -> dict:
    return {"kind": kind, "window_dimensions": window, "window_strides": strides,
            "padding_low": low, "padding_high": high}


def _decomposition_cases() -> list:
    """Matrix decompositions (compiler/primitives/decompositions.py); "spd" draws symmetric
    positive definite matrices, "well_conditioned" ones with a heavy diagonal. A tall
    input's full U or complete Q has columns no function of the input fixes (gradients
    refuse them, as JAX's): tests/test_linalg.py checks those forward only."""
    spd, wc = "spd", "well_conditioned"
    return [
        Case("cholesky_batched", "cholesky", (_op((2, 3, 3), T, spd),)),
        Case("triangular_solve_lower", "triangular_solve",
             (_op((2, 3, 3), T, wc), _op((2, 3, 2))), {"lower": True, "adjoint": False}),
        Case("triangular_solve_upper_adjoint", "triangular_solve",
             (_op((3, 3), T, wc), _op((3, 4))), {"lower": False, "adjoint": True}),
        Case("solve_batched", "solve", (_op((2, 3, 3), T, wc), _op((2, 3, 2)))),
        Case("slogdet_batched", "slogdet", (_op((2, 3, 3), T, wc),)),
        Case("eigh_vectors", "eigh", (_op((2, 3, 3), T, spd),), {"vectors": True}),
        Case("eigh_values", "eigh", (_op((3, 3), T, spd),), {"vectors": False}),
        Case("eig_vectors", "eig", (_op((2, 3, 3), T, wc),), {"vectors": True}),
        Case("eig_values", "eig", (_op((3, 3), T, wc),), {"vectors": False}),
        Case("svd_tall", "svd", (_op((2, 4, 3), T, wc),), {"full_matrices": False, "compute_uv": True}),
        Case("svd_wide_values", "svd", (_op((3, 5), T, wc),), {"full_matrices": False, "compute_uv": False}),
        Case("svd_full_square", "svd", (_op((3, 3), T, wc),), {"full_matrices": True, "compute_uv": True}),
        Case("qr_tall", "qr", (_op((2, 4, 3), T, wc),), {"complete": False}),
        Case("qr_wide", "qr", (_op((3, 5), T, wc),), {"complete": False}),
        Case("qr_complete_wide", "qr", (_op((2, 4), T, wc),), {"complete": True}),
        Case("fft_c2c", "fft", (_op((2, 5)),), {"fft_type": "FFT", "fft_length": (5,)}),
        Case("fft_inverse_2d", "fft", (_op((2, 3, 4)),), {"fft_type": "IFFT", "fft_length": (3, 4)}),
        Case("fft_real", "fft", (_op((3, 6)),), {"fft_type": "RFFT", "fft_length": (6,)}),
        Case("fft_real_inverse", "fft", (_op((2, 4)),), {"fft_type": "IRFFT", "fft_length": (7,)}),
        Case("fft_real_inverse_2d", "fft", (_op((2, 3)),), {"fft_type": "IRFFT", "fft_length": (2, 4)}),
    ]


# ---- control flow: attributes are sub-computations, built for the dtype under test --------

_NUMERIC = (D.float32, D.float64, D.int32)


def _sub_module(name: str, params: list, body: list, outputs: tuple) -> Module:
    """A sub-computation: parameters of the given (shape, dtype)s, then `body`
    (instructions over positions counted after the parameters), then `outputs`."""
    ins = [Instruction("parameter", (), s, d, {"number": k}) for k, (s, d) in enumerate(params)]
    return Module(name, ins + body, outputs)


def _while_attrs(dtype: D.DType) -> dict:
    """A counted loop as fori_loop records it: state (i, n, x), x doubled n times."""
    s32 = D.int32
    state = [((), s32), ((), s32), ((3,), dtype)]
    cond = _sub_module("cond", state, [Instruction("compare", (0, 1), (), D.bool_,
                                                   {"direction": "LT"})], (3,))
    one = Instruction("constant", (), (), s32, {"value": Literal(np.array(1, np.int32))})
    body = _sub_module("body", state, [
        one, Instruction("add", (0, 3), (), s32, {}),
        Instruction("add", (2, 2), (3,), dtype, {})], (4, 1, 5))
    return {"cond": cond, "body": body, "scan": ("fori", 1, 0)}


def _conditional_attrs(dtype: D.DType) -> dict:
    arg = [((3,), dtype)]
    return {"branches": (
        _sub_module("branch0", arg, [Instruction("add", (0, 0), (3,), dtype, {})], (1, 0)),
        _sub_module("branch1", arg, [Instruction("multiply", (0, 0), (3,), dtype, {})], (1, 1)))}


def _call_attrs(dtype: D.DType) -> dict:
    """A computation of two results from two operands: (x + y, x * y)."""
    args = [((3,), dtype), ((3,), dtype)]
    return {"computation": _sub_module("computation", args, [
        Instruction("add", (0, 1), (3,), dtype, {}),
        Instruction("multiply", (0, 1), (3,), dtype, {})], (2, 3))}


def _control_cases() -> list:
    s32 = D.int32
    state = (_op((), s32, "index:1"), _op((), s32, "index:4"), _op((3,)))
    return [
        Case("while_counted", "while", state, _while_attrs, _NUMERIC),
        Case("call_two_results", "call", (_op((3,)), _op((3,))), _call_attrs, _NUMERIC),
        Case("conditional_two_branches", "conditional", (_op((), s32, "index:3"), _op((3,))),
             _conditional_attrs, _NUMERIC),
        # the element of a while's tuple (build_module puts the while in front)
        Case("get_tuple_element_of_while", "get_tuple_element", state,
             lambda dtype: {"index": 2, "of": "while_counted"}, _NUMERIC),
    ]


# cases of a primitive still being written wait until its stanza registers it
CASES: list = [c for c in _elementwise_cases() + _other_cases() + _decomposition_cases()
               + _control_cases() if c.prim in PRIMITIVES]
CASES_BY_ID: dict = {c.id: c for c in CASES}
CASES_BY_PRIM: dict = {}
for _c in CASES:
    CASES_BY_PRIM.setdefault(_c.prim, []).append(_c)
assert len(CASES_BY_ID) == len(CASES), "case ids must be unique"


# ---- dtypes --------------------------------------------------------------------------

class _Typed:
    """An operand stand-in for a primitive's shape and dtype rule."""

    def __init__(self, shape: tuple, dtype: D.DType) -> None:
        self.shape, self.dtype, self.ndim = tuple(shape), dtype, len(shape)


def _sub(value: Any, dtype: D.DType) -> Any:
    return dtype if value is T else value


def _attrs(case: Case, dtype: D.DType) -> dict:
    if callable(case.attrs):         # built for the dtype (control flow's sub-computations)
        return case.attrs(dtype)
    return {k: _sub(v, dtype) for k, v in case.attrs.items()}


def _accepts(case: Case, dtype: D.DType) -> bool:
    if case.dtypes is not None and dtype not in case.dtypes:
        return False
    if case.prim in ("parameter", "constant"):
        return True
    if case.prim == "get_tuple_element":
        return _accepts(CASES_BY_ID[case.attrs(dtype)["of"]], dtype)
    operands = [_Typed(o.shape, _sub(o.dtype, dtype)) for o in case.operands]
    try:
        PRIMITIVES[case.prim].infer(operands, **_attrs(case, dtype))
    except (ValueError, TypeError, IndexError):
        return False
    return True


def dtypes_for(item: Union[Case, str]) -> tuple:
    """The dtypes a case runs with (those its primitive's rule accepts for its shapes and
    attributes). For a primitive name: the dtypes its rule declares (`infer.dtypes`), or
    else every dtype one of its cases accepts."""
    if isinstance(item, Case):
        return tuple(d for d in D.EVERY if _accepts(item, d))
    declared = getattr(PRIMITIVES[item].infer, "dtypes", None)
    if declared is not None:
        return tuple(declared)
    cases = CASES_BY_PRIM.get(item, [])
    return tuple(d for d in D.EVERY if any(_accepts(c, d) for c in cases))


def case_dtype_pairs() -> list:
    """Every (case, dtype) to run, with a readable pytest id `case-dtype`."""
    return [(c, d) for c in CASES for d in dtypes_for(c)]


def pair_id(pair: tuple) -> str:
    case, dtype = pair
    return f"{case.id}-{dtype.short}"


# ---- modules -------------------------------------------------------------------------

def build_module(case: Case, dtype: D.DType = D.float32, seed: int = 0) -> Module:
    """Parameters (one per operand, numbered in order) -> the primitive -> its output.

    Special forms: `parameter` is a module that returns its parameter; `constant` returns a
    constant drawn with `seed`; `tuple` (the root of every module) returns its operands
    as the module's outputs."""
    if case.prim == "parameter":
        ins = Instruction("parameter", (), (2, 3), dtype, {"number": 0})
        return Module(f"case_{case.id}", [ins], (0,))
    if case.prim == "constant":
        (o,) = case.operands
        value = _draw(np.random.default_rng(seed), o.shape, dtype, o.values)
        ins = Instruction("constant", (), o.shape, dtype, {"value": Literal(value)})
        return Module(f"case_{case.id}", [ins], (0,))
    params = [Instruction("parameter", (), o.shape, _sub(o.dtype, dtype), {"number": i})
              for i, o in enumerate(case.operands)]
    if case.prim == "tuple":
        return Module(f"case_{case.id}", params, tuple(range(len(params))))
    attrs = _attrs(case, dtype)
    if case.prim == "get_tuple_element":
        inner = build_module(CASES_BY_ID[attrs["of"]], dtype)
        ins = inner.instructions[:len(params) + 1]
        index = attrs["index"]
        gte = Instruction("get_tuple_element", (len(params),), ins[-1].shape[index],
                          ins[-1].dtype[index], {"index": index})
        return Module(f"case_{case.id}", ins + [gte], (len(ins),))
    shape, out_dtype = PRIMITIVES[case.prim].infer(params, **attrs)
    op = Instruction(case.prim, tuple(range(len(params))), shape, out_dtype, attrs)
    if isinstance(out_dtype, tuple):     # a tuple (control flow): its elements are the outputs
        gtes = [Instruction("get_tuple_element", (len(params),), s, d, {"index": k})
                for k, (s, d) in enumerate(zip(shape, out_dtype))]
        n = len(params) + 1
        return Module(f"case_{case.id}", params + [op] + gtes, tuple(range(n, n + len(gtes))))
    return Module(f"case_{case.id}", params + [op], (len(params),))


def make_inputs(case: Case, dtype: D.DType = D.float32, seed: int = 0) -> list:
    """Random NumPy inputs valid for the case, one per parameter, in parameter order."""
    rng = np.random.default_rng(seed)
    if case.prim == "parameter":
        return [_draw(rng, (2, 3), dtype, "any")]
    if case.prim == "constant":
        return []
    return [_draw(rng, o.shape, _sub(o.dtype, dtype), o.values) for o in case.operands]


def reference_outputs(case: Case, dtype: D.DType, inputs: list) -> list:
    """The case's outputs on the reference interpreter, as NumPy arrays (the oracle that
    compiled code is compared against)."""
    from lazyarray.devices.interpreter import InterpreterDevice
    device = InterpreterDevice()
    exe = device.compile(build_module(case, dtype))
    return [np.asarray(out) for out in exe.run([device.put(a) for a in inputs])]


# ---- random values -------------------------------------------------------------------

def _draw(rng: np.random.Generator, shape: tuple, dtype: D.DType, kind: str) -> np.ndarray:
    if kind.startswith("index:"):
        return rng.integers(0, int(kind.split(":")[1]), shape).astype(dtype.np)
    if kind.startswith("unique_index:"):
        n, size = int(kind.split(":")[1]), math.prod(shape)
        return rng.permutation(n)[:size].reshape(shape).astype(dtype.np)
    if kind == "special":
        return _special(shape, dtype)
    if dtype is D.bool_:
        return rng.random(shape) < 0.5
    if dtype.is_complex:      # each part drawn as the kind's floats
        return (_floats(rng, shape, kind) + 1j * _floats(rng, shape, kind)).astype(dtype.np)
    if dtype.is_float:
        return _floats(rng, shape, kind).astype(dtype.np)
    return _ints(rng, shape, dtype, kind).astype(dtype.np)


def _floats(rng: np.random.Generator, shape: tuple, kind: str) -> np.ndarray:
    if kind in ("spd", "well_conditioned"):
        a = rng.uniform(-1.0, 1.0, shape)
        n = shape[-1]
        if kind == "spd":
            return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
        return a + n * np.eye(shape[-2], n)
    ranges = {"positive": (0.5, 3.0), "unit": (-0.9, 0.9), "ge1": (1.1, 3.0),
              "small": (-1.0, 1.0), "exponent": (-2.0, 2.0), "fraction": (0.02, 0.98)}
    if kind in ranges:
        return rng.uniform(*ranges[kind], shape)
    if kind == "octaves":
        return 2.0 ** rng.uniform(-4.0, 4.0, shape)
    if kind == "nonzero":
        return rng.uniform(0.5, 3.0, shape) * rng.choice([-1.0, 1.0], shape)
    return rng.normal(0.0, 2.0, shape)


def _ints(rng: np.random.Generator, shape: tuple, dtype: D.DType, kind: str) -> np.ndarray:
    signed = dtype.kind == "int"
    if kind in ("shift", "wide_shift"):
        return rng.integers(0, dtype.bits + (4 if kind == "wide_shift" else 0), shape)
    ranges = {"positive": (1, 6), "small": (-3, 4) if signed else (0, 4), "exponent": (0, 5),
              "any": (-50, 51) if signed else (0, 101)}
    if kind == "nonzero":
        mag = rng.integers(1, 10, shape)
        return mag * rng.choice([-1, 1], shape) if signed else mag
    lo, hi = ranges.get(kind, ranges["any"])
    return rng.integers(lo, hi, shape)


def _special(shape: tuple, dtype: D.DType) -> np.ndarray:
    if dtype is D.bool_:
        values: list = [True, False]
    elif dtype.is_complex:
        values = [complex(np.nan, 1.0), complex(-np.inf, 0.5), 1.5 - 2j, -0.0 + 0j, 1j, 0.1]
    elif dtype.is_float:
        values = [np.nan, -np.inf, np.inf, -0.0, 1.5, float(D.finfo(dtype).tiny),
                  float(D.finfo(dtype).max), 0.1]
    else:
        info = D.iinfo(dtype)
        values = [int(info.min), int(info.max), 0, 1, int(info.max) - 1]
    flat = np.resize(np.array(values, dtype=dtype.np), math.prod(shape))
    return flat.reshape(shape)
