"""The one template mechanism (compiler/graph/template.py), checked as a table: its
validity rule on pairs of graphs, for the two ways its users capture leaves (a sync's:
values by reference, kept constants by value; a backward walk's: leaves by type), and
its recorded steps copied over new placeholders against building the graph again.

The users' own tests (test_sync_templates, test_walk_templates, test_vjp_fast,
test_graph_templates, test_step_recording) check that each user's copies are the graphs
its general path builds.
"""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.graph.node import NodeType, kept_constant, parameter_leaf, scalar_leaf
from lazyarray.compiler.graph.template import (CONSTANT, FRESH, SHARED, STOP, TYPED, Code,
                                               Pattern, copier, record)
from lazyarray.compiler.graph.trace import DonatedBuffer, _kind as sync_kind
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.primitive import apply

from graph_compare import same_graph

F32, F64 = D.float32, D.float64


def P(dtype=F32):
    return parameter_leaf(np.zeros((), dtype.np), (), dtype)


def S(value=2.0):
    return scalar_leaf(value, F32)


def K(value=1.0):
    return kept_constant(value, F32)


def computed(node):
    """`node` after a sync: it holds a buffer (its operands kept, as under a tape)."""
    node.buffer = np.zeros(node.shape, node.dtype.np)
    return node


def donated():
    n = P()
    n.buffer = DonatedBuffer((), F32)
    return n


def walk_kind(n):
    if n.operands:
        return None
    return SHARED if n.op == "constant" and n is K(float(n.value.array)) else TYPED


RULES = {"sync": (sync_kind, True), "walk": (walk_kind, False)}


def _order(roots, leaf_if_buffer):
    order, seen = [], set()

    def visit(n):
        if n in seen:
            return
        seen.add(n)
        if n.operands and not (leaf_if_buffer and n.buffer is not None):
            for o in n.operands:
                visit(o)
        order.append(n)
    for r in roots:
        visit(r)
    return order


def accepts(rule, recorded, new):
    """Whether the pattern of the graph of `recorded` (roots) accepts the graph of `new`."""
    kind, leaf_if_buffer = RULES[rule]
    order = _order(recorded, leaf_if_buffer)
    positions = {n: i for i, n in enumerate(order)}
    pattern = Pattern(order, positions, tuple(positions[r] for r in recorded), kind,
                      leaf_if_buffer)
    code = Code("check(roots)")
    code.match(pattern, "roots", dead=DonatedBuffer)
    code.add("return True")
    try:
        return code.build("check", "test template")(new) is True
    except ValueError:                # another number of roots or operands
        return False


def add_mul(x=None, s=None, c=None):
    x = P() if x is None else x
    return [apply("add", apply("multiply", x, S() if s is None else s), K() if c is None else c)]


def twice(x, y):
    return [apply("multiply", x, y)]


_X = P()
# (case, recorded roots, new roots, the sync accepts, the walk accepts)
CASES = [
    ("new values, one structure", add_mul, add_mul, True, True),
    ("a buffer of another dtype", add_mul,
     lambda: add_mul(apply("convert", P(F64), dtype=F32)), False, False),
    ("a scalar where a buffer was", add_mul, lambda: add_mul(x=S()), False, True),
    ("another scalar value", add_mul, lambda: add_mul(s=S(5.0)), True, True),
    ("another kept constant", add_mul, lambda: add_mul(c=K(3.0)), False, False),
    ("a computed node at an op position",
     lambda: [apply("negate", apply("exponential", P()))],
     lambda: [apply("negate", computed(apply("exponential", P())))], False, True),
    ("one node in two slots, recorded two", lambda: twice(P(), P()), lambda: twice(_X, _X),
     False, False),
    ("two nodes in two slots, recorded one", lambda: twice(_X, _X), lambda: twice(P(), P()),
     False, False),
    ("another attribute",
     lambda: [apply("compare", P(), P(), direction="LT")],
     lambda: [apply("compare", P(), P(), direction="GT")], False, False),
    ("another op", lambda: [apply("add", P(), P())], lambda: [apply("subtract", P(), P())],
     False, False),
    ("another operand count", lambda: [apply("negate", P())],
     lambda: [apply("add", P(), P())], False, False),
    ("a donated buffer", add_mul, lambda: add_mul(x=donated()), False, True),
    ("one node at two op positions over one operand, recorded two",
     lambda: [apply("negate", apply("exponential", _X)), apply("negate", apply("exponential", _X))],
     lambda: [apply("negate", apply("exponential", _X))] * 2, False, False),
    ("one inner node at two op positions over one operand, recorded two",
     lambda: [apply("add", apply("exponential", _X), apply("exponential", _X))],
     lambda: [apply("add", *[apply("exponential", _X)] * 2)], False, False),
    ("two op nodes over one operand, recorded two",
     lambda: [apply("add", apply("exponential", _X), apply("exponential", _X))],
     lambda: [apply("add", apply("exponential", _X), apply("exponential", _X))], True, True),
    ("a root twice, recorded two roots",
     lambda: [apply("negate", P()), apply("negate", P())],
     lambda: [apply("negate", _X)] * 2, False, False),
]


@pytest.mark.parametrize("case,recorded,new,sync,walk", CASES, ids=[c[0] for c in CASES])
def test_validity_rule(case, recorded, new, sync, walk):
    assert accepts("sync", recorded(), new()) is sync
    assert accepts("walk", recorded(), new()) is walk


