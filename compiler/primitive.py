"""What a primitive is, the registry of all of them, and `apply`, which records one.

Each primitive is defined once, in a stanza under `compiler/primitives/`, with everything
the stack needs: its shape and dtype rule, its NumPy reference (the interpreter and the
test oracle), its vector-Jacobian product (built from primitives, so gradients are lazy
graphs too), its elemental code, its code on each target, its cost and the properties the
passes ask about. The rest of the stack reads these fields rather than switching on op
names; tests/test_op_knowledge.py lists the few pattern matches that still name an op, and
fails on a new one.
"""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np

from .hlo import dtypes as D
from .hlo.dtypes import DType
from .graph.node import Node, node_type, type_of
from .hlo.shapes import num_elements

# kinds, which fusion reads
ELEMENTWISE = "elementwise"   # out[i] = f(a[i], b[i], ...)
INDEXING = "indexing"         # only moves elements: out[i] = a[g(i)]
REDUCTION = "reduction"       # combines elements along axes
LIBRARY = "library"           # handed to a tuned library (BLAS, cuBLAS)
OPAQUE = "opaque"             # needs its whole input (sort, scatter)
LEAF = "leaf"                 # parameter, constant, iota
CONTROL = "control"           # while, conditional (sub-computations) and the
                              # get_tuple_element that reads their results

NOT_DIFFERENTIABLE = "not differentiable"


@dataclass(frozen=True)
class LibraryCall:
    """How a device runs a primitive through a call instead of generated code. `name` is
    what the device implements: "gemm" (a tuned matrix product: BLAS on the CPU, cuBLAS
    on the GPU) or "host" (the primitive's NumPy reference, on host memory). `args`, if
    given, is (instruction, operand shapes) -> JSON-able dict: what the compiler works
    out for the call once (layouts, sizes), so that a device does no planning.
    `lapack`, if given: (LapackKernel, instruction, operand instructions, **attrs) -> work
    per matrix, the LAPACK calls the CPU target generates for each matrix of a batch
    (compiler/codegen/lapack_kernels.py); the device runs `name` where LAPACK is missing.
    `into`, if given ("host"): (out, *operands, **attrs) computing the reference straight
    into the planned buffer `out` (no result to copy); `batch_axis0`: (*operands, **attrs)
    -> whether axis 0 of the operands and the result is a batch axis, so that a device may
    run `into` on slices of it in parallel."""
    name: str
    args: Optional[Callable[..., dict]] = None
    lapack: Optional[Callable[..., int]] = None
    into: Optional[Callable[..., None]] = None
    batch_axis0: Optional[Callable[..., bool]] = None


@dataclass(frozen=True)
class Loop:
    """One loop nest of an OPAQUE primitive's code, the same for every target (a target
    only wraps loops around it): `body(e, out, operands, index)` runs at each `index` of
    `space`, with `e` the elemental emitter, `out` the result's pointer and `operands` the
    operands' pointers. Iterations follow row-major order along the `ordered` axes; the
    other axes are independent (split over threads, or one GPU thread each). `work`: the
    cost of one body call in elements (a body computing a block of values: its size), so
    that a CPU splits the loop over threads as it would a loop over those elements.
    `vector_code`: the body computes with explicit vectors, its address arithmetic
    folded (a convolution's register blocks): the CPU optimizes its function with a
    short pipeline, not -O2's, which adds nothing to such code but LLVM time
    (llvm_target.mark_vector_code)."""
    space: tuple
    ordered: tuple
    body: Callable
    work: int = 1
    vector_code: bool = False


