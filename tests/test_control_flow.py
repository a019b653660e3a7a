"""la.cond, la.fori_loop, la.scan, la.while_loop with JAX's meanings: values against
NumPy, gradients through scan and fori_loop against finite differences (float64), and
compiled control flow: each records one HLO while/conditional (sub-computations in the
module), a data-dependent while_loop compiles once for every input, and the compiled
results equal the reference interpreter's."""
import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime
from gradcheck import check_direction
from lazyarray.compiler.hlo.parser import parse_module


def test_cond_with_a_tensor_predicate_selects_and_differentiates():
    x = np.array([1.0, -2.0, 3.0])
    for flag in (True, False):
        got = la.cond(la.asarray(flag), lambda a: a * 2.0, lambda a: la.exp(a), la.asarray(x))
        np.testing.assert_allclose(got.numpy(), x * 2 if flag else np.exp(x), rtol=1e-6)
    assert la.cond(False, lambda: 1, lambda: 2) == 2          # a Python bool picks a branch
    check_direction(lambda a: la.cond(a.sum() > 0, lambda v: v * v, lambda v: -v, a),
                    [x])
    with pytest.raises(TypeError, match=r"cond: the branches' results differ at leaf 0"):
        la.cond(la.asarray(True), lambda: la.ones(3), lambda: la.ones(4))


def test_fori_loop_matches_numpy_and_differentiates():
    x = np.linspace(-1, 1, 5)

    def f(a):
        return la.fori_loop(1, 5, lambda i, v: v * 0.5 + la.sin(v) * i, a)
    want = x.copy()
    for i in range(1, 5):
        want = want * 0.5 + np.sin(want) * i
    np.testing.assert_allclose(f(la.asarray(x)).numpy(), want, rtol=1e-10)
    check_direction(f, [x])


def _rnn(h0, xs, w):
    def step(h, x):
        h = la.tanh(h @ w + x)
        return h, h.sum()
    return la.scan(step, h0, xs)


def test_scan_matches_numpy_stacks_ys_and_differentiates():
    rng = np.random.default_rng(0)
    h0, xs, w = rng.standard_normal(4), rng.standard_normal((6, 4)), rng.standard_normal((4, 4)) * 0.5
    h, ys = _rnn(la.asarray(h0), la.asarray(xs), la.asarray(w))
    hn, want = h0, []
    for x in xs:
        hn = np.tanh(hn @ w + x)
        want.append(hn.sum())
    np.testing.assert_allclose(h.numpy(), hn, rtol=1e-10)
    np.testing.assert_allclose(ys.numpy(), want, rtol=1e-10)
    check_direction(lambda a, b, c: _rnn(a, b, c)[0], [h0, xs, w])
    check_direction(lambda a, b, c: _rnn(a, b, c)[1], [h0, xs, w])
    carry, rev = la.scan(lambda c, x: (c + x, c), la.asarray(0.0), la.asarray([1.0, 2.0, 3.0]),
                         reverse=True)
    assert carry.item() == 6.0 and rev.numpy().tolist() == [5.0, 3.0, 0.0]


def test_scan_over_a_pytree():
    xs = {"a": la.asarray(np.arange(3.0, dtype=np.float32)), "b": la.asarray(np.ones((3, 2)))}
    carry, ys = la.scan(lambda c, x: ((c[0] + x["a"], c[1] * 2), {"s": x["b"].sum()}),
                        (la.asarray(0.0), la.asarray(1.0)), xs)
    assert carry[0].item() == 3.0 and carry[1].item() == 8.0
    assert ys["s"].numpy().tolist() == [2.0, 2.0, 2.0]


def test_while_loop_runs_until_the_condition_and_compiles_once():
    x = la.asarray(np.array([1.0, 3.0], np.float32))
    la.sync()
    before = la.debug.metrics().cache_misses
    count, val = la.while_loop(lambda s: s[1].sum() < 1000.0,
                               lambda s: (s[0] + 1, s[1] * 1.5 + 1.0),
                               (la.asarray(np.int64(0)), x))
    want_n, want = 0, np.array([1.0, 3.0], np.float32)
    while want.sum() < 1000:
        want_n, want = want_n + 1, want * np.float32(1.5) + np.float32(1.0)
    assert count.item() == want_n and want_n > 5
    np.testing.assert_allclose(val.numpy(), want, rtol=1e-6)
    # one HLO while: one program, whatever the trip count
    assert la.debug.metrics().cache_misses - before == 1


