"""Nested tuples, lists and dicts of tensors (JAX's pytrees, reduced to what lazyarray's
function transforms need): flattened to a list of leaves and rebuilt in the same shape."""
from __future__ import annotations

from typing import Any


def tree_flatten(tree: Any) -> tuple:
    """(leaves, rebuild) for tensors in nested tuples, lists and dicts."""
    if isinstance(tree, (tuple, list)):
        parts = [tree_flatten(t) for t in tree]
        sizes = [len(p[0]) for p in parts]

        def rebuild(leaves: list) -> Any:
            out, at = [], 0
            for (_, sub), n in zip(parts, sizes):
                out.append(sub(leaves[at:at + n]))
                at += n
            return type(tree)(out)
        return [x for p in parts for x in p[0]], rebuild
    if isinstance(tree, dict):
        keys = list(tree)
        leaves, sub = tree_flatten([tree[k] for k in keys])
        return leaves, lambda ls: dict(zip(keys, sub(ls)))
    return [tree], lambda ls: ls[0]
