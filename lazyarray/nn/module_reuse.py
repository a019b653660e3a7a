"""Module-call reuse: a model called again with arguments of the same types records one
node instead of re-running its forward op by op.

A decoding loop calls its model once per token; each call recorded some 440 ops (a
small GPT) at ~1.7 us each, and the sync then walked and checked them all again. Here
the outermost module call, when no gradient can flow (inside `no_grad()`, or no tensor
requires grad and no tape records), is remembered as a computation: from the call's
tensor inputs (the tensors its module tree holds -- parameters, buffers, any tensor
attribute -- and the argument tensors; the Python scalars and iotas its trace made are
constants inside) to its tensor outputs and the tensors it updated in place. A later
call whose arguments have the same structure and tensor types, and whose module tree
still holds the very same objects (`lazyarray/guards.py`: code, attributes, globals,
closures, tensor types), does not run forward: it records one `call` node
(compiler/primitives/control.py) over the current input nodes, one `get_tuple_element`
per output, and rebuilds the output structure. The sync sees ~70 nodes instead of ~500;
the compiler inlines the call when it builds a program (a cache miss only). The first
call's outputs are rebound to such a call too, so its program serves every later call.

Reuse must be invisible: forward's Python is skipped, so it is not remembered (a
"doubt": the call runs as before) when forward

- reads a value (`.item()`, `.numpy()`, `bool(t)`, ... : `runtime.value`, the one
  place values are read) or syncs;
- can reach print, input, open, breakpoint, exec/eval, logging or warnings (in code of
  the user's it can read), or a random module; draws random numbers (the generator's
  key is not among the inputs), or reads a tensor not reachable from the module and the
  arguments;
- changes what it can read (an attribute, a global, a list it appends to);
- takes or returns anything but tensors, Python scalars, None and tuples, lists and
  dicts of them.
A tensor of the module or the arguments that forward updates in place (`t[...] = v` on
an argument or a buffer) is updated by the replay too. Training (gradients enabled with a
tensor that requires grad) is never reused. `la.config.module_reuse = False`
(`LAZYARRAY_MODULE_REUSE=0`) turns it off. docs/module_reuse.md.
"""
from __future__ import annotations

import operator
import sys
import threading
import weakref
from typing import Any, Optional

from .. import backward, config, runtime
from ..compiler.primitive import apply
from ..compiler.hlo.computation import build_computation
from ..guards import Doubt, guard
from ..metrics import METRICS
from ..ops import autocast
from ..tensor import TRAINABLE, Tensor
from ..trace_cache import _SCALARS, _constant_only, aliases

_VALUES = config._values
MAX_ENTRIES = 8          # argument types remembered per module (LRU)
MAX_MISSES = 8           # misses in a row after which a module is remembered no more
RETRY_EVERY = 32         # (but at every 32nd miss): its arguments change at every call,
                         # a growing sequence
# id(module) -> (a weak reference to it, its _Slot): by identity (a WeakKeyDictionary
# finds a module by ==, and two modules equal by their own __eq__ shared their entries)
_TABLE: dict = {}
_COMPUTATIONS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()   # _shared
_NODE = operator.attrgetter("_node")
_BUSY = [None]           # the thread inside an outermost call's forward (inner calls plain)
COUNTS = {"hits": 0, "stores": 0, "doubts": 0}
LAST_DOUBT = [""]        # why the latest call was not remembered (tests, debugging)


class _Slot:
    """A module's remembered calls, most recent first, and its misses in a row."""

    __slots__ = ("entries", "misses")

    def __init__(self) -> None:
        self.entries: list = []
        self.misses = 0


