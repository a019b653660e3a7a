"""A large CPU program's LLVM module is optimized in pieces at once, on several threads
(compiler/codegen/module_split.py, driver._compile_cpu): two halves, or shrinking pieces
taken by whichever thread is free, hold every function once, in order, with the globals
they name; halves linked into one module give the serial object code; emitted apart,
the program's code is a bundle of the pieces' objects (codegen/object_bundle.py) that
the CPU device loads and runs, also from the disk cache. Functions equal but for their
name are merged first: one function, called by each of their kernels' steps."""
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


def _program(functions: int, shared_global: bool = False, tables: bool = True,
             distinct: bool = False) -> ir.Module:
    """`functions` kernels, each a loop out[i] = in[i] * c + table[k] over n elements
    (without `tables`: + k; `distinct`: c differs between them too)."""
    m = ir.Module("split_test")
    tables = [ir.GlobalVariable(m, F64, f"const.{k}") for k in range(functions)] \
        if tables else []
    for k, t in enumerate(tables):
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
            x = b.fadd(b.fmul(x, F64(1.0 + j / 64 + (k if distinct else 0))), F64(j))
        if tables:
            x = b.fadd(x, b.load(tables[0 if shared_global else k]))
        else:
            x = b.fadd(x, F64(k))
        b.store(x, b.gep(dst, [i]))
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


def _stream(m: ir.Module, kinds: list = None) -> tuple:
    """([(functions added when the piece was sent, its text)], merged): `m`'s functions
    given to a Stream one at a time, as kernels are generated. `kinds`, when given,
    hears whether each piece is vector code."""
    sent: list = []
    added = [0]

    def send(text: str, vector_code: bool) -> None:
        sent.append((added[0], text))
        if kinds is not None:
            kinds.append(vector_code)
    stream = module_split.Stream(2, send)
    for f in [g for g in m.globals.values() if isinstance(g, ir.Function) and g.blocks]:
        added[0] += 1
        stream.add(m, [f])
    added[0] = None
    return sent, stream.finish(m)


def test_stream_sends_pieces_as_functions_come_then_shrinking_ones():
    sent, merged = _stream(_program(60, tables=False))
    assert merged == {}
    assert sum((_defined(t) for _, t in sent), []) == [f"loop_{k}" for k in range(60)]
    early = [t for when, t in sent if when is not None]
    assert early and len(early) < len(sent)      # LLVM starts before generation ends
    assert len(_defined(early[0])) < 60 / 2
    last = [len(_defined(t)) for when, t in sent if when is None]
    assert len(last) > 2 and last[0] > last[-1]


def test_streamed_pieces_stay_under_the_cap(monkeypatch):
    monkeypatch.setattr(module_split, "MIN_SPLIT_CHARS", 5000)
    monkeypatch.setattr(module_split, "MAX_STREAM_PIECE", 12000)
    sent, _ = _stream(_program(60, tables=False))
    early = [t for when, t in sent if when is not None]
    assert len(early) > 3
    for t in early:
        body = t[t.index("define"):]
        assert len(body) <= 12000 or len(_defined(t)) == 1


def test_stream_with_globals_keeps_each_with_the_function_naming_it():
    sent, _ = _stream(_program(60))
    assert all(when is None for when, _ in sent)  # (a global waits for the end)
    assert len(sent) > 2
    assert sum((_defined(t) for _, t in sent), []) == [f"loop_{k}" for k in range(60)]
    for k in range(60):
        assert [f'@"const.{k}" = ' in t for _, t in sent] == \
            [f'@"loop_{k}"' in t for _, t in sent]
    shared, _ = _stream(_program(60, shared_global=True, distinct=True))
    assert len(shared) == 1 and len(_defined(shared[0][1])) == 60
    small, _ = _stream(_program(3, tables=False))
    assert len(small) == 1


def test_stream_merges_functions_equal_but_for_their_name():
    sent, merged = _stream(_program(6, shared_global=True))
    assert merged == {f"loop_{k}": "loop_0" for k in range(1, 6)}
    assert [_defined(t) for _, t in sent] == [["loop_0"]]


def test_functions_equal_but_for_their_name_are_merged():
    m = _program(4, shared_global=True)        # every function reads const.0: all equal
    extra = m.get_global("loop_3")
    extra.attributes.add("optnone")           # ...but this one's attributes
    extra.attributes.add("noinline")
    texts = module_split.function_texts(m)
    merged = module_split.merge_equal(m, texts)
    assert merged == {"loop_1": "loop_0", "loop_2": "loop_0"}
    assert list(texts) == ["loop_0", "loop_3"]
    assert _defined(str(m)) == ["loop_0", "loop_3"]


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


def _same_code_kernels() -> Module:
    """exp over 8 and over 9 elements, tanh over 10: two loop kernels with the same
    function (their length is the range they are called with), and a third."""
    ins = [Instruction("parameter", (), (n,), D.float32, {"number": k})
           for k, n in enumerate((8, 9, 10))]
    ins += [Instruction("exponential", (0,), (8,), D.float32, {}),
            Instruction("exponential", (1,), (9,), D.float32, {}),
            Instruction("tanh", (2,), (10,), D.float32, {})]
    return Module("same_code", ins, [3, 4, 5])


