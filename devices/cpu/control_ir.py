"""The LLVM IR of the CPU runtime's control-flow runner: `lzc_exec(ctx, block)` runs a
block of *ops* -- jobs of the native pool, memory copies, buffer-table edits, loops and
branches -- in native code, so a `while` or a `conditional` of a Program runs with no
Python per iteration (native_control.py builds the blocks).

Layouts (64-bit words; `LAYOUT` below):

- ctx: [the pool's `lzp_run`, the pool's state (0: run every job on this thread), the
  address of the interrupt flag (`lzc_interrupted`; 0: loops are not interruptible)].
- block: [number of ops, then OP_WORDS words per op: kind, a, b, c, d, e].

Ops (a "word" is the address of one 64-bit word, mostly an entry of a buffer table):

- JOB (job, parallel): `lzp_run` of a pool job, on the workers when `parallel` and the
  pool has them.
- FILL (dst, src, bytes): memcpy between fixed addresses (a reduction's partials reset).
- COPY (dst word, src word, bytes): memcpy(*dst, *src) (a value between the buffers two
  table entries name; nothing when they are one buffer).
- SET (word, value): *word = value.
- WORD (dst word, src word, offset): *dst = *src + offset.
- SWAP (word, word): exchange two table entries (a loop's double-buffered state).
- WHILE (cond block, body block, pred word after cond, pred word after body, counter):
  run the cond block; while the pred byte the word points at is nonzero, check for a
  signal, run the body block; the iterations are added to the i64 at `counter`.
- IF (index word, branches, blocks): run block min(max(*(i32*)*index, 0), branches - 1)
  of the array of block addresses.

`lzc_exec` returns 0, or 1 when the interrupt flag was set: a loop checks it before each
iteration and stops there. `lzc_on_signal(signum)` is a SIGINT handler the device
installs while a loop runs: it sets the flag and calls the handler it replaced (Python's,
whose address is in `lzc_signal_chain`), so Python still raises KeyboardInterrupt once
the runner has returned. The runner never touches Python (it runs without the GIL).
"""
from __future__ import annotations

import types

import llvmlite.ir as ir

from .pool_ir import Callee, module_text

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()

CTX_RUN, CTX_STATE, CTX_INTERRUPTED = range(3)
CTX_WORDS = 3
OP_WORDS = 6
OP_JOB, OP_FILL, OP_COPY, OP_SET, OP_WORD, OP_SWAP, OP_WHILE, OP_IF = range(1, 9)
EXEC = "lzc_exec"
ON_SIGNAL, FLAG, CHAIN = "lzc_on_signal", "lzc_interrupted", "lzc_signal_chain"
STOPPED = 1


