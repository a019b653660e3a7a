"""A `while` or `conditional` step run in native code: the condition, the body's kernels
and products, the branch choice, all one call of the control runner
(devices/cpu/control_ir.py), with no Python per iteration.

Each sub-program (a loop's condition and body, a conditional's branches) is planned as a
NativeProgram of its own (devices/native_program.py) and *bound* here: its fresh memory
(the slots of its outputs, which a plain run takes anew each time) is given once, kept
with the step. A control step is then a list of the runner's ops over the buffer table
of the program it is a step of (`word(p)`: the address of the table entry of value p):

- a loop copies its varying state into buffer A of each state value, then runs the
  condition and, while it holds, the body, which reads the state from the current
  buffers and writes the new state into the others (double-buffered: the body reads
  the old state while it writes the new); after each iteration the two swap (two table
  words, nothing copied). The state it only reads (weights, captured values) is read
  where it is, never copied. The final state is copied into the step's outputs.
- a conditional reads its index in native code and runs only that branch, whose results
  it copies into the step's outputs.

The operands are never written (the loop's buffers are its own), so an interrupt --
checked before each iteration; the runner stops and the KeyboardInterrupt is raised when
it returns -- leaves every tensor as it was. A step whose sub-programs a NativeProgram
cannot run (a host call, an argmax copied out in NumPy, a sort) or whose body changes no
state is driven from Python instead (native_program.py's `_PythonControl`).
"""
from __future__ import annotations

import ctypes
import signal
import sys
import threading
from typing import Any, Callable, Optional

import numpy as np

from ...compiler.driver import InterruptsDeferred
from ...compiler.program import LibraryStep, PartialStep, Step, WhileStep
from . import control_ir
from .native_pool import address, code as pool_code
from .object_code import LoadedCode
from .runtime_objects import runtime_object

CTL = control_ir.LAYOUT
_EXEC = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)   # (releases the GIL)


class NotNative(Exception):
    """A control step the runner cannot run (its reason in the message)."""


class _Runner:
    """The control runner's code, loaded once per process."""

    def __init__(self) -> None:
        self._code = LoadedCode(runtime_object("control"))
        self.exec = _EXEC(self._code.address(CTL.EXEC))
        self.handler = self._code.address(CTL.ON_SIGNAL)
        self.flag = self._code.global_address(CTL.FLAG)
        self.chain = self._code.global_address(CTL.CHAIN)


_RUNNER: Optional[_Runner] = None
_LOCK = threading.Lock()


def runner() -> _Runner:
    global _RUNNER
    if _RUNNER is None:
        with _LOCK:
            if _RUNNER is None:
                _RUNNER = _Runner()
    return _RUNNER


class Block:
    """A block of ops, packed once into the words the runner reads; `keep` holds what
    its words point into."""

    def __init__(self, ops: list, keep: list) -> None:
        words = np.zeros(1 + CTL.OP_WORDS * len(ops), np.int64)
        words[0] = len(ops)
        for k, op in enumerate(ops):
            row = list(op) + [0] * (CTL.OP_WORDS - len(op))
            words[1 + k * CTL.OP_WORDS:1 + (k + 1) * CTL.OP_WORDS] = row
        self.words, self.keep = words, keep
        self.address = address(words)


def run(block: Block, pool: Any) -> None:
    """Run `block` on `pool`'s threads (on this thread alone when another run holds them).
    On the main thread a SIGINT (Ctrl-C) stops a loop before its next iteration; the
    KeyboardInterrupt is raised here once the runner has returned and everything it
    set up is undone (inside the block the interrupt is deferred: it cannot cut that)."""
    r = runner()
    ctx = np.zeros(CTL.CTX_WORDS, np.int64)
    ctx[CTL.CTX_RUN] = ctypes.cast(pool_code().run, ctypes.c_void_p).value
    main = threading.current_thread() is threading.main_thread()
    with InterruptsDeferred():
        watched = ctx[CTL.CTX_INTERRUPTED] = _WATCH.enter(r) if main else 0
        shared = pool.threads > 1 and pool._busy.acquire(blocking=False)
        try:
            if shared:
                if pool.state is None:
                    pool._start()
                if pool._workers:
                    ctx[CTL.CTX_STATE] = pool.state.ctypes.data
                    pool.runs_shared += 1
            stopped = r.exec(ctx.ctypes.data, block.address)
        finally:
            if shared:
                pool._busy.release()
            if watched:
                _WATCH.exit()
    if stopped:
        # Python's handler raised when the block ended, unless it is one that does not:
        # the loop stopped half way, and its results must not be handed out
        raise KeyboardInterrupt("lazyarray: a native loop stopped by SIGINT")


