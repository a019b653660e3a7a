"""From pending graph nodes to a module: the walk that every sync makes.

`capture` walks back from the nodes to be computed, stopping at leaves (nodes holding a
buffer, scalars, constants). It yields the structural key (what the executable cache is
keyed by: structure, shapes, dtypes, attributes and kept constants, never data) and the
runtime arguments in parameter order. Only on a cache miss is a `Module` built from it.

Donation. With `donate` (a set of offered leaves: values their owner replaced, such as an
optimizer's old parameters) the capture also picks the offered parameter leaves whose
buffers the program may overwrite (`Capture.donated`, parameter numbers; part of the key,
since the buffer plan depends on it). Only offered leaves are candidates, so that graphs
over short-lived temporaries keep one key whatever the user holds. A leaf is donated
only when nothing outside the captured
graph can read it again: the node is referenced only by the operand tuples of captured
nodes (plus the capture's own bookkeeping), and its buffer object only by the node. Both
are checked with `sys.getrefcount` against a baseline measured on a throw-away capture at
import (so the check follows this file's own bookkeeping), which is conservative: any
extra holder -- a live Tensor, a tape, the user's `np.asarray(t)` -- keeps the leaf.
After the run the caller replaces each donated node's buffer with `DonatedBuffer`, which
raises when read.
"""
from __future__ import annotations

import sys
import weakref
from typing import Any

import numpy as np

from ..hlo.module import Instruction, Module
from .node import Node
from .template import LITERAL, SCALAR, VALUE, Cache, Code, Pattern


class DonatedBuffer:
    """Stands in for a buffer given to a program to overwrite: reading it is an error."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple, dtype: Any) -> None:
        self.shape, self.dtype = shape, dtype

    def _fail(self) -> None:
        raise RuntimeError(f"this {self.dtype.short}{list(self.shape)} value was donated to a "
                           "later program (its buffer now holds that program's result); keep "
                           "a reference to the tensor to read it after the update")

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        self._fail()

    def __float__(self) -> float:      # a 0-d buffer may be read as a Python number
        self._fail()

    __int__ = __index__ = __complex__ = __float__

    def __repr__(self) -> str:
        return f"<donated buffer {self.dtype.short}{list(self.shape)}>"


class Capture:
    __slots__ = ("order", "positions", "outputs", "key", "args", "donated", "donated_nodes")

    def __init__(self, order: list, positions: dict, outputs: tuple, key: tuple, args: list,
                 donated: frozenset = frozenset(), donated_nodes: tuple = ()):
        self.order = order          # nodes, operands before users
        self.positions = positions  # node -> position in order
        self.outputs = outputs      # positions of the requested nodes
        self.key = key
        self.args = args            # a buffer or a scalar per parameter, by number
        self.donated = donated      # parameter numbers whose buffers the program may reuse
        self.donated_nodes = donated_nodes

    def module(self, name: str = "module") -> Module:
        instructions = []
        number = 0
        pos = self.positions
        for n in self.order:
            if n.buffer is not None or n.op in ("parameter", "scalar"):
                ins = Instruction("parameter", (), n.shape, n.dtype, {"number": number})
                number += 1
            elif n.op == "constant":
                ins = Instruction("constant", (), n.shape, n.dtype, {"value": n.value})
            else:
                ins = Instruction(n.op, tuple(pos[o] for o in n.operands), n.shape, n.dtype, n.attrs)
            instructions.append(ins)
        return Module(name, instructions, self.outputs)


# ---- keys ----------------------------------------------------------------------------
#
# A key is one flat tuple: for each node in order its fields, then the outputs' positions
# (and, when the program may overwrite inputs, their numbers):
#
#   a buffer leaf      "P", shape, dtype
#   a runtime scalar   "S", dtype
#   a kept constant    "C", dtype, the literal's content (dtype string, shape, bytes)
#   an op              name, shape, dtype, attributes (as items), operand count,
#                      the operands' positions
#
# The walk only appends what the nodes hold, creating nothing per node but the attribute
# items: nodes are new at every step of a loop, so anything made per node (a signature
# interned in a table) would be made again at every sync. Hashing the key and comparing it
# with the stored one on a hit are then the only passes over shapes and attributes.

_LEAF_TAGS = {"P": 2, "S": 1, "C": 2}    # fields after the tag


def describe_key(key: tuple) -> tuple:
    """A key in words, one entry per node and the outputs last, as `metrics.explain_change`
    reads it: ("P", shape, dtype) for a buffer, ("S", dtype) for a scalar, ("C", dtype,
    value) for a kept constant, ((op, shape, dtype, attrs), operand positions) for an op,
    dtypes by their short names; a donation key's ("donated", numbers) after the outputs."""
    out: list = []
    i, n = 0, len(key)
    while i < n and type(key[i]) is str:
        tag = key[i]
        fields = _LEAF_TAGS.get(tag)
        if fields is not None:
            entry = key[i + 1:i + 1 + fields]
            if tag == "P":
                out.append(("P", entry[0], _short(entry[1])))
            else:
                out.append((tag, _short(entry[0])) + entry[1:])
            i += 1 + fields
            continue
        shape, dtype, attrs, count = key[i + 1:i + 5]
        out.append(((tag, shape, _short(dtype), attrs), key[i + 5:i + 5 + count]))
        i += 5 + count
    return tuple(out) + key[i:]


