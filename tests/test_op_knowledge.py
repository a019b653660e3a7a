"""Ops know themselves: what the stack knows about a primitive lives in its stanza
(compiler/primitives/, the fields of compiler/primitive.py's Primitive), not in tables keyed
by primitive names or in `ins.op == "name"` switches spread over the other files.

Read with `ast`, never run. Two kinds of finding, outside compiler/primitives/ and
compiler/primitive.py:

- a *table*: a module- or class-level dict, set, frozenset, tuple or list literal whose
  strings are mostly (>= 60%, at least two) primitive names;
- a *switch*: a comparison (`==`, `!=`, `in`, `not in`) of an op name (`<x>.op`, or a
  variable `op`, `name`, `opcode`) with a primitive's name or a literal collection of them.

Comparisons with the structural ops alone (parameter, constant, tuple, get_tuple_element)
are allowed. Every other finding must be in KNOWN below, with the reason it stays; a new
one fails (put the fact in the stanza instead), and so does an entry that no longer
matches anything (delete it: the list only shrinks).
"""
from __future__ import annotations

import ast
import pathlib

import pytest

from lazyarray.compiler.primitive import PRIMITIVES

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = ("compiler", "devices", "ops", "lazyarray")
STANZAS = ("compiler/primitives/", "compiler/primitive.py")
STRUCTURAL = frozenset(("parameter", "constant", "tuple", "get_tuple_element"))
OP_VARIABLES = frozenset(("op", "name", "opcode"))

# (file name, table name or the comparison's source) -> why it stays
KNOWN: dict = {
    # ---- tables ----
    ("cusolver_calls.py", "CALLS"):
        "the CUDA target's own calls for the decompositions, registered per target: a stanza "
        "(compiler/) may not import a device",
    ("elementwise.py", "_WITH_CONSTANT"):
        "ops/ recording: a logical op of a bool value and a constant truth value, by "
        "Boolean algebra (front-end folding, not a fact of the compiler's op)",
    # ---- switches: pattern matches that read the matched op's own attributes ----
    ("control_steps.py", "ins.op == 'while'"):
        "while or conditional: the two control ops' steps differ in kind (structural)",
    ("cpu_kernels.py", "ins.op == 'transpose'"):
        "reads the transpose's permutation (a kernel reading across its last dimension)",
    ("index_rules.py", "op.op == 'reshape'"):
        "im2col's window taps: a concatenate of strided slices, each maybe reshaped",
    ("index_rules.py", "op.op != 'slice'"):
        "im2col's window taps: reads the slices' starts and strides",
    ("control_flow.py", "n.op == 'transpose'"):
        "a loop's captured W.T that only products read: W is the operand, the transpose "
        "stays inside where products read it through their transpose flag",
    ("row_division.py", "i.op != 'divide'"):
        "the rewrite itself: a divide by a row value becomes a reciprocal multiply",
    ("algebraic_simplifier.py", "src.op == 'dot_general'"):
        "transpose(dot_general) -> dot_general with the operands swapped: reads the "
        "product's dimension numbers",
    ("algebraic_simplifier.py", "src.op != 'transpose'"):
        "dot_general(transpose(x)): reads the transpose's permutation",
    ("disjoint_sums.py", "ins.op == 'pad'"):
        "a sum of placements among zeros -> concatenate: reads the pad's edges",
    ("disjoint_sums.py", "ins.op == 'dynamic_update_slice'"):
        "a sum of placements among zeros -> concatenate: reads the update's starts",
    ("disjoint_sums.py", "ins.op == 'concatenate'"):
        "a sum of placements among zeros -> concatenate: reads the operands' offsets",
    ("update_blocks.py", "ins.op != 'dynamic_update_slice'"):
        "updates with run-time starts read block by block: reads the update's shape and "
        "starts",
    ("buffer_assignment.py", "ins[p].op == 'dynamic_update_slice'"):
        "an update written over its own operand in place (a loop's KV cache): reads which "
        "operand is read at the output's own index and the update's extent",
    ("buffer_assignment.py", "dus.op != 'dynamic_update_slice'"):
        "the in-place update kernel of every target (a loop over the update alone at its "
        "starts): reads the update's operand, shape and start operands",
    ("row_fusion.py", "i.op == 'broadcast_in_dim'"):
        "reads the broadcast's dimensions (a row value broadcast along the row)",
    ("row_fusion.py", "i.op == 'pad'"):
        "reads the pad's edges (a row padded along the row)",
    ("nccl_communicator.py", "ins.op == 'all_reduce'"):
        "devices/: the NCCL call of each collective (the CUDA runtime's own dispatch)",
    ("nccl_communicator.py", "ins.op == 'broadcast'"):
        "devices/: the NCCL call of each collective (the CUDA runtime's own dispatch)",
    ("nccl_communicator.py", "ins.op == 'all_gather'"):
        "devices/: the NCCL call of each collective (the CUDA runtime's own dispatch)",
}


