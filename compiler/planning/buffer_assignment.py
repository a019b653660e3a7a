"""Buffer assignment: a slot for every value that lives in memory, reusing dead ones.

Values in memory are the parameters, the constants that kernels read as inputs, and every
kernel output. Each gets a slot (`BufferPlan.slot_of[position]`); slots are what a device
allocates. Rules:

- parameters and input constants get their own slots (the device binds the caller's
  buffers / the literal there);
- module outputs get their own fresh slots, because the caller keeps them; a module
  output that is a parameter or constant shares that input's slot;
- a temporary (a kernel output no module output names) takes the slot of a value that is
  already dead — last read by an earlier kernel, never by the one writing — choosing the
  best fit and growing a temporary slot if none is large enough;
- only a donated parameter's slot (the runtime promises that the caller gives up that
  buffer) may be taken by an output or temporary once the parameter is dead, and only
  when at least as large (a caller's buffer cannot grow); an output takes exactly-sized
  ones only. `donate_inputs` is True (every parameter), False (none), or a collection
  of parameter numbers (those: what the runtime decides per sync).
- in place: an output of a LOOP kernel takes the slot of a donated parameter *that same
  kernel* reads for the last time (so the update `w - lr * g` overwrites `w` instead of
  needing a second buffer alive during the kernel), when the pair is provably safe:
  same shape and dtype, the parameter is no module output, every output of the kernel
  has that shape (one loop over it), and every member that uses the parameter,
  directly or through other members, is ELEMENTWISE (no transpose, slice, broadcast,
  reverse, gather, pad, concatenate or reduction moves the index it is read at), or is a
  `dynamic_update_slice` of it (its operand: read at the output's own index; the update
  and the starts must not depend on the parameter). Then
  every element of the parameter is read only by the loop iteration that writes that
  same element of the output, and code generation computes all of an iteration's
  outputs before storing any (compiler/codegen/cpu_kernels.py, nvptx.py), so each
  read comes before the write at its index. The pair shares one pointer argument in
  the generated function. `BufferPlan.aliases` records output -> parameter; a device
  that could not take over the caller's buffer copies the parameter into the
  output's own memory first (devices/cpu/cpu.py). Of several safe pairs, an output takes
  the parameter it is nearest to by ops (the state it is the new value of: Adam's w',
  m' and v' each take their own old buffer, not one another's), so that a training
  loop's buffers stay put from step to step (a CUDA graph then replays every step).
  A kernel that is one `dynamic_update_slice` over its own operand in place (a KV cache
  write) is then generated as a loop over the update alone (cpu_kernels.py): the rest of
  the buffer already holds its value, so nothing else is read or written.

`peak_bytes` is the largest total size of the slots live at any kernel step (a value is
live from the step that writes it to the last step that reads it; inputs from the start,
module outputs to the end).
"""
from __future__ import annotations

from typing import Any

from ..hlo.module import Module
from .plan import LOOP, BufferPlan
from ..primitive import ELEMENTWISE, PRIMITIVES


def value_bytes(module: Module, pos: int) -> int:
    ins = module.instructions[pos]
    n = 1
    for d in ins.shape:
        n *= d
    return n * ins.dtype.itemsize


class _Slots:
    def __init__(self) -> None:
        self.sizes: list = []
        self.kinds: list = []
        self.free_temp: set = set()
        self.free_param: set = set()
        self.reserved: set = set()    # carried parameters' slots: for their own outputs

    def new(self, size: int, kind: str) -> int:
        self.sizes.append(size)
        self.kinds.append(kind)
        return len(self.sizes) - 1

    def take_temporary(self, size: int) -> int:
        fits = [s for s in self.free_temp | (self.free_param - self.reserved)
                if self.sizes[s] >= size]
        if fits:
            slot = min(fits, key=lambda s: (self.sizes[s], s))
        else:
            growable = sorted(self.free_temp, key=lambda s: (-self.sizes[s], s))
            if not growable:
                return self.new(size, "temporary")
            slot = growable[0]
            self.sizes[slot] = size
        self.free_temp.discard(slot)
        self.free_param.discard(slot)
        return slot

    def take_output(self, size: int, may_take: Any = None) -> int:
        exact = sorted(s for s in self.free_param if self.sizes[s] == size
                       and (may_take is None or may_take(s)))
        if exact:
            self.free_param.discard(exact[0])
            return exact[0]
        return self.new(size, "output")


