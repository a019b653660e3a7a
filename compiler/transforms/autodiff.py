"""Reverse-mode differentiation over traced nodes: the graph walk. (The graph-building
helpers that the primitives' vector-Jacobian products use are `compiler/graph/builders.py`.)

`vjp_graph(target, sources, seed)` walks back from `target` through the nodes that depend
on a source, calls each primitive's `vjp` and sums the cotangents that meet at a node. The
result is made of primitives applied to nodes, never of values: the backward pass is as
lazy as the forward pass, fuses with it, and can itself be differentiated (an outer tape
walks through the gradient graph like any other).

Conventions:

- only floating-point nodes carry cotangents; an integer or bool node stops the walk
  (its gradient is "none", as for JAX's float0);
- a node marked by `stop` is a leaf for the walk (`stop_gradient`);
- a materialized node whose operands were released (`Node.release`) is a leaf too: the
  graph behind a value computed while no tape was recording is forgotten.
"""
from __future__ import annotations

import weakref
from typing import Any, Iterable, Optional, Sequence

from ..hlo import dtypes as D
from .. import profile_hooks
from . import vjp_templates, walk_templates
from ..graph.node import Node, new_node
from ..primitive import NOT_DIFFERENTIABLE, PRIMITIVES, apply

# nodes the walk must not go through (made by stop_gradient)
_STOPPED: "weakref.WeakSet[Node]" = weakref.WeakSet()


def stop(node: Node) -> Node:
    """A node with `node`'s value through which no gradient flows.

    A materialized node gives a new leaf on the same buffer; a pending one gives a copy of
    its instruction (common-subexpression elimination merges the two) that the walk treats
    as a leaf. No new opcode reaches the HLO.
    """
    if node.buffer is not None:
        return Node("parameter", (), node.shape, node.dtype, {}, buffer=node.buffer)
    if node.op in ("constant", "scalar"):
        return node          # never a source: nothing to stop
    return _stopped_copy(node)


def is_stopped(node: Node) -> bool:
    """Whether `node` was made by `stop` (a copy of a graph that holds it must be too:
    compiler/transforms/graph_templates.py)."""
    return node in _STOPPED


def mark_stopped(node: Node) -> Node:
    """Mark a node made as a copy of a stopped one: the walk does not go through it."""
    _STOPPED.add(node)
    return node


def _stopped_copy(node: Node) -> Node:
    copy = new_node(node.op, node.operands, node.shape, node.dtype, node.attrs, node.value)
    copy.type = node.type              # (interned: the same shape and dtype)
    _STOPPED.add(copy)
    if profile_hooks.ACTIVE:        # a profile records: the copy is `node`'s op, at its line
        profile_hooks.ACTIVE.copied(node, copy)
    return copy


# ---- the walk -------------------------------------------------------------------------

def _carries_gradient(node: Node) -> bool:
    return _inexact(node.dtype)


def _inexact(dtype: Any) -> bool:
    """Floating point or complex; a tuple type (a while's, a conditional's) when any of
    its elements is."""
    if type(dtype) is tuple:
        return any(d.is_inexact for d in dtype)
    return dtype.is_inexact


def _topological(target: Node, blocked: set) -> list:
    """Nodes reachable from target (operands before users), not entering the nodes whose
    ids are in `blocked` (stopped nodes, and leaves the caller names)."""
    order: list = []
    state: dict = {}            # id -> False while its operands are visited, True once placed
    stack = [target]
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        k = id(node)
        done = state.get(k)
        if done is None:
            if node.operands and k not in blocked:
                state[k] = False
                push(node)
                extend(node.operands)
                continue
        elif done:
            continue
        state[k] = True
        order.append(node)
    return order


def _depends(order: list, sources: Iterable[Node], stopped: set) -> set:
    """ids of the float nodes through which some source reaches the target."""
    dep = {id(s) for s in sources if s is not None and _carries_gradient(s)}
    add = dep.add
    for node in order:
        operands = node.operands
        if not operands:                # a leaf depends on a source only by being one
            continue
        k = id(node)
        if k in dep or k in stopped:
            continue
        dtype = node.dtype
        if dtype not in _INEXACT and not (type(dtype) is tuple and _inexact(dtype)):
            continue
        for o in operands:
            if id(o) in dep:
                add(k)
                break
    return dep


