"""A loop's state updated in place: the body of a `while` is compiled with its carried
state donated (compiler/codegen/control_steps.carried_state), so a state value that the
body only updates by `dynamic_update_slice` (a KV cache write) or elementwise is written
over its old value in one buffer -- the update alone, not a copy of the whole buffer --
and only a value the body reads at other indices while writing keeps two buffers,
swapped (devices/cpu/native_control.py). Each case is checked against the reference
interpreter; the plans are checked so that a copy that comes back fails here."""
from __future__ import annotations

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler import compile
from lazyarray.compiler.graph.trace import capture
from lazyarray.compiler.primitives import linalg
from lazyarray.compiler.program import ConditionalStep, LoopStep, WhileStep, sub_program
from lazyarray.devices.cpu import native_control
from lazyarray.devices.cpu.cpu import CPUDevice, CPUExecutable

CTL = native_control.CTL
ROWS, WIDTH = 16, 8


def _weights():
    rng = np.random.default_rng(5)
    return (rng.standard_normal((WIDTH, WIDTH)) * 0.4).astype(np.float32)


def _decode(w, x, cache):
    """A decoding loop's shape: x the running token state (rewritten through a product),
    cache the rows written so far (one row a step, by dynamic_update_slice), and the
    attention-like read of the whole new cache."""
    def body(i, s):
        x, cache = s
        cache = la.dynamic_update_slice(cache, la.reshape(x, (1, WIDTH)), (i, 0))
        att = la.softmax(cache @ la.reshape(x, (WIDTH, 1)), axis=0)
        return la.tanh(la.reshape(att * cache, (ROWS, WIDTH)).sum(axis=0) @ w), cache
    return la.fori_loop(0, 11, body, (x, cache))


def _with_a_reversed_state(w, x, cache):
    """One more state read at other indices while it is rewritten (a flip): that one
    alone keeps two buffers."""
    def body(i, s):
        x, cache, r = s
        cache = la.dynamic_update_slice(cache, la.reshape(x * r[0], (1, WIDTH)), (i, 0))
        return la.tanh(x @ w), cache, la.flip(r, axis=0) * 0.5 + 1.0
    r = la.arange(WIDTH, dtype=la.float32, device=x.device)
    return la.fori_loop(0, 9, body, (x, cache, r))


def _scan(w, x, cache):
    """scan writes each step's y into its stacked ys by dynamic_update_slice."""
    def f(c, row):
        c = la.tanh(c @ w + row)
        return c, c * 2.0
    return la.scan(f, x, cache[:12])


def _inputs():
    rng = np.random.default_rng(7)
    return (_weights(), rng.standard_normal(WIDTH).astype(np.float32),
            np.zeros((ROWS, WIDTH), np.float32))


def _run(fn, device):
    w, x, cache = _inputs()
    out = fn(*(la.asarray(a, device=device) for a in (w, x, cache)))
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else [out])]


def _flat(out):
    return [a for o in out for a in (o if isinstance(o, (tuple, list)) else [o])]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fn", [_decode, _with_a_reversed_state, _scan],
                         ids=lambda f: f.__name__.strip("_"))
def test_loops_with_state_updated_in_place_match_the_interpreter(fn, threads):
    with la.config.override(num_threads=threads):
        got = [_run(fn, "cpu") for _ in range(2)]          # compiled, then a cache hit
    want = _run(fn, "interpreter")
    for g in got:
        for a, b in zip(_flat(g), _flat(want)):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# ---- the plans: what the body writes where ----------------------------------------------

def _while_of(fn):
    """(the CPU executable of fn's program, its while step)."""
    w, x, cache = (la.asarray(a) for a in _inputs())
    out = _flat(fn(w, x, cache))
    program = compile(capture([t._node for t in out]).module(), "cpu")
    exe = CPUExecutable(program, CPUDevice(lambda: {"cache_dir": "off", "num_threads": 1}))
    (step,) = [s for s in exe.steps if isinstance(s, WhileStep)]
    return exe, step


def _ops(block):
    """The op kinds of a native_control.Block."""
    words = block.words
    return [int(words[1 + k * CTL.OP_WORDS]) for k in range(int(words[0]))]


