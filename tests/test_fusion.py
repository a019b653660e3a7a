"""Fusion: kernel counts of the workloads the issue names, the reasons given for every
edge not fused, the kernel contract code generation relies on, and a plan runner that
executes kernels through their buffer slots only (so a missing input or a slot reused
too early fails here, before any code generation).

`check_plan` and `run_plan` are shared with tests/test_random_graphs.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
import lazyarray.nn.functional as F
from lazyarray.compiler.planning.fusion import LONG_CHAIN, is_input, late_members, reduce_space
from lazyarray.compiler.hlo.graphviz import plan_dot
from lazyarray.compiler.passes.pipeline import compile_plan
from lazyarray.compiler.planning.plan import LIBRARY, LOOP, OPAQUE, REDUCTION, ROW
from lazyarray.compiler.planning.row_fusion import outer_shape, row_schedule
from lazyarray.compiler.primitive import ELEMENTWISE, INDEXING, PRIMITIVES
from lazyarray.compiler.graph.trace import capture
from lazyarray.devices.interpreter import InterpretedExecutable, evaluate


# ---- shared helpers -----------------------------------------------------------------------

def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def check_plan(plan) -> None:
    """Assert the contract of compiler/planning/fusion.py's docstring on every kernel."""
    m = plan.module
    ins = m.instructions
    done: set = {p for p, i in enumerate(ins) if is_input(i)}
    for k in plan.kernels:
        assert k.members == sorted(set(k.members)), k
        assert set(k.outputs) <= set(k.members) and k.outputs, k
        members = set(k.members)
        needed = {o for p in k.members for o in ins[p].operands if o not in members}
        assert needed == set(k.inputs), (k.name, needed, k.inputs)
        assert set(k.inputs) <= done, f"{k.name} reads a value no earlier kernel wrote"
        done |= set(k.outputs)
        kinds = {PRIMITIVES[ins[p].op].kind for p in k.members}
        if k.kind == LOOP:
            assert kinds <= {ELEMENTWISE, INDEXING, "leaf"}, (k.name, kinds)
            assert len({ins[o].shape for o in k.outputs}) == 1, k
        elif k.kind == REDUCTION:
            _check_reduction(m, k)
        elif k.kind == ROW:
            _check_row(m, k)
        else:
            assert len(k.members) == 1 and k.outputs == k.members, k
            want = "library" if k.kind == LIBRARY else "opaque"
            assert PRIMITIVES[ins[k.members[0]].op].kind == want
        for p in k.members:
            if ins[p].op == "constant":
                assert ins[p].shape == (), "only rank-0 constants may be members"
    for o in m.outputs:
        assert o in done, f"output {o} computed by no kernel"


def _check_reduction(m, k) -> None:
    ins = m.instructions
    reductions = [p for p in k.members if PRIMITIVES[ins[p].op].kind == "reduction"]
    assert reductions, k
    spaces = {reduce_space(ins[p], m) for p in reductions}
    assert len(spaces) == 1, (k.name, spaces)
    (shape, axes), = spaces
    count = _size(tuple(n for i, n in enumerate(shape) if i not in axes))
    assert k.epilogue == late_members(m, set(k.members), k.outputs)
    for p in k.epilogue:
        assert PRIMITIVES[ins[p].op].kind == ELEMENTWISE or ins[p].op == "reshape"
        assert _size(ins[p].shape) == count
    after = set(k.epilogue) | set(reductions)
    late = {ins[o].shape for o in k.outputs if o in k.epilogue}
    assert len(late) <= 1, (k.name, "epilogue outputs of different shapes", late)
    for o in k.outputs:
        assert (o in after and _size(ins[o].shape) == count) or ins[o].shape == shape, \
            (k.name, o, ins[o].shape)


def _check_row(m, k) -> None:
    ins = m.instructions
    first = next(p for p in k.members if ins[p].op == "reduce")
    space = reduce_space(ins[first], m)
    sched, why = row_schedule(m, set(k.members), space)
    assert sched is not None, (k.name, why)
    assert k.epilogue == []
    rows = _size(outer_shape(space))
    reductions = {p for p in k.members if PRIMITIVES[ins[p].op].kind == "reduction"}
    assert reductions == {p for phase in sched.phases for p in phase}, k.name
    for o in k.outputs:
        assert ins[o].shape == space[0] or _size(ins[o].shape) == rows, (k.name, o)


