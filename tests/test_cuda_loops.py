"""CUDA loops and branches as conditional nodes of one CUDA graph (devices/cuda/cuda_loops.py),
and the host-driven form kept for drivers without them, both on the driver stand-in
(devices/stand_ins/cuda_fake.py: graphs built node by node, WHILE and IF nodes, handles set
by our set-conditional kernels built for the host from the same IR as their PTX).

Each case runs on the stand-in configured as a CUDA 12.8 driver ("graph") and as a CUDA
12.2 driver ("host"); the two forms must give equal bits, and the CPU device's and the
reference interpreter's values to rounding. The PTX of the set-conditional kernels goes
through ptxas where it is found.
"""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cuda import conditional_kernels, cuda_loops
from lazyarray.devices.cuda.libraries import available
from lazyarray.devices.stand_ins import cuda_fake

VERSIONS = {"graph": 12080, "host": 12020}
RNG = np.random.default_rng(7)
W = RNG.standard_normal((24, 24)) * 0.3          # 4.6 kB: read in place, keyed by pointer
X = RNG.standard_normal(24)


def _collatz(n):
    def body(s):
        v, k = s
        return la.where(v % 2 == 0, v // 2, 3 * v + 1), k + 1
    return la.while_loop(lambda s: s[0] != 1, body, (n, la.zeros_like(n)))[1]


_WEIGHTS: dict = {}


def _decode(n):
    """A decoder-like loop: a product with a captured weight (cuBLAS), a nonlinearity; the
    weight is uploaded once per device, as a model's parameters are (the graph reads it
    in place)."""
    w = _WEIGHTS.setdefault(la.config.device, la.asarray(W))
    return la.fori_loop(0, n, lambda i, h: la.tanh(w @ h) + 0.01 * i, la.asarray(X))


def _nested(n):
    return la.fori_loop(0, n, lambda i, v: la.fori_loop(0, i, lambda j, u: u * 0.5 + j, v),
                        la.asarray(X[:4]))


def _swap(n):
    """State values trading places each iteration (a copy through a temporary)."""
    a, b = la.asarray(X[:3]), la.asarray(X[3:6])
    return la.fori_loop(0, n, lambda i, s: (s[1], s[0] + 1.0), (a, b))


def _flag_swap(n):
    """The condition reads a state value the body passes from another (a pred whose
    buffer the state copies overwrite): the handle must be set from it before them."""
    t = la.asarray(np.bool_(True))
    return la.while_loop(lambda s: s[1], lambda s: (s[0] + 1, s[2], s[0] < n),
                         (la.zeros_like(n), t, t))


def _cond(n):
    x = la.asarray(X[:5])
    return la.cond(n > 2, lambda v: la.exp(v) * 2.0, lambda v: v - 3.0, x)


def _switch(n):
    x = la.asarray(X[:5])
    return la.switch(n - 2, [lambda v: v, lambda v: v * 2.0, lambda v: la.sin(v)], x)


def _cond_in_loop(n):
    def body(i, v):
        return la.cond(i % 2 == 0, lambda u: u * 1.5, lambda u: u - 0.25, v)
    return la.fori_loop(0, n, body, la.asarray(X[:4]))


CASES = {"while": _collatz, "fori_loop": _decode, "nested": _nested, "swap": _swap,
         "flag_swap": _flag_swap,
         "cond": _cond, "switch": _switch, "cond_in_loop": _cond_in_loop}
TRIPS = {"while": [27, 1, 6], "fori_loop": [5, 0, 9], "nested": [4, 0, 3], "swap": [3, 0, 4],
         "flag_swap": [4, 0, 1],
         "cond": [5, 0, 3], "switch": [2, 3, 9, -4], "cond_in_loop": [5, 0, 2]}


def _numpy(out) -> list:
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


def _run(fn, n: int, device: str) -> list:
    with la.config.override(device=device, cache_dir="off"):
        dtype = np.int64 if fn is _collatz else np.int32
        return _numpy(fn(la.asarray(dtype(n))))


@pytest.fixture(params=list(VERSIONS))
def form(request, monkeypatch):
    """The stand-in as a driver with conditional nodes ("graph") or without ("host")."""
    from conftest import drop_leftover_pending
    drop_leftover_pending()
    monkeypatch.setattr(cuda_fake.FAKE_DRIVER, "version", VERSIONS[request.param])
    la.debug.reset_metrics()
    return request.param


def _counter(name: str) -> int:
    from lazyarray import runtime
    return runtime.get_device("fakecuda").device.counters.get(name, 0)


def _loop_launches() -> int:
    return _counter("loop_graph_launches")


def _calls(name: str) -> int:
    return cuda_fake.FAKE_DRIVER.calls.get(name, 0)


@pytest.mark.parametrize("case", list(CASES))
def test_both_forms_give_the_same_bits_and_the_cpu_and_interpreter_values(case, monkeypatch):
    """The conditional-node form and the host-driven form run the same plan: equal bits.
    Against the CPU device and the interpreter: equal up to rounding (cuBLAS's stand-in
    sums a product in another order than the CPU's BLAS)."""
    from conftest import drop_leftover_pending
    drop_leftover_pending()
    fn = CASES[case]
    for n in TRIPS[case]:
        got = {}
        for form, version in VERSIONS.items():
            monkeypatch.setattr(cuda_fake.FAKE_DRIVER, "version", version)
            if form == "graph":      # (a layout of a weight read in place: built when seen again)
                _run(fn, n, "fakecuda")
            launches = _loop_launches()
            got[form] = _run(fn, n, "fakecuda")
            assert (_loop_launches() > launches) == (form == "graph")
        for g, h, c, r in zip(got["graph"], got["host"], _run(fn, n, "cpu"),
                              _run(fn, n, "interpreter")):
            np.testing.assert_array_equal(g, h)
            np.testing.assert_allclose(g, c, rtol=1e-13, atol=1e-15)
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-14)


