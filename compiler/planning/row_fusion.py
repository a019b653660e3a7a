"""ROW kernels: a chain of reductions over the trailing axes and the elementwise work
around them, computed one row at a time (XLA's "softmax" / row fusions).

The row space of a ROW kernel is (S, A): S the shape its reductions read, A their
reduced axes, which are the trailing ones. O = S without A is the outer (row) shape;
a *row* is one index of O, and holds prod(S[A]) elements (the row length L).

Every member of a ROW kernel is one of:

- *free*: it depends on no reduction of the kernel; it is computed at whatever index
  its user asks for (parameters read, cheap or transcendental producers recomputed);
- a *reduction* `reduce` over (S, A) (argmax/argmin are not row kernels);
- a *row value*: it depends on a reduction and has prod(O) elements; element r belongs
  to row r (row-major linear index r). Elementwise ops of row values and reshapes of
  them (a reshape keeps linear indices) are row values;
- a *row-wide value*: shape S, depending on a reduction only through a
  `broadcast_in_dim` that maps a row value's dimensions onto the outer dimensions of S
  in order (so element [r, j] reads row value r), or a `pad` of a row value that pads
  only the row's dimensions (element [r, j] is row value r or the padding value), and
  elementwise ops over such values.

Nothing else may depend on a reduction inside a ROW kernel (a transpose, slice or
reversal of a row value would need other rows). Outputs are reductions, row values or
members of other prod(O)-element shapes (written once per row, at linear index r), or
members of shape S (written over the row in the last pass).

Phases: a reduction's phase is one more than the highest phase of the reductions it
depends on (0 for none). Code generation runs, for each row of its [start, end) range,
one pass over the row per phase (computing that phase's reductions together, in
registers), then the row values that the phase made computable, then, if the kernel
writes values of shape S, one last pass writing them. An output of shape S that a
phase's pass computes anyway (a value its reductions read) is written by that pass
instead (`store_passes`); with no other such output there is no last pass. A row of more than MAX_ROW_BYTES
is not a ROW kernel: each pass must find the row still in cache.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..hlo.module import Module
from ..primitive import ELEMENTWISE, PRIMITIVES
from ..primitives.reduction import reducer_of
from ..hlo.shapes import num_elements

# each phase re-reads the row; it must stay in L1/L2 between passes
MAX_ROW_BYTES = 64 * 1024


def _is_reduce(ins) -> bool:
    return PRIMITIVES[ins.op].kind == "reduction"


def trailing_space(module: Module, pos: int) -> Optional[tuple]:
    """(S, A) of a `reduce` over trailing axes of a row longer than 1, else None."""
    ins = module.instructions[pos]
    r = reducer_of(ins)
    if r is None or r.arg:
        return None
    shape = module.instructions[ins.operands[0]].shape
    axes = tuple(ins.attrs["axes"])
    if not axes or axes != tuple(range(len(shape) - len(axes), len(shape))):
        return None
    if num_elements(shape[len(shape) - len(axes):]) < 2:
        return None
    return shape, axes


def outer_shape(space: tuple) -> tuple:
    shape, axes = space
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _row_broadcast(module: Module, ins, space: tuple) -> bool:
    """Whether a broadcast_in_dim of a row value to S reads row r at every [r, j]."""
    shape, axes = space
    if ins.shape != shape:
        return False
    src = module.instructions[ins.operands[0]].shape
    outer = len(shape) - len(axes)
    mapped = []
    for k, d in enumerate(ins.attrs["broadcast_dimensions"]):
        if src[k] == 1:
            continue
        if d >= outer or src[k] != shape[d]:
            return False
        mapped.append(d)
    # every outer dimension longer than 1 must be indexed by the row value
    return mapped == [d for d in range(outer) if shape[d] != 1]


def _row_pad(module: Module, ins, space: tuple) -> bool:
    """Whether a pad of a row value to S keeps row r at every [r, j]: the outer
    dimensions are not padded (the gradient of slicing a row's first element pads it
    back over the row)."""
    shape, axes = space
    if ins.shape != shape:
        return False
    outer = len(shape) - len(axes)
    padding = (ins.attrs["edge_padding_low"], ins.attrs["edge_padding_high"],
               ins.attrs["interior_padding"])
    return all(p[d] == 0 for p in padding for d in range(outer))


@dataclass
class RowSchedule:
    space: tuple            # (S, A)
    phases: list            # phases[k]: the reductions computed in pass k (positions)
    row_values: list        # [(position, phase)]: non-reduction row values, ascending
    wide: set               # row-wide members (shape S, depending on a reduction)


def row_schedule(module: Module, members: set, space: tuple) -> tuple:
    """(RowSchedule, None) when `members` form a valid ROW kernel over `space`, else
    (None, the reason in words)."""
    ins = module.instructions
    shape, axes = space
    rows = num_elements(outer_shape(space))
    level: dict = {}         # member -> highest phase it depends on (absent: free)
    reductions: dict = {}
    row_values: list = []
    wide: set = set()
    for m in sorted(members):
        i = ins[m]
        deps = [level[o] for o in i.operands if o in level]
        if _is_reduce(i):
            if reducer_of(i).arg or trailing_space(module, m) != space:
                return None, (f"{i.op} over {_shape_axes(module, m)} is not a reduction over "
                              f"the row space {_fmt(space)}")
            if i.operands[0] in level and i.operands[0] not in wide:
                return None, f"{i.op} reads a row value, not a row"
            reductions[m] = level[m] = 1 + max(deps, default=0)
            continue
        if not deps:
            continue
        level[m] = max(deps)
        dep_ops = [o for o in i.operands if o in level]
        if PRIMITIVES[i.op].kind == ELEMENTWISE:
            if all(o in wide for o in dep_ops) and i.shape == shape:
                wide.add(m)
            elif num_elements(i.shape) == rows and not any(o in wide for o in dep_ops):
                row_values.append((m, level[m]))
            else:
                return None, f"{i.op} mixes row values and rows"
        elif PRIMITIVES[i.op].linear and dep_ops[0] not in wide and \
                num_elements(i.shape) == rows:
            row_values.append((m, level[m]))
        elif i.op == "broadcast_in_dim" and dep_ops[0] not in wide and \
                _row_broadcast(module, i, space):
            wide.add(m)
        elif i.op == "pad" and dep_ops == [i.operands[0]] and dep_ops[0] not in wide and \
                _row_pad(module, i, space):
            wide.add(m)
        else:
            return None, (f"{i.op} {_fmt_shape(i.shape)} needs a reduction's results at "
                          f"other rows")
    if not reductions:
        return None, "no reduction over the row"
    count = max(reductions.values())
    phases = [sorted(r for r, k in reductions.items() if k == p) for p in range(1, count + 1)]
    return RowSchedule(space, phases, row_values, wide), None


def row_outputs_ok(module: Module, roots: list, space: tuple) -> Optional[str]:
    """None when every root can be written by a ROW kernel over `space`."""
    rows = num_elements(outer_shape(space))
    for r in roots:
        shape = module.instructions[r].shape
        if shape != space[0] and num_elements(shape) != rows:
            return (f"{module.instructions[r].op} {_fmt_shape(shape)} is neither a row "
                    f"value nor of the row space {_fmt_shape(space[0])}")
    return None


def row_fits(module: Module, members: set, space: tuple) -> bool:
    shape, axes = space
    length = num_elements(shape[len(shape) - len(axes):])
    widest = max((module.instructions[m].dtype.itemsize for m in members
                  if module.instructions[m].shape == shape), default=4)
    return length * max(widest, 4) <= MAX_ROW_BYTES


def _shape_axes(module: Module, pos: int) -> str:
    ins = module.instructions[pos]
    return f"{_fmt_shape(module.instructions[ins.operands[0]].shape)} axes {ins.attrs.get('axes', ins.attrs.get('axis'))}"


def _fmt_shape(shape: tuple) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


def _fmt(space: tuple) -> str:
    return f"{_fmt_shape(space[0])} axes {tuple(space[1])}"


def store_passes(module: Module, members: set, sched: RowSchedule, outputs: list) -> dict:
    """Outputs of shape S that a pass before the last one computes anyway (position -> the
    first such pass): values its reductions read at the pass's own index (BatchNorm's or
    layer norm's backward chain, stored and summed). Stored there, they cost no second
    evaluation in the last pass, and without other outputs of shape S there is no last
    pass. An output no reduction reads stays in the last pass (moved, it would be
    computed there anyway for the others)."""
    ins = module.instructions
    out: dict = {}
    for k, phase in enumerate(sched.phases):
        seen = computed_at_index(module, members, sched, [ins[r].operands[0] for r in phase])
        for o in outputs:
            if o in seen and o not in out:
                out[o] = k
    return out


def computed_at_index(module: Module, members: set, sched: RowSchedule, starts: list) -> set:
    """The members a pass computes at its own index to get `starts`: elementwise ops of
    shape S, through to reads, row values and reductions (which it does not compute)."""
    ins = module.instructions
    shape = sched.space[0]
    stops = {p for phase in sched.phases for p in phase} | {p for p, _ in sched.row_values}
    seen, stack = set(), [s for s in starts if s in members and s not in stops]
    while stack:
        p = stack.pop()
        if p in seen or ins[p].shape != shape or PRIMITIVES[ins[p].op].kind != ELEMENTWISE:
            continue
        seen.add(p)
        stack.extend(o for o in ins[p].operands if o in members and o not in stops)
    return seen


def reused_across_passes(module: Module, members: set, sched: RowSchedule,
                         outputs: list, early: dict = None) -> dict:
    """Transcendental members of shape S needed by more than one pass over the row
    (softmax's exp(x - max) feeds the sum and the output): position -> the first pass
    that needs them (passes 0..len(phases)-1 reduce, pass len(phases) writes). A target
    may keep such a value in a row-sized scratch buffer instead of recomputing it. Only
    values whose every user in the kernel reads them at the same index (elementwise ops
    of shape S, or a reduction) qualify: the scratch holds the current row only.
    `early`: outputs written by an earlier pass (`store_passes`), not by the last."""
    early = early or {}
    ins = module.instructions
    shape = sched.space[0]
    users: dict = {}
    for m in members:
        for o in ins[m].operands:
            users.setdefault(o, []).append(m)

    def same_index(m: int) -> bool:
        return ins[m].shape == shape and PRIMITIVES[ins[m].op].kind == ELEMENTWISE

    def closure(starts: list) -> set:
        return computed_at_index(module, members, sched, starts)

    passes = [closure([ins[r].operands[0] for r in phase] +
                      [o for o, k in early.items() if k == n])
              for n, phase in enumerate(sched.phases)]
    passes.append(closure([o for o in outputs if ins[o].shape == shape and o not in early]))
    reductions = {p for phase in sched.phases for p in phase}
    local: dict = {}

    def at_own_index_only(m: int) -> bool:
        """Every use of m, through any chain of users, reads it at the pass's index."""
        if m not in local:
            local[m] = all(u in reductions or (same_index(u) and at_own_index_only(u))
                           for u in users.get(m, []))
        return local[m]

    out: dict = {}
    for m in sorted(members, reverse=True):     # users first: shallow recursion
        at_own_index_only(m)
    for m in sorted(members):
        needed = [k for k, seen in enumerate(passes) if m in seen]
        if len(needed) >= 2 and PRIMITIVES[ins[m].op].costly and \
                at_own_index_only(m):
            out[m] = needed[0]
    return out