@dataclass(frozen=True)
class MathCode:
    """How a math primitive becomes code on each target, read by compiler/codegen's
    math_table.py (the CPU), gpu_math.py (CUDA) and complex_values.py (complex operands).
    An entry is "llvm.<name>", an LLVM intrinsic (the target adds the type suffix); a plain
    name, a library function (the CPU's libm, "f" added for float32; on CUDA libdevice's
    __nv_<name>, "f" added for float32); or "<module>.<function>", code of
    compiler/codegen/<module>.py composed from other instructions, imported when first
    used (`code`), so that recording never loads LLVM. None: the target has no code for
    it, and asking raises in Python, naming the op, before anything reaches LLVM."""
    cpu: Optional[str] = None            # float32 (unless cpu_float32), float64; half
                                         # floats are computed in float32
    cpu_float32: Optional[str] = None    # inline float32 code (vectorizable, unlike libm)
    cuda: Optional[str] = None
    complex: Optional[str] = None        # (emitter, z) -> Value, for complex z

    @staticmethod
    @functools.lru_cache(maxsize=None)
    def code(entry: str) -> Callable:
        """The function a "<module>.<function>" entry names."""
        module, name = entry.rsplit(".", 1)
        return getattr(importlib.import_module(f"{__package__}.codegen.{module}"), name)

    @staticmethod
    def kind(entry: str) -> str:
        """"intrinsic", "code" or "library": what an entry is."""
        return "intrinsic" if entry.startswith("llvm.") else "code" if "." in entry \
            else "library"


@dataclass(eq=False)
class Primitive:
    name: str
    kind: str
    infer: Callable[..., tuple]          # (operands, **attrs) -> (shape, dtype)
    reference: Callable[..., Any]        # (*numpy arrays, **attrs) -> numpy array
    attrs: tuple = ()                    # attribute names, in the order they print
    vjp: Any = None                      # (g, out, *operands, **attrs) -> cotangents
    emit: Any = None                     # elemental code: see compiler/codegen; an OPAQUE
                                         # primitive's: (instruction, operand
                                         # instructions) -> [Loop], or None
                                         # where its library call serves (`library`)
    math: Optional[str] = None           # the name a math op's emit asks the target for
    costly: bool = False                 # fusion computes it once, never per consumer
                                         # (compiler/planning/fusion.py); set for every `math` op
    math_code: Optional[MathCode] = None  # its code on each target (with `math`, or
                                         # a target's own code for an op, as remainder's)
    doc: str = ""
    reduced_axes: Any = None             # reductions: (attrs) -> the axes they combine
    reducer: Any = None                  # reductions: (attrs) -> how they combine
                                         # (primitives/reduction.py Reducer)
    expand: Any = None                   # (*operand nodes, **attrs) -> a graph of other
                                         # primitives that replaces it before fusion
    cpu_lowering: Any = None             # (instruction, *operand nodes) -> the CPU's own
                                         # graph for it (or None where that does not cover
                                         # it), spliced in before `expand`; registered by
                                         # the module of the ops it lowers to (`lower_on_cpu`)
    library: Optional[LibraryCall] = None  # LIBRARY / OPAQUE: the call a device makes
                                           # where no code is generated for it
    batch: Any = None                    # vmap: a rule (compiler/transforms/batching.py) or
                                         # LOOP_OVER_BATCH, the explicit fallback
    pure: bool = True                    # False: the result depends on more than the
                                         # operands (collectives); never folded
    arity: Optional[int] = None          # operand count, where fixed but not evident from
                                         # the reference's signature (the verifier checks it)
    device_calls: Any = None             # {"cuda_stream": fn(device, ins, out, operands)
                                         # -> bool}: queued on the device's own stream
                                         # (collectives on NCCL)
    holomorphic: bool = True             # complex results: autodiff applies the vjp (written
                                         # for reals) as conj(vjp(conj(g))); False: the vjp
                                         # follows the conjugate-Wirtinger convention itself
    vjp_by_type: bool = False            # the vjp reads only the types and attributes of g,
                                         # the node and its operands (never their values,
                                         # identity or producers): compiler/transforms/vjp_templates.py
                                         # may then copy the graph it built before
    cheap: bool = False                  # its element code is one or a few instructions (an
                                         # index move: the same element, or one reused): a
                                         # lane-split reduction copies it per lane
                                         # (compiler/codegen/lane_reduce.py)
    memo_infer: bool = True              # its rule reads nothing but the operands' shapes
                                         # and dtypes and the attributes: `apply`
                                         # remembers its results (False: a loop's rule,
                                         # which reads its bodies)
    repeats: bool = False                # an index move whose every element is an element
                                         # of its one operand, some repeated (a broadcast):
                                         # a broadcast constant stays a splat, an expanding
                                         # one recomputes its operand per element
    linear: bool = False                 # an index move whose element i (row-major) is its
                                         # operand's element i (a reshape): computable at
                                         # a linear index
    keeps_tail: Any = None               # (instruction, operand shape) -> whether the index
                                         # move reads its operand at the same last two
                                         # indices, or at neither (repeated): a loop may
                                         # then run those two as one (compiler/codegen/
                                         # inner_rows.py joined_loop); None: it does not
    flops: Any = None                    # (instruction, operand instructions) -> the
                                         # operations it performs (a profile's GFLOP/s);
                                         # `primitive` fills it in by kind where not given
    pieces: Any = None                   # (instruction, operand instructions) -> the
                                         # positions along its last dimension where it
                                         # starts reading another operand: a loop split
                                         # there reads each plainly (concatenate;
                                         # compiler/codegen/cpu_kernels.py innermost_cuts)
    simplify: Any = None                 # (rewrite Builder, instruction) -> the position of
                                         # a simpler equal value, or None: its algebraic
                                         # identities (compiler/passes/algebraic_simplifier.py)
    vjp_partial: bool = False            # the vjp takes `wanted` (a bool per operand: does the
                                         # walk need its cotangent?) and may give None for the
                                         # others (a relu's constant 0, a first layer's input)

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


