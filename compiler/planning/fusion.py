"""Fusion: which instructions are computed together in one kernel, and why not otherwise.

`plan_fusion(module)` returns an `ExecutionPlan` whose kernels cover every live
instruction that is not a parameter or a non-scalar constant, in execution order; the
next step of the pipeline (compiler/passes/pipeline.py) gives it a buffer plan.

How it decides (DESIGN.md, "Fusion"):

1. Some instructions must be *materialized* (written to a buffer): module outputs;
   reductions (reduce, argmax, argmin), library calls (dot_general) and opaque ops (sort,
   argsort, cumulative, scatter), which are always the root of their own kernel; the
   operands of library and opaque ops, which read whole buffers; and an *expensive*
   value (one whose inlined computation contains a costly op: a transcendental one, whose
   primitive has `math` set, or one its stanza marks `costly`, as floored division) that
   has several users or reaches a user through a
   size-expanding broadcast: it is computed once, not per consumer; and the end of every
   MAX_DEPTH-long chain of fused producers (code generation recurses along the chain).
2. Every other instruction (elementwise, index-moving, iota, rank-0 constants) is fused:
   it is computed, at the index it is needed, inside every kernel that uses it (cheap
   producers are duplicated).
3. Each materialized instruction starts a kernel holding it and its fused producers.
   Then, until nothing changes, kernels merge:
   - producer into consumer: a LOOP kernel into a LOOP kernel of the same shape, or into
     a REDUCTION kernel whose reduction input has that shape (it becomes a side output);
   - epilogue: a LOOP kernel of the reduced shape that reads a REDUCTION kernel's results
     only through elementwise ops at the same index (`sum(x) / n`) joins that kernel;
   - siblings: two kernels of the same kind and iteration space that read a common
     buffer of rank >= 1 (layer norm's mean and mean of squares) become one multi-output
     kernel; sharing only a scalar saves no memory traffic and does not count.
   - rows (with `row_kernels`, the default): when the rules above refuse a producer
     edge, a REDUCTION over trailing axes, the reductions that follow it over the same
     rows, and the LOOP kernels over those rows (shape S, or one value per row) that
     produce or consume them become one ROW kernel (compiler/planning/row_fusion.py), if every
     member is valid there (row_schedule) and a row fits in cache (softmax, layer
     norm, log_softmax: one kernel each). A ROW kernel takes further producers and
     consumers only by this rule, and siblings of the same row space.
   A merge never creates a cycle between kernels (no path through a third kernel), and
   never makes a kernel of more than MAX_MEMBERS members (one kernel's own fused
   producers may exceed it: they are not a merge).

What a kernel holds — the contract code generation relies on:

- `members`: module positions computed inside, ascending (operands before users). They
  are elementwise ops, index-moving ops (kind INDEXING), `iota`, rank-0 `constant`s, and,
  in a REDUCTION kernel, its reductions; in LIBRARY/OPAQUE kernels, the one op alone.
- `inputs`: positions read from buffers: parameters, constants of rank >= 1 (the device
  fills their slot from the literal once, at load time), and outputs of earlier kernels.
- `outputs`: members written to buffers: module outputs and values other kernels read.
- LOOP: every output has the same shape, the iteration space. A member is evaluated at
  the index its user asks for (an indexing op maps indices back to its operand).
- REDUCTION: the reductions all have operands of one shape S and reduce the same axes A
  (argmax/argmin reduce A = (axis,)); R is S without A. `Kernel.epilogue` lists the
  members that depend (inside the kernel) on a reduction, and the outputs of another
  shape than S that do not (an epilogue's sibling, fused with it): each is an elementwise
  op or a reshape with as many elements as R, computed after the reduction over A is complete,
  and reads reductions and other epilogue members only at its own row-major linear
  index j (a reshape keeps linear indices; so element j of every epilogue member needs
  element j of the reductions). The epilogue members that are outputs all have one
  shape (the epilogue's iteration space). Every other member does not depend on a reduction and is
  evaluated at the index its user needs. Outputs are reductions or epilogue members
  (R's element count, written at linear index j), or members of shape exactly S (side
  outputs, written at every index of S while the reduction loop passes over it).
- ROW: reductions (`reduce` only) whose space is (S, A) with A the trailing axes, and
  members classified by compiler/planning/row_fusion.py (its docstring is the contract: free
  members, reductions in phases, row values, row-wide values of shape S). Outputs are
  of shape S or have one element per row. `epilogue` is empty.
- LIBRARY: one `dot_general`; OPAQUE: one sort/argsort/cumulative/scatter/tuple. Their
  operands are inputs (buffers), their result an output. A control-flow op (kind
  CONTROL: `while`, `conditional`) is an OPAQUE kernel with the `get_tuple_element`s
  that read its tuple: its operands are inputs, those elements its outputs (the tuple
  itself is never in memory).

A module output that is a parameter or a constant has no kernel: the device returns
(a buffer holding) that input; the buffer plan gives it the input's slot.
"""
from __future__ import annotations