def _short(dtype: Any) -> Any:
    # a tuple type (a while's or a conditional's result): its elements' names
    return dtype.short if type(dtype) is not tuple else tuple(d.short for d in dtype)


def capture(outputs: list, donate: Any = None) -> Capture:
    """Walk back from `outputs` (nodes): every sync does this, so the walk is written for
    speed (a cached sync of a small program is mostly this and the run): one pass that
    orders the nodes, numbers the leaves and appends each node's fields to the key."""
    positions: dict = {}
    order: list = []
    key: list = []
    args: list = []
    leaves: list = []
    seen = positions.get
    place, add_keys, add_arg = order.append, key.extend, args.append
    for root in outputs:
        stack = [root]
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            n = pop()
            p = seen(n)
            if p is None:
                if n.buffer is None and n.operands:
                    # first visit: come back to n after its operands (-1 marks "expanded";
                    # operands already placed are skipped when popped)
                    positions[n] = -1
                    push(n)
                    extend(n.operands)
                    continue
            elif p >= 0:
                continue
            positions[n] = len(order)
            place(n)
            buf = n.buffer
            if buf is not None:
                if type(buf) is not _ARRAY and isinstance(buf, DonatedBuffer):  # or failed
                    buf._fail()
                add_keys(("P", n.shape, n.dtype))
                leaves.append(n)
                add_arg(buf)
                continue
            ops = n.operands
            attrs = n.attrs
            if ops:
                if len(ops) == 1:
                    add_keys((n.op, n.shape, n.dtype, tuple(attrs.items()) if attrs else (), 1,
                              positions[ops[0]]))
                elif len(ops) == 2:
                    add_keys((n.op, n.shape, n.dtype, tuple(attrs.items()) if attrs else (), 2,
                              positions[ops[0]], positions[ops[1]]))
                else:
                    add_keys((n.op, n.shape, n.dtype, tuple(attrs.items()) if attrs else (),
                              len(ops)))
                    add_keys(map(positions.__getitem__, ops))
                continue
            op = n.op
            if op == "scalar":
                add_keys(("S", n.dtype))
                add_arg(n.value)
            elif op == "constant":
                # the literal's content key, not the Literal: hashing the key then calls no
                # Python __hash__ (dtype string, shape, bytes)
                value = n.value
                add_keys(("C", n.dtype, getattr(value, "_key", value)))
            elif op == "parameter":
                raise ValueError("a parameter leaf without a buffer cannot be computed")
            else:                      # an op without operands (iota)
                add_keys((op, n.shape, n.dtype, tuple(attrs.items()) if attrs else (), 0))
    # the walk's locals must not hold a leaf or its buffer: the donation check below
    # counts references against a baseline
    n = buf = None
    out = tuple([positions[n] for n in outputs])
    key.append(out)
    if not donate or not leaves:
        return Capture(order, positions, out, tuple(key), args)
    numbers = {id(a): k for k, a in enumerate(args)}
    offered = [n for n in leaves if n in donate]
    del leaves
    chosen = _unreferenced(order, offered, positions, args)
    donated = frozenset(numbers[id(n.buffer)] for n in chosen)
    if donated:
        key.append(("donated", tuple(sorted(donated))))
    return Capture(order, positions, out, tuple(key), args, donated, tuple(chosen))