def run_plan(plan, args: list) -> list:
    """Run the kernels in order, each reading only its inputs' slots (checked to still hold
    that value) and writing its outputs' slots; members evaluated with the references."""
    m = plan.module
    ins = m.instructions
    slot_of = plan.buffers.slot_of
    slots: dict = {}
    number = {p: ins[p].attrs["number"] for p in m.parameters}
    for p, i in enumerate(ins):
        if p in slot_of and is_input(i):
            slots[slot_of[p]] = (p, evaluate(i, [], args[number[p]] if p in number else None))
    with np.errstate(all="ignore"):
        for k in plan.kernels:
            local: dict = {}
            for p in k.members:
                vals = [local[o] if o in local else _read(slots, slot_of, o)
                        for o in ins[p].operands]
                local[p] = evaluate(ins[p], vals)
            for o in k.outputs:
                slots[slot_of[o]] = (o, local[o])
    return [_read(slots, slot_of, o) for o in m.outputs]


def _read(slots: dict, slot_of: dict, pos: int) -> np.ndarray:
    held, value = slots[slot_of[pos]]
    assert held == pos, f"slot {slot_of[pos]} holds %{held}, expected %{pos}: reused too early"
    return value


def plan_of(*tensors):
    cap = capture([t._node for t in tensors])
    return compile_plan(cap.module(), verify=True), cap


def plan_without_rows(*tensors):
    """The plan of a target without ROW kernels (reductions and their users apart)."""
    cap = capture([t._node for t in tensors])
    return compile_plan(cap.module(), verify=True, row_kernels=False), cap


def counts(plan) -> dict:
    out = {LOOP: 0, REDUCTION: 0, ROW: 0, LIBRARY: 0, OPAQUE: 0}
    for k in plan.kernels:
        out[k.kind] += 1
    return out


def check_runs(plan, cap) -> None:
    """The plan, run kernel by kernel, equals the interpreter on the unoptimized module."""
    check_plan(plan)
    args = [np.asarray(a) for a in cap.args]
    want = InterpretedExecutable(cap.module()).run(args)
    for g, w in zip(run_plan(plan, args), want):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                   rtol=1e-5, atol=1e-6)


def _t(*shape, seed=0):
    return la.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


# ---- the kernel counts of issue 3 -----------------------------------------------------------

def test_sum_of_fused_elementwise_is_one_kernel():
    x, y, z = _t(64, 32), _t(64, 32, seed=1), _t(64, 32, seed=2)
    plan, cap = plan_of(la.sum(x + y * z))
    assert [k.kind for k in plan.kernels] == [REDUCTION]
    check_runs(plan, cap)


def test_mean_is_one_kernel_with_an_epilogue():
    x, y = _t(64, 32), _t(64, 32, seed=1)
    plan, cap = plan_of(la.mean(3 * x ** 2 + y))
    assert [k.kind for k in plan.kernels] == [REDUCTION]
    assert [plan.module.instructions[p].op for p in plan.kernels[0].epilogue] == ["divide"]
    check_runs(plan, cap)


def test_an_epilogues_sibling_that_reads_no_reduction_is_written_at_the_reduced_index():
    """`where(m, 0, sum(a, -1))` and `m * 2.0` share m and fuse as siblings, then join the
    reduction as its epilogue: `m * 2.0` (shape R, not S) was stored as a side output at
    S's indices, 3x past its buffer (heap corruption, issue 33)."""
    a = _t(4, 3)
    m = la.asarray(np.array([True, False, True, False]))
    w, l2 = la.where(m, 0.0, a.sum(axis=-1)), m * 2.0
    plan, cap = plan_of(w, l2)
    reductions = [k for k in plan.kernels if k.kind == REDUCTION]
    assert len(reductions) == 1
    k = reductions[0]
    assert set(k.outputs) <= set(k.epilogue), (k.outputs, k.epilogue)
    assert k.reduction.side == ()
    check_runs(plan, cap)


