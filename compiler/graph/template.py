"""Templates: a recorded subgraph reused instead of recording it again.

A loop records graphs of one structure over and over, and four places keep what the first
recording made and reuse it: a sync (the program's arguments found in a new graph of the
captured structure, compiler/graph/trace.py), a backward walk (the first step's backward
graph copied over the next step's forward graph, compiler/transforms/walk_templates.py),
a vjp (the nodes one primitive's vjp built, vjp_templates.py) and a composite (the nodes a
function such as a loss built, graph_templates.py). They share this one mechanism. A
template is

- a **key**: what its user finds it by; it fixes the placeholders' types and every static
  value the recording read (attributes, Python values, a context);
- a **pattern** (sync, backward walk): the part of a new graph matched node by node from
  its roots down; its positions are placeholders found in the new graph;
- **steps** (backward walk, vjp, composite): the nodes the recording built over its
  placeholders, made again over the new ones;
- its outputs: a program's arguments, cotangents, a function's result.

The validity rule. A template recorded from one call serves another exactly when the
recording would have made the same thing of it:

1. the keys are equal;
2. the new graph passes the pattern: at each op position, a node that the recording's
   walk treats as an op, with the same op, shape, dtype, attributes and operand count; at
   each leaf position a leaf, checked as its kind says it was captured --
       VALUE    a buffer: by reference (an argument, never compared), and its type
       SCALAR   a runtime scalar: by reference (its value an argument), and its dtype
       LITERAL  a kept constant: by value (its literal's content; a shared one by identity)
       SHARED   a rule's shared constant (`kept_constant`): by identity
       TYPED    any leaf of the type (a reader of types alone: the backward walk)
       STOP     a node the reader stops at (in the set it is given), of the type;
   the same node in every pair of slots that held one node, and distinct nodes at the
   positions whose checks could accept one node (`_may_coincide`);
3. the steps reach nothing but the placeholders and what the key fixes: constants (held
   by the template, by identity) and runtime scalars and operand-less ops (made afresh
   with the recorded value), as the user's `leaf` rule admits them; anything else (a
   buffer, a node of the user's graph) makes no template.

A sync's donation is checked on top of this, by reference counts (trace.py).

The four users, each an instance of the rule:

    user       key                         pattern leaves        steps over         holds
    sync       the capture's key, by site  VALUE SCALAR LITERAL  --                 --
    walk       target's op and type,       TYPED SHARED STOP     forward graph and  shared
               number of sources                                 seed               constants
    vjp        op, types, attributes,      --                    g, node, operands  constants
               cotangents wanted
    composite  argument types, statics,    --                    the arguments      shared
               context                                           (scalars, iotas    constants
                                                                 made afresh)

One code generator (`Code`): a pattern's check and a copy of steps are written out as
straight-line Python, made once per template. Each node is then a few attribute reads
compared with constants and its operands unpacked into locals, each copied node nine
stores: a training step does this for most of its nodes at every step, and a loop over
entries costs several times as much. A vjp's few nodes are copied by a loop instead
(`Steps.run`): making code costs more than its copies would save.

A template holds no node of a user's graph: types, attributes, positions, and the
constants the key fixes.
"""
from __future__ import annotations

import builtins
import collections
import re
import types
import warnings
from typing import Any, Callable, Iterable, Optional

import numpy as np

from .node import Node, is_kept, new_node, node_type

# kinds of a pattern's leaf positions (see the module docstring)
VALUE, SCALAR, LITERAL = "value", "scalar", "literal"
SHARED, TYPED, STOP = "shared", "typed", "stop"
# what a `leaf` rule says of a leaf the steps reach: held by identity, or made afresh
CONSTANT, FRESH = "constant", "fresh"


