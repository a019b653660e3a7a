"""The LLVM IR of the CPU runtime's native worker pool: a job runner and a worker loop over
pthreads, kernel trampolines, and matrix-product tiles (native_pool.py and native_gemm.py
load them through runtime_objects.py `runtime_code`, which has the compiler's
`driver.host_object` turn the IR into object code).

Everything here is generated with llvmlite's builder and JIT-compiled in-process, so the
pool needs no C compiler at install time; the pthread functions resolve from the C
library already loaded in the process.

Memory layouts (all 64-bit words, allocated and owned by the device; `LAYOUT` below):

- pool state: `STATE_*` word offsets, then room for one mutex and one condition variable.
- job: [number of tasks, tasks, counters, buffer table]; a task is `TASK_WORDS` words
  [trampoline, kernel, argv, ranges, chunks, partials, partial strides, go on]; counters are
  two words per task [next chunk, chunks done]. `argv` and `partials` hold indices into
  the job's buffer table (one address per buffer), so a run rewrites only that table.

A task is one kernel over its chunks; the tasks of a job run in order with a barrier
between them (each task may read what the one before wrote). A task marked "go on" has
no barrier after it: a thread that finds none of its chunks left goes on to the next
task's (two independent matrix products share the threads so, each on one thread), and
the next barrier waits for the chunks of every task since the last one. A kernel has the CPU
codegen's signature `f(buf0..bufN, start, end, partial0..partialM)`; a trampoline per
(N, M) looks its buffers up in the table, adds each partial's per-chunk offset, and
calls it.

Waking workers: the ticket word holds a job generation (bits 20 and up), a "closed" bit
(19) and how many workers joined the job (bits 0-18). A worker joins by a compare-and-
swap that only succeeds while the generation is the one it saw and the job is open; the
caller, once every chunk is done, closes the job and waits for exactly the workers that
joined. So a run never waits for a sleeping worker to wake, and no worker touches a job
after its run has returned.
"""
from __future__ import annotations

import types

import llvmlite.ir as ir

from ...compiler.codegen.loops import counted_loop
from ...compiler.driver import release_ir
from . import packed_gemm_ir
# (the descriptor's constants are also read from LAYOUT below: all of them imported)
from .gemm_descriptor import (CBLAS_NO_TRANS, CBLAS_ROW_MAJOR, CBLAS_TRANS, GEMM_BM, GEMM_BN,  # noqa: F401
                              GEMM_FN, GEMM_K, GEMM_KIND_BLAS, GEMM_KIND_DIRECT, GEMM_KIND_DOTS,
                              GEMM_KIND_PACKED, GEMM_LDA, GEMM_LDB, GEMM_LDC, GEMM_M, GEMM_N,
                              GEMM_NAMES, GEMM_STRIDE_A, GEMM_STRIDE_B, GEMM_STRIDE_C,
                              GEMM_TILES, GEMM_TILES_N, GEMM_TRANS_A, GEMM_TRANS_B, GEMM_WORDS,
                              I8, I64, PTR, VOID, _batch_member, _c, _min, _word, tile_rect)

I32 = ir.IntType(32)

STATE_TICKET, STATE_SHUTDOWN, STATE_JOB, STATE_EXITED, STATE_SPIN = 0, 1, 2, 3, 4
STATE_MUTEX, STATE_COND = 8, 24          # 128 bytes each: more than any libc's types need
STATE_WORDS = 40
TASK_WORDS = 8
TASK_TRAMP, TASK_FN, TASK_ARGV, TASK_RANGES, TASK_CHUNKS, TASK_PARTIALS, TASK_STRIDES = range(7)
TASK_GO_ON = 7    # nonzero: no barrier after this task (the next one does not read it)
GEN_SHIFT = 20
CLOSED = 1 << 19
JOINED_MASK = CLOSED - 1

TRAMPOLINE = "lzp_tramp"          # one trampoline alone in its module
SEQ = "seq_cst"
TRAMP_TYPE = ir.FunctionType(VOID, [PTR, PTR, I64, I64, PTR, PTR, I64, PTR])


def _load_ptr(b: ir.IRBuilder, base: ir.Value, index) -> ir.Value:
    return b.inttoptr(b.load(_word(b, base, index), typ=I64), PTR)


def _atomic_load(b: ir.IRBuilder, ptr: ir.Value) -> ir.Value:
    return b.load_atomic(ptr, SEQ, 8, typ=I64)


