"""Collectives across the processes of a data-parallel job: all_reduce, all_gather and
broadcast (XLA's AllReduce, AllGather and a broadcast from one replica).

They are library calls whose references call the group's communicator
(compiler/primitives/process_group.py), and which a CUDA device first offers to that communicator to
queue on its own stream (`device_calls["cuda_stream"]`: NCCL where `la.distributed` runs
on it), so a collective runs as one step of the compiled program, in
the order the program gives, on every process. They are not pure functions of their
operands: constant folding leaves them for run time (a cache hit on one process and a
compile on another must still meet in the same collective).
"""
from __future__ import annotations

from ..graph import builders as A
from ..transforms import batching as B
from ..hlo import dtypes as D
from .process_group import communicator, run_on_cuda
from ..primitive import LIBRARY, NOT_DIFFERENTIABLE, LibraryCall, apply, fail, primitive

KINDS = ("sum", "prod", "max", "min")


def _all_reduce_infer(operands, kind):
    (x,) = operands
    if kind not in KINDS:
        fail("all_reduce", operands, f"kind must be one of {KINDS}, got {kind!r}")
    if x.dtype is D.bool_:
        fail("all_reduce", operands, "needs numeric operands (convert bool first)", TypeError)
    return x.shape, x.dtype


def _all_reduce_vjp(g, out, x, kind):
    """The cotangent of a result reaches every process's operand: an operand's cotangent
    sums the cotangents of all results (another all_reduce). Times the derivative: 1 for
    sum; out / x for prod; for max and min, shared by the operands equal to the result."""
    total = apply("all_reduce", g, kind="sum")
    if kind == "sum":
        return (total,)
    if kind == "prod":
        return (A.div(A.mul(total, out), x),)
    hit = A.compare(x, out, "EQ")
    ties = apply("all_reduce", A.select(hit, A.full_like(x, 1), A.zeros_like(x)), kind="sum")
    return (A.where_else_zero(hit, A.div(total, ties)),)


all_reduce = primitive(
    "all_reduce", LIBRARY, _all_reduce_infer,
    lambda x, kind: communicator().all_reduce(x, kind), attrs=("kind",), pure=False,
    library=LibraryCall("host"), device_calls={"cuda_stream": run_on_cuda},
    doc="Combine the operand across every process with `kind`; every process gets the result.",
    vjp=_all_reduce_vjp, batch=lambda node, size, ops, _: B.same_op(node, ops))


def _all_gather_infer(operands, size):
    (x,) = operands
    if int(size) < 1:
        fail("all_gather", operands, f"the group size must be >= 1, got {size}")
    return (int(size),) + tuple(x.shape), x.dtype


def _all_gather_batch(node, size, operands, batched):
    out = B.same_op(node, operands)                   # (processes, batch, ...)
    return B.move_to_front(out, 1)


all_gather = primitive(
    "all_gather", LIBRARY, _all_gather_infer,
    lambda x, size: communicator().all_gather(x), attrs=("size",), pure=False,
    library=LibraryCall("host"), device_calls={"cuda_stream": run_on_cuda},
    doc="Stack every process's operand along a new leading axis of length `size` (the "
        "group's size, fixed when recorded), in rank order.",
    vjp=NOT_DIFFERENTIABLE, batch=_all_gather_batch)


def _broadcast_infer(operands, root):
    (x,) = operands
    if int(root) < 0:
        fail("broadcast", operands, f"root must be a process rank >= 0, got {root}")
    return x.shape, x.dtype


broadcast = primitive(
    "broadcast", LIBRARY, _broadcast_infer,
    lambda x, root: communicator().broadcast(x, root), attrs=("root",), pure=False,
    library=LibraryCall("host"), device_calls={"cuda_stream": run_on_cuda},
    doc="Every process gets process `root`'s operand.",
    vjp=NOT_DIFFERENTIABLE, batch=lambda node, size, ops, _: B.same_op(node, ops))