class Entry:
    """One remembered call: its argument key, the guard of its module tree, and how to
    replay it (see `_replay`)."""

    __slots__ = ("argkey", "guard", "alias", "specs", "computation", "outs", "writes",
                 "tree", "state", "order", "cls", "copies")

    def __init__(self, argkey: list, guard_: Any, alias: Any, specs: list, computation: Any,
                 outs: list, writes: list, tree: Any, state: Any) -> None:
        self.argkey, self.guard, self.alias, self.specs = argkey, guard_, alias, specs
        self.computation = computation
        self.outs, self.writes, self.tree, self.state = outs, writes, tree, state
        self.order: list = []    # the call's results as the first call listed them pending
        self.cls: Any = None     # the module's class (the guard holds no reference to the
                                 # module itself: the table's key must be free to die)
        self.copies: list = []   # (k, j): the k-th input written with the j-th's node
                                 # as the call began (`a.copy_(b)`, b a value)


def call(module: Any, args: tuple, kwargs: dict) -> Any:
    """`module(*args, **kwargs)`: replayed when remembered, else run (and remembered
    when it may be)."""
    if _BUSY[0] is not None or runtime.TAPE_DEPTH[0] or (
            backward.is_grad_enabled() and TRAINABLE):
        return module.forward(*args, **kwargs)
    item = _TABLE.get(id(module))
    slot = item[1] if item is not None and item[0]() is module else None
    arg_tensors: list = []
    try:
        argkey = _arg_key(args, kwargs, arg_tensors)
    except Doubt as why:
        return _doubt(module, args, kwargs, why)
    if slot is not None:
        for k, e in enumerate(slot.entries):
            if e.argkey == argkey and type(module) is e.cls and e.guard.holds() and \
                    _aliases(e.guard.tensors + arg_tensors) == e.alias:
                if k:
                    slot.entries.insert(0, slot.entries.pop(k))
                slot.misses = 0
                return _replay(e, e.guard.tensors + arg_tensors)
    else:
        try:
            slot = _new_slot(module)
        except TypeError:          # a module class with __slots__ and no __weakref__
            return module.forward(*args, **kwargs)
    slot.misses += 1
    if slot.misses > MAX_MISSES and slot.misses % RETRY_EVERY:
        # its arguments change at every call: not walked and remembered each time (a
        # try now and then, and the entries it has, still serve)
        return _doubt(module, args, kwargs, "its arguments change at every call")
    return _record(module, slot, args, kwargs, argkey, arg_tensors)


def _new_slot(module: Any) -> _Slot:
    """The module's slot in the table, forgotten when the module dies."""
    key = id(module)

    def forget(ref: Any) -> None:
        item = _TABLE.get(key)
        if item is not None and item[0] is ref:
            del _TABLE[key]
    slot = _Slot()
    _TABLE[key] = (weakref.ref(module, forget), slot)
    return slot


# ---- the argument key ------------------------------------------------------------------

def _arg_key(args: tuple, kwargs: dict, tensors: list) -> list:
    """The arguments' structure, Python scalars by type and value, tensors by shape,
    dtype and device (appended to `tensors`), and the context a trace reads (settings,
    autocast, grad mode). Raises Doubt for any other argument."""
    out: list = [len(args)]
    for a in args:
        _walk(a, out, tensors)
    if kwargs:
        out.append(tuple(kwargs))
        for a in kwargs.values():
            _walk(a, out, tensors)
    out.append(tuple(_VALUES.values()))
    out.append(autocast.current())
    out.append(backward.is_grad_enabled())
    return out


def _walk(x: Any, out: list, tensors: list) -> None:
    t = type(x)
    if t is Tensor:
        tensors.append(x)
        n = x._node
        out += (t, n.shape, n.dtype, x._state, id(x) in TRAINABLE)   # (requires_grad)
    elif t is tuple or t is list:
        out += (t, len(x))
        for v in x:
            _walk(v, out, tensors)
    elif t is dict:
        out += (t, tuple(x))
        for v in x.values():
            _walk(v, out, tensors)
    elif t in _SCALARS:
        out += (t, repr(x) if t is float or t is complex else x)
    else:
        raise Doubt(f"an argument of type {t.__name__}")


def _aliases(tensors: list) -> Optional[tuple]:
    """Which input tensors hold one node (trace_cache.aliases): None when all differ."""
    return aliases(list(map(_NODE, tensors)))


# ---- a call run and remembered -----------------------------------------------------------

