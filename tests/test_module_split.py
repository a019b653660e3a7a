"""A large CPU program's LLVM module is optimized as two halves at once, on two threads
(compiler/codegen/module_split.py, driver._optimize_program): the halves hold every
function once, in order, with the globals they name; the linked module gives the same
object code as the serial compile."""
from __future__ import annotations

import llvmlite.ir as ir
import pytest

from lazyarray.compiler import driver
from lazyarray.compiler.codegen import llvm_target, module_split

F64 = ir.DoubleType()
I64 = ir.IntType(64)


def _program(functions: int, shared_global: bool = False) -> ir.Module:
    """`functions` kernels, each a loop out[i] = in[i] * c + table[k] over n elements."""
    m = ir.Module("split_test")
    tables = [ir.GlobalVariable(m, F64, f"const.{k}") for k in range(functions)]
    for t, k in zip(tables, range(functions)):
        t.initializer = ir.Constant(F64, float(k))
        t.global_constant = True
        t.linkage = "private"
    ptr = F64.as_pointer()
    for k in range(functions):
        f = ir.Function(m, ir.FunctionType(ir.VoidType(), [ptr, ptr, I64]), f"loop_{k}")
        src, dst, n = f.args
        entry, body, done = (f.append_basic_block(s) for s in ("entry", "body", "done"))
        b = ir.IRBuilder(entry)
        b.cbranch(b.icmp_signed(">", n, I64(0)), body, done)
        b.position_at_end(body)
        i = b.phi(I64)
        i.add_incoming(I64(0), entry)
        x = b.load(b.gep(src, [i]))
        for j in range(40):              # enough IR for the module to be cut
            x = b.fadd(b.fmul(x, F64(1.0 + j / 64)), F64(j))
        table = tables[0 if shared_global else k]
        b.store(b.fadd(x, b.load(table)), b.gep(dst, [i]))
        nxt = b.add(i, I64(1))
        i.add_incoming(nxt, body)
        b.cbranch(b.icmp_signed("<", nxt, n), body, done)
        b.position_at_end(done)
        b.ret_void()
    return m


def _defined(text: str) -> list:
    return [line.split('@"')[1].split('"')[0] for line in text.splitlines()
            if line.startswith("define")]


def test_halves_hold_every_function_once_in_order_with_its_globals():
    m = _program(60)
    first, second = module_split.halves(m)
    names = _defined(first) + _defined(second)
    assert names == [f"loop_{k}" for k in range(60)]
    assert 0.3 < len(first) / (len(first) + len(second)) < 0.7
    for k in range(60):    # each constant in the half of the one function that reads it
        inside = '@"const.%d" = ' % k in first, '@"const.%d" = ' % k in second
        assert inside == ((True, False) if f'@"loop_{k}"' in first else (False, True))


@pytest.mark.parametrize("m", [_program(60, shared_global=True), _program(3), _program(1)])
def test_module_not_cut_when_a_global_is_shared_or_it_is_small(m):
    assert module_split.halves(m) is None


def test_program_optimized_in_halves_gives_the_serial_object_code(monkeypatch):
    m = _program(60)
    monkeypatch.setattr(driver, "_cores", lambda: 2)
    serial = llvm_target.optimize(str(m), m.name)
    halves = driver._optimize_program(m, m.name)
    try:
        assert [f.name for f in halves.functions if not f.is_declaration] == \
            [f"loop_{k}" for k in range(60)]
        assert llvm_target.emit_object(halves) == llvm_target.emit_object(serial)
    finally:
        llvm_target.release(serial)
        llvm_target.release(halves)


def test_one_core_compiles_serially(monkeypatch):
    m = _program(60)
    monkeypatch.setattr(driver, "_cores", lambda: 1)
    monkeypatch.setattr(llvm_target, "optimize_apart",
                        lambda *a: pytest.fail("a second thread on one core"))
    llvm_target.release(driver._optimize_program(m, m.name))


def test_pipeline_runs_outside_llvmlites_lock():
    """llvmlite holds one lock around every call into LLVM; the pipeline's run (most of
    a compile) must not take it, or the second thread's half waits for the first's."""
    import threading

    import llvmlite.binding as llvm

    from lazyarray.compiler.codegen import pass_pipeline
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with llvm.ffi.lib._lock:
            held.set()
            release.wait(30)
    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(30)
    try:
        run = pass_pipeline._unlocked("LLVMPY_RunNewModulePassManager")
        done = []
        caller = threading.Thread(target=lambda: done.append(
            pass_pipeline._unlocked("LLVMPY_GetVersionInfo")()))
        caller.start()
        caller.join(30)
        assert done, "an unlocked call waited for llvmlite's lock"
        assert run is not llvm.ffi.lib.LLVMPY_RunNewModulePassManager
    finally:
        release.set()
        holder.join()