def test_kernels_with_the_same_code_call_one_function(tmp_path):
    program = driver.compile(_same_code_kernels())
    fns = [s.fn for s in program.steps]
    assert len(fns) == 3 and fns[0] == fns[1] != fns[2]
    xs = [np.linspace(-2, 2, n, dtype=np.float32) for n in (8, 9, 10)]
    for attempt in ("compiled", "from the disk cache"):
        exe = CPUDevice(lambda: {"cache_dir": str(tmp_path)}).compile(_same_code_kernels())
        assert exe.from_disk_cache == (attempt != "compiled")
        out = exe.run(xs)
        for got, want in zip(out, (np.exp(xs[0]), np.exp(xs[1]), np.tanh(xs[2]))):
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_program_compiled_in_pieces_runs_from_a_bundle(tmp_path, monkeypatch):
    """Six kernels of different code cut into pieces for two threads: an engine per
    piece, the same results compiled and from the disk cache."""
    monkeypatch.setattr(module_split, "MIN_SPLIT_CHARS", 0)
    monkeypatch.setattr(driver, "_cores", lambda: 2)
    ops = ("exponential", "sine", "cosine", "tanh", "sqrt", "negate")
    ref = (np.exp, np.sin, np.cos, np.tanh, np.sqrt, np.negative)
    ins = [Instruction("parameter", (), (k + 2, 3), D.float32, {"number": k}) for k in range(6)]
    ins += [Instruction(op, (k,), (k + 2, 3), D.float32, {}) for k, op in enumerate(ops)]
    module = Module("six", ins, list(range(6, 12)))
    xs = [np.linspace(0.5, 2, 3 * k + 6, dtype=np.float32).reshape(k + 2, 3) for k in range(6)]
    for attempt in ("compiled", "from the disk cache"):
        exe = CPUDevice(lambda: {"cache_dir": str(tmp_path)}).compile(module)
        assert exe.from_disk_cache == (attempt != "compiled")
        assert len(exe._code.engines) > 2
        for got, f, x in zip(exe.run(xs), ref, xs):
            np.testing.assert_allclose(got, f(x), rtol=1e-6)


def test_a_small_program_is_built_by_the_compiling_thread_alone(monkeypatch):
    """One piece (a program under MIN_SPLIT_CHARS): no LLVM thread is started for it."""
    import threading
    started = []
    real = threading.Thread

    class Spy(real):
        def start(self) -> None:
            started.append(self.name)
            super().start()
    monkeypatch.setattr(threading, "Thread", Spy)
    monkeypatch.setattr(driver, "_cores", lambda: 2)
    program = driver.compile(_two_kernels())
    assert len(object_bundle.unpack(program.code)) == 1
    assert "lazyarray-llvm" not in started


def test_vector_code_goes_to_pieces_of_its_own():
    """Functions marked llvm_target.mark_vector_code are sent in pieces apart, each piece
    with whether it holds vector code (its pipeline); every function once; a module of
    both kinds is cut in the two for one thread too (vector_code_apart)."""
    m = _program(60, tables=False)
    vector = {f"loop_{k}" for k in range(0, 60, 3)}
    for name in vector:
        llvm_target.mark_vector_code(m.get_global(name))
    kinds: list = []
    sent, _ = _stream(m, kinds)
    assert True in kinds and False in kinds
    for kind, (_, text) in zip(kinds, sent):
        assert (set(_defined(text)) <= vector) if kind else not set(_defined(text)) & vector
    assert sorted(sum((_defined(t) for _, t in sent), [])) == \
        sorted(f"loop_{k}" for k in range(60))
    texts = module_split.function_texts(m)
    others, apart = module_split.vector_code_apart(m, texts)
    assert set(_defined(apart)) == vector
    assert set(_defined(others)) == set(texts) - vector
    plain = _program(60)
    assert module_split.vector_code_apart(plain, module_split.function_texts(plain)) is None


_PRODUCT = """HloModule product

ENTRY main {
  %w = f32[64,48] parameter(), number=0
  %x = f32[48,32] parameter(), number=1
  %d = f32[64,32] dot_general(%w, %x), lhs_contracting={1}, rhs_contracting={0}, lhs_batch={}, rhs_batch={}
  %e = f32[64,32] exponential(%d)
  ROOT %t = (f32[64,32]) tuple(%e)
}
"""


@pytest.mark.parametrize("cores", [1, 2])
def test_planned_hears_the_products_before_the_kernels_are_generated(monkeypatch, cores):
    """Where LLVM builds the program on several threads, `planned` hears its library
    calls (a matrix product) as soon as the plan is made, before any kernel is
    generated (the CPU device starts building their GEMM tile functions then, on the
    idle core), and every step once they are; on one thread, every step once."""
    from lazyarray.compiler.codegen import cpu_kernels
    from lazyarray.compiler.hlo.parser import parse_module
    monkeypatch.setattr(driver, "_cores", lambda: cores)
    events: list = []
    real = cpu_kernels.generate_module

    def generate(*args, **kwargs):
        events.append("generate")
        return real(*args, **kwargs)
    monkeypatch.setattr(cpu_kernels, "generate_module", generate)
    driver.compile(parse_module(_PRODUCT), planned=lambda m, steps, early=False: events.append(
        (early, sorted(getattr(s, "call", "kernel") for s in steps))))
    if cores == 2:
        assert events == [(True, ["gemm"]), "generate", (False, ["gemm", "kernel"])]
    else:
        assert events == ["generate", (False, ["gemm", "kernel"])]
