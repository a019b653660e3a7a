"""A `while` or `conditional` step run in native code: the condition, the body's kernels
and products, the branch choice, all one call of the control runner
(devices/cpu/control_ir.py), with no Python per iteration.

Each sub-program (a loop's condition and body, a conditional's branches) is planned as a
NativeProgram of its own (devices/native_program.py) and *bound* here: its fresh memory
(the slots of its outputs, which a plain run takes anew each time) is given once, kept
with the step. A control step is then a list of the runner's ops over the buffer table
of the program it is a step of (`word(p)`: the address of the table entry of value p):

- a loop copies its varying state into a buffer of its own per state value (once, at
  entry), then runs the condition and, while it holds, the body. The body is compiled
  with that state donated (compiler/codegen/control_steps.carried_state), so a value it
  updates in place -- a KV cache written by `dynamic_update_slice`, an elementwise
  step, a new value computed once the old one is dead -- is written over the old one in
  that one buffer, and nothing else happens per iteration. A value the body still
  reads after writing the new one (at other indices: a flip, a shift) is
  double-buffered: the body reads the current buffer and writes the other, and after
  each iteration the two swap (two table words, nothing copied). The state it only
  reads (weights, captured values) is read where it is, never copied. The final state
  is copied into the step's outputs.
- a conditional reads its index in native code and runs only that branch, which writes
  its results straight into the step's outputs (nothing copied).

The operands are never written (the loop's buffers are its own: the user's tensors are
copied at entry, never donated to the body), so an interrupt --
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
from . import control_ir, run_plan
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
        self._pool_run: tuple = (None, 0)

    def pool_run(self) -> int:
        """The address of the native pool's `lzp_run` (looked up once per pool code)."""
        run = pool_code().run
        if self._pool_run[0] is not run:
            self._pool_run = (run, ctypes.cast(run, ctypes.c_void_p).value)
        return self._pool_run[1]


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
    ctx[CTL.CTX_RUN] = r.pool_run()
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
    return ok and len(set(exe.outputs)) == len(exe.outputs) \
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
        if len(set(exe.outputs)) != len(exe.outputs):
            raise NotNative(f"{exe.name}: an output returned twice")
        table = prog.table
        word = lambda index: address(table) + 8 * index
        self.memory: list = []
        index_of: dict = {}
        for index, size, views, _ in prog._fresh:
            table[index] = self._own(size)
            index_of.update((p, (index, size)) for p, _, _ in views)
        # a loop body's donated parameter (its carried state, control_steps.carried_state):
        # the table words of the values planned in its slot, which the loop points at the
        # state's current buffer; `in_slot[p]`: the parameter whose slot holds value p
        self.carried: dict = {}
        self.carried_bytes: dict = {}   # the largest value planned in that slot
        in_slot: dict = {}
        for number, _, entries, _ in prog._donated:
            if number is not None:
                self.carried[number] = [word(index) for index, *_ in entries]
                self.carried_bytes[number] = max(nbytes for *_, nbytes in entries)
            for index, p, _, _, nbytes in entries:
                if number is None:          # (a slot the parameter never gives up)
                    table[index] = self._own(nbytes)
                else:
                    in_slot[p] = number
                index_of.setdefault(p, (index, nbytes))
        self.param = {inp.number: word(inp.index) for inp in prog._inputs}
        self.output = [word(index_of[p][0]) for p in exe.outputs]
        self.output_memory = [int(table[index_of[p][0]]) for p in exe.outputs]
        self.in_slot = [in_slot.get(p) for p in exe.outputs]
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
    partials' reset; a control step's own ops. A program none of whose steps is worth
    splitting over threads runs each job on the calling thread: a job counts as parallel
    as soon as a task has several chunks or runs beside the next (a small batch's tiles,
    products side by side), and a decoding loop's body then woke the workers and met
    them at a barrier per task, at every iteration (2 threads: 1.4 ms where 1 took 0.75)."""
    serial = not _worth_threads(prog)
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
        ops.append((CTL.OP_JOB, job.address, int(job.parallel and not serial)))
        keep.append(job)
    return ops, keep


def _worth_threads(prog: Any) -> bool:
    """Whether some step of the NativeProgram splits over its threads (a loop kernel in
    several chunks, a product from native_gemm.SPLIT_WORK on)."""
    exe, threads = prog.exe, prog.pool.threads
    return threads > 1 and exe is not None and \
        any(run_plan.parallel_jobs(exe, prog.plan, threads).values())


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
        self.in_place = 0               # state values updated in one buffer
        self.double: list = []          # the others: state indices double-buffered
        for j, k in enumerate(vary):
            slot = body.in_slot[j]
            if slot is not None and slot != k:
                raise NotNative(f"{body_exe.name}: state {k}'s new value in state {slot}'s buffer")
            # the state's own buffer, its initial value copied in once (the operands are
            # never written: an interrupt leaves every tensor as it was)
            size = max(body.slot_bytes[j], body.carried_bytes.get(k, 0))
            start += [(CTL.OP_SET, cur[k], self._memory(size)),
                      (CTL.OP_COPY, cur[k], word(operands[k]), body.nbytes[j])]
            # the values the body plans in the parameter's slot follow its buffer
            follow = [(CTL.OP_WORD, w, cur[k], 0) for w in body.carried.get(k, ())]
            if k in body.param:
                follow.append((CTL.OP_WORD, body.param[k], cur[k], 0))
            if slot == k:
                # updated in place (the new value written over the old: a KV cache's
                # update, an elementwise step): one buffer, nothing to swap
                start += follow
                self.in_place += 1
                continue
            # double-buffered: the body reads the old value while it writes the new
            self.double.append(k)
            start.append((CTL.OP_SET, nxt[k], body.output_memory[j]))
            each += follow + [(CTL.OP_WORD, body.output[j], nxt[k], 0)]
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
            # each result written straight into the step's output (an output's slot holds
            # it alone); a result returned twice is copied into its second output
            copies, direct = [], set()
            for p, k in step.outputs:
                if k in direct or br.in_slot[k] is not None or br.slot_bytes[k] != br.nbytes[k]:
                    copies.append((CTL.OP_COPY, word(p), br.output[k], br.nbytes[k]))
                else:
                    direct.add(k)
                    ops.append((CTL.OP_WORD, br.output[k], word(p), 0))
            ops += br.ops + copies
            blocks.append(self._block(ops, br.keep))
        table = np.asarray([b.address for b in blocks], np.int64)
        self.keep.append(table)
        return [(CTL.OP_IF, word(step.operands[0]), len(blocks), address(table))]

    def _memory(self, size: int) -> int:
        mem = np.zeros(max(1, size), np.uint8)
        self.keep.append(mem)
        return address(mem)
