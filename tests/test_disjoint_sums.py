"""`x + y -> concatenate(...)` for values that are zero outside disjoint runs of one
dimension (compiler/passes/disjoint_sums.py): the gradient of a split. Each case is HLO
text in; the optimized module is checked for its root op and against the interpreter
(bit-equal), and a split's gradient through the public API against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.hlo.parser import parse_module
from lazyarray.compiler.passes import pipeline
from lazyarray.devices.interpreter import InterpretedExecutable

Z = "%z = f32[] constant(0.0)"
S = ("%a = f32[4,3] parameter(), number=0\n%b = f32[4,5] parameter(), number=1\n"
     "%c = f32[4,2] parameter(), number=2\n")


def _pad(name: str, x: str, k: int, lo: int, hi: int, n: int = 10, rows: int = 4) -> str:
    return (f"%{name} = f32[{rows},{n}] pad(f32[{rows},{k}] %{x}, f32[] %z), "
            f"edge_padding_low={{0,{lo}}}, edge_padding_high={{0,{hi}}}, interior_padding={{0,0}}")


def _module(body: str, root: str = "%r") -> str:
    lines = "\n".join("  " + ln for ln in body.strip().splitlines())
    return f"HloModule m\nENTRY main {{\n{lines}\n  ROOT %t = (f32[4,10]) tuple({root})\n}}\n"


CASES = [
    # (what, body, op of the optimized root's value)
    ("three pads of a split, summed in any order",
     S + Z + "\n" + _pad("pa", "a", 3, 0, 7) + "\n" + _pad("pb", "b", 5, 3, 2) + "\n"
     + _pad("pc", "c", 2, 8, 0) + "\n%s = f32[4,10] add(%pc, %pa)\n"
     "%r = f32[4,10] add(%s, %pb)", "concatenate"),
    ("pads with a gap: zeros between",
     S + Z + "\n" + _pad("pa", "a", 3, 0, 7) + "\n" + _pad("pc", "c", 2, 6, 2) + "\n"
     "%r = f32[4,10] add(%pa, %pc)", "concatenate"),
    ("updates of zeros at constant starts (one clamped)",
     S + Z + "\n%zb = f32[4,10] broadcast_in_dim(%z), shape={4,10}, broadcast_dimensions={}\n"
     "%i0 = s64[] constant(0)\n%i5 = s64[] constant(5)\n%i9 = s64[] constant(9)\n"
     "%ua = f32[4,10] dynamic_update_slice(%zb, %a, %i0, %i0)\n"
     "%ub = f32[4,10] dynamic_update_slice(%zb, %b, %i0, %i9)\n"
     "%r = f32[4,10] add(%ua, %ub)", "concatenate"),
    ("overlapping pads stay a sum",
     S + Z + "\n" + _pad("pa", "a", 3, 0, 7) + "\n" + _pad("pc", "c", 2, 2, 6) + "\n"
     "%r = f32[4,10] add(%pa, %pc)", "add"),
    ("pads along different dimensions stay a sum",
     "%a = f32[3,10] parameter(), number=0\n%c = f32[4,8] parameter(), number=1\n" + Z + "\n"
     "%pa = f32[4,10] pad(f32[3,10] %a, f32[] %z), edge_padding_low={1,0}, "
     "edge_padding_high={0,0}, interior_padding={0,0}\n"
     "%pc = f32[4,10] pad(f32[4,8] %c, f32[] %z), edge_padding_low={0,0}, "
     "edge_padding_high={0,2}, interior_padding={0,0}\n"
     "%r = f32[4,10] add(%pa, %pc)", "add"),
    ("a pad of ones stays a sum",
     S + Z + "\n%one = f32[] constant(1.0)\n"
     "%pa = f32[4,10] pad(f32[4,3] %a, f32[] %one), edge_padding_low={0,0}, "
     "edge_padding_high={0,7}, interior_padding={0,0}\n" + _pad("pc", "c", 2, 8, 0) + "\n"
     "%r = f32[4,10] add(%pa, %pc)", "add"),
]


@pytest.mark.parametrize("what,body,root_op", CASES, ids=[c[0] for c in CASES])
def test_disjoint_sums(what: str, body: str, root_op: str) -> None:
    src = parse_module(_module(body))
    got = pipeline.optimize(src, verify=True)
    tup = got.instructions[got.outputs[0]]
    value = got.instructions[tup.operands[0]] if tup.op == "tuple" else tup
    assert value.op == root_op, what
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(src.instructions[p].shape).astype(np.float32)
            for p in src.parameters]
    for a, b in zip(InterpretedExecutable(src).run(args), InterpretedExecutable(got).run(args)):
        np.testing.assert_array_equal(a, b)


def test_gradient_of_a_split_is_a_concatenate_and_matches_finite_differences() -> None:
    """q, k, v = t.split(C, -1) of a fused projection; the loss uses each part: the
    gradient of t is the parts' gradients side by side (one concatenate, no pad left)."""
    import lazyarray as la
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal((5, 12))
    w = la.asarray(rng.standard_normal((12, 12)))

    def loss(x):
        q, k, v = (x @ w).split(4, -1)
        return (la.sin(q) * k + la.exp(v * 0.1)).sum()

    x = la.asarray(x0)
    g = la.grad(loss)(x)
    text = la.debug.ir([g], stage="optimized_hlo")
    assert "concatenate(" in text and " pad(" not in text
    t = rng.standard_normal(x0.shape)
    eps = 1e-6
    fd = (float(loss(la.asarray(x0 + eps * t))) - float(loss(la.asarray(x0 - eps * t)))) / (2 * eps)
    assert abs(float((g * la.asarray(t)).sum()) - fd) < 1e-6 * max(1.0, abs(fd))