def _strings(node: ast.AST) -> list:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for e in node.elts for s in _strings(e)]
    if isinstance(node, ast.Dict):
        return [s for k in node.keys if k is not None for s in _strings(k)]
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) in (
            "frozenset", "set", "tuple") and node.args:
        return _strings(node.args[0])
    return []


def _is_table(value: ast.AST, names: frozenset) -> bool:
    found = _strings(value)
    prims = [s for s in found if s in names]
    return len(prims) >= 2 and len(prims) >= 0.6 * len(found) and \
        not set(prims) <= STRUCTURAL


def _assigned(body: list, prefix: str = ""):
    """(name, value) of the assignments at this level (a class's body gives Class.name)."""
    for st in body:
        if isinstance(st, ast.ClassDef):
            yield from _assigned(st.body, prefix + st.name + ".")
        targets = st.targets if isinstance(st, ast.Assign) else \
            [st.target] if isinstance(st, ast.AnnAssign) and st.value is not None else []
        for t in targets:
            if isinstance(t, ast.Name) and t.id != "__all__":
                yield prefix + t.id, st.value


def _names_op(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "op") or \
        (isinstance(node, ast.Name) and node.id in OP_VARIABLES)


def _is_switch(cmp: ast.Compare, names: frozenset, tables: set) -> bool:
    sides = [cmp.left, *cmp.comparators]
    if not any(_names_op(s) for s in sides):
        return False
    for s in sides:
        prims = {x for x in _strings(s) if x in names}
        if prims and not prims <= STRUCTURAL:
            return True
        if isinstance(s, ast.Name) and s.id in tables:
            return True
    return False


def findings(source: str, names: frozenset) -> set:
    """('table', name) and ('switch', source text) of one module."""
    tree = ast.parse(source)
    tables = {n for n, v in _assigned(tree.body) if _is_table(v, names)}
    out = {("table", n) for n in tables}
    local = {n.split(".")[-1] for n in tables}
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and _is_switch(node, names, local):
            out.add(("switch", ast.unparse(node)))
    return out


def inventory() -> dict:
    """(file name, table name or comparison) -> 'table' or 'switch', over the four layers
    less the stanzas."""
    names = frozenset(PRIMITIVES)
    out = {}
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(STANZAS) or "/tests/" in rel:
                continue
            for kind, what in findings(path.read_text(), names):
                out[(path.name, what)] = kind
    return out


def test_no_new_op_name_tables_or_switches():
    found = inventory()
    new = sorted(k for k in found if k not in KNOWN)
    assert not new, (
        "op knowledge outside the stanzas (put it in the primitive's stanza, a field of "
        "compiler/primitive.py's Primitive, and read the field): " + "; ".join(
            f"{f}: {found[(f, w)]} {w}" for f, w in new))


def test_the_known_list_has_no_stale_entries():
    found = inventory()
    stale = sorted(k for k in KNOWN if k not in found)
    assert not stale, f"no longer found, delete from KNOWN: {stale}"


@pytest.mark.parametrize("source,expected", [
    ("T = {'add': 1, 'multiply': 2}\n", {("table", "T")}),
    ("T = frozenset(('add', 'negate', 'foo'))\n", {("table", "T")}),
    ("class M:\n    calls = {'tanh': 'tanh', 'erf': 'erf'}\n", {("table", "M.calls")}),
    ("T = ('parameter', 'constant')\n", set()),                  # structural only
    ("T = ('add', 'sum', 'mean', 'std', 'var')\n", set()),         # mostly other names
    ("__all__ = ['add', 'multiply']\n", set()),
    ("def f(ins):\n    return ins.op == 'add'\n", {("switch", "ins.op == 'add'")}),
    ("def f(op):\n    return op in ('add', 'parameter')\n",
     {("switch", "op in ('add', 'parameter')")}),
    ("def f(ins):\n    return ins.op == 'parameter'\n", set()),
    ("def f(mode):\n    return mode == 'add'\n", set()),            # not an op name
    ("S = {'add', 'negate'}\ndef f(ins):\n    return ins.op in S\n",
     {("table", "S"), ("switch", "ins.op in S")}),
])
def test_the_scanner(source, expected):
    assert findings(source, frozenset(PRIMITIVES)) == expected


# ---- the stanzas' fields, read through their consumers --------------------------------

def _one_op(op: str, operand_shapes: tuple, shape: tuple, attrs: dict):
    from lazyarray.compiler.hlo import dtypes as D
    from lazyarray.compiler.hlo.module import Instruction as I
    from lazyarray.compiler.hlo.module import Module
    ins = [I("parameter", (), s, D.float32, {"number": k}) for k, s in enumerate(operand_shapes)]
    ins.append(I(op, tuple(range(len(operand_shapes))), shape, D.float32, attrs))
    return Module("one_op", ins, [len(ins) - 1])


