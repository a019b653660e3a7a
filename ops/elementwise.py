"""The array API's elementwise functions, over nodes and weak Python scalars."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node, kept_constant, type_of
from ..compiler.primitive import PRIMITIVES, apply, beside, made, memo_of, same_dtype_fast
from .promotion import (KEPT_SET, PY_SCALARS, as_node, broadcast_shapes, broadcast_to, convert,
                        converted, int_fits,
                        kept_spread, operands, scalar, spread_node, spread_scalar, typed_spread,
                        weak_operand, weak_scalar_like)

Operand = Any  # a Node or a Python scalar


def _float_operands(op: str, *args: Operand) -> list:
    """Like `operands`, but integers and bools become the default float (as in PyTorch)."""
    xs = operands(op, *args)
    if not xs[0].dtype.is_inexact:
        xs = [convert(x, D.DEFAULT_FLOAT) for x in xs]
    return xs


def _check_numeric(op: str, x: Node) -> None:
    if x.dtype is D.bool_:
        raise TypeError(f"{op}: not defined for bool tensors; convert with .astype(int) first")


def _unary_float(prim: str):
    fast = same_dtype_fast(prim)
    assert fast, f"{prim}: a rule that keeps its operand's dtype"

    def fn(x: Operand) -> Node:
        if type(x) is Node:
            # the common case: the memo's entry (a hit is a type the rule took: a dtype of
            # `fast`, which is every dtype the rule takes)
            found = memo.get(x.type)
            if found is not None:
                return made(prim, (x,), found)
            dtype = x.dtype
            if dtype in fast:
                return apply(prim, x)
            if dtype in _INT_OR_BOOL and to_float:   # `exp(i)`: i as the default float
                x = _converted(x, D.DEFAULT_FLOAT)
                found = memo.get(x.type)
                return made(prim, (x,), found) if found is not None else apply(prim, x)
        (x,) = _float_operands(prim, x)
        return apply(prim, x)
    to_float = D.DEFAULT_FLOAT in fast
    memo = memo_of(prim)
    fn.__name__ = prim
    return fn


exp = _unary_float("exponential")
expm1 = _unary_float("exponential_minus_one")
log = _unary_float("log")
log1p = _unary_float("log_plus_one")
sqrt = _unary_float("sqrt")
rsqrt = _unary_float("rsqrt")
tanh = _unary_float("tanh")
sigmoid = _unary_float("logistic")
sin = _unary_float("sine")
cos = _unary_float("cosine")
tan = _unary_float("tan")
asin = _unary_float("asin")
acos = _unary_float("acos")
atan = _unary_float("atan")
sinh = _unary_float("sinh")
cosh = _unary_float("cosh")
asinh = _unary_float("asinh")
acosh = _unary_float("acosh")
atanh = _unary_float("atanh")
erf = _unary_float("erf")
exp.__name__, expm1.__name__, log1p.__name__, sigmoid.__name__ = "exp", "expm1", "log1p", "sigmoid"
sin.__name__, cos.__name__ = "sin", "cos"


_INV_LN2 = 1 / math.log(2)
_INV_LN10 = 1 / math.log(10)


def log2(x: Operand) -> Node:
    return _log_times(x, _INV_LN2)


def log10(x: Operand) -> Node:
    return _log_times(x, _INV_LN10)


def _log_times(x: Operand, c: float) -> Node:
    """`multiply(log(x), c)`: for a real float node, or an integer or bool one (as the
    default float), its nodes written out (what `log` and `multiply` record); anything
    else through them."""
    if type(x) is Node:
        dtype = x.dtype
        if dtype in _INT_OR_BOOL:
            x = _converted(x, D.DEFAULT_FLOAT)
            dtype = D.DEFAULT_FLOAT
        if dtype in _LOG_TIMES_FAST:
            found = _LOG.get(x.type)
            y = made("log", (x,), found) if found is not None else apply("log", x)
            t = y.type
            s = spread_scalar(c, dtype, y.shape, t)
            found = _MULTIPLY.get(t.pair)      # (`beside` written out)
            return made("multiply", (y, s), found) if found is not None else \
                beside(_MULTIPLY, "multiply", y, s, y, s, {})
    return multiply(log(x), c)


# real floats that `log` and `multiply` record directly (a Python float beside them weak)
_LOG_TIMES_FAST = same_dtype_fast("log") & same_dtype_fast("multiply") & frozenset(D.FLOATS)
_LOG, _MULTIPLY = memo_of("log"), memo_of("multiply")     # the memo's tables of the two


def _rounding(prim: str, name: str):
    fast = same_dtype_fast(prim)
    assert fast, f"{prim}: a rule that keeps its operand's dtype"

    def fn(x: Operand) -> Node:
        if type(x) is Node:
            # a float tensor: the memo's entry (a hit is a type the rule took: a float)
            found = memo.get(x.type)
            if found is not None:
                return made(prim, (x,), found)
            if x.dtype in fast:
                return apply(prim, x)
        (x,) = operands(name, x)
        _check_numeric(name, x)
        return apply(prim, x) if x.dtype.is_float else x
    memo = memo_of(prim)
    fn.__name__ = name
    return fn


floor = _rounding("floor", "floor")
ceil = _rounding("ceil", "ceil")
trunc = _rounding("truncate", "trunc")
round = _rounding("round_nearest_even", "round")


_INT_OR_BOOL = frozenset(D.INTEGERS + (D.bool_,))
_INEXACT = frozenset(D.FLOATS + D.COMPLEX)
_BOOL = D.bool_
_I64_MIN, _I64_MAX = -2 ** 63, 2 ** 63 - 1     # the default int's range


def _recorder(prim: str, fast: frozenset, general: Callable, attrs: Any = None,
              result: Any = None, broadcasts: bool = False) -> Callable:
    """`fn(a, b)` recording `prim(a, b)` directly when it needs no promotion, broadcast or
    check that could fail: two nodes of one dtype in `fast` and one shape, or a node of
    such a dtype and a Python scalar that takes it (weakly typed); the result has `result`
    dtype, or the operands' when None. Anything else goes to `general(a, b)`, the way
    through `operands` and `apply`, which raises for bad input. Most recorded ops end
    here, so it is written for speed: the node comes from `apply`'s memo, keyed on the
    operands' interned types (a hit: the rule accepted them before), looked up here with
    no call; a miss goes through `apply`, which asks the rule. `broadcasts`: `general`
    gives two nodes of one dtype and of shapes that broadcast together what `operands`
    gives them (each broadcast to the common shape) and `prim` of those: the broadcasts
    are remembered per pair of types (`_WIDENED`) and made directly next time."""
    kw = {} if attrs is None else dict(attrs)
    memo = memo_of(prim, **kw)      # the memo's table of prim (and compare's direction)

    def fn(a: Operand, b: Operand) -> Node:
        if type(a) is Node:
            dtype = a.dtype
            if dtype in fast:
                kind = type(b)
                if kind is Node:
                    # two of one type: the memo's entry (an elementwise rule takes nothing
                    # else without a broadcast or a conversion first)
                    t = a.type
                    if t is b.type and t is not None:
                        found = memo.get(t.pair)
                        if found is not None:
                            return made(prim, (a, b), found)
                    if b.dtype is dtype:
                        shape = a.shape
                        if b.shape == shape:
                            return apply(prim, a, b, **kw)
                        if not b.shape:      # x * a 0-d tensor (a NumPy scalar, a loss scale)
                            s = _spread(b, shape, t)
                            return beside(memo, prim, a, s, a, s, kw)
                        if not shape:
                            s = _spread(a, b.shape, b.type)
                            return beside(memo, prim, b, s, s, b, kw)
                        if broadcasts:           # x / x.sum(-1, keepdims=True), x + bias
                            plan = _WIDENED.get((t, b.type))
                            if plan is None:
                                plan = _widening(a, b)
                            if plan is not False:
                                return apply(prim, _widened(a, plan[0]), _widened(b, plan[1]),
                                             **kw)
                elif kind is bool or kind is int and dtype is not _BOOL or \
                        kind is float and dtype in _INEXACT:    # what the dtype takes weakly
                    s = weak_operand(b, a)     # (a's type: its dtype, spread to its shape)
                    if s is not None:      # the memo's entry (`beside` written out)
                        t = a.type
                        found = None if t is None else memo.get(t.pair)
                        return made(prim, (a, s), found) if found is not None else \
                            beside(memo, prim, a, s, a, s, kw)
        elif type(b) is Node and b.dtype in fast:
            kind = type(a)
            dtype = b.dtype
            if kind is bool or kind is int and dtype is not _BOOL or \
                    kind is float and dtype in _INEXACT:
                s = weak_operand(a, b)
                if s is not None:          # the memo's entry (`beside` written out)
                    t = b.type
                    found = None if t is None else memo.get(t.pair)
                    return made(prim, (s, b), found) if found is not None else \
                        beside(memo, prim, b, s, s, b, kw)
        # an integer or bool tensor beside a Python float (`i * 2.5`): both the default
        # float, the tensor converted (what `_scalar_operands` makes); a bool tensor beside
        # a Python int (`m * 2`, `m & 3`): both the default int (what `_scalar_operands`
        # and `operands` make). The product: the memo's entry (`beside` written out).
        if type(a) is Node:
            x = _beside_scalar(a, b, to_float, to_int)
            if x is not None:
                s = weak_operand(b, x)
                found = memo.get(x.type.pair)
                return made(prim, (x, s), found) if found is not None else \
                    beside(memo, prim, x, s, x, s, kw)
        elif type(b) is Node:
            x = _beside_scalar(b, a, to_float, to_int)
            if x is not None:
                s = weak_operand(a, x)
                found = memo.get(x.type.pair)
                return made(prim, (s, x), found) if found is not None else \
                    beside(memo, prim, x, s, s, x, kw)
        return general(a, b)
    to_float = D.DEFAULT_FLOAT in fast
    to_int = D.DEFAULT_INT in fast
    # what the operators need to write the common cases out themselves (lazyarray/lift.py,
    # `direct_method`): they record the same nodes as `fn`, one call less per op
    fn.direct = (prim, fast, attrs, result)
    return fn


# (type of a, type of b) -> the broadcast attributes of each (None: a, or b, already of
# the common shape), or False: shapes that do not broadcast (the general way raises)
_WIDENED: dict = {}


def _beside_scalar(n: Node, v: Any, to_float: bool, to_int: bool) -> Any:
    """`n` converted as a Python scalar `v` beside it converts it: an integer or bool
    tensor beside a float, both the default float; a bool tensor beside an int, both the
    default int. None where `n` keeps its dtype."""
    if type(v) is float:
        if to_float and n.dtype in _INT_OR_BOOL:
            return _converted(n, D.DEFAULT_FLOAT)
    elif type(v) is int and to_int and n.dtype is _BOOL and _I64_MIN <= v <= _I64_MAX:
        return _converted(n, D.DEFAULT_INT)
    return None


def _widening(a: Node, b: Node) -> Any:
    """What `operands` does to two nodes of one dtype and different shapes: each broadcast
    to their common shape (`broadcast_to`), as attributes; False when they do not
    broadcast (not remembered: the general way raises naming the op)."""
    try:
        shape = broadcast_shapes("", a.shape, b.shape)
    except ValueError:
        return False
    plan = tuple(None if x.shape == shape else
                 {"shape": shape, "broadcast_dimensions": tuple(range(len(shape) - len(x.shape),
                                                                      len(shape)))}
                 for x in (a, b))
    if len(_WIDENED) >= 4096:
        _WIDENED.clear()
    _WIDENED[(type_of(a), type_of(b))] = plan
    return plan


def _widened(x: Node, attrs: Any) -> Node:
    return x if attrs is None else apply("broadcast_in_dim", x, **attrs)


# a 0-d node broadcast to a shape (what `broadcast_to` records for it), and x of another
# dtype converted (convert's rule takes every pair): the promotion module's own, named
# here (a wrapper would cost a call at every op that takes them)
_spread = spread_node
_converted = converted


def _scalar_operands(op: str, a: Operand, b: Operand) -> list:
    """`operands(op, a, b)`, with the case of a node beside a Python scalar of another
    kind (an integer tensor times 2.5: both become the default float) taken the short way:
    the node converted, the scalar beside it as `weak_scalar_like` makes it."""
    if type(a) is Node and type(b) in PY_SCALARS:
        node, value = a, b
    elif type(b) is Node and type(a) in PY_SCALARS:
        node, value = b, a
    else:
        return operands(op, a, b)
    dtype = D.weak_scalar_dtype(node.dtype, value)
    if dtype is node.dtype:
        return operands(op, a, b)       # an int out of range: the general way raises
    node = _converted(node, dtype)
    s = weak_operand(value, node)
    if s is None:
        return operands(op, a, b)
    return [node, s] if type(a) is Node else [s, node]


def _made(prim: str, fast: frozenset, a: Node, b: Node, attrs: Any = None,
          result: Any = None) -> Node:
    """`apply(prim, a, b, **attrs)` for operands that `operands` made one dtype and one
    shape (a bias broadcast, an integer tensor converted): the node directly when the
    dtype is in `fast`, `apply` (whose rule raises) otherwise."""
    if a.dtype in fast:
        return apply(prim, a, b, **(attrs or {}))
    return apply(prim, a, b, **(attrs or {}))


def _binary(prim: str, name: str, numeric: bool = True):
    fast = same_dtype_fast(prim, exclude=(D.bool_,) if numeric else ())

    def general(a: Operand, b: Operand) -> Node:
        a, b = _scalar_operands(name, a, b)
        if numeric:
            _check_numeric(name, a)
        return _made(prim, fast, a, b)
    fn = _recorder(prim, fast, general, broadcasts=True)
    fn.__name__ = name
    return fn


add = _binary("add", "add", numeric=False)
subtract = _binary("subtract", "subtract")
multiply = _binary("multiply", "multiply", numeric=False)
maximum = _binary("maximum", "maximum", numeric=False)
minimum = _binary("minimum", "minimum", numeric=False)
_power = _binary("power", "pow")


_SQUARE_FAST = same_dtype_fast("multiply", exclude=(D.bool_,))
_POWER = memo_of("power")
_FLOAT_DTYPES = frozenset(D.FLOATS)


def pow(a: Operand, b: Operand) -> Node:
    """x ** 2 and x ** 3 become products and x ** 0.5 a square root when the exponent is a
    Python scalar: the exponent is a runtime parameter, so no later pass could see it."""
    if type(a) is Node:
        kind = type(b)
        if kind is int or kind is float:     # a Python exponent (not a bool), directly
            dtype = a.dtype
            if kind is float and dtype not in _FLOAT_DTYPES or dtype is _BOOL:
                # no exponent below is special for it: `_power`'s nodes (an integer or
                # bool tensor and a float: the default float; a bool one and an int:
                # the default int), written out for the common kinds
                if dtype in _INT_OR_BOOL and (kind is float or _I64_MIN <= b <= _I64_MAX):
                    x = _converted(a, D.DEFAULT_FLOAT if kind is float else D.DEFAULT_INT)
                    s = weak_operand(b, x)
                    return beside(_POWER, "power", x, s, x, s, {})
                return _power(a, b)
            if b == 2:                       # x ** 2, the common case
                if dtype in _SQUARE_FAST:
                    t = a.type
                    found = None if t is None else _MULTIPLY.get(t.pair)
                    return made("multiply", (a, a), found) if found is not None else \
                        apply("multiply", a, a)
                return square(a)
            if b == 3:
                return multiply(square(a), a)
            if b == 0.5:                     # (a float exponent: a float dtype, above)
                return sqrt(a)
            if kind is int and b < 0 and dtype.is_int:
                _negative_power(dtype, b)
            return _power(a, b)
    elif type(a) is float and type(b) is Node and b.dtype in _INT_OR_BOOL:
        x = _converted(b, D.DEFAULT_FLOAT)   # `2.5 ** i`: `_power`'s nodes, written out
        s = weak_operand(a, x)
        return beside(_POWER, "power", x, s, s, x, {})
    if isinstance(a, Node) and type(b) is int and b < 0 and a.dtype.is_int:
        _negative_power(a.dtype, b)
    return _power(a, b)


def _negative_power(dtype: D.DType, b: int) -> None:
    raise ValueError(f"pow: integers to negative integer powers are not allowed "
                     f"({dtype.name} ** {b}); convert the base to a float dtype first")


_DIVIDE_FAST = same_dtype_fast("divide") & frozenset(D.FLOATS + D.COMPLEX)


F32_EXACT = 2 ** 24       # every int of at most this magnitude is exact in float32


def _exact_float(prim: str, a: Operand, b: Operand) -> Any:
    """`prim(a, b)` of a float-only op (true division, atan2) for integer or bool
    operands, the short ways, or None for anything else:

    - two nodes of one integer (or bool) dtype, of one shape or one of them 0-d (a NumPy
      scalar): both converted to the default float (after the 0-d one's broadcast, as the
      general way orders them);
    - such a node beside a Python int or bool that float32 holds exactly and the node's
      dtype holds (`i / 2`): the node converted, the int weak beside it as `i * 2.5`
      records. That is the value of converting the int as the node's dtype along with
      it (what the general way records)."""
    if type(a) is Node and type(b) is Node:
        dtype = a.dtype
        if b.dtype is not dtype or dtype not in _INT_OR_BOOL:
            return None
        if a.shape != b.shape:
            if not b.shape:
                b = _spread(b, a.shape)
            elif not a.shape:
                a = _spread(a, b.shape)
            else:
                return None
        x, y = _converted(a, D.DEFAULT_FLOAT), _converted(b, D.DEFAULT_FLOAT)
        found = (_FLOAT_MEMOS.get(prim) or _float_memo(prim)).get(x.type.pair)   # one type
        return made(prim, (x, y), found) if found is not None else apply(prim, x, y)
    node, value = (a, b) if type(a) is Node else (b, a)
    if type(node) is Node and (type(value) is int or type(value) is bool) and \
            -F32_EXACT <= value <= F32_EXACT and node.dtype in _INT_OR_BOOL and \
            int_fits(value, node.dtype):
        x = _converted(node, D.DEFAULT_FLOAT)
        s = weak_operand(value, x)
        memo = _FLOAT_MEMOS.get(prim) or _float_memo(prim)
        pair = (x, s) if node is a else (s, x)
        found = memo.get(x.type.pair)          # (`beside` written out)
        return made(prim, pair, found) if found is not None else apply(prim, *pair)
    return None


_FLOAT_MEMOS: dict = {}     # name -> the memo's table of a float op `_exact_float` records


def _float_memo(prim: str) -> dict:
    table = _FLOAT_MEMOS[prim] = memo_of(prim)
    return table


def _divide(a: Operand, b: Operand) -> Node:
    """Integers divide as the default float (`_exact_float` the short ways)."""
    out = _exact_float("divide", a, b)
    if out is not None:
        return out
    a, b = _scalar_operands("divide", a, b)
    if not a.dtype.is_inexact:
        a, b = convert(a, D.DEFAULT_FLOAT), convert(b, D.DEFAULT_FLOAT)
    return _made("divide", _DIVIDE_FAST, a, b)


divide = _recorder("divide", _DIVIDE_FAST, _divide, broadcasts=True)
divide.__name__ = "divide"
divide.__doc__ = "True division: integers divide as the default float."
# the operators take `i / 2` the short way `_divide` does (lazyarray/lift.py direct_method)
divide.exact_ints = True


def _atan2(a: Operand, b: Operand) -> Node:
    out = _exact_float("atan2", a, b)    # integers as the default float, the short ways
    if out is not None:
        return out
    a, b = _float_operands("atan2", a, b)
    return apply("atan2", a, b)


# float operands of one dtype (or a float tensor and a Python scalar it takes, an integer
# tensor and a Python float: the default float) recorded directly, the rest as `_atan2`
atan2 = _recorder("atan2", same_dtype_fast("atan2"), _atan2)
atan2.__name__ = "atan2"
atan2.exact_ints = True       # the operators' direct forms take `atan2(i, 2)` as `_atan2`


# compare's rule (compiler/primitives/elementwise.py): any dtype; complex ones for EQ/NE only
_ORDERED = frozenset(d for d in D.EVERY if not d.is_complex)


def _compare(direction: str, name: str):
    fast = frozenset(D.EVERY) if direction in ("EQ", "NE") else _ORDERED

    def general(a: Operand, b: Operand) -> Node:
        a, b = _scalar_operands(name, a, b)
        return _made("compare", fast, a, b, {"direction": direction}, D.bool_)
    fn = _recorder("compare", fast, general, {"direction": direction}, D.bool_, broadcasts=True)
    fn.__name__ = name
    return fn


equal = _compare("EQ", "equal")
not_equal = _compare("NE", "not_equal")
less = _compare("LT", "less")
less_equal = _compare("LE", "less_equal")
greater = _compare("GT", "greater")
greater_equal = _compare("GE", "greater_equal")


def where(condition: Operand, x: Operand, y: Operand) -> Node:
    if type(condition) is Node and condition.dtype is _BOOL:
        c = condition
        shape = c.shape            # the common case, recorded directly: a bool condition
        if type(x) is Node:        # and a value of its shape, the other of that dtype and
            kind = type(y)         # shape or a Python scalar
            if kind is Node:
                # the memo's entry first (a hit is what select's rule took: two values of
                # one type, of the condition's shape, what is checked below)
                t = x.type
                if t is y.type and t is not None:
                    found = _SELECT.get((c.type, t.pair))
                    if found is not None:
                        return made("select", (c, x, y), found)
                if x.shape == shape and y.shape == shape and x.dtype is y.dtype:
                    return apply("select", c, x, y)
            elif (kind is float or kind is int or kind is bool) and x.shape == shape:
                out = _select_scalar(c, x, y, False)
                if out is not None:
                    return out
        elif type(y) is Node:
            kind = type(x)
            if (kind is float or kind is int or kind is bool) and y.shape == shape:
                out = _select_scalar(c, y, x, True)
                if out is not None:
                    return out
        else:
            out = _where_scalars(c, x, y)
            if out is not None:
                return out
    else:
        (c,) = operands("where", condition, dtype=D.bool_) if isinstance(condition, Node) \
            else (as_node(condition, D.bool_),)
    x, y = _scalar_operands("where", x, y)  # one dtype, one shape
    if c.shape != x.shape:
        shape = broadcast_shapes("where", c.shape, x.shape, y.shape)
        c, x, y = broadcast_to(c, shape), broadcast_to(x, shape), broadcast_to(y, shape)
    return apply("select", c, x, y)


_SELECT = memo_of("select")      # the memo's table of select, looked up by the fronts below


def _select_scalar(c: Node, node: Node, value: Any, swap: bool) -> Any:
    """`where(c, node, value)` (`where(c, value, node)` when `swap`) for a bool condition,
    a node of its shape and a Python scalar, recorded directly: the scalar weak beside
    the node, or both as the dtype `_scalar_operands` gives them when the node's dtype
    does not take it (an integer node beside a float: the default float; a bool node
    beside an int: the default int), the node converted. None for anything else (an int
    out of range: the general way raises)."""
    kind = type(value)
    dtype = node.dtype
    if kind is float and dtype in _INT_OR_BOOL:                   # where(c, i, 0.5)
        node = _converted(node, D.DEFAULT_FLOAT)
        if value not in KEPT_SET:         # what `weak_operand` makes of it
            s = spread_scalar(value, D.DEFAULT_FLOAT, node.shape, node.type)
            a, b = (s, node) if swap else (node, s)
            found = _SELECT.get((c.type, node.type.pair))     # s of node's type
            return made("select", (c, a, b), found) if found is not None else \
                apply("select", c, a, b)
    elif kind is int and dtype is _BOOL and _I64_MIN <= value <= _I64_MAX:  # (c, m, 0)
        node = _converted(node, D.DEFAULT_INT)
    s = weak_operand(value, node)
    if s is None:
        return None
    a, b = (s, node) if swap else (node, s)
    t = node.type                      # s of node's type (when it has one)
    found = None if t is None else _SELECT.get((c.type, t.pair))
    return made("select", (c, a, b), found) if found is not None else apply("select", c, a, b)


# the dtype a Python scalar standing alone takes (`D.scalar_dtype`), by its type
_SCALAR_DTYPES = {float: D.DEFAULT_FLOAT, int: D.DEFAULT_INT, bool: D.bool_}


def _where_scalars(c: Node, x: Operand, y: Operand) -> Any:
    """`where(c, x, y)` for a bool condition and two Python scalars of one kind
    (`where(m, 1.0, 0.0)`): both as that kind's default dtype, spread to c's shape (what
    `operands` and the broadcasts make of them). None for anything else."""
    kind = type(x)
    dtype = _SCALAR_DTYPES.get(kind)
    if dtype is None or type(y) is not kind:
        return None
    if kind is int and not (_I64_MIN <= x <= _I64_MAX and _I64_MIN <= y <= _I64_MAX):
        return None                     # past int64: the general way raises
    shape = c.shape
    a, b = typed_spread(x, dtype, shape), typed_spread(y, dtype, shape)
    t = a.type                         # (one type: both spread to c's shape as dtype)
    found = _SELECT.get((c.type, t.pair)) if t is b.type and t is not None else None
    return made("select", (c, a, b), found) if found is not None else apply("select", c, a, b)


_NEGATE_FAST = same_dtype_fast("negate", exclude=(D.bool_,))
_SIGN_FAST = same_dtype_fast("sign", exclude=(D.bool_,))
_ABS_FAST = frozenset(D.INTS + D.FLOATS)      # abs of a complex is real; of a uint, itself
_ISINF_FAST = _ABS_FAST & frozenset(D.FLOATS)     # compare takes every dtype


_NEGATE, _ABS, _SIGN = memo_of("negate"), memo_of("abs"), memo_of("sign")


def negative(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _NEGATE_FAST:      # recorded directly
        found = _NEGATE.get(x.type)
        return made("negate", (x,), found) if found is not None else apply("negate", x)
    (x,) = operands("negative", x)
    _check_numeric("negative", x)
    return apply("negate", x)


def positive(x: Operand) -> Node:
    (x,) = operands("positive", x)
    _check_numeric("positive", x)
    return x


def abs(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _ABS_FAST:         # recorded directly
        found = _ABS.get(x.type)
        return made("abs", (x,), found) if found is not None else apply("abs", x)
    (x,) = operands("abs", x)
    _check_numeric("abs", x)
    return x if x.dtype.kind == "uint" else apply("abs", x)


def sign(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _SIGN_FAST:        # recorded directly
        found = _SIGN.get(x.type)
        return made("sign", (x,), found) if found is not None else apply("sign", x)
    (x,) = operands("sign", x)
    _check_numeric("sign", x)
    return apply("sign", x)


def square(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _SQUARE_FAST:      # recorded directly
        t = x.type
        found = None if t is None else _MULTIPLY.get(t.pair)
        return made("multiply", (x, x), found) if found is not None else apply("multiply", x, x)
    (x,) = operands("square", x)
    _check_numeric("square", x)
    return apply("multiply", x, x)


def reciprocal(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _INT_OR_BOOL:
        out = _exact_float("divide", 1, x)      # `1 / i`: i as the default float
        if out is not None:
            return out
    return divide(1.0, x) if isinstance(x, Node) and x.dtype.is_float else divide(1, x)


def _floored(prim: str, name: str) -> Callable:
    """Python's // or % (NumPy's floor_divide or remainder): one primitive
    (compiler/primitives/elementwise.py), recorded the way the other binary ops are;
    bool and complex operands are refused under the user's name for the op."""
    fast = same_dtype_fast(prim)

    def general(a: Operand, b: Operand) -> Node:
        a, b = _scalar_operands(name, a, b)
        _check_numeric(name, a)
        if a.dtype.is_complex:
            raise TypeError(f"{name}: not defined for complex tensors ({a.dtype.name}); "
                            f"take the real part (la.real) or use a real dtype")
        return _made(prim, fast, a, b)
    fn = _recorder(prim, fast, general)
    fn.__name__ = name
    return fn