from typing import Optional

from ..hlo.module import Instruction, Module
from .plan import LIBRARY, LOOP, OPAQUE, REDUCTION, ROW, ExecutionPlan, Kernel
from ..primitive import ELEMENTWISE, PRIMITIVES
from ..primitive import LIBRARY as K_LIBRARY
from ..primitive import CONTROL as K_CONTROL
from ..primitive import OPAQUE as K_OPAQUE
from ..primitive import REDUCTION as K_REDUCTION
from .row_fusion import row_fits, row_outputs_ok, row_schedule, trailing_space
from ..hlo.shapes import num_elements

# a kernel bigger than this takes no more producers: bounds recomputation and codegen time
MAX_MEMBERS = 256
# a value at the end of a longer chain of fused producers is materialized: the elemental
# emitter recurses once per op of the chain, and Python's recursion limit is 1000 frames
MAX_DEPTH = 128
# a value whose inlined computation is this many ops or more is not cheap: like a
# transcendental one, it is computed once rather than in each of several consumers (a
# convolution's backward reads the batch-norm/ReLU/pooling backward chain in 9 taps)
LONG_CHAIN = 8


def name_of(module: Module, pos: int) -> str:
    return f"%{module.instructions[pos].op}.{pos}"


def is_input(ins: Instruction) -> bool:
    """Read from a buffer rather than computed: parameters and constants of rank >= 1."""
    return ins.op == "parameter" or (ins.op == "constant" and len(ins.shape) > 0)


def prim_kind(ins: Instruction) -> str:
    return PRIMITIVES[ins.op].kind


def reduce_space(ins: Instruction, module: Module) -> tuple:
    """(input shape S, reduced axes A) of a reduction instruction."""
    operand = module.instructions[ins.operands[0]]
    return operand.shape, PRIMITIVES[ins.op].reduced_axes(ins.attrs)


class _Group:
    """A kernel under construction."""

    def __init__(self, gid: int, kind: str, roots: list, members: set) -> None:
        self.gid = gid
        self.kind = kind
        self.roots = list(roots)       # the materialized instructions it computes
        self.members = set(members)
        self.space: Optional[tuple] = None   # LOOP: shape; REDUCTION: (S, A)