def test_a_loop_runs_as_one_graph_launch_with_no_read_back_per_iteration(form) -> None:
    """Graph form: the second run replays the graph built at the first; the host waits
    once, for the result. Host form: one event wait per iteration (read-ahead)."""
    with la.config.override(device="fakecuda", cache_dir="off"):
        w = la.asarray(W)                    # the same weight buffer at every run

        def decode(n: int) -> np.ndarray:
            return la.fori_loop(0, la.asarray(np.int32(n)),
                                lambda i, h: la.tanh(w @ h) + 0.01 * i, la.asarray(X)).numpy()
        decode(3)
        decode(3)                # built now: the weight's layout came back
        built = _counter("loop_graphs_built")
        events, streams = _calls("cuEventSynchronize"), _calls("cuStreamSynchronize")
        launches, loops = _calls("cuGraphLaunch"), _loop_launches()
        got = decode(40)
    np.testing.assert_allclose(got, _run(_decode, 40, "cpu")[0], rtol=1e-12)
    if form == "graph":
        assert _calls("cuEventSynchronize") == events
        assert _calls("cuStreamSynchronize") - streams <= 2       # reads of the results
        assert _calls("cuGraphLaunch") - launches == 1
        assert _counter("loop_graphs_built") == built          # replayed, not rebuilt
    else:
        assert _calls("cuEventSynchronize") - events >= 40
        assert _loop_launches() == loops       # (its sub-programs replay graphs of their own)


