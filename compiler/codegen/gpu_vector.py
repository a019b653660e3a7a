"""128-bit vector loads for GPU kernels (`ld.global.v4.f32` and the like).

A thread that takes VEC consecutive elements of the iteration space reads each input it
reads at its own index with one vector load instead of VEC scalar loads: a quarter of
the load instructions, and whole 16-byte sectors per lane. The kernel loads the vector
and hands its elements to the elemental emitter's memo (`remember`), so the emitter's
own read of that input at those indices finds them: the emitter itself is unchanged.

When it applies (`vector_inputs`): the input is in memory with exactly the iteration
shape (so element i of the space is element i of the buffer), it is reached from the
kernel's values through elementwise ops only (read at the same index, never through a
broadcast or transpose), and its elements are 4 bytes (f32, i32, u32: 4 of them make
128 bits). The kernel supplies a flat offset that is a multiple of VEC; every buffer a
kernel receives starts at least 16-byte aligned (the CUDA device's buffers are whole
driver allocations, 256-byte aligned), so the vector load is aligned.
"""
from __future__ import annotations

from typing import Any

import llvmlite.ir as ir

from ..primitive import ELEMENTWISE, PRIMITIVES
from .llvm_types import Value, storage_type

VEC = 4            # elements per vector load
VEC_BYTES = 16


def vector_inputs(module: Any, buffers: dict, starts: list, shape: tuple) -> list:
    """Positions of in-memory inputs (`buffers`: position -> pointer) of `shape` with
    4-byte elements that the values at `starts` read at their own index."""
    ins = module.instructions
    found, seen, stack = [], set(), list(starts)
    while stack:
        pos = stack.pop()
        if pos in seen:
            continue
        seen.add(pos)
        node = ins[pos]
        if node.shape != tuple(shape):
            continue
        if pos in buffers:
            if node.dtype.bits == 32 and node.dtype.kind in ("float", "int", "uint"):
                found.append(pos)
            continue
        if node.op != "constant" and PRIMITIVES[node.op].kind == ELEMENTWISE:
            stack.extend(node.operands)
    return sorted(found)


def preload(em: Any, b: ir.IRBuilder, inputs: list, flat: ir.Value, indices: list) -> None:
    """Load elements flat..flat+VEC-1 of each input with one aligned vector load and
    record them in the emitter's current scope at `indices` (VEC multi-indices, those
    of the flat positions in order)."""
    for pos in inputs:
        node = em.module.instructions[pos]
        elem = storage_type(node.dtype)
        ptr = b.gep(em.buffers[pos], [flat], inbounds=True, source_etype=elem)
        raw = b.load(ptr, typ=ir.VectorType(elem, VEC), align=VEC_BYTES)
        for j, index in enumerate(indices):
            part = b.extract_element(raw, ir.Constant(ir.IntType(32), j))
            em.remember(pos, index, Value(em.from_storage(part, node.dtype), node.dtype))


def split_index(b: ir.IRBuilder, base: list) -> list:
    """The VEC multi-indices that follow `base` along its last axis (the caller makes
    sure they stay inside the row: the last axis is a multiple of VEC long and base's
    last coordinate a multiple of VEC)."""
    out = [list(base)]
    for j in range(1, VEC):
        last = b.add(base[-1], ir.Constant(ir.IntType(64), j), flags=("nuw", "nsw"))
        out.append(list(base[:-1]) + [last])
    return out


def store(em: Any, b: ir.IRBuilder, base: ir.Value, shape: tuple, flat: ir.Value,
          values: list, indices: list) -> None:
    """Store VEC values of one output at flat..flat+VEC-1: one aligned vector store for
    4-byte elements, else one store per element (at `indices`)."""
    dtype = values[0].dtype
    if dtype.bits != 32 or dtype.kind not in ("float", "int", "uint"):
        for value, index in zip(values, indices):
            em.store(base, shape, value, index)
        return
    elem = storage_type(dtype)
    vec = ir.Constant(ir.VectorType(elem, VEC), ir.Undefined)
    for j, value in enumerate(values):
        vec = b.insert_element(vec, em.to_storage(value), ir.Constant(ir.IntType(32), j))
    ptr = b.gep(base, [flat], inbounds=True, source_etype=elem)
    b.store(vec, ptr, align=VEC_BYTES)
