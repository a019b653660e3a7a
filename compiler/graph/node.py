"""The traced graph: immutable nodes that a lazy tensor points at.

A node is an operation applied to operand nodes (an HLO instruction that is not yet in a
module), or a leaf:

- ``parameter``: holds a device buffer (``node.buffer``); a parameter of the module;
- ``scalar``: a Python scalar (``node.value``); a runtime scalar parameter, so that a value
  that changes every step does not change the fingerprint;
- ``constant``: a literal kept in the module (``node.value`` is a `Literal`).

An operation node gains a buffer when it is materialized; from then on a module treats it
as a parameter leaf. Its operands are kept only while a gradient tape may still walk
through it (see `release`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..hlo.dtypes import DType
from ..hlo.literal import Literal


class NodeType:
    """A node's (shape, dtype), interned (`node_type`): equal types are one object, so a
    memo keyed on the types of an op's operands (compiler/primitive.py `apply`) hashes
    and compares object identities, never shape tuples."""

    __slots__ = ("shape", "dtype", "pair", "spread")

    def __init__(self, shape: Any, dtype: Any) -> None:
        self.shape = shape
        self.dtype = dtype
        # the memo's key for two operands both of this type (an object of its own, hashed
        # at once: a fresh (t, t) tuple costs its allocation and its hash at every op)
        self.pair = _Pair()
        # the memo entry of a 0-d node of this dtype broadcast to this shape (a Python
        # scalar beside a tensor of this type), filled by ops/promotion.py at first use
        self.spread = None

    def __repr__(self) -> str:
        return f"<NodeType {getattr(self.dtype, 'short', self.dtype)}{list(self.shape)}>"


class _Pair:
    """The memo key of two operands of one type (`NodeType.pair`): equal to itself only,
    hashed by identity (no reference back to its type: no cycle to collect)."""

    __slots__ = ()


_TYPES: dict = {}      # (shape, dtype) -> its NodeType


def node_type(shape: Any, dtype: Any) -> NodeType:
    """The one NodeType of (shape, dtype). Bounded: shapes that change at every call (a
    growing sequence) clear the table past 65,536 types; a type made before stays valid
    (its contents never change), a memo keyed on it merely misses."""
    key = (shape, dtype)
    t = _TYPES.get(key)
    if t is None:
        if len(_TYPES) >= 65536:
            _TYPES.clear()
        t = _TYPES[key] = NodeType(shape, dtype)
    return t


def type_of(node: "Node") -> NodeType:
    """`node`'s interned type, interned at its first use as an operand (a node made by
    hand or read from a template has none yet)."""
    t = node.type
    if t is None:
        t = node.type = node_type(node.shape, node.dtype)
    return t


class Node:
    __slots__ = ("op", "operands", "shape", "dtype", "attrs", "buffer", "value", "sig",
                 "site", "type", "__weakref__")

    def __init__(self, op: str, operands: tuple, shape: tuple, dtype: DType,
                 attrs: dict, buffer: Any = None, value: Any = None) -> None:
        self.op = op
        self.operands = operands
        self.shape = shape
        self.dtype = dtype
        self.attrs = attrs
        self.buffer = buffer
        self.value = value
        self.sig = None     # structural signature, filled when first put in a module
        self.site = None    # (file, line) where the user recorded it, for error messages
        self.type = None    # its interned NodeType, made when first asked (`type_of`)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def release(self) -> None:
        """Forget the operands of a materialized node so that history can be freed."""
        self.operands = ()

    def __repr__(self) -> str:
        dims = ",".join(map(str, self.shape))
        return f"<Node {self.op} {self.dtype.short}[{dims}]>"


_new = object.__new__


def new_node(op: str, operands: tuple, shape: tuple, dtype: DType, attrs: dict,
             value: Any = None) -> Node:
    """`Node(op, operands, shape, dtype, attrs, value=value)`, made about twice as fast:
    calling the class enters `__init__` from C (a fresh evaluation of a Python frame),
    which costs more than the nine stores; a Python function calling a Python function
    does not. For the paths that record many nodes per user call (copied templates, an
    optimizer's update, layers built directly). Sets every slot `__init__` sets
    (tests/test_node.py compares the two)."""
    n = _new(Node)
    n.op = op
    n.operands = operands
    n.shape = shape
    n.dtype = dtype
    n.attrs = attrs
    n.buffer = None
    n.value = value
    n.sig = None
    n.site = None
    n.type = None
    return n


def parameter_leaf(buffer: Any, shape: tuple, dtype: DType) -> Node:
    return Node("parameter", (), shape, dtype, {}, buffer=buffer)


def scalar_leaf(value: Any, dtype: DType) -> Node:
    return new_node("scalar", (), (), dtype, {}, value)


def constant_leaf(literal: Any, dtype: DType) -> Node:
    return Node("constant", (), tuple(literal.array.shape), dtype, {}, value=literal)


_KEPT: dict = {}     # (repr(value), dtype name) -> its 0-d constant node
_KEPT_IDS: set = set()     # their ids (never reused: `_KEPT` holds every one for good)


def kept_constant(value: Any, dtype: DType) -> Node:
    """The one 0-d constant node of `value` as `dtype` (the cache every caller shares:
    equal constants are one node, so a module's text and fingerprint stay the same).
    The key is repr(value): 0.0 and -0.0, 1 and True stay apart."""
    key = (repr(value), dtype.name)
    node = _KEPT.get(key)
    if node is None:
        node = _KEPT[key] = constant_leaf(Literal(np.array(value, dtype.np)), dtype)
        _KEPT_IDS.add(id(node))
    return node


def kept_ids() -> set:
    """ids of the shared 0-d constants `kept_constant` made (compiler/transforms/walk_templates.py
    tells them from a graph's own nodes)."""
    return {id(n) for n in _KEPT.values()}


def is_kept(node: Node) -> bool:
    """Whether `node` is the shared node of a kept constant (`kept_constant`)."""
    return id(node) in _KEPT_IDS