def test_a_simple_loop_is_two_graph_nodes_and_its_while_node() -> None:
    """The copies in, the condition and its set kernel: one child-graph node; the body, its
    copies and its set kernel: one node in the WHILE node's body (fewer nodes to schedule
    per iteration)."""
    from conftest import drop_leftover_pending
    drop_leftover_pending()
    children, nodes = _calls("cuGraphAddChildGraphNode"), _calls("cuGraphAddNode")
    with la.config.override(device="fakecuda", cache_dir="off"):
        got = la.fori_loop(0, 4, lambda i, v: v * 3.0 - 1.0, la.asarray(X[:7])).numpy()
    assert (_calls("cuGraphAddChildGraphNode") - children, _calls("cuGraphAddNode") - nodes) \
        == (2, 1)
    want = X[:7]
    for _ in range(4):
        want = want * 3.0 - 1.0
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_new_weight_buffer_builds_a_graph_and_small_operands_do_not(form) -> None:
    """Operands up to PORT_BYTES (a trip count) are copied into the graph; a larger one is
    read in place, so a new buffer of it is a new graph, built when its layout comes back
    (the first run of a layout is host-driven)."""
    if form == "host":
        pytest.skip("graphs only")
    with la.config.override(device="fakecuda", cache_dir="off"):
        w1, w2 = la.asarray(W), la.asarray(W * 0.5)
        def f(w, n):
            return la.fori_loop(0, n, lambda i, h: la.tanh(w @ h), la.asarray(X))
        built = _counter("loop_graphs_built")
        for n in (2, 3, 4):
            f(w1, la.asarray(np.int32(n))).numpy()
        assert _counter("loop_graphs_built") == built + 1
        f(w2, la.asarray(np.int32(2))).numpy()
        assert _counter("loop_graphs_built") == built + 1     # seen once: host-driven
        got = f(w2, la.asarray(np.int32(3))).numpy()
        assert _counter("loop_graphs_built") == built + 2
    want = X
    for _ in range(3):
        want = np.tanh((W * 0.5) @ want)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_loop_whose_body_changes_nothing_is_an_error_in_both_forms(form) -> None:
    with la.config.override(device="fakecuda", cache_dir="off"):
        x = la.asarray(np.float64(1.0))
        with pytest.raises(RuntimeError, match="would never end"):
            la.while_loop(lambda v: v > 0, lambda v: v, x).numpy()
        assert x.item() == 1.0                 # the operand is intact


def test_graphs_off_and_a_profile_drive_the_loop_from_the_host(form) -> None:
    if form == "host":
        pytest.skip("graphs only")
    launches = _loop_launches()
    with la.config.override(cuda_graphs=False):
        got = _run(_swap, 4, "fakecuda")
    with la.profiler.profile():
        profiled = _run(_swap, 5, "fakecuda")
    assert _loop_launches() == launches
    for g, c in zip(got + profiled, _run(_swap, 4, "cpu") + _run(_swap, 5, "cpu")):
        np.testing.assert_array_equal(g, c)


def test_a_graph_the_driver_refuses_leaves_the_loop_to_the_host(form, monkeypatch) -> None:
    """A driver error while building the graph: the step runs host-driven, from then on,
    with the same result, and the device says why."""
    if form == "host":
        pytest.skip("graphs only")
    cu = cuda_fake.FAKE_DRIVER
    refused = (cuda_fake.CUresult.CUDA_ERROR_INVALID_VALUE, None)
    monkeypatch.setattr(cu, "cuGraphAddNode", lambda *a: refused)
    from lazyarray import runtime
    dev = runtime.get_device("fakecuda").device
    failures = len(dev.loop_graph_failures)
    def halve_and_swap(n):       # a program of its own (no graph of it built before)
        return la.fori_loop(0, n, lambda i, s: (s[1] * 0.5, s[0] - 2.0),
                            (la.asarray(X[:2]), la.asarray(X[2:4])))
    for n in (5, 6):
        got = _run(halve_and_swap, n, "fakecuda")
        for g, c in zip(got, _run(halve_and_swap, n, "cpu")):
            np.testing.assert_array_equal(g, c)
    assert len(dev.loop_graph_failures) == failures + 1       # tried once, not per run
    assert "cuGraphAddNode" in dev.loop_graph_failures[-1]


CUDA = pytest.mark.skipif(not available(False), reason="no CUDA GPU")


