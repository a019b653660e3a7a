"""A reshape read inside a fused kernel maps each run of dimensions with equal sizes on
its own (compiler/codegen/index_rules.same_element): bit-equal to the interpreter for
every kind of run, and a head split (B, T, 3C) -> (B, T, 3, H, D) reads its operand
with multiply-adds, no division (the encoder's qkv split divided every index)."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I, Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

_DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})

# (operand shape, reshaped shape, permutation of the reshaped value or None)
CASES = [
    ((4, 6, 96), (4, 6, 3, 4, 8), (2, 0, 3, 1, 4)),    # head split, then heads first
    ((4, 3, 5, 8), (4, 120), None),                      # merge of the last three
    ((4, 5, 3, 8), (4, 5, 24), None),                    # head merge
    ((6, 35), (2, 3, 5, 7), None),                       # both runs split
    ((2, 3, 5, 7), (6, 35), (1, 0)),                     # both runs merge
    ((12, 10), (3, 40), None),                           # runs that are no dimension's own
    ((1, 8, 1, 6), (8, 6), None),                        # size-1 dimensions go
    ((8, 6), (1, 8, 6, 1), None),                        # size-1 dimensions come
    ((8, 1, 6), (48,), None),
    ((1, 48), (4, 1, 12, 1), (2, 1, 0, 3)),
    ((7,), (7, 1), None),
]


def _module(src: tuple, dst: tuple, perm) -> Module:
    """x * 2 reshaped to `dst` (permuted by `perm`), one kernel; and the same value summed
    over its first dimension (the reshape read by a reduction)."""
    f = D.float32
    ins = [I("parameter", (), src, f, {"number": 0})]
    ins.append(I("constant", (), (), f, {"value": _literal(2.0)}))
    ins.append(I("broadcast_in_dim", (1,), src, f, {"shape": src, "broadcast_dimensions": ()}))
    ins.append(I("multiply", (0, 2), src, f, {}))
    ins.append(I("reshape", (3,), dst, f, {"shape": dst}))
    out = 4
    if perm is not None:
        shape = tuple(dst[p] for p in perm)
        ins.append(I("transpose", (4,), shape, f, {"permutation": perm}))
        out = 5
    shape = ins[out].shape
    ins.append(I("reduce", (out,), shape[1:], f, {"axes": (0,), "kind": "sum"}))
    return Module("reshape", ins, [out, len(ins) - 1])


def _literal(value: float):
    from lazyarray.compiler.hlo.literal import Literal
    return Literal(np.asarray(value, dtype=np.float32))


@pytest.mark.parametrize("src,dst,perm", CASES)
def test_reshapes_read_in_a_kernel_match_the_interpreter(src, dst, perm) -> None:
    m = _module(src, dst, perm)
    x = np.arange(int(np.prod(src)), dtype=np.float32).reshape(src)
    want = InterpreterDevice().compile(m).run([x])
    got = _DEVICE.compile(m).run([x])
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w)), f"{src} -> {dst}"


def test_a_head_split_reads_without_division() -> None:
    """(8, 16, 96) -> (8, 16, 3, 4, 8) -> heads first: the operand's last index is
    (k * 4 + h) * 8 + d, computed with multiplies and adds, so its reads are runs of
    contiguous elements; the rule that linearized the whole index divided it back."""
    f = D.float32
    src, dst = (8, 16, 96), (8, 16, 3, 4, 8)
    ins = [I("parameter", (), src, f, {"number": 0}),
           I("reshape", (0,), dst, f, {"shape": dst}),
           I("transpose", (1,), (3, 8, 4, 16, 8), f, {"permutation": (2, 0, 3, 1, 4)}),
           I("exponential", (2,), (3, 8, 4, 16, 8), f, {})]
    text = _DEVICE.stage(Module("split", ins, [3]), "llvm")
    body = text.split("define", 1)[1]
    assert " udiv " not in body and " urem " not in body
