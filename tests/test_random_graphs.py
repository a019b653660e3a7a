"""Random graphs of elementwise, broadcast, reshape, transpose, slice, concatenate, reduce,
select and convert ops, built with the public API: the optimized module, the fused plan
(run kernel by kernel through its buffer slots) and, when the "cpu" device is registered,
the compiled code must all agree with the interpreter on the original module.

Profiles (tests/hypothesis_profiles.py): "ci" (200 examples, the default here) and "long"
(10,000): `pytest tests/test_random_graphs.py --hypothesis-profile=long` or
HYPOTHESIS_PROFILE=long.
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import lazyarray as la
from lazyarray import runtime
from lazyarray.compiler.passes.pipeline import compile_plan, optimize
from lazyarray.compiler.graph.trace import capture
from lazyarray.devices.interpreter import InterpretedExecutable
from test_fusion import check_plan, run_plan

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.float16]


def _profile() -> settings:
    name = os.environ.get("HYPOTHESIS_PROFILE") or settings.get_current_profile_name()
    return settings.get_profile(name if name in ("ci", "long") else "ci")


# ---- building a random graph --------------------------------------------------------------

class Graph:
    def __init__(self, data, dtype) -> None:
        self.data = data
        self.dtype = np.dtype(dtype)
        self.values: list = []      # tensors built so far

    def draw(self, strategy, label: str):
        return self.data.draw(strategy, label=label)

    def pick(self):
        return self.values[self.draw(st.integers(0, len(self.values) - 1), "pick")]

    def leaf(self, shape) -> None:
        seed = self.draw(st.integers(0, 2 ** 16), "seed")
        rng = np.random.default_rng(seed)
        if self.dtype.kind == "f":
            a = rng.standard_normal(shape) * 2
            if self.draw(st.booleans(), "specials") and a.size:
                # NaN and infinities: the values that make float identities unsafe
                for i in rng.integers(0, a.size, 2):
                    a.reshape(-1)[i] = rng.choice([np.nan, np.inf, -np.inf])
        else:
            a = rng.integers(-5, 6, shape)
        self.values.append(la.asarray(np.asarray(a).astype(self.dtype)))


def _same_shape_partner(g: Graph, a):
    same = [v for v in g.values if v.shape == a.shape]
    return same[g.draw(st.integers(0, len(same) - 1), "partner")]


def op_unary(g: Graph, a):
    if g.dtype.kind == "f":
        fn = g.draw(st.sampled_from(["neg", "abs", "exp", "tanh", "sin", "sqrt_abs"]), "unary")
    else:
        fn = g.draw(st.sampled_from(["neg", "abs"]), "unary")
    table = {"neg": lambda x: -x, "abs": la.abs, "exp": lambda x: la.exp(la.clip(x, -8, 8)),
             "tanh": la.tanh, "sin": la.sin, "sqrt_abs": lambda x: la.sqrt(la.abs(x))}
    return table[fn](a)


def op_binary(g: Graph, a):
    b = _same_shape_partner(g, a)
    fn = g.draw(st.sampled_from(["add", "sub", "mul", "max", "min"]), "binary")
    table = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
             "max": la.maximum, "min": la.minimum}
    return table[fn](a, b)


def op_divide(g: Graph, a):
    return a / _same_shape_partner(g, a) if g.dtype.kind == "f" else a // 2


def op_scalar(g: Graph, a):
    # 0, 1 and -1 stay constants and exercise the simplifier; 3 becomes a runtime scalar
    c = g.draw(st.sampled_from([0, 1, -1, 3]), "scalar")
    fn = g.draw(st.sampled_from(["add", "sub", "mul", "rsub", "div"]), "scalar op")
    if fn == "add":
        return a + c
    if fn == "sub":
        return a - c
    if fn == "mul":
        return a * c
    if fn == "div" and g.dtype.kind == "f":
        return a / c
    return c - a


def op_broadcast(g: Graph, a):
    n = g.draw(st.integers(1, 3), "new dim")
    return la.broadcast_to(la.expand_dims(a, 0), (n,) + tuple(a.shape))


def op_reshape(g: Graph, a):
    if a.ndim == 0:
        return la.reshape(a, (1,))
    choice = g.draw(st.sampled_from(["flat", "split", "reverse"]), "reshape")
    if choice == "flat" or a.ndim > 2:
        return la.reshape(a, (-1,))
    if choice == "split":
        return la.reshape(a, tuple(a.shape) + (1,))
    return la.reshape(a, tuple(reversed(a.shape)))


def op_transpose(g: Graph, a):
    if a.ndim < 2:
        return a
    perm = g.draw(st.permutations(list(range(a.ndim))), "perm")
    return la.permute_dims(a, tuple(perm))


def op_slice(g: Graph, a):
    if a.ndim == 0:
        return a
    axis = g.draw(st.integers(0, a.ndim - 1), "axis")
    n = a.shape[axis]
    start = g.draw(st.integers(0, n - 1), "start") if n else 0
    step = g.draw(st.integers(1, 2), "step")
    index = [slice(None)] * a.ndim
    index[axis] = slice(start, None, step)
    return a[tuple(index)]


def op_concat(g: Graph, a):
    if a.ndim == 0:
        return a
    b = _same_shape_partner(g, a)
    axis = g.draw(st.integers(0, a.ndim - 1), "axis")
    return la.concat([a, b], axis=axis)


def op_reduce(g: Graph, a):
    if a.ndim == 0:
        return a
    axis = g.draw(st.one_of(st.none(), st.integers(0, a.ndim - 1)), "axis")
    keep = g.draw(st.booleans(), "keepdims")
    kinds = ["sum", "max", "min", "mean"] if g.dtype.kind == "f" else ["sum", "max", "min"]
    fn = g.draw(st.sampled_from(kinds), "reduce")
    return getattr(la, fn)(a, axis=axis, keepdims=keep)


def op_select(g: Graph, a):
    b = _same_shape_partner(g, a)
    return la.where(a > b, a, b * 2)


def op_convert(g: Graph, a):
    wide = np.float64 if g.dtype.kind == "f" else np.int64
    return a.astype(wide).astype(g.dtype)


OPS = [op_unary, op_binary, op_divide, op_scalar, op_scalar, op_broadcast, op_reshape, op_transpose, op_slice,
       op_concat, op_reduce, op_select, op_convert]


def build(data) -> tuple:
    dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
    g = Graph(data, dtype)
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=3), label="shape"))
    for _ in range(data.draw(st.integers(1, 3), label="leaves")):
        g.leaf(shape)
    for _ in range(data.draw(st.integers(1, 10), label="ops")):
        op = data.draw(st.sampled_from(OPS), label="op")
        g.values.append(op(g, g.pick()))
    n_out = data.draw(st.integers(1, 2), label="outputs")
    outs = [g.values[-1]] + [g.pick() for _ in range(n_out - 1)]
    return outs, dtype


# ---- the property -----------------------------------------------------------------------

def _close(got, want, dtype) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    if np.dtype(dtype).kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    tol = 2e-2 if np.dtype(dtype) == np.float16 else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                               rtol=tol, atol=tol, equal_nan=True)


def _cpu_outputs(module, args) -> list:
    device = runtime.get_device("cpu").device
    exe = device.compile(module)
    bufs = [device.put(np.asarray(a)) if isinstance(a, np.ndarray) else a for a in args]
    return [device.get(b) for b in exe.run(bufs)]


@_profile()
@given(st.data())
def test_optimization_and_fusion_preserve_results(data):
    with la.config.override(device="interpreter"):
        outs, dtype = build(data)
        cap = capture([t._node for t in outs])
    module = cap.module()
    args = [np.asarray(a) if isinstance(a, np.ndarray) else a for a in cap.args]
    want = InterpretedExecutable(module).run(args)
    optimized = optimize(module, verify=True)
    for got, w in zip(InterpretedExecutable(optimized).run(args), want):
        _close(got, w, dtype)
    plan = compile_plan(module, verify=True)
    check_plan(plan)
    for got, w in zip(run_plan(plan, args), want):
        _close(got, w, dtype)
    if "cpu" in runtime._FACTORIES:
        for got, w in zip(_cpu_outputs(module, args), want):
            _close(got, w, dtype)