@CUDA
@pytest.mark.parametrize("case", list(CASES))
def test_on_a_gpu_loops_match_the_cpu_and_use_conditional_nodes_where_the_driver_has_them(case):
    """On a real GPU (bench/gpu_check.sh runs it): results equal the CPU's to float64
    rounding; with a CUDA 12.4+ driver every loop ran as one graph, none failed to build."""
    from lazyarray import runtime
    dev = runtime.get_device("cuda").device
    launches = dev.counters.get("loop_graph_launches", 0)
    for n in TRIPS[case]:
        for g, c in zip(_run(CASES[case], n, "cuda"), _run(CASES[case], n, "cpu")):
            np.testing.assert_allclose(g, c, rtol=1e-12, atol=1e-14)
    if dev.loop_graphs_missing() is None:
        assert dev.loop_graph_failures == []
        # (the first run of a layout reading the weight in place is host-driven)
        assert dev.counters.get("loop_graph_launches", 0) - launches >= len(TRIPS[case]) - 1


def test_the_driver_support_check_names_what_is_missing(monkeypatch) -> None:
    driver = cuda_fake.FAKE_DRIVER
    assert cuda_loops.missing(driver) is None
    monkeypatch.setattr(driver, "version", 12020)
    assert "CUDA 12.2" in cuda_loops.missing(driver) and "12.4" in cuda_loops.missing(driver)

    class OldBindings:                  # cuda-python from before conditional nodes
        def cuDriverGetVersion(self):
            return (0, 12080)
    assert "cuGraphConditionalHandleCreate" in cuda_loops.missing(OldBindings())


def test_the_stand_in_refuses_what_a_driver_refuses(monkeypatch) -> None:
    """A conditional node on a driver without them; a handle used by two nodes; a node
    whose dependency is not the node before it; an unknown handle set by a kernel."""
    cu = cuda_fake.FAKE_DRIVER
    graph = cu.cuGraphCreate(0)[1]
    h = cu.cuGraphConditionalHandleCreate(graph, None, 0, 0)[1]
    params = cu.CUgraphNodeParams()
    params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle, params.conditional.size = h, 1
    params.conditional.type = cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
    err, node = cu.cuGraphAddNode(graph, [], 0, params)
    assert int(err) == 0 and len(params.conditional.phGraph_out) == 1
    assert int(cu.cuGraphAddNode(graph, [node], 1, params)[0]) != 0       # handle reused
    h2 = cu.cuGraphConditionalHandleCreate(graph, None, 0, 0)[1]
    params.conditional.handle = h2
    assert int(cu.cuGraphAddNode(graph, [], 0, params)[0]) != 0           # not chained
    with pytest.raises(cuda_fake.FakeError):
        cu.set_conditional(0xDEAD, 1)
    monkeypatch.setattr(cu, "version", 12020)
    assert int(cu.cuGraphConditionalHandleCreate(graph, None, 0, 0)[0]) != 0


def test_the_set_kernels_clamp_the_index_as_hlo_does() -> None:
    """The stand-in runs the kernels' own code (built for the host): handle k of a
    3-branch table is set for k = clamp(index, 0, 2) and cleared for the others."""
    from lazyarray.devices.stand_ins.cuda_conditional_host import host_kernels
    cu = cuda_fake.FAKE_DRIVER
    graph = cu.cuGraphCreate(0)[1]
    handles = [cu.cuGraphConditionalHandleCreate(graph, None, 0, 0)[1] for _ in range(3)]
    table = np.array([3] + [int(h) for h in handles], np.uint64)
    kernels = host_kernels()
    for index, want in ((-5, 0), (0, 0), (1, 1), (2, 2), (9, 2)):
        for h in handles:
            h.value = 7
        value = np.array([index], np.int32)
        kernels[conditional_kernels.SET_BRANCH][0]([table.ctypes.data, value.ctypes.data])
        assert [h.value for h in handles] == [int(k == want) for k in range(3)]
    for pred, want in ((0, 0), (1, 1), (2, 1)):
        value = np.array([pred], np.uint8)
        kernels[conditional_kernels.SET_WHILE][0]([table.ctypes.data, value.ctypes.data])
        assert handles[0].value == want


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_set_kernels_ptx_calls_the_device_runtime_and_assembles(arch) -> None:
    from lazyarray.compiler.codegen import ptxas
    text = conditional_kernels.ptx(arch)
    assert ".extern .func cudaGraphSetConditional" in text
    assert text.count(".entry") == 2
    if ptxas.find_ptxas() is None:
        pytest.skip(reason="ptxas not found (no CUDA toolkit)")
    ptxas.assemble(text, arch, "conditional")