_ARRAY = np.ndarray         # the usual buffer: checked before the isinstance below


def _graph_uses(order: list, leaves: set) -> dict:
    """id(leaf) -> how many operand slots of captured op nodes name it, for the leaves
    whose ids are in `leaves`."""
    uses: dict = {}
    for n in order:
        if n.buffer is None:
            for o in n.operands:
                k = id(o)
                if k in leaves:
                    uses[k] = uses.get(k, 0) + 1
    return uses


def _unreferenced(order: list, leaves: list, positions: dict, args: list) -> list:
    """The leaves (and their buffers) that nothing outside the capture references (see
    the module docstring); `positions` and `args` are held here so the counts include
    them just as the baseline's did."""
    uses = _graph_uses(order, {id(n) for n in leaves})
    out = []
    for n in leaves:
        counts = (sys.getrefcount(n) - uses.get(id(n), 0), sys.getrefcount(n.buffer))
        if _BASELINE is None:          # measuring: see _measure_baseline
            _SEEN.append(counts)
        elif counts == _BASELINE:
            out.append(n)
    return out


_BASELINE = None
_SEEN: list = []


def _measure_baseline() -> tuple:
    """The counts `_unreferenced` sees for a leaf held only by one user in the graph,
    measured by capturing such a graph."""
    from ..hlo import dtypes as D
    leaf = Node("parameter", (), (), D.float32, {}, buffer=object())
    user = Node("negative", (leaf,), (), D.float32, {})
    offered = weakref.WeakSet([leaf])
    del leaf
    capture([user], donate=offered)
    return _SEEN.pop()


_BASELINE = _measure_baseline()


# ---- the donation's second check: nodes between a donated leaf and the outputs ---------

def donation_safe(cap: Capture) -> bool:
    """False when a node of the program that is not one of its outputs but depends on a
    donated leaf is held outside the program (by a live tensor that an interrupt at the
    wrong moment kept out of `pending`): once the leaf's buffer is overwritten, that node
    could never be computed again. Checked by reference count against a baseline
    measured on a graph where no one else holds it (`_MID_BASELINE`)."""
    dependent = {id(n) for n in cap.donated_nodes}
    outputs = {id(cap.order[p]) for p in cap.outputs}
    # operand slots naming each dependent node: its users all depend on it too (the order
    # puts operands first), so counting the dependent operands of dependent users counts
    # every use
    uses: dict = {}
    inner = []
    for n in cap.order:
        ops = n.operands
        if not ops or n.buffer is not None:
            continue
        reached = False
        for o in ops:
            k = id(o)
            if k in dependent:
                uses[k] = uses.get(k, 0) + 1
                reached = True
        if reached:
            k = id(n)
            dependent.add(k)
            if k not in outputs:
                inner.append(n)
    n = o = None          # the counts below must not include this walk's own references
    for n in inner:
        count = sys.getrefcount(n) - uses.get(id(n), 0)
        if _MID_BASELINE is None:
            _SEEN.append(count)
        elif count > _MID_BASELINE:
            return False
    return True


_MID_BASELINE = None


def _measure_mid_baseline() -> int:
    """The count `donation_safe` sees for an inner node held only by its user."""
    from ..hlo import dtypes as D
    leaf = Node("parameter", (), (), D.float32, {}, buffer=object())
    offered = weakref.WeakSet([leaf])
    out = Node("negate", (Node("negate", (leaf,), (), D.float32, {}),), (), D.float32, {})
    del leaf
    cap = capture([out], donate=offered)
    assert cap.donated_nodes, "the baseline graph must donate its leaf"
    donation_safe(cap)
    return _SEEN.pop()