PRIMITIVES: dict[str, Primitive] = {}


# the most bytes one array may hold: every index and byte offset is a signed 64-bit integer
MAX_ARRAY_BYTES = 2 ** 63 - 1


def _bounded(name: str, infer: Callable) -> Callable:
    """`infer`, refusing a result too large to address (la.zeros((2**40, 2**40)), or a
    broadcast of (2**40, 1) against (1, 2**40)): its element count would wrap in the
    generated index arithmetic. Ops whose result is never larger than an operand
    (elementwise, reductions) are not wrapped."""
    @functools.wraps(infer)
    def checked(operands: tuple, **attrs: Any) -> tuple:
        shape, dtype = infer(operands, **attrs)
        if type(shape) is tuple and all(type(n) is int for n in shape):
            n = num_elements(shape)
            if n * max(getattr(dtype, "itemsize", 1), 1) > MAX_ARRAY_BYTES:
                raise ValueError(
                    f"{name}: a result of shape {shape} ({n} elements of {dtype}) is larger "
                    f"than any array can be (at most 2**63 - 1 bytes); check the shape")
        return shape, dtype
    return checked


def primitive(name: str, kind: str, infer: Callable, reference: Callable, **kw: Any) -> Primitive:
    if name in PRIMITIVES:
        raise ValueError(f"primitive {name!r} defined twice")
    if kind not in (ELEMENTWISE, REDUCTION):
        infer = _bounded(name, infer)
    p = Primitive(name, kind, infer, reference, **kw)
    p.costly = p.costly or p.math is not None
    if p.flops is None:
        p.flops = _FLOPS_BY_KIND.get(kind, no_flops)
    PRIMITIVES[name] = p
    return p


def lower_on_cpu(name: str, fn: Callable) -> None:
    """Register `fn` as primitive `name`'s CPU lowering (its field `cpu_lowering`): set by
    the module that defines the ops it lowers to, as a platform registers its lowering of
    an op (the stanza of `name` cannot import them: they are built over it)."""
    PRIMITIVES[name].cpu_lowering = fn


def no_flops(ins: Any, operands: tuple) -> int:
    """An op that moves, converts or chooses values: no arithmetic."""
    return 0


def _flops_per_element(ins: Any, operands: tuple) -> int:
    return num_elements(ins.shape)


def _flops_per_element_reduced(ins: Any, operands: tuple) -> int:
    return num_elements(operands[0].shape)


# one operation per result element; a reduction's, one per element it combines
_FLOPS_BY_KIND = {ELEMENTWISE: _flops_per_element, REDUCTION: _flops_per_element_reduced}