def test_the_stand_in_applies_a_handle_default_at_each_launch() -> None:
    """CU_GRAPH_COND_ASSIGN_DEFAULT (flags 1): the default is the handle's value at the
    start of every launch, whatever a kernel set before."""
    cu = cuda_fake.FAKE_DRIVER
    stream = cu.cuStreamCreate(1)[1]
    ptr = cu.cuMemAlloc(256)[1]
    graph = cu.cuGraphCreate(0)[1]
    h = cu.cuGraphConditionalHandleCreate(graph, None, 1, 1)[1]
    params = cu.CUgraphNodeParams()
    params.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
    params.conditional.handle, params.conditional.size = int(h), 1
    params.conditional.type = cu.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_IF
    assert int(cu.cuGraphAddNode(graph, [], 0, params)[0]) == 0
    cu.cuStreamBeginCapture(stream, 1)
    cu.cuMemsetD8Async(ptr, 7, 256, stream)
    body = cu.cuStreamEndCapture(stream)[1]
    cu.cuGraphAddChildGraphNode(params.conditional.phGraph_out[0], [], 0, body)
    exe = cu.cuGraphInstantiate(graph, 0)[1]
    out = np.zeros(256, np.uint8)
    for _ in range(2):
        cu.cuMemsetD8Async(ptr, 0, 256, stream)
        cu.set_conditional(int(h), 0)             # overridden by the default at launch
        cu.cuGraphLaunch(exe, stream)
        cu.cuMemcpyDtoHAsync(out.ctypes.data, ptr, 256, stream)
        assert int(cu.cuStreamSynchronize(stream)[0]) == 0
        assert (out == 7).all()
    cu.cuGraphExecDestroy(exe)
    cu.cuMemFree(ptr)


# ---- the loop state in place: the body compiled with its state donated --------------------
# (compiler/codegen/control_steps.py carried_state, compiler/program.py state_buffers, as
# for the CPU)

ROWS, WIDTH = 16, 8


def _kv(n, cache, x, flip: bool = False):
    """A decoding loop's state, exact in float64 on every device (every value an integer
    or a short dyadic fraction, so no sum depends on its order): x the token state, cache one row
    written a step by dynamic_update_slice (past ROWS the start clamps to the last row)
    and read whole by a product, as attention reads it; with `flip`, one more state the
    body reads at other indices while writing it (two buffers)."""
    def body(i, s):
        x, cache = s[0], la.dynamic_update_slice(s[1], la.reshape(s[0], (1, WIDTH)), (i, 0))
        read = la.reshape(la.ones((1, ROWS), dtype=la.float64) @ cache, (WIDTH,))
        x = la.remainder(x * 3.0 + read, 1024.0)
        if not flip:
            return x, cache
        return x + s[2][0], cache, la.flip(s[2], axis=0) * 0.5 + 1.0
    state = (x, cache) + ((la.arange(WIDTH, dtype=la.float64, device=x.device),) if flip else ())
    return la.fori_loop(0, n, body, state)


def _kv_inputs():
    cache = np.zeros((ROWS, WIDTH), np.float64)
    cache[3] = 7.0
    return cache, np.arange(WIDTH, dtype=np.float64) - 3.0


def _run_kv(n: int, device: str, flip: bool = False) -> list:
    cache, x = _kv_inputs()
    with la.config.override(device=device, cache_dir="off"):
        return _numpy(_kv(la.asarray(np.int32(n)), la.asarray(cache), la.asarray(x), flip))


@pytest.fixture
def in_place_host(form, monkeypatch):
    """The host-driven form with the in-place states written in place (no read-ahead:
    host_loops.AHEAD_COPY_BYTES below the cache), or the graph form."""
    from lazyarray.devices.cuda import host_loops
    if form == "host":
        monkeypatch.setattr(host_loops, "AHEAD_COPY_BYTES", 0)
    return form


