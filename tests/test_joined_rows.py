"""A loop's two inner dimensions run as one loop where the last is narrow (at most
inner_rows.MAX_JOINED_ROW, a power of two) and every index move reads them as they are
(compiler/codegen/inner_rows.py: joinable, joined_loop): a batch norm's statistics over
NCHW planes carry their vector lanes across rows, one sum of lanes a plane instead of one
a row. Bit-equal to the interpreter (small integers: every float32 sum is exact) with
and without the joined loop, and the loop is joined exactly where it should be."""
from __future__ import annotations

import numpy as np
import pytest

from lazyarray.compiler.codegen import inner_rows
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.literal import Literal
from lazyarray.compiler.hlo.module import Instruction as I, Module
from lazyarray.devices.cpu.cpu import CPUDevice
from lazyarray.devices.interpreter import InterpreterDevice

_DEVICE = CPUDevice(lambda: {"cache_dir": "off", "num_threads": 2})
F = D.float32


def _statistics(shape: tuple) -> Module:
    """A batch norm's statistics over (N, H, W) of NCHW x, and x - mean * scale (a per-
    channel broadcast): sums over axes (0, 2, 3), one with a side output of x's shape."""
    n, c, h, w = shape
    ins = [I("parameter", (), shape, F, {"number": 0}),
           I("parameter", (), (c,), F, {"number": 1}),
           I("broadcast_in_dim", (1,), shape, F, {"shape": shape,
                                                  "broadcast_dimensions": (1,)}),
           I("multiply", (0, 2), shape, F, {}),
           I("reduce", (3,), (c,), F, {"axes": (0, 2, 3), "kind": "sum"}),
           I("multiply", (3, 0), shape, F, {}),
           I("reduce", (5,), (c,), F, {"axes": (0, 2, 3), "kind": "sum"})]
    return Module("statistics", ins, [3, 4, 6])


def _row_broadcast(shape: tuple) -> Module:
    """x plus a row broadcast along H (read at the last index only: not joined), and
    x transposed in its last two dimensions (not joined)."""
    n, c, h, w = shape
    ins = [I("parameter", (), shape, F, {"number": 0}),
           I("parameter", (), (w,), F, {"number": 1}),
           I("broadcast_in_dim", (1,), shape, F, {"shape": shape,
                                                  "broadcast_dimensions": (3,)}),
           I("add", (0, 2), shape, F, {}),
           I("reduce", (3,), (c,), F, {"axes": (0, 2, 3), "kind": "max"})]
    return Module("row_broadcast", ins, [3, 4])


def _padded_rows(shape: tuple) -> Module:
    """x padded by a row at the bottom (the pad computes its own row index: not joined),
    and x's rows reversed (not joined)."""
    n, c, h, w = shape
    zero = Literal(np.zeros((), np.float32))
    ins = [I("parameter", (), shape, F, {"number": 0}),
           I("constant", (), (), F, {"value": zero}),
           I("pad", (0, 1), (n, c, h + 1, w), F, {"edge_padding_low": (0, 0, 0, 0),
                                                  "edge_padding_high": (0, 0, 1, 0),
                                                  "interior_padding": (0, 0, 0, 0)}),
           I("reverse", (0,), shape, F, {"dimensions": (2,)}),
           I("negate", (3,), shape, F, {})]
    return Module("padded_rows", ins, [2, 4])


def _merged_channels(shape: tuple) -> Module:
    """(N, C, H, W) -> (N * C, H, W) plus a parameter of that shape (the reshape keeps
    the last two dimensions: joined), summed over its first axis."""
    n, c, h, w = shape
    flat = (n * c, h, w)
    ins = [I("parameter", (), shape, F, {"number": 0}),
           I("reshape", (0,), flat, F, {"shape": flat}),
           I("parameter", (), flat, F, {"number": 1}),
           I("add", (1, 2), flat, F, {}),
           I("reduce", (3,), (h, w), F, {"axes": (0,), "kind": "sum"})]
    return Module("merged_channels", ins, [3, 4])


BUILDERS = {"statistics": _statistics, "row broadcast": _row_broadcast,
            "padded rows": _padded_rows, "merged channels": _merged_channels}
SHAPES = [(2, 3, 8, 8), (3, 2, 5, 16), (2, 4, 32, 32), (1, 2, 7, 64), (2, 2, 4, 12),
          (2, 3, 3, 128), (1, 16, 2, 2)]