def _record(module: Any, slot: _Slot, args: tuple, kwargs: dict, argkey: list,
            arg_tensors: list) -> Any:
    ran: list = []
    try:
        g = guard(module.forward, root=module)
        tensors = g.tensors + arg_tensors
        before = [t._node for t in tensors]
        watch = _watch(g.deferred, ran) if g.deferred else None
    except Doubt as why:
        return _doubt(module, args, kwargs, why)
    reads, syncs = runtime.READS[0], METRICS.syncs
    _BUSY[0] = threading.get_ident()
    try:
        result = module.forward(*args, **kwargs)
    finally:
        _BUSY[0] = None
        if watch is not None:
            sys.setprofile(None)
    if runtime.READS[0] != reads or METRICS.syncs != syncs:
        _doubted("forward read a value")     # it must run every time
        return result
    if ran:
        _doubted(ran[0])                     # it called a method that draws or prints
        return result
    try:
        entry = _remember(module, g, argkey, args, kwargs, tensors, before, result)
    except (Doubt, TypeError, ValueError) as why:
        _doubted(str(why))
        return result
    if entry is not None:
        _drop_stale(slot, entry)
        slot.entries.insert(0, entry)
        del slot.entries[MAX_ENTRIES:]
        COUNTS["stores"] += 1
    return result


def _watch(deferred: dict, ran: list) -> Any:
    """Note in `ran` why, when a function of `deferred` (methods of the module's classes
    that draw random numbers or print, guards.py) runs on this thread: a profile hook,
    for the recorded call only. Raises Doubt if another profiler is set."""
    if sys.getprofile() is not None:
        raise Doubt(next(iter(deferred.values()))[1])

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and not ran:
            code = frame.f_code
            found = deferred.get(id(code))
            if found is not None and found[0] is code:
                ran.append(found[1])
    sys.setprofile(hook)
    return hook


def _drop_stale(slot: _Slot, entry: Entry) -> None:
    """Forget the entries holding a tensor that the module (and what it reads) holds no
    more: its weights were replaced (a cast, a state loaded as new tensors). They could
    not hold again, and they kept the old weights alive."""
    live = set(map(id, entry.guard.tensors))
    slot.entries = [e for e in slot.entries if live.issuperset(map(id, e.guard.tensors))]


def _doubted(why: str) -> None:
    COUNTS["doubts"] += 1
    LAST_DOUBT[0] = why


def _doubt(module: Any, args: tuple, kwargs: dict, why: Any) -> Any:
    """forward run as it is, its inner module calls too (not remembered one by one)."""
    _doubted(str(why))
    _BUSY[0] = threading.get_ident()
    try:
        return module.forward(*args, **kwargs)
    finally:
        _BUSY[0] = None


