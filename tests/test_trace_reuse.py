"""A repeated fori_loop/while_loop/scan/cond with the same function, operand types and
static values takes the earlier trace's sub-computations (lazyarray/trace_cache.py):
the second call does not trace; the result equals a fresh trace's, the interpreter's and
NumPy's; a closed-over tensor that changed (rebound or updated in place) gives the new
result; a changed closed-over Python scalar or operand shape traces again; what the key
cannot describe (a user object, a random draw) traces every time."""
import time

import numpy as np
import pytest

import lazyarray as la
from lazyarray import control_flow, trace_cache


@pytest.fixture
def traces(monkeypatch):
    """The number of functions traced so far (a list holding one count)."""
    trace_cache.clear()
    count = [0]
    real = control_flow._trace

    def counting(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)
    monkeypatch.setattr(control_flow, "_trace", counting)
    return count


W0, W1 = np.array([0.5, -1.0, 2.0]), np.array([3.0, 0.25, -0.5])
X = np.array([1.0, 2.0, -1.5])


def _fori(x, w, s):
    return la.fori_loop(0, 3, lambda i, v: v * s + w * i, x)


def _fori_np(x, w, s):
    for i in range(3):
        x = x * s + w * i
    return x


def _while(x, w, s):
    return la.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * s + w), (0, x))[1]


def _while_np(x, w, s):
    for _ in range(3):
        x = x * s + w
    return x


def _scan(x, w, s):
    xs = la.stack([x, x * 2.0])
    return la.scan(lambda c, r: (c * s + r * w, c.sum()), x, xs)[0]


def _scan_np(x, w, s):
    c = x
    for r in (x, x * 2.0):
        c = c * s + r * w
    return c


def _cond(x, w, s):
    return la.cond(x.sum() > 0, lambda v: v * s + w, lambda v: v - w, x)


def _cond_np(x, w, s):
    return x * s + w if x.sum() > 0 else x - w


CASES = [(_fori, _fori_np, 2), (_while, _while_np, 2), (_scan, _scan_np, 2),
         (_cond, _cond_np, 2)]        # (lazyarray form, NumPy form, functions traced)


def _run(form, x, w, s, device=None):
    return form(la.asarray(x, device=device), la.asarray(w, device=device), s).numpy()


