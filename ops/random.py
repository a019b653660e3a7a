"""Counter-based random numbers: Threefry-2x32 (20 rounds) written with HLO integer ops.

Because the generator is a pure function of a key and a counter, built from `add`, `xor`,
`shift_left`, `shift_right_logical` and `or` on uint32, it fuses with whatever consumes
its bits and gives the same bits on every device. Every function here is functional: it
takes a key node (uint32[2]) and, optionally, a stream counter (a uint32 scalar node), and
returns new nodes. `lazyarray.random` keeps one state per device, (key, counter), and
`advance` moves it by one call inside the graph.

Threefry-2x32 is Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.graph.node import Node
from ..compiler.primitive import apply
from .promotion import broadcast_to, constant, convert, scalar
from ..compiler.hlo.shapes import num_elements

_U32_CONSTANTS: dict = {}


def _u32(value: int, shape: tuple) -> Node:
    """A uint32 constant kept in the module: offsets and masks are structure, not data."""
    node = _U32_CONSTANTS.get(value)
    if node is None:
        node = _U32_CONSTANTS[value] = constant(np.uint32(value), D.uint32)
    return broadcast_to(node, shape)


def _add(a: Node, b: Node) -> Node:
    return apply("add", a, b)


def _key_word(key: Node, i: int, shape: tuple) -> Node:
    word = apply("slice", key, start_indices=(i,), limit_indices=(i + 1,), strides=(1,))
    word = apply("reshape", word, shape=())
    return broadcast_to(word, shape)


def threefry2x32(key: Node, x0: Node, x1: Node) -> tuple:
    """Threefry-2x32-20 of the counters (x0, x1) (uint32, equal shapes) under `key`
    (uint32[2]); returns two uint32 nodes of the counters' shape (the primitive
    compiler/primitives/random_bits.py, one node per word)."""
    if key.shape != (2,) or key.dtype is not D.uint32:
        raise TypeError(f"threefry2x32: the key must be uint32[2], got "
                        f"{key.dtype.name}{list(key.shape)}")
    if x0.shape != x1.shape or x0.dtype is not D.uint32 or x1.dtype is not D.uint32:
        raise TypeError("threefry2x32: counters must be two uint32 nodes of one shape")
    k0, k1 = _key_word(key, 0, x0.shape), _key_word(key, 1, x0.shape)
    return tuple(apply("threefry2x32", k0, k1, x0, x1, word=w) for w in (0, 1))


def _linear(shape: tuple) -> Node:
    """uint32 of `shape` holding each element's row-major position."""
    flat = apply("iota", shape=(num_elements(shape),), dtype=D.uint32, dimension=0)
    return apply("reshape", flat, shape=tuple(shape))


def _check_counter(counter: Optional[Node]) -> None:
    if counter is not None and (counter.shape != () or counter.dtype is not D.uint32):
        raise TypeError(f"random bits: the counter must be a uint32 scalar, got "
                        f"{counter.dtype.name}{list(counter.shape)}")


def _pair(key: Node, shape: tuple, counter: Optional[Node], start: int = 0,
          half: Optional[int] = None) -> tuple:
    """Both words of the Threefry calls (start + i, start + i + half) (or (start + i,
    counter)) for each position i of `shape`; `half` defaults to its element count n. So
    they are the two halves of `bits(key, (2,) + shape, counter)`, computed elementwise in
    i: they fuse into their consumers (no words in memory)."""
    _check_counter(counter)
    n = num_elements(shape)
    half = n if half is None else half
    if 2 * half >= 2 ** 32:
        raise ValueError(f"random bits: {2 * half} values at once is more than one key can "
                         "give (2^32)")
    c0 = _linear(shape)
    if start:
        c0 = _add(c0, _u32(start, shape))
    c1 = _add(c0, _u32(half, shape)) if counter is None else broadcast_to(counter, shape)
    return threefry2x32(key, c0, c1)


def _iota(n: int) -> Node:
    return apply("iota", shape=(n,), dtype=D.uint32, dimension=0)


