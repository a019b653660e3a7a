"""Algebraic simplification: identities that remove work without changing any result.

Rules ("0", "1", "true" mean a constant, possibly broadcast or reshaped, whose every
element is that value):

- `x + 0 -> x`, `0 + x -> x`, `x - 0 -> x`
- `x + y -> concatenate(...)` when x and y are zero outside disjoint runs of one
  dimension (pads of zeros, updates of zeros at constant starts, concatenates with
  zero parts: the gradient of a split; disjoint_sums.py)
- `x * 1 -> x`, `1 * x -> x`, `x / 1 -> x`, `x ** 1 -> x`
- `x * 0 -> 0`, `0 * x -> 0` for integers and bool only (for floats NaN * 0 and inf * 0
  are NaN, so the rule would change results)
- `-(-x) -> x`, `not(not(x)) -> x`
- `max(x, x) -> x`, `min(x, x) -> x`, `and(x, x) -> x`, `or(x, x) -> x`
- `select(true, a, b) -> a`, `select(false, a, b) -> b`, `select(p, a, a) -> a`
- `convert(x, dtype of x) -> x`
- `convert(convert(x, a), b) -> convert(x, b)` when x -> a is lossless (every value of
  x's dtype is exact in a, so converting once gives the same rounding), unless an integer
  x goes through a float a to an integer b that cannot hold every x: float -> integer
  saturates (-52 -> 0 in uint8) where integer -> integer wraps (-52 -> 204)
- `reshape(x) -> x` to its own shape; `reshape(reshape(x)) -> reshape(x)`
- `transpose(x, identity) -> x`; `transpose(transpose(x, p), q) -> transpose(x, p∘q)`
- `broadcast_in_dim(x) -> x` to its own shape with identity dimensions;
  `broadcast_in_dim(broadcast_in_dim(x)) -> broadcast_in_dim(x)` with composed dimensions
- `reshape(broadcast_in_dim(s))`, `transpose(broadcast_in_dim(s)) -> broadcast_in_dim(s)`
  for a rank-0 s (a splat stays a splat of a scalar, which fusion keeps in registers)
- `slice(x)` of the whole array with unit strides `-> x`; `pad(x)` with no padding `-> x`;
  `reverse(x)` over no dimension of size > 1 `-> x`; `concatenate(x) -> x`;
  `reduce(x, axes=()) -> x`
- `dot_general(transpose(x), y) -> dot_general(x, y)` (either side) with the dimension
  numbers mapped through the permutation, when the product stays a plain (batched) matrix
  product: batch dimensions lead in order, one free and one contracting dimension. The
  library reads the transposed operand in place (BLAS's transpose flag) instead of a
  kernel copying it first.
- `transpose(dot_general(x, y)) -> dot_general(y, x)` when the permutation keeps the
  batch dimensions and swaps the two groups of free dimensions (the product's result is
  batch, lhs free, rhs free) and the transpose is the product's only user: the library
  writes the result in the wanted layout instead of a kernel transposing it after (the
  value gradient of attention, P^T g, is recorded as (g^T P)^T)

Each op's stanza names its rule (`Primitive.simplify`); the functions are here.

`x + 0 -> x` may turn a -0.0 result into -0.0 where IEEE gives +0.0; the values compare
equal, and XLA makes the same trade.
"""
from __future__ import annotations

from typing import Callable, Optional

from ..hlo import dtypes as D
from ..hlo.module import Instruction, Module
from ..primitive import PRIMITIVES
from .disjoint_sums import disjoint_sum
from .rewrite import Builder, rebuild, splat

_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
_FLOAT_ORDER = {"float16": ("float32", "float64"), "bfloat16": ("float32", "float64"),
                "float32": ("float64",), "float64": ()}


def lossless(src: D.DType, dst: D.DType) -> bool:
    """Whether every value of src is exactly representable in dst."""
    if src is dst or src is D.bool_:
        return True
    if dst is D.bool_ or (src.is_float and not dst.is_float):
        return False
    if src.is_float:
        return dst.name in _FLOAT_ORDER[src.name]
    if dst.is_float:
        value_bits = src.bits - 1 if src.kind == "int" else src.bits
        return value_bits <= _MANTISSA[dst.name]
    if src.kind == dst.kind:
        return dst.bits >= src.bits
    return src.kind == "uint" and dst.bits > src.bits


def _is(b: Builder, pos: int, value) -> bool:
    v = splat(b, pos)
    return v is not None and bool(v == value)


def add_zero(b: Builder, ins: Instruction) -> Optional[int]:
    x, y = ins.operands
    if _is(b, y, 0):
        return x
    if _is(b, x, 0):
        return y
    return disjoint_sum(b, ins)


def subtract_zero(b: Builder, ins: Instruction) -> Optional[int]:
    x, y = ins.operands
    return x if _is(b, y, 0) else None


