"""The GPU kernels, built for the host CPU so that their own code can be run and checked
without a GPU (devices/stand_ins/cuda_simt.py runs them; tests/test_gpu_simt.py checks them).

The kernels are emitted by the same functions that emit PTX (nvptx.py), into a module
marked `simt_host`; only what touches the hardware differs, at the few points that ask
`is_host(module)`:

- special registers (tid, ctaid, ntid, nctaid) are read from a per-thread context that
  every kernel takes as one more, last, parameter: i64 words, `CTX` below;
- a block barrier is `pthread_barrier_wait` on the block's barrier, and a warp shuffle
  goes through a per-block exchange array between two waits on the warp's barrier
  (every lane of the warp writes its value, waits, reads its partner's, waits);
- shared memory and the module's globals are ordinary globals (one block runs at a
  time), fences have no scope, and math uses the CPU's table instead of libdevice.

Everything else — the loops, indexing, team reductions, vector loads, the last-block
ticket — is the code that goes into the PTX.
"""
from __future__ import annotations

import llvmlite.ir as ir

I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()

# context words: what a thread knows of itself, and the block's shared runtime objects
CTX = {"tid.x": 0, "ctaid.x": 1, "ntid.x": 2, "nctaid.x": 3, "tid.y": 4, "ntid.y": 5,
       "block_barrier": 6, "warp_barriers": 7, "exchange": 8, "linear_tid": 9}
CTX_WORDS = 10
BARRIER_BYTES = 64          # room for a pthread_barrier_t (32 bytes on x86-64 glibc)


def mark_host(mod: ir.Module) -> ir.Module:
    mod.simt_host = True
    return mod


def is_host(mod: ir.Module) -> bool:
    return bool(getattr(mod, "simt_host", False))


def _word(b: ir.IRBuilder, ctx: ir.Value, key: str) -> ir.Value:
    return b.load(b.gep(ctx, [ir.Constant(I64, CTX[key])], source_etype=I64), typ=I64)


def context(b: ir.IRBuilder) -> ir.Value:
    """The kernel's context parameter (its last)."""
    return b.function.args[-1]


def sreg(b: ir.IRBuilder, reg: str) -> ir.Value:
    if reg not in CTX:
        raise NotImplementedError(f"simt host: special register {reg} is not emulated")
    return _word(b, context(b), reg)


def _pthread_wait(mod: ir.Module) -> ir.Function:
    fn = mod.globals.get("pthread_barrier_wait")
    if fn is None:
        fn = ir.Function(mod, ir.FunctionType(I32, [PTR]), "pthread_barrier_wait")
    return fn


def barrier(b: ir.IRBuilder) -> None:
    ptr = b.inttoptr(_word(b, context(b), "block_barrier"), PTR)
    b.call(_pthread_wait(b.module), [ptr])


def shuffle_xor_i32(b: ir.IRBuilder, value: ir.Value, lane_mask: int) -> ir.Value:
    return b.call(_shuffle_function(b.module), [context(b), value, ir.Constant(I32, lane_mask)])


def _shuffle_function(mod: ir.Module) -> ir.Function:
    """i32 lazyarray_simt_shfl(ctx, value, mask): the value of lane (lane ^ mask)."""
    name = "lazyarray_simt_shfl"
    fn = mod.globals.get(name)
    if fn is not None:
        return fn
    fn = ir.Function(mod, ir.FunctionType(I32, [PTR, I32, I32]), name)
    fn.linkage = "internal"
    ctx, value, mask = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    me = _word(b, ctx, "linear_tid")
    slots = b.inttoptr(_word(b, ctx, "exchange"), PTR)
    warp = b.udiv(me, ir.Constant(I64, 32))
    wait_on = b.gep(b.inttoptr(_word(b, ctx, "warp_barriers"), PTR),
                    [b.mul(warp, ir.Constant(I64, BARRIER_BYTES))], source_etype=ir.IntType(8))
    b.store(value, b.gep(slots, [me], source_etype=I32))
    b.call(_pthread_wait(mod), [wait_on])
    lane = b.and_(me, ir.Constant(I64, 31))
    partner = b.or_(b.sub(me, lane), b.xor(lane, b.zext(mask, I64)))
    got = b.load(b.gep(slots, [partner], source_etype=I32), typ=I32)
    b.call(_pthread_wait(mod), [wait_on])         # every lane has read before a rewrite
    b.ret(got)
    return fn