def _softmax(x):
    e = la.exp(x - la.max(x, axis=1, keepdims=True))
    return e / la.sum(e, axis=1, keepdims=True)


@pytest.mark.parametrize("softmax", [_softmax, lambda x: F.softmax(x, axis=-1)],
                         ids=["by-hand", "nn.functional"])
def test_softmax_is_one_row_kernel_of_two_phases(softmax):
    plan, cap = plan_of(softmax(_t(16, 40)))
    assert [k.kind for k in plan.kernels] == [ROW]
    sched, _ = row_schedule(plan.module, set(plan.kernels[0].members),
                            ((16, 40), (1,)))
    assert [[plan.module.instructions[p].attrs["kind"] for p in ph] for ph in sched.phases] \
        == [["max"], ["sum"]]
    check_runs(plan, cap)


@pytest.mark.parametrize("softmax", [_softmax, lambda x: F.softmax(x, axis=-1)],
                         ids=["by-hand", "nn.functional"])
def test_softmax_without_row_kernels_is_at_most_three_kernels(softmax):
    plan, cap = plan_without_rows(softmax(_t(16, 40)))
    assert len(plan.kernels) <= 3
    exps = [k for k in plan.kernels for p in k.members
            if plan.module.instructions[p].op == "exponential"]
    assert len(exps) == 1, "the exponential must be computed once, not per consumer"
    assert any("producer is a reduction feeding a broadcast" in r
               for k in plan.kernels for r in k.reasons)
    check_runs(plan, cap)


def test_layer_norm_is_one_row_kernel():
    x = _t(16, 40)
    mean = la.mean(x, axis=1, keepdims=True)
    var = la.mean(x * x, axis=1, keepdims=True) - mean * mean
    y = (x - mean) / la.sqrt(var + 1e-5)
    plan, cap = plan_of(y)
    assert [k.kind for k in plan.kernels] == [ROW]
    assert any("siblings" in d for d in plan.decisions)
    check_runs(plan, cap)
    plan, cap = plan_without_rows(y)
    assert len(plan.kernels) <= 2
    check_runs(plan, cap)


def test_nn_layer_norm_fuses_and_runs():
    # the shifted one-pass variance makes both means siblings over x: one phase
    x, w = _t(16, 40), _t(40, seed=3)
    plan, cap = plan_of(F.layer_norm(x, (40,), w, w))
    assert [k.kind for k in plan.kernels] == [ROW]
    sched, _ = row_schedule(plan.module, set(plan.kernels[0].members), ((16, 40), (1,)))
    assert len(sched.phases) == 1 and len(sched.phases[0]) == 2
    check_runs(plan, cap)


def test_log_softmax_and_cross_entropy_take_fewer_kernels():
    x = _t(16, 40)
    labels = la.asarray(np.arange(16) % 40)
    plan, cap = plan_of(F.log_softmax(x, axis=-1))
    assert [k.kind for k in plan.kernels] == [ROW]
    check_runs(plan, cap)
    plan, cap = plan_of(F.cross_entropy(x, labels))
    # the per-row losses in one ROW kernel; their mean over rows is a reduction apart
    assert [k.kind for k in plan.kernels] == [ROW, REDUCTION]
    check_runs(plan, cap)


def test_row_kernels_refuse_what_needs_other_rows():
    x = _t(16, 40)
    m = la.max(x, axis=1, keepdims=True)
    # the flipped maxima read another row's result: the consumer stays apart, with a reason
    plan, cap = plan_of(x - la.flip(m, axis=0))
    assert len(plan.kernels) == 2
    assert any("other rows" in r for k in plan.kernels for r in k.reasons)
    check_runs(plan, cap)
    # a reduction over leading axes is no row kernel
    plan, cap = plan_of(x / la.sum(x, axis=0, keepdims=True))
    assert ROW not in [k.kind for k in plan.kernels]
    check_runs(plan, cap)


def test_rows_too_long_for_cache_keep_separate_kernels():
    x = _t(2, 20000)
    plan, cap = plan_of(_softmax(x))
    assert ROW not in [k.kind for k in plan.kernels]
    assert any("too long" in d for d in plan.decisions)
    check_runs(plan, cap)


