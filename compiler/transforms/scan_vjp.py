"""Reverse mode through control flow: the vjp of a counted `while` (what `scan` and
`fori_loop` record) and of a `conditional`. Both build new control-flow ops whose
sub-computations are the original ones inlined and differentiated, so the backward pass
is a loop (or a branch) too, compiled once like the forward one.

A counted while (attribute `scan = (kind, nc, ny)`) has the state
`[i, n, carry (nc values), ys (ny stacked outputs), captured values...]`: i counts 0..n-1,
the body writes row i of each ys and passes the captured values through. Its vjp:

1. a forward loop again, which also stores each step's carry (all of it: integer carries
   such as a position vary too) in stacks of n rows -- so n, the trip count, must be
   known when the gradient is built (a Python int, or a value computed by then);
2. a reverse loop, j = n-1 .. 0, over the cotangents of the float state: it rebuilds
   step j's state (the carry from the stacks; ys from any value, since a body only writes
   into ys, linearly; the captured values as they are), differentiates the body there
   (compiler/transforms/autodiff.py `vjp_many`) and replaces the cotangents with the body's vjp.
   A captured value's cotangent accumulates over the steps (the body passes it through,
   and the pass-through's cotangent adds to the use's).
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..hlo import dtypes as D
from ..hlo.computation import build_computation, find_captured, inline, placeholders
from ..hlo.module import Module
from ..graph.node import Node, kept_constant
from ..primitive import apply


def _zeros(like: Any) -> Node:
    return apply("broadcast_in_dim", kept_constant(0, like.dtype), shape=tuple(like.shape),
                 broadcast_dimensions=())


def _loop(init: list, ph: list, pred: Node, new_state: list) -> Node:
    """A while over `init` whose condition computes `pred` and whose body computes
    `new_state` from the placeholders `ph`; values they read from outside (a vjp rule's
    runtime scalars) become operands passed through."""
    cap = find_captured(ph, [pred])
    seen = {id(n) for n in cap}
    cap += [n for n in find_captured(ph, new_state) if id(n) not in seen]
    cond = build_computation("cond", list(ph) + cap, [pred])
    body = build_computation("body", list(ph) + cap, list(new_state) + cap)
    return apply("while", *init, *cap, cond=cond, body=body, scan=None)


def concrete_int(node: Node, what: str) -> int:
    """The value of an integer scalar node known now: a Python scalar, a materialized
    value, a constant, or a small graph of those (evaluated with the references)."""
    from ..hlo.computation import evaluate
    from ..graph.trace import capture
    try:
        cap = capture([node])
        return int(evaluate(cap.module(), [np.asarray(a) for a in cap.args])[0])
    except Exception as e:
        raise NotImplementedError(
            f"gradient: {what} needs its trip count when the gradient is built, and it is "
            f"not known on the host ({e}); give the loop bounds as Python ints, or bounds "
            "held in host memory (a CPU tensor)")


def _step_rows(stack: Node, j: Node) -> Node:
    """stack[j] for a traced j (a dynamic slice, reshaped to one row)."""
    zero = kept_constant(0, D.int32)
    row = apply("dynamic_slice", stack, j, *([zero] * (stack.ndim - 1)),
                slice_sizes=(1,) + tuple(stack.shape[1:]))
    return apply("reshape", row, shape=tuple(stack.shape[1:]))


def _put_row(stack: Node, value: Node, i: Node) -> Node:
    zero = kept_constant(0, D.int32)
    row = apply("reshape", value, shape=(1,) + tuple(value.shape))
    return apply("dynamic_update_slice", stack, row, i, *([zero] * (stack.ndim - 1)))


def _forward_with_carries(operands: Sequence[Node], cond: Module, body: Module, nc: int,
                          n: int) -> list:
    """The stacks (n rows each) of the carry at the start of every step."""
    m = len(operands)
    stacks0 = [apply("broadcast_in_dim", kept_constant(0, operands[2 + c].dtype),
                     shape=(max(n, 1),) + tuple(operands[2 + c].shape), broadcast_dimensions=())
               for c in range(nc)]
    ph = placeholders(list(operands) + stacks0)
    state, stacks = ph[:m], ph[m:]
    new_state = inline(body, state)
    new_stacks = [_put_row(s, state[2 + c], state[0]) for c, s in enumerate(stacks)]
    w = _loop(list(operands) + stacks0, ph, inline(cond, state)[0], new_state + new_stacks)
    return [apply("get_tuple_element", w, index=m + c) for c in range(nc)]


def while_scan_vjp(g: list, out: Node, operands: Sequence[Node], cond: Module, body: Module,
                   scan: tuple) -> list:
    """Cotangents of a counted while's operands for the cotangents `g` of its results
    (None where none flows); see the module docstring."""
    kind, nc, _ny = scan
    n = concrete_int(operands[1], f"the gradient of la.{'fori_loop' if kind == 'fori' else 'scan'}")
    m = len(operands)
    floats = [k for k, o in enumerate(operands) if o.dtype.is_inexact]
    if n <= 0 or not floats:
        return [g[k] if k in floats else None for k in range(m)]
    stacks = _forward_with_carries(operands, cond, body, nc, n)
    seeds = [g[k] if g[k] is not None else _zeros(operands[k]) for k in floats]
    # the reverse loop's state: j, the float cotangents, then (passed through) the
    # primal state and the stacks
    j0 = apply("subtract", operands[1], kept_constant(1, D.int32))
    init = [j0] + seeds + list(operands) + stacks
    ph = placeholders(init)
    j, gs = ph[0], ph[1:1 + len(floats)]
    primal, st = ph[1 + len(floats):1 + len(floats) + m], ph[1 + len(floats) + m:]
    at_j = list(primal)
    at_j[0] = j
    for c in range(nc):
        at_j[2 + c] = _step_rows(st[c], j)
    outs = inline(body, at_j)
    from .autodiff import vjp_many
    cts = vjp_many([outs[k] for k in floats], list(gs), [at_j[k] for k in floats],
                   through_sources=False)
    new_gs = [c if c is not None else _zeros(at_j[k]) for c, k in zip(cts, floats)]
    new_j = apply("subtract", j, kept_constant(1, D.int32))
    pred = apply("compare", j, kept_constant(0, D.int32), direction="GE")
    w = _loop(init, ph, pred, [new_j] + new_gs + list(primal) + list(st))
    result = [None] * m
    for slot, k in enumerate(floats):
        result[k] = apply("get_tuple_element", w, index=1 + slot)
    return result


def conditional_vjp(g: list, out: Node, index: Node, args: Sequence[Node],
                    branches: tuple) -> list:
    """Cotangents of a conditional's operands (after the index): a conditional over the
    branches' vjps, each differentiating its branch at the operands."""
    floats = [k for k, a in enumerate(args) if a.dtype.is_inexact]
    outs_types = [(s, d) for s, d in zip(out.shape, out.dtype)]
    seeds = [g[k] if g[k] is not None else
             _zeros(Node("parameter", (), s, d, {})) for k, (s, d) in enumerate(outs_types)]
    live = [k for k, (s, d) in enumerate(outs_types) if d.is_inexact]
    if not floats or not live:
        return [None] * len(args)
    from .autodiff import vjp_many
    traced = []
    for b in branches:
        ph = placeholders(list(args) + [seeds[k] for k in live])
        a, gs = ph[:len(args)], ph[len(args):]
        res = inline(b, a)
        cts = vjp_many([res[k] for k in live], list(gs), [a[k] for k in floats],
                       through_sources=False)
        traced.append((ph, [c if c is not None else _zeros(a[k]) for c, k in zip(cts, floats)]))
    caps: list = []
    for ph, outs in traced:
        seen = {id(n) for n in caps}
        caps += [n for n in find_captured(ph, outs) if id(n) not in seen]
    mods = tuple(build_computation(f"branch{k}", list(ph) + caps, outs)
                 for k, (ph, outs) in enumerate(traced))
    c = apply("conditional", index, *args, *[seeds[k] for k in live], *caps, branches=mods)
    result = [None] * len(args)
    for slot, k in enumerate(floats):
        result[k] = apply("get_tuple_element", c, index=slot)
    return result