class Cache(dict):
    """Templates by key, at most `cap` keys: when full it is cleared (keys that change at
    every call stay bounded, the recurring ones come back at their next call)."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def put(self, key: Any, value: Any) -> Any:
        if len(self) >= self.cap and key not in self:
            self.clear()
        self[key] = value
        return value


# ---- patterns: a recorded graph matched node by node ----------------------------------

class Pattern:
    """A recorded graph by position (`order`: operands before users; `positions`: node ->
    position; `outputs`: the roots' positions). `kind(node)` says what each position is:
    None for an op, else its leaf kind. `leaf_if_buffer`: a node holding a buffer is a
    leaf whatever its operands (a sync's capture); `stops`: the reader is given a set of
    nodes it stops at (a backward walk), so no op position may hold one of them.

    `ops`: (position, op, shape, dtype, attrs, operand positions), users before their
    operands (each node is found in a slot of a user checked before it); `leaves`:
    (position, kind, shape, dtype, extra, argument number or None), extra being (the
    shared node or None, the literal's content) for a LITERAL and the node for a SHARED;
    `nargs`: VALUE and SCALAR leaves, numbered by position; `alike` (worked out when
    first asked: a template made and never used costs no more): the positions that must
    hold distinct nodes."""

    __slots__ = ("ops", "leaves", "outputs", "size", "nargs", "leaf_if_buffer", "stops",
                 "_alike")

    def __init__(self, order: list, positions: dict, outputs: tuple,
                 kind: Callable[[Node], Optional[str]], leaf_if_buffer: bool = False,
                 stops: bool = False) -> None:
        ops, leaves = [], []
        number = 0
        for i, n in enumerate(order):
            k = kind(n)
            if k is None:
                # the node's own shape and attributes (never changed once a node is made):
                # checks compare by identity first, and a loop's nodes mostly share them
                ops.append((i, n.op, n.shape, n.dtype, n.attrs,
                            tuple([positions[o] for o in n.operands])))
                continue
            extra = arg = None
            if k is VALUE or k is SCALAR:
                arg = number
                number += 1
            elif k is LITERAL:
                value = n.value
                extra = (n if is_kept(n) else None, getattr(value, "_key", value))
            elif k is SHARED:
                extra = n
            leaves.append((i, k, n.shape, n.dtype, extra, arg))
        ops.reverse()
        self.ops, self.leaves = tuple(ops), tuple(leaves)
        self.outputs, self.size, self.nargs = tuple(outputs), len(order), number
        self.leaf_if_buffer, self.stops = leaf_if_buffer, stops
        self._alike: Optional[tuple] = None

    def positions_of(self, kind: str) -> tuple:
        return tuple(i for i, k, *_ in self.leaves if k is kind)

    @property
    def alike(self) -> tuple:
        if self._alike is None:
            self._alike = _may_coincide(self)
        return self._alike


def _signature(kind: str, shape: tuple, dtype: Any, extra: Any) -> tuple:
    """What the check of a leaf position of `kind` compares: two positions whose
    signatures differ cannot accept one node."""
    if kind is VALUE:
        return ("P", shape, dtype)
    if kind is SCALAR:
        return ("S", dtype)
    if kind is LITERAL:
        return ("C", dtype, extra[1])
    return ("L", shape, dtype)           # by type (a shared constant passes a typed check)


def _may_coincide(p: Pattern) -> tuple:
    """The positions where one node could stand in two positions of a graph the pattern
    accepts: only if the two positions' subgraphs are alike all the way down (the node
    passes both positions' checks, and so do its operands at both positions' operand
    slots, down to the leaves). Positions are numbered by what the checks compare
    (hash-consing, leaves up); the check makes sure the nodes at the positions sharing a
    number are distinct (nodes at positions of different numbers cannot be one node, so
    all of them at once: one set), and is skipped when every number is its own. Of an
    op position's number only those sharing its operands' positions are checked (see
    below): the others' nodes differ through their operands."""
    leaves: list = [None] * p.size
    for i, kind, shape, dtype, extra, _ in p.leaves:
        leaves[i] = _signature(kind, shape, dtype, extra)
    ops: list = [None] * p.size
    for op in p.ops:
        ops[op[0]] = op
    ids: dict = {}
    canon: list = []
    try:
        for sig, op in zip(leaves, ops):
            if sig is None:   # (attributes as a set of items: equal dicts, equal signatures)
                _, name, shape, dtype, attrs, slots = op
                sig = (name, shape, dtype, frozenset(attrs.items()),
                       tuple([canon[q] for q in slots]))
            canon.append(ids.setdefault(sig, len(ids)))
    except TypeError:              # an unhashable attribute: assume the worst
        return tuple(range(p.size))
    count = collections.Counter(canon)
    # Two op positions of one number whose operands sit at other positions (of one number
    # each, slot by slot) hold distinct nodes once those do: one node at both would have
    # one operand at both. So by induction from the leaves up only the positions without
    # operands and the op positions sharing their operands' positions with another of
    # their number need checking (the layers of a model: their weights, not every node)
    same = collections.Counter((canon[q], ops[q][5]) for q in range(p.size)
                               if count[canon[q]] > 1 and ops[q] is not None and ops[q][5])
    return tuple(q for q, c in enumerate(canon) if count[c] > 1 and (
        ops[q] is None or not ops[q][5] or same[(c, ops[q][5])] > 1))


# ---- steps: the nodes a recording built, made again -----------------------------------

class Steps:
    """The nodes a recording built over its placeholders, operands first: `steps` are
    (op, operand refs, shape, dtype, attrs, value), a ref indexing [placeholders...,
    constants..., steps' results...]; `outputs` index the same list (None for none)."""

    __slots__ = ("nargs", "constants", "steps", "outputs", "marked")

    def __init__(self, nargs: int, constants: tuple, steps: tuple, outputs: tuple,
                 marked: tuple = ()) -> None:
        self.nargs, self.constants, self.steps, self.outputs = nargs, constants, steps, outputs
        self.marked = marked                    # refs of steps whose node was marked

    @property
    def first(self) -> int:
        """The ref of the first step's result."""
        return self.nargs + len(self.constants)

    def run(self, inputs: list) -> list:
        """The outputs, made by a loop over the steps: for templates of a few nodes (a
        vjp's), where making code (`copier`, about 150 us) would cost more than its
        copies save. The same nodes as `copier`'s function makes (marks aside)."""
        vals = list(inputs)
        vals.extend(self.constants)
        append = vals.append
        for op, refs, shape, dtype, attrs, value in self.steps:
            append(new_node(op, tuple([vals[r] for r in refs]), shape, dtype, attrs, value))
        return [None if r is None else vals[r] for r in self.outputs]


def record(outs: Iterable[Optional[Node]], inputs: list,
           leaf: Callable[[Node], Optional[str]], limit: Optional[int] = None,
           marked: Optional[Callable[[Node], bool]] = None) -> Optional[Steps]:
    """The steps that made `outs` from `inputs` (the placeholders: nodes, or None where
    a placeholder is not a node), or None when they cannot be recorded: one node in two
    placeholders (its refs would be ambiguous), a leaf that `leaf(n)` refuses (it says
    CONSTANT, FRESH or None), a node the recording did not make (holding a buffer or a
    value, or recorded at a user's line), or more than `limit` nodes. `marked(n)`: whether
    a node carries a mark kept outside it (stop_gradient's), which a copy must repeat."""
    outs = tuple(outs)
    index: dict = {}
    for k, a in enumerate(inputs):
        if type(a) is Node:
            if id(a) in index:
                return None
            index[id(a)] = k
    found = _built([o for o in outs if o is not None], index, leaf, limit)
    if found is None:
        return None
    nodes, constants = found
    nargs = len(inputs)
    for k, c in enumerate(constants):
        index[id(c)] = nargs + k
    first = nargs + len(constants)
    steps, marks = [], []
    for n in nodes:
        index[id(n)] = first + len(steps)
        if marked is not None and marked(n):
            marks.append(first + len(steps))
        steps.append((n.op, tuple([index[id(o)] for o in n.operands]), n.shape, n.dtype,
                      n.attrs, n.value))
    outputs = tuple(None if o is None else index[id(o)] for o in outs)
    return Steps(nargs, tuple(constants), tuple(steps), outputs, tuple(marks))


def _made_here(n: Node) -> bool:
    """Whether an inner node may be one the recording made: not a value, not a node the
    user recorded at a line of their own."""
    return n.buffer is None and n.value is None and n.site is None


def _built(outs: list, inputs: dict, leaf: Callable, limit: Optional[int]) -> Optional[tuple]:
    """(inner nodes and FRESH leaves, operands before users; CONSTANT leaves) reached from
    `outs` without passing an input (`inputs`: ids), or None (see `record`)."""
    order: list = []
    constants: list = []
    state: dict = {}
    stack = list(outs)
    while stack:
        n = stack.pop()
        k = id(n)
        if k in inputs or state.get(k):
            continue
        if not n.operands:
            kind = leaf(n)
            if kind is None:
                return None
            (constants if kind is CONSTANT else order).append(n)
            state[k] = True
            continue
        if k in state:                      # its operands are placed: place it
            state[k] = True
            order.append(n)
            continue
        if not _made_here(n):
            return None
        state[k] = False
        stack.append(n)
        stack.extend(n.operands)
        if limit is not None and len(state) > limit:
            return None
    return order, constants


# ---- the one code generator ------------------------------------------------------------

class Code:
    """One function written line by line: `match` checks a pattern and binds local
    `v{i}` to the node at each position, `replay` makes steps' nodes, `build` compiles.
    `names` is the function's namespace: the constants the lines compare with."""

    def __init__(self, head: str, names: Optional[dict] = None) -> None:
        self.names: dict = {} if names is None else names
        self.lines = [f"def {head}:"]

    def add(self, line: str) -> None:
        self.lines.append("    " + line)

    def fail_if(self, tests: list) -> None:
        if tests:
            self.add(f"if {' or '.join(tests)}:")
            self.add("    return None")

    def shape(self, name: str, shape: Any) -> str:
        """A shape as a literal when it is a plain tuple of ints, else a named constant."""
        if type(shape) is tuple and all(type(d) is int for d in shape):
            return repr(shape)
        self.names[name] = shape
        return name

    def match(self, p: Pattern, roots: str, stops: str = "stops",
              dead: Optional[type] = None) -> list:
        """Lines binding `v{i}` to the node at each position of `p` in the graph of
        `roots` (an expression for the sequence of roots), returning None when the graph
        fails the pattern (another number of roots or of operands somewhere raises
        ValueError); the expressions of the arguments, by number. `stops`: the name of
        the set of nodes the reader stops at; `dead`: a buffer class standing for a value
        no longer there (a VALUE leaf holding one fails)."""
        names = self.names
        reached: set = set()
        self._unpack(p.outputs, roots, reached)
        for i, op, shape, dtype, attrs, slots in p.ops:
            v = f"v{i}"
            names[f"d{i}"], names[f"s{i}"] = dtype, shape
            test = [f"{v}.buffer is not None"] if p.leaf_if_buffer else []
            test += [f"{v}.op != {op!r}", self._type_test(v, i, shape, dtype)]
            if attrs:
                names[f"a{i}"] = attrs
                test.append(f"({v}.attrs is not a{i} and {v}.attrs != a{i})")
            else:
                test.append(f"{v}.attrs")           # any attribute: not this node
            self.fail_if(test)
            if slots:
                self._unpack(slots, f"{v}.operands", reached)
            else:
                self.fail_if([f"{v}.operands"])
        if p.stops and p.ops:
            self.add(f"if {stops}:")
            self.add(f"    for n in ({''.join(f'v{i}, ' for i, *_ in p.ops)}):")
            self.add(f"        if id(n) in {stops}:")
            self.add("            return None")
        args = [""] * p.nargs
        for leaf in p.leaves:
            self._leaf(leaf, args, stops, dead)
        if p.alike:
            alike = "".join(f"v{i}, " for i in p.alike)
            self.fail_if([f"len({{{alike}}}) != {len(p.alike)}"])
        return args

    def _type_test(self, v: str, i: int, shape: Any, dtype: Any) -> str:
        """The test that node `v` has another shape or dtype than position `i`: its
        interned type (`node_type`) found by identity -- a node used as an operand has
        it, so one read and one comparison -- else `_retyped` compares its shape and
        dtype (a node with no type yet, or one interned before the table was cleared).
        The slow case is a call, not lines: a check's code is read once per sync, and
        its size (not the comparisons run) is much of what a sync of a large graph costs
        (a cold read of its bytecode)."""
        try:
            self.names[f"t{i}"] = node_type(shape, dtype)
        except TypeError:                 # an unhashable shape: never interned
            return f"{v}.dtype is not d{i} or ({v}.shape is not s{i} and {v}.shape != s{i})"
        self.names["_retyped"] = _retyped
        return f"({v}.type is not t{i} and _retyped({v}, t{i}))"

    def _unpack(self, slots: tuple, source: str, reached: set) -> None:
        """`v.., v.., = source`, a slot holding a position met before checked to be the
        node found there."""
        targets, again = [], []
        for k, p in enumerate(slots):
            if p in reached:
                targets.append(f"o{k}")
                again.append(f"o{k} is not v{p}")
            else:
                reached.add(p)
                targets.append(f"v{p}")
        self.add(f"{''.join(t + ', ' for t in targets)}= {source}")
        self.fail_if(again)

    def _leaf(self, leaf: tuple, args: list, stops: str, dead: Optional[type]) -> None:
        i, kind, shape, dtype, extra, number = leaf
        v, names = f"v{i}", self.names
        names[f"d{i}"] = dtype
        if kind is VALUE:
            test = [f"b{number} is None", f"{v}.dtype is not d{i}",
                    f"{v}.shape != {self.shape(f's{i}', shape)}"]
            if dead is not None:
                names["_ARRAY"], names["_Dead"] = np.ndarray, dead
                test.append(f"type(b{number}) is not _ARRAY and isinstance(b{number}, _Dead)")
            self.add(f"b{number} = {v}.buffer")
            self.fail_if(test)
            args[number] = f"b{number}"
        elif kind is SCALAR:
            self.fail_if([f"{v}.buffer is not None", f"{v}.op != 'scalar'", f"{v}.operands",
                          f"{v}.dtype is not d{i}"])
            args[number] = f"{v}.value"
        elif kind is LITERAL:
            names[f"k{i}"], names[f"l{i}"] = extra
            # a kept constant is one node everywhere: found by identity first
            self.add(f"if {v} is not k{i} or {v}.buffer is not None:")
            self.add(f"    value = {v}.value")
            self.add(f"    if {v}.buffer is not None or {v}.op != 'constant' or {v}.operands"
                     f" or {v}.dtype is not d{i} or getattr(value, '_key', value) != l{i}:")
            self.add("        return None")
        elif kind is SHARED:
            names[f"k{i}"] = extra
            self.fail_if([f"{v} is not k{i}"])
        elif kind is TYPED:
            self.fail_if([f"{v}.operands", f"{v}.dtype is not d{i}",
                          f"{v}.shape != {self.shape(f's{i}', shape)}"])
        else:                                       # STOP
            self.fail_if([f"id({v}) not in {stops}", f"{v}.dtype is not d{i}",
                          f"{v}.shape != {self.shape(f's{i}', shape)}"])

    def replay(self, s: Steps) -> None:
        """Lines making one new node per step, in order: the node of ref r is local
        `v{r}`; refs below `s.nargs` (the placeholders) must be bound by lines before
        these, the constants' are bound here (in the namespace).

        Each node is `new_node` written inline (no call, no unpacking of a step, locals
        instead of a list). A copy shares the template's shape, dtype and attrs objects
        (nodes never change them), so a sync comparing them finds them by identity."""
        names = self.names
        names["_new"], names["_Node"] = object.__new__, Node
        for k, c in enumerate(s.constants):
            names[f"v{s.nargs + k}"] = c
        first = s.first
        for k, (op, refs, shape, dtype, attrs, value) in enumerate(s.steps):
            j = first + k
            names[f"s{j}"], names[f"d{j}"], names[f"a{j}"] = shape, dtype, attrs
            try:                          # the interned type, made once here
                names[f"t{j}"] = node_type(shape, dtype)
            except TypeError:             # an unhashable shape: interned when asked
                names[f"t{j}"] = None
            if value is not None:
                names[f"c{j}"] = value
            operands = "".join(f"v{r}, " for r in refs)
            self.add(f"n = _new(_Node); n.op = {op!r}; n.operands = ({operands}); "
                     f"n.shape = s{j}; n.dtype = d{j}; n.attrs = a{j}; n.buffer = None; "
                     f"n.value = {'None' if value is None else f'c{j}'}; n.sig = None; "
                     f"n.site = None; n.type = t{j}; v{j} = n")

    def refs(self, refs: Iterable[Optional[int]]) -> str:
        """'v3, None, v9' for the outputs `refs`."""
        return ", ".join("None" if r is None else f"v{r}" for r in refs)

    def build(self, name: str, what: str) -> Callable:
        """The function, compiled; `.source` keeps its text for a reader debugging a
        template. The namespace's constants are put in the code's own constants (read by
        a two-byte LOAD_CONST; a global's read is twelve bytes with its inline cache, a
        closure cell's is copied into the frame at every call): a large graph's check is
        read cold at every sync, where its size is much of its cost. Each name is
        written as a placeholder literal, compiled, and the literal swapped for the
        object."""
        source = "\n".join(self.lines) + "\n"
        marks = {k: f"\x00{k}" for k in self.names
                 if k.isidentifier() and not k.startswith("__")}
        text = _NAME.sub(lambda m: repr(marks[m.group(0)]) if m.group(0) in marks
                         else m.group(0), source) if marks else source
        with warnings.catch_warnings():      # `x is not '...'`: the placeholders
            warnings.simplefilter("ignore", SyntaxWarning)
            module = compile(text, f"<lazyarray {what}>", "exec")
        code = next(c for c in module.co_consts if type(c) is types.CodeType)
        objects = {mark: self.names[k] for k, mark in marks.items()}
        code = code.replace(co_consts=_swapped(code.co_consts, objects))
        fn = types.FunctionType(code, {"__builtins__": builtins}, name)
        fn.source = source
        return fn


_NAME = re.compile(r"'[^'\\]*'|[A-Za-z_][A-Za-z0-9_]*")   # a quoted op name is left whole


def _swapped(consts: tuple, objects: dict) -> tuple:
    """`consts` with each placeholder replaced by its object, inside the tuples the
    compiler folded too (`(v3, v5)` of two constants is one constant)."""
    return tuple(objects.get(c, c) if type(c) is str else
                 _swapped(c, objects) if type(c) is tuple else c for c in consts)


def _retyped(n: Node, t: Any) -> bool:
    """Whether node `n`, whose interned type is not `t`, has another shape or dtype than
    `t`; when it has the same, `n` takes `t` as its type (as `type_of` would: a type
    interned before the table was cleared stays valid), so later checks find it at once."""
    if n.dtype is not t.dtype or (n.shape is not t.shape and n.shape != t.shape):
        return True
    n.type = t
    return False


def copier(s: Steps, what: str, form: str = "list",
           mark: Optional[Callable[[Node], Any]] = None) -> Callable:
    """`copy(v0, v1, ...)`: the placeholders in, the outputs out (`form`: "list",
    "tuple", or "one" node), made by the steps; `mark(node)` repeats the mark of each
    marked step on its copy."""
    code = Code(f"copy({', '.join(f'v{i}' for i in range(s.nargs))})")
    code.replay(s)
    if s.marked:
        code.names["_mark"] = mark
        for j in s.marked:
            code.add(f"_mark(v{j})")
    outs = code.refs(s.outputs)
    code.add({"list": f"return [{outs}]", "tuple": f"return ({outs},)",
              "one": f"return {outs}"}[form])
    return code.build("copy", what)
