"""Division by a row's value in a ROW kernel, without a divide per element.

Softmax's `e / sum(e)` and layer norm's `d / sqrt(var + eps)` divide every element of a
row by one value of that row. A vector divide costs several cycles a vector on x86 (the
rest of such a pass costs about one), so the row's last pass computes each quotient from
the row's reciprocal y = 1/d instead (Markstein's correction, as in IA-64's division):

    q0 = a * y;   r = a - q0 * d   (exact, one fma);   q = q0 + r * y   (one fma)

q is a/d correctly rounded, the same value as the divide, when y is the rounded
reciprocal and nothing overflows or underflows; so the fast pass runs only for rows whose
divisors are safely inside the normal range (checked once per row); other rows run the
pass with divides. A quotient in the subnormal range may differ from the divide's by one
unit there (the remainder is then rounded too). Where a is infinite or NaN, or q0
overflows, the correction is NaN and q0 is the quotient. It needs a fused multiply-add
(llvm.fma would be a libm call per element without one).
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..primitive import PRIMITIVES
from .llvm_target import has_feature
from .llvm_types import F32, Value

# |d| within [2**-LIMIT, 2**LIMIT] of the compute type: 1/d is a normal float, and the
# products and remainders of a quotient of any normal a stay finite or overflow only
# where the quotient itself does
_LIMIT = {F32: 60, ir.DoubleType(): 500}


def row_divisions(module, members: set, wide: set) -> dict:
    """Divide members of the row space whose divisor is a row value broadcast over the
    row: position -> the row value's position."""
    if not has_feature("fma"):
        return {}
    ins = module.instructions
    out = {}
    for m in members:
        i = ins[m]
        if i.op != "divide" or not i.dtype.is_float or i.dtype.is_complex:
            continue
        divisor = ins[i.operands[1]]
        if i.operands[1] in wide and PRIMITIVES[divisor.op].repeats:
            out[m] = divisor.operands[0]
    return out


def safe(e, divisor: Value) -> ir.Value:
    """Whether a divisor is in the range where the fast quotient is exact."""
    b, d = e.b, divisor.ir
    limit = _LIMIT[d.type]
    mag = e.math_table.intrinsic(e, "llvm.fabs", [d])
    big = b.fcmp_ordered("<=", mag, ir.Constant(d.type, 2.0 ** limit))
    small = b.fcmp_ordered(">=", mag, ir.Constant(d.type, 2.0 ** -limit))
    return b.and_(big, small)


def reciprocal(e, divisor: Value) -> ir.Value:
    return e.b.fdiv(ir.Constant(divisor.ir.type, 1.0), divisor.ir)


def quotient(e, a: Value, divisor: Value, recip: ir.Value) -> Value:
    """a / divisor, correctly rounded, from the divisor's reciprocal (see the module)."""
    b = e.b
    ty = a.ir.type
    fma = e.llmod.declare_intrinsic("llvm.fma." + ("f32" if ty == F32 else "f64"), (),
                                    ir.FunctionType(ty, [ty, ty, ty]))
    q0 = b.fmul(a.ir, recip)
    # the remainder negated, q0 * d - a, so that a zero a keeps its sign through the sum
    # below ((+0) + (-0) would give +0): -0.0 / d is -0.0
    minus_r = b.call(fma, [q0, divisor.ir, b.fneg(a.ir)])
    q = b.call(fma, [b.fneg(minus_r), recip, q0])
    return Value(b.select(b.fcmp_unordered("uno", q, q), q0, q), a.dtype)