floor_divide = _floored("floor_divide", "floor_divide")
floor_divide.__doc__ = ("Rounds toward negative infinity, as Python's // and NumPy's "
                        "floor_divide (for floats: `1.0 // 0.1` is 9.0, not "
                        "floor(1.0 / 0.1) = 10.0).")
remainder = _floored("floor_mod", "remainder")
remainder.__doc__ = ("The sign of the divisor, as Python's % and NumPy's remainder (a zero "
                     "result takes the divisor's sign: `remainder(-4.0, 2.0)` is +0.0).")


def _logical(prim: str, name: str):
    def general(a: Operand, b: Operand) -> Node:
        a, b = (as_bool(a), as_bool(b))
        a, b = operands(name, a, b)
        return apply(prim, a, b)
    # bool operands (tensors, Python bools) recorded directly; the rest as truth values
    recorder = _recorder(prim, frozenset((D.bool_,)), general)
    with_true, with_false = _WITH_CONSTANT[prim]

    def fn(a: Operand, b: Operand) -> Node:
        a, b = _truth(a), _truth(b)
        if type(b) is bool and type(a) is Node:      # `x and True` is x's truth: no node
            return (with_true if b else with_false)(a)
        if type(a) is bool and type(b) is Node:
            return (with_true if a else with_false)(b)
        return recorder(a, b)
    fn.__name__ = name
    # lazyarray/lift.py: a NumPy scalar operand is taken as its truth value (exact: the
    # scalar holds its own dtype's value), as a Python scalar is here
    fn.truth_operands = True
    return fn


