"""Innermost loops run as rows of a head's width where the kernel reads through a head
merge (compiler/codegen/inner_rows.py): the parts of a concatenate (a split's gradient)
and a whole innermost dimension. Bit-equal to the interpreter, and the merged heads are
read with vector loads (without the rows: gathers)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from lazyarray.compiler.codegen import inner_rows
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I, Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

_DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})


def _merged(ins: list, k: int, batch: int, heads: int, seq: int, dim: int) -> int:
    """Parameter k, (batch, heads, seq, dim), merged to (batch, seq, heads * dim)."""
    f = D.float32
    ins.append(I("parameter", (), (batch, heads, seq, dim), f, {"number": k}))
    ins.append(I("transpose", (len(ins) - 1,), (batch, seq, heads, dim), f,
                 {"permutation": (0, 2, 1, 3)}))
    ins.append(I("reshape", (len(ins) - 1,), (batch, seq, heads * dim), f,
                 {"shape": (batch, seq, heads * dim)}))
    return len(ins) - 1


def _split_gradient(batch: int, heads: int, seq: int, dim: int) -> Module:
    """Three merged head gradients side by side (a concatenate), and its column sum."""
    f = D.float32
    ins: list = []
    parts = tuple(_merged(ins, k, batch, heads, seq, dim) for k in range(3))
    shape = (batch, seq, 3 * heads * dim)
    ins.append(I("concatenate", parts, shape, f, {"dimension": 2}))
    cat = len(ins) - 1
    ins.append(I("reduce", (cat,), shape[2:], f, {"axes": (0, 1), "kind": "sum"}))
    return Module("split_grad", ins, [cat, len(ins) - 1])


def _merged_plus(batch: int, heads: int, seq: int, dim: int) -> Module:
    """A merged head value plus a parameter, and its column sum (one kernel, two
    outputs: the loop is over the sum's shape, not the reshape's)."""
    f = D.float32
    ins: list = []
    merged = _merged(ins, 0, batch, heads, seq, dim)
    shape = (batch, seq, heads * dim)
    ins.append(I("parameter", (), shape, f, {"number": 1}))
    ins.append(I("add", (merged, len(ins) - 1), shape, f, {}))
    total = len(ins) - 1
    ins.append(I("reduce", (total,), shape[2:], f, {"axes": (0, 1), "kind": "sum"}))
    return Module("merged_plus", ins, [total, len(ins) - 1])


BUILDERS = {"split gradient": _split_gradient, "merged plus": _merged_plus}


@pytest.mark.parametrize("what", list(BUILDERS))
@pytest.mark.parametrize("sizes", [(2, 4, 16, 16), (4, 2, 64, 32), (1, 3, 5, 8), (2, 2, 3, 4)])
def test_rows_match_the_interpreter(what: str, sizes: tuple) -> None:
    m = BUILDERS[what](*sizes)
    rng = np.random.default_rng(sum(sizes))
    # small integers: every float32 sum is exact, so any order of summing is bit-equal
    args = [rng.integers(-100, 100, m.instructions[p].shape).astype(np.float32)
            for p in m.parameters]
    want = InterpreterDevice().compile(m).run(args)
    got = _DEVICE.compile(m).run(args)
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w)), f"{what} {sizes}"


@pytest.mark.parametrize("what", list(BUILDERS))
def test_rows_read_merged_heads_with_vector_loads(what: str, monkeypatch) -> None:
    """(Sizes large enough for LLVM's loop vectorizer: llvm_target.opt_tier.)"""
    m = BUILDERS[what](4, 2, 128, 64)

    def vector_loads() -> int:
        return len(re.findall(r"load <\d+ x float>", _DEVICE.stage(m, "llvm")))
    with_rows = vector_loads()
    monkeypatch.setattr(inner_rows, "row_width", lambda *a: 1)
    assert with_rows > vector_loads()