def _remember(module: Any, g: Any, argkey: list, args: tuple, kwargs: dict, tensors: list,
              before: list, result: Any) -> Optional[Entry]:
    """The entry replaying this call, and this call's outputs rebound to its replay (so
    that the program compiled now serves the later calls). Raises Doubt."""
    if not g.holds():
        raise Doubt("forward changed what it reads")
    if any(n.buffer is None and _constant_only(n) for n in before):
        # (recording folds ops on constants: `zeros + 1` is a constant 1, no longer
        # computed from its input; it is remembered once its inputs are values)
        raise Doubt("an input is a constant (la.zeros) not yet computed")
    again: list = []
    if _arg_key(args, kwargs, again) != argkey or any(a is not b for a, b in
                                                       zip(again, tensors[len(g.tensors):])):
        raise Doubt("forward changed its arguments")
    flat, tree = _flatten(result)
    state = _one_state(tensors, flat)
    where = {}
    for k, n in enumerate(before):
        where.setdefault(id(n), k)
    changed = [k for k, t in enumerate(tensors) if t._node is not before[k]]
    copies = [(k, where[id(tensors[k]._node)]) for k in changed
              if id(tensors[k]._node) in where]
    writes = [k for k in changed if id(tensors[k]._node) not in where]
    outs, computed, seen = [], [], {}
    for i, x in enumerate(flat):
        if type(x) is not Tensor:
            outs.append(("v", x))
            continue
        k = next((j for j, t in enumerate(tensors) if t is x), None)
        if id(x) in seen:
            outs.append(("o", seen[id(x)]))      # the same tensor again
        elif k is not None:
            outs.append(("t", k))
        elif id(x._node) in where:
            outs.append(("n", where[id(x._node)]))
        else:
            outs.append(("c", len(computed)))
            computed.append(x._node)
        seen.setdefault(id(x), i)
    if TRAINABLE and _records_gradients([x for (kind, _), x in zip(outs, flat)
                                         if kind == "c"]):
        raise Doubt("forward recorded gradients (la.enable_grad inside it)")
    written = [tensors[k]._node for k in writes]
    roots = computed + written
    if not roots:
        raise Doubt("nothing computed")
    if any(n.buffer is not None or n.op == "parameter" for n in roots):
        # (a constant made in forward, `la.zeros(3)`, `buf.zero_()`, is computed inside)
        raise Doubt("an output that is a value, not a computation")
    specs, leaves = _plan(roots, before)
    computation = _shared(build_computation("module_call", leaves, roots, fixed_inside=True),
                          type(module).__qualname__)
    # (the inputs' sharing as the call began, as a later call's is found: not after
    # forward's in-place writes gave some of them new nodes)
    entry = Entry(argkey, g, aliases(list(before)), specs, computation, outs, writes, tree,
                  state)
    entry.cls = type(module)
    entry.copies = copies
    _rebind(entry, leaves, computed, tensors, flat)
    return entry


def _shared(computation: Any, caller: str) -> Any:
    """The computation an earlier entry made equal to this one, if it lives, else this
    one (named by `caller` for a failing replay's error). A sync compares a call node's
    computation with its template's: one object is an identity check, two equal ones a
    walk over both (a model remembered again under another setting: ~50 us a call)."""
    key = (caller, hash(computation))
    old = _COMPUTATIONS.get(key)
    if old is not None and old == computation:
        return old
    computation.caller = caller
    _COMPUTATIONS[key] = computation
    return computation


def _records_gradients(outputs: list) -> bool:
    """Whether forward recorded an output with gradients enabled (`with la.enable_grad():`
    inside it, under the caller's no_grad): such a tensor is not noted by the no_grad
    block (runtime.NO_GRAD), which stops the gradients of what it noted at its end, and
    keeps its gradient; a replay's, recorded under no_grad, would not."""
    noted = runtime.NO_GRAD.get(threading.get_ident())
    return noted is not None and any(id(weakref.ref(x)) not in noted.ids for x in outputs)


def _plan(roots: list, before: list) -> tuple:
    """(specs, leaf nodes): the inputs the computation reads, each ("t", k), the node
    the k-th input tensor held when forward began. Everything else it reaches is made
    from Python values fixed by the key (constants, runtime scalars, iotas) and computed
    inside. Raises Doubt for a value or a placeholder not among the inputs (a random
    draw reads the generator's key; a tensor reached outside the module and the
    arguments)."""
    where: dict = {}
    for k, n in enumerate(before):
        where.setdefault(id(n), k)
    specs, leaves, seen = [], [], set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        k = where.get(id(n))
        if k is not None:
            specs.append(("t", k))
            leaves.append(n)
        elif n.buffer is not None or n.op == "parameter":
            raise Doubt(f"reads a {n.dtype.short}{list(n.shape)} value that is neither an "
                        "argument nor held by the module")
        else:
            stack.extend(n.operands)
    return specs, leaves


def _one_state(tensors: list, flat: list) -> Any:
    states = {id(t._state): t._state for t in tensors}
    states.update((id(x._state), x._state) for x in flat if type(x) is Tensor)
    if len(states) != 1:
        raise Doubt("tensors on more than one device")
    return next(iter(states.values()))