def _same(m: Node) -> Node:
    return m


def _all_true(m: Node) -> Node:
    return weak_scalar_like(True, m)


def _none_true(m: Node) -> Node:
    return weak_scalar_like(False, m)


def _negated(m: Node) -> Node:
    """`apply("not", m)`: the memo's entry looked up here."""
    found = _NOT.get(m.type)
    return made("not", (m,), found) if found is not None else apply("not", m)


_NOT = memo_of("not")


# a logical op of a bool node m and a constant truth value: (m op True, m op False), by
# Boolean algebra (the values `prim(m, broadcast(c))` has, with no node for the constant)
_WITH_CONSTANT = {"and": (_same, _none_true), "or": (_all_true, _same),
                  "xor": (_negated, _same)}


def _truth(x: Operand) -> Operand:
    """An operand of a logical op as its truth value: a bool node as it is; another node
    converted to bool (convert's rule: x != 0, NaN true, as NumPy's truth; one node where
    `not_equal(x, 0)` takes two); a Python scalar as the Python bool `bool(x)` (the same
    rule); anything else (an int past int64) as it is, for the general way to refuse."""
    kind = type(x)
    if kind is Node:
        if x.dtype is _BOOL:
            return x
        return _converted(x, _BOOL)
    if kind is float or kind is bool or kind is int and _I64_MIN <= x <= _I64_MAX:
        return bool(x)
    return x