def split(key: Node, num: int = 2) -> list:
    """`num` new independent keys from one key (each a uint32[2] node)."""
    c0 = _iota(num)
    c1 = broadcast_to(_u32(0, ()), (num,))
    x0, x1 = threefry2x32(key, c0, c1)
    pairs = apply("concatenate", apply("reshape", x0, shape=(num, 1)),
                  apply("reshape", x1, shape=(num, 1)), dimension=1)
    return [apply("reshape", apply("slice", pairs, start_indices=(i, 0), limit_indices=(i + 1, 2),
                                   strides=(1, 1)), shape=(2,)) for i in range(num)]


def advance(state: Node) -> tuple:
    """A generator state uint32[3] = (key word 0, key word 1, call counter): returns the key,
    this call's counter and the state advanced by one call. Advancing is one add, so many
    calls between two syncs chain cheaply, and the numbers do not depend on where syncs
    fall: call n of a seed always reads stream n."""
    if state.shape != (3,) or state.dtype is not D.uint32:
        raise TypeError(f"random state: must be uint32[3], got "
                        f"{state.dtype.name}{list(state.shape)}")
    key = apply("slice", state, start_indices=(0,), limit_indices=(2,), strides=(1,))
    counter = apply("reshape", apply("slice", state, start_indices=(2,), limit_indices=(3,),
                                     strides=(1,)), shape=())
    step = _STEP.get("node")
    if step is None:
        step = _STEP["node"] = constant(np.array([0, 0, 1], np.uint32), D.uint32)
    return key, counter, apply("add", state, step)


_STEP: dict = {}


def bits(key: Node, shape: tuple, counter: Optional[Node] = None) -> Node:
    """uint32 random bits of `shape`. Without `counter`, word i is one half of Threefry of
    the counter pair (i mod half, i mod half + half); with a uint32 scalar `counter` (a
    stream number), of the pair (i mod half, counter), so each stream of one key differs."""
    n = num_elements(shape)
    if n >= 2 ** 32:
        raise ValueError(f"random bits: {n} values at once is more than one key can give (2^32)")
    _check_counter(counter)
    if n == 0:
        return broadcast_to(_u32(0, ()), shape)
    # words 0..half-1 are the first words of the calls (i, i + half) (or (i, counter)),
    # words half..n-1 the second words of the calls (i - half, ...): each element picks
    # its word of its call, elementwise (fused), rather than two halves concatenated
    half = (n + 1) // 2
    i = _linear(shape)
    first = apply("compare", i, _u32(half, shape), direction="LT")
    c0 = apply("select", first, i, apply("subtract", i, _u32(half, shape)))
    c1 = _add(c0, _u32(half, shape)) if counter is None else broadcast_to(counter, shape)
    x0, x1 = threefry2x32(key, c0, c1)
    return apply("select", first, x0, x1)


def _unit_float32(words: Node) -> Node:
    """[0, 1) from 23 random mantissa bits: 1.m as float32, minus 1."""
    mant = apply("shift_right_logical", words, _u32(9, words.shape))
    one = apply("or", mant, _u32(0x3F800000, words.shape))
    f = apply("bitcast_convert", one, dtype=D.float32)
    return apply("subtract", f, broadcast_to(scalar(1.0, D.float32), words.shape))


def _u64(value: int, shape: tuple) -> Node:
    return broadcast_to(constant(np.uint64(value), D.uint64), shape)


def _wide(pair: tuple) -> Node:
    """64 random bits per element from a call's two words (the first the high half)."""
    hi, lo = pair
    shape = hi.shape
    return apply("or", apply("shift_left", convert(hi, D.uint64), _u64(32, shape)),
                 convert(lo, D.uint64))


def _unit_float64(wide: Node) -> Node:
    """[0, 1) from 52 random mantissa bits."""
    shape = wide.shape
    mant = apply("shift_right_logical", wide, _u64(12, shape))
    one = apply("or", mant, _u64(0x3FF0000000000000, shape))
    f = apply("bitcast_convert", one, dtype=D.float64)
    return apply("subtract", f, broadcast_to(scalar(1.0, D.float64), shape))


def _float_dtype(op: str, dtype: Any) -> D.DType:
    d = D.to_dtype(dtype) if dtype is not None else D.DEFAULT_FLOAT
    if not d.is_float:
        raise TypeError(f"{op}: dtype must be a floating-point type, got {d.name}")
    return d


