"""einsum: Einstein summation lowered to the HLO's own ops.

Each operand first loses what only it has: a label repeated inside one operand becomes
its diagonal, a label no other operand nor the output names is summed away. The operands
are then contracted left to right, each pair with one `dot_general` whose batch
dimensions are the labels both share and still need (by a later operand or the output)
and whose contracting dimensions are the labels both share and nothing later needs. A
final transpose puts the labels in the output's order. So `ij,jk->ik` is one matrix
product, `bij,bjk->bik` one batched product, and gradients come from those primitives.
"""
from __future__ import annotations

from typing import Any

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .promotion import as_node, broadcast_to, convert, scalar, shape_str

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _error(subscripts: str, why: str) -> ValueError:
    return ValueError(f"einsum({subscripts!r}): {why}")


def _split_terms(subscripts: str, count: int) -> tuple:
    """('ij', 'jk'), 'ik' or None when the output is implicit."""
    text = subscripts.replace(" ", "")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != count:
        raise _error(subscripts, f"{len(terms)} operand terms for {count} operands")
    for t in terms + ([out] if arrow else []):
        rest = t.replace("...", "")
        if "." in rest or any(c not in _LETTERS for c in rest):
            raise _error(subscripts, f"term {t!r} may hold only letters and one '...'")
    return terms, (out if arrow else None)


def _expand_ellipsis(subscripts: str, term: str, ndim: int, fill: str) -> list:
    """The term as one label per dimension; '...' stands for the leading unnamed ones."""
    if "..." not in term:
        if len(term) != ndim:
            raise _error(subscripts, f"term {term!r} names {len(term)} dimensions, its operand "
                                     f"has {ndim}")
        return list(term)
    head, _, tail = term.partition("...")
    n = ndim - len(head) - len(tail)
    if n < 0:
        raise _error(subscripts, f"term {term!r} names more dimensions than its operand's {ndim}")
    return list(head) + list(fill[len(fill) - n:]) + list(tail)


def _labels(subscripts: str, operands: list) -> tuple:
    terms, out = _split_terms(subscripts, len(operands))
    used = set("".join(terms) + (out or ""))
    # the dimensions under '...' get labels of their own (characters no term uses)
    spare = [chr(c) for c in range(0x100, 0x200) if chr(c) not in used]
    most = max([x.ndim - len(t.replace("...", "")) for t, x in zip(terms, operands)
                if "..." in t] or [0])
    fill = "".join(spare[:most])
    per_operand = [_expand_ellipsis(subscripts, t, x.ndim, fill) for t, x in zip(terms, operands)]
    if out is None:         # implicit: the broadcast dims, then labels seen once, sorted
        counts: dict = {}
        for ls in per_operand:
            for c in ls:
                counts[c] = counts.get(c, 0) + 1
        named = sorted(c for c, n in counts.items() if n == 1 and c in _LETTERS)
        output = [c for c in fill if c in counts] + named
    else:
        if "..." not in out and any("..." in t for t in terms) and most:
            if any(c in fill for ls in per_operand for c in ls):
                raise _error(subscripts, "'...' in the inputs needs '...' in the output")
        output = _expand_ellipsis(subscripts, out, len(out.replace("...", "")) + most, fill) \
            if "..." in out else list(out)
        if len(set(output)) != len(output):
            raise _error(subscripts, f"output term {out!r} repeats a label")
        known = {c for ls in per_operand for c in ls}
        for c in output:
            if c not in known:
                raise _error(subscripts, f"output label {c!r} is in no input term")
    return per_operand, output


def _sizes(subscripts: str, per_operand: list, operands: list) -> dict:
    """Each label's size; a size-1 dimension broadcasts against the others (as NumPy)."""
    sizes: dict = {}
    for ls, x in zip(per_operand, operands):
        for c, n in zip(ls, x.shape):
            have = sizes.get(c, 1)
            if n != 1 and have != 1 and n != have:
                shapes = ", ".join(shape_str(o.shape) for o in operands)
                raise _error(subscripts, f"label {c!r} has sizes {have} and {n} (operands {shapes})")
            sizes[c] = n if have == 1 else have
    return sizes


def _diagonal_pair(x: Node, i: int, j: int) -> Node:
    """x with dimension j folded onto i: x[.., k, .., k, ..] along i, j removed."""
    row = apply("iota", shape=x.shape, dtype=D.int64, dimension=i)
    col = apply("iota", shape=x.shape, dtype=D.int64, dimension=j)
    zero = broadcast_to(scalar(0, x.dtype), x.shape)
    kept = apply("select", apply("compare", row, col, direction="EQ"), x, zero)
    return apply("reduce", kept, axes=(j,), kind="sum")


def _prepare(x: Node, labels: list, keep: set, sizes: dict) -> tuple:
    """Take diagonals of repeated labels, sum labels nobody else needs, broadcast size 1."""
    labels = list(labels)
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        i = labels.index(c)
        j = labels.index(c, i + 1)
        x = _diagonal_pair(x, i, j)
        del labels[j]
    lone = tuple(d for d, c in enumerate(labels) if c not in keep)
    if lone:
        x = apply("reduce", x, axes=lone, kind="sum")
        labels = [c for c in labels if c in keep]
    full = tuple(sizes[c] for c in labels)
    if full != x.shape:
        x = broadcast_to(x, full)
    return x, labels


def _contract(a: Node, la: list, b: Node, lb: list, needed: set) -> tuple:
    """One dot_general: shared labels still needed are batch, other shared ones contract."""
    shared = [c for c in la if c in lb]
    batch = [c for c in shared if c in needed]
    contracting = [c for c in shared if c not in needed]
    out = apply("dot_general", a, b,
                lhs_contracting=tuple(la.index(c) for c in contracting),
                rhs_contracting=tuple(lb.index(c) for c in contracting),
                lhs_batch=tuple(la.index(c) for c in batch),
                rhs_batch=tuple(lb.index(c) for c in batch))
    labels = batch + [c for c in la if c not in shared] + [c for c in lb if c not in shared]
    return out, labels


def einsum(subscripts: str, *operands: Any) -> Node:
    """Einstein summation over `operands` as NumPy's `einsum` (explicit and implicit
    output, '...' broadcasting, repeated labels for diagonals)."""
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a string, got {type(subscripts).__name__}")
    if not operands:
        raise ValueError("einsum: needs at least one operand")
    xs = [as_node(x) for x in operands]
    dtype = D.result_type(*[x.dtype for x in xs])
    if dtype is D.bool_:
        raise TypeError(f"einsum({subscripts!r}): not defined for bool operands")
    xs = [convert(x, dtype) for x in xs]
    per_operand, output = _labels(subscripts, xs)
    sizes = _sizes(subscripts, per_operand, xs)
    prepared = []
    for k, (x, ls) in enumerate(zip(xs, per_operand)):
        others = set(output).union(*[set(o) for m, o in enumerate(per_operand) if m != k])
        prepared.append(_prepare(x, ls, others, sizes))
    acc, labels = prepared[0]
    for k in range(1, len(prepared)):
        b, lb = prepared[k]
        needed = set(output).union(*[set(ls) for _, ls in prepared[k + 1:]])
        acc, labels = _contract(acc, labels, b, lb, needed)
    lone = tuple(d for d, c in enumerate(labels) if c not in output)
    if lone:
        acc = apply("reduce", acc, axes=lone, kind="sum")
        labels = [c for c in labels if c in output]
    perm = tuple(labels.index(c) for c in output)
    if perm != tuple(range(len(perm))):
        acc = apply("transpose", acc, permutation=perm)
    return acc


__all__ = ["einsum"]