@pytest.mark.parametrize("flip", [False, True])
def test_state_in_place_gives_the_cpus_and_the_interpreters_bits(form, flip) -> None:
    """Both forms, in place and (host form) read ahead with copies, at trip counts from
    none to past the cache's rows: equal bits to the CPU device's and the interpreter's."""
    from lazyarray.devices.cuda import host_loops
    for n in (0, 1, 5, ROWS + 3):
        want = _run_kv(n, "interpreter", flip)
        ahead = [1 << 20] if form == "host" else []
        for limit in [0] + ahead:
            host_loops.AHEAD_COPY_BYTES, saved = limit, host_loops.AHEAD_COPY_BYTES
            try:
                got = _run_kv(n, "fakecuda", flip)
            finally:
                host_loops.AHEAD_COPY_BYTES = saved
            for g, c, r in zip(got, _run_kv(n, "cpu", flip), want):
                np.testing.assert_array_equal(g, c)
                np.testing.assert_array_equal(g, r)


def _moved(n: int, cache_bytes: int) -> tuple:
    """(device-to-device copies, their bytes, blocks of cache_bytes or more taken from the
    allocator: new or claimed back by a replayed graph) the stand-in ran for one run of
    the KV loop with n iterations."""
    from lazyarray import runtime
    allocator = runtime.get_device("fakecuda").device.allocator
    sizes: list = []
    cu = cuda_fake.FAKE_DRIVER
    copies, moved = cu.ran.get("DtoD", 0), cu.ran_bytes.get("DtoD", 0)
    with pytest.MonkeyPatch.context() as mp:
        for name, at in (("alloc", 0), ("claim", 1)):
            take = getattr(allocator, name)
            mp.setattr(allocator, name, lambda *a, take=take, at=at, **k:
                       (sizes.append(a[at]), take(*a, **k))[1])
        _run_kv(n, "fakecuda")
    big = sum(1 for s in sizes if s >= cache_bytes)
    return cu.ran.get("DtoD", 0) - copies, cu.ran_bytes.get("DtoD", 0) - moved, big


def test_a_kv_cache_is_neither_copied_nor_allocated_per_iteration(in_place_host) -> None:
    """What the stand-in ran for 4 and for 14 iterations: the same copies and the same
    allocations of the cache's size (those of the entry and the exit). Graph form: no
    device copy at all per iteration (the token state and the counter are updated in
    place too). Before the bodies were compiled with their state donated, the graph
    copied every state per iteration and the host form allocated a new cache per
    iteration."""
    nbytes = ROWS * WIDTH * 8
    _run_kv(4, "fakecuda")                    # the graph built
    few, many = _moved(4, nbytes), _moved(14, nbytes)
    assert many[2] == few[2]                  # no cache-sized allocation per iteration
    if in_place_host == "graph":
        assert many[:2] == few[:2]            # no copy per iteration at all
    else:
        assert many[1] - few[1] < nbytes      # (the counter's copy for its read-back)