def assign_buffers(module: Module, kernels: list, donate_inputs: Any = False) -> BufferPlan:
    """Slots for the values of `kernels` (in execution order); see the module docstring."""
    ins = module.instructions
    owner = _owners(module, donate_inputs)    # carried parameter -> the output it becomes
    donated = set(owner) if isinstance(donate_inputs, dict) else \
        _donated_positions(module, donate_inputs)
    end = len(kernels)
    outputs = set(module.outputs)
    last_use: dict = {}
    for k, kern in enumerate(kernels):
        for p in kern.inputs:
            last_use[p] = k
    for p in outputs:
        last_use[p] = end

    slots = _Slots()
    slot_of: dict = {}
    start: dict = {}
    dying: dict = {}              # step -> values whose last reader ran just before it
    for p, i in enumerate(ins):
        if i.op == "parameter" or (i.op == "constant" and (p in last_use)):
            kind = "parameter" if i.op == "parameter" else "constant"
            slot_of[p] = slots.new(value_bytes(module, p), kind)
            start[p] = -1
            dying.setdefault(last_use.get(p, -1) + 1, []).append(p)
    slots.reserved = {slot_of[p] for p in owner}

    aliases: dict = {}            # output -> the donated parameter whose slot it took in place
    handed_over: set = set()      # those parameters: their slot now belongs to the output
    for k, kern in enumerate(kernels):
        for p in dying.pop(k, ()):
            if p not in handed_over:
                _release(slot_of[p], p in donated, slots)
        in_place = _in_place_pairs(module, kern, donated - outputs, last_use, k, owner)
        handed_over.update(in_place.values())
        aliases.update(in_place)
        for p in kern.outputs:
            size = value_bytes(module, p)
            if p in in_place:
                slot_of[p] = slot_of[in_place[p]]
            elif p in outputs:
                slot_of[p] = slots.take_output(size, _may_take(owner, slot_of, p))
            else:
                slot_of[p] = slots.take_temporary(size)
            start[p] = k
            last_use.setdefault(p, k)       # written but never read: dead after its kernel
            dying.setdefault(last_use[p] + 1, []).append(p)

    peak = _peak(slot_of, start, last_use, slots.sizes, end)
    return BufferPlan(slot_of, list(slots.sizes), peak, list(slots.kinds), bool(donated),
                      aliases)


def updated_in_place(module: Module, buffers: BufferPlan, members: Any,
                     outputs: Any) -> Any:
    """The kernel's dynamic_update_slice when its one output is written over its own
    operand (a slot it shares with it: an in-place pair above, a KV cache carried by a
    loop), else None: then everything outside the update already holds its value, and
    every target's update kernel (the CPU's and the GPU's) loops over the update alone."""
    if len(outputs) != 1:
        return None
    ins = module.instructions
    dus = ins[outputs[0]]
    if dus.op != "dynamic_update_slice" or 0 in ins[dus.operands[1]].shape:
        return None
    x = dus.operands[0]
    slot_of = buffers.slot_of
    same = x not in members and x in slot_of and slot_of[x] == slot_of.get(outputs[0])
    return dus if same else None


def _owners(module: Module, donate_inputs: Any) -> dict:
    """{parameter position: output position} of a carried state (`donate_inputs` a dict),
    leaving out a state whose output is a parameter or the output of another state too
    (after simplification two states may be one value): those are not donated."""
    if not isinstance(donate_inputs, dict):
        return {}
    outs = module.outputs
    params = set(module.parameters)
    owner = {p: outs[donate_inputs[module.instructions[p].attrs["number"]]]
             for p in module.parameters
             if module.instructions[p].attrs["number"] in donate_inputs}
    return {p: o for p, o in owner.items() if o not in params and outs.count(o) == 1}


def _may_take(owner: dict, slot_of: dict, out: int) -> Any:
    """Which free parameter slots output `out` may take: any (None) unless parameters
    are carried state, then only its own state's."""
    if not owner:
        return None
    mine = {slot_of[p] for p, o in owner.items() if o == out}
    return mine.__contains__