@pytest.mark.parametrize("form,want,traced", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_the_second_call_reuses_the_trace_with_the_same_values(traces, form, want, traced):
    first = _run(form, X, W0, 0.5)
    assert traces[0] >= traced
    n = traces[0]
    again = _run(form, X, W0, 0.5)
    assert traces[0] == n                                  # nothing traced
    np.testing.assert_allclose(again, want(X, W0, 0.5), rtol=1e-12)
    np.testing.assert_array_equal(again, first)
    trace_cache.clear()
    np.testing.assert_array_equal(_run(form, X, W0, 0.5), again)          # a fresh trace
    np.testing.assert_allclose(_run(form, X, W0, 0.5, "interpreter"), again, rtol=1e-12)


@pytest.mark.parametrize("form,want,traced", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_changed_closures_give_the_new_result(traces, form, want, traced):
    _run(form, X, W0, 0.5)
    n = traces[0]
    # a different closed-over tensor of the same type: reused trace, the new value
    np.testing.assert_allclose(_run(form, X, W1, 0.5), want(X, W1, 0.5), rtol=1e-12)
    assert traces[0] == n
    # a different closed-over Python scalar: traced again, the new value
    np.testing.assert_allclose(_run(form, X, W1, -2.0), want(X, W1, -2.0), rtol=1e-12)
    assert traces[0] > n
    n = traces[0]
    # a different shape: traced again
    x4, w4 = np.arange(4.0) + 1, np.ones(4)
    np.testing.assert_allclose(_run(form, x4, w4, -2.0), want(x4, w4, -2.0), rtol=1e-12)
    assert traces[0] > n


def test_a_closed_over_tensor_updated_in_place_is_read_anew(traces):
    w = la.asarray(W0.copy())
    body = lambda i, v: v + w          # noqa: E731  (the same function object each call)
    got = la.fori_loop(0, 2, body, la.asarray(X)).numpy()
    np.testing.assert_allclose(got, X + 2 * W0)
    n = traces[0]
    w += 1.0                            # the same tensor object, a new value
    got = la.fori_loop(0, 2, body, la.asarray(X)).numpy()
    assert traces[0] == n
    np.testing.assert_allclose(got, X + 2 * (W0 + 1.0))
    w = la.asarray(W1)                  # the cell rebound to another tensor
    np.testing.assert_allclose(la.fori_loop(0, 2, body, la.asarray(X)).numpy(), X + 2 * W1)
    assert traces[0] == n


def test_other_bounds_reuse_the_trace(traces):
    body = lambda i, v: v * 2.0 + i    # noqa: E731
    la.fori_loop(0, 3, body, la.asarray(1.0)).numpy()
    n = traces[0]
    assert la.fori_loop(1, 4, body, la.asarray(1.0)).item() == ((1 * 2 + 1) * 2 + 2) * 2 + 3
    assert traces[0] == n


def test_a_shared_constant_read_inside_and_outside_compiles_once(traces):
    """A body reading a kept constant's shared broadcast (`maximum(v, 0.0)` of a (2, 3)
    value) that the code outside the loop reads too: the second call's graph is the first
    call's (the same node passed again, not a new broadcast of 0.0), so it compiles once.
    The decoding benchmark's fori_loop compiled twice (a graph one node longer)."""
    x = la.asarray(np.arange(6.0).reshape(2, 3) - 2.5)

    def run():
        v = la.maximum(x, 0.0) - 1.0
        return la.fori_loop(0, 3, lambda i, v: la.maximum(v, 0.0) * 0.5 + i, v).numpy()

    first = run()
    n, before = traces[0], la.debug.metrics().cache_misses
    again = run()
    assert traces[0] == n
    assert la.debug.metrics().cache_misses == before
    want = np.maximum(np.arange(6.0).reshape(2, 3) - 2.5, 0.0) - 1.0
    for i in range(3):
        want = np.maximum(want, 0.0) * 0.5 + i
    np.testing.assert_allclose(again, want, rtol=1e-12)
    np.testing.assert_array_equal(again, first)


class _Scale:
    factor = 1.0

    def __init__(self, s, w):
        self.s, self.w = s, w

    def __call__(self, v):
        return v * self.s * self.factor + self.w


class _Slotted:
    __slots__ = ("s",)

    def __init__(self, s):
        self.s = s


def test_objects_are_keyed_by_their_attributes_and_class(traces):
    obj = _Scale(2.0, la.asarray(1.0))
    body = lambda i, v: obj(v)         # noqa: E731
    assert la.fori_loop(0, 2, body, la.asarray(1.0)).item() == 7.0
    n = traces[0]
    obj.w = la.asarray(0.0)            # a tensor attribute: the trace reused, the new value
    assert la.fori_loop(0, 2, body, la.asarray(1.0)).item() == 4.0
    assert traces[0] == n
    obj.s = 3.0                        # a Python attribute: traced again
    assert la.fori_loop(0, 2, body, la.asarray(1.0)).item() == 9.0
    assert traces[0] > n
    n = traces[0]
    _Scale.factor = 2.0                # a class attribute: traced again
    try:
        assert la.fori_loop(0, 2, body, la.asarray(1.0)).item() == 36.0
    finally:
        _Scale.factor = 1.0
    assert traces[0] > n


class _Affine(la.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = la.nn.Linear(3, 3)
        self.gain = 1.0

    def forward(self, v):
        return self.lin(v) * self.gain


def test_a_module_is_keyed_by_its_parameters_submodules_and_attributes(traces):
    """A model closed over by a loop body: a parameter rebound to another tensor of its
    type reuses the trace with the new value; a plain attribute, a submodule replaced
    by another kind, a parameter of another shape or one added trace again."""
    model = _Affine()
    with la.no_grad():
        model.lin.weight.copy_(la.asarray(np.eye(3, dtype=np.float32)))
        model.lin.bias.copy_(la.asarray(np.zeros(3, np.float32)))
    body = lambda i, v: model(v)                     # noqa: E731
    x = la.asarray(np.array([1.0, 2.0, 3.0], np.float32))

    def run():
        with la.no_grad():
            return la.fori_loop(0, 2, body, x).numpy()
    np.testing.assert_allclose(run(), [1.0, 2.0, 3.0])
    n = traces[0]
    np.testing.assert_allclose(run(), [1.0, 2.0, 3.0])
    assert traces[0] == n                            # reused
    with la.no_grad():
        model.lin.weight.copy_(la.asarray(2 * np.eye(3, dtype=np.float32)))
    np.testing.assert_allclose(run(), [4.0, 8.0, 12.0])
    assert traces[0] == n                            # a tensor: reused, its new value
    model.lin.weight = la.nn.Parameter(la.asarray(np.eye(3, dtype=np.float32)))
    np.testing.assert_allclose(run(), [1.0, 2.0, 3.0])     # another tensor: its value
    n = traces[0]
    model.gain = 0.5
    np.testing.assert_allclose(run(), [0.25, 0.5, 0.75])
    assert traces[0] > n                             # a Python attribute: traced again
    n = traces[0]
    model.lin.register_buffer("extra", la.zeros(3))
    run()
    assert traces[0] > n                             # a buffer added: traced again
    n = traces[0]
    model.lin = la.nn.Identity()
    np.testing.assert_allclose(run(), [0.25, 0.5, 0.75])
    assert traces[0] > n                             # another submodule: traced again


def test_what_the_key_cannot_describe_traces_every_time(traces):
    obj = _Slotted(2.0)
    body = lambda i, v: v * obj.s      # noqa: E731  (an object with __slots__)
    assert la.fori_loop(0, 2, body, la.asarray(1.0)).item() == 4.0
    n = traces[0]
    assert la.fori_loop(0, 2, body, la.asarray(1.0)).item() == 4.0
    assert traces[0] > n
    # a draw from NumPy's generator or a clock read while tracing: each call traces again
    for read in (lambda: np.random.uniform(), time.perf_counter):
        body = lambda i, v: v + read()     # noqa: E731
        n = traces[0]
        la.fori_loop(0, 1, body, la.asarray(1.0)).item()
        la.fori_loop(0, 1, body, la.asarray(1.0)).item()
        assert traces[0] == n + 4
    # a random draw reads the generator's state: each call draws again, as before
    noisy = lambda i, v: v + la.random.uniform((3,))    # noqa: E731
    a = la.fori_loop(0, 1, noisy, la.zeros(3)).numpy()
    n = traces[0]
    b = la.fori_loop(0, 1, noisy, la.zeros(3)).numpy()
    assert traces[0] > n and not np.array_equal(a, b)


def test_a_library_closure_is_keyed_by_what_it_closes_over(traces):
    s = 2.0
    user = lambda v: v * s                 # noqa: E731

    def wrapper(v):                        # as a library's closure over a user function
        return user(v)
    wrapper.__module__ = "lazyarray.wrapping"
    body = lambda i, v: wrapper(v)         # noqa: E731
    np.testing.assert_allclose(la.fori_loop(0, 1, body, la.ones(2)).numpy(), [2.0, 2.0])
    s = 3.0
    np.testing.assert_allclose(la.fori_loop(0, 1, body, la.ones(2)).numpy(), [3.0, 3.0])


def test_a_class_is_walked_once_however_many_instances(traces, monkeypatch):
    """A model's layers are instances of a few classes: the key walks each class (its
    methods' code and globals) once, not once per instance (a 4-layer GPT's key took
    8.7 ms, now 0.85). Instances still differ by their own attributes."""
    walked = []
    real = trace_cache._Walk._class_key

    def counting(self, cls):
        walked.append(cls)
        return real(self, cls)
    monkeypatch.setattr(trace_cache._Walk, "_class_key", counting)
    layers = [_Scale(1.0 + k, la.asarray(float(k))) for k in range(20)]

    def body(i, v):
        for layer in layers:
            v = layer(v) * 0.5
        return v
    want = la.fori_loop(0, 2, body, la.asarray(1.0)).item()
    assert walked.count(_Scale) == 2       # the key at the lookup, and again at the store
    del walked[:]
    layers[3].s = 7.0                      # one instance's attribute: traced again
    n = traces[0]
    got = la.fori_loop(0, 2, body, la.asarray(1.0)).item()
    assert traces[0] > n and got != want and walked.count(_Scale) == 2
    v = 1.0
    for _ in range(2):
        for layer in layers:
            v = (v * layer.s * layer.factor + layer.w.item()) * 0.5
    np.testing.assert_allclose(got, v, rtol=1e-5)      # (float32)


def test_two_closed_over_tensors_one_at_the_first_call_are_read_apart_later(traces):
    """A body reading `a` and `b` traced while they were one tensor reads that node
    once; the key holds which of its tensors are one node, so once they differ it traces
    again (reused, it read `a` for both)."""
    a = la.asarray(np.ones(3, np.float32))
    box = {"a": a, "b": a}

    def body(i, x):
        return x + box["a"] * 2.0 + box["b"]
    np.testing.assert_allclose(la.fori_loop(0, 1, body, la.zeros(3)).numpy(), 3.0)
    first = traces[0]
    box["b"] = la.asarray(np.full(3, 10.0, np.float32))
    np.testing.assert_allclose(la.fori_loop(0, 1, body, la.zeros(3)).numpy(), 12.0)
    assert traces[0] == 2 * first


def test_a_closed_over_constant_not_yet_computed_is_not_kept(traces):
    """`zeros + 1.0` is folded while tracing: kept, the trace would ignore the tensor it
    read once the tensor held another value."""
    box = {"c": la.zeros(3)}

    def body(i, x):
        return x + (box["c"] + 1.0)
    np.testing.assert_allclose(la.fori_loop(0, 1, body, la.zeros(3)).numpy(), 1.0)
    box["c"] = la.asarray(np.full(3, 10.0, np.float32))
    np.testing.assert_allclose(la.fori_loop(0, 1, body, la.zeros(3)).numpy(), 11.0)


def test_a_constant_initial_state_keeps_the_trace(traces):
    """An operand (the loop's state) is a placeholder inside the body, never folded: a
    loop started from la.zeros is reused (the example decoder's compiled loop)."""
    w = la.asarray(np.array([1.0, 2.0, 3.0], np.float32))

    def body(i, x):
        return x + w
    for k in range(3):
        np.testing.assert_allclose(la.fori_loop(0, 2, body, la.zeros(3)).numpy(),
                                   [2.0, 4.0, 6.0])
        if k == 0:
            first = traces[0]
    assert traces[0] == first