class _Planner:
    def __init__(self, module: Module) -> None:
        self.m = module
        self.ins = module.instructions
        self.users = module.users()
        self.decisions: list = []
        self.why_materialized: dict = {}
        self.rejections: dict = {}     # (producer gid, consumer gid) -> reason
        self.not_cheap: set = set()    # values too costly to compute more than once
        self.live = self._live()

    # ---- 1. what must be materialized -------------------------------------------------

    def _live(self) -> set:
        live, stack = set(), list(self.m.outputs)
        while stack:
            p = stack.pop()
            if p in live:
                continue
            live.add(p)
            stack.extend(self.ins[p].operands)
        return live

    def materialize(self) -> set:
        roots: set = set()
        expensive: dict = {}
        depth: dict = {}
        work: dict = {}        # ops an inlined evaluation of the value costs (capped)
        outputs = set(self.m.outputs)
        for p, ins in enumerate(self.ins):
            if p not in self.live or is_input(ins):
                continue
            kind = prim_kind(ins)
            why = None
            depth[p] = 1 + max((depth.get(o, 0) for o in ins.operands if o not in roots),
                               default=0)
            if p in outputs:
                why = "a module output"
            elif kind == K_REDUCTION:
                why = "a reduction (the root of its own kernel)"
            elif kind in (K_LIBRARY, K_OPAQUE):
                why = f"{'a library call' if kind == K_LIBRARY else 'an opaque op'}"
            elif kind == K_CONTROL:
                why = "control flow (a while or a conditional, with its tuple's elements)"
            elif any(prim_kind(self.ins[u]) in (K_LIBRARY, K_OPAQUE, K_CONTROL)
                     for u in self.users[p] if u in self.live):
                why = "an operand of a library or opaque op, which reads whole buffers"
            cost = PRIMITIVES[ins.op].costly or any(
                expensive.get(o, False) for o in ins.operands if o not in roots)
            expensive[p] = cost
            work[p] = min(LONG_CHAIN, 1 + sum(work.get(o, 0) for o in ins.operands
                                              if o not in roots))
            if cost or work[p] >= LONG_CHAIN:
                self.not_cheap.add(p)
            if why is None and (cost or work[p] >= LONG_CHAIN):
                what = "transcendental work" if cost else f"a chain of {LONG_CHAIN}+ ops"
                why = self._expensive_reason(p, what)
            if why is None and depth[p] >= MAX_DEPTH:
                why = f"a chain of {MAX_DEPTH} fused ops: code generation recurses once per op"
            if why is not None:
                roots.add(p)
                self.why_materialized[p] = why
        return roots

    def _expensive_reason(self, p: int, what: str) -> Optional[str]:
        """Why a value that is not cheap (`what` it is) is materialized, or None."""
        # distinct users: `m + m` reads m once at each index (one evaluation, remembered)
        live_users = sorted({u for u in self.users[p] if u in self.live})
        if len(live_users) > 1:
            return f"{what} with {len(live_users)} users: computed once, not per consumer"
        for u in live_users:
            user = self.ins[u]
            if PRIMITIVES[user.op].repeats and \
                    num_elements(user.shape) > num_elements(self.ins[p].shape):
                return f"{what} feeding an expanding broadcast: computed once"
        return None

    # ---- 2. initial kernels -------------------------------------------------------------

    def initial_groups(self, roots: set) -> list:
        groups = []
        control: dict = {}          # a while/conditional -> its group
        for r in sorted(roots):
            kind = prim_kind(self.ins[r])
            if kind == K_CONTROL and self.ins[r].op == "get_tuple_element":
                # the element joins its tuple's kernel: the control step writes it
                g = control[self.ins[r].operands[0]]
                g.roots.append(r)
                g.members.add(r)
                continue
            if kind == K_CONTROL:
                g = control[r] = _Group(len(groups), OPAQUE, [r], {r})
            elif kind == K_LIBRARY:
                g = _Group(len(groups), LIBRARY, [r], {r})
            elif kind == K_OPAQUE:
                g = _Group(len(groups), OPAQUE, [r], {r})
            else:
                members = self._fused_closure(r, roots)
                g = _Group(len(groups), REDUCTION if kind == K_REDUCTION else LOOP, [r], members)
                g.space = (reduce_space(self.ins[r], self.m) if kind == K_REDUCTION
                           else self.ins[r].shape)
            groups.append(g)
        return groups

    def _fused_closure(self, root: int, roots: set) -> set:
        members, stack = set(), [root]
        while stack:
            p = stack.pop()
            if p in members:
                continue
            members.add(p)
            for o in self.ins[p].operands:
                if o not in roots and not is_input(self.ins[o]):
                    stack.append(o)
        return members


# ---- 3. merging kernels -----------------------------------------------------------------

def _reduced_shape(space: tuple) -> tuple:
    shape, axes = space
    return tuple(n for i, n in enumerate(shape) if i not in axes)


def _fmt_shape(shape: tuple) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


