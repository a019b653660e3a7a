"""The HLO verifier: checks that a module is well formed, as every pass must leave it.

`verify(module)` raises ValueError quoting the offending instruction's text when:
- an operand does not refer to an earlier instruction;
- an op is unknown, or its attributes are not the ones its primitive declares;
- an attribute value is not of a canonical type (a list where a tuple belongs would make
  the module unhashable and would not round-trip through the text form);
- a shape or dtype differs from what the primitive's rule gives for its operands;
- parameter numbers are not 0..n-1, each exactly once;
- a constant's literal does not have the instruction's shape and dtype;
- an output position is out of range;
- a sub-computation (a loop's body, a branch) has any of these problems.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any

import numpy as np

from .dtypes import DType
from .literal import Literal
from .module import Instruction, Module
from ..primitive import PRIMITIVES
from .printer import instruction_text

_LEAF_ATTRS = {"parameter": ("number",), "constant": ("value",)}


def verify(module: Module) -> None:
    """Raise ValueError on the first problem found; return None for a well-formed module."""
    numbers: dict = {}
    for i, ins in enumerate(module.instructions):
        try:
            _check_instruction(module, i, ins)
        except _Problem as p:
            raise ValueError(f"HLO verifier, module {module.name}, instruction {i}: {p}\n"
                             f"  {_text(module, i)}") from None
        if ins.op == "parameter":
            numbers.setdefault(ins.attrs["number"], []).append(i)
    _check_parameters(module, numbers)
    _check_outputs(module)
    for p, attr, sub in module.sub_computations():
        try:
            verify(sub)
        except ValueError as e:
            raise ValueError(f"HLO verifier, module {module.name}, instruction {p}, "
                             f"sub-computation {attr}:\n{e}") from None


class _Problem(Exception):
    pass


def _text(module: Module, i: int) -> str:
    try:
        return instruction_text(module, i, strict=False)
    except Exception as e:  # a module broken enough that even its text fails
        return f"<cannot print instruction {i}: {e}>"


def _check_instruction(module: Module, i: int, ins: Any) -> None:
    if not isinstance(ins, Instruction):
        raise _Problem(f"expected an Instruction, got {type(ins).__name__}")
    if ins.op not in PRIMITIVES:
        raise _Problem(f"unknown op {ins.op!r}")
    for o in ins.operands:
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or not 0 <= o < i:
            raise _Problem(f"operand {o!r} does not refer to an earlier instruction "
                           f"(valid: 0..{i - 1})")
    _check_arity(ins)
    _check_type_form(ins)
    _check_attrs(ins)
    if ins.op in _LEAF_ATTRS:
        _check_leaf(ins)
        return
    try:
        shape, dtype = PRIMITIVES[ins.op].infer([module.instructions[o] for o in ins.operands],
                                                **ins.attrs)
    except (ValueError, TypeError, IndexError) as e:
        raise _Problem(f"invalid {ins.op}: {e}") from None
    if tuple(shape) != ins.shape or not _same_dtype(dtype, ins.dtype):
        raise _Problem(f"declared {_type(ins.shape, ins.dtype)} but {ins.op} of its operands "
                       f"gives {_type(shape, dtype)}")


def _check_arity(ins: Instruction) -> None:
    if ins.op in _LEAF_ATTRS:
        return              # _check_leaf says it: a leaf takes no operands
    low, high = operand_counts(ins.op)
    if not low <= len(ins.operands) <= high:
        want = str(low) if low == high else f"at least {low}"
        raise _Problem(f"{ins.op} takes {want} operand{'s' if want != '1' else ''}, "
                       f"got {len(ins.operands)}")


@functools.lru_cache(maxsize=None)
def operand_counts(op: str) -> tuple:
    """(fewest, most) operands of `op`: its declared arity, else what its reference's
    positional parameters (those that are not attributes) allow."""
    p = PRIMITIVES[op]
    if op in _LEAF_ATTRS:
        return 0, 0
    if p.arity is not None:
        return p.arity, p.arity
    try:
        params = inspect.signature(p.reference).parameters.values()
    except (TypeError, ValueError):          # a reference without a signature: unchecked
        return 0, float("inf")
    fixed = [q for q in params if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)
             and q.name not in p.attrs and q.default is q.empty]
    variadic = any(q.kind is q.VAR_POSITIONAL for q in params)
    return len(fixed), (float("inf") if variadic else len(fixed))


def _check_type_form(ins: Instruction) -> None:
    if ins.op == "tuple" or isinstance(ins.dtype, tuple):
        return      # shape and dtype are tuples; the rule below checks them
    if not isinstance(ins.dtype, DType):
        raise _Problem(f"dtype must be a DType, got {ins.dtype!r}")
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0
           for n in ins.shape):
        raise _Problem(f"shape must be non-negative integers, got {ins.shape!r}")


def _check_attrs(ins: Instruction) -> None:
    declared = _LEAF_ATTRS.get(ins.op, PRIMITIVES[ins.op].attrs)
    unknown = sorted(set(ins.attrs) - set(declared))
    missing = [k for k in declared if k not in ins.attrs]
    if unknown or missing:
        raise _Problem(f"{ins.op} takes the attributes {list(declared)}; "
                       f"unknown: {unknown}, missing: {missing}")
    for k, v in ins.attrs.items():
        bad = _non_canonical(v)
        if bad is not None:
            raise _Problem(f"attribute {k}={v!r}: {bad}")


def _non_canonical(v: Any) -> Any:
    """Why `v` cannot be an attribute value, or None when it can."""
    if isinstance(v, (bool, int, float, str, DType, Literal, np.integer, np.floating, Module)) \
            or v is None:
        return None
    if isinstance(v, tuple):
        for item in v:
            bad = _non_canonical(item)
            if bad is not None:
                return bad
        return None
    return (f"a {type(v).__name__} is not a valid attribute value (use ints, floats, bools, "
            f"strings, dtypes, tuples of these, a Literal, or a sub-computation's Module)")


def _check_leaf(ins: Instruction) -> None:
    if ins.operands:
        raise _Problem(f"a {ins.op} takes no operands")
    if ins.op == "parameter":
        n = ins.attrs["number"]
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise _Problem(f"parameter number must be an int, got {n!r}")
        return
    lit = ins.attrs["value"]
    if not isinstance(lit, Literal):
        raise _Problem(f"a constant's value must be a Literal, got {type(lit).__name__}")
    if tuple(lit.array.shape) != ins.shape or lit.array.dtype != ins.dtype.np:
        raise _Problem(f"literal of shape {tuple(lit.array.shape)} and dtype {lit.array.dtype} "
                       f"does not match the declared {_type(ins.shape, ins.dtype)}")


def _check_parameters(module: Module, numbers: dict) -> None:
    n = len(numbers)
    for number, positions in sorted(numbers.items(), key=lambda kv: kv[0]):
        if len(positions) > 1:
            raise ValueError(f"HLO verifier, module {module.name}: parameter number {number} "
                             f"appears {len(positions)} times\n  {_text(module, positions[1])}")
        if not 0 <= number < n:
            raise ValueError(f"HLO verifier, module {module.name}: parameter numbers must be "
                             f"0..{n - 1}, each once; got {number}\n  {_text(module, positions[0])}")


def _check_outputs(module: Module) -> None:
    n = len(module.instructions)
    for o in module.outputs:
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or not 0 <= o < n:
            raise ValueError(f"HLO verifier, module {module.name}: output {o!r} is not an "
                             f"instruction position (valid: 0..{n - 1}); "
                             f"outputs {tuple(module.outputs)}")


def _same_dtype(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) and all(
            x is y for x, y in zip(a, b))
    return a is b


def _type(shape: Any, dtype: Any) -> str:
    from .printer import type_text
    try:
        return type_text(shape, dtype)
    except Exception:
        return f"{dtype!r}{list(shape)!r}"
