"""Every public op against NumPy, on every test device, through the one harness."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler import dtypes as D
from harness import check_case
from op_table import CASES, case_ids, covered_functions, covered_tensor_members


@pytest.mark.parametrize("case", CASES, ids=case_ids())
def test_op_matches_numpy(case, device):
    missing = case.missing()
    if missing:
        pytest.skip(f"{case.id}: {missing} (another engineer is writing it)")
    check_case(case, case.dtypes, device)


# Public functions that cannot be compared with NumPy value for value. Keep this short:
# every entry needs its reason.
NOT_COMPARABLE = {
}


def test_every_public_function_has_a_case():
    missing = sorted(set(la.ops.__all__) - covered_functions() - set(NOT_COMPARABLE))
    assert not missing, f"public functions without a case in tests/op_table.py: {missing}"


def test_table_names_are_public_functions():
    unknown = sorted(covered_functions() - set(la.ops.__all__))
    assert not unknown, f"op_table cases for names not in lazyarray.ops.__all__: {unknown}"


# Tensor members that are not ops over values: properties describing the tensor,
# materializers (tested in test_sync.py) and device moves (tested in test_interop.py).
TENSOR_NOT_OPS = {"shape", "dtype", "ndim", "size", "device", "is_materialized", "numpy",
                  "item", "tolist", "to", "cpu", "cuda"}
OPERATORS = {f"__{n}__" for n in (
    "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod pow rpow "
    "matmul rmatmul and rand or ror xor rxor lshift rlshift rshift rrshift eq ne lt le gt ge "
    "neg pos abs invert getitem setitem").split()}


def test_every_tensor_operator_and_method_has_a_case():
    public = {n for n in dir(la.Tensor) if not n.startswith("_")}
    wanted = (public | OPERATORS) - TENSOR_NOT_OPS
    missing = sorted(wanted - covered_tensor_members())
    assert not missing, f"Tensor members without a case in tests/op_table.py: {missing}"


def test_table_cases_are_well_formed():
    for case in CASES:
        assert case.dtypes, f"{case.id}: no dtypes"
        for shapes, kwargs in case.variants():
            assert isinstance(shapes, tuple) and isinstance(kwargs, dict), case.id
            if case.domains is not None:
                assert len(case.domains) == len(shapes), f"{case.id}: one domain per input"


def test_inputs_are_reusable_for_gradients():
    # the gradient checks draw float64 inputs from the same generators
    rng = np.random.default_rng(1)
    for case in CASES:
        if not case.differentiable or D.float64 not in case.dtypes:
            continue
        shapes, _ = case.variants()[0]
        for a in case.make_inputs(rng, D.float64, shapes):
            assert a.shape in [tuple(s) for s in shapes]


def test_harness_detects_a_wrong_reference(device):
    from harness import OpCase
    wrong = OpCase("exp", np.expm1, dtypes=(D.float32,), shapes=[((3,),)])
    with pytest.raises(AssertionError, match="values differ"):
        check_case(wrong, wrong.dtypes, device)


def test_harness_detects_a_wrong_dtype(device):
    from harness import OpCase
    wrong = OpCase("add", lambda a, b: np.add(a, b).astype(np.float64), dtypes=(D.float32,),
                   shapes=[((3,), (3,))])
    with pytest.raises(AssertionError, match="dtype float32, NumPy float64"):
        check_case(wrong, wrong.dtypes, device)
