"""The nodes a function freshly built, in an order where operands come first: the one
walk the graph-copying caches (vjp_templates, walk_templates, graph_templates) make a
template from. Each says which leaves a template may hold and which inner nodes it may
copy; the walk stops at the function's inputs."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from .node import Node, node_type

CONSTANT, FRESH, BY_REF = "constant", "fresh", "by reference"


def built_nodes(outs: Iterable[Node], inputs: dict, leaf: Callable[[Node], Any],
                copyable: Callable[[Node], bool],
                limit: Optional[int] = None) -> Optional[tuple]:
    """(inner nodes and FRESH leaves, operands before users; CONSTANT leaves) reached from
    `outs` without passing an input (`inputs`: ids). `leaf(n)` says what an operand-less
    node is: CONSTANT (shared, kept by identity), FRESH (made again at each copy),
    BY_REF (neither list: the copy refers to the node itself) or None (no template);
    `copyable(n)` whether an inner node is one the function made. None when a node is
    refused or more than `limit` were visited."""
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
            if kind is CONSTANT:
                constants.append(n)
            elif kind is FRESH:
                order.append(n)
            state[k] = True
            continue
        if k in state:                      # its operands are placed: place it
            state[k] = True
            order.append(n)
            continue
        if not copyable(n):
            return None
        state[k] = False
        stack.append(n)
        stack.extend(n.operands)
        if limit is not None and len(state) > limit:
            return None
    return order, constants


def replay_lines(steps: Iterable[tuple], first: int, names: dict) -> list:
    """Python lines (in a function body) making one new node per step (op, operand refs,
    shape, dtype, attrs, value), in order: the node of ref r is local `v{r}`; refs below
    `first` (the template's inputs) must be bound by the caller's lines before these.
    `names` receives the constants the lines read (the function's namespace).

    Written out rather than looped over: a copy of a training step's backward pass makes
    most of the step's nodes, and straight-line code spends on each node only its nine
    stores (`new_node` inline: no call, no unpacking of a step, locals instead of a list;
    the interned type too, made once here).
    A copy shares the template's shape, dtype and attrs objects (nodes never change
    them), so a sync comparing them finds them by identity."""
    names["_new"], names["_Node"] = object.__new__, Node
    lines = []
    for k, (op, refs, shape, dtype, attrs, value) in enumerate(steps):
        j = first + k
        names[f"s{j}"], names[f"d{j}"], names[f"a{j}"] = shape, dtype, attrs
        try:
            names[f"t{j}"] = node_type(shape, dtype)
        except TypeError:                 # an unhashable shape: interned when asked
            names[f"t{j}"] = None
        if value is not None:
            names[f"c{j}"] = value
        operands = "".join(f"v{r}, " for r in refs)
        lines.append(f"    n = _new(_Node); n.op = {op!r}; n.operands = ({operands}); "
                     f"n.shape = s{j}; n.dtype = d{j}; n.attrs = a{j}; n.buffer = None; "
                     f"n.value = {'None' if value is None else f'c{j}'}; n.sig = None; "
                     f"n.site = None; n.type = t{j}; v{j} = n")
    return lines


def compiled(lines: list, names: dict, name: str, what: str) -> Callable:
    """The function `name` defined by `lines`, in namespace `names`; `.source` keeps its
    text for a reader debugging a template."""
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<lazyarray {what}>", "exec"), names)
    fn = names[name]
    fn.source = source
    return fn