def test_op_types_checked_with_or_without_an_interned_type():
    """An op position is checked by the node's interned type when it has the position's,
    else by its shape and dtype: a node with no type yet, or with a type interned before
    the table was cleared (an equal, other object), passes as the recording's would; one
    whose shape differs fails whatever its type."""
    for t in (None, lambda n: NodeType(n.shape, n.dtype)):
        new = add_mul()
        for n in _order(new, True):
            if n.operands:
                n.type = None if t is None else t(n)
        assert accepts("sync", add_mul(), new) and accepts("walk", add_mul(), new)
    wide = [apply("negate", parameter_leaf(np.zeros(3, np.float32), (3,), F32))]
    assert not accepts("sync", [apply("negate", P())], wide)
    assert not accepts("walk", [apply("negate", P())], wide)


def test_distinct_nodes_checked_at_the_leaves_and_shared_operands_only():
    """Of alike positions only those without operands and those sharing their operands'
    positions are checked distinct (compiler/graph/template.py `_may_coincide`): two
    layers of one structure over distinct weights are told apart by their weights."""
    def layer(x, w):
        return apply("exponential", apply("add", apply("negate", x), w))
    roots = [apply("add", layer(P(), P()), layer(P(), P()))]
    order = _order(roots, True)
    positions = {n: i for i, n in enumerate(order)}
    pattern = Pattern(order, positions, (positions[roots[0]],), sync_kind, True)
    assert sorted(pattern.alike) == [positions[n] for n in order if n.op == "parameter"]


def test_stops_are_checked_where_the_reader_stops():
    """A STOP position takes only a node of the given set; an op position never does."""
    x, y = P(), P()
    inner = apply("exponential", x)
    root = apply("negate", inner)
    pattern = Pattern([inner, root], {inner: 0, root: 1}, (1,),
                      lambda n: STOP if n is inner else None, stops=True)
    code = Code("check(roots, stops)")
    code.match(pattern, "roots")
    code.add("return True")
    check = code.build("check", "test template")
    other = apply("negate", apply("exponential", y))
    assert check([other], {id(other.operands[0])}) is True
    assert check([other], set()) is None                  # not stopped there
    assert check([other], {id(other.operands[0]), id(other)}) is None   # an op stopped


def _fresh_scalar(x):
    return apply("multiply", x, S(4.0))


# (case, build over the placeholders, the leaf rule, makes a template)
RECORD_CASES = [
    ("a chain", lambda x, y: apply("exponential", apply("add", x, y)), None, True),
    ("a kept constant, held", lambda x, y: apply("add", apply("multiply", x, K(2.0)), y),
     CONSTANT, True),
    ("a runtime scalar, made afresh", lambda x, y: apply("add", _fresh_scalar(x), y), FRESH,
     True),
    ("a runtime scalar the rule refuses", lambda x, y: apply("add", _fresh_scalar(x), y),
     None, False),
    ("a placeholder as an output", lambda x, y: x, None, True),
    ("a node of the user's graph", lambda x, y: apply("add", x, _OUTSIDE), FRESH, False),
]
_OUTSIDE = computed(apply("negate", P()))


def _leaf_rule(kind):
    def leaf(n):
        if n.buffer is not None:
            return None
        if n.op == "constant":
            return CONSTANT if kind is CONSTANT else None
        return kind
    return leaf


@pytest.mark.parametrize("case,build,kind,made", RECORD_CASES, ids=[c[0] for c in RECORD_CASES])
def test_recorded_steps_copy_the_graph(case, build, kind, made):
    x, y = P(), P()
    steps = record([build(x, y)], [x, y], _leaf_rule(kind))
    assert (steps is not None) is made
    if steps is None:
        return
    copy = copier(steps, "test template")
    for _ in range(2):                  # the generated copy and the loop over the steps
        a, b = P(), P()
        want = build(a, b)
        got, = copy(a, b)
        assert same_graph(got, want, fresh_leaves=True)
        got, = steps.run([a, b])
        assert same_graph(got, want, fresh_leaves=True)


def test_record_refuses_aliased_placeholders_and_too_many_nodes():
    x = P()
    assert record([apply("add", x, x)], [x, x], _leaf_rule(None)) is None
    y = P()
    chain = y
    for _ in range(5):
        chain = apply("negate", chain)
    assert record([chain], [y], _leaf_rule(None), limit=3) is None
    assert record([chain], [y], _leaf_rule(None), limit=10) is not None


def test_marked_steps_are_marked_on_the_copy():
    x = P()
    marked = set()
    out = apply("negate", apply("exponential", x))
    steps = record([out], [x], _leaf_rule(None), marked=lambda n: n.op == "exponential")
    copy = copier(steps, "test template", mark=lambda n: marked.add(n))
    got, = copy(P())
    assert [n.op for n in marked] == ["exponential"] and got.operands[0] in marked


def test_built_code_reads_its_names_as_constants():
    """`Code.build` puts the namespace's objects in the code's constants: a name read
    alone or inside a tuple the compiler folds is the object itself, a quoted string
    that spells a name stays the string, and the function reads no globals."""
    marker = object()
    code = Code("f()", {"k0": marker, "k1": (1, 2)})
    code.add("return k0, (k0, k1), 'k0'")
    f = code.build("f", "test")
    assert f() == (marker, (marker, (1, 2)), "k0")
    assert f()[0] is marker and not f.__code__.co_names
