"""Buffer assignment: temporaries reuse dead slots, outputs and parameters keep their own,
donation lets an output take a dead parameter's slot, and the peak is reported."""
from __future__ import annotations

import numpy as np

import lazyarray as la
from lazyarray.compiler.planning.buffer_assignment import assign_buffers, value_bytes
from lazyarray.compiler.passes.pipeline import compile_plan, optimize
from lazyarray.compiler.graph.trace import capture
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
    plan = compile_plan(module, simplify=False)
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
    plan = compile_plan(module, simplify=False)
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
    plain = compile_plan(module, simplify=False)
    donated = compile_plan(module, simplify=False, donate_inputs=True)
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
    plan = compile_plan(module, simplify=False)
    assert plan.kernels == []
    assert plan.buffers.slot_of == {0: 0} and plan.buffers.peak_bytes == 12
    assert assign_buffers(module, []).slot_bytes == [12]


# ---- in place: an output of a LOOP kernel overwrites a donated input it reads --------------

def _update_module(fn, shape=(64, 32)):
    """The module of fn(w, g) over two fresh leaves, and its args."""
    rng = np.random.default_rng(3)
    w = la.asarray(rng.standard_normal(shape).astype(np.float32))
    g = la.asarray(rng.standard_normal(shape).astype(np.float32))
    outs = fn(w, g)
    module, cap = _module(*(outs if isinstance(outs, tuple) else (outs,)))
    return module, [np.asarray(a) for a in cap.args]


def _param(module, shape=(64, 32)):
    return [q for q in module.parameters if module.instructions[q].shape == shape]


def test_elementwise_update_overwrites_its_donated_input_in_place():
    module, args = _update_module(lambda w, g: w - 0.1 * g * w)
    donated = compile_plan(module, simplify=False, donate_inputs=True)
    plain = compile_plan(module, simplify=False)
    check_plan(donated)
    out = module.outputs[0]
    assert donated.buffers.aliases == {out: donated.buffers.aliases[out]}
    assert donated.buffers.aliases[out] in _param(module)
    assert donated.buffers.slot_of[out] == donated.buffers.slot_of[donated.buffers.aliases[out]]
    assert plain.buffers.aliases == {}
    # the parameter and its update are no longer both counted during the kernel
    assert donated.buffers.peak_bytes <= plain.buffers.peak_bytes - 64 * 32 * 4
    np.testing.assert_array_equal(run_plan(donated, args)[0], run_plan(plain, args)[0])


def test_one_input_slot_goes_to_one_output_of_the_same_dtype():
    module, args = _update_module(lambda w, g: (w * 0.5 + g, w - g, (w > g)))
    plan = compile_plan(module, simplify=False, donate_inputs=True)
    ins = module.instructions
    aliases = plan.buffers.aliases
    assert len(aliases) == 2                # two float32 inputs, two float32 outputs
    for o, x in aliases.items():
        assert ins[o].dtype == ins[x].dtype and ins[o].shape == ins[x].shape
    assert len({plan.buffers.slot_of[o] for o in module.outputs}) == 3
    want = run_plan(compile_plan(module, simplify=False), args)
    for a, b in zip(run_plan(plan, args), want):
        np.testing.assert_array_equal(a, b)


_MOVES = ("transpose", "reverse", "slice", "concatenate", "broadcast_in_dim", "pad", "gather")


def test_an_input_read_at_another_index_is_not_overwritten_in_place():
    """w reaches the update through an index-moving op in the same kernel: only g (read
    elementwise) may be overwritten; results stay those of the plan without donation."""
    cases = {
        "transpose": (lambda w, g: w - la.transpose(w) * g, (32, 32)),
        "reverse": (lambda w, g: w - la.flip(w, axis=0) * g, (64, 32)),
        "slice+concat": (lambda w, g: w + la.concat([w[1:], w[:1]], axis=0) * g, (64, 32)),
    }
    for name, (fn, shape) in cases.items():
        module, args = _update_module(fn, shape)
        ins = module.instructions
        plan = compile_plan(module, simplify=False, donate_inputs=True)
        moved = {x for i in ins if i.op in _MOVES for x in i.operands if x in module.parameters}
        assert moved, name
        assert plan.buffers.aliases, name                    # g is still updated in place
        assert not moved & set(plan.buffers.aliases.values()), (name, plan.buffers.aliases)
        only_w = {ins[x].attrs["number"] for x in moved}
        assert compile_plan(module, simplify=False, donate_inputs=only_w).buffers.aliases == {}, name
        np.testing.assert_array_equal(run_plan(plan, args)[0],
                                      run_plan(compile_plan(module, simplify=False), args)[0], err_msg=name)


def test_in_place_pairs_rejects_index_moving_and_reduction_kernels():
    from lazyarray.compiler.planning.buffer_assignment import _in_place_pairs
    from lazyarray.compiler.planning.plan import LOOP, REDUCTION, Kernel
    module, _ = _update_module(lambda w, g: w - la.transpose(w) * g, (32, 32))
    ins = module.instructions
    members = [p for p, i in enumerate(ins) if i.op not in ("parameter", "tuple")]
    out = module.outputs[0]
    params = set(module.parameters)
    last = {p: 0 for p in params}
    loop = Kernel("k", LOOP, members, [out], sorted(params))
    moved = {x for i in ins if i.op == "transpose" for x in i.operands}
    assert set(_in_place_pairs(module, loop, params, last, 0).values()) == params - moved
    assert _in_place_pairs(module, loop, moved, last, 0) == {}     # w alone: never in place
    reduction = Kernel("k", REDUCTION, members, [out], sorted(params))
    assert _in_place_pairs(module, reduction, params, last, 0) == {}
    assert _in_place_pairs(module, loop, params, {p: 1 for p in params}, 0) == {}  # read later


def test_a_parameter_that_is_a_module_output_is_never_overwritten():
    module, _ = _update_module(lambda w, g: (w * 2.0, w))
    plan = compile_plan(module, simplify=False, donate_inputs=True)
    assert plan.buffers.aliases == {} or all(
        x not in module.outputs for x in plan.buffers.aliases.values())
    w = module.outputs[1]
    assert w not in plan.buffers.aliases.values()