def _c(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def _word(b: ir.IRBuilder, base: ir.Value, index) -> ir.Value:
    idx = index if isinstance(index, ir.Value) else _c(index)
    return b.gep(base, [idx], source_etype=I64)


def _load(b: ir.IRBuilder, base: ir.Value, index=0) -> ir.Value:
    return b.load(_word(b, base, index), typ=I64)


def _ptr(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.inttoptr(v, PTR)


RUN_TYPE = ir.FunctionType(VOID, [PTR, PTR, I64])
HANDLER_TYPE = ir.FunctionType(VOID, [I32])


def control_ir(triple: str) -> str:
    """The module of `lzc_exec`."""
    mod = ir.Module(name="lazyarray_control")
    mod.triple = triple
    memcpy = ir.Function(mod, ir.FunctionType(VOID, [PTR, PTR, I64, I1]), "llvm.memcpy.p0.p0.i64")
    f = ir.Function(mod, ir.FunctionType(I64, [PTR, PTR]), EXEC)
    _Exec(f, memcpy).build()
    _on_signal(mod)
    return module_text(mod)


def _on_signal(mod: ir.Module) -> None:
    """`lzc_on_signal(signum)`: set the flag, then call the chained handler (an address
    above SIG_IGN's 1)."""
    flag, chain = (ir.GlobalVariable(mod, I64, name) for name in (FLAG, CHAIN))
    for g in (flag, chain):
        g.initializer = _c(0)
    f = ir.Function(mod, HANDLER_TYPE, ON_SIGNAL)
    b = ir.IRBuilder(f.append_basic_block("entry"))
    b.store_atomic(_c(1), flag, "seq_cst", 8)
    old = b.load_atomic(chain, "seq_cst", 8, typ=I64)
    with b.if_then(b.icmp_unsigned(">", old, _c(1))):
        b.call(Callee(_ptr(b, old), HANDLER_TYPE), [f.args[0]])
    b.ret_void()


class _Exec:
    def __init__(self, f: ir.Function, memcpy: ir.Function) -> None:
        self.f, self.memcpy = f, memcpy
        self.ctx, self.block = f.args
        self.b = ir.IRBuilder(f.append_basic_block("entry"))

    def build(self) -> None:
        b, f = self.b, self.f
        n = _load(b, self.block)
        head, body, next_, done = (f.append_basic_block(s) for s in
                                   ("op.head", "op.body", "op.next", "done"))
        entry = b.block
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, "i")
        i.add_incoming(_c(0), entry)
        b.cbranch(b.icmp_signed("<", i, n), body, done)
        b.position_at_end(body)
        op = _word(b, self.block, b.add(_c(1), b.mul(i, _c(OP_WORDS))))
        kind = _load(b, op)
        w = [_load(b, op, k) for k in range(1, OP_WORDS)]
        cases = {OP_JOB: self._job, OP_FILL: self._fill, OP_COPY: self._copy, OP_SET: self._set,
                 OP_WORD: self._wordop, OP_SWAP: self._swap, OP_WHILE: self._while,
                 OP_IF: self._if}
        switch = b.switch(kind, next_)
        for k, emit in cases.items():
            blk = f.append_basic_block(f"op{k}")
            switch.add_case(ir.Constant(I64, k), blk)
            b.position_at_end(blk)
            emit(w, next_)
        b.position_at_end(next_)
        i.add_incoming(b.add(i, _c(1)), next_)
        b.branch(head)
        b.position_at_end(done)
        b.ret(_c(0))

    # ---- ops: each ends by branching to `next_` (or returning STOPPED) -----------------

    def _job(self, w: list, next_: ir.Block) -> None:
        b = self.b
        state = _load(b, self.ctx, CTX_STATE)
        shared = b.and_(b.icmp_unsigned("!=", w[1], _c(0)), b.icmp_unsigned("!=", state, _c(0)))
        run = Callee(_ptr(b, _load(b, self.ctx, CTX_RUN)), RUN_TYPE)
        b.call(run, [_ptr(b, b.select(shared, state, _c(0))), _ptr(b, w[0]),
                     b.zext(shared, I64)])
        b.branch(next_)

    def _fill(self, w: list, next_: ir.Block) -> None:
        self.b.call(self.memcpy, [_ptr(self.b, w[0]), _ptr(self.b, w[1]), w[2],
                                  ir.Constant(I1, 0)])
        self.b.branch(next_)

    def _copy(self, w: list, next_: ir.Block) -> None:
        b = self.b
        dst, src = _load(b, _ptr(b, w[0])), _load(b, _ptr(b, w[1]))
        with b.if_then(b.icmp_unsigned("!=", dst, src)):
            b.call(self.memcpy, [_ptr(b, dst), _ptr(b, src), w[2], ir.Constant(I1, 0)])
        b.branch(next_)

    def _set(self, w: list, next_: ir.Block) -> None:
        self.b.store(w[1], _ptr(self.b, w[0]))
        self.b.branch(next_)

    def _wordop(self, w: list, next_: ir.Block) -> None:
        b = self.b
        b.store(b.add(_load(b, _ptr(b, w[1])), w[2]), _ptr(b, w[0]))
        b.branch(next_)

    def _swap(self, w: list, next_: ir.Block) -> None:
        b = self.b
        x, y = _ptr(b, w[0]), _ptr(b, w[1])
        vx, vy = b.load(x, typ=I64), b.load(y, typ=I64)
        b.store(vy, x)
        b.store(vx, y)
        b.branch(next_)

    def _run_block(self, block: ir.Value) -> None:
        """exec(block); return STOPPED from here if it stopped."""
        b = self.b
        rc = b.call(self.f, [self.ctx, _ptr(b, block)])
        with b.if_then(b.icmp_unsigned("!=", rc, _c(0)), likely=False):
            b.ret(rc)

    def _pred(self, word: ir.Value) -> ir.Value:
        b = self.b
        byte = b.load(_ptr(b, _load(b, _ptr(b, word))), typ=I8)
        return b.icmp_unsigned("!=", byte, ir.Constant(I8, 0))

    def _while(self, w: list, next_: ir.Block) -> None:
        b, f = self.b, self.f
        self._run_block(w[0])
        head, body, out = (f.append_basic_block(s) for s in ("loop.head", "loop.body", "loop.out"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        trips = b.phi(I64, "trips")
        first = b.phi(I1, "first")
        trips.add_incoming(_c(0), pre)
        first.add_incoming(ir.Constant(I1, 1), pre)
        go = b.select(first, self._pred(w[2]), self._pred(w[3]))
        b.cbranch(go, body, out)
        b.position_at_end(body)
        self._check_signals(w[4], trips)
        self._run_block(w[1])
        trips.add_incoming(b.add(trips, _c(1)), b.block)
        first.add_incoming(ir.Constant(I1, 0), b.block)
        b.branch(head)
        b.position_at_end(out)
        self._count(w[4], trips)
        b.branch(next_)

    def _count(self, counter: ir.Value, trips: ir.Value) -> None:
        b = self.b
        at = _ptr(b, counter)
        b.store(b.add(b.load(at, typ=I64), trips), at)

    def _check_signals(self, counter: ir.Value, trips: ir.Value) -> None:
        """When the interrupt flag is set: count the iterations done and stop."""
        b = self.b
        at = _load(b, self.ctx, CTX_INTERRUPTED)
        with b.if_then(b.icmp_unsigned("!=", at, _c(0))):
            flag = b.load_atomic(_ptr(b, at), "seq_cst", 8, typ=I64)
            with b.if_then(b.icmp_unsigned("!=", flag, _c(0)), likely=False):
                self._count(counter, trips)
                b.ret(_c(STOPPED))

    def _if(self, w: list, next_: ir.Block) -> None:
        b = self.b
        index = b.sext(b.load(_ptr(b, _load(b, _ptr(b, w[0]))), typ=I32), I64)
        last = b.sub(w[1], _c(1))
        index = b.select(b.icmp_signed("<", index, _c(0)), _c(0), index)
        index = b.select(b.icmp_signed(">", index, last), last, index)
        self._run_block(_load(b, _ptr(b, w[2]), index))
        b.branch(next_)


# the constants the device shares with this code (the driver hands them out)
LAYOUT = types.SimpleNamespace(**{k: v for k, v in dict(globals()).items()
                                  if k.isupper() and isinstance(v, (int, str))})