def multiply_one_or_zero(b: Builder, ins: Instruction) -> Optional[int]:
    x, y = ins.operands
    if _is(b, y, 1):
        return x
    if _is(b, x, 1):
        return y
    if not ins.dtype.is_float:
        if _is(b, y, 0):
            return y
        if _is(b, x, 0):
            return x
    return None


def right_identity_one(b: Builder, ins: Instruction) -> Optional[int]:
    x, y = ins.operands
    return x if _is(b, y, 1) else None


def involution(b: Builder, ins: Instruction) -> Optional[int]:
    inner = b[ins.operands[0]]
    return inner.operands[0] if inner.op == ins.op else None


def idempotent(b: Builder, ins: Instruction) -> Optional[int]:
    x, y = ins.operands
    return x if x == y else None


def select_known(b: Builder, ins: Instruction) -> Optional[int]:
    p, x, y = ins.operands
    if x == y:
        return x
    v = splat(b, p)
    if v is None:
        return None
    return x if bool(v) else y


def convert_twice(b: Builder, ins: Instruction) -> Optional[int]:
    (x,) = ins.operands
    src = b[x]
    if src.dtype is ins.dtype:
        return x
    if src.op == ins.op:                  # convert(convert(x))
        origin = src.operands[0]
        if lossless(b[origin].dtype, src.dtype) and _same_ends(b[origin].dtype, src.dtype,
                                                              ins.dtype):
            if b[origin].dtype is ins.dtype:
                return origin
            return b.emit("convert", (origin,), ins.shape, ins.dtype, ins.attrs)
    return None


def _same_ends(x: D.DType, a: D.DType, dtype: D.DType) -> bool:
    """Whether x -> dtype directly gives what x -> a -> dtype does, for a lossless x -> a:
    not so for integer x through a float a to an integer dtype narrower than x (the second
    step saturates, the direct one wraps)."""
    if x.is_int and a.is_inexact and dtype.is_int:
        return lossless(x, dtype)
    return True


def _scalar_splat(b: Builder, pos: int) -> Optional[int]:
    """The rank-0 operand of a broadcast_in_dim, if `pos` is one."""
    ins = b[pos]
    if PRIMITIVES[ins.op].repeats and b[ins.operands[0]].shape == ():
        return ins.operands[0]
    return None


def _broadcast_scalar(b: Builder, scalar: int, ins: Instruction) -> int:
    return b.emit("broadcast_in_dim", (scalar,), ins.shape, ins.dtype,
                  {"shape": ins.shape, "broadcast_dimensions": ()})


def reshape_twice(b: Builder, ins: Instruction) -> Optional[int]:
    (x,) = ins.operands
    src = b[x]
    if src.shape == ins.shape:
        return x
    if src.op == ins.op:                  # reshape(reshape(x))
        return b.emit("reshape", src.operands, ins.shape, ins.dtype, ins.attrs)
    scalar = _scalar_splat(b, x)
    return None if scalar is None else _broadcast_scalar(b, scalar, ins)


def transpose_rule(b: Builder, ins: Instruction) -> Optional[int]:
    (x,) = ins.operands
    perm = tuple(ins.attrs["permutation"])
    if perm == tuple(range(len(perm))):
        return x
    src = b[x]
    if b.sole_user and src.op == "dot_general":
        return _swapped_dot(b, src, perm)
    if src.op == ins.op:                  # transpose(transpose(x))
        inner = tuple(src.attrs["permutation"])
        composed = tuple(inner[q] for q in perm)
        if composed == tuple(range(len(composed))):
            return src.operands[0]
        return b.emit("transpose", src.operands, ins.shape, ins.dtype, {"permutation": composed})
    scalar = _scalar_splat(b, x)
    return None if scalar is None else _broadcast_scalar(b, scalar, ins)


def _swapped_dot(b: Builder, dot: Instruction, perm: tuple) -> Optional[int]:
    """dot_general(rhs, lhs) when `perm` of dot_general(lhs, rhs) is batch, rhs free,
    lhs free (each group in order); else None."""
    a = dot.attrs
    lhs, rhs = dot.operands
    nb = len(a["lhs_batch"])
    nl = b[lhs].ndim - nb - len(a["lhs_contracting"])
    nr = b[rhs].ndim - nb - len(a["rhs_contracting"])
    swap = tuple(range(nb)) + tuple(range(nb + nl, nb + nl + nr)) + tuple(range(nb, nb + nl))
    if nl == 0 or nr == 0 or perm != swap:
        return None
    shape = tuple(dot.shape[d] for d in perm)
    return b.emit("dot_general", (rhs, lhs), shape, dot.dtype,
                  {"lhs_contracting": a["rhs_contracting"], "rhs_contracting": a["lhs_contracting"],
                   "lhs_batch": a["rhs_batch"], "rhs_batch": a["lhs_batch"]})