def _rebind(e: Entry, operands: list, computed: list, tensors: list, flat: list) -> None:
    """Give this call's computed outputs and written tensors the replay's nodes; note
    the order they are pending in, which a replay repeats (a sync's graph, and so its
    program, follows the order of the pending tensors)."""
    elements = _elements(e, operands, computed[0].site if computed else None)
    holders: list = [None] * len(elements)
    for (kind, j), x in zip(e.outs, flat):
        if kind == "c":
            x._node = elements[j]
            holders[j] = x
    base = len(computed)
    for i, k in enumerate(e.writes):
        tensors[k]._node = elements[base + i]
        holders[base + i] = tensors[k]
    where: dict = {}
    for i, r in enumerate(e.state.pending):
        where.setdefault(id(r()), i)
    e.order = sorted(range(len(elements)), key=lambda i: where.get(id(holders[i]), -1))


def _elements(e: Entry, operands: list, site: Any) -> list:
    """The call of the entry's computation over `operands`, and its results' nodes."""
    c = apply("call", *operands, computation=e.computation)
    c.site = site
    out = [apply("get_tuple_element", c, index=k) for k in range(len(c.dtype))]
    for n in out:
        n.site = site
    return out


# ---- a remembered call replayed ----------------------------------------------------------

def _replay(e: Entry, tensors: list) -> Any:
    """Record the entry's call over the current inputs; the outputs in their structure."""
    COUNTS["hits"] += 1
    operands = [tensors[k]._node for _, k in e.specs]
    elements = _elements(e, operands, None)
    made: list = [None] * len(elements)
    base = len(elements) - len(e.writes)
    written = e.writes or e.copies
    if not written:
        for i, t in zip(e.order, Tensor._wrap_all([elements[i] for i in e.order], e.state)):
            made[i] = t
    else:
        # an output holding an input's node holds it as forward began: taken before the
        # writes below give the written inputs their new nodes
        held = {j: tensors[j]._node for kind, j in e.outs if kind == "n"}
        sources = [tensors[j]._node for _, j in e.copies]
        for i in e.order:           # (pending in the first call's order)
            if i < base:
                made[i] = Tensor._wrap_all([elements[i]], e.state)[0]
            else:
                Tensor._assign_all([tensors[e.writes[i - base]]], [elements[i]])
        for (k, _), n in zip(e.copies, sources):
            Tensor._assign_all([tensors[k]], [n])
    flat = []
    for kind, j in e.outs:
        if kind == "c":
            flat.append(made[j])
        elif kind == "t":
            flat.append(tensors[j])
        elif kind == "n":
            flat.append(Tensor._wrap(held[j] if written else tensors[j]._node, e.state))
        elif kind == "o":
            flat.append(flat[j])
        else:
            flat.append(j)
    return e.tree(flat)


# ---- outputs ---------------------------------------------------------------------------

def _flatten(x: Any) -> tuple:
    """(leaves, rebuild) of a result made of tensors, Python scalars and None in tuples,
    lists and dicts; Doubt for anything else. `rebuild` holds no leaf (an entry keeps it:
    the first call's tensors, and the graphs behind them, must not live as long)."""
    t = type(x)
    if t is tuple or t is list:
        parts = [_flatten(v) for v in x]
        leaves = [v for p in parts for v in p[0]]
        subs = [(sub, len(ls)) for ls, sub in parts]
        del parts

        def rebuild(leaves: list) -> Any:
            out, at = [], 0
            for sub, n in subs:
                out.append(sub(leaves[at:at + n]))
                at += n
            return t(out)
        return leaves, rebuild
    if t is dict:
        keys = list(x)
        leaves, sub = _flatten([x[k] for k in keys])
        return leaves, lambda ls: dict(zip(keys, sub(ls)))
    if t is Tensor or t in _SCALARS:
        return [x], _first
    raise Doubt(f"forward returned a {t.__name__}")


def _first(leaves: list) -> Any:
    return leaves[0]


def clear() -> None:
    """Forget every remembered call, zero the counts (tests)."""
    _TABLE.clear()
    for k in COUNTS:
        COUNTS[k] = 0
