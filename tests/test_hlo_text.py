"""The HLO text form: printer and parser round-trip every module exactly, malformed text
is rejected with its line number, and the dumps and `la.debug.ir` use it."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.compiler.hlo.parser import parse_attribute, parse_module
from lazyarray.compiler.hlo.printer import attr_text, print_module
from lazyarray.compiler.graph.trace import capture
from lazyarray.compiler.hlo.verifier import verify

from primitive_cases import CASES_BY_ID, build_module, case_dtype_pairs, pair_id

PAIRS = case_dtype_pairs()


def assert_round_trip(module: Module) -> Module:
    text = print_module(module)
    back = parse_module(text)
    assert back == module
    assert back.name == module.name
    assert print_module(back) == text
    return back


@pytest.mark.parametrize("pair", PAIRS, ids=[pair_id(p) for p in PAIRS])
def test_round_trip_every_case(pair):
    case, dtype = pair
    assert_round_trip(build_module(case, dtype, seed=1))


def test_text_looks_like_xla():
    x = Instruction("parameter", (), (4, 4), D.float32, {"number": 0})
    one = Instruction("constant", (), (), D.float32, {"value": Literal(np.float32(1))})
    b = Instruction("broadcast_in_dim", (1,), (4, 4), D.float32,
                    {"shape": (4, 4), "broadcast_dimensions": ()})
    add = Instruction("add", (0, 2), (4, 4), D.float32, {})
    red = Instruction("reduce", (3,), (4,), D.float32, {"axes": (1,), "kind": "sum"})
    text = print_module(Module("cpu_3", [x, one, b, add, red], (4, 3)))
    assert text == (
        "HloModule cpu_3\n"
        "\n"
        "ENTRY main {\n"
        "  %p.0 = f32[4,4] parameter(), number=0\n"
        "  %c.1 = f32[] constant(1.0)\n"
        "  %broadcast_in_dim.2 = f32[4,4] broadcast_in_dim(f32[] %c.1), shape={4,4}, "
        "broadcast_dimensions={}\n"
        "  %add.3 = f32[4,4] add(f32[4,4] %p.0, f32[4,4] %broadcast_in_dim.2)\n"
        "  %reduce.4 = f32[4] reduce(f32[4,4] %add.3), axes={1}, kind=sum\n"
        "  ROOT %tuple.5 = (f32[4], f32[4,4]) tuple(%reduce.4, %add.3)\n"
        "}\n")


def test_module_str_is_the_printer():
    m = build_module(CASES_BY_ID["reduce_sum_rows"], D.float32)
    assert str(m) == print_module(m)


def test_parsed_attributes_have_python_types():
    m = parse_module(str(build_module(CASES_BY_ID["argsort_cols_descending"], D.float32)))
    attrs = m.instructions[-1].attrs
    assert attrs == {"dimension": 0, "descending": True, "index_dtype": D.int32}
    assert type(attrs["dimension"]) is int and attrs["descending"] is True
    assert attrs["index_dtype"] is D.int32
    m = parse_module(str(build_module(CASES_BY_ID["slice_strided"], D.float32)))
    assert m.instructions[-1].attrs["strides"] == (2, 3)
    assert type(m.instructions[-1].attrs["strides"]) is tuple
    m = parse_module(str(build_module(CASES_BY_ID["reduce_max_all"], D.float32)))
    assert m.instructions[-1].attrs == {"axes": (0, 1), "kind": "max"}


@pytest.mark.parametrize("value", [0, -7, 2**63, (), (1,), (1, (2, -3)), True, False, "sum",
                                   "f32", "true", "nan", "two words", 'q"uote', "", None,
                                   1.5, -0.0, float("inf"), float("-inf"), 1e-300, D.bfloat16,
                                   Literal(np.array([[1, 2]], np.int16))])
def test_attribute_values_round_trip(value):
    back = parse_attribute(attr_text(value))
    assert type(back) is type(value)
    if isinstance(value, float):
        assert np.float64(back).tobytes() == np.float64(value).tobytes()
    else:
        assert back == value


@pytest.mark.parametrize("dtype", D.FLOATS, ids=lambda d: d.short)
def test_float_constants_are_bit_exact(dtype):
    """Every bit pattern comes back: NaNs with payloads and sign, -0.0, subnormals."""
    bits = np.dtype(f"u{dtype.itemsize}")
    rng = np.random.default_rng(0)
    raw = rng.integers(0, np.iinfo(bits).max, 200, dtype=bits, endpoint=True)
    top = np.array(1, bits) << np.array(8 * dtype.itemsize - 1, bits)
    extra = np.array([0, top, 1, top | 1, np.iinfo(bits).max], bits)   # 0, -0, subnormals, -NaN
    values = np.concatenate([raw, extra]).view(dtype.np).reshape(5, 41)
    ins = Instruction("constant", (), values.shape, dtype, {"value": Literal(values)})
    back = assert_round_trip(Module("bits", [ins], (0,)))
    assert back.instructions[0].attrs["value"].array.tobytes() == values.tobytes()


def test_integer_extremes_round_trip():
    for dtype in D.INTEGERS:
        info = np.iinfo(dtype.np)
        values = np.array([info.min, info.max, 0, 1], dtype.np)
        ins = Instruction("constant", (), (4,), dtype, {"value": Literal(values)})
        assert_round_trip(Module("ints", [ins], (0,)))


def test_empty_and_nested_literals():
    for shape in [(0,), (2, 0), (0, 3), (2, 1, 3), ()]:
        values = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        ins = Instruction("constant", (), shape, D.float32, {"value": Literal(values)})
        assert_round_trip(Module("lit", [ins], (0,)))


def test_module_without_outputs_and_odd_names():
    p = Instruction("parameter", (), (2,), D.int8, {"number": 0})
    assert_round_trip(Module("empty", [p], ()))
    assert_round_trip(Module("a name with spaces", [p], (0, 0)))


def test_parser_accepts_hand_written_names_and_comments():
    text = """
        HloModule hand
        // a comment line
        ENTRY main {
          %x = f32[3] parameter(), number=0
          %y = f32[3] exponential(%x)
          ROOT %out = (f32[3]) tuple(%y)
        }
    """
    m = parse_module(text)
    assert [i.op for i in m.instructions] == ["parameter", "exponential"]
    assert m.outputs == (1,)


def test_parser_infers_left_out_types():
    text = """HloModule hand
        ENTRY main {
          %x = f32[3,4] parameter(), number=0
          %y = exponential(%x)
          %r = reduce(%y), axes={1}, kind=sum
          ROOT %out = tuple(%r, %y)
        }"""
    m = parse_module(text)
    assert [(i.op, i.shape, i.dtype) for i in m.instructions] == [
        ("parameter", (3, 4), D.float32), ("exponential", (3, 4), D.float32),
        ("reduce", (3,), D.float32)]
    assert m.outputs == (2, 1)
    assert "%reduce.2 = f32[3] reduce(f32[3,4] %exponential.1), axes={1}, kind=sum" in str(m)
    with pytest.raises(ValueError, match="line 3: a parameter needs its type"):
        parse_module("HloModule h\nENTRY main {\n%x = parameter(), number=0\nROOT %t = tuple(%x)\n}")


# ---- modules made through the public API ----------------------------------------------

def _api_expressions():
    x = la.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    i = la.asarray(np.array([2, 0, 1]))
    return [
        [(3 * x ** 2 + 1).mean(axis=1)],
        [x @ x.T, la.argmax(x, axis=0)],
        [la.where(x > 2.5, x, -x).sum(), (i << 2) ^ 5],
        [x[1:, ::2].reshape(-1), la.concat([x, x], axis=0)],
        [x.astype(la.bfloat16) * 0.5, la.exp(x.astype(la.float64))],
    ]


@pytest.mark.parametrize("k", range(5))
def test_round_trip_api_modules(k):
    tensors = _api_expressions()[k]
    text = la.debug.ir(tensors, "hlo")
    module = capture([t._node for t in tensors]).module("ir")
    assert text == str(module)
    verify(module)
    back = assert_round_trip(module)
    verify(back)


def test_dump_writes_parsable_text(tmp_path, fresh_metrics):
    x = la.asarray(np.arange(6, dtype=np.float32).reshape(2, 3), device="interpreter")
    y = la.tanh(x * 2 + 0.25).sum(axis=0)
    expected = capture([y._node]).module("expected")
    with la.config.override(dump=str(tmp_path)):
        y.numpy()
    files = sorted(os.listdir(tmp_path))
    hlo = [f for f in files if f.endswith(".hlo")]
    assert hlo, f"no .hlo file written: {files}"
    first = min(hlo, key=lambda name: (len(name), name))     # the module as traced
    with open(tmp_path / first) as f:
        text = f.read()
    module = parse_module(text)
    verify(module)
    assert [(i.op, i.shape) for i in module.instructions] == \
        [(i.op, i.shape) for i in expected.instructions]
    # the module's text, after the comment lines recording its runtime scalars' values
    comments = [line for line in text.splitlines(True) if line.startswith("//")]
    assert comments == ["// scalar number=0 value=0.25\n", "// scalar number=1 value=2\n"]
    assert print_module(module) == text[sum(map(len, comments)):]


# ---- malformed text -------------------------------------------------------------------

GOOD = """HloModule m

