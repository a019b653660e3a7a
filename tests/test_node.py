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
