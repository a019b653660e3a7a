"""`new_node` makes the node the class call makes: every slot set, to the same values."""
from __future__ import annotations

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.graph.node import Node, new_node, scalar_leaf

_SLOTS = [s for s in Node.__slots__ if s != "__weakref__"]


def _fields(n: Node) -> dict:
    return {s: getattr(n, s) for s in _SLOTS}        # an unset slot raises here


def test_new_node_sets_every_slot_as_the_class_does():
    leaf = Node("parameter", (), (3,), D.float32, {})
    attrs = {"shape": (2, 3), "broadcast_dimensions": (1,)}
    for args in [("broadcast_in_dim", (leaf,), (2, 3), D.float32, attrs),
                 ("scalar", (), (), D.float64, {}, 2.5)]:
        made, want = new_node(*args), Node(*args[:5], value=args[5] if len(args) > 5 else None)
        assert type(made) is Node
        assert _fields(made) == _fields(want)


def test_scalar_leaf():
    n = scalar_leaf(0.5, D.float32)
    assert _fields(n) == _fields(Node("scalar", (), (), D.float32, {}, value=0.5))


# ---- interned types and the memoized `apply` ------------------------------------------

import pytest                                                      # noqa: E402

from lazyarray.compiler.graph.node import node_type, type_of      # noqa: E402
from lazyarray.compiler.primitive import PRIMITIVES, apply         # noqa: E402


def test_equal_types_are_one_object():
    a = Node("parameter", (), (2, 3), D.float32, {})
    b = Node("parameter", (), (2, 3), D.float32, {})
    assert a.type is None                                  # interned when first asked
    assert type_of(a) is type_of(b) is node_type((2, 3), D.float32)
    assert type_of(a) is not node_type((2, 3), D.float64)
    assert (type_of(a).shape, type_of(a).dtype) == ((2, 3), D.float32)


# (op, operand types, attrs): a rule's result, remembered, is what the rule gives
_CASES = [
    ("add", [((4, 5), D.float32), ((4, 5), D.float32)], {}),
    ("exponential", [((4,), D.float64)], {}),
    ("compare", [((3,), D.int32), ((3,), D.int32)], {"direction": "LT"}),
    ("reshape", [((4, 6), D.float32)], {"shape": (2, 12)}),
    ("reduce", [((4, 6), D.int64)], {"axes": (1,), "kind": "sum"}),
    ("select", [((3,), D.bool_), ((3,), D.float32), ((3,), D.float32)], {}),
    ("clamp", [((3,), D.float32), ((3,), D.float32), ((3,), D.float32)], {}),
]


@pytest.mark.parametrize("op,types,attrs", _CASES, ids=[c[0] for c in _CASES])
def test_apply_remembers_what_the_rule_says(op, types, attrs):
    def leaves():
        return [Node("parameter", (), s, d, {}) for s, d in types]
    want = PRIMITIVES[op].infer(leaves(), **attrs)
    first, again = apply(op, *leaves(), **attrs), apply(op, *leaves(), **attrs)
    for n in (first, again):
        assert (n.shape, n.dtype) == want
        assert _fields(n)["attrs"] == attrs and n.op == op
    assert first.type is again.type is node_type(*want)   # the second, the memo's
    assert first.attrs is again.attrs                      # one dict, shared (never changed)


def test_float_attributes_are_never_shared():
    """0.0 and -0.0 are one key: a node keeps its own float attributes."""
    a = Node("parameter", (), (3,), D.float32, {})
    rule = PRIMITIVES["add"]
    try:
        PRIMITIVES["add"] = type(rule)(**{**rule.__dict__, "infer": lambda ops, **kw: (
            ops[0].shape, ops[0].dtype)})
        first, again = apply("add", a, a, tag=0.0), apply("add", a, a, tag=-0.0)
    finally:
        PRIMITIVES["add"] = rule
    assert repr(first.attrs["tag"]) == "0.0" and repr(again.attrs["tag"]) == "-0.0"


def test_apply_raises_every_time_for_bad_operands():
    a = Node("parameter", (), (3,), D.float32, {})
    b = Node("parameter", (), (4,), D.float32, {})
    for _ in range(2):                                     # a failure is never remembered
        with pytest.raises(ValueError, match="equal shapes"):
            apply("add", a, b)


def test_apply_takes_an_unhashable_attribute_the_long_way():
    a = Node("parameter", (), (4, 6), D.float32, {})
    n = apply("transpose", a, permutation=[1, 0])
    assert (n.shape, n.dtype) == ((6, 4), D.float32) and n.attrs == {"permutation": [1, 0]}
