"""A large CPU program's LLVM module is optimized as two halves at once, on two threads
(compiler/codegen/module_split.py, driver._compile_cpu): the halves hold every function
once, in order, with the globals they name; linked into one module they give the serial
object code; emitted apart, the program's code is a bundle of both objects
(codegen/object_bundle.py) that the CPU device loads and runs, also from the disk cache."""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np
import pytest

from lazyarray.compiler import driver
from lazyarray.compiler.codegen import llvm_target, module_split, object_bundle
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction, Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.cpu.object_code import LoadedCode

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


def test_halves_are_cut_by_llvms_cost_an_optnone_function_costing_less():
    """Unoptimized (`optnone`) kernels cost LLVM a fraction of an optimized one's time per
    character of IR: with the first half of the functions optnone, the first half of
    the module takes more functions, so both threads get about the same work."""
    m = _program(60)
    for k in range(30):
        m.get_global(f"loop_{k}").attributes.add("optnone")
        m.get_global(f"loop_{k}").attributes.add("noinline")
    first, _ = module_split.halves(m)
    # 30 optnone at OPTNONE_COST each, then optimized ones up to half of the total cost
    want = 30 + round((30 - 30 * module_split.OPTNONE_COST) / 2)
    assert abs(len(_defined(first)) - want) <= 1


@pytest.mark.parametrize("m", [_program(60, shared_global=True), _program(3), _program(1)])
def test_module_not_cut_when_a_global_is_shared_or_it_is_small(m):
    assert module_split.halves(m) is None


def test_program_optimized_in_halves_gives_the_serial_object_code():
    m = _program(60)
    serial = llvm_target.optimize(str(m), m.name)
    halves = driver._optimize_program(m, m.name, module_split.halves(m))
    try:
        assert [f.name for f in halves.functions if not f.is_declaration] == \
            [f"loop_{k}" for k in range(60)]
        assert llvm_target.emit_object(halves) == llvm_target.emit_object(serial)
    finally:
        llvm_target.release(serial)
        llvm_target.release(halves)


def _two_kernels() -> Module:
    """Two outputs of different shapes: two loop kernels."""
    return Module("two", [Instruction("parameter", (), (8,), D.float32, {"number": 0}),
                          Instruction("parameter", (), (5, 3), D.float32, {"number": 1}),
                          Instruction("exponential", (0,), (8,), D.float32, {}),
                          Instruction("sine", (1,), (5, 3), D.float32, {})], [2, 3])


@pytest.mark.parametrize("cores", [1, 2])
def test_program_compiled_in_halves_runs_from_a_bundle_of_two_objects(tmp_path, monkeypatch,
                                                                      cores):
    monkeypatch.setattr(module_split, "MIN_SPLIT_CHARS", 0)   # cut even this program
    monkeypatch.setattr(driver, "_cores", lambda: cores)
    x = np.linspace(-2, 2, 8, dtype=np.float32)
    y = np.linspace(-3, 3, 15, dtype=np.float32).reshape(5, 3)
    for attempt in ("compiled", "from the disk cache"):
        dev = CPUDevice(lambda: {"cache_dir": str(tmp_path)})
        exe = dev.compile(_two_kernels())
        assert exe.from_disk_cache == (attempt != "compiled")
        assert len(exe._code.engines) == (2 if cores == 2 else 1)
        ex, sy = exe.run([x, y])
        np.testing.assert_allclose(ex, np.exp(x), rtol=1e-6)
        np.testing.assert_allclose(sy, np.sin(y), rtol=1e-6, atol=1e-7)


def test_bundle_unpacks_to_its_objects_and_a_cut_one_is_refused():
    objects = [b"\x7fELF-one", b"\x7fELF-second"]
    code = object_bundle.pack(objects)
    assert object_bundle.unpack(code) == objects
    assert object_bundle.pack(objects[:1]) == objects[0]
    assert object_bundle.unpack(objects[0]) == objects[:1]
    for cut in (len(code) - 1, 20, 10):
        with pytest.raises(ValueError, match="cut short|objects say"):
            object_bundle.unpack(code[:cut])
        with pytest.raises(ValueError):
            LoadedCode(code[:cut])


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
        run = pass_pipeline.unlocked("LLVMPY_RunNewModulePassManager")
        done = []
        caller = threading.Thread(target=lambda: done.append(
            pass_pipeline.unlocked("LLVMPY_GetVersionInfo")()))
        caller.start()
        caller.join(30)
        assert done, "an unlocked call waited for llvmlite's lock"
        assert run is not llvm.ffi.lib.LLVMPY_RunNewModulePassManager
    finally:
        release.set()
        holder.join()