class _Pause:
    """The spin-wait hint for the host (x86 `pause`, ARM `yield`), or nothing."""

    def __init__(self, mod: ir.Module, triple: str) -> None:
        self.fn, self.args = None, []
        if triple.startswith(("x86_64", "i686", "i386")):
            self.fn = ir.Function(mod, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
        elif triple.startswith(("aarch64", "arm64")):
            self.fn = ir.Function(mod, ir.FunctionType(VOID, [I32]), "llvm.aarch64.hint")
            self.args = [ir.Constant(I32, 1)]

    def __call__(self, b: ir.IRBuilder) -> None:
        if self.fn is not None:
            b.call(self.fn, self.args)


class PoolIR:
    """Builds the pool's LLVM module: `lzp_run(state, job, use_workers)` and
    `lzp_worker(state)` (a pthread start routine)."""

    def __init__(self, triple: str) -> None:
        self.mod = ir.Module(name="lazyarray_native_pool")
        self.mod.triple = triple
        self.pause = _Pause(self.mod, triple)
        fn = lambda name, ret, args: ir.Function(self.mod, ir.FunctionType(ret, args), name)
        self.lock = fn("pthread_mutex_lock", I32, [PTR])
        self.unlock = fn("pthread_mutex_unlock", I32, [PTR])
        self.wait = fn("pthread_cond_wait", I32, [PTR, PTR])
        self.broadcast = fn("pthread_cond_broadcast", I32, [PTR])
        self.yield_ = fn("sched_yield", I32, [])
        self.work = self._work()
        self.run = self._run()
        self.worker = self._worker()

    def text(self) -> str:
        """The module's text (once: the module is released after, see `module_text`)."""
        return module_text(self.mod)

    # ---- helpers --------------------------------------------------------------------

    def _spin_until(self, b: ir.IRBuilder, cond, name: str) -> None:
        """Loop until `cond(b)` (an i1) holds: pause each round, yield the core every
        64 rounds (a core shared with other programs, or with more threads than cores,
        goes to whoever has work)."""
        fn = b.function
        head = fn.append_basic_block(name + ".head")
        body = fn.append_basic_block(name + ".body")
        done = fn.append_basic_block(name + ".done")
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        k = b.phi(I64)
        k.add_incoming(_c(0), pre)
        b.cbranch(cond(b), done, body)
        b.position_at_end(body)
        self.pause(b)
        with b.if_then(b.icmp_unsigned("==", b.and_(k, _c(63)), _c(63))):
            b.call(self.yield_, [])
        k.add_incoming(b.add(k, _c(1)), b.block)
        b.branch(head)
        b.position_at_end(done)

    # ---- work: every task of a job, chunk by chunk ----------------------------------

    def _work(self) -> ir.Function:
        f = ir.Function(self.mod, ir.FunctionType(VOID, [PTR]), "lzp_work")
        f.linkage = "internal"
        job, = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        ntasks = b.load(_word(b, job, 0), typ=I64)
        tasks = _load_ptr(b, job, 1)
        counters = _load_ptr(b, job, 2)
        table = _load_ptr(b, job, 3)
        t_head = f.append_basic_block("task.head")
        t_body = f.append_basic_block("task.body")
        c_head = f.append_basic_block("chunk.head")
        c_body = f.append_basic_block("chunk.body")
        c_done = f.append_basic_block("chunk.done")
        t_next = f.append_basic_block("task.next")
        exit_ = f.append_basic_block("exit")
        entry = b.block
        b.branch(t_head)

        b.position_at_end(t_head)
        t = b.phi(I64, "t")
        t.add_incoming(_c(0), entry)
        b.cbranch(b.icmp_signed("<", t, ntasks), t_body, exit_)

        b.position_at_end(t_body)
        task = _word(b, tasks, b.mul(t, _c(TASK_WORDS)))
        tramp = _load_ptr(b, task, TASK_TRAMP)
        kernel = _load_ptr(b, task, TASK_FN)
        argv = _load_ptr(b, task, TASK_ARGV)
        ranges = _load_ptr(b, task, TASK_RANGES)
        chunks = b.load(_word(b, task, TASK_CHUNKS), typ=I64)
        partials = _load_ptr(b, task, TASK_PARTIALS)
        strides = _load_ptr(b, task, TASK_STRIDES)
        nxt = _word(b, counters, b.mul(t, _c(2)))
        done = _word(b, counters, b.add(b.mul(t, _c(2)), _c(1)))
        b.branch(c_head)

        b.position_at_end(c_head)
        c = b.atomic_rmw("add", nxt, _c(1), SEQ)
        b.cbranch(b.icmp_signed("<", c, chunks), c_body, c_done)

        b.position_at_end(c_body)
        start = b.load(_word(b, ranges, b.mul(c, _c(2))), typ=I64)
        end = b.load(_word(b, ranges, b.add(b.mul(c, _c(2)), _c(1))), typ=I64)
        b.call(Callee(tramp, TRAMP_TYPE), [kernel, argv, start, end, partials, strides, c, table])
        b.atomic_rmw("add", done, _c(1), SEQ)
        b.branch(c_head)

        b.position_at_end(c_done)
        go_on = b.load(_word(b, task, TASK_GO_ON), typ=I64)
        barrier = f.append_basic_block("barrier")
        b.cbranch(b.icmp_unsigned("!=", go_on, _c(0)), t_next, barrier)
        b.position_at_end(barrier)
        self._barrier(b, tasks, counters, t, t_next)
        b.position_at_end(t_next)
        t.add_incoming(b.add(t, _c(1)), t_next)
        b.branch(t_head)

        b.position_at_end(exit_)
        b.ret_void()
        return f

    def _barrier(self, b: ir.IRBuilder, tasks: ir.Value, counters: ir.Value, t: ir.Value,
                 after: ir.Block) -> None:
        """Wait until every chunk of task t is done, and of each task before it back to
        the last one with a barrier of its own (the next task may read what any of them
        wrote), then branch to `after`."""
        f = b.function
        head, check, prev = (f.append_basic_block(n) for n in ("bar.head", "bar.check", "bar.prev"))
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        u = b.phi(I64, "u")
        u.add_incoming(t, pre)
        chunks = b.load(_word(b, _word(b, tasks, b.mul(u, _c(TASK_WORDS))), TASK_CHUNKS), typ=I64)
        done = _word(b, counters, b.add(b.mul(u, _c(2)), _c(1)))
        self._spin_until(b, lambda bb: bb.icmp_signed(">=", _atomic_load(bb, done), chunks),
                         "barrier")
        b.branch(check)
        b.position_at_end(check)
        b.cbranch(b.icmp_signed(">", u, _c(0)), prev, after)
        b.position_at_end(prev)
        before = b.sub(u, _c(1))
        flag = b.load(_word(b, _word(b, tasks, b.mul(before, _c(TASK_WORDS))), TASK_GO_ON), typ=I64)
        u.add_incoming(before, prev)
        b.cbranch(b.icmp_unsigned("!=", flag, _c(0)), head, after)

    # ---- run: the caller's side -----------------------------------------------------

    def _run(self) -> ir.Function:
        f = ir.Function(self.mod, ir.FunctionType(VOID, [PTR, PTR, I64]), "lzp_run")
        state, job, use_workers = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        ntasks = b.load(_word(b, job, 0), typ=I64)
        counters = _load_ptr(b, job, 2)
        b.call(_memset(self.mod), [counters, ir.Constant(I8, 0), b.mul(ntasks, _c(16)),
                                   ir.Constant(ir.IntType(1), 0)])
        with b.if_else(b.icmp_signed("==", use_workers, _c(0))) as (alone, shared):
            with alone:
                b.call(self.work, [job])
            with shared:
                self._publish(b, state, job)
                b.call(self.work, [job])
                self._close(b, state)
        b.ret_void()
        return f

    def _publish(self, b: ir.IRBuilder, state: ir.Value, job: ir.Value) -> None:
        b.store(b.ptrtoint(job, I64), _word(b, state, STATE_JOB))
        b.atomic_rmw("xchg", _word(b, state, STATE_EXITED), _c(0), SEQ)
        ticket = _word(b, state, STATE_TICKET)
        gen = b.lshr(_atomic_load(b, ticket), _c(GEN_SHIFT))
        b.atomic_rmw("xchg", ticket, b.shl(b.add(gen, _c(1)), _c(GEN_SHIFT)), SEQ)
        mutex = _word(b, state, STATE_MUTEX)
        b.call(self.lock, [mutex])
        b.call(self.broadcast, [_word(b, state, STATE_COND)])
        b.call(self.unlock, [mutex])

    def _close(self, b: ir.IRBuilder, state: ir.Value) -> None:
        old = b.atomic_rmw("or", _word(b, state, STATE_TICKET), _c(CLOSED), SEQ)
        joined = b.and_(old, _c(JOINED_MASK))
        exited = _word(b, state, STATE_EXITED)
        self._spin_until(b, lambda bb: bb.icmp_unsigned("==", _atomic_load(bb, exited), joined),
                         "join")

    # ---- worker: a pthread start routine --------------------------------------------

    def _worker(self) -> ir.Function:
        f = ir.Function(self.mod, ir.FunctionType(PTR, [PTR]), "lzp_worker")
        state, = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        ticket = _word(b, state, STATE_TICKET)
        shutdown = _word(b, state, STATE_SHUTDOWN)
        seen = b.alloca(I64, name="seen")
        # generation 0: the pool's state is new when its workers start, so a job already
        # published (the run that started them) is news; one already closed is refused
        # by the join's compare-and-swap (the run's first job was left to its caller)
        b.store(_c(0), seen)
        wait = f.append_basic_block("wait")
        b.branch(wait)

        b.position_at_end(wait)
        news = lambda bb: bb.or_(
            bb.icmp_unsigned("!=", bb.lshr(_atomic_load(bb, ticket), _c(GEN_SHIFT)),
                             bb.load(seen, typ=I64)),
            bb.icmp_unsigned("!=", _atomic_load(bb, shutdown), _c(0)))
        self._spin_bounded(b, state, news)
        self._sleep_until(b, state, news)
        with b.if_then(b.icmp_unsigned("!=", _atomic_load(b, shutdown), _c(0))):
            b.ret(ir.Constant(PTR, None))
        self._join_and_work(b, state, ticket, seen)
        b.branch(wait)
        return f

    def _spin_bounded(self, b: ir.IRBuilder, state: ir.Value, cond) -> None:
        """Spin up to state[SPIN] rounds or until `cond`: a run that follows soon (the
        next sync of a training loop) finds the worker awake."""
        f = b.function
        head, body, done = (f.append_basic_block(n) for n in ("spin.head", "spin.body", "spin.done"))
        limit = b.load(_word(b, state, STATE_SPIN), typ=I64)
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        k = b.phi(I64)
        k.add_incoming(_c(0), pre)
        go_on = b.and_(b.icmp_signed("<", k, limit), b.not_(cond(b)))
        b.cbranch(go_on, body, done)
        b.position_at_end(body)
        self.pause(b)
        k.add_incoming(b.add(k, _c(1)), body)
        b.branch(head)
        b.position_at_end(done)

    def _sleep_until(self, b: ir.IRBuilder, state: ir.Value, cond) -> None:
        """Block on the condition variable until `cond` (checked under the mutex, so a
        broadcast made after publishing a job is never missed)."""
        f = b.function
        head, body, done = (f.append_basic_block(n) for n in ("sleep.head", "sleep.body", "sleep.done"))
        mutex = _word(b, state, STATE_MUTEX)
        b.call(self.lock, [mutex])
        b.branch(head)
        b.position_at_end(head)
        b.cbranch(cond(b), done, body)
        b.position_at_end(body)
        b.call(self.wait, [_word(b, state, STATE_COND), mutex])
        b.branch(head)
        b.position_at_end(done)
        b.call(self.unlock, [mutex])

    def _join_and_work(self, b: ir.IRBuilder, state: ir.Value, ticket: ir.Value,
                       seen: ir.Value) -> None:
        """Take a place in the open job of the new generation (compare-and-swap on the
        ticket), run its tasks, then count this worker out."""
        f = b.function
        head, try_, joined, out = (f.append_basic_block(n) for n in
                                   ("join.head", "join.try", "join.ok", "join.out"))
        t0 = _atomic_load(b, ticket)
        b.store(b.lshr(t0, _c(GEN_SHIFT)), seen)
        pre = b.block
        b.branch(head)
        b.position_at_end(head)
        cur = b.phi(I64)
        cur.add_incoming(t0, pre)
        same = b.icmp_unsigned("==", b.lshr(cur, _c(GEN_SHIFT)), b.load(seen, typ=I64))
        open_ = b.icmp_unsigned("==", b.and_(cur, _c(CLOSED)), _c(0))
        b.cbranch(b.and_(same, open_), try_, out)
        b.position_at_end(try_)
        pair = b.cmpxchg(ticket, cur, b.add(cur, _c(1)), SEQ, SEQ)
        cur.add_incoming(b.extract_value(pair, 0), try_)
        b.cbranch(b.extract_value(pair, 1), joined, head)
        b.position_at_end(joined)
        job = _load_ptr(b, state, STATE_JOB)
        b.call(self.work, [job])
        b.atomic_rmw("add", _word(b, state, STATE_EXITED), _c(1), SEQ)
        b.branch(out)
        b.position_at_end(out)


def _memset(mod: ir.Module) -> ir.Function:
    name = "llvm.memset.p0.i64"
    if name in mod.globals:
        return mod.globals[name]
    return ir.Function(mod, ir.FunctionType(VOID, [PTR, I8, I64, ir.IntType(1)]), name)


def module_text(mod: ir.Module) -> str:
    """`mod`'s text, the module released (module_split.release_ir: its objects freed at
    once, not by a pass of the cyclic collector)."""
    text = str(mod)
    release_ir(mod)
    return text


def trampoline_ir(triple: str, nargs: int, npartials: int, ncounts: int = 0) -> str:
    """A module with one trampoline (`TRAMPOLINE`): calls a kernel of the CPU codegen's
    signature with the `nargs` buffers named by argv (indices into the buffer table),
    `npartials` partial pointers, each `table[partials[k]] + chunk * strides[k]` (stride
    0: all chunks share one partial), then `ncounts` integers: the table entries named by
    argv after the buffers (a partial reduction's finish takes the chunk count so)."""
    mod = ir.Module(name=f"{TRAMPOLINE}_{nargs}_{npartials}_{ncounts}")
    mod.triple = triple
    _trampoline(mod, TRAMPOLINE, nargs, npartials, ncounts)
    return module_text(mod)


def trampoline_name(key: tuple) -> str:
    """The name of the trampoline of `key` = (nargs, npartials, ncounts) in a module of
    several (`trampolines_ir`)."""
    return "{}_{}_{}_{}".format(TRAMPOLINE, *key)


def trampolines_ir(triple: str, keys: list) -> str:
    """One module with a trampoline for each (nargs, npartials, ncounts) of `keys`, named
    by `trampoline_name`: the trampolines a program's jobs need, built together (LLVM's
    cost per module, not per function, was most of a trampoline's ~4 ms)."""
    mod = ir.Module(name=f"{TRAMPOLINE}s")
    mod.triple = triple
    for key in keys:
        _trampoline(mod, trampoline_name(key), *key)
    return module_text(mod)


def _trampoline(mod: ir.Module, name: str, nargs: int, npartials: int, ncounts: int) -> None:
    f = ir.Function(mod, TRAMP_TYPE, name)
    kernel, argv, start, end, partials, strides, chunk, table = f.args
    b = ir.IRBuilder(f.append_basic_block("entry"))
    entry = lambda index: b.load(_word(b, table, b.load(_word(b, index[0], index[1]), typ=I64)),
                                 typ=I64)
    args = [b.inttoptr(entry((argv, k)), PTR) for k in range(nargs)] + [start, end]
    for k in range(npartials):
        base = entry((partials, k))
        stride = b.load(_word(b, strides, k), typ=I64)
        args.append(b.inttoptr(b.add(base, b.mul(chunk, stride)), PTR))
    args += [entry((argv, nargs + k)) for k in range(ncounts)]
    ktype = ir.FunctionType(VOID, [PTR] * nargs + [I64, I64] + [PTR] * npartials + [I64] * ncounts)
    b.call(Callee(kernel, ktype), args)
    b.ret_void()


class Callee:
    """An opaque function pointer called with an explicit function type (llvmlite reads
    the type of a call from its callee, which an opaque `ptr` does not carry)."""

    def __init__(self, value: ir.Value, ftype: ir.FunctionType) -> None:
        self.value, self.type, self.function_type = value, value.type, ftype

    def get_reference(self) -> str:
        return self.value.get_reference()

    def __str__(self) -> str:
        return str(self.value)


# ---- matrix products in tiles --------------------------------------------------------



def gemm_tiles_ir(triple: str, kind: int, size: int) -> str:
    """One tile function of matrix products (`GEMM_NAMES[kind, size]`; size 4: float32,
    8: float64), alone in its module, so that a process compiles only the kinds its
    products use (all six took ~1 s of LLVM at a first training step; one kind in
    float32 is 0.01-0.25 s). Each has a kernel's signature (4 buffers), so a product is a
    task of a native job like any generated kernel:

    `lzp_?gemm_tiles(a, b, c, desc, start, end)`: C = A B over the tiles start..end-1 of
    C (row-major tiles of desc's BM x BN; tile t is row block t / TILES_N, column block
    t % TILES_N; of a batch of products, see GEMM_TILES), each one call of the ILP64
    CBLAS gemm whose address desc holds;
    `lzp_?gemm_small`: the same tiles computed here (`_SmallGemm`); `lzp_?gemm_dots`: by
    dot products of rows (`_RowDots`); `lzp_?gemm_packed`: by our own AVX-512 packed
    GEMM (packed_gemm_ir.py)."""
    mod = ir.Module(name="lazyarray_gemm_tiles")
    mod.triple = triple
    ftype = {4: ir.FloatType(), 8: ir.DoubleType()}[size]
    make = {GEMM_KIND_BLAS: _gemm_tiles, GEMM_KIND_DIRECT: _SmallGemm, GEMM_KIND_DOTS: _RowDots,
            GEMM_KIND_PACKED: packed_gemm_ir.build}
    make[kind](mod, GEMM_NAMES[kind, size], ftype, size)
    return module_text(mod)


def _gemm_tiles(mod: ir.Module, name: str, ftype: ir.Type, size: int) -> None:
    f = ir.Function(mod, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR, I64, I64]), name)
    a0, b0, c0_, desc, start, end = f.args
    b = ir.IRBuilder(f.append_basic_block("entry"))
    d = [b.load(_word(b, desc, k), typ=I64) for k in range(GEMM_WORDS)]
    gemm_type = ir.FunctionType(VOID, [I32, I32, I32, I64, I64, I64, ftype, PTR, I64, PTR, I64,
                                       ftype, PTR, I64])
    gemm = Callee(b.inttoptr(d[GEMM_FN], PTR), gemm_type)
    no_trans = lambda v: b.icmp_unsigned("==", v, _c(CBLAS_NO_TRANS))

    def tile(t: ir.Value, _: list) -> list:
        t, (a, bm_, c) = _batch_member(b, d, t, (a0, b0, c0_), size)
        r0, r1, c0, c1 = tile_rect(b, d, t)
        rows, cols = b.sub(r1, r0), b.sub(c1, c0)
        # where the blocks start: a row block of A (rows of A, or columns of a transposed
        # A), a column block of B, and the tile of C
        a_off = b.select(no_trans(d[GEMM_TRANS_A]), b.mul(r0, d[GEMM_LDA]), r0)
        b_off = b.select(no_trans(d[GEMM_TRANS_B]), c0, b.mul(c0, d[GEMM_LDB]))
        c_off = b.add(b.mul(r0, d[GEMM_LDC]), c0)
        at = lambda base, off: b.gep(base, [b.mul(off, _c(size))], source_etype=I8)
        i32 = lambda v: b.trunc(v, I32)
        b.call(gemm, [ir.Constant(I32, CBLAS_ROW_MAJOR), i32(d[GEMM_TRANS_A]), i32(d[GEMM_TRANS_B]),
                      rows, cols, d[GEMM_K], ir.Constant(ftype, 1.0), at(a, a_off), d[GEMM_LDA],
                      at(bm_, b_off), d[GEMM_LDB], ir.Constant(ftype, 0.0), at(c, c_off),
                      d[GEMM_LDC]])
        return []

    counted_loop(b, start, end, [], tile)
    b.ret_void()