def as_bool(x: Operand) -> Node:
    x = as_node(x)
    return x if x.dtype is D.bool_ else not_equal(x, 0)


logical_and = _logical("and", "logical_and")
logical_or = _logical("or", "logical_or")
logical_xor = _logical("xor", "logical_xor")


def logical_not(x: Operand) -> Node:
    if type(x) is Node:                  # recorded directly: not of the truth value
        return _negated(_truth(x))
    return _negated(as_bool(x))


def _bitwise(prim: str, name: str):
    def general(a: Operand, b: Operand) -> Node:
        a, b = operands(name, a, b)
        if a.dtype.is_float:
            raise TypeError(f"{name}: needs integer or bool operands, got {a.dtype.name}")
        return apply(prim, a, b)
    fn = _recorder(prim, same_dtype_fast(prim), general)
    fn.__name__ = name
    return fn


bitwise_and = _bitwise("and", "bitwise_and")
bitwise_or = _bitwise("or", "bitwise_or")
bitwise_xor = _bitwise("xor", "bitwise_xor")


def _shift(name: str, left: bool):
    def general(a: Operand, b: Operand) -> Node:
        a, b = operands(name, a, b)
        if not a.dtype.is_int:
            raise TypeError(f"{name}: needs integer operands, got {a.dtype.name}")
        if left:
            return apply("shift_left", a, b)
        return apply("shift_right_arithmetic" if a.dtype.kind == "int" else "shift_right_logical",
                     a, b)
    general.__name__ = name
    if left:
        fn = _recorder("shift_left", same_dtype_fast("shift_left"), general)
        fn.__name__ = name
        return fn
    # the primitive follows the operands' dtype: a recorder for each kind, the one of
    # the tensor operand tried (anything mixed goes to `general` through either)
    signed = _recorder("shift_right_arithmetic", _SIGNED_INTS, general)
    unsigned = _recorder("shift_right_logical", _UNSIGNED_INTS, general)

    def fn(a: Operand, b: Operand) -> Node:
        node = a if type(a) is Node else b
        if type(node) is Node and node.dtype in _UNSIGNED_INTS:
            return unsigned(a, b)
        return signed(a, b)
    fn.__name__ = name
    return fn


