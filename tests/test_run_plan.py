"""The CPU runtime's one plan (devices/cpu/run_plan.py): pure data computed from a
Program's steps alone. The plan an in-process NativeProgram binds equals the plan made
from the same Program read back from its cache form without loading it (what a C
library's driver is written from), round-trips through JSON, and names no address."""
from __future__ import annotations

import json

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.program import Program
from lazyarray.devices.cpu import run_plan

from native_training import made_programs, train_mlp


def _loop(x):
    w = la.asarray(np.eye(8, dtype=np.float32) * 0.5)
    return la.fori_loop(0, 5, lambda i, v: la.tanh(v @ w) + i * 0.25, x).sum()


def _walk(data):
    if isinstance(data, dict):
        for v in data.values():
            yield from _walk(v)
    elif isinstance(data, list):
        for v in data:
            yield from _walk(v)
    else:
        yield data


def _programs(monkeypatch) -> list:
    made = made_programs(monkeypatch)
    with la.config.override(num_threads=2):
        train_mlp((64, 48, 10), 32, 2)
        _loop(la.asarray(np.ones((4, 8), np.float32))).item()
    return made


def test_the_bound_plan_is_the_programs_own(monkeypatch) -> None:
    made = _programs(monkeypatch)
    kinds = set()
    for prog in made:
        exe = prog.exe
        again = Program.from_cache(*exe.program.to_cache())    # as the disk cache stores it
        spec = run_plan.plan(run_plan.ProgramView(again), prog.pool.threads)
        assert spec == prog.spec, exe.name
        data = spec.to_data()
        assert run_plan.ProgramPlan.from_data(json.loads(json.dumps(data))) == spec
        # no address: every number is an index, a size, a range or a start value
        assert all(not isinstance(v, int) or abs(v) < 1 << 40 for v in _walk(data))
        kinds |= {type(s).__name__ for s in spec.segments}
        kinds |= {"product" for s in spec.segments if isinstance(s, run_plan.JobPlan)
                  for t in s.tasks if t.product}
    assert {"JobPlan", "ControlPlan", "product"} <= kinds


def test_the_split_is_a_function_of_the_thread_count(monkeypatch) -> None:
    made = made_programs(monkeypatch)
    x = la.asarray(np.ones((1021, 300), np.float32))
    (la.tanh(x * 2.0 + 1.0).sum(axis=1) + la.exp(x).max()).numpy()
    view = run_plan.ProgramView(made[-1].exe.program)
    one, four = run_plan.plan(view, 1), run_plan.plan(view, 4)
    tasks = lambda spec: [t for s in spec.segments if isinstance(s, run_plan.JobPlan)
                          for t in s.tasks]
    assert all(len(t.ranges) == 1 for t in tasks(one) if t.product is None)
    assert [t.fn for t in tasks(one)] == [t.fn for t in tasks(four)]
    big = [t for t in tasks(four) if len(t.ranges) > 1]
    assert big, "nothing of the step was split on 4 threads"
    for t in big:          # chunks cover the range once, in order
        assert all(a[1] == b[0] for a, b in zip(t.ranges, t.ranges[1:]))


@pytest.mark.parametrize("extent,work,serial,threads,chunks", [
    (1000, 1, False, 4, 1),            # below SPLIT_ELEMENTS of work: whole
    (1 << 15, 1, False, 4, 4),         # one chunk per thread
    (1 << 21, 1, False, 4, 16),        # large: CHUNKS_PER_THREAD each
    (1 << 21, 1, True, 4, 1),          # a serial range is never split
    (1 << 21, 1, False, 1, 1),
])
def test_split_ranges(extent, work, serial, threads, chunks) -> None:
    ranges = run_plan.split_ranges(extent, work, serial, threads)
    assert len(ranges) == chunks and ranges[0][0] == 0 and ranges[-1][1] == extent