def broadcast_twice(b: Builder, ins: Instruction) -> Optional[int]:
    (x,) = ins.operands
    src = b[x]
    dims = tuple(ins.attrs["broadcast_dimensions"])
    if src.shape == ins.shape and dims == tuple(range(len(dims))):
        return x
    if src.op == ins.op:                  # broadcast_in_dim(broadcast_in_dim(x))
        inner = tuple(src.attrs["broadcast_dimensions"])
        composed = tuple(dims[d] for d in inner)
        return b.emit("broadcast_in_dim", src.operands, ins.shape, ins.dtype,
                      {"shape": ins.shape, "broadcast_dimensions": composed})
    return None


def slice_whole(b: Builder, ins: Instruction) -> Optional[int]:
    (x,) = ins.operands
    a = ins.attrs
    whole = (all(s == 0 for s in a["start_indices"]) and tuple(a["limit_indices"]) == b[x].shape
             and all(s == 1 for s in a["strides"]))
    return x if whole else None


def pad_nothing(b: Builder, ins: Instruction) -> Optional[int]:
    a = ins.attrs
    pads = tuple(a["edge_padding_low"]) + tuple(a["edge_padding_high"]) + tuple(a["interior_padding"])
    return ins.operands[0] if all(p == 0 for p in pads) else None


def reverse_nothing(b: Builder, ins: Instruction) -> Optional[int]:
    (x,) = ins.operands
    return x if all(b[x].shape[d] <= 1 for d in ins.attrs["dimensions"]) else None


def concatenate_one(b: Builder, ins: Instruction) -> Optional[int]:
    """`concatenate(x) -> x`; `concatenate(x, empty...) -> x` (operands of extent 0 along
    the dimension add nothing; all empty: the first, which has the result's shape)."""
    if len(ins.operands) == 1:
        return ins.operands[0]
    d = ins.attrs["dimension"]
    full = [o for o in ins.operands if b[o].shape[d] != 0]
    if not full:
        return ins.operands[0]
    return full[0] if len(full) == 1 else None


def reduce_no_axes(b: Builder, ins: Instruction) -> Optional[int]:
    return ins.operands[0] if len(ins.attrs["axes"]) == 0 else None


def _plain_matmul_operand(ndim: int, contracting: tuple, batch: tuple) -> bool:
    """(batch..., a, b) with batch dims leading in order and one contracting dimension."""
    nb = len(batch)
    return ndim == nb + 2 and tuple(batch) == tuple(range(nb)) and len(contracting) == 1


def _fold_transpose(b: Builder, pos: int, contracting: tuple, batch: tuple) -> Optional[tuple]:
    """(operand, contracting, batch) reading through the transpose at `pos`, if allowed."""
    src = b[pos]
    if src.op != "transpose":
        return None
    perm = tuple(src.attrs["permutation"])
    c2 = tuple(perm[d] for d in contracting)
    b2 = tuple(perm[d] for d in batch)
    if not _plain_matmul_operand(len(perm), c2, b2):
        return None
    return src.operands[0], c2, b2


def dot_transposed_operand(b: Builder, ins: Instruction) -> Optional[int]:
    a = ins.attrs
    lhs, rhs = ins.operands
    sides = [(lhs, tuple(a["lhs_contracting"]), tuple(a["lhs_batch"])),
             (rhs, tuple(a["rhs_contracting"]), tuple(a["rhs_batch"]))]
    folded = [_fold_transpose(b, *side) if _plain_matmul_operand(b[side[0]].ndim, side[1],
                                                                  side[2]) else None
              for side in sides]
    if folded == [None, None]:
        return None
    (l, lc, lb), (r, rc, rb) = [f or side for f, side in zip(folded, sides)]
    return b.emit("dot_general", (l, r), ins.shape, ins.dtype,
                  {"lhs_contracting": lc, "rhs_contracting": rc, "lhs_batch": lb,
                   "rhs_batch": rb})



def _rule(b: Builder, ins: Instruction) -> Optional[int]:
    fn: Optional[Callable] = PRIMITIVES[ins.op].simplify      # the op's stanza names its rule
    return fn(b, ins) if fn is not None else None


def simplify(module: Module) -> Module:
    """One sweep of every rule; the pipeline repeats it until nothing changes."""
    old = module.instructions
    users = [0] * len(old)
    for ins in old:
        for o in ins.operands:
            users[o] += 1
    for o in module.outputs:
        users[o] += 1
    at = iter(range(len(old)))          # rebuild visits the instructions in order

    def rule(b: Builder, ins: Instruction) -> Optional[int]:
        # whether this instruction is its first operand's only user (a rule that rewrites
        # that operand, as transpose(dot_general), may then drop it)
        operands = old[next(at)].operands
        b.sole_user = bool(operands) and users[operands[0]] == 1
        return _rule(b, ins)
    return rebuild(module, rule, "algebraic_simplifier")
