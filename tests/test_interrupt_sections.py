"""compiler/codegen/interrupts.py: SIGINT held for the end of a section that must not be split
(LLVM's lock: llvmlite frees its strings in two steps an interrupt could separate, and
the second free of a string is SIGABRT — seen once in CI, in an interrupt test that cut
a first compile)."""
import _thread
import threading
import time

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.codegen import llvm_target
from lazyarray.compiler.codegen.interrupts import InterruptsDeferred, Section


def _spin(seconds: float) -> None:
    """Python bytecodes for `seconds`: where a pending SIGINT would be delivered."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.parametrize("make", [InterruptsDeferred, Section])
def test_an_interrupt_in_a_section_arrives_at_its_end(make):
    section, reached = make(), []
    with pytest.raises(KeyboardInterrupt):
        with section:
            _thread.interrupt_main()
            _spin(0.02)
            reached.append(True)
    assert reached == [True]
    _spin(0.01)                                   # delivered once, not again


def test_the_llvm_lock_is_a_section_released_before_the_interrupt():
    lock = llvm_target._LOCK
    assert isinstance(lock, Section)
    with pytest.raises(KeyboardInterrupt):
        with lock:
            _thread.interrupt_main()
            _spin(0.01)
    assert not lock.locked()                      # the next compile can take it
    with la.config.override(device="cpu"):
        x = la.asarray(np.arange(5, dtype=np.float32))
        np.testing.assert_array_equal((x * 3 + 0.25).numpy(), np.arange(5, dtype=np.float32) * 3 + 0.25)


def test_without_an_interrupt_a_section_raises_nothing_and_passes_errors_on():
    section = Section()
    with section:
        pass
    with pytest.raises(ValueError):
        with section:
            raise ValueError("inside")
    assert not section.locked()


def test_a_section_on_another_thread_is_a_plain_lock():
    section, seen = Section(), []

    def worker() -> None:
        with section:
            seen.append(section.locked())
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [True] and not section.locked()


def test_interrupts_during_first_compiles_leave_llvm_whole():
    """Interrupts at random moments into programs compiled for the first time (each a
    new structure): every later compile and run still works."""
    import random
    rng = random.Random(7)
    hits = 0
    with la.config.override(device="cpu"):
        base = np.linspace(0.5, 1.5, 256, dtype=np.float32)
        x = la.asarray(base)
        for k in range(12):
            y = x
            for _ in range(k + 1):                # k+1 ops: a new program each time
                y = la.sin(y) * 1.5 + 0.25
            timer = threading.Thread(target=lambda: (time.sleep(rng.uniform(0, 0.02)),
                                                     _thread.interrupt_main()))
            try:
                timer.start()
                y.numpy()
                timer.join()
                _spin(0.002)
            except KeyboardInterrupt:
                timer.join()
                hits += 1
            expect = base
            for _ in range(k + 1):
                expect = np.sin(expect) * np.float32(1.5) + np.float32(0.25)
            np.testing.assert_allclose(y.numpy(), expect, rtol=1e-5)
    assert hits > 0


def test_a_compiled_module_is_freed_inside_the_section(monkeypatch):
    """The compiler frees every LLVM module it makes before the compile returns (the
    program's, in the section: llvm_target.release; a piece's, with the context it was
    made in: llvm_target.optimize_apart), not whenever the collector reaches it, perhaps
    during another thread's compile."""
    import llvmlite.binding as llvm
    made = []
    real = llvm.parse_assembly

    def spy(text, *args, **kwargs):
        mod = real(text, *args, **kwargs)
        if text:        # (not the empty module a loaded program's engine owns)
            made.append(mod)
        return mod
    monkeypatch.setattr(llvm, "parse_assembly", spy)
    with la.config.override(device="cpu", cache_dir="off"):      # compiled here
        a = np.arange(7, dtype=np.float32)
        x = la.asarray(a)
        np.testing.assert_allclose((la.cos(x) * 4.5 - la.sinh(x * 0.125)).numpy(),
                                   np.cos(a) * 4.5 - np.sinh(a * 0.125), rtol=1e-5, atol=1e-5)
    assert made and all(mod.closed for mod in made)