@pytest.mark.parametrize("op,operand_shapes,shape,attrs,expected", [
    ("add", ((3, 4), (3, 4)), (3, 4), {}, 12),                     # one per element
    ("exponential", ((5,),), (5,), {}, 5),
    ("convert", ((5,),), (5,), {"dtype": "float64"}, 0),           # conversions: none
    ("bitcast_convert", ((5,),), (5,), {"dtype": "int32"}, 0),
    ("reduce", ((6, 7),), (6,), {"axes": (1,), "kind": "sum"}, 42),  # one per combine
    ("transpose", ((2, 3),), (3, 2), {"permutation": (1, 0)}, 0),  # moves: none
    ("dot_general", ((4, 5), (5, 6)), (4, 6),
     {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (), "rhs_batch": ()},
     2 * 4 * 6 * 5),
])
def test_flops_come_from_the_stanza(op, operand_shapes, shape, attrs, expected):
    from lazyarray.compiler.planning.kernel_cost import flops
    module = _one_op(op, operand_shapes, shape, attrs)
    assert flops(module, len(module.instructions) - 1) == expected


_CODED = sorted(n for n, p in PRIMITIVES.items() if p.math_code is not None)


@pytest.mark.parametrize("name", _CODED)
def test_every_math_code_entry_resolves(name):
    """Each entry of a stanza's MathCode is an intrinsic, a library name, or code that
    imports (a typo would otherwise surface only when that op first compiles); every
    math op has code on the CPU and on CUDA."""
    from lazyarray.compiler.primitive import MathCode
    code = PRIMITIVES[name].math_code
    for field in ("cpu", "cpu_float32", "cuda", "complex"):
        entry = getattr(code, field)
        if entry is not None and MathCode.kind(entry) == "code":
            assert callable(MathCode.code(entry)), (name, field, entry)
    if code.cpu_float32 is not None or code.complex is not None:
        assert MathCode.kind(code.cpu_float32 or code.complex) == "code"
    if PRIMITIVES[name].math is not None:
        assert code.cpu is not None and code.cuda is not None, name


# ---- compute nodes built by hand, outside `apply` --------------------------------------
#
# A compute node made with `new_node(...)` or `Node(...)` in ops/ or lazyarray/ has its
# shape and dtype written out by its caller, beside its primitive's rule; `apply` (one
# memoized fast path, keyed on the operands' interned types) makes it from the rule, or
# `made` from the memo's entry. None is left (the last, the broadcast of a Python scalar
# beside a tensor, ops/promotion.py `spread_scalar`, takes the entry kept on the tensor's
# type). The count only shrinks: a new one fails, and so does a count left higher than
# what is found (lower it).

HAND_BUILT = 0
_LEAF_OPS = frozenset(("scalar", "parameter", "constant"))
_MAKERS = frozenset(("new_node", "_new_node", "Node"))


def _hand_built(source: str) -> int:
    """Calls `new_node(op, ...)`/`Node(op, ...)` and slot stores `n.op = "op"` (a node's
    slots set inline) of a compute op (not a leaf)."""
    count = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Attribute) and node.targets[0].attr == "op" \
                and isinstance(node.value, ast.Constant) and node.value.value not in _LEAF_OPS:
            count += 1
        if not isinstance(node, ast.Call) or not node.args:
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) \
            else None
        first = node.args[0]
        if name in _MAKERS and not (isinstance(first, ast.Constant) and first.value in _LEAF_OPS):
            count += 1
    return count


def test_hand_built_compute_nodes_only_get_fewer():
    found = {path.relative_to(ROOT).as_posix(): n
             for layer in ("ops", "lazyarray") for path in sorted((ROOT / layer).rglob("*.py"))
             if (n := _hand_built(path.read_text()))}
    total = sum(found.values())
    assert total <= HAND_BUILT, f"{total} compute nodes built by hand (was {HAND_BUILT}): " \
        f"make the new ones with `apply`: {found}"
    assert total == HAND_BUILT, f"only {total} left: lower HAND_BUILT to {total}"


@pytest.mark.parametrize("source,expected", [
    ("new_node('add', (a, b), s, d, {})", 1),
    ("Node('scalar', (), (), d, {}, None, 1.0)", 0),      # a leaf
    ("new_node(prim, (a,), s, d, {})", 1),
    ("apply('add', a, b)", 0),
    ("b = _new(Node)\nb.op = 'broadcast_in_dim'\n", 1),
    ("s = _new(Node)\ns.op = 'scalar'\n", 0),
])
def test_the_hand_built_scanner(source, expected):
    assert _hand_built(source) == expected