class _Merger:
    """Merges kernels until no rule applies; records why each remaining edge stays.

    The kernel graph (what each kernel reads, which kernels it depends on and feeds) is
    kept up to date across merges, so planning stays fast on large training graphs.
    """

    def __init__(self, planner: _Planner, groups: list, row_kernels: bool = False) -> None:
        self.p = planner
        self.row_kernels = row_kernels
        self.ins = planner.ins
        self.groups = {g.gid: g for g in groups}
        self.producer = {r: g.gid for g in groups for r in g.roots}
        self.ext = {g.gid: {o for m in g.members for o in self.ins[m].operands
                            if o not in g.members} for g in groups}
        self.deps = {g.gid: {self.producer[o] for o in self.ext[g.gid] if o in self.producer}
                     - {g.gid} for g in groups}
        self.cons: dict = {gid: set() for gid in self.groups}
        for gid, ds in self.deps.items():
            for d in ds:
                self.cons[d].add(gid)
        self.first = {g.gid: min(g.roots) for g in groups}
        self.desc: Optional[dict] = None     # reachability bitmasks during a sibling pass
        self.bit: dict = {}
        self.last = {g.gid: max(g.members) for g in groups}

    def reads(self, g: _Group) -> set:
        """What a group reads from other groups' buffers (inputs excluded)."""
        return {o for o in self.ext[g.gid] if o in self.producer}

    def run(self) -> list:
        while True:
            # siblings first: a reduction that took an epilogue no longer pairs with its twin
            merged = self._merge_siblings()
            merged = self._merge_producers() or merged
            if not merged:
                return list(self.groups.values())

    # -- producer into consumer, and reduction epilogues
    def _merge_producers(self) -> bool:
        merged = False
        for cid in sorted(self.groups):
            if cid not in self.groups:
                continue
            c = self.groups[cid]
            retry = True
            while retry:
                retry = False
                for pid in sorted(self.deps[cid]):
                    pg = self.groups[pid]
                    why, row = self._producer_rule(pg, c), None
                    if why is not None and self.row_kernels:
                        row, row_why = self._row_rule(pg, c)
                        why = None if row is not None else (row_why or why)
                    if why is None and self._path_via_third(pid, cid):
                        why = "not fused: merging would create a cycle through another kernel"
                    if why is None:
                        how = ("into a row kernel with" if row is not None else
                               "as an epilogue" if pg.kind == REDUCTION else "into its consumer")
                        self._merge(pg, c, f"fused: kernel of {self._names(pg)} {how} "
                                           f"{self._names(c)}", row)
                        merged = retry = True
                        break
                    self.p.rejections[(pid, cid)] = why
        return merged

    def _producer_rule(self, pg: _Group, c: _Group) -> Optional[str]:
        if ROW in (pg.kind, c.kind):
            return "not fused: a row kernel takes only producers and consumers over its rows"
        if pg.kind in (LIBRARY, OPAQUE):
            return f"not fused: producer is {'a library call' if pg.kind == LIBRARY else 'an opaque op'}; its result lives in a buffer"
        if c.kind in (LIBRARY, OPAQUE):
            return f"not fused: consumer is {'a library call' if c.kind == LIBRARY else 'an opaque op'}, which reads whole buffers"
        if len(pg.members | c.members) > MAX_MEMBERS:
            return f"not fused: the kernel would exceed {MAX_MEMBERS} members"
        moved = self._read_at_other_indices(pg, c) if pg.kind == LOOP else None
        if moved is not None:
            return moved
        if pg.kind == LOOP and c.kind == LOOP:
            if pg.space != c.space:
                return (f"not fused: producer's iteration space {_fmt_shape(pg.space)} differs "
                        f"from the consumer's {_fmt_shape(c.space)}")
            return None
        if pg.kind == LOOP and c.kind == REDUCTION:
            if pg.space != c.space[0]:
                return (f"not fused: producer's iteration space {_fmt_shape(pg.space)} is not "
                        f"the reduction's input space {_fmt_shape(c.space[0])}")
            return None
        if pg.kind == REDUCTION and c.kind == LOOP:
            return self._epilogue_rule(pg, c)
        return "not fused: producer is a reduction feeding another reduction"

    def _read_at_other_indices(self, pg: _Group, c: _Group) -> Optional[str]:
        """A reason not to merge when the consumer would read a costly root of the producer
        at an index other than its own (through an index-moving op), so recompute it."""
        for r in pg.roots:
            if r not in self.p.not_cheap:
                continue
            stack, seen = [r], set()
            while stack:
                p = stack.pop()
                for u in self.p.users[p]:
                    if u not in c.members or u in seen:
                        continue
                    seen.add(u)
                    if prim_kind(self.ins[u]) in (ELEMENTWISE, K_REDUCTION):
                        stack.append(u)
                    else:
                        return (f"not fused: {name_of(self.p.m, u)} would read "
                                f"{name_of(self.p.m, r)} at other indices, and it is not cheap "
                                f"to compute again")
        return None

    # -- row kernels (compiler/planning/row_fusion.py)
    def _row_space(self, g: _Group) -> Optional[tuple]:
        if g.kind == ROW:
            return g.space
        if g.kind != REDUCTION:
            return None
        return trailing_space(self.p.m, next(m for m in sorted(g.members)
                                             if prim_kind(self.ins[m]) == K_REDUCTION))

    def _row_rule(self, pg: _Group, c: _Group) -> tuple:
        """(the row space, None) when pg and c make one ROW kernel, else (None, why)."""
        if pg.kind in (LIBRARY, OPAQUE) or c.kind in (LIBRARY, OPAQUE):
            return None, None
        space = self._row_space(pg) or self._row_space(c)
        if space is None:
            return None, None
        rows = num_elements(_reduced_shape(space))
        for g in (pg, c):
            if g.kind == LOOP and g.space != space[0] and num_elements(g.space) != rows:
                return None, (f"not fused: iteration space {_fmt_shape(g.space)} is neither "
                              f"the row space {_fmt_shape(space[0])} nor one value per row")
            if g.kind != LOOP and self._row_space(g) != space:
                return None, "not fused: reductions over different row spaces"
        members = pg.members | c.members
        if len(members) > MAX_MEMBERS:
            return None, f"not fused: the kernel would exceed {MAX_MEMBERS} members"
        if not row_fits(self.p.m, members, space):
            return None, "not fused: a row is too long to stay in cache between passes"
        _, why = row_schedule(self.p.m, members, space)
        why = why or row_outputs_ok(self.p.m, pg.roots + c.roots, space)
        if why is not None:
            return None, f"not fused into a row kernel: {why}"
        return space, None

    def _epilogue_rule(self, pg: _Group, c: _Group) -> Optional[str]:
        count = num_elements(_reduced_shape(pg.space))
        after = set(epilogue_of(self.ins, pg.members))
        values = after | {m for m in pg.members if prim_kind(self.ins[m]) == K_REDUCTION}
        depends: set = set()
        for m in sorted(c.members):
            if not any(o in values or o in depends for o in self.ins[m].operands):
                continue
            depends.add(m)
            ins = self.ins[m]
            if PRIMITIVES[ins.op].repeats:
                return "not fused: producer is a reduction feeding a broadcast"
            if not _epilogue_op(ins) or num_elements(ins.shape) != count:
                return (f"not fused: producer is a reduction feeding {ins.op} "
                        f"{_fmt_shape(ins.shape)}, which needs its result at other indices")
        if any(o not in values for o in self.reads(c) & pg.members):
            return ("not fused: consumer reads a side output of the reduction kernel, "
                    "which is only complete after the reduction")
        late = [r for r in pg.roots if prim_kind(self.ins[r]) != K_REDUCTION]
        if any(self.ins[r].shape != c.space for r in late):
            return ("not fused: the reduction kernel's epilogue already writes "
                    f"{_fmt_shape(self.ins[late[0]].shape)}, not {_fmt_shape(c.space)}")
        return None

    # -- siblings over the same iteration space
    def _merge_siblings(self) -> bool:
        buckets: dict = {}
        for gid in sorted(self.groups):
            g = self.groups[gid]
            if g.kind not in (LOOP, REDUCTION, ROW):
                continue
            for o in self.ext[gid]:
                if self.ins[o].shape:        # sharing a scalar saves no memory traffic
                    buckets.setdefault((o, g.kind, g.space), []).append(gid)
        self._closure()
        merged = False
        for key in sorted(buckets, key=lambda k: k[0]):
            alive = [gid for gid in buckets[key] if gid in self.groups]
            for i, a in enumerate(alive):
                for b in alive[i + 1:]:
                    if a in self.groups and b in self.groups and self._siblings(a, b):
                        ga, gb = self.groups[a], self.groups[b]
                        self._merge(ga, gb, f"fused: siblings {self._names(ga)} and "
                                            f"{self._names(gb)} read a common input over "
                                            f"the same iteration space")
                        merged = True
                        break
        self.desc = None
        return merged

    def _closure(self) -> None:
        """desc[g]: a bitmask of every kernel reachable from g (for many sibling queries)."""
        self.bit = {gid: 1 << i for i, gid in enumerate(sorted(self.groups))}
        self.desc = {}
        pending = {gid: len(self.cons[gid]) for gid in self.groups}
        ready = [gid for gid, n in pending.items() if n == 0]
        while ready:                   # consumers before producers
            g = ready.pop()
            mask = 0
            for n in self.cons[g]:
                mask |= self.bit[n] | self.desc[n]
            self.desc[g] = mask
            for d in self.deps[g]:
                pending[d] -= 1
                if pending[d] == 0:
                    ready.append(d)

    def _update_closure(self, ai: int, bi: int) -> None:
        a_bit, b_bit = self.bit[ai], self.bit[bi]
        union = (self.desc[ai] | self.desc[bi]) & ~(a_bit | b_bit)
        self.desc[bi] = union
        del self.desc[ai]
        for x, mask in self.desc.items():
            if mask & (a_bit | b_bit):
                self.desc[x] = (mask & ~a_bit) | b_bit | union

    def _siblings(self, a: int, b: int) -> bool:
        ga, gb = self.groups[a], self.groups[b]
        if ga.kind != gb.kind or ga.space != gb.space:
            return False
        if len({self.ins[r].shape for g in (ga, gb) for r in g.roots
                if prim_kind(self.ins[r]) != K_REDUCTION}) > 1:
            return False          # epilogue outputs of one kernel share one shape
        if self.desc is not None:
            if self.desc[a] & self.bit[b] or self.desc[b] & self.bit[a]:
                return False
        elif self._reaches(a, b) or self._reaches(b, a):
            return False
        if ga.kind == ROW and row_schedule(self.p.m, ga.members | gb.members, ga.space)[0] is None:
            return False
        return len(ga.members) + len(gb.members) <= MAX_MEMBERS or \
            len(ga.members | gb.members) <= MAX_MEMBERS

    # -- graph helpers
    def _search(self, start: list, dst: int) -> bool:
        """Whether a path from the kernels in `start` reaches dst. A kernel on such a path
        computes a root before dst's last member, which prunes the search."""
        limit = self.last[dst]
        seen, stack = set(start), list(start)
        while stack:
            g = stack.pop()
            if g == dst:
                return True
            for n in self.cons[g]:
                if n not in seen and (n == dst or self.first[n] < limit):
                    seen.add(n)
                    stack.append(n)
        return False

    def _reaches(self, src: int, dst: int) -> bool:
        return self._search(list(self.cons[src]), dst)

    def _path_via_third(self, src: int, dst: int) -> bool:
        return self._search([n for n in self.cons[src] if n != dst], dst)

    def _names(self, g: _Group) -> str:
        return ", ".join(name_of(self.p.m, r) for r in sorted(g.roots))

    def _merge(self, a: _Group, b: _Group, decision: str, row: Optional[tuple] = None) -> None:
        """b absorbs a (b keeps its id); the kind is the stronger of the two, or ROW over
        the space `row`."""
        self.p.decisions.append(decision)
        ai, bi = a.gid, b.gid
        if self.desc is not None:
            self._update_closure(ai, bi)
        b.roots = sorted(set(a.roots) | set(b.roots))
        b.members |= a.members
        if a.kind == REDUCTION:
            b.kind, b.space = REDUCTION, a.space
        if row is not None:
            b.kind, b.space = ROW, row
        for r in a.roots:
            self.producer[r] = bi
        self.ext[bi] = (self.ext[ai] | self.ext[bi]) - b.members
        self.deps[bi] = (self.deps[ai] | self.deps[bi]) - {ai, bi}
        self.cons[bi] = (self.cons[ai] | self.cons[bi]) - {ai, bi}
        for d in self.deps[bi]:
            self.cons[d].discard(ai)
            self.cons[d].add(bi)
        for c in self.cons[bi]:
            self.deps[c].discard(ai)
            self.deps[c].add(bi)
        self.first[bi] = min(self.first[ai], self.first[bi])
        self.last[bi] = max(self.last[ai], self.last[bi])
        for table in (self.ext, self.deps, self.cons, self.first, self.last):
            del table[ai]
        del self.groups[ai]