def test_mlp_forward_is_two_library_calls_and_two_fused_kernels():
    x, w1, b1 = _t(8, 16), _t(16, 32, seed=1), _t(32, seed=2)
    w2, b2 = _t(32, 4, seed=3), _t(4, seed=4)
    plan, cap = plan_of(la.relu(x @ w1 + b1) @ w2 + b2)
    c = counts(plan)
    assert c[LIBRARY] == 2 and c[LOOP] + c[REDUCTION] <= 2, c
    check_runs(plan, cap)


# ---- decisions ------------------------------------------------------------------------------

def test_every_unfused_edge_has_a_reason():
    x = _t(16, 40)
    plan, _ = plan_of(F.log_softmax(x, axis=-1), la.sort(x, axis=1))
    for k in plan.kernels:
        producers = [o for o in k.inputs if not is_input(plan.module.instructions[o])]
        assert len(k.reasons) == len(producers), k
        assert all(r.startswith("not fused: ") for r in k.reasons)
        assert all(r in plan.decisions for r in k.reasons)


def test_cheap_producers_are_duplicated_transcendentals_are_not():
    x = _t(16, 40)
    cheap = x * 2 + 1
    plan, cap = plan_of(la.sum(cheap, axis=0), la.sum(cheap, axis=1))
    assert len(plan.kernels) == 2 and all(k.kind == REDUCTION for k in plan.kernels)
    check_runs(plan, cap)
    costly = la.exp(x)
    plan, cap = plan_of(la.sum(costly, axis=0), la.sum(costly, axis=1))
    holders = [k for k in plan.kernels for p in k.members
               if plan.module.instructions[p].op == "exponential"]
    assert len(holders) == 1
    assert any("transcendental" in d for d in plan.decisions)
    check_runs(plan, cap)


# ---- fusion never multiplies expensive work (issue 8, point 7) -------------------------------

def _inlined_work(ins, members: set) -> dict:
    """Ops an evaluation of each member costs inside its kernel (tree size, capped)."""
    work: dict = {}
    for p in sorted(members):
        work[p] = min(LONG_CHAIN, 1 + sum(work.get(o, 0) for o in ins[p].operands))
    return work


def _not_cheap(ins, members: set) -> set:
    work = _inlined_work(ins, members)
    costly: set = set()
    for p in sorted(members):
        if PRIMITIVES[ins[p].op].costly or any(o in costly for o in ins[p].operands) \
                or work[p] >= LONG_CHAIN:
            costly.add(p)
    return costly


def evaluations_per_element(plan, kern) -> dict:
    """member -> how many times the kernel computes each element of it: the number of
    distinct chains of index-moving ops between it and the kernel's outputs (elementwise
    users at one index share one evaluation, and so does a reduction, whose loop passes
    over its operand's indices), with an expanding broadcast counting as many as it
    repeats each element."""
    ins = plan.module.instructions
    members = set(kern.members)
    paths: dict = {p: ({()} if p in kern.outputs else set()) for p in members}
    repeat: dict = {p: 1 for p in members}
    for u in sorted(members, reverse=True):
        for o in set(ins[u].operands) & members:
            if PRIMITIVES[ins[u].op].kind in (ELEMENTWISE, "reduction"):
                paths[o] |= paths[u]
            else:
                paths[o] |= {path + (u,) for path in paths[u]}
            grow = _size(ins[u].shape) // max(1, _size(ins[o].shape)) \
                if ins[u].op == "broadcast_in_dim" else 1
            repeat[o] = max(repeat[o], repeat[u] * grow)
    return {p: len(paths[p]) * repeat[p] for p in members}


def assert_no_repeated_expensive_work(plan) -> None:
    for k in plan.kernels:
        if k.kind not in (LOOP, REDUCTION):
            continue
        ins = plan.module.instructions
        counts = evaluations_per_element(plan, k)
        repeated = {f"%{ins[p].op}.{p}": counts[p] for p in _not_cheap(ins, set(k.members))
                    if counts[p] > 1}
        assert not repeated, f"{k.name} computes expensive values more than once per element: {repeated}"