def test_a_state_read_after_its_new_value_is_written_keeps_two_buffers(monkeypatch) -> None:
    """The flipped state: its new value is written while the old one is still read, so
    its new value has a buffer of its own -- the same states as the CPU's native runner
    keeps in one buffer (the decision is program.state_buffers' on the plan both
    targets share); in the graph that state alone is copied back per iteration."""
    # the body's small products as library calls on the CPU too, as on the GPU (the CPU
    # fuses them as reductions: linalg.SMALL_PRODUCT), so that both plans are alike
    from lazyarray.compiler.primitives import linalg
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)
    from lazyarray.compiler import compile
    from lazyarray.compiler.program import state_buffers
    from lazyarray.compiler.graph.trace import capture
    from lazyarray.compiler.program import WhileStep, sub_program
    from lazyarray.devices.cpu import native_control
    from lazyarray.devices.cpu.cpu import CPUDevice, CPUExecutable
    cache, x = _kv_inputs()
    out = _kv(la.asarray(np.int32(6)), la.asarray(cache), la.asarray(x), flip=True)
    module = capture([t._node for t in out]).module()
    kept = {}
    for target in ("cpu", "sm_80"):
        program = compile(module, target)
        (step,) = [s for s in program.steps if isinstance(s, WhileStep)]
        body = sub_program(step.body)
        number = {int(p): int(n) for p, n in body.params}
        kept[target] = sorted(number[x] for x in state_buffers(body, step.varying).values())
        shapes = {k: tuple(body.values[str(p)]["shape"]) for p, k in number.items()}
    assert kept["cpu"] == kept["sm_80"]
    assert (ROWS, WIDTH) in [shapes[k] for k in kept["cpu"]]
    flipped = [k for k in step.varying if k not in kept["cpu"]]
    assert [shapes[k] for k in flipped] == [(WIDTH,)]
    exe = CPUExecutable(compile(module, "cpu"),
                        CPUDevice(lambda: {"cache_dir": "off", "num_threads": 1}))
    (cpu_step,) = [s for s in exe.steps if isinstance(s, WhileStep)]
    native = native_control.ControlStep(cpu_step, exe._subs[id(cpu_step)], 1,
                                        lambda p: 8 * p + 8, lambda p: exe.values[p].nbytes)
    assert native.double == flipped
    cu = cuda_fake.FAKE_DRIVER
    _run_kv(3, "fakecuda", flip=True)
    moved = []
    for n in (3, 9):
        before = cu.ran_bytes.get("DtoD", 0)
        _run_kv(n, "fakecuda", flip=True)
        moved.append(cu.ran_bytes.get("DtoD", 0) - before)
    assert moved[1] - moved[0] == 6 * WIDTH * 8        # the flipped state, per iteration


def test_the_initial_tensors_the_user_holds_are_never_written(in_place_host) -> None:
    """The loop's state is its own (copied in at entry): the tensors given as its initial
    value keep their values however often the body wrote the state in place, and a
    second run of the same program gives the same result."""
    cache, x = _kv_inputs()
    with la.config.override(device="fakecuda", cache_dir="off"):
        cache_t, x_t = la.asarray(cache), la.asarray(x)
        n = la.asarray(np.int32(5))
        first = _numpy(_kv(n, cache_t, x_t))
        np.testing.assert_array_equal(cache_t.numpy(), cache)
        np.testing.assert_array_equal(x_t.numpy(), x)
        again = _numpy(_kv(n, cache_t, x_t))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(cache_t.numpy(), cache)


# ---- a dynamic_update_slice in place on a donated buffer (top-level programs) ----------------

BIG = (256, 64)           # the cache: 64 blocks of 256 threads; its row: one block


def _dus_module(start: int = 5):
    """(module, the cache's parameter number, arguments, NumPy's result) of writing a
    computed row at `start` (clamped into the cache, as HLO clamps it)."""
    from lazyarray.compiler.graph.trace import capture
    rng = np.random.default_rng(2)
    row = rng.standard_normal((1, BIG[1])).astype(np.float32)
    cache = rng.standard_normal(BIG).astype(np.float32)
    c, r, at = la.asarray(cache), la.asarray(row), la.asarray(np.int64(start))
    cap = capture([la.dynamic_update_slice(c, r * 2.0, (at, 0))._node])
    module = cap.module()
    number = next(module.instructions[p].attrs["number"] for p in module.parameters
                  if module.instructions[p].shape == BIG)
    want = cache.copy()
    want[min(max(start, 0), BIG[0] - 1)] = row[0] * 2.0
    dtypes = {module.instructions[p].attrs["number"]: module.instructions[p].dtype.np
              for p in module.parameters}         # (2.0 a float32 scalar parameter)
    return module, number, [np.asarray(a, dtypes[k]) for k, a in enumerate(cap.args)], want