# ---- small products computed directly -------------------------------------------------

VECTOR_BYTES = 32       # one AVX2 register: 8 floats or 4 doubles
SMALL_ROWS = (6, 5, 4, 3, 2, 1)     # row blocks: as many of 6 as fit, then one of the rest
SMALL_ACCUMULATORS = 12             # rows x vectors of a block held in registers: enough
                                    # independent multiply-adds to cover the FMA latency
                                    # (~5 cycles on 2 units), with room for B's vectors


SMALL_K_CHUNK = 64                  # rows of B a pass over C's blocks reads (see _tile):
                                    # 10x512x256 float32 (a 10-wide layer's weight gradient)
                                    # 51 -> 42 us of CPU on one thread (32: 43, 16: 45, 8: 67,
                                    # 128: 45-69); 256x512x10/16, 4x4096x256 unchanged


def _small_vectors(rows: int) -> int:
    """Vectors of C's row in a block of `rows` rows (a short block is made wider)."""
    return max(2, min(4, SMALL_ACCUMULATORS // rows))


class _SmallGemm:
    """`lzp_sgemm_small` / `lzp_dgemm_small`: the signature and tiles of `gemm_tiles`, for
    a B read along its rows (not transposed), each tile computed here: a block of rows of
    C held in registers over the whole inner dimension, each A element broadcast against
    a few vectors of B's row per step, C written once. BLAS clears C, packs A and B and then
    adds into C: for a short inner dimension (a 10-wide layer's 256x10 @ 10x512) or few
    rows (its weight gradient 10x256 @ 256x512) that overhead is most of its time."""

    def __init__(self, mod: ir.Module, name: str, ftype: ir.Type, size: int) -> None:
        self.mod, self.ftype, self.size = mod, ftype, size
        self.lanes = VECTOR_BYTES // size
        self.vtype = ir.VectorType(ftype, self.lanes)
        suffix = "f32" if size == 4 else "f64"
        self.fma = {w: ir.Function(mod, ir.FunctionType(t, [t, t, t]), f"llvm.fma.{tag}{suffix}")
                    for w, t, tag in ((1, ftype, ""), (self.lanes, self.vtype, f"v{self.lanes}"))}
        f = ir.Function(mod, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR, I64, I64]), name)
        a, bm_, c, desc, start, end = f.args
        b = self.b = ir.IRBuilder(f.append_basic_block("entry"))
        d = [b.load(_word(b, desc, k), typ=I64) for k in range(GEMM_WORDS)]
        self.a, self.bmat, self.c, self.d = a, bm_, c, d
        plain = b.icmp_unsigned("==", d[GEMM_TRANS_A], _c(CBLAS_NO_TRANS))
        # A[i, k] = a[i * a_row + k * a_col] (a transposed A is read down its columns)
        self.a_row = b.select(plain, d[GEMM_LDA], _c(1))
        self.a_col = b.select(plain, _c(1), d[GEMM_LDA])

        def tile(t: ir.Value, _: list) -> list:
            t, (self.a, self.bmat, self.c) = _batch_member(b, d, t, (a, bm_, c), size)
            self._tile(*tile_rect(b, d, t))
            return []

        counted_loop(b, start, end, [], tile)
        b.ret_void()

    def _stages(self, lo: ir.Value, hi: ir.Value, widths: tuple) -> list:
        """[(start, end, width)]: [lo, hi) cut into runs of blocks of each width in turn."""
        b, out = self.b, []
        for w in widths:
            cut = b.add(lo, b.mul(b.udiv(b.sub(hi, lo), _c(w)), _c(w)))
            out.append((lo, cut, w))
            lo = cut
        return out

    def _tile(self, r0: ir.Value, r1: ir.Value, c0: ir.Value, c1: ir.Value) -> None:
        b = self.b
        lanes = self.lanes

        # B is read in chunks of SMALL_K_CHUNK rows, each chunk over every block of C:
        # walking B down a strip of columns over its whole length, one row a step and
        # a row's length apart, left the hardware prefetcher behind (two rows a 4 KB page
        # at 512 floats), and a second block of rows read all of B again from afar; a
        # chunk's rows stay in L2 for the next block. The first chunk starts C from zero,
        # the others add to it (a short inner dimension is one chunk: C is not read).
        # One loop over the chunks, `first` decided at run time in each block: the blocks'
        # code once, not once per kind of chunk (half the IR: LLVM's build of this
        # function at a first product was 0.3-0.6 s); a product with no inner dimension
        # still has its one chunk, which clears C.
        def chunk(k0: ir.Value, _: list) -> list:
            k1 = _min(b, b.add(k0, _c(SMALL_K_CHUNK)), self.d[GEMM_K])
            first = b.icmp_unsigned("==", k0, _c(0))
            for rs, re, rows in self._stages(r0, r1, SMALL_ROWS):
                def row_block(i: ir.Value, _: list, rows: int = rows) -> list:
                    wide = _small_vectors(rows) * lanes
                    for cs, ce, cols in self._stages(c0, c1, (wide, lanes, 1)):
                        def col_block(j: ir.Value, _: list, cols: int = cols) -> list:
                            self._block(i, j, rows, cols, k0, k1, first)
                            return []
                        counted_loop(b, cs, ce, [], col_block, name="j", step=_c(cols))
                    return []
                counted_loop(b, rs, re, [], row_block, name="r", step=_c(rows))
            return []

        chunks_end = b.select(b.icmp_signed(">", self.d[GEMM_K], _c(0)), self.d[GEMM_K], _c(1))
        counted_loop(b, _c(0), chunks_end, [], chunk, name="kc", step=_c(SMALL_K_CHUNK))

    def _block(self, i: ir.Value, j: ir.Value, rows: int, cols: int, k0: ir.Value,
               k1: ir.Value, first: ir.Value) -> None:
        """C[i:i+rows, j:j+cols] (+)= A[i:i+rows, k0:k1] @ B[k0:k1, j:j+cols], in
        registers (C read first unless `first`, an i1: the first chunk)."""
        b, d = self.b, self.d
        width = min(cols, self.lanes)
        vt = self.vtype if width > 1 else self.ftype
        nvec = cols // width
        zero = ir.Constant(vt, None)
        a_rows = [b.mul(b.add(i, _c(r)), self.a_row) for r in range(rows)]
        b_cols = [b.add(j, _c(v * width)) for v in range(nvec)]
        c_at = [self._at(self.c, b.add(b.mul(b.add(i, _c(r)), d[GEMM_LDC]), col))
                for r in range(rows) for col in b_cols]
        init = self._start(first, zero, c_at, vt)

        def step(k: ir.Value, acc: list) -> list:
            brow = b.mul(k, d[GEMM_LDB])
            bv = [b.load(self._at(self.bmat, b.add(brow, col)), typ=vt, align=self.size)
                  for col in b_cols]
            kcol = b.mul(k, self.a_col)
            out = []
            for r in range(rows):
                x = b.load(self._at(self.a, b.add(a_rows[r], kcol)), typ=self.ftype)
                x = self._splat(x, width)
                out += [b.call(self.fma[width], [x, bv[v], acc[r * nvec + v]])
                        for v in range(nvec)]
            return out

        acc = counted_loop(b, k0, k1, init, step, name="k", interleave=False)
        for v, at in zip(acc, c_at):
            b.store(v, at, align=self.size)

    def _start(self, first: ir.Value, zero: ir.Constant, c_at: list, vt: ir.Type) -> list:
        """A block's sums before its chunk: zero in the first chunk, else C as the chunks
        before left it (read only then: a branch per block, not a select per value)."""
        b = self.b
        pre = b.block
        read = b.function.append_basic_block("c.read")
        join = b.function.append_basic_block("c.start")
        b.cbranch(first, join, read)
        b.position_at_end(read)
        loaded = [b.load(at, typ=vt, align=self.size) for at in c_at]
        b.branch(join)
        b.position_at_end(join)
        out = []
        for v in loaded:
            p = b.phi(vt)
            p.add_incoming(zero, pre)
            p.add_incoming(v, read)
            out.append(p)
        return out

    def _at(self, base: ir.Value, index: ir.Value) -> ir.Value:
        return self.b.gep(base, [index], source_etype=self.ftype)

    def _splat(self, x: ir.Value, width: int) -> ir.Value:
        if width == 1:
            return x
        b = self.b
        v = b.insert_element(ir.Constant(self.vtype, ir.Undefined), x, ir.Constant(I32, 0))
        return b.shuffle_vector(v, ir.Constant(self.vtype, ir.Undefined),
                                ir.Constant(ir.VectorType(I32, width), [0] * width))


