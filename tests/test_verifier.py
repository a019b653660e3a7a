"""The verifier: well-formed modules pass, each kind of broken module is caught with the
offending instruction's text in the message."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.compiler.graph.trace import capture
from lazyarray.compiler.hlo.verifier import verify

from primitive_cases import build_module, case_dtype_pairs, pair_id

PAIRS = case_dtype_pairs()


@pytest.mark.parametrize("pair", PAIRS, ids=[pair_id(p) for p in PAIRS])
def test_every_case_module_verifies(pair):
    case, dtype = pair
    assert verify(build_module(case, dtype)) is None


def test_api_module_verifies():
    x = la.asarray(np.ones((3, 4), np.float32))
    y = la.softmax(x, axis=-1) if hasattr(la, "softmax") else la.exp(x) / la.exp(x).sum()
    verify(capture([y._node, (x @ x.T).sum(axis=0)._node]).module("api"))


def P(number, shape=(2, 3), dtype=D.float32):
    return Instruction("parameter", (), shape, dtype, {"number": number})


def I(op, operands, shape=(2, 3), dtype=D.float32, **attrs):
    return Instruction(op, operands, shape, dtype, attrs)


def C(values, dtype=D.float32, shape=None):
    lit = Literal(np.asarray(values))
    return Instruction("constant", (), lit.array.shape if shape is None else shape, dtype,
                       {"value": lit})


def good():
    return [P(0), P(1), I("add", (0, 1))]


BROKEN = [
    ("forward operand", [P(0), I("negate", (2,)), P(1)], (1,), "earlier instruction", "%negate.1"),
    ("self operand", [P(0), I("negate", (1,))], (1,), "earlier instruction", "%negate.1"),
    ("negative operand", [P(0), I("negate", (-1,))], (1,), "earlier instruction", "%negate.1"),
    ("unknown op", [P(0), I("frobnicate", (0,))], (1,), "unknown op 'frobnicate'", "frobnicate"),
    ("wrong shape", [P(0), I("negate", (0,), (3, 2))], (1,), "declared f32[3,2]", "%negate.1"),
    ("wrong dtype", [P(0), I("negate", (0,), dtype=D.float64)], (1,), "declared f64[2,3]",
     "%negate.1"),
    ("operands disagree", [P(0), P(1, (3,)), I("add", (0, 1))], (2,), "equal shapes", "%add.2"),
    ("operand dtypes", [P(0), P(1, dtype=D.int32), I("add", (0, 1))], (2,), "same dtype", "%add.2"),
    ("missing attribute", [P(0), I("reduce", (0,), (2,), axes=(1,))], (1,), "missing: ['kind']",
     "%reduce.1"),
    ("unknown attribute", [P(0), I("negate", (0,), axis=0)], (1,), "unknown: ['axis']",
     "%negate.1"),
    ("list attribute", [P(0), I("reduce", (0,), (2,), axes=[1], kind="sum")], (1,),
     "list is not a valid attribute", "%reduce.1"),
    ("bad attribute value", [P(0), I("reduce", (0,), (2,), axes=(1,), kind="mean")], (1,),
     "kind must be one of", "%reduce.1"),
    ("duplicate parameter", [P(0), P(0), I("add", (0, 1))], (2,), "number 0 appears 2 times",
     "%p.1"),
    ("parameter gap", [P(0), P(2), I("add", (0, 1))], (2,), "0..1", "%p.1"),
    ("parameter number type", [I("parameter", (), number="0")], (0,), "number must be an int",
     "%p.0"),
    ("parameter operands", [P(0), I("parameter", (0,), number=1)], (1,), "takes no operands",
     "%p.1"),
    ("constant shape", [C([1.0, 2.0], D.float32, (3,))], (0,), "literal of shape (2,)", "%c.0"),
    ("constant dtype", [C(np.array([1.0, 2.0], np.float64), D.float32)], (0,), "float64", "%c.0"),
    ("constant not a literal", [I("constant", (), (2,), value=(1.0, 2.0))], (0,),
     "must be a Literal", "%c.0"),
    ("constant ndarray value", [I("constant", (), (2,), value=np.ones(2))], (0,),
     "ndarray is not a valid attribute", "%c.0"),
    ("output out of range", [P(0)], (1,), "output 1", "outputs (1,)"),
    ("negative output", [P(0)], (-1,), "output -1", "outputs (-1,)"),
    ("bad shape", [I("parameter", (), (2, -1), number=0)], (0,), "non-negative", "%p.0"),
    ("not a dtype", [I("parameter", (), (2,), "f32", number=0)], (0,), "must be a DType", "%p.0"),
]


@pytest.mark.parametrize("instructions,outputs,why,where", [b[1:] for b in BROKEN],
                         ids=[b[0] for b in BROKEN])
def test_broken_module_is_caught(instructions, outputs, why, where):
    with pytest.raises(ValueError) as info:
        verify(Module("broken", instructions, outputs))
    msg = str(info.value)
    assert why in msg
    assert where in msg


def test_good_module_passes():
    assert verify(Module("good", good(), (2, 0))) is None


def test_constant_and_tuple_type_pass():
    m = Module("c", [C(np.array([[1, 2]], np.int16), D.int16), P(0, (3,), D.int32)], (0, 1))
    verify(m)