def _cnn_training_graph():
    """One SGD step of conv -> batch norm -> ReLU -> max-pool -> linear -> cross-entropy."""
    nn = la.nn
    model = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4),
                          nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 2 * 2, 3))
    x = _t(2, 2, 8, 8, seed=5)
    y = la.asarray(np.array([0, 2]))
    params = model.parameters()
    with la.GradientTape() as tape:
        loss = F.cross_entropy(model(x), y)
    grads = tape.gradient(loss, params)
    return [loss] + [p - 0.01 * g for p, g in zip(params, grads)]


@pytest.mark.parametrize("what", ["cnn_step", "softmax", "layer_norm", "tanh_users"])
def test_no_kernel_computes_expensive_work_twice_per_element(what):
    x = _t(6, 40)
    graphs = {
        "cnn_step": _cnn_training_graph,
        "softmax": lambda: [F.softmax(x, axis=-1)],
        "layer_norm": lambda: [F.layer_norm(x, (40,))],
        "tanh_users": lambda: [la.tanh(x) * la.tanh(x)[:, ::-1], la.tanh(x).sum(axis=0)],
    }
    for row_kernels in (True, False):
        cap = capture([t._node for t in graphs[what]()])
        plan = compile_plan(cap.module(), verify=True, row_kernels=row_kernels)
        assert_no_repeated_expensive_work(plan)
        check_runs(plan, cap)


def test_the_work_count_sees_a_chain_read_by_nine_taps():
    """A long chain read by 9 shifted slices (a 3x3 convolution's taps): fusion computes
    it once; fused whole into one kernel, the count says 9 evaluations per element."""
    from lazyarray.compiler.passes.pipeline import optimize
    from lazyarray.compiler.planning.plan import Kernel
    chain = _t(1, 1, 6, 6)
    for k in range(LONG_CHAIN + 2):
        chain = chain * 1.5 + float(k + 1)
    taps = [chain[:, :, i:i + 4, j:j + 4] for i in range(3) for j in range(3)]
    total = taps[0]
    for t in taps[1:]:
        total = total + t
    module = optimize(capture([total._node]).module())
    plan = compile_plan(module, simplify=False)
    assert_no_repeated_expensive_work(plan)
    assert any("users: computed once" in d for d in plan.decisions), plan.decisions
    ins = module.instructions
    everything = sorted(p for p, i in enumerate(ins) if not is_input(i) and i.op != "tuple")
    whole = Kernel("all", LOOP, everything, list(module.outputs), [])
    counts = evaluations_per_element(plan, whole)
    assert max(counts[p] for p in _not_cheap(ins, set(everything))) == 9


def test_opaque_and_library_ops_read_buffers():
    x = _t(8, 8)
    plan, cap = plan_of(la.sort(x * 2, axis=1) + 1)
    kinds = [k.kind for k in plan.kernels]
    assert kinds == [LOOP, OPAQUE, LOOP]
    assert "consumer is an opaque op" in plan.kernels[0 + 1].reasons[0]
    check_runs(plan, cap)


def test_iota_and_indexing_fuse_into_consumers():
    x = _t(8, 8)
    y = la.flip(x, axis=0)[:, 2:6] + la.arange(4, dtype=la.float32)
    plan, cap = plan_of(la.concat([y, y * 2], axis=0))
    assert [k.kind for k in plan.kernels] == [LOOP]
    check_runs(plan, cap)


def test_dot_text_has_a_cluster_per_kernel():
    plan, _ = plan_without_rows(_softmax(_t(4, 8)))
    text = plan_dot(plan)
    assert text.startswith("digraph") and text.rstrip().endswith("}")
    assert text.count("subgraph cluster_") == len(plan.kernels)
    assert "reduction feeding a broadcast" in text


def test_a_value_read_twice_by_one_op_has_one_user():
    """`m + m` reads m once at each index: a long chain used so is not materialized as a
    value with two users, and fuses into the consumer that reads the sum elsewhere (the
    pad of a BatchNorm's input gradient that its convolution reads)."""
    chain = _t(4, 8)
    for k in range(LONG_CHAIN + 2):
        chain = chain * 1.5 + float(k + 1)
    plan, cap = plan_of(la.flip(chain + chain, axis=1))
    assert counts(plan)[LOOP] == 1, plan.decisions
    check_runs(plan, cap)