def _epilogue_op(ins: Instruction) -> bool:
    """Computable at the linear output index of a reduction: elementwise ops and reshapes
    (a row-major reshape keeps every element's linear index)."""
    return prim_kind(ins) == ELEMENTWISE or PRIMITIVES[ins.op].linear


def epilogue_of(ins: list, members: set) -> list:
    """Members that depend, inside the kernel, on one of its reductions."""
    depends: list = []
    seen: set = set()
    for m in sorted(members):
        if any(o in members and (prim_kind(ins[o]) == K_REDUCTION or o in seen)
               for o in ins[m].operands):
            seen.add(m)
            depends.append(m)
    return depends


def late_members(module: Module, members: set, outputs: list) -> list:
    """A REDUCTION kernel's epilogue: the members that depend on a reduction, and the
    outputs of another shape than the reduction's input S that do not (a sibling of an
    epilogue value that joined with it, as `m * 2.0` beside `where(m, 0, sum(a, -1))`).
    Both are written at the reduced index once the reduction is done; only outputs of
    shape S are side outputs, written while the reduction passes over S (written there,
    an output of the reduced shape would be stored at S's indices, past its end)."""
    ins = module.instructions
    late = set(epilogue_of(ins, members))
    first = next(p for p in sorted(members) if prim_kind(ins[p]) == K_REDUCTION)
    shape, _ = reduce_space(ins[first], module)
    late |= {o for o in outputs
             if prim_kind(ins[o]) != K_REDUCTION and ins[o].shape != shape}
    return sorted(late)


