"""The one compile entry point: `lazyarray.compiler.compile(module, target, donated)`
returns a Program that holds everything a device runs (code, steps, buffer plan, values),
survives a round trip through the disk cache's JSON, and runs the same after it."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lazyarray.compiler import Program, compile
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.hlo.module import Instruction as I
from lazyarray.compiler.hlo.module import Module
from lazyarray.compiler.primitives import linalg
from lazyarray.devices.cpu.cpu import CPUDevice, CPUExecutable
from lazyarray.devices.interpreter import InterpreterDevice


def _module() -> Module:
    """exp(x) @ w, its row sums and a sort: generated kernels, a library call (gemm) and
    a host call (sort) in one program."""
    return Module("mixed", [
        I("parameter", (), (4, 3), D.float32, {"number": 0}),
        I("parameter", (), (3, 5), D.float32, {"number": 1}),
        I("exponential", (0,), (4, 3), D.float32, {}),
        I("dot_general", (2, 1), (4, 5), D.float32,
          {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (), "rhs_batch": ()}),
        I("reduce", (3,), (4,), D.float32, {"axes": (1,), "kind": "sum"}),
        I("sort", (3,), (4, 5), D.float32, {"dimension": 1, "descending": False}),
    ], [4, 5])


def _args() -> list:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((4, 3)).astype(np.float32),
            rng.standard_normal((3, 5)).astype(np.float32)]


def _device() -> CPUDevice:
    return CPUDevice(lambda: {"cache_dir": "off", "num_threads": 1})


def test_cpu_program_round_trips_through_the_cache_format_and_runs(monkeypatch):
    # a library call even at this size (not a generated reduction: linalg.SMALL_PRODUCT)
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)
    program = compile(_module(), "cpu")
    assert isinstance(program, Program) and program.code
    calls = [s.call for s in program.steps if s.kind == "library"]
    assert sorted(calls) == ["gemm", "host"], program.steps
    meta, code = program.to_cache()
    again = Program.from_cache(json.loads(json.dumps(meta)), code)
    want = InterpreterDevice().compile(_module()).run(_args())
    for p in (program, again):
        got = CPUExecutable(p, _device()).run(_args())
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_an_older_program_layout_is_refused():
    meta, code = compile(_module(), "cpu").to_cache()
    meta["format"] = -1
    with pytest.raises(ValueError, match="format"):
        Program.from_cache(meta, code)


def _typed_modules() -> dict:
    """Modules whose programs hold every kind of step between them."""
    import lazyarray as la
    from lazyarray.compiler.graph.trace import capture
    rng = np.random.default_rng(1)
    x = la.asarray(rng.standard_normal((64, 64)).astype(np.float32))
    a = la.asarray((rng.standard_normal((8, 8)) + 8 * np.eye(8)).astype(np.float64))
    loop = la.fori_loop(0, 3, lambda i, c: c * 0.5 + 1.0, x)
    branch = la.cond(x.sum() > 0, lambda v: v + 1.0, lambda v: v - 1.0, x)
    return {"mixed": _module(),
            "reductions": capture([((x * 3) ** 2).mean()._node, x.max(axis=0)._node]).module(),
            "lapack": capture([la.linalg.cholesky(a @ a.T)._node]).module(),
            "control": capture([loop._node, branch._node]).module()}


@pytest.mark.parametrize("target", ["cpu", "sm_80"])
def test_a_program_round_trips_through_the_cache_exactly(target):
    """Every step kind is a typed step; the cache's JSON gives the same Program back
    (equal steps, of the same classes, and equal everything else)."""
    from lazyarray.compiler.program import STEP_TYPES, Step
    kinds = set()
    for name, module in _typed_modules().items():
        program = compile(module, target)
        meta, code = program.to_cache()
        again = Program.from_cache(json.loads(json.dumps(meta)), code)
        assert again == program, name
        assert [type(s) for s in again.steps] == [type(s) for s in program.steps]
        assert all(isinstance(s, Step) for s in program.steps)
        kinds |= {s.kind for s in program.steps}
    cpu_kinds, gpu_kinds = set(STEP_TYPES) - {"launch"}, {"launch", "library", "while",
                                                           "conditional"}
    assert kinds >= (cpu_kinds if target == "cpu" else gpu_kinds), kinds


def test_a_step_of_an_unknown_kind_is_refused():
    from lazyarray.compiler.program import step_from_data
    with pytest.raises(ValueError, match="unknown program step type 'jump'"):
        step_from_data({"type": "jump", "kernel": "k"})


def test_dump_texts_come_with_the_program_only_when_asked():
    assert compile(_module(), "cpu").dumps == {}
    texts = compile(_module(), "cpu", dumps=True).dumps
    assert {"optimized_hlo", "fusion", "dot", "llvm", "asm"} <= set(texts)
    assert "digraph" in texts["dot"] and "kernel " in texts["fusion"]


def test_nvptx_program_is_plain_data_with_launches():
    program = compile(_module(), "sm_80")
    json.dumps(program.to_cache()[0])          # every field is JSON
    launches = [s for s in program.steps if s.kind == "launch"]
    assert launches and all(len(s.grid) == len(s.block) == 3 for s in launches)
    assert b".entry" in program.code
    assert [s.call for s in program.steps if s.kind == "library"] == ["gemm", "host"]


def test_donation_reaches_the_buffer_plan():
    m = Module("upd", [I("parameter", (), (64,), D.float32, {"number": 0}),
                       I("parameter", (), (64,), D.float32, {"number": 1}),
                       I("subtract", (0, 1), (64,), D.float32, {})], [2])
    assert compile(m, "cpu").aliases == []
    program = compile(m, "cpu", frozenset({0}))
    assert program.donated == [0] and program.aliases == [[2, 0]]


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("what", ["mean_full", "sum_full", "mean_columns", "var_columns"])
def test_a_reduction_and_its_epilogue_are_one_kernel(what, threads):
    """mean(3*x**2 + y) is one kernel on the CPU, as sum(x + y*z) is: the chunks' partial
    results are combined and the epilogue (the division) applied in the same kernel."""
    import lazyarray as la
    from lazyarray.compiler.graph.trace import capture
    rng = np.random.default_rng(3)
    n = 1 << 17
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    m = rng.standard_normal((4096, 24)).astype(np.float32)
    builds = {"mean_full": (lambda: (3 * la.asarray(x) ** 2 + la.asarray(y)).mean(),
                            (3 * x.astype(np.float64) ** 2 + y).mean()),
              "sum_full": (lambda: (la.asarray(x) + la.asarray(y) * la.asarray(z)).sum(),
                           (x.astype(np.float64) + y * z).sum()),
              "mean_columns": (lambda: (la.asarray(m) * 2).mean(axis=0),
                               (m.astype(np.float64) * 2).mean(axis=0)),
              "var_columns": (lambda: (la.asarray(m) ** 2).mean(axis=0) - 1.5,
                              (m.astype(np.float64) ** 2).mean(axis=0) - 1.5)}
    build, want = builds[what]
    cap = capture([build()._node])
    exe = CPUDevice(lambda: {"cache_dir": "off", "num_threads": threads}).compile(cap.module("m"))
    assert exe.kernels_per_run == 1, exe.steps
    if threads > 1 and what.endswith("full"):
        assert len(exe._ranges(exe.steps[0])) > 1, "the reduction was not split"
    got = exe.run(cap.args)[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("what, layout, roots, late", [
    ("row", "row", 1, 1), ("column", "column", 1, 1), ("full_mean", "full", 1, 1),
    ("generic", "generic", 1, 1), ("argmax_columns", "column", 1, 1),
    ("layer_norm_stats", "row", 2, 2)])
def test_one_reduction_plan_for_both_targets(what, layout, roots, late):
    """The pipeline's reduction_planning step chooses each fused reduction's layout,
    roots and outputs; CPU and NVPTX code generation both follow it."""
    import lazyarray as la
    from lazyarray.compiler.passes.pipeline import PLAN_STEPS, compile_plan
    from lazyarray.compiler.planning.plan import REDUCTION
    from lazyarray.compiler.graph.trace import capture
    assert [s for s, _, _ in PLAN_STEPS] == ["fusion", "reduction_planning", "buffer_assignment"]
    x = la.asarray(np.random.default_rng(0).standard_normal((6, 5, 4)).astype(np.float32))
    graphs = {"row": lambda: [x.sum(axis=2)], "column": lambda: [x.max(axis=0)],
              "full_mean": lambda: [(x * 2).mean()], "generic": lambda: [x.sum(axis=(0, 2))],
              "argmax_columns": lambda: [x.argmax(axis=0)],
              "layer_norm_stats": lambda: [x.mean(axis=2), (x * x).mean(axis=2)]}
    outs = graphs[what]()
    cap = capture([t._node for t in outs])
    plan = compile_plan(cap.module(), row_kernels=False)
    (kern,) = [k for k in plan.kernels if k.kind == REDUCTION]
    rp = kern.reduction
    assert (rp.layout, len(rp.roots), len(rp.late)) == (layout, roots, late)
    assert rp.has_arg == what.startswith("argmax")
    for target in ("cpu", "sm_80"):
        program = compile(cap.module(), target)
        assert program.steps
    exe = CPUExecutable(compile(cap.module(), "cpu"), _device())
    got = exe.run(list(cap.args))
    for g, w in zip(got, InterpreterDevice().compile(cap.module()).run(list(cap.args))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


# ---- executors: one handler per step class -------------------------------------------------

def test_each_executor_has_one_handler_per_step_class():
    from lazyarray.devices.cpu import aot, native_program, run_plan
    from lazyarray.devices.cuda import cuda
    kinds = lambda table: {cls.kind for cls in table}      # noqa: E731
    assert kinds(cuda._RUN) == {"launch", "library", "while", "conditional"}
    # the CPU plans its steps (run_plan.py: a segment kind per step class) and runs the
    # plan in-process or as a C library: one binder, one writer per kind of segment
    segments = {run_plan.JobPlan, run_plan.CallPlan, run_plan.ControlPlan}
    assert set(native_program._BIND) == set(aot._SEGMENT_LINES) == segments


def type_switches(source: str) -> list:
    """Lines of `source` that read a step's kind by its string (`x["type"]`)."""
    import ast
    return [n.lineno for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
            and n.slice.value == "type"]


@pytest.mark.parametrize("module", ["lazyarray.devices.cpu.cpu", "lazyarray.devices.cpu.aot",
                                    "lazyarray.devices.cpu.native_program",
                                    "lazyarray.devices.cpu.native_control",
                                    "lazyarray.devices.cpu.product_groups",
                                    "lazyarray.devices.cuda.cuda",
                                    "lazyarray.devices.cuda.gpu_timer",
                                    "lazyarray.devices.stand_ins.cuda_host_kernels",
                                    "lazyarray.compiler.driver"])
def test_executors_do_not_switch_on_a_step_type_string(module):
    import importlib
    import pathlib
    path = pathlib.Path(importlib.import_module(module).__file__)
    assert type_switches(path.read_text()) == []


def test_the_switch_finder_finds_one():
    assert type_switches('if step["type"] == "loop":\n    pass\n') == [1]