def _check(m: Module) -> None:
    rng = np.random.default_rng(len(m.instructions))
    args = [rng.integers(-10, 10, m.instructions[p].shape).astype(np.float32)
            for p in m.parameters]
    want = InterpreterDevice().compile(m).run(args)
    got = _DEVICE.compile(m).run(args)
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w)), m.name


@pytest.mark.parametrize("what", list(BUILDERS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("join", [True, False])
def test_joined_rows_match_the_interpreter(what: str, shape: tuple, join: bool,
                                           monkeypatch) -> None:
    if not join:
        monkeypatch.setattr(inner_rows, "joinable", lambda *a: False)
    _check(BUILDERS[what](shape))


@pytest.mark.parametrize("what,joined", [("statistics", True), ("merged channels", True),
                                         ("row broadcast", False), ("padded rows", False)])
def test_rows_join_where_every_read_keeps_them(what: str, joined: bool, monkeypatch) -> None:
    """(2, 4, 32, 32): the loops over x's shape run 32 x 32 as one loop where nothing
    reads a row or column index of its own; a row of the statistics' planes once was a
    loop of its own, its lanes summed at each row's end."""
    seen: list = []
    real = inner_rows.joined_loop

    def spy(e, rows, width, step, name):
        seen.append((rows, width))
        return real(e, rows, width, step, name)
    monkeypatch.setattr(inner_rows, "joined_loop", spy)
    _DEVICE.stage(BUILDERS[what]((2, 4, 32, 32)), "llvm")
    assert ((32, 32) in seen) == joined, seen


@pytest.mark.parametrize("rows,width,joins", [(32, 32, True), (8, 8, True), (2, 64, True),
                                              (5, 16, True), (1, 32, False), (4, 128, False),
                                              (4, 12, False), (4, 1, False)])
def test_which_rows_join(rows: int, width: int, joins: bool) -> None:
    assert inner_rows.joins(rows, width) == joins


# ---- phases woven into the last dimension: columns ----------------------------------

def _woven(shape: tuple) -> Module:
    """Four phases (N, C, m, k) woven into (N, C, 2m, 2k) (a strided convolution's input
    gradient: a stack along (2, 2) axes reshaped), times a parameter, and its sum over
    (N, H, W): the loop's last dimension runs as columns of 2."""
    n, c, m, k = shape
    stacked, woven = (n, c, m, 1, k, 1), (n, c, 2 * m, 2 * k)
    ins = [I("parameter", (), (n, c, m, k), F, {"number": p}) for p in range(4)]
    ins += [I("reshape", (p,), stacked, F, {"shape": stacked}) for p in range(4)]
    row = (n, c, m, 1, k, 2)
    ins += [I("concatenate", (4, 5), row, F, {"dimension": 5}),
            I("concatenate", (6, 7), row, F, {"dimension": 5})]
    ins += [I("concatenate", (8, 9), (n, c, m, 2, k, 2), F, {"dimension": 3}),
            I("reshape", (10,), woven, F, {"shape": woven}),
            I("parameter", (), woven, F, {"number": 4}),
            I("multiply", (11, 12), woven, F, {}),
            I("reduce", (13,), (c,), F, {"axes": (0, 2, 3), "kind": "sum"})]
    return Module("woven", ins, [13, 14])


@pytest.mark.parametrize("shape", [(2, 3, 16, 16), (1, 2, 5, 3), (2, 2, 8, 4)], ids=str)
@pytest.mark.parametrize("columns", [True, False])
def test_woven_phases_match_the_interpreter(shape: tuple, columns: bool, monkeypatch) -> None:
    if not columns:
        monkeypatch.setattr(inner_rows, "column_width", lambda *a: 1)
    _check(_woven(shape))


def test_woven_phases_are_read_with_vector_loads(monkeypatch) -> None:
    """Each column reads its phase at consecutive positions; one loop along the woven
    dimension selected among the phases at every element (gathers from each)."""
    m = _woven((4, 8, 32, 32))

    def gathers() -> int:
        return _DEVICE.stage(m, "llvm").count("masked.gather")
    with_columns = gathers()
    monkeypatch.setattr(inner_rows, "column_width", lambda *a: 1)
    assert with_columns == 0 < gathers()