_INEXACT = frozenset(D.FLOATS + D.COMPLEX)


def reaches(target: Node, sources: Sequence[Node]) -> bool:
    """Does a gradient path lead from any of `sources` (taken as leaves) to `target`? (not
    through stopped nodes; what PyTorch's `requires_grad` of a computed tensor says)."""
    stopped = {id(n) for n in _STOPPED} if len(_STOPPED) else set()
    blocked = stopped | {id(s) for s in sources}
    return id(target) in _depends(_topological(target, blocked), sources, stopped)


def vjp_graph(target: Node, sources: Sequence[Node], seed: Node,
              through_sources: bool = True) -> list:
    """Cotangents of `sources` for the cotangent `seed` of `target`: one node per source,
    None where a source does not reach the target (or is not floating point).

    `through_sources=False` treats the sources as leaves (the walk does not look behind
    them): for a vjp rule that differentiates a graph it built from its own operands."""
    return vjp_many([target], [seed], sources, through_sources)


def vjp_many(targets: Sequence[Node], seeds: Sequence[Optional[Node]], sources: Sequence[Node],
             through_sources: bool = True) -> list:
    """`vjp_graph` for several targets at once, each with its seed (None: no cotangent);
    the cotangents meeting at a node are summed, so shared work is differentiated once
    (a loop body's vjp, compiler/transforms/scan_vjp.py)."""
    for target, seed in zip(targets, seeds):
        if seed is not None and (seed.shape != target.shape or seed.dtype is not target.dtype):
            raise ValueError(f"gradient: the output gradient is {seed.dtype.short}"
                             f"{list(seed.shape)} but the target is {target.dtype.short}"
                             f"{list(target.shape)}")
    # ids of live stopped nodes: a node of this graph is alive, so its id cannot collide
    stopped = {id(n) for n in _STOPPED} if len(_STOPPED) else set()
    leaves = set() if through_sources else {id(s) for s in sources}
    pairs = [(t, s) for t, s in zip(targets, seeds) if s is not None]
    if not pairs:
        return [None] * len(sources)
    blocked = stopped | leaves
    single = len(pairs) == 1 and walk_templates.ENABLED[0] and not profile_hooks.ACTIVE
    if single:
        found = walk_templates.lookup(pairs[0][0], pairs[0][1], sources, blocked)
        if found is not None:
            return found
    order = _topological_many([t for t, _ in pairs], blocked)
    dep = _depends(order, sources, stopped)
    cts: dict = {}
    for target, seed in pairs:
        if id(target) in dep:
            _accumulate(cts, target, seed)
    if not cts:
        out = [None] * len(sources)
        if single:
            walk_templates.remember(order, blocked, pairs[0][0], pairs[0][1], sources, out)
        return out
    wanted = {id(s) for s in sources}
    found = {}
    typed = single
    for node in reversed(order):
        k = id(node)
        g = cts.pop(k, None)
        if g is None:
            continue
        if k in wanted:
            found[k] = g
        if not node.operands or k in stopped or k in leaves:
            continue
        typed = _propagate(node, g, dep, cts) and typed
    out = [found.get(id(s)) for s in sources]
    if typed:       # every vjp read only types: the next graph of this structure copies it
        walk_templates.remember(order, blocked, pairs[0][0], pairs[0][1], sources, out)
    return out


def _topological_many(targets: list, blocked: set) -> list:
    if len(targets) == 1:
        return _topological(targets[0], blocked)
    # one walk from a stand-in node whose operands are the targets, then dropped
    root = Node("tuple", tuple(targets), (), None, {})
    return _topological(root, blocked)[:-1]