def _control(exe, step):
    native = native_control.ControlStep(step, exe._subs[id(step)], 1,
                                        lambda p: 8 * p + 8, lambda p: exe.values[p].nbytes)
    each = _ops(native.keep[-1])               # the body's block: runs every iteration
    return native, each


@pytest.mark.parametrize("fn, cache, swapped", [(_decode, (ROWS, WIDTH), []),
                                                (_with_a_reversed_state, (ROWS, WIDTH), [(WIDTH,)]),
                                                (_scan, (12, WIDTH), [])],
                         ids=["decode", "reversed", "scan"])
def test_the_body_writes_a_kv_cache_in_place_and_copies_nothing(fn, cache, swapped,
                                                                monkeypatch):
    """The cache (a dynamic_update_slice; scan's ys) and the token state (a new value
    computed from the old, the old dead by then) take the body's parameter buffers: one
    buffer each, nothing swapped, nothing copied per iteration. Only the flipped state
    keeps two buffers, swapped (two table words), never copied; so may a loop's counter
    (a scalar the body reads after writing the next)."""
    # the token state's products as library calls: at these sizes they would be fused
    # reductions (linalg.SMALL_PRODUCT), which read the old state at every index while
    # writing the new one, so it too would keep two buffers (swapped, not copied)
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)
    exe, step = _while_of(fn)
    body = sub_program(step.body)
    cache_param = next(p for p, _ in body.params
                       if tuple(body.values[str(p)]["shape"]) == cache)
    assert any(x == cache_param for _, x in body.aliases), body.aliases
    native, each = _control(exe, step)
    shape = lambda k: tuple(exe.values[step.operands[k]].shape)      # noqa: E731
    assert [shape(k) for k in native.double if shape(k)] == swapped
    assert native.in_place == len(step.varying) - len(native.double) >= 2
    assert each.count(CTL.OP_SWAP) == len(native.double)
    assert CTL.OP_COPY not in each        # (FILLs reset reductions' partials)


def test_the_update_in_place_is_a_loop_over_the_update_alone(monkeypatch):
    """The kernel writing the cache loops over the update's one row, not the cache's
    ROWS rows (a kernel over the whole buffer would copy it)."""
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)     # (the one loop naming the cache)
    exe, step = _while_of(_decode)
    body = sub_program(step.body)
    dus = [int(p) for p, v in body.values.items() if v["op"] == "dynamic_update_slice"]
    (writer,) = [s for s in body.steps if isinstance(s, LoopStep)
                 and any(p in s.args for p in dus)]
    assert int(writer.extent) * max(1, int(writer.work)) == WIDTH


def test_a_body_without_donation_would_double_buffer():
    """The control: the same loop run with the body's state not donated (the AOT
    library's plan) keeps two buffers of every state value and swaps them."""
    from lazyarray.compiler.codegen import control_steps
    real = control_steps.carried_state
    control_steps.carried_state = lambda vary: {}
    try:
        exe, step = _while_of(_decode)
    finally:
        control_steps.carried_state = real
    native, each = _control(exe, step)
    assert native.in_place == 0 and each.count(CTL.OP_SWAP) == len(step.varying) == 3


def test_a_branch_writes_its_results_straight_into_the_conditional_outputs():
    """A conditional's branch (run natively) writes into the step's outputs: no copy
    after the branch; the values are the interpreter's."""
    def fn(x, device="cpu"):
        x = la.asarray(x, device=device)
        return la.cond(x.sum() > 0, lambda v: (la.tanh(v), v * 2.0),
                       lambda v: (v - 1.0, la.flip(v, axis=0)), x)
    x = np.arange(-3, 5, dtype=np.float32)
    for sign in (1, -1):
        got = fn(sign * x)
        want = fn(sign * x, "interpreter")
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    out = fn(x)
    program = compile(capture([t._node for t in out]).module(), "cpu")
    exe = CPUExecutable(program, CPUDevice(lambda: {"cache_dir": "off", "num_threads": 1}))
    (step,) = [s for s in exe.steps if isinstance(s, ConditionalStep)]
    native = native_control.ControlStep(step, exe._subs[id(step)], 1, lambda p: 8 * p + 8,
                                        lambda p: exe.values[p].nbytes)
    branches = [b for b in native.keep if isinstance(b, native_control.Block)]
    assert len(branches) == 2
    for block in branches:
        assert CTL.OP_COPY not in _ops(block)