def test_bad_state_is_an_error_naming_the_op():
    with pytest.raises(TypeError, match="fori_loop: body_fun's result and its input state differ"):
        la.fori_loop(0, 2, lambda i, v: la.ones(3), la.ones(2))
    with pytest.raises(ValueError, match="scan: give xs or length"):
        la.scan(lambda c, x: (c, c), la.ones(2))


# ---- compiled control flow -----------------------------------------------------------------

def _collatz_steps(n: int) -> int:
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def _la_collatz(n):
    def body(s):
        k, steps = s
        return la.where(k % 2 == 0, k // 2, 3 * k + 1), steps + 1
    return la.while_loop(lambda s: s[0] != 1, body, (n, la.asarray(np.int64(0))))[1]


@pytest.mark.parametrize("where", ["cpu", "interpreter"])
def test_a_data_dependent_while_loop_compiles_once_for_every_input(where):
    """The trip count is read from data at run time, inside the program: several inputs
    with different trip counts run the one compiled program and give Python's answer."""
    runtime.clear_caches()
    with la.config.override(cache_dir="off", device=where):
        la.sync()
        before = la.debug.metrics().cache_misses
        for n in (1, 6, 27, 97):
            got = _la_collatz(la.asarray(np.int64(n))).item()
            assert got == _collatz_steps(n)
        compiles = la.debug.metrics().cache_misses - before
    assert compiles == 1


def test_fori_loop_bounds_are_runtime_values_one_program_for_any_trip_count():
    w = np.array([[0.5, 0.1], [-0.2, 0.9]])
    x = np.array([1.0, 2.0])
    runtime.clear_caches()
    with la.config.override(cache_dir="off"):
        wt, xt = la.asarray(w), la.asarray(x)
        la.sync()
        before = la.debug.metrics().cache_misses
        for lo, hi in ((0, 2), (3, 10), (5, 5), (7, 2)):
            got = la.fori_loop(lo, hi, lambda i, v: wt @ v + i, xt).numpy()
            want = x
            for i in range(lo, hi):
                want = w @ want + i
            np.testing.assert_allclose(got, want, rtol=1e-12)
        assert la.debug.metrics().cache_misses - before == 1


def _hlo(t) -> str:
    return la.debug.ir(t, "hlo")


def test_each_form_records_one_hlo_op_with_sub_computations_that_round_trip():
    x = la.asarray(np.arange(3.0))
    forms = {
        "while": la.while_loop(lambda v: v.sum() < 50.0, lambda v: v * 2.0 + 1.0, x),
        "fori": la.fori_loop(0, 4, lambda i, v: v + i, x),
        "scan": la.scan(lambda c, r: (c + r, c * r), la.asarray(np.float64(0)), x)[1],
        "cond": la.cond(x.sum() > 1.0, lambda v: v * 3.0, lambda v: v - 1.0, x),
    }
    for name, t in forms.items():
        text = _hlo(t)
        op = "conditional(" if name == "cond" else "while("
        assert text.count(op) == 1, (name, text)
        assert "get_tuple_element(" in text
        module = parse_module(text)
        assert str(module) == text          # printer and parser round-trip, blocks included
    assert "%branch" in _hlo(forms["cond"]) and "%body" in _hlo(forms["while"])


def test_nested_loops_and_branches_match_the_interpreter():
    """A while inside a scan's body with a cond inside it: compiled on the CPU and run by
    the reference interpreter, against NumPy."""
    def f(device):
        xs = la.asarray(np.array([0.5, 3.0, 7.0, 1.5]), device=device)

        def step(c, x):
            grown = la.while_loop(lambda v: v < 10.0 * x, lambda v: v * 1.5 + 0.25, x)
            y = la.cond(grown > 20.0, lambda g: g - 20.0, lambda g: -g, grown)
            return c + y, y
        return la.scan(step, la.asarray(np.float64(0), device=device), xs)

    def numpy_f():
        c, ys = 0.0, []
        for x in [0.5, 3.0, 7.0, 1.5]:
            v = x
            while v < 10.0 * x:
                v = v * 1.5 + 0.25
            y = v - 20.0 if v > 20.0 else -v
            c, ys = c + y, ys + [y]
        return c, ys
    want_c, want_ys = numpy_f()
    for device in ("cpu", "interpreter"):
        c, ys = f(device)
        np.testing.assert_allclose(c.item(), want_c, rtol=1e-12)
        np.testing.assert_allclose(ys.numpy(), want_ys, rtol=1e-12)


def test_cond_runs_only_the_branch_taken():
    """A conditional, not a select: the branch not taken is not computed (its NaNs and
    its integer division by zero never happen), and the result is the taken branch's."""
    x = la.asarray(np.array([4, 8], np.int32))
    zero = la.asarray(np.int32(0))
    got = la.cond(zero == 0, lambda v, z: v + 1, lambda v, z: v // z, x, zero)
    assert got.numpy().tolist() == [5, 9]
    idx = la.asarray(np.int32(7))         # clamped to the last branch, as lax.switch does
    got = la.switch(idx, [lambda v: v, lambda v: v * 2, lambda v: v * 3], x)
    assert got.numpy().tolist() == [12, 24]


def test_gradients_through_fori_loop_reach_captured_weights():
    """A captured weight matrix is an operand of the while: its gradient accumulates over
    the steps of the reverse loop."""
    rng = np.random.default_rng(3)
    w0, h0 = rng.standard_normal((3, 3)) * 0.4, rng.standard_normal(3)

    def f(w, h):
        return la.fori_loop(0, 5, lambda i, v: la.tanh(w @ v) + 0.1 * i, h)
    check_direction(f, [w0, h0])


def test_the_compiled_program_round_trips_through_the_disk_cache(tmp_path):
    """The Program, with its sub-programs inside its control step, is stored and loaded
    back by a fresh device, and runs the same."""
    from lazyarray.devices.cpu.cpu import CPUDevice
    y = la.while_loop(lambda v: v.sum() < 100.0, lambda v: v * 2.0,
                      la.asarray(np.array([1.0, 2.0, 3.0])))
    module = parse_module(_hlo(y))
    results = []
    for _ in range(2):
        device = CPUDevice(lambda: {"cache_dir": str(tmp_path), "num_threads": 1})
        exe = device.compile(module)
        results.append((exe.from_disk_cache, exe.run([2.0, 100.0, np.array([1.0, 2.0, 3.0])])))
    assert [hit for hit, _ in results] == [False, True]
    for _, out in results:
        assert np.asarray(out[0]).tolist() == [32.0, 64.0, 96.0]


def test_the_fallback_traces_into_the_graph_with_the_same_results():
    x = la.asarray(np.array([1.0, -2.0]))
    with la.config.override(compiled_control_flow=False):
        a = la.fori_loop(0, 3, lambda i, v: v * 2.0 + i, x)
        b = la.cond(x.sum() > 0, lambda v: v, lambda v: -v, x)
        assert "while(" not in _hlo(a) and "conditional(" not in _hlo(b)
        a, b = a.numpy(), b.numpy()
    np.testing.assert_allclose(a, la.fori_loop(0, 3, lambda i, v: v * 2.0 + i, x).numpy())
    np.testing.assert_allclose(b, [-1.0, 2.0])


def test_what_cannot_be_compiled_is_an_error_naming_the_function():
    x = la.asarray(np.array([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="while_loop: body_fun read a traced value on the host"):
        la.while_loop(lambda v: v.sum() < 10.0, lambda v: v * float(v.sum().item()), x)
    with pytest.raises(TypeError, match=r"while_loop: body_fun's result and its input state "
                                        r"differ at leaf 0: float32\[2\] vs float64\[2\]"):
        la.while_loop(lambda v: v.sum() < 10.0, lambda v: v.astype(la.float32), x)
    with pytest.raises(TypeError, match="while_loop: the condition must be a scalar"):
        la.while_loop(lambda v: v < 10.0, lambda v: v * 2.0, x)
    la.sync()        # nothing traced inside the failed loops is left pending
    with pytest.raises(NotImplementedError, match="data-dependent trip count is not differentiable"):
        with la.GradientTape() as tape:
            y = la.while_loop(lambda v: v.sum() < 10.0, lambda v: v * 2.0, x)
        tape.gradient(y.sum(), [x])


def test_aot_compiles_control_flow():
    """The library target takes loops and branches (tests/test_aot.py runs them from C);
    each sub-program's functions are named apart, as one library links them all."""
    from lazyarray.compiler.driver import CPU_LIBRARY, compile as compile_program
    from lazyarray.compiler.program import LoopStep, PartialStep, WhileStep, sub_program
    y = la.fori_loop(0, 3, lambda i, v: v + 1.0, la.asarray(np.zeros(2)))
    module = parse_module(_hlo(y))
    program = compile_program(module, CPU_LIBRARY)
    kernels = (LoopStep, PartialStep)
    loop = next(s for s in program.steps if isinstance(s, WhileStep))
    names = [s.fn for s in program.steps if isinstance(s, kernels)]
    for part in loop.sub_programs():
        names += [s.fn for s in sub_program(part).steps if isinstance(s, kernels)]
    assert len(names) == len(set(names))


# ---- the CUDA device: the fake driver runs it, ptxas checks the PTX ---------------------------

def test_the_cuda_device_runs_control_steps_on_the_fake_driver():
    """The CUDA runtime drives the sub-programs (their kernels launched on the stand-in,
    the condition read back each iteration) and gives NumPy's values; the gradient
    through a scan too."""
    from conftest import drop_leftover_pending
    drop_leftover_pending()
    with la.config.override(device="fakecuda", cache_dir="off"):
        assert _la_collatz(la.asarray(np.int64(27))).item() == _collatz_steps(27)
        w, x = np.array([[0.5, 0.1], [-0.2, 0.9]]), np.array([1.0, 2.0])
        got = la.fori_loop(1, 6, lambda i, v: la.tanh(la.asarray(w) @ v) * i, la.asarray(x))
        want = x
        for i in range(1, 6):
            want = np.tanh(w @ want) * i
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
        got = la.cond(la.asarray(np.float64(-1.0)) > 0, lambda v: v * 2.0, lambda v: v - 3.0,
                      la.asarray(x))
        assert got.numpy().tolist() == [-2.0, -1.0]
        rng = np.random.default_rng(0)
        h0, xs, wr = rng.standard_normal(4), rng.standard_normal((3, 4)), rng.standard_normal((4, 4)) * 0.5
        check_direction(lambda a, b, c: _rnn(a, b, c)[0], [h0, xs, wr], device="fakecuda")


@pytest.mark.parametrize("trips", [0, 1, 7])
def test_a_cuda_loop_reads_its_condition_asynchronously_one_iteration_ahead(trips, monkeypatch):
    """On the CUDA device of a driver without conditional graph nodes (the driver
    stand-in configured as CUDA 12.2 runs the same plan) a loop's condition is
    read back behind an event while the next iteration is already queued: no stream-wide
    wait per iteration, one event wait each, the state untouched by the iteration
    computed past the end; results equal NumPy's for 0, 1 and several iterations, and a
    body holding a loop of its own keeps the plain host-driven loop (the conditional-node
    form: tests/test_cuda_loops.py)."""
    from conftest import drop_leftover_pending
    from lazyarray.devices.stand_ins import cuda_fake
    drop_leftover_pending()
    driver = cuda_fake.FAKE_DRIVER
    monkeypatch.setattr(driver, "version", 12020)
    with la.config.override(device="fakecuda", cache_dir="off"):
        x = la.asarray(np.array([1.0, 2.0]))
        n = la.asarray(np.int32(trips))
        la.sync()
        la.fori_loop(0, n, lambda i, v: v * 0.5 + 1.0, x).numpy()      # compiled
        streams = driver.calls.get("cuStreamSynchronize", 0)
        events = driver.calls.get("cuEventSynchronize", 0)
        got = la.fori_loop(0, n, lambda i, v: v * 0.5 + 1.0, x).numpy()
        assert driver.calls.get("cuStreamSynchronize", 0) - streams <= 1     # the result's read
        assert driver.calls.get("cuEventSynchronize", 0) - events >= trips + 1
        nested = la.fori_loop(0, n, lambda i, v: la.fori_loop(0, 2, lambda j, u: u + 1.0, v), x)
        np.testing.assert_allclose(nested.numpy(), [1.0 + 2 * trips, 2.0 + 2 * trips])
    want = np.array([1.0, 2.0])
    for _ in range(trips):
        want = want * 0.5 + 1.0
    np.testing.assert_allclose(got, want, rtol=1e-12)


def _ptx_of(program) -> list:
    """The PTX of a GPU program and of every sub-program its control steps hold."""
    from lazyarray.compiler.program import CONTROL_STEPS, sub_program
    out = [program.code.decode()] if program.code else []
    for step in program.steps:
        subs = step.sub_programs() if isinstance(step, CONTROL_STEPS) else []
        out += [ptx for s in subs if s is not None for ptx in _ptx_of(sub_program(s))]
    return out


def test_the_ptx_of_every_sub_computation_assembles():
    from lazyarray.compiler.codegen import gpu_math, ptxas
    from lazyarray.compiler.driver import compile as compile_program
    if ptxas.find_ptxas() is None or gpu_math.libdevice_path() is None:
        pytest.skip(reason="ptxas or libdevice not found (no CUDA toolkit)")
    x = la.asarray(np.linspace(0.1, 1.0, 8, dtype=np.float32))

    def step(c, r):
        grown = la.while_loop(lambda v: v.sum() < 30.0, lambda v: la.exp(v) + r, c)
        return la.cond(r > 0.5, lambda g: g * 0.5, lambda g: g, grown), la.sum(grown)
    carry, ys = la.scan(step, x, x)
    with la.GradientTape() as tape:
        tape.watch(x)
        loss = la.scan(lambda c, r: (la.tanh(c * r), c.sum()), x, x)[1].sum()
    (g,) = tape.gradient(loss, [x])
    for t in (carry, ys, g):
        program = compile_program(parse_module(_hlo(t)), "sm_80")
        texts = _ptx_of(program)
        assert len(texts) >= 3         # the enclosing program's and its sub-programs'
        for k, ptx in enumerate(texts):
            ptxas.assemble(ptx, "sm_80", f"control{k}")


def test_a_loop_over_constants_runs_at_run_time_not_in_constant_folding():
    r = la.while_loop(lambda v: v.sum() < 100.0, lambda v: v * 2.0 + 1.0, la.zeros(3))
    assert "while(" in la.debug.ir(r, "optimized_hlo")
    assert r.numpy().tolist() == [63.0, 63.0, 63.0]


def test_scan_without_xs_without_ys_and_of_length_zero():
    c, ys = la.scan(lambda c, _: (c * 2.0, c), la.asarray(1.0), length=4)
    assert c.item() == 16.0 and ys.numpy().tolist() == [1.0, 2.0, 4.0, 8.0]
    c, ys = la.scan(lambda c, x: (c + x, None), la.asarray(0.0), la.arange(3.0))
    assert c.item() == 3.0 and ys is None
    c, ys = la.scan(lambda c, x: (c + x, c * x), la.asarray(5.0), la.zeros((0,)))
    assert c.item() == 5.0 and ys.shape == (0,)


def test_gradients_through_a_cond_inside_a_loop_and_a_scan_without_xs():
    x = np.array([0.3, -1.2, 0.8])

    def f(a):
        return la.fori_loop(0, 4, lambda i, v: la.cond(v.sum() > 0, lambda u: la.sin(u) * 2.0,
                                                       lambda u: u * u - 0.5, v), a)
    check_direction(f, [x])
    check_direction(lambda a: la.scan(lambda c, _: (c * a, c), a, length=3)[1], [x])


def test_fori_loop_gradient_with_tensor_bounds_known_on_the_host():
    x = la.asarray(np.array([0.5, 1.0]))
    with la.GradientTape() as tape:
        tape.watch(x)
        y = la.fori_loop(la.asarray(np.int32(1)), la.asarray(np.int32(4)),
                         lambda i, v: v * v, x).sum()
    np.testing.assert_allclose(tape.gradient(y, [x])[0].numpy(), 8 * np.array([0.5, 1.0]) ** 7)


def test_inside_vmap_loops_and_branches_record_batched_control_flow():
    """vmap over a cond with a batched predicate (both branches, select per lane) holding
    a fori_loop: one HLO conditional and one while in the batched program (no unrolled
    fallback), results against NumPy lane by lane and against the interpreter."""
    xs = np.array([[1.0, 2.0], [-3.0, 0.5], [0.0, 4.0]])

    def one(v):
        return la.cond(v.sum() > 0, lambda a: la.fori_loop(0, 3, lambda i, b: b * 2.0 + i, a),
                       lambda a: -a, v)
    want = []
    for v in xs:
        if v.sum() > 0:
            for i in range(3):
                v = v * 2.0 + i
            want.append(v)
        else:
            want.append(-v)
    got = la.vmap(one)(la.asarray(xs))
    text = la.debug.ir(got, "hlo")
    assert text.count("conditional(") == 1 and text.count("while(") == 1
    np.testing.assert_allclose(got.numpy(), want)
    np.testing.assert_allclose(la.vmap(one)(la.asarray(xs, device="interpreter")).numpy(), want)


@pytest.mark.parametrize("where", ["cpu", "interpreter"])
def test_vmap_over_a_data_dependent_while_runs_each_lane_to_its_own_end(where):
    """The batched condition: the loop runs while any lane's holds; a finished lane keeps
    its state (each lane's trip count is its own, as one loop per element would give)."""
    starts = np.array([0.5, 3.0, 40.0, 7.0])

    def one(x):
        return la.while_loop(lambda s: s[1] < 50.0, lambda s: (s[0] + 1, s[1] * 1.5 + 1.0),
                             (la.asarray(np.int32(0), device=where), x))
    n, v = la.vmap(one)(la.asarray(starts, device=where))
    want_n, want_v = [], []
    for x in starts:
        k = 0
        while x < 50.0:
            k, x = k + 1, x * 1.5 + 1.0
        want_n.append(k)
        want_v.append(x)
    assert n.numpy().tolist() == want_n
    np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-12)


def test_vmap_of_switch_with_unbatched_and_batched_indices():
    x = np.array([-1.0, 0.6, 1.2, 9.0])
    branches = [lambda v: v + 1.0, lambda v: v * 10.0, lambda v: v - 3.0]
    per_lane = la.vmap(lambda v: la.switch((v * 2).astype(la.int32), branches, v))
    want = [branches[min(max(int(v * 2), 0), 2)](v) for v in x]
    np.testing.assert_allclose(per_lane(la.asarray(x)).numpy(), want)
    shared = la.vmap(lambda v, k: la.switch(k, branches, v), in_axes=(0, None))
    np.testing.assert_allclose(shared(la.asarray(x), la.asarray(np.int32(1))).numpy(), x * 10.0)


def test_gradients_of_vmapped_loops_and_branches_match_finite_differences():
    """Gradients through fori_loop and cond exist (reverse mode); vmap of the gradient
    function batches the backward loops and branches."""
    w = np.array([[0.6, -0.2], [0.3, 0.9]])
    xs = np.array([[1.0, 2.0], [-0.5, 0.25], [0.3, -1.2]])

    def f(x, w):
        y = la.fori_loop(0, 3, lambda i, v: la.tanh(v @ w) + 0.1 * i, x)
        return la.cond(y.sum() > 0, lambda a: (a * a).sum(), lambda a: a.sum(), y)
    grads = la.vmap(la.grad(f), in_axes=(0, None))(la.asarray(xs), la.asarray(w)).numpy()
    for x, g in zip(xs, grads):
        check_direction(lambda a: f(a, la.asarray(w)), [x])
        np.testing.assert_allclose(g, la.grad(f)(la.asarray(x), la.asarray(w)).numpy(),
                                   rtol=1e-10)


def _while_operands(t):
    w = t._node.operands[0]            # get_tuple_element(while)
    assert w.op == "while"
    return w.operands


@pytest.mark.parametrize("where", ["cpu", "interpreter"])
def test_a_weight_read_transposed_by_products_is_passed_as_stored(where):
    """x @ W.T in a loop body: W itself is the loop's operand and the transpose stays
    inside (the product reads W as stored), not a transposed copy made at every call;
    a transpose also read elementwise is still passed as the copy. Same results."""
    rng = np.random.default_rng(5)
    wn, xn = rng.standard_normal((6, 4)), rng.standard_normal((1, 4))
    w, x = la.asarray(wn, device=where), la.asarray(xn, device=where)
    wt = w.T
    out = la.fori_loop(0, 3, lambda i, v: la.tanh(v @ wt)[:, :4] + 0.5, x)
    ops = [n.op for n in _while_operands(out)]
    assert w._node in _while_operands(out) and "transpose" not in ops
    mixed = la.fori_loop(0, 3, lambda i, v: la.tanh(v @ wt)[:, :4] + (v.T * wt).sum(axis=1)[None],
                         x)
    assert "transpose" in [n.op for n in _while_operands(mixed)]
    want, want_mixed = xn, xn
    for _ in range(3):
        want = np.tanh(want @ wn.T)[:, :4] + 0.5
        want_mixed = np.tanh(want_mixed @ wn.T)[:, :4] + (want_mixed.T * wn.T).sum(axis=1)[None]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    np.testing.assert_allclose(mixed.numpy(), want_mixed, rtol=1e-12)
