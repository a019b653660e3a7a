"""A program's llvmlite IR is freed by reference counting once its texts are made
(compiler/codegen/module_split.py `release_ir`), not left in reference cycles for the
cyclic collector: the compiler allocates it with the collector paused, and its first pass
after a CNN's compile (116,000 objects) took 65-90 ms of the first step."""
from __future__ import annotations

import gc
import weakref

import llvmlite.ir as ir
import numpy as np
import pytest

from lazyarray.compiler import driver
from lazyarray.compiler.codegen import module_split
from lazyarray.compiler.codegen.loops import const, counted_loop
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice


def _loop_module() -> tuple:
    """A module with a function summing a counted loop (a phi and its next value, which
    name each other), and weak references to its function, block and phi."""
    mod = ir.Module(name="loop")
    i64 = ir.IntType(64)
    fn = ir.Function(mod, ir.FunctionType(i64, [i64]), "f")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    (total,) = counted_loop(b, const(0), fn.args[0], [const(0)],
                            lambda i, c: [b.add(c[0], i)], name="i")
    b.ret(total)
    phi = next(inst for blk in fn.blocks for inst in blk.instructions
               if isinstance(inst, ir.PhiInstr))
    return mod, [weakref.ref(x) for x in (fn, fn.blocks[0], phi, fn.args[0])]


@pytest.fixture
def collector_paused():
    was = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_a_released_module_is_freed_without_the_collector(collector_paused) -> None:
    mod, refs = _loop_module()
    text = str(mod)
    assert "phi" in text
    module_split.release_ir(mod)
    del mod
    assert [r() for r in refs] == [None] * len(refs)


def test_an_unreleased_module_needs_the_collector(collector_paused) -> None:
    """(the check above can fail: without `release_ir` the IR outlives its last name)"""
    mod, refs = _loop_module()
    del mod
    assert all(r() is not None for r in refs)
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs)


def _program() -> Module:
    """exp(x) + y, its row sums and a column max: loops, row and partial reductions."""
    f32 = D.float32
    return Module("released", [
        I("parameter", (), (64, 96), f32, {"number": 0}),
        I("parameter", (), (64, 96), f32, {"number": 1}),
        I("exponential", (0,), (64, 96), f32, {}),
        I("add", (2, 1), (64, 96), f32, {}),
        I("reduce", (3,), (64,), f32, {"axes": (1,), "kind": "sum"}),
        I("reduce", (3,), (96,), f32, {"axes": (0,), "kind": "max"}),
        I("tanh", (3,), (64, 96), f32, {}),
    ], [4, 5, 6])


@pytest.mark.parametrize("cores", [1, 2])     # one module built whole; pieces streamed
def test_a_compile_leaves_little_for_the_collector(collector_paused, monkeypatch,
                                                   cores: int) -> None:
    monkeypatch.setattr(driver, "_cores", lambda: cores)
    exe = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2}).compile(_program())
    left = gc.collect()
    rng = np.random.default_rng(0)
    args = [rng.standard_normal((64, 96)).astype(np.float32) for _ in range(2)]
    want = InterpreterDevice().compile(_program()).run(args)
    for g, w in zip(exe.run(args), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    # (the IR of its kernels alone is thousands of objects in cycles without release_ir)
    assert left < 500, left