_MID_BASELINE = _measure_mid_baseline()


# ---- templates: a repeated graph matched against the last capture ---------------------
#
# A loop syncs graphs of one structure over and over. A `Template` holds a capture's
# structure as a pattern (compiler/graph/template.py: the one template mechanism, its
# validity rule and its code generator); `bind` checks new root nodes against it, from
# the roots down, and gives the runtime arguments. The pattern checks all that the key
# holds (op, shape, dtype, attributes, kept constants, which nodes are leaves, which
# operands are the same node), so a graph it accepts has the key of the capture it was
# made from; anything else (a node computed since, another scalar kind, a donated leaf)
# makes it answer None, and the caller captures as usual.
#
# Donation (a training step: the optimizer offers its old parameters and state). A
# capture's key names the leaves it donates, and the runtime drops the donation when
# `donation_safe` says no; so with the offered set, `bind` answers for the graph only
# when capture would donate exactly the template's leaves and `donation_safe` would say
# yes. Both checks are by reference count, with what they need worked out once here:
# each buffer leaf's uses in the graph (the operand slots naming it), and the positions
# of the inner nodes (not outputs, depending on a donated leaf) with their uses summed.
# Each count is at least its baseline (the holders in the baseline are always there),
# so the inner nodes' counts summed equal their baselines summed exactly when each
# equals its own: one sum in C instead of a loop. The baselines are measured through
# `bind` itself on throw-away graphs (`_measure_bind_baselines`), as capture's are.

_CODE = Cache(256)        # capture key -> the generated check (one per structure)


def _kind(n: Node) -> "str | None":
    """What a sync's capture makes of a node: a buffer, a runtime scalar or a kept
    constant is a leaf (a template position of that kind), anything else an op."""
    if n.buffer is not None:
        return VALUE
    if not n.operands:
        if n.op == "scalar":
            return SCALAR
        if n.op == "constant":
            return LITERAL
    return None


def _check(p: Pattern) -> Any:
    """`check(roots)` -> (the nodes by position, the arguments), or None: the pattern's
    check as code (compiler/graph/template.py `Code.match`)."""
    code = Code("check(roots)")
    args = code.match(p, "roots", dead=DonatedBuffer)
    code.add(f"order = ({''.join(f'v{i}, ' for i in range(p.size))})")
    code.add(f"return order, [{', '.join(args)}]")
    return code.build("check", "sync template")