# ---- the operands: never written ---------------------------------------------------------

def test_the_initial_cache_the_user_holds_is_never_written():
    """The loop copies its initial state once at entry: the tensors given as the loop's
    initial value are unchanged however often the body wrote the state in place."""
    w, x, cache = _inputs()
    cache[3] = 7.0
    cache_t, x_t = la.asarray(cache), la.asarray(x)
    out = _decode(la.asarray(w), x_t, cache_t)
    out[1].numpy()
    np.testing.assert_array_equal(cache_t.numpy(), cache)
    np.testing.assert_array_equal(x_t.numpy(), x)
    again = _decode(la.asarray(w), x_t, cache_t)           # the same program again
    np.testing.assert_array_equal(again[1].numpy(), out[1].numpy())


def test_the_python_driven_loop_gives_a_donating_body_copies():
    """A body the native runner cannot run (a sort, a host call) runs from Python: its
    donated state starts as copies, so the user's tensors stay as they were."""
    cache = np.zeros((ROWS, WIDTH), np.float32)
    cache[0] = np.arange(WIDTH)[::-1]
    x = np.arange(WIDTH, dtype=np.float32)

    def body(i, s):
        x, c = s
        c = la.dynamic_update_slice(c, la.reshape(la.sort(x), (1, WIDTH)), (i + 1, 0))
        return x * 1.5 - c[i], c
    cache_t = la.asarray(cache)
    got = la.fori_loop(0, 5, body, (la.asarray(x), cache_t))
    want = la.fori_loop(0, 5, body, (la.asarray(x, device="interpreter"),
                                     la.asarray(cache, device="interpreter")))
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(cache_t.numpy(), cache)


def test_a_donated_cache_is_updated_in_place_by_a_program():
    """The same in-place update outside loops: a program given a donated cache writes
    the new row into the caller's buffer (the update's loop alone, one row of work);
    the rest of the buffer keeps what it held. Values against NumPy."""
    rng = np.random.default_rng(2)
    row = rng.standard_normal((1, WIDTH)).astype(np.float32)
    cache = rng.standard_normal((ROWS, WIDTH)).astype(np.float32)
    c, r, at = la.asarray(cache), la.asarray(row), la.asarray(np.int64(5))
    cap = capture([la.dynamic_update_slice(c, r, (at, 0))._node])
    module = cap.module()
    number = next(module.instructions[p].attrs["number"] for p in module.parameters
                  if module.instructions[p].shape == (ROWS, WIDTH))
    program = compile(module, "cpu", donated={number})
    (step,) = [s for s in program.steps if isinstance(s, LoopStep)]
    assert int(step.extent) * max(1, int(step.work)) == WIDTH
    exe = CPUExecutable(program, CPUDevice(lambda: {"cache_dir": "off", "num_threads": 1}))
    args = [np.asarray(a) for a in cap.args]
    args[number] = cache.copy()                 # the caller's own buffer, given up
    given = args[number]
    (out,) = exe.run(args)
    want = cache.copy()
    want[5] = row[0]
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(given, want)       # written in place: the caller's buffer


def test_states_passed_on_by_the_body_are_never_written():
    """Python-driven (a sort in the body): state 0 takes state 1's old value, whose
    initial value is the weights the body also reads: a state passed on as another's
    is an output of the body and never donated, so the user's arrays stay as they were
    while state 1, computed anew, is."""
    x = np.arange(WIDTH, dtype=np.float32)
    w = np.linspace(1.0, 2.0, WIDTH).astype(np.float32)

    def run(device):
        xs, ws = la.asarray(x, device=device), la.asarray(w, device=device)

        def body(i, s):
            a, b = s
            return b, la.sort(a) * 0.5 + ws      # a's new value: b as it was
        out = la.fori_loop(0, 5, body, (xs, ws))
        return [t.numpy() for t in out], xs, ws
    got, xs, ws = run("cpu")
    want, _, _ = run("interpreter")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_array_equal(xs.numpy(), x)
    np.testing.assert_array_equal(ws.numpy(), w)