class _SigAction(ctypes.Structure):
    """glibc's struct sigaction (Linux)."""
    _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_uint64 * 16),
                ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]


_SA_SIGINFO = 4


class _SignalWatch:
    """The runner's SIGINT handler, installed while at least one native run from the main
    thread is under way (`enter` -> the flag's address, or 0 where Python's handler is
    not a plain C function to chain to: then loops run to their end, as before)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._old = _SigAction()
        self._flag = 0
        self._libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def enter(self, r: _Runner) -> int:
        with self._lock:
            if self._depth == 0:
                self._flag = self._install(r)
            self._depth += 1
            return self._flag

    def _install(self, r: _Runner) -> int:
        libc = self._libc
        if libc is None or libc.sigaction(signal.SIGINT, None, ctypes.byref(self._old)) != 0:
            return 0
        if self._old.flags & _SA_SIGINFO or (self._old.handler or 0) <= 1:
            return 0
        ctypes.c_int64.from_address(r.chain).value = self._old.handler
        ctypes.c_int64.from_address(r.flag).value = 0
        new = _SigAction()
        ctypes.memmove(ctypes.byref(new), ctypes.byref(self._old), ctypes.sizeof(new))
        new.handler = r.handler
        if libc.sigaction(signal.SIGINT, ctypes.byref(new), None) != 0:
            return 0
        return r.flag

    def exit(self) -> None:
        with self._lock:
            self._depth -= 1
            if self._depth == 0 and self._flag:
                self._libc.sigaction(signal.SIGINT, ctypes.byref(self._old), None)
                self._flag = 0


_WATCH = _SignalWatch()


def eligible_step(exe: Any, step: Step) -> bool:
    """Whether control step `step` of CPUExecutable `exe` can run natively (`Bound`'s
    conditions, checked without planning)."""
    subs = exe._subs[id(step)]
    if isinstance(step, WhileStep) and subs[1] is None:
        return False
    return all(_bindable(sub) for sub in subs)


# (NativeProgram, eligible) of native_program.py, which imports this module and sets them
# at its import: a sub-program runs as a NativeProgram of its own
PROGRAM: list = [None, None]


def _bindable(exe: Any) -> bool:
    eligible = PROGRAM[1]
    ok = exe._range_cache.get("eligible")
    if ok is None:
        ok = exe._range_cache["eligible"] = eligible(exe)
    return ok and len(set(exe.outputs)) == len(exe.outputs) and not exe._aliases \
        and not exe._donated_slots \
        and all(not isinstance(s, PartialStep) or s.finish for s in exe.steps) \
        and not any(map(_host, exe.steps))


def _host(step: Step) -> bool:
    """A host step: a NativeProgram runs it from Python between two jobs, which the
    control runner (all native) cannot."""
    return isinstance(step, LibraryStep) and step.call == "host"


# ---- sub-programs bound to memory of their own ---------------------------------------

class Bound:
    """A sub-program as a NativeProgram whose fresh memory is given once: `param[k]` is
    the table word of parameter k (absent when the program does not read it),
    `output[j]` that of output j, `ops` what runs it."""

    def __init__(self, exe: Any, threads: int) -> None:
        NativeProgram, eligible = PROGRAM
        if not eligible(exe) or any(map(_host, exe.steps)):
            raise NotNative(f"{exe.name}: a step the native program does not run")
        prog = self.prog = NativeProgram(exe, threads)
        if any(copies for _, _, copies in prog.segments):
            raise NotNative(f"{exe.name}: a reduction copied out in NumPy (argmax's)")
        if prog._aliases or any(number is not None for number, *_ in prog._donated):
            raise NotNative(f"{exe.name}: donated parameters")
        if len(set(exe.outputs)) != len(exe.outputs):
            raise NotNative(f"{exe.name}: an output returned twice")
        table = prog.table
        self.memory: list = []
        index_of: dict = {}
        for index, size, views, _ in prog._fresh:
            table[index] = self._own(size)
            index_of.update((p, (index, size)) for p, _, _ in views)
        for _, _, entries, _ in prog._donated:       # values planned in a parameter's slot
            for index, p, _, _, nbytes in entries:
                table[index] = self._own(nbytes)
                index_of.setdefault(p, (index, nbytes))
        word = lambda index: address(table) + 8 * index
        self.param = {inp.number: word(inp.index) for inp in prog._inputs}
        self.output = [word(index_of[p][0]) for p in exe.outputs]
        self.output_memory = [int(table[index_of[p][0]]) for p in exe.outputs]
        self.slot_bytes = [index_of[p][1] for p in exe.outputs]
        self.nbytes = [exe.values[p].nbytes for p in exe.outputs]
        self.ops, self.keep = program_ops(prog)
        self.calls_blas = prog.calls_blas

    def _own(self, size: int) -> int:
        mem = np.zeros(max(1, size), np.uint8)
        self.memory.append(mem)
        return address(mem)


def program_ops(prog: Any) -> tuple:
    """(ops, kept arrays) that run a NativeProgram's segments: each job after its
    partials' reset; a control step's own ops."""
    ops: list = []
    keep: list = []
    for job, fills, _ in prog.segments:
        if isinstance(job, ControlStep):
            ops += job.ops
            keep.append(job)
            continue
        for red in fills:
            start = np.full_like(red.part, red.ident)
            keep.append(start)
            ops.append((CTL.OP_FILL, address(red.part), address(start), red.part.nbytes))
        ops.append((CTL.OP_JOB, job.address, int(job.parallel)))
        keep.append(job)
    return ops, keep


# ---- control steps ---------------------------------------------------------------------

class ControlStep:
    """The ops of one while/conditional step of a program whose buffer table entry of
    value p is at `word(p)`. `parallel` (as a pool Job's): it may use the workers."""

    parallel = True

    def __init__(self, step: Step, subs: list, threads: int, word: Callable[[int], int],
                 nbytes: Callable[[int], int]) -> None:
        self.step = step
        self.keep: list = []
        self.trips = np.zeros(1, np.int64)     # iterations run (a loop's), over all runs
        if isinstance(step, WhileStep):
            self.ops = self._while(step, subs, threads, word, nbytes)
        else:
            self.ops = self._conditional(step, subs, threads, word)

    def _block(self, ops: list, keep: list) -> Block:
        block = Block(ops, keep)
        self.keep.append(block)
        return block

    def _while(self, step: Step, subs: list, threads: int, word: Callable,
               nbytes: Callable) -> list:
        cond_exe, body_exe = subs
        if body_exe is None:
            raise NotNative("the body changes no state")
        cond, body = Bound(cond_exe, threads), Bound(body_exe, threads)
        self.subs = [cond, body]
        self.calls_blas = cond.calls_blas or body.calls_blas
        operands, vary = step.operands, step.varying
        # per varying state value k: words holding its current and next buffer
        words = np.zeros(2 * len(vary), np.int64)
        self.keep.append(words)
        cur = {k: address(words) + 16 * j for j, k in enumerate(vary)}
        nxt = {k: cur[k] + 8 for k in vary}
        start, each, swaps = [], [], []
        for j, k in enumerate(vary):
            a = self._memory(body.slot_bytes[j])
            start += [(CTL.OP_SET, cur[k], a), (CTL.OP_SET, nxt[k], body.output_memory[j]),
                      (CTL.OP_COPY, cur[k], word(operands[k]), body.nbytes[j])]
            if k in body.param:
                each.append((CTL.OP_WORD, body.param[k], cur[k], 0))
            each.append((CTL.OP_WORD, body.output[j], nxt[k], 0))
            swaps.append((CTL.OP_SWAP, cur[k], nxt[k]))
        for k, o in enumerate(operands):
            src = cur.get(k, word(o))
            start += [(CTL.OP_WORD, sub.param[k], src, 0) for sub in (cond, body)
                      if k in sub.param and not (sub is body and k in cur)]
        cond_block = self._block(cond.ops, cond.keep)
        body_block = self._block(each + body.ops + swaps, body.keep)
        loop = (CTL.OP_WHILE, cond_block.address, body_block.address, cond.output[0],
                body.output[-1], address(self.trips))
        finish = [(CTL.OP_COPY, word(p), cur.get(k, word(operands[k])), nbytes(p))
                  for p, k in step.outputs]
        return start + [loop] + finish

    def _conditional(self, step: Step, subs: list, threads: int, word: Callable) -> list:
        branches = [Bound(exe, threads) for exe in subs]
        self.subs = branches
        self.calls_blas = any(b.calls_blas for b in branches)
        args = step.operands[1:]
        blocks = []
        for br in branches:
            ops = [(CTL.OP_WORD, br.param[k], word(o), 0) for k, o in enumerate(args)
                   if k in br.param]
            ops += br.ops
            ops += [(CTL.OP_COPY, word(p), br.output[k], br.nbytes[k]) for p, k in step.outputs]
            blocks.append(self._block(ops, br.keep))
        table = np.asarray([b.address for b in blocks], np.int64)
        self.keep.append(table)
        return [(CTL.OP_IF, word(step.operands[0]), len(blocks), address(table))]

    def _memory(self, size: int) -> int:
        mem = np.zeros(max(1, size), np.uint8)
        self.keep.append(mem)
        return address(mem)