_SIGNED_INTS = frozenset(d for d in D.INTEGERS if d.kind == "int")
_UNSIGNED_INTS = frozenset(d for d in D.INTEGERS if d.kind == "uint")
bitwise_left_shift = _shift("bitwise_left_shift", True)
bitwise_right_shift = _shift("bitwise_right_shift", False)


_NOT_FAST = same_dtype_fast("not")


def bitwise_invert(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _NOT_FAST:         # recorded directly
        return _negated(x)
    (x,) = operands("bitwise_invert", x)
    if x.dtype.is_float:
        raise TypeError(f"bitwise_invert: needs integer or bool operands, got {x.dtype.name}")
    return apply("not", x)


def isnan(x: Operand) -> Node:
    x = as_node(x)
    return not_equal(x, x) if x.dtype.is_float else _all_false(x)


_EQ = {"direction": "EQ"}
_EQUAL = memo_of("compare", **_EQ)


def isinf(x: Operand) -> Node:
    if type(x) is Node and x.dtype in _ISINF_FAST:      # |x| == inf, its nodes written out
        found = _ABS.get(x.type)
        y = made("abs", (x,), found) if found is not None else apply("abs", x)
        s = spread_scalar(math.inf, x.dtype, x.shape, y.type)
        return beside(_EQUAL, "compare", y, s, y, s, _EQ)
    x = as_node(x)
    return equal(abs(x), math.inf) if x.dtype.is_float else _all_false(x)


def isfinite(x: Operand) -> Node:
    x = as_node(x)
    return apply("is_finite", x) if x.dtype.is_float else logical_not(_all_false(x))


def _all_false(x: Node) -> Node:
    return not_equal(x, x) if x.dtype is not D.bool_ else logical_and(x, logical_not(x))


def signbit(x: Operand) -> Node:
    if type(x) is Node:
        ints = _BITS.get(x.dtype)
        if ints is not None:            # a real float: its bits, as a signed int, < 0
            found = _BITCASTS[ints].get(x.type)
            return less(made("bitcast_convert", (x,), found) if found is not None else
                        apply("bitcast_convert", x, dtype=ints), 0)
    x = as_node(x)
    if not x.dtype.is_float:
        return less(x, 0)
    ints = {16: D.int16, 32: D.int32, 64: D.int64}[x.dtype.bits]
    return less(apply("bitcast_convert", x, dtype=ints), 0)


_BITS = {D.float16: D.int16, D.bfloat16: D.int16, D.float32: D.int32, D.float64: D.int64}
_BITCASTS = {d: memo_of("bitcast_convert", dtype=d) for d in set(_BITS.values())}


def _float_binary(prim: str, name: str, doc: str) -> Callable:
    """A float function of two operands that is one primitive (compiler/primitives/
    elementwise.py), recorded as atan2 is: float operands of one dtype and shape (or one
    and a Python scalar it takes, an integer tensor and a Python float) directly; the rest
    through `_float_operands` (integers and bools as the default float, broadcasting)
    and `apply`, whose rule refuses complex operands under the op's name."""
    fast = same_dtype_fast(prim)

    def general(a: Operand, b: Operand) -> Node:
        # integer or bool operands as the default float, the common forms the short
        # ways (`_exact_float`, as true division and atan2 take them)
        out = _exact_float(prim, a, b)
        if out is not None:
            return out
        a, b = _float_operands(name, a, b)
        return _made(prim, fast, a, b)
    fn = _recorder(prim, fast, general)
    fn.__name__ = name
    fn.__doc__ = doc
    # the operators' direct forms take `hypot(i, 2)` and `hypot(i, np.int32(2))` as
    # `_exact_float` does (lazyarray/lift.py direct_method)
    fn.exact_ints = True
    return fn


copysign = _float_binary("copysign", "copysign", "|a| with the sign bit of b (exact).")
nextafter = _float_binary("nextafter", "nextafter",
                          "The next representable value after a toward b, in a's dtype "
                          "(float16 and bfloat16 too); b where they are equal, NaN where "
                          "either is.")
hypot = _float_binary("hypot", "hypot", "sqrt(a**2 + b**2) without undue overflow; +inf "
                                        "where either is infinite (array API).")
logaddexp = _float_binary("logaddexp", "logaddexp", "log(exp(a) + exp(b)), as NumPy.")
logaddexp2 = _float_binary("logaddexp2", "logaddexp2", "log2(2**a + 2**b), as NumPy.")


_CLIP_FAST = frozenset(D.INTEGERS + D.FLOATS)
_INT_LIMITS = {d: (int(np.iinfo(d.np).min), int(np.iinfo(d.np).max)) for d in D.INTEGERS}


def _extreme(dtype: D.DType, high: bool) -> Node:
    """The shared constant a missing bound stands for: -inf/+inf, or an integer dtype's
    range end (clamp with it is x itself, NaN kept)."""
    if dtype.is_float:
        return kept_constant(math.inf if high else -math.inf, dtype)
    return kept_constant(_INT_LIMITS[dtype][1 if high else 0], dtype)


_EXTREMES = {d: (_extreme(d, False), _extreme(d, True)) for d in _CLIP_FAST}
_KEPT_SPREAD: dict = {}     # (shared constant node id, shape) -> its broadcast to shape


def _spread_kept(c: Node, shape: tuple) -> Node:
    """A shared constant (a kept 0, 1, -1 or a missing bound's extreme: nodes that live
    for good, so their ids stay theirs) broadcast to `shape`, made once per shape: a
    clip with such bounds records one node. The node is a constant's broadcast, the
    same in every graph (bounded: cleared past 512 shapes)."""
    key = (id(c), shape)
    n = _KEPT_SPREAD.get(key)
    if n is None:
        if len(_KEPT_SPREAD) >= 512:
            _KEPT_SPREAD.clear()
        n = _KEPT_SPREAD[key] = apply("broadcast_in_dim", c, shape=shape, broadcast_dimensions=())
    return n


def _fast_bound(bound: Operand, x: Node, high: int) -> Any:
    """A bound as an operand of `clamp` beside x (its dtype and shape), for the cases
    that need no promotion or check: None, a Python int or float x's dtype takes
    (weakly, as `weak_scalar_like` makes it), a node of x's dtype and shape. None for
    anything else (the general way decides)."""
    shape = x.shape
    if bound is None:
        c = _EXTREMES[x.dtype][high]
        return _spread_kept(c, shape) if shape else c
    kind = type(bound)
    if kind is float or kind is int:
        dtype = x.dtype
        if kind is float:
            if dtype not in _FLOATS:          # what converting the bound to x's dtype gives
                bound, kind = _int_bound(bound, dtype), int
        elif dtype not in _FLOATS and not int_fits(bound, dtype):
            return None                       # out of x's range: the general way raises
        if bound in KEPT_SET and (bound != 0 or math.copysign(1.0, bound) > 0):
            return kept_spread(kind, bound, dtype, shape)
        return spread_scalar(bound, dtype, shape, x.type)
    if kind is Node and bound.dtype is x.dtype and bound.shape == shape:
        return bound
    return None


_FLOATS = frozenset(D.FLOATS)
_NUMBERS = frozenset((int, float))


def _float_as_int(value: float, dtype: D.DType) -> int:
    """A float bound of an integer x as `convert` makes it: truncated toward zero,
    saturated at the dtype's range, NaN as 0 (so clip(i, 1.5, 2.5) is what NumPy's
    float result gives converted back to i's dtype: a truncation is monotone)."""
    flo, fhi = _FLOAT_LIMITS[dtype]       # float against float: no int comparison
    if value != value:
        return 0
    if value <= flo:
        out = _INT_LIMITS[dtype][0]
    elif value >= fhi:
        out = _INT_LIMITS[dtype][1]
    else:
        out = int(value)
    if len(_AS_INT) >= 1024:
        _AS_INT.clear()
    _AS_INT[value, dtype] = out        # -0.0 and 0.0 share a key: both are 0
    return out


_AS_INT: dict = {}      # (float, integer dtype) -> `_float_as_int` of it (clip's bounds)


def _int_bound(value: float, dtype: D.DType) -> int:
    """`_float_as_int(value, dtype)`, remembered (clip's bounds recur at every step)."""
    found = _AS_INT.get((value, dtype))
    return _float_as_int(value, dtype) if found is None else found


# the range ends as floats: the low end is exact; the high end 2**k - 1 rounds to 2**k
# past 53 bits, and a float >= 2**k is past the range as a float >= 2**k - 1 is (no float
# lies between), so `value >= high` decides as the exact int would
_FLOAT_LIMITS = {d: (float(lo), float(hi)) for d, (lo, hi) in _INT_LIMITS.items()}
def _general_bound(bound: Operand, x: Node, high: int) -> Node:
    """Any bound, as x's dtype (array API: the result keeps x's dtype): a missing one as
    the dtype's extreme, a node converted, a Python float beside an integer x truncated
    and saturated as `convert` would (`_float_as_int`), any other scalar as x's dtype
    (an int out of its range raises)."""
    if bound is None:
        return _EXTREMES[x.dtype][high]
    if isinstance(bound, Node):
        return convert(bound, x.dtype)
    if isinstance(bound, float) and x.dtype.is_int:
        bound = _float_as_int(float(bound), x.dtype)
    return as_node(bound, x.dtype)


_CLAMP = memo_of("clamp")


def _clamped(lo: Node, x: Node, hi: Node) -> Node:
    """`apply("clamp", lo, x, hi)`: the memo's entry looked up here."""
    t = x.type                         # (the memo's key of an operand and a bound of one type)
    found = _CLAMP.get((lo.type, t.pair)) if t is hi.type and t is not None else None
    return made("clamp", (lo, x, hi), found) if found is not None else apply("clamp", lo, x, hi)


def clip(x: Operand, min: Operand = None, max: Operand = None) -> Node:
    """One `clamp` node: x where it lies between the bounds (a tie included, for the value
    and the gradient, as torch.clamp), NaN if any operand is, max where min > max (NumPy,
    PyTorch). Tensor bounds broadcast with x; the result keeps x's dtype (array API)."""
    if type(x) is Node and x.dtype in _CLIP_FAST:
        if min is None and max is None:
            return x
        dtype = x.dtype
        kmin, kmax = type(min), type(max)
        if kmin in _NUMBERS and kmax in _NUMBERS:
            shape = x.shape
            lo = None
            if dtype in _FLOATS:
                if min not in KEPT_SET and max not in KEPT_SET:
                    # clip(x, -1.5, 2.5): two runtime scalars, as `_fast_bound` makes them
                    t = x.type
                    lo = spread_scalar(min, dtype, shape, t)
                    hi = spread_scalar(max, dtype, shape, t)
            else:
                # clip(i, -1.5, 2.5): each bound as x's dtype (a float truncated and
                # saturated: `_float_as_int`), as `_fast_bound` makes it
                # (a converted float is in x's range)
                lo = _int_bound(min, dtype) if kmin is float else min
                hi = _int_bound(max, dtype) if kmax is float else max
                if (kmin is float or int_fits(lo, dtype)) and (kmax is float or int_fits(hi, dtype)):
                    lo = kept_spread(int, lo, dtype, shape) if lo in KEPT_SET else \
                        spread_scalar(lo, dtype, shape, x.type)
                    hi = kept_spread(int, hi, dtype, shape) if hi in KEPT_SET else \
                        spread_scalar(hi, dtype, shape, x.type)
                else:
                    lo = None
            if lo is not None:             # the bounds, of x's type: the memo's entry
                t = x.type                 # (`_clamped` written out)
                found = _CLAMP.get((lo.type, t.pair)) if t is hi.type and t is not None \
                    else None
                return made("clamp", (lo, x, hi), found) if found is not None else \
                    apply("clamp", lo, x, hi)
        if (min is None or type(min) in _BOUND_KINDS and min in KEPT_SET and
                not _negative_zero(min)) and \
                (max is None or type(max) in _BOUND_KINDS and max in KEPT_SET and
                 not _negative_zero(max)):
            # clip(x, 0, 1), clip(i, 0, None): shared bounds, looked up at once
            key = (type(min), min, type(max), max, dtype, x.shape)
            pair = _SHARED_BOUNDS.get(key)
            if pair is not None:
                lo, hi = pair
                t = x.type                 # (`_clamped` written out: the bounds are of x's type)
                found = _CLAMP.get((lo.type, t.pair)) if t is hi.type and t is not None \
                    else None
                return made("clamp", (lo, x, hi), found) if found is not None else \
                    apply("clamp", lo, x, hi)
        else:
            key = None
        lo = _fast_bound(min, x, 0)
        if lo is not None:
            hi = _fast_bound(max, x, 1)
            if hi is not None:
                if key is not None and _shared(lo) and _shared(hi):
                    if len(_SHARED_BOUNDS) >= 1024:
                        _SHARED_BOUNDS.clear()
                    _SHARED_BOUNDS[key] = (lo, hi)
                return _clamped(lo, x, hi)
    x = as_node(x)
    _check_numeric("clip", x)
    if min is None and max is None:
        return x
    if x.dtype.is_complex:
        raise TypeError(f"clip: complex numbers are not ordered ({x.dtype.name}); clip the "
                        f"real part (la.real) or the magnitude (la.abs)")
    lo, hi = _general_bound(min, x, 0), _general_bound(max, x, 1)
    shape = broadcast_shapes("clip", x.shape, lo.shape, hi.shape)
    lo, x, hi = broadcast_to(lo, shape), broadcast_to(x, shape), broadcast_to(hi, shape)
    return apply("clamp", lo, x, hi)


# (kind, min, kind, max, dtype, shape) -> clip's bounds when both are shared nodes (a missing
# bound's extreme, a kept constant's broadcast: `kept_spread`), which a tensor never holds
# itself: clip(x, 0, 1) looks them up at once (bounded: cleared past 1024 entries). -0.0
# (== 0.0, a runtime scalar) never looks up.
_SHARED_BOUNDS: dict = {}
_BOUND_KINDS = frozenset((bool, int, float))


def _negative_zero(v: Any) -> bool:
    return v == 0 and type(v) is float and math.copysign(1.0, v) < 0.0


def _shared(bound: Node) -> bool:
    """Whether a bound from `_fast_bound` is a shared node (a constant or its broadcast),
    not a runtime scalar made for this call."""
    if PRIMITIVES[bound.op].repeats:
        bound = bound.operands[0]
    return bound.op == "constant"


def astype(x: Operand, dtype: Any, copy: bool = True) -> Node:
    """`copy` is accepted for the array API; lazy values are never shared, so it changes
    nothing."""
    if type(x) is Node and type(dtype) is D.DType:      # the common case, recorded directly
        return x if x.dtype is dtype else _converted(x, dtype)
    return convert(as_node(x), D.to_dtype(dtype))


def real(x: Operand) -> Node:
    """The real part of a complex x (a real x is its own)."""
    x = as_node(x)
    _check_numeric("real", x)
    return apply("real", x) if x.dtype.is_complex else x


def imag(x: Operand) -> Node:
    """The imaginary part of a complex x (zeros of a real x's dtype and shape)."""
    if type(x) is Node and x.dtype in _REAL_NUMERIC:     # 0 of x's dtype, spread
        return weak_scalar_like(0, x)
    x = as_node(x)
    _check_numeric("imag", x)
    if x.dtype.is_complex:
        return apply("imag", x)
    return broadcast_to(scalar(0, x.dtype), x.shape)


_REAL_NUMERIC = frozenset(D.INTEGERS + D.FLOATS)


def conj(x: Operand) -> Node:
    """The complex conjugate (a real x is its own)."""
    x = as_node(x)
    _check_numeric("conj", x)
    return apply("conj", x) if x.dtype.is_complex else x


def relu(x: Operand) -> Node:
    return maximum(x, 0)


_real_tan = tan


def tan(x: Operand) -> Node:
    """tan; a complex x as sin(x) / cos(x) (the primitive is real-only)."""
    node = as_node(x)
    if node.dtype.is_complex:
        return divide(sin(node), cos(node))
    return _real_tan(node)


def angle(x: Operand) -> Node:
    """The argument of x in radians: atan2(imag, real) (NumPy's angle; a real x gives 0
    or pi, in the default float for integers and bools)."""
    x = as_node(x)
    if x.dtype.is_complex:
        return atan2(imag(x), real(x))
    if not x.dtype.is_float:
        x = convert(x, D.DEFAULT_FLOAT)
    return atan2(weak_scalar_like(0, x), x)


__all__ = [n for n, v in list(globals().items())
           if callable(v) and not n.startswith("_") and getattr(v, "__module__", None) == __name__
           and n not in ("as_bool",)]
