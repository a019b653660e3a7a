"""Buffer assignment: temporaries reuse dead slots, outputs and parameters keep their own,
donation lets an output take a dead parameter's slot, and the peak is reported."""
from __future__ import annotations

import numpy as np

import lazyarray as la
from lazyarray.compiler.buffer_assignment import assign_buffers, value_bytes
from lazyarray.compiler.fusion import plan_fusion
from lazyarray.compiler.passes.pipeline import compile_plan, optimize
from lazyarray.compiler.trace import capture
from test_fusion import check_plan, run_plan


def _module(*tensors):
    cap = capture([t._node for t in tensors])
    return optimize(cap.module()), cap


def _chain(n: int = 4):
    """sort -> loop -> sort -> loop ...: every step a kernel whose input dies after it."""
    x = la.asarray(np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32))
    y = x
    for _ in range(n):
        y = la.sort(y * 2.0, axis=1)
    return y


def test_temporaries_reuse_dead_slots_and_results_stay_right():
    module, cap = _module(_chain())
    plan = plan_fusion(module)
    check_plan(plan)
    temps = [p for p, s in plan.buffers.slot_of.items()
             if plan.buffers.slot_kinds[s] == "temporary"]
    slots = {plan.buffers.slot_of[p] for p in temps}
    assert len(temps) >= 6 and len(slots) <= 3, (len(temps), slots)
    got = run_plan(plan, [np.asarray(a) for a in cap.args])[0]
    want = np.random.default_rng(0).standard_normal((32, 32)).astype(np.float32)
    for _ in range(4):
        want = np.sort(want * np.float32(2.0), axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_parameters_and_outputs_get_their_own_slots():
    module, _ = _module(_chain())
    plan = plan_fusion(module)
    b = plan.buffers
    out = module.outputs[0]
    owners = [p for p, s in b.slot_of.items() if s == b.slot_of[out]]
    assert owners == [out] and b.slot_kinds[b.slot_of[out]] == "output"
    for p in module.parameters:
        assert [q for q, s in b.slot_of.items() if s == b.slot_of[p]] == [p]
        assert b.slot_kinds[b.slot_of[p]] == "parameter"


def test_donated_parameter_slot_is_taken_by_an_output():
    x = la.asarray(np.ones((64,), np.float32))
    module, cap = _module(la.sort(x * 2.0, axis=0) + 1.0)
    plain = plan_fusion(module)
    donated = plan_fusion(module, donate_inputs=True)
    p = next(q for q in module.parameters if module.instructions[q].shape == (64,))
    x_slot = donated.buffers.slot_of[p]
    assert [q for q, s in donated.buffers.slot_of.items() if s == x_slot] != [p]
    assert len(donated.buffers.slot_bytes) < len(plain.buffers.slot_bytes)
    assert donated.buffers.donate_inputs and not plain.buffers.donate_inputs
    args = [np.asarray(a) for a in cap.args]
    np.testing.assert_array_equal(run_plan(donated, args)[0], run_plan(plain, args)[0])


def test_peak_bytes_counts_live_slots():
    x = la.asarray(np.ones((100,), np.float32))
    module, _ = _module(la.sort(x, axis=0) * 2.0)
    plan = compile_plan(module)
    b = plan.buffers
    # step 0: x, the sort result and the scalar 2.0; step 1: the sort result, the output
    # and the scalar (x is dead after step 0): both 2 * 400 + 4
    assert b.peak_bytes == 2 * 400 + 4
    assert b.peak_bytes >= max(value_bytes(module, p) for p in b.slot_of)
    assert b.peak_bytes <= sum(b.slot_bytes)


def test_assign_buffers_without_kernels():
    x = la.asarray(np.ones((3,), np.float32))
    module, _ = _module(x + 0)
    plan = plan_fusion(module)
    assert plan.kernels == []
    assert plan.buffers.slot_of == {0: 0} and plan.buffers.peak_bytes == 12
    assert assign_buffers(module, []).slot_bytes == [12]