ENTRY main {
  %p.0 = f32[2,3] parameter(), number=0
  %negate.1 = f32[2,3] negate(f32[2,3] %p.0)
  ROOT %tuple.2 = (f32[2,3]) tuple(%negate.1)
}
"""


def _bad(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


MALFORMED = [
    ("empty", "", 1, "HloModule"),
    ("no header", GOOD.replace("HloModule m", "Module m"), 1, "HloModule"),
    ("no entry", _bad("ENTRY main {", "main {"), 3, "ENTRY"),
    ("no closing brace", GOOD.rstrip().rstrip("}"), 6, "'}'"),
    ("no root", _bad("  ROOT %tuple.2 = (f32[2,3]) tuple(%negate.1)\n", ""), 5, "ROOT"),
    ("unknown op", _bad("negate(f32", "negtae(f32"), 5, "unknown op 'negtae'"),
    ("unknown dtype", _bad("%p.0 = f32", "%p.0 = f33"), 4, "unknown dtype 'f33'"),
    ("undefined operand", _bad("%p.0)", "%q.0)"), 5, "%q.0 is not defined"),
    ("operand type", _bad("negate(f32[2,3]", "negate(f32[3,2]"), 5, "written as f32[3,2]"),
    ("declared type", _bad("%negate.1 = f32[2,3]", "%negate.1 = f64[2,3]"), 5, "declared f64[2,3]"),
    ("bad shape text", _bad("f32[2,3] parameter", "f32[2,,3] parameter"), 4, "dimension size"),
    ("stray token", _bad("number=0", "number=0 )"), 4, "unexpected ')'"),
    ("missing number", _bad(", number=0", ""), 4, "number"),
    ("duplicate name", _bad("%negate.1 = f32[2,3]", "%p.0 = f32[2,3]"), 5, "defined twice"),
    ("bad character", _bad("number=0", "number=0 @"), 4, "'@'"),
    ("root type", _bad("(f32[2,3]) tuple", "(f32[2,2]) tuple"), 6, "ROOT type"),
    ("unknown attribute", _bad("%p.0)", "%p.0), axis=1"), 5, "unknown: ['axis']"),
    ("two roots", _bad("  %negate.1", "  ROOT %negate.1"), 5, "only the last"),
    ("literal shape", _bad("  %negate.1 = f32[2,3] negate(f32[2,3] %p.0)",
                           "  %c.9 = f32[2] constant({1.0, 2.0, 3.0})"), 5, "shape [2]"),
    ("literal value", _bad("  %negate.1 = f32[2,3] negate(f32[2,3] %p.0)",
                           "  %c.9 = s8[1] constant({300})"), 5, "out of range for s8"),
    ("bad attribute value", _bad("number=0", "number="), 4, "attribute value"),
]


@pytest.mark.parametrize("text,line,what", [m[1:] for m in MALFORMED],
                         ids=[m[0] for m in MALFORMED])
def test_malformed_text_names_the_line(text, line, what):
    with pytest.raises(ValueError) as info:
        parse_module(text)
    msg = str(info.value)
    assert f"line {line}" in msg
    assert what in msg


def test_good_text_parses():
    m = parse_module(GOOD)
    assert print_module(m) == GOOD


def _tensors_of(out):
    if isinstance(out, la.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _tensors_of(o)]
    return []


def test_every_public_op_module_verifies_and_round_trips():
    """The modules the public functions trace (the op harness's table, two dtypes each)
    are well formed and come back from their text unchanged."""
    from op_table import CASES as OP_CASES
    rng = np.random.default_rng(0)
    failures, checked = [], 0
    with la.config.override(device="interpreter"):
        for case in OP_CASES:
            if case.missing():
                continue
            for dtype in list(case.dtypes)[:2]:
                for shapes, kwargs in case.variants():
                    try:
                        if case.dtype_kwarg:
                            out = case.fn(*shapes, dtype=dtype, **kwargs)
                        else:
                            inputs = case.make_inputs(rng, dtype, shapes)
                            out = case.fn(*[la.asarray(a) for a in inputs], **kwargs)
                    except Exception:      # the op harness reports ops that fail to trace
                        continue
                    pending = [t for t in _tensors_of(out) if t._node.buffer is None]
                    if not pending:
                        continue
                    module = capture([t._node for t in pending]).module("op")
                    checked += 1
                    try:
                        verify(module)
                        assert_round_trip(module)
                    except (ValueError, AssertionError) as e:
                        failures.append(f"{case.id} {dtype.short} {shapes} {kwargs}: {e}")
    assert checked > 100
    assert not failures, "\n".join(failures[:10])