@pytest.mark.parametrize("name", ["fakecuda", pytest.param("cuda", marks=CUDA)])
def test_a_donated_cache_is_updated_in_place_on_cuda(name) -> None:
    """A program given a donated cache writes the new row into the caller's buffer, by a
    kernel over the row alone (one block, where the whole cache takes 64), the rest of the
    buffer as it was. Values against NumPy (on the stand-in and, where one is, a GPU)."""
    from lazyarray import runtime
    from lazyarray.compiler.program import LaunchStep
    module, number, args, want = _dus_module()
    dev = runtime.get_device(name).device
    with la.config.override(cache_dir="off"):
        exe = dev.compile(module, frozenset({number}))
    (launch,) = [s for s in exe.steps if isinstance(s, LaunchStep)]
    assert launch.grid[0] == 1
    buffers = [dev.put(a) for a in args]
    (out,) = exe.run(buffers)
    assert out.ptr == buffers[number].ptr          # in the caller's buffer
    np.testing.assert_array_equal(dev.get(out), want)


@pytest.mark.parametrize("start", [5, BIG[0] + 40, -3])
def test_the_in_place_update_kernel_writes_the_update_alone(monkeypatch, start) -> None:
    """The GPU kernel's own code (built for the host, run thread by thread) given an
    output buffer apart from the cache: it writes the new row, at its start clamped into
    the cache, and nothing else (a kernel over the whole cache would have copied the
    cache there)."""
    import functools
    from lazyarray.compiler.driver import compile_gpu_for_host
    from lazyarray.compiler.passes import pipeline
    from lazyarray.devices.stand_ins.cuda_simt import SimtExecutable
    module, number, args, want = _dus_module(start)
    monkeypatch.setattr(pipeline, "compile_plan", functools.partial(
        pipeline.compile_plan, donate_inputs=frozenset({number})))
    program = compile_gpu_for_host(module, "sm_90:2:512")
    assert program.aliases
    (out,) = SimtExecutable(program).run(args)      # (its buffers apart, zeroed)
    row = min(max(start, 0), BIG[0] - 1)
    only_row = np.zeros(BIG, np.float32)
    only_row[row] = want[row]
    np.testing.assert_array_equal(out, only_row)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_in_place_update_kernels_ptx_assembles(arch) -> None:
    from lazyarray.compiler import compile
    from lazyarray.compiler.codegen import ptxas
    module, number, _, _ = _dus_module()
    program = compile(module, arch, donated=frozenset({number}))
    if ptxas.find_ptxas() is None:
        pytest.skip(reason="ptxas not found (no CUDA toolkit)")
    ptxas.assemble(program.code.decode(), arch, "in_place_update")


def test_a_branch_writes_its_results_straight_into_the_conditionals_outputs(in_place_host) -> None:
    """A cond inside a loop: the branch taken writes the conditional's outputs (graph
    form: the IF node's body writes them; host form: its results become them), as the
    CPU's branch does, no copy after it. What remains per iteration in the graph is the
    copy of the loop's state v back into its buffer (the body reads v while it writes
    v's new value: two buffers); the host form swaps the two instead."""
    cu = cuda_fake.FAKE_DRIVER
    _run(_cond_in_loop, 2, "fakecuda")
    copies = []
    for n in (4, 12):
        before = cu.ran.get("DtoD", 0)
        got = _run(_cond_in_loop, n, "fakecuda")
        copies.append(cu.ran.get("DtoD", 0) - before)
        np.testing.assert_array_equal(got[0], _run(_cond_in_loop, n, "cpu")[0])
    assert (copies[1] - copies[0]) / 8 == (1 if in_place_host == "graph" else 0)


@CUDA
@pytest.mark.parametrize("flip", [False, True])
def test_on_a_gpu_the_state_in_place_gives_the_cpus_bits(flip) -> None:
    """On a real GPU (bench/gpu_check.sh): the KV-cache loop with its state in place
    gives the CPU's bits (every value exact: see _kv), with no loop graph refused."""
    from lazyarray import runtime
    dev = runtime.get_device("cuda").device
    for n in (0, 5, ROWS + 3):
        for g, c in zip(_run_kv(n, "cuda", flip), _run_kv(n, "cpu", flip)):
            np.testing.assert_array_equal(g, c)
    if dev.loop_graphs_missing() is None:
        assert dev.loop_graph_failures == []