class TupleCotangent:
    """The cotangent of one element of a tuple value: what `get_tuple_element`'s vjp
    (compiler/primitives/control.py) gives its operand; the walk gathers them into one
    list per tuple (`_accumulate`)."""

    __slots__ = ("index", "value")

    def __init__(self, index: int, value: Any) -> None:
        self.index, self.value = index, value


def _accumulate(cts: dict, o: Node, c: Any) -> None:
    """Add cotangent `c` of node `o` to what `cts` holds for it: a tuple value's elements
    (TupleCotangent, from get_tuple_element) gather into a list, one entry per element."""
    if type(c) is not Node and isinstance(c, TupleCotangent):
        prev = cts.get(id(o))
        if prev is None:
            prev = cts[id(o)] = [None] * len(o.dtype)
        old = prev[c.index]
        prev[c.index] = c.value if old is None else apply("add", old, c.value)
        return
    prev = cts.get(id(o))
    cts[id(o)] = c if prev is None else apply("add", prev, c)


def _conj(x: Optional[Node]) -> Optional[Node]:
    return apply("conj", x) if x is not None and x.dtype.is_complex else x


def _by_type(vjp: Any, g: Node, node: Node, operands: tuple, attrs: dict,
             wanted: list) -> Any:
    """A vjp that reads only types: copied from its template when this walk (or an
    earlier step's) has met the same node types before (compiler/transforms/vjp_templates.py)."""
    key = vjp_templates.key_of(node, tuple(wanted))
    template = vjp_templates.lookup(key) if key is not None else None
    if template:
        return vjp_templates.instantiate(template, g, node)
    outs = vjp(g, node, *operands, **attrs)
    if template is False:
        vjp_templates.remember(key, g, node, outs)
    return outs


def _propagate(node: Node, g: Node, dep: set, cts: dict) -> bool:
    """Add the cotangents of `node`'s operands to `cts`; True when what it built (if
    anything) is a function of types alone (compiler/transforms/walk_templates.py)."""
    operands = node.operands
    wanted = [id(o) in dep for o in operands]
    if True not in wanted:
        return True
    prim = PRIMITIVES[node.op]
    vjp = prim.vjp
    if vjp is NOT_DIFFERENTIABLE:
        return True
    if vjp is None:
        raise NotImplementedError(f"gradient: primitive {node.op!r} has no vector-Jacobian "
                                  "product (and is not marked NOT_DIFFERENTIABLE)")
    attrs = node.attrs
    if prim.vjp_partial:            # it skips the cotangents the walk does not need
        attrs = {**attrs, "wanted": tuple(wanted)}
    dtype = node.dtype
    typed = False
    if type(dtype) is tuple:        # a while/conditional: g lists its elements' cotangents
        outs = vjp(g, node, *operands, **attrs)
    elif prim.vjp_by_type and not dtype.is_complex:
        outs = _by_type(vjp, g, node, operands, attrs, wanted)
        typed = True
    elif dtype.is_complex and prim.holomorphic:
        # cotangents are conjugate-Wirtinger (PyTorch's convention: dL/dx + i dL/dy), and a
        # holomorphic f has the cotangent g conj(f'(z)) = conj(conj(g) f'(z))
        outs = [_conj(c) for c in vjp(_conj(g), node, *operands, **attrs)]
    else:
        outs = vjp(g, node, *operands, **attrs)
    if profile_hooks.ACTIVE:        # a profile records: these nodes are `node`'s backward
        profile_hooks.ACTIVE.backward(node, outs)
    if len(outs) != len(operands):
        raise AssertionError(f"vjp of {node.op} returned {len(outs)} cotangents for "
                             f"{len(operands)} operands")
    for o, c, want in zip(operands, outs, wanted):
        if c is None or not want:
            continue
        if type(o.dtype) is not tuple and (c.shape != o.shape or c.dtype is not o.dtype):
            raise AssertionError(f"vjp of {node.op}: cotangent {c.dtype.short}{list(c.shape)} "
                                 f"for operand {o.dtype.short}{list(o.shape)}")
        _accumulate(cts, o, c)
    return typed