def get(name: str) -> Primitive:
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise ValueError(f"unknown HLO op {name!r}") from None


def apply(name: str, *operands: Node, **attrs: Any) -> Node:
    """Record one primitive applied to nodes: its result type from the stanza's rule, its
    node made. The one fast path of recording: the rule's result is remembered in the
    table of the name and attributes (`memo_of`), keyed on the operands' interned types
    (compiler/graph/node.py `NodeType`: object identities, hashed at once; `types_key`),
    so that an op recorded again (every step of a training loop, every token of a
    decoding loop) costs two dict hits. A rule that raises is never remembered (bad input
    raises each time)."""
    try:
        table = _TABLES.get((name, *attrs.items()) if attrs else name)
        if len(operands) == 2:
            a, b = operands
            ta, tb = a.type, b.type
            if ta is None:
                ta = a.type = node_type(a.shape, a.dtype)
            if tb is None:
                tb = b.type = node_type(b.shape, b.dtype)
            key = ta.pair if ta is tb else (ta, tb)
        elif len(operands) == 1:
            a = operands[0]
            key = a.type
            if key is None:
                key = a.type = node_type(a.shape, a.dtype)
        elif len(operands) == 3:
            a, b, c = operands
            ta, tb, tc = a.type, b.type, c.type
            if ta is None:
                ta = a.type = node_type(a.shape, a.dtype)
            if tb is None:
                tb = b.type = node_type(b.shape, b.dtype)
            if tc is None:
                tc = c.type = node_type(c.shape, c.dtype)
            key = (ta, tb.pair) if tb is tc else (ta, tb, tc)
        else:
            key = tuple(map(type_of, operands))
        found = None if table is None else table.get(key)
    except (AttributeError, TypeError):     # an operand that is not a node, an unhashable
        return _applied(name, operands, attrs)   # attribute (a list), a loop's bodies
    if found is None:
        found = _infer_memo(key, name, operands, attrs)
    t, shared = found
    n = _new(Node)
    n.op = name
    n.operands = operands
    n.shape = t.shape
    n.dtype = t.dtype
    n.attrs = attrs if shared is None else shared
    n.buffer = None
    n.value = None
    n.sig = None
    n.site = None
    n.type = t
    return n


_new = object.__new__
# The memo: op key -> its table, operand types -> (the result's NodeType, the attributes'
# dict every node of that key shares, or None). An op key is the name, or (name, attribute
# items...) for an op with attributes; the operand types are keyed as `types_key` says.
# Shared attributes (nodes never change theirs), like the result's shape object, let a
# sync's template check find them by identity (compiler/graph/template.py). Bounded
# (`_MEMO_CAP` entries in all): shapes that change at every call clear it.
_TABLES: dict = {}
_PINNED: dict = {}      # the tables front ends hold (`memo_of`): cleared, never dropped
_NO_ATTRS: dict = {}
_MEMO_CAP = 8192
_size = 0               # entries in all the tables


def types_key(operands: tuple) -> Any:
    """The key of `operands`' types in a table of the memo: one operand's type itself; two
    of one type, that type's `pair`; three whose last two are of one type (select's
    values, clamp's operand and bounds), the first's type and that pair; otherwise the
    tuple of their types. (Front ends that look a common form up themselves make the same
    key: `memo_of`.)"""
    if len(operands) == 1:
        return type_of(operands[0])
    if len(operands) == 2:
        ta, tb = type_of(operands[0]), type_of(operands[1])
        return ta.pair if ta is tb else (ta, tb)
    if len(operands) == 3:
        ta, tb, tc = map(type_of, operands)
        return (ta, tb.pair) if tb is tc else (ta, tb, tc)
    return tuple(map(type_of, operands))


