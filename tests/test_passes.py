"""The HLO passes: HLO text in, HLO text out, one case per named rule, and each case also
checked to compute the same values on the interpreter."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.hlo.module import Module
from lazyarray.compiler.hlo.parser import parse_module
from lazyarray.compiler.passes import pipeline
from lazyarray.compiler.passes.algebraic_simplifier import lossless
from lazyarray.compiler.passes.constant_folding import MAX_ELEMENTS
from lazyarray.compiler.hlo.printer import print_module
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.devices.interpreter import InterpretedExecutable


def hlo(body: str, root: str) -> str:
    lines = [ln.strip() for ln in body.strip().splitlines()]
    out_types = root.split(":")[0]
    names = root.split(":")[1]
    return ("HloModule m\nENTRY main {\n" + "\n".join("  " + ln for ln in lines)
            + f"\n  ROOT %t = ({out_types}) tuple({names})\n}}\n")


X = "%x = f32[4,8] parameter(), number=0"
I = "%i = s32[4,8] parameter(), number=0"
ZERO = "%z = f32[] constant(0)\n%zb = f32[4,8] broadcast_in_dim(%z), shape={4,8}, broadcast_dimensions={}"
ONE = "%o = f32[] constant(1)\n%ob = f32[4,8] broadcast_in_dim(%o), shape={4,8}, broadcast_dimensions={}"
IZERO = "%z = s32[] constant(0)\n%zb = s32[4,8] broadcast_in_dim(%z), shape={4,8}, broadcast_dimensions={}"

CASES = [
    # (rule, before body, before root, after body, after root)
    ("x + 0 -> x", f"{X}\n{ZERO}\n%a = f32[4,8] add(%x, %zb)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("0 + x -> x", f"{X}\n{ZERO}\n%a = f32[4,8] add(%zb, %x)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("x - 0 -> x", f"{X}\n{ZERO}\n%a = f32[4,8] subtract(%x, %zb)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("x * 1 -> x", f"{X}\n{ONE}\n%a = f32[4,8] multiply(%x, %ob)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("1 * x -> x", f"{X}\n{ONE}\n%a = f32[4,8] multiply(%ob, %x)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("x / 1 -> x", f"{X}\n{ONE}\n%a = f32[4,8] divide(%x, %ob)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("x ** 1 -> x", f"{X}\n{ONE}\n%a = f32[4,8] power(%x, %ob)", "f32[4,8]:%a", X, "f32[4,8]:%x"),
    ("int x * 0 -> 0", f"{I}\n{IZERO}\n%a = s32[4,8] multiply(%i, %zb)", "s32[4,8]:%a",
     f"{I}\n{IZERO}", "s32[4,8]:%zb"),
    ("float x * 0 stays (NaN * 0 is NaN)", f"{X}\n{ZERO}\n%a = f32[4,8] multiply(%x, %zb)",
     "f32[4,8]:%a", f"{X}\n{ZERO}\n%a = f32[4,8] multiply(%x, %zb)", "f32[4,8]:%a"),
    ("-(-x) -> x", f"{X}\n%n = f32[4,8] negate(%x)\n%m = f32[4,8] negate(%n)", "f32[4,8]:%m",
     X, "f32[4,8]:%x"),
    ("max(x, x) -> x", f"{X}\n%m = f32[4,8] maximum(%x, %x)", "f32[4,8]:%m", X, "f32[4,8]:%x"),
    ("select(true, a, b) -> a",
     f"{X}\n%y = f32[4,8] parameter(), number=1\n%c = pred[] constant(true)\n"
     "%p = pred[4,8] broadcast_in_dim(%c), shape={4,8}, broadcast_dimensions={}\n"
     "%s = f32[4,8] select(%p, %x, %y)", "f32[4,8]:%s",
     f"{X}\n%y = f32[4,8] parameter(), number=1", "f32[4,8]:%x"),
    ("select(false, a, b) -> b",
     f"{X}\n%y = f32[4,8] parameter(), number=1\n%c = pred[] constant(false)\n"
     "%p = pred[4,8] broadcast_in_dim(%c), shape={4,8}, broadcast_dimensions={}\n"
     "%s = f32[4,8] select(%p, %x, %y)", "f32[4,8]:%s",
     f"{X}\n%y = f32[4,8] parameter(), number=1", "f32[4,8]:%y"),
    ("select(p, a, a) -> a",
     f"{X}\n%p = pred[4,8] parameter(), number=1\n%s = f32[4,8] select(%p, %x, %x)",
     "f32[4,8]:%s", f"{X}\n%p = pred[4,8] parameter(), number=1", "f32[4,8]:%x"),
    ("convert to the same dtype -> x", f"{X}\n%c = f32[4,8] convert(%x), dtype=f32",
     "f32[4,8]:%c", X, "f32[4,8]:%x"),
    ("convert(convert(x)) lossless -> convert(x)",
     f"{X}\n%c = f64[4,8] convert(%x), dtype=f64\n%d = s32[4,8] convert(%c), dtype=s32",
     "s32[4,8]:%d", f"{X}\n%d = s32[4,8] convert(%x), dtype=s32", "s32[4,8]:%d"),
    ("convert round trip through a wider type -> x",
     f"{X}\n%c = f64[4,8] convert(%x), dtype=f64\n%d = f32[4,8] convert(%c), dtype=f32",
     "f32[4,8]:%d", X, "f32[4,8]:%x"),
    ("convert(convert(x)) of an integer through a float to a narrower integer stays "
     "(saturates; the direct convert would wrap)",
     "%x = s8[4,8] parameter(), number=0\n%c = f32[4,8] convert(%x), dtype=f32\n"
     "%d = u8[4,8] convert(%c), dtype=u8", "u8[4,8]:%d",
     "%x = s8[4,8] parameter(), number=0\n%c = f32[4,8] convert(%x), dtype=f32\n"
     "%d = u8[4,8] convert(%c), dtype=u8", "u8[4,8]:%d"),
    ("convert(convert(x)) of an integer through a float to a wider integer -> convert(x)",
     "%x = s8[4,8] parameter(), number=0\n%c = f32[4,8] convert(%x), dtype=f32\n"
     "%d = s32[4,8] convert(%c), dtype=s32", "s32[4,8]:%d",
     "%x = s8[4,8] parameter(), number=0\n%d = s32[4,8] convert(%x), dtype=s32", "s32[4,8]:%d"),
    ("convert(convert(x)) lossy stays",
     f"{X}\n%c = f16[4,8] convert(%x), dtype=f16\n%d = f32[4,8] convert(%c), dtype=f32",
     "f32[4,8]:%d",
     f"{X}\n%c = f16[4,8] convert(%x), dtype=f16\n%d = f32[4,8] convert(%c), dtype=f32",
     "f32[4,8]:%d"),
    ("reshape(reshape(x)) -> reshape(x)",
     f"{X}\n%r = f32[32] reshape(%x), shape={{32}}\n%s = f32[2,16] reshape(%r), shape={{2,16}}",
     "f32[2,16]:%s", f"{X}\n%s = f32[2,16] reshape(%x), shape={{2,16}}", "f32[2,16]:%s"),
    ("reshape to its own shape -> x", f"{X}\n%r = f32[4,8] reshape(%x), shape={{4,8}}",
     "f32[4,8]:%r", X, "f32[4,8]:%x"),
    ("transpose(transpose(x)) -> x",
     f"{X}\n%a = f32[8,4] transpose(%x), permutation={{1,0}}\n"
     "%b = f32[4,8] transpose(%a), permutation={1,0}", "f32[4,8]:%b", X, "f32[4,8]:%x"),
    ("transpose chains compose",
     "%x = f32[2,3,4] parameter(), number=0\n"
     "%a = f32[3,4,2] transpose(%x), permutation={1,2,0}\n"
     "%b = f32[4,2,3] transpose(%a), permutation={1,2,0}", "f32[4,2,3]:%b",
     "%x = f32[2,3,4] parameter(), number=0\n"
     "%b = f32[4,2,3] transpose(%x), permutation={2,0,1}", "f32[4,2,3]:%b"),
    ("broadcast_in_dim(broadcast_in_dim(x)) -> broadcast_in_dim(x)",
     "%x = f32[4] parameter(), number=0\n"
     "%a = f32[4,8] broadcast_in_dim(%x), shape={4,8}, broadcast_dimensions={0}\n"
     "%b = f32[2,4,8] broadcast_in_dim(%a), shape={2,4,8}, broadcast_dimensions={1,2}",
     "f32[2,4,8]:%b",
     "%x = f32[4] parameter(), number=0\n"
     "%b = f32[2,4,8] broadcast_in_dim(%x), shape={2,4,8}, broadcast_dimensions={1}",
     "f32[2,4,8]:%b"),
    ("reshape of a scalar splat -> splat",
     "%s = f32[] parameter(), number=0\n"
     "%a = f32[4,8] broadcast_in_dim(%s), shape={4,8}, broadcast_dimensions={}\n"
     "%b = f32[32] reshape(%a), shape={32}", "f32[32]:%b",
     "%s = f32[] parameter(), number=0\n"
     "%b = f32[32] broadcast_in_dim(%s), shape={32}, broadcast_dimensions={}", "f32[32]:%b"),
    ("whole slice -> x",
     f"{X}\n%s = f32[4,8] slice(%x), start_indices={{0,0}}, limit_indices={{4,8}}, strides={{1,1}}",
     "f32[4,8]:%s", X, "f32[4,8]:%x"),
    ("reduce over no axes -> x", f"{X}\n%r = f32[4,8] reduce(%x), axes={{}}, kind=sum",
     "f32[4,8]:%r", X, "f32[4,8]:%x"),
    ("constant folding: small constant subgraph",
     "%a = f32[3] constant({1, 2, 3})\n%b = f32[3] constant({10, 20, 30})\n"
     "%c = f32[3] add(%a, %b)", "f32[3]:%c",
     "%c = f32[3] constant({11, 22, 33})", "f32[3]:%c"),
    ("constant folding: splats stay splats",
     "%a = f32[] constant(2)\n%b = f32[] constant(3)\n"
     "%ab = f32[64,64] broadcast_in_dim(%a), shape={64,64}, broadcast_dimensions={}\n"
     "%bb = f32[64,64] broadcast_in_dim(%b), shape={64,64}, broadcast_dimensions={}\n"
     "%m = f32[64,64] multiply(%ab, %bb)", "f32[64,64]:%m",
     "%c = f32[] constant(6)\n"
     "%m = f32[64,64] broadcast_in_dim(%c), shape={64,64}, broadcast_dimensions={}",
     "f32[64,64]:%m"),
    ("cse: equal subexpressions merge",
     f"{X}\n%a = f32[4,8] exponential(%x)\n%b = f32[4,8] exponential(%x)\n"
     "%c = f32[4,8] add(%a, %b)", "f32[4,8]:%c",
     f"{X}\n%a = f32[4,8] exponential(%x)\n%c = f32[4,8] add(%a, %a)", "f32[4,8]:%c"),
    ("dot_general(transpose(w), x) reads w in place",
     "%w = f32[8,4] parameter(), number=0\n%x = f32[8,3] parameter(), number=1\n"
     "%t = f32[4,8] transpose(%w), permutation={1,0}\n"
     "%d = f32[4,3] dot_general(%t, %x), lhs_contracting={1}, rhs_contracting={0}, "
     "lhs_batch={}, rhs_batch={}", "f32[4,3]:%d",
     "%w = f32[8,4] parameter(), number=0\n%x = f32[8,3] parameter(), number=1\n"
     "%d = f32[4,3] dot_general(%w, %x), lhs_contracting={0}, rhs_contracting={0}, "
     "lhs_batch={}, rhs_batch={}", "f32[4,3]:%d"),
    ("dot_general keeps a transpose that is not a plain matrix transpose",
     "%w = f32[2,3,4] parameter(), number=0\n%x = f32[2,4,5] parameter(), number=1\n"
     "%t = f32[3,2,4] transpose(%w), permutation={1,0,2}\n"
     "%d = f32[2,3,5] dot_general(%t, %x), lhs_contracting={2}, rhs_contracting={1}, "
     "lhs_batch={1}, rhs_batch={0}", "f32[2,3,5]:%d",
     "%w = f32[2,3,4] parameter(), number=0\n%x = f32[2,4,5] parameter(), number=1\n"
     "%t = f32[3,2,4] transpose(%w), permutation={1,0,2}\n"
     "%d = f32[2,3,5] dot_general(%t, %x), lhs_contracting={2}, rhs_contracting={1}, "
     "lhs_batch={1}, rhs_batch={0}", "f32[2,3,5]:%d"),
    ("transpose(dot_general(g, p)) -> dot_general(p, g): the product writes the layout",
     "%g = f32[2,3,4] parameter(), number=0\n%p = f32[2,3,5] parameter(), number=1\n"
     "%d = f32[2,4,5] dot_general(%g, %p), lhs_contracting={1}, rhs_contracting={1}, "
     "lhs_batch={0}, rhs_batch={0}\n"
     "%t = f32[2,5,4] transpose(%d), permutation={0,2,1}", "f32[2,5,4]:%t",
     "%g = f32[2,3,4] parameter(), number=0\n%p = f32[2,3,5] parameter(), number=1\n"
     "%d = f32[2,5,4] dot_general(%p, %g), lhs_contracting={1}, rhs_contracting={1}, "
     "lhs_batch={0}, rhs_batch={0}", "f32[2,5,4]:%d"),
    ("transpose(dot_general) stays when the product has another user",
     "%g = f32[3,4] parameter(), number=0\n%p = f32[3,5] parameter(), number=1\n"
     "%d = f32[4,5] dot_general(%g, %p), lhs_contracting={0}, rhs_contracting={0}, "
     "lhs_batch={}, rhs_batch={}\n%t = f32[5,4] transpose(%d), permutation={1,0}",
     "f32[5,4], f32[4,5]:%t, %d",
     "%g = f32[3,4] parameter(), number=0\n%p = f32[3,5] parameter(), number=1\n"
     "%d = f32[4,5] dot_general(%g, %p), lhs_contracting={0}, rhs_contracting={0}, "
     "lhs_batch={}, rhs_batch={}\n%t = f32[5,4] transpose(%d), permutation={1,0}",
     "f32[5,4], f32[4,5]:%t, %d"),
    ("dce: dead code goes, parameters stay",
     f"{X}\n%y = f32[4,8] parameter(), number=1\n%a = f32[4,8] exponential(%y)\n"
     "%b = f32[4,8] sine(%x)", "f32[4,8]:%b",
     f"{X}\n%y = f32[4,8] parameter(), number=1\n%b = f32[4,8] sine(%x)", "f32[4,8]:%b"),
]


def _text(module: Module) -> str:
    return print_module(module)


def _inputs(module: Module, rng: np.random.Generator) -> list:
    args = []
    for p in module.parameters:
        ins = module.instructions[p]
        a = rng.standard_normal(ins.shape) * 3
        if ins.dtype is D.bool_:
            a = a > 0
        args.append(np.asarray(a).astype(ins.dtype.np))
    return args


@pytest.mark.parametrize("rule,before,broot,after,aroot", CASES, ids=[c[0] for c in CASES])
def test_rule(rule, before, broot, after, aroot):
    src = parse_module(hlo(before, broot))
    got = pipeline.optimize(src, verify=True)
    want = parse_module(hlo(after, aroot))
    assert _text(got) == _text(want)
    args = _inputs(src, np.random.default_rng(0))
    for a, b in zip(InterpretedExecutable(src).run(args), InterpretedExecutable(got).run(args)):
        np.testing.assert_array_equal(a, b)


def test_big_constant_subgraphs_are_not_folded():
    n = MAX_ELEMENTS + 1
    text = hlo(f"%a = f32[{n}] iota(), shape={{{n}}}, dtype=f32, dimension=0\n"
               f"%b = f32[{n}] add(%a, %a)", f"f32[{n}]:%b")
    m = parse_module(text)
    assert _text(pipeline.optimize(m)) == _text(m)


def test_iota_is_not_folded():
    m = parse_module(hlo("%a = s32[4] iota(), shape={4}, dtype=s32, dimension=0",
                         "s32[4]:%a"))
    assert [i.op for i in pipeline.optimize(m).instructions] == ["iota"]


def test_folding_uses_the_reference_semantics():
    # integer division by zero is defined as 0 by the divide stanza
    m = parse_module(hlo("%a = s32[2] constant({7, -7})\n%b = s32[2] constant({0, 2})\n"
                         "%c = s32[2] divide(%a, %b)", "s32[2]:%c"))
    out = pipeline.optimize(m)
    value = out.instructions[0].attrs["value"].array
    np.testing.assert_array_equal(value, [0, -3])


@pytest.mark.parametrize("src,dst,want", [
    (D.int32, D.float64, True), (D.int32, D.float32, False), (D.float32, D.float64, True),
    (D.float16, D.bfloat16, False), (D.uint8, D.int16, True), (D.int8, D.uint16, False),
    (D.bool_, D.float16, True), (D.float32, D.int64, False), (D.int64, D.bool_, False),
])
def test_lossless_table(src, dst, want):
    assert lossless(src, dst) is want


def test_verify_names_the_pass_that_broke_the_module(monkeypatch):
    from lazyarray.compiler.hlo.module import Instruction

    def broken(module):
        ins = list(module.instructions)
        x = ins[0]
        ins[0] = Instruction(x.op, x.operands, x.shape, x.dtype, {"number": 5})
        return Module(module.name, ins, module.outputs)

    group = [("broken", broken, "breaks parameter numbering")]
    monkeypatch.setattr(pipeline, "SIMPLIFY_GROUP", group)
    m = parse_module(hlo(X, "f32[4,8]:%x"))
    with pytest.raises(ValueError, match="after pass broken"):
        pipeline.optimize(m, verify=True)
    pipeline.optimize(m, verify=False)   # without verification nothing checks


def test_optimize_reaches_a_fixed_point():
    m = parse_module(hlo(f"{X}\n{ZERO}\n{ONE}\n%a = f32[4,8] add(%x, %zb)\n"
                         "%b = f32[4,8] multiply(%a, %ob)\n%c = f32[4,8] negate(%b)\n"
                         "%d = f32[4,8] negate(%c)\n%e = f32[4,8] transpose(%d), permutation={1,0}"
                         .replace("f32[4,8] transpose", "f32[8,4] transpose"), "f32[8,4]:%e"))
    once = pipeline.optimize(m)
    assert pipeline.optimize(once) == once
    assert [i.op for i in once.instructions] == ["parameter", "transpose"]