def _in_place_pairs(module: Module, kern: Any, donated: set, last_use: dict, k: int,
                    owner: Any = None) -> dict:
    """output -> donated parameter it may overwrite in place (see the module docstring)."""
    owner = owner or {}
    if kern.kind != LOOP or not kern.outputs:
        return {}
    ins = module.instructions
    shape = ins[kern.outputs[0]].shape
    if any(ins[o].shape != shape for o in kern.outputs):
        return {}
    candidates = [x for x in sorted(kern.inputs)
                  if x in donated and last_use.get(x) == k and ins[x].shape == shape
                  and _read_at_own_index(module, kern, x)]
    if owner:       # carried state: each parameter only into its own output
        candidates = [x for x in candidates if owner.get(x) in kern.outputs]
    pairs: dict = {}
    free = list(kern.outputs)
    # each output first takes the input it is the new value of (the nearest by ops: an
    # optimizer's `w - lr * m'` is one op from w, three from m), so that a training
    # step's states keep their buffers from step to step instead of rotating among the
    # same-shaped ones (which changed the pointers, and a CUDA graph's key, every step)
    distance = _distances(module, kern, candidates)
    near = sorted((d, o, x) for (x, o), d in distance.items())
    for _, o, x in near:
        if o in free and x in candidates and ins[o].dtype == ins[x].dtype \
                and owner.get(x, o) == o:
            pairs[o] = x
            free.remove(o)
            candidates.remove(x)
    for x in candidates:
        match = [o for o in free if ins[o].dtype == ins[x].dtype and owner.get(x, o) == o]
        if match:
            pairs[match[0]] = x
            free.remove(match[0])
    return pairs


def _distances(module: Module, kern: Any, inputs: list) -> dict:
    """(input, output) -> the fewest ops on a path from the input to the output inside
    the kernel, for each output that depends on the input."""
    ins = module.instructions
    outputs = set(kern.outputs)
    found: dict = {}
    for x in inputs:
        depth = {x: 0}
        for p in kern.members:          # operands come before their users
            ds = [depth[o] for o in ins[p].operands if o in depth]
            if ds:
                depth[p] = min(ds) + 1
                if p in outputs:
                    found[(x, p)] = depth[p]
    return found


def _read_at_own_index(module: Module, kern: Any, x: int) -> bool:
    """Whether every member depending on `x` is elementwise over x's shape, so x is read
    only at the index of the element being computed."""
    ins = module.instructions
    tainted = {x}
    for p in kern.members:          # operands come before their users
        ops = ins[p].operands
        if not any(o in tainted for o in ops):
            continue
        if ins[p].shape != ins[x].shape:
            return False
        prim = PRIMITIVES.get(ins[p].op)
        # a dynamic_update_slice reads its operand at the output's own index; its update
        # (read at a shifted index) and starts must not depend on x
        dus = ins[p].op == "dynamic_update_slice" and ops[0] in tainted \
            and not any(o in tainted for o in ops[1:])
        if not dus and (prim is None or prim.kind != ELEMENTWISE):
            return False
        tainted.add(p)
    return True


def _donated_positions(module: Module, donate_inputs: Any) -> set:
    if donate_inputs is True:
        return set(module.parameters)
    if not donate_inputs:
        return set()
    numbers = set(donate_inputs)
    return {p for p in module.parameters if module.instructions[p].attrs["number"] in numbers}


def _release(slot: int, donated: bool, slots: _Slots) -> None:
    """Free a dead value's slot: temporaries always, parameters only when donated.
    A slot is reused only after it is freed, so its occupant is the value that died."""
    kind = slots.kinds[slot]
    if kind == "temporary":
        slots.free_temp.add(slot)
    elif kind == "parameter" and donated:
        slots.free_param.add(slot)


def _peak(slot_of: dict, start: dict, last_use: dict, sizes: list, end: int) -> int:
    """Live bytes add up per slot: a slot counts at a step when any of its values is live
    there (an in-place output and the parameter it overwrites share their kernel's step)."""
    steps = max(end, 1)
    spans: dict = {}
    for p, slot in slot_of.items():
        first = max(start.get(p, -1), 0)
        last = min(last_use.get(p, first), steps - 1)
        if last >= first:
            spans.setdefault(slot, []).append((first, last))
    delta = [0] * (steps + 1)
    for slot, ranges in spans.items():
        for first, last in _merged(ranges):
            delta[first] += sizes[slot]
            delta[last + 1] -= sizes[slot]
    peak = live = 0
    for d in delta[:steps]:
        live += d
        peak = max(peak, live)
    return peak


def _merged(ranges: list) -> list:
    out: list = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out