def memo_of(name: str, **attrs: Any) -> dict:
    """The memo's table of primitive `name` with attributes `attrs`, for a front end on the
    hottest recording path that looks its common forms up itself, by `types_key`
    (`table.get(x.type)`, `table.get(t.pair)`): a hit is the rule's result for those
    types, made with `made`; a miss (a type not yet interned is None: never a key) goes
    through `apply`, which asks the rule and remembers it in this same table."""
    key = (name, *attrs.items()) if attrs else name
    table = _TABLES.get(key)
    if table is None:
        table = _TABLES[key] = {}
    _PINNED[key] = table
    return table


def memo_size() -> int:
    """How many results the memo holds (at most `_MEMO_CAP`)."""
    return _size


def made(name: str, operands: tuple, found: tuple) -> Node:
    """The node of `name` over `operands` from a memo entry `found` (`memo_of`)."""
    t, shared = found
    n = _new(Node)
    n.op = name
    n.operands = operands
    n.shape = t.shape
    n.dtype = t.dtype
    n.attrs = shared
    n.buffer = None
    n.value = None
    n.sig = None
    n.site = None
    n.type = t
    return n


def entry_of(node: Node) -> Optional[tuple]:
    """The memo entry `made` takes for a node `apply` made (its type and its attributes),
    for a front end that keeps it under its own key; None when its attributes are its
    own (not shareable)."""
    return (node.type, node.attrs) if _shareable(node.attrs) is node.attrs or \
        not node.attrs else None


def beside(table: dict, name: str, x: Node, s: Node, a: Node, b: Node, attrs: dict) -> Node:
    """`apply(name, a, b, **attrs)` for a node `x` and a node `s` made beside it, of x's
    type (a Python scalar spread to x's shape as its dtype), a and b being the two in
    either order; `table`: `memo_of(name, **attrs)`. The memo's entry for two operands of
    x's type when there is one: no interning of s."""
    t = x.type
    if t is not None:
        found = table.get(t.pair)
        if found is not None:
            return made(name, (a, b), found)
    if s.type is None:
        s.type = type_of(x)
    return apply(name, a, b, **attrs)


def _applied(name: str, operands: tuple, attrs: dict) -> Node:
    """`apply` without the memo: the stanza's rule asked every time."""
    shape, dtype = PRIMITIVES[name].infer(operands, **attrs)
    return Node(name, operands, shape, dtype, attrs)


def _infer_memo(key: Any, name: str, operands: tuple, attrs: dict) -> tuple:
    """The rule's result for a key not yet remembered, remembered (unless the stanza says
    its rule reads more than the types and attributes: a loop's bodies)."""
    global _size
    prim = PRIMITIVES[name]
    shape, dtype = prim.infer(operands, **attrs)
    found = (node_type(shape, dtype), _shareable(attrs))
    if prim.memo_infer:
        if _size >= _MEMO_CAP:               # shapes that change at every call: bounded
            _clear_memo()
        op = (name, *attrs.items()) if attrs else name
        table = _TABLES.get(op)
        if table is None:
            table = _TABLES[op] = {}
        table[key] = found
        _size += 1
    return found


def _clear_memo() -> None:
    """Forget every result: the tables front ends hold emptied in place, the others
    dropped (an op key with a shape among its attributes makes a table per shape)."""
    global _size
    for table in _PINNED.values():
        table.clear()
    _TABLES.clear()
    _TABLES.update(_PINNED)
    _size = 0


_SHAREABLE = (int, str, bool, D.DType, type(None))


def _shareable(attrs: dict) -> Optional[dict]:
    """`attrs` as the dict every node of its key may share: when its values are ints,
    strings, dtypes or tuples of ints, whose equal values are equal in every respect a
    reader asks about. None otherwise (a float: 0.0 and -0.0 are equal keys; an object):
    each node keeps its own."""
    if not attrs:
        return _NO_ATTRS
    for v in attrs.values():
        if not (type(v) in _SHAREABLE or (type(v) is tuple and all(type(e) is int for e in v))):
            return None
    return attrs


# ---- shape and dtype rules shared by many stanzas ------------------------------------

def fmt_type(x: Any) -> str:
    return f"{x.dtype.short}[{','.join(map(str, x.shape))}]"