class Template:
    """A capture's structure as a pattern (buffers and runtime scalars its arguments, kept
    constants by value); for the donation checks, each buffer leaf's uses and whether it
    was donated, and the inner nodes that depend on a donated leaf. `check`: the
    pattern's check, one function per structure."""

    __slots__ = ("pattern", "donated", "leaves", "inner", "inner_uses", "check")

    def __init__(self, cap: Capture) -> None:
        p = self.pattern = Pattern(cap.order, cap.positions, cap.outputs, _kind,
                                   leaf_if_buffer=True)
        self.donated = cap.donated
        self._plan_donation(p, {cap.positions[n] for n in cap.donated_nodes}, cap.outputs)
        check = _CODE.get(cap.key)
        self.check = check if check is not None else _CODE.put(cap.key, _check(p))

    @property
    def alike(self) -> tuple:
        """The positions whose nodes must be distinct (compiler/graph/template.py)."""
        return self.pattern.alike

    def _plan_donation(self, p: Pattern, donated: set, outputs: tuple) -> None:
        """`leaves`: (position, uses, donated?) per buffer leaf; `inner`: the positions of
        the op nodes that depend on a donated leaf and are not outputs (as
        `donation_safe` finds them), `inner_uses` their uses summed."""
        uses: dict = {}
        dependent = set(donated)
        inner = []
        for i, _, _, _, _, slots in reversed(p.ops):       # operands before users
            for q in slots:
                uses[q] = uses.get(q, 0) + 1
            if dependent.intersection(slots):
                dependent.add(i)
                if i not in outputs:
                    inner.append(i)
        self.leaves = tuple((i, uses.get(i, 0), i in donated) for i in p.positions_of(VALUE))
        self.inner = tuple(inner)
        self.inner_uses = sum(uses.get(i, 0) for i in inner)

    def bind(self, roots: list, offered: Any = None) -> "Bound | None":
        """The arguments of the template's program for `roots`, or None when their graph
        is not the template's. `offered`: the offered leaves when the sync may donate
        (weak references, as `weakref.WeakSet.data` holds them); then also None unless
        capture would donate exactly the template's leaves, safely."""
        try:
            found = self.check(roots)
        except ValueError:        # another number of roots or of operands somewhere
            return None
        if found is None:
            return None
        order, args = found
        if offered is None:
            return None if self.donated else Bound(order, args)
        chosen = self._donations(order, offered)
        if chosen is None:
            return None
        return Bound(order, args, chosen, self.donated)

    def _donations(self, order: list, offered: Any) -> "tuple | None":
        """The leaves capture would donate, when they are the template's and
        `donation_safe` would accept them; else None."""
        base = _BIND_BASELINE
        chosen = []
        for i, uses, donated in self.leaves:
            n = order[i]
            free = False
            if _ref(n) in offered:
                counts = (sys.getrefcount(n) - uses, sys.getrefcount(n.buffer))
                if base is None:          # measuring: see _measure_bind_baselines
                    _SEEN.append(counts)
                free = counts == base
            if free is not donated:
                return None
            if free:
                chosen.append(n)
        n = None
        if self.inner:
            refs = self._inner_refs(order)
            if _INNER_BASELINE is None:   # measuring
                _SEEN.append(refs)
                return None
            if refs != len(self.inner) * _INNER_BASELINE:
                return None
        return tuple(chosen)

    def _inner_refs(self, order: list) -> int:
        """The inner nodes' reference counts summed, less their uses in the graph."""
        return sum(map(sys.getrefcount, map(order.__getitem__, self.inner))) - self.inner_uses


_ref = weakref.ref


class Bound:
    """What a sync needs of a graph a `Template` accepted: the nodes in the template's
    order, the arguments, the donated leaves (and their parameter numbers); the
    positions (for the tape's check) made when asked."""

    __slots__ = ("order", "args", "donated_nodes", "donated", "_positions")

    def __init__(self, order: list, args: list, donated_nodes: tuple = (),
                 donated: frozenset = frozenset()) -> None:
        self.order = order
        self.args = args
        self.donated_nodes = donated_nodes
        self.donated = donated
        self._positions = None

    @property
    def positions(self) -> dict:
        if self._positions is None:
            order = self.order
            self._positions = dict(zip(order, range(len(order))))
        return self._positions


_BIND_BASELINE = None
_INNER_BASELINE = None


def _chain_graph(inner: int) -> tuple:
    """leaf -> `inner` negations -> the output negation, and the leaf offered."""
    from ..hlo import dtypes as D
    leaf = Node("parameter", (), (), D.float32, {}, buffer=object())
    node = leaf
    for _ in range(inner + 1):
        node = Node("negate", (node,), (), D.float32, {})
    return node, weakref.WeakSet([leaf])


def _measure_bind_baselines() -> tuple:
    """(the counts `Template._donations` sees for a donated leaf held only by its user,
    the count `_inner_refs` sees for each inner node held only by its user), measured
    through `bind`: a template of a donating capture binds a fresh graph of the same
    structure (the check answers None while it measures)."""
    global _BIND_BASELINE
    seen = []
    for inner in (1, 3):
        out, offered = _chain_graph(inner)
        template = Template(capture([out], donate=offered))
        assert template.donated and len(template.inner) == inner
        out, offered = _chain_graph(inner)
        if _BIND_BASELINE is None:
            assert template.bind([out], offered.data) is None
            _BIND_BASELINE = _SEEN.pop()
        assert template.bind([out], offered.data) is None
        seen.append(_SEEN.pop())
    assert seen[1] == 3 * seen[0], f"inner nodes' counts differ: {seen}"
    return _BIND_BASELINE, seen[0]


_BIND_BASELINE, _INNER_BASELINE = _measure_bind_baselines()