# ---- 4. kernels in execution order ----------------------------------------------------------

def _finish(planner: _Planner, groups: list) -> list:
    m, ins = planner.m, planner.ins
    producer = {r: g.gid for g in groups for r in g.roots}
    by_id = {g.gid: g for g in groups}
    order = _topological(groups, producer, ins)
    reads_of = {g.gid: {o for x in g.members for o in ins[x].operands if o not in g.members}
                for g in groups}
    read_elsewhere = {o for rs in reads_of.values() for o in rs}
    kernels, kernel_of = [], {}
    for k, gid in enumerate(order):
        g = by_id[gid]
        kernel_of[gid] = f"{g.kind}_{k}"
    outputs = set(m.outputs)
    for gid in order:
        g = by_id[gid]
        members = sorted(g.members)
        outs = [x for x in members if x in outputs or x in read_elsewhere]
        kern = Kernel(kernel_of[gid], g.kind, members, outs, sorted(reads_of[gid]))
        if g.kind == REDUCTION:
            kern.epilogue = late_members(m, g.members, outs)
        for o in kern.inputs:
            if o in producer:
                reason = (_side_output_reason(ins, by_id[producer[o]], o)
                          or planner.rejections.get((producer[o], gid))
                          or f"not fused: {name_of(m, o)} is "
                             f"{planner.why_materialized.get(o, 'materialized')}")
                line = f"{reason} ({name_of(m, o)} from {kernel_of[producer[o]]} into {kern.name})"
                kern.reasons.append(line)
                planner.decisions.append(line)
        kernels.append(kern)
    return kernels