def unit(key: Node, shape: tuple, dtype: Any = None, counter: Optional[Node] = None) -> Node:
    """Uniform on [0, 1) of `shape` and a float `dtype` (float64 uses 52 random bits)."""
    d = _float_dtype("uniform", dtype)
    shape = tuple(shape)
    if d is D.float64:
        return _unit_float64(_wide(_pair(key, shape, counter)))
    return convert(_unit_float32(bits(key, shape, counter)), d)


def uniform(key: Node, shape: tuple, low: Any = 0.0, high: Any = 1.0, dtype: Any = None,
            counter: Optional[Node] = None) -> Node:
    """Uniform on [low, high)."""
    u = unit(key, shape, dtype, counter)
    if low == 0.0 and high == 1.0:
        return u
    span = apply("multiply", u, broadcast_to(scalar(float(high - low), u.dtype), u.shape))
    return apply("add", span, broadcast_to(scalar(float(low), u.dtype), u.shape))


def normal(key: Node, shape: tuple, mean: float = 0.0, std: float = 1.0, dtype: Any = None,
           counter: Optional[Node] = None) -> Node:
    """Standard normal by Box-Muller: sqrt(-2 log u1) cos(2 pi u2), u1 in (0, 1]. The log
    and cosine are the primitives portable_log and portable_cos_two_pi
    (compiler/primitives/portable_math.py), built from correctly rounded operations, so one
    seed gives the same bits on every device (each device's own log and cos differ by an
    ulp)."""
    d = _float_dtype("normal", dtype)
    shape = tuple(shape)
    work = D.float64 if d is D.float64 else D.float32
    # u1 and u2 are the halves of unit((2,) + shape): for float32 the two words of one
    # call, for float64 (two words an element) the calls i and n + i of 2n
    if work is D.float64:
        n = num_elements(shape)
        u1, u2 = (_unit_float64(_wide(_pair(key, shape, counter, start, 2 * n)))
                  for start in (0, n))
    else:
        u1, u2 = (_unit_float32(w) for w in _pair(key, shape, counter))
    one = broadcast_to(scalar(1, work), shape)
    radius = apply("sqrt", apply("multiply", broadcast_to(scalar(-2.0, work), shape),
                                 apply("portable_log", apply("subtract", one, u1))))
    z = apply("multiply", radius, apply("portable_cos_two_pi", u2))
    if std != 1.0:
        z = apply("multiply", z, broadcast_to(scalar(float(std), work), shape))
    if mean != 0.0:
        z = apply("add", z, broadcast_to(scalar(float(mean), work), shape))
    return convert(z, d)


def randint(key: Node, shape: tuple, low: int, high: int, dtype: Any = None,
            counter: Optional[Node] = None) -> Node:
    """Integers in [low, high): 64 random bits modulo the span (bias below 2^-32)."""
    d = D.to_dtype(dtype) if dtype is not None else D.DEFAULT_INT
    if not d.is_int:
        raise TypeError(f"randint: dtype must be an integer type, got {d.name}")
    low, high = int(low), int(high)
    if high <= low:
        raise ValueError(f"randint: needs low < high, got low={low}, high={high}")
    shape = tuple(shape)
    wide = _wide(_pair(key, shape, counter))
    span = broadcast_to(scalar(high - low, D.uint64), shape)
    offset = convert(apply("remainder", wide, span), D.int64)
    out = apply("add", offset, broadcast_to(scalar(low, D.int64), shape)) if low else offset
    return convert(out, d)


def bernoulli(key: Node, p: Any, shape: tuple, counter: Optional[Node] = None) -> Node:
    """True with probability p (a Python float or a float node broadcastable to shape)."""
    u = unit(key, shape, D.float32, counter)
    prob = p if isinstance(p, Node) else scalar(float(p), D.float32)
    return apply("compare", u, broadcast_to(convert(prob, D.float32), tuple(shape)), direction="LT")


def permutation(key: Node, n: int, counter: Optional[Node] = None) -> Node:
    """A random permutation of 0..n-1 (int64): the stable order of n random 32-bit words."""
    if n < 0:
        raise ValueError(f"permutation: n must be non-negative, got {n}")
    return apply("argsort", bits(key, (n,), counter), dimension=0, descending=False,
                 index_dtype=D.int64)


__all__ = []    # these take explicit keys; the public functions live in lazyarray.random