# ---- narrow products of a transposed B: dot products of rows ---------------------------

DOTS_GROUP = 11         # columns of C whose sums one pass over a row keeps in registers
                        # (each an independent chain of multiply-adds: enough to cover
                        # their latency; with A's vector, 12 of 16 AVX registers)


class _RowDots:
    """`lzp_sgemm_dots` / `lzp_dgemm_dots`: the signature and tiles of `gemm_tiles`, for
    A read along its rows and B transposed (a linear layer's x @ W.T with few outputs: a
    10-way classifier's 256x512 @ (10x512).T). C[i, j] is the dot product of row i of A
    with row j of W (B's column j), both contiguous: vectors of A's row are multiplied
    into up to DOTS_GROUP accumulators, one per column, summed across lanes at the end.
    BLAS packs W and writes a C only 10 wide in blocks made for wide ones: 2-3x the time
    of its multiply-adds (measured on one thread: 60-67 us for 256x10x512 float32)."""

    def __init__(self, mod: ir.Module, name: str, ftype: ir.Type, size: int) -> None:
        self.ftype, self.size = ftype, size
        self.lanes = VECTOR_BYTES // size
        self.vtype = ir.VectorType(ftype, self.lanes)
        suffix = "f32" if size == 4 else "f64"
        fma = f"llvm.fma.v{self.lanes}{suffix}"            # (declared by _SmallGemm too)
        self.fma = mod.globals.get(fma) or ir.Function(
            mod, ir.FunctionType(self.vtype, [self.vtype] * 3), fma)
        f = ir.Function(mod, ir.FunctionType(VOID, [PTR, PTR, PTR, PTR, I64, I64]), name)
        a, bm_, c, desc, start, end = f.args
        b = self.b = ir.IRBuilder(f.append_basic_block("entry"))
        d = self.d = [b.load(_word(b, desc, k), typ=I64) for k in range(GEMM_WORDS)]
        self.a, self.w, self.c = a, bm_, c
        k = d[GEMM_K]
        self.k_vec = b.mul(b.udiv(k, _c(self.lanes)), _c(self.lanes))   # the vector part

        def tile(t: ir.Value, _: list) -> list:
            t, (self.a, self.w, self.c) = _batch_member(b, d, t, (a, bm_, c), size)
            r0, r1, c0, c1 = tile_rect(b, d, t)
            full = b.add(c0, b.mul(b.udiv(b.sub(c1, c0), _c(DOTS_GROUP)), _c(DOTS_GROUP)))

            def row(i: ir.Value, _: list) -> list:
                def group(j: ir.Value, _: list) -> list:
                    self._dots(i, j, DOTS_GROUP)
                    return []
                counted_loop(b, c0, full, [], group, name="g", step=_c(DOTS_GROUP))
                rest = b.sub(c1, full)           # the last columns: one pass of their own
                for q in range(1, DOTS_GROUP):
                    with b.if_then(b.icmp_unsigned("==", rest, _c(q))):
                        self._dots(i, full, q)
                return []
            counted_loop(b, r0, r1, [], row, name="i")
            return []

        counted_loop(b, start, end, [], tile)
        b.ret_void()

    def _elem(self, base: ir.Value, index: ir.Value) -> ir.Value:
        return self.b.gep(base, [index], source_etype=self.ftype)

    def _dots(self, i: ir.Value, j: ir.Value, cols: int) -> None:
        """C[i, j:j+cols] = A[i, :] . W[j:j+cols, :]."""
        b, d = self.b, self.d
        arow = b.mul(i, d[GEMM_LDA])
        wrows = [b.mul(b.add(j, _c(q)), d[GEMM_LDB]) for q in range(cols)]
        zero = ir.Constant(self.vtype, None)

        def vec_step(k: ir.Value, acc: list) -> list:
            x = b.load(self._elem(self.a, b.add(arow, k)), typ=self.vtype, align=self.size)
            return [b.call(self.fma, [x, b.load(self._elem(self.w, b.add(w, k)), typ=self.vtype,
                                                align=self.size), s])
                    for w, s in zip(wrows, acc)]
        acc = counted_loop(b, _c(0), self.k_vec, [zero] * cols, vec_step, name="kv",
                           step=_c(self.lanes), interleave=False)
        sums = [self._lane_sum(v) for v in acc]

        def tail_step(k: ir.Value, acc: list) -> list:
            x = b.load(self._elem(self.a, b.add(arow, k)), typ=self.ftype)
            return [b.fadd(s, b.fmul(x, b.load(self._elem(self.w, b.add(w, k)), typ=self.ftype)))
                    for w, s in zip(wrows, acc)]
        sums = counted_loop(b, self.k_vec, d[GEMM_K], sums, tail_step, name="kt",
                            interleave=False)
        crow = b.add(b.mul(i, d[GEMM_LDC]), j)
        for q, s in enumerate(sums):
            b.store(s, self._elem(self.c, b.add(crow, _c(q))))

    def _lane_sum(self, v: ir.Value) -> ir.Value:
        """The sum of a vector's lanes, halving it each step."""
        b, width = self.b, self.lanes
        while width > 1:
            half = width // 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half), list(range(half))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(I32, half),
                                                    list(range(half, width))))
            v, width = b.fadd(lo, hi), half
        return b.extract_element(v, ir.Constant(I32, 0))


# the constants the device shares with this code (the driver hands them out)
LAYOUT = types.SimpleNamespace(**{k: v for k, v in dict(globals()).items()
                                  if k.isupper() and isinstance(v, (int, str, dict))})