def fail(op: str, operands: Any, why: str, exc: type = ValueError) -> None:
    types = ", ".join(fmt_type(o) for o in operands)
    raise exc(f"{op}({types}): {why}")


def _same_shapes(op: str, operands: tuple) -> tuple:
    shape = operands[0].shape
    for o in operands[1:]:
        if o.shape != shape:
            fail(op, operands, "operands of an elementwise op must have equal shapes")
    return shape


def _same_dtypes(op: str, operands: tuple) -> DType:
    dtype = operands[0].dtype
    for o in operands[1:]:
        if o.dtype is not dtype:
            fail(op, operands, "operands must have the same dtype", TypeError)
    return dtype


def dtype_rule(allowed: tuple, what: str) -> Callable[[str, tuple], DType]:
    def rule(op: str, operands: tuple) -> DType:
        dtype = _same_dtypes(op, operands)
        if dtype not in allowed:
            fail(op, operands, f"needs {what} operands", TypeError)
        return dtype
    rule.allowed = allowed
    return rule


float_only = dtype_rule(D.FLOATS, "floating-point")
numeric = dtype_rule(D.NUMERIC, "numeric (not bool)")
signed_numeric = dtype_rule(D.INTS + D.FLOATS, "signed numeric")
integer_only = dtype_rule(D.INTEGERS, "integer")
int_or_bool = dtype_rule(D.INTEGERS + (D.bool_,), "integer or bool")
any_dtype = dtype_rule(D.ALL, "any")
# the rules of ops complex numbers take too
inexact = dtype_rule(D.FLOATS + D.COMPLEX, "floating-point or complex")
numeric_or_complex = dtype_rule(D.NUMERIC + D.COMPLEX, "numeric (not bool)")
any_or_complex = dtype_rule(D.EVERY, "any")


def elementwise_infer(name: str, rule: Callable, out_dtype: Optional[DType] = None) -> Callable:
    allowed = frozenset(rule.allowed)

    def infer(operands: tuple) -> tuple:
        # one pass for the common case (every op records through here); anything unusual
        # goes through the checks that raise, in their order
        first = operands[0]
        shape, dtype = first.shape, first.dtype
        for o in operands:
            if o.shape != shape or o.dtype is not dtype:
                _same_shapes(name, operands)
                dtype = rule(name, operands)
                break
        if dtype not in allowed:
            rule(name, operands)
        return shape, (out_dtype or dtype)
    infer.dtypes = rule.allowed
    infer.out_dtype = out_dtype      # None: the operands' dtype (see `same_dtype_fast`)
    return infer


def same_dtype_fast(name: str, exclude: tuple = ()) -> frozenset:
    """The dtypes for which elementwise `name` over operands of one dtype and one shape is
    `Node(name, operands, shape, dtype, {})` with no check that could fail: what its rule
    allows, less `exclude` (the dtypes a front end refuses itself). Front ends record
    the common case directly with it (recording stays a few microseconds) and send the
    rest through `apply`, whose checks raise. Empty for a rule whose result dtype differs
    from its operands'."""
    infer = PRIMITIVES[name].infer
    if PRIMITIVES[name].kind != ELEMENTWISE or getattr(infer, "out_dtype", 0) is not None:
        return frozenset()
    return frozenset(infer.dtypes) - frozenset(exclude)


# ---- helpers shared by the NumPy references -------------------------------------------

class TypedArray:
    """A NumPy array seen as a typed value, so that a reference can ask its own primitive's
    shape rule for the output shape."""

    __slots__ = ("shape", "dtype", "ndim")

    def __init__(self, a: np.ndarray) -> None:
        self.shape, self.dtype, self.ndim = a.shape, D.from_numpy(a.dtype), a.ndim


_HALF = (np.dtype(np.float16), np.dtype(D.bfloat16.np))


def widen_half(a: np.ndarray) -> np.ndarray:
    """float16 and bfloat16 as float32 (NumPy has no bfloat16 math, and float16 sums lose
    precision); a reference rounds its result back to the input dtype."""
    return a.astype(np.float32) if a.dtype in _HALF else a
