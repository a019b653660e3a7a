"""A primitive is complete or absent: every primitive in the registry has a reference, a
case in the primitive case table, a vector-Jacobian product (or says it has none) and a
way to be emitted as code."""
from __future__ import annotations

import re

import numpy as np

import pytest

from lazyarray.compiler import PRIMITIVES
from lazyarray.compiler import primitive as P

from primitive_cases import CASES, CASES_BY_PRIM, build_module, dtypes_for

NAMES = sorted(PRIMITIVES)
LEAVES_WITHOUT_REFERENCE = ("parameter", "constant")   # they hold data, compute nothing

# Primitives that need no code: leaves hold data, `tuple` is the module's root, and
# reduce_window is rewritten into slices and elementwise ops (the pass
# expand_convolution) before code generation.
NO_EMISSION_NEEDED = ("parameter", "constant", "tuple", "reduce_window")

# Primitives lacking a stanza `emit` (an index move's: its index rule) and a library
# call. Emptied when cumulative and scatter got their loops and sort/argsort their
# library call in their stanzas; keep it empty.
EMISSION_PENDING: tuple = ()


@pytest.mark.parametrize("name", NAMES)
def test_has_reference(name):
    prim = PRIMITIVES[name]
    if name in LEAVES_WITHOUT_REFERENCE:
        assert prim.kind == P.LEAF
        return
    assert callable(prim.reference), f"primitive {name!r} has no NumPy reference"


@pytest.mark.parametrize("name", NAMES)
def test_has_case(name):
    cases = CASES_BY_PRIM.get(name, [])
    assert cases, f"primitive {name!r} has no case in tests/primitive_cases.py"
    assert dtypes_for(name), f"no dtype runs primitive {name!r}'s cases"


@pytest.mark.parametrize("name", NAMES)
def test_has_vjp_or_says_not_differentiable(name):
    vjp = PRIMITIVES[name].vjp
    assert vjp is P.NOT_DIFFERENTIABLE or callable(vjp), \
        f"primitive {name!r} needs a vjp, or vjp=NOT_DIFFERENTIABLE (compiler/primitive.py)"


def _emission_params():
    out = []
    for name in NAMES:
        if name in EMISSION_PENDING:
            mark = pytest.mark.xfail(strict=True, reason="code generation for this primitive "
                                     "is not yet in its stanza (emit) or an index rule")
            out.append(pytest.param(name, marks=mark))
        else:
            out.append(name)
    return out


@pytest.mark.parametrize("name", _emission_params())
def test_has_emission(name):
    """Every primitive says in its stanza how it becomes code: elemental code or an index
    rule; an OPAQUE op its loops or a library call; a LIBRARY op its library call (or an
    expansion into other primitives before fusion)."""
    prim = PRIMITIVES[name]
    if name in NO_EMISSION_NEEDED:
        return
    if prim.kind == P.LIBRARY:
        assert prim.library is not None or callable(prim.expand), \
            f"library primitive {name!r} names no library call and no expansion"
        return
    if prim.kind == P.OPAQUE:
        assert callable(prim.emit) or prim.library is not None, \
            f"opaque primitive {name!r} has neither loops (emit) nor a library call"
        return
    if prim.kind == P.CONTROL:
        # a control step runs its sub-computations, each compiled as a program of its own
        # (compiler/codegen/control_steps.py); test_control_flow.py runs every form
        return
    assert callable(prim.emit), \
        f"primitive {name!r} ({prim.kind}) has no emit rule (an index move's: its index rule)"


def test_case_ids_are_unique_and_readable():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    unreadable = [i for i in ids if not re.fullmatch(r"[A-Za-z0-9_]+", i)]
    assert not unreadable, f"case ids must be words joined by '_': {unreadable}"


@pytest.mark.parametrize("name", NAMES)
def test_declared_dtypes_match_cases(name):
    """A primitive that declares its dtypes runs with exactly those in its cases."""
    declared = getattr(PRIMITIVES[name].infer, "dtypes", None)
    if declared is None:
        return
    covered = set()
    for case in CASES_BY_PRIM[name]:
        covered |= set(dtypes_for(case))
    missing = [d.short for d in declared if d not in covered]
    assert not missing, f"{name}: no case runs with {missing}"


def test_case_modules_use_the_primitive():
    for case in CASES:
        d = dtypes_for(case)[0]
        ops = {ins.op for ins in build_module(case, d).instructions}
        assert case.prim in ops or case.prim == "tuple", case.id


def test_reference_runs_every_case_on_valid_inputs():
    """Each case's inputs are valid for its primitive: the reference gives outputs of the
    declared shapes and dtypes, and finite values where the inputs are finite floats."""
    from primitive_cases import case_dtype_pairs, make_inputs, reference_outputs
    for case, dtype in case_dtype_pairs():
        module = build_module(case, dtype)
        inputs = make_inputs(case, dtype, seed=0)
        outs = reference_outputs(case, dtype, inputs)
        for pos, out in zip(module.outputs, outs):
            ins = module.instructions[pos]
            assert out.shape == ins.shape and out.dtype == ins.dtype.np, (case.id, dtype.short)
            if ins.dtype.is_float and case.prim not in ("bitcast_convert", "constant"):
                assert np.isfinite(out.astype(np.float64)).all(), (case.id, dtype.short)


@pytest.mark.parametrize("name", NAMES)
def test_reduction_names_its_axes(name):
    """Fusion asks a reduction which axes it combines through its stanza, never its name."""
    prim = PRIMITIVES[name]
    if prim.kind != P.REDUCTION or name == "reduce_window":   # rewritten before fusion
        assert prim.reduced_axes is None, f"{name!r} is no reduction but has reduced_axes"
        return
    case = CASES_BY_PRIM[name][0]
    module = build_module(case, dtypes_for(case)[0])
    ins = next(i for i in module.instructions if i.op == name)
    axes = prim.reduced_axes(ins.attrs)
    assert isinstance(axes, tuple) and all(0 <= a < len(module.instructions[ins.operands[0]].shape)
                                           for a in axes), (name, axes)


# Op names that only their stanzas may spell: the reductions (planned through `reducer`
# and `reduced_axes`) and the library/opaque ops (through `library` and `emit`).
STANZA_ONLY_NAMES = {"reduce", "argmax", "argmin", "dot_general", "sort", "argsort",
                     "cumulative", "scatter"}


def _files_that_must_not_switch_on_names() -> list:
    import pathlib
    root = pathlib.Path(__file__).resolve().parent.parent
    files = sorted((root / "compiler" / "codegen").glob("*.py")) + sorted((root / "devices").rglob("*.py"))
    return files + [root / "compiler" / "planning" / "fusion.py",
                    root / "compiler" / "planning" / "row_fusion.py"]


def name_checks(source: str) -> list:
    """(line, name) of every string constant in `source` that is one of those op names
    (docstrings and comments are free to mention them)."""
    import ast
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and node.value in STANZA_ONLY_NAMES]


def test_no_op_name_switches_on_reductions_and_library_ops():
    """Code generation, fusion and devices ask a primitive's stanza how it reduces, which
    library it calls or which loops it runs, never its name."""
    found = [f"{path.name}:{line} {name!r}" for path in _files_that_must_not_switch_on_names()
             for line, name in name_checks(path.read_text())]
    assert not found, "op-name checks outside the stanzas:\n  " + "\n  ".join(found)


def test_the_name_check_finds_a_switch():
    assert name_checks('if ins.op == "argmax":\n    pass\n') == [(1, "argmax")]
    assert name_checks('"""reduce things."""\nx = 1\n') == []