def _side_output_reason(ins: list, g: _Group, o: int) -> Optional[str]:
    if g.kind != REDUCTION or prim_kind(ins[o]) == K_REDUCTION or ins[o].shape != g.space[0] \
            or o in epilogue_of(ins, g.members):
        return None                 # a reduction, or a value written at the reduced index
    return ("not fused: a side output of a reduction kernel, read over another iteration "
            "space after the reduction")


def _topological(groups: list, producer: dict, ins: list) -> list:
    deps = {g.gid: {producer[o] for x in g.members for o in ins[x].operands
                    if o not in g.members and o in producer} - {g.gid} for g in groups}
    first = {g.gid: min(g.roots) for g in groups}
    done: list = []
    placed: set = set()
    while len(done) < len(groups):
        ready = [gid for gid in deps if gid not in placed and deps[gid] <= placed]
        if not ready:
            raise RuntimeError("fusion: kernels depend on each other in a cycle")
        nxt = min(ready, key=first.get)
        placed.add(nxt)
        done.append(nxt)
    return done


def plan_fusion(module: Module, row_kernels: bool = True) -> ExecutionPlan:
    """Group the module's instructions into kernels; see the module docstring.
    `row_kernels`: whether reductions over rows may join their users in ROW kernels
    (targets whose code generation has no ROW kernels turn it off)."""
    planner = _Planner(module)
    roots = planner.materialize()
    for r in sorted(roots):
        planner.decisions.append(f"materialized: {name_of(module, r)} is "
                                 f"{planner.why_materialized[r]}")
    groups = _Merger(planner, planner.initial_groups(roots), row_kernels).run()
    kernels = _finish(planner, groups)
    return ExecutionPlan(module, kernels, None, planner.decisions)
