"""Every public op against NumPy, on every test device, through the one harness."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from harness import check_case, plan
from harness import make_array as harness_make
from op_table import (CASES, RUNTIME_FUNCTIONS, case_ids, covered_functions,
                      covered_tensor_members)


@pytest.mark.parametrize("index, case", list(enumerate(CASES)), ids=case_ids())
def test_op_matches_numpy(index, case, device, op_matrix):
    missing = case.missing()
    assert not missing, f"{case.id}: {missing} is not implemented"
    check_case(case, case.dtypes, device, calls=plan(case, op_matrix(device), index))


# Public functions that cannot be compared with NumPy value for value. Keep this short:
# every entry needs its reason.
NOT_COMPARABLE = {
}


def test_every_public_function_has_a_case():
    public = set(la.ops.__all__) | set(RUNTIME_FUNCTIONS)
    assert all(callable(getattr(la, n)) for n in public)
    missing = sorted(public - covered_functions() - set(NOT_COMPARABLE))
    assert not missing, f"public functions without a case in tests/op_table.py: {missing}"


def test_table_names_are_public_functions():
    unknown = sorted(covered_functions() - set(la.ops.__all__) - set(RUNTIME_FUNCTIONS))
    assert not unknown, f"op_table cases for names not in lazyarray.ops.__all__: {unknown}"


# Public callables of `lazyarray` that are not ops over tensor values, each tested elsewhere.
NOT_OPS = {
    "asarray": "creation from data: test_interop.py",
    "tensor": "alias of asarray: test_interop.py",
    "from_dlpack": "DLPack import: test_interop.py",
    "can_cast": "dtype helper, no tensor result",
    "finfo": "dtype helper, no tensor result",
    "iinfo": "dtype helper, no tensor result",
    "isdtype": "dtype helper, no tensor result",
    "result_type": "dtype helper, no tensor result",
    "broadcast_shapes": "shape helper, no tensor result: test_array_api_namespace.py",
    "device": "devices by name: test_sync.py",
    "sync": "runtime: test_sync.py",
    "grad": "function transform: test_gradients.py",
    "value_and_grad": "function transform: test_gradients.py",
    "vmap": "function transform: test_vmap.py",
    "autocast": "mixed-precision context: test_autocast.py",
    "lift": "the mechanism that makes ops public (exported by accident?)",
    "cat": "PyTorch's name of concat: test_torch_surface.py",
    "concatenate": "NumPy's name of concat: test_torch_surface.py",
    "cumsum": "NumPy's and PyTorch's name of cumulative_sum: test_torch_surface.py",
    "from_numpy": "creation sharing a NumPy buffer: test_torch_surface.py",
    "is_grad_enabled": "grad mode: test_torch_idiom.py",
    "save": "pickling to a file: test_torch_surface.py",
    "load": "unpickling from a file: test_torch_surface.py",
    "manual_seed": "PyTorch's name of random.seed: test_torch_surface.py",
    "numel": "element count, an int: test_torch_surface.py",
    "rand": "la.random.rand: test_random.py",
    "randn": "la.random.randn: test_random.py",
    "randint": "la.random.randint: test_random.py",
    "randperm": "random permutation: test_torch_surface.py",
    "softmax": "ops.nn.softmax (la.nn.functional's cases): test_torch_surface.py",
    "log_softmax": "ops.nn.log_softmax (la.nn.functional's cases): test_torch_surface.py",
    "unsqueeze": "PyTorch's name of expand_dims: test_torch_surface.py",
    "permute": "PyTorch's name of permute_dims: test_torch_surface.py",
    "clamp": "PyTorch's name of clip: test_torch_surface.py",
    "flatten": "reshape over a range of dims: test_torch_surface.py",
    "inference_mode": "PyTorch's name of no_grad: test_torch_surface.py",
    "pad_to_bucket": "shape buckets (host padding before tracing): test_buckets.py",
    "bucket_size": "shape buckets, no tensor result: test_buckets.py",
    "cond": "control flow (function arguments): test_control_flow.py",
    "fori_loop": "control flow (function arguments): test_control_flow.py",
    "scan": "control flow (function arguments): test_control_flow.py",
    "while_loop": "control flow (function arguments): test_control_flow.py",
    "switch": "control flow (function arguments): test_control_flow.py",
}


def test_every_public_callable_is_in_the_table_or_named_here():
    import inspect
    public = {n for n in la.__all__ if callable(getattr(la, n, None))
              and not inspect.isclass(getattr(la, n)) and not inspect.ismodule(getattr(la, n))}
    missing = sorted(public - covered_functions() - set(NOT_OPS) - set(NOT_COMPARABLE))
    assert not missing, f"public functions of lazyarray without a case in tests/op_table.py: {missing}"


# Tensor members that are not ops over values: properties describing the tensor,
# materializers (tested in test_sync.py) and device moves (tested in test_interop.py).
TENSOR_NOT_OPS = {"shape", "dtype", "ndim", "size", "device", "is_materialized", "numpy",
                  "item", "tolist", "to", "to_device", "cpu", "cuda", "dim", "numel", "grad",
                  "requires_grad", "requires_grad_", "backward"}
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


# Mixed-dtype operands: (a, b, result). Within a kind the array API's table; across kinds what
# PyTorch and JAX do (an integer and a float give the float; uint64 with a signed int gives
# float64, as NumPy does).
MIXED = [(D.int8, D.int16, D.int16), (D.uint8, D.int8, D.int16), (D.uint16, D.int32, D.int32),
         (D.uint32, D.int32, D.int64), (D.uint64, D.int64, D.float64), (D.uint8, D.uint32, D.uint32),
         (D.int32, D.float32, D.float32), (D.int64, D.float16, D.float16),
         (D.float16, D.float32, D.float32), (D.float16, D.bfloat16, D.float32),
         (D.bfloat16, D.float64, D.float64), (D.bool_, D.int32, D.int32),
         (D.bool_, D.float16, D.float16), (D.uint8, D.float32, D.float32)]
MIXED_OPS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply,
             "maximum": np.maximum, "minimum": np.minimum, "less": np.less, "where": None}


def _mixed(op, a, b):
    return la.where(a > 0, a, b) if op == "where" else getattr(la, op)(a, b)


@pytest.mark.parametrize("op", sorted(MIXED_OPS))
def test_binary_promotion_of_mixed_dtypes(op, device):
    rng = np.random.default_rng(3)
    results = []
    for da, db, want in MIXED:
        if op == "subtract" and D.bool_ in (da, db):
            continue
        a = harness_make(rng, da, (2, 3))
        b = harness_make(rng, db, (3,))
        out = _mixed(op, la.asarray(a), la.asarray(b))
        results.append((da, db, want, a, b, out))
    la.sync(device)
    for da, db, want, a, b, out in results:
        expect_dtype = D.bool_ if op == "less" else want
        assert out.dtype is expect_dtype, f"{op}({da.name}, {db.name}) gave {out.dtype.name}"
        # the reference computes in the promoted dtype (unsigned results wrap around)
        work = np.float32 if want in (D.float16, D.bfloat16) else want.np
        wa, wb = a.astype(work), b.astype(work)
        ref = np.where(a > 0, wa, wb) if op == "where" else MIXED_OPS[op](wa, wb)
        ref = np.asarray(ref).astype(np.float64)
        got = out.numpy().astype(np.float64)
        rtol = 1e-2 if want in (D.float16, D.bfloat16) else 1e-6
        np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol,
                                   err_msg=f"{op}({da.name}, {db.name})")


@pytest.mark.parametrize("scalar, dtype, want", [
    (2, D.int8, D.int8), (2, D.uint8, D.uint8), (2.5, D.float16, D.float16),
    (2.5, D.bfloat16, D.bfloat16), (2.5, D.int32, D.float32), (True, D.int16, D.int16),
    (3, D.bool_, D.int64), (2.5, D.bool_, D.float32), (2, D.float64, D.float64)])
def test_python_scalars_are_weak(scalar, dtype, want, device):
    x = la.asarray(harness_make(np.random.default_rng(0), dtype, (3,)))
    assert (x + scalar).dtype is want
    assert (scalar * x).dtype is want


def test_harness_detects_a_sync_while_recording(device):
    from harness import OpCase

    def eager_exp(x):
        return la.asarray(np.exp((x + 0.0).numpy()))     # runs instead of recording

    eager = OpCase("exp", np.exp, fn=eager_exp, dtypes=(D.float32,), shapes=[((3,),)])
    with pytest.raises(AssertionError, match="ran a sync"):
        check_case(eager, eager.dtypes, device)


def test_harness_detects_a_clobbered_input(device):
    from harness import OpCase

    def clobbering_exp(x):
        out = la.exp(x)
        # what a wrongly donated buffer looks like: the input now reads other values
        x._node.buffer = x._state.device.put(np.zeros(x.shape, x.dtype.np))
        return out

    bad = OpCase("exp", np.exp, fn=clobbering_exp, dtypes=(D.float32,), shapes=[((3,),)],
                 domains=("positive",))
    with pytest.raises(AssertionError, match="input 0 changed"):
        check_case(bad, bad.dtypes, device)


@pytest.mark.parametrize("update, ref", [
    ("x += 2", lambda a: a + 2), ("x -= 1.5", lambda a: a - 1.5), ("x *= x", lambda a: a * a),
    ("x /= 4", lambda a: a / 4), ("x **= 2", lambda a: a ** 2), ("x //= 2", lambda a: a // 2),
    ("x %= 3", lambda a: a % 3), ("x @= y", lambda a: a @ np.eye(3, dtype=np.float32))])
def test_in_place_operators_rebind_to_a_new_lazy_value(update, ref, device):
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    x = la.asarray(a)
    y = la.eye(3)
    before = x
    alias = x + 0                                         # a value read before the update
    scope = {"x": x, "y": y}
    exec(update, scope)
    x = scope["x"]
    # in place, as in NumPy and PyTorch: the same tensor object now holds a new lazy value
    # (issue 13: `p -= lr * p.grad` over model.parameters() must update the parameters)
    assert x is before and not x.is_materialized
    np.testing.assert_allclose(x.numpy(), ref(a), rtol=1e-6)
    np.testing.assert_array_equal(alias.numpy(), a)       # values read earlier keep theirs
