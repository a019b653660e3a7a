"""Adversarial cases for module-call reuse (lazyarray/nn/module_reuse.py): each row is a
scenario of calls (with changes between them) run with reuse on and with it off; the
results must be equal, and a row marked so must have replayed at least once."""
from __future__ import annotations

import copy
import functools
import gc
import pickle
import types
import weakref

import numpy as np
import pytest

import lazyarray as la
from lazyarray.nn import module_reuse as MR

nn = la.nn
F = la.nn.functional


def _rng():
    return np.random.default_rng(7)


def _fill(m, seed=1):
    """Deterministic parameter values (both runs of a row see the same model)."""
    rng = np.random.default_rng(seed)
    with la.no_grad():
        for p in m.parameters():
            p.copy_(la.asarray(rng.standard_normal(p.shape).astype(np.float32) * 0.5))
    la.sync()
    return m


def _x(*shape, seed=0):
    return la.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


def _np(out):
    """Every array of a nested result, in order."""
    if isinstance(out, la.Tensor):
        return [out.numpy()]
    if isinstance(out, (tuple, list)):
        return [a for v in out for a in _np(v)]
    if isinstance(out, dict):
        return [a for k in out for a in _np(out[k])]
    return [np.asarray(-999.0 if out is None else float(out))]


class Lin(nn.Module):
    def __init__(self, i=4, o=3):
        super().__init__()
        self.l = nn.Linear(i, o)

    def forward(self, x):
        return self.l(x)


# ---- scenarios: each returns the arrays it saw; run once with reuse, once without -----------

def kwargs_vs_positional():
    class M(Lin):
        def forward(self, x, scale=2.0):
            return self.l(x) * scale
    m, x, out = _fill(M()), _x(2, 4), []
    for call in (lambda: m(x, 2.0), lambda: m(x, scale=3.0), lambda: m(x),
                 lambda: m(x, 2.0), lambda: m(x=x, scale=5.0), lambda: m(x, scale=3.0)):
        out += _np(call())
    return out


def defaults_changed():
    class M(Lin):
        def forward(self, x, scale=2.0, *, shift=1.0):
            return self.l(x) * scale + shift
    m, x, out = _fill(M()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    M.forward.__defaults__ = (5.0,)
    out += _np(m(x)) + _np(m(x))
    M.forward.__kwdefaults__ = {"shift": -3.0}
    out += _np(m(x)) + _np(m(x))
    return out


def star_args_forwarded():
    class Inner(Lin):
        def forward(self, *xs, **kw):
            return sum(self.l(x) for x in xs) * kw.get("k", 1.0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()

        def forward(self, *a, **kw):
            return self.inner(*a, **kw)
    m, out = _fill(M()), []
    for k in range(3):
        out += _np(m(_x(2, 4, seed=k), _x(2, 4, seed=k + 9), k=float(k % 2 + 1)))
        out += _np(m(_x(2, 4, seed=k)))
        out += _np(m(_x(2, 4, seed=k), k=2.0))
    return out


def containers_in_and_out():
    class M(Lin):
        def forward(self, pair, items, table):
            a, b = pair
            y = self.l(a + b)
            return {"y": y, "list": [items[0] * 2, (items[1], None, 3)], "n": table["n"]}, y
    m, out = _fill(M()), []
    for k in range(3):
        out += _np(m((_x(2, 4, seed=k), _x(2, 4, seed=1)), [_x(3), _x(2, seed=k)],
                     {"n": k % 2, "unused": _x(1)}))
    return out


def returns_its_argument_and_a_parameter():
    class M(Lin):
        def forward(self, x):
            return x, self.l.weight, self.l(x), x
    m, out = _fill(M()), []
    for k in range(3):
        x = _x(2, 4, seed=k)
        a, w, y, b = m(x)
        assert a is x and b is x and w is m.l.weight
        a += 1.0                         # the user's own tensor: x itself
        out += _np((x, w, y))
        with la.no_grad():
            m.l.weight.copy_(m.l.weight * 0.5)
    return out


def returns_views():
    class M(nn.Module):
        def forward(self, x):
            return x[0], x.T, x.reshape(x.shape), x.reshape(-1)[1:3], x[...]
    m, out = M(), []
    for k in range(3):
        x = _x(2, 4, seed=k)
        vs = m(x)
        x += 10.0                        # after the call: views in lazyarray are copies?
        out += _np(vs) + _np(x)
    return out


def same_output_twice():
    class M(Lin):
        def forward(self, x):
            y = self.l(x)
            return y, y, [y]
    m, out = _fill(M()), []
    for k in range(3):
        a, b, (c,) = m(_x(2, 4, seed=k))
        assert a is b is c
        a += 1.0
        out += _np((a, b, c))
    return out


def in_place_on_arguments():
    class M(nn.Module):
        def forward(self, x, log, pos):
            x += 1.0
            log[pos] = x.sum()
            x[0] = 2.0
            return x * 2.0
    m, out = M(), []
    log = la.asarray(np.zeros(4, np.float32))
    for k in range(4):
        x = _x(2, 3, seed=k)
        y = m(x, log, k % 2)
        out += _np((y, x, log))
    return out


def in_place_on_a_counter_buffer():
    class M(Lin):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", la.asarray(np.zeros((), np.float32)))

        def forward(self, x):
            self.count += 1.0
            self.count.add_(1.0)
            return self.l(x) * self.count
    m, out = _fill(M()), []
    for k in range(4):
        out += _np(m(_x(2, 4, seed=k))) + _np(m.count)
    return out


def batchnorm_train_and_eval():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(4)

        def forward(self, x):
            return self.bn(x) * 2.0
    m, out = M(), []
    for k in range(6):
        m.train(k % 3 != 2)
        out += _np(m(_x(5, 4, seed=k))) + _np((m.bn.running_mean, m.bn.running_var))
    return out


def parameters_replaced():
    m, x, out = _fill(Lin()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    m.l.weight.data = la.asarray(np.ones((3, 4), np.float32))
    out += _np(m(x))
    with la.no_grad():
        m.l.bias.copy_(la.asarray(np.full(3, 2.0, np.float32)))
    out += _np(m(x))
    m.l.weight.requires_grad_(False)
    out += _np(m(x))
    m.l.weight.requires_grad_(True)
    out += _np(m(x))
    m.l.weight = nn.Parameter(la.asarray(np.full((3, 4), -1.0, np.float32)))
    out += _np(m(x))
    return out


def casts():
    m, x, out = _fill(Lin()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    m.to(dtype=la.float64)
    out += _np(m(x.to(dtype=la.float64))) + _np(m(x.to(dtype=la.float64)))
    m.to(dtype=la.float16)
    half = x.to(dtype=la.float16)
    out += [a.astype(np.float32) for a in _np(m(half)) + _np(m(half))]
    m.to(dtype=la.float32)
    out += _np(m(x))
    return out


def autocast_and_settings():
    class M(Lin):
        def forward(self, x):
            return self.l(x) * (2.0 if la.config.verify else 1.0)
    m, x, out = _fill(M()), _x(2, 4), []
    out += _np(m(x))
    with la.autocast("bfloat16"):
        out += [a.astype(np.float32) for a in _np(m(x)) + _np(m(x))]
    out += _np(m(x))
    with la.config.override(verify=True):
        out += _np(m(x)) + _np(m(x))
    la.config.verify = True
    try:
        out += _np(m(x))
    finally:
        la.config.verify = False
    out += _np(m(x))
    return out


def shared_and_listed_submodules():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.shared = nn.Linear(4, 4)
            self.blocks = nn.ModuleList([self.shared, nn.Linear(4, 4)])
            self.table = nn.ModuleDict({"a": nn.Linear(4, 4)})
            self.plain = [nn.Linear(4, 4)]

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.plain[0](self.table["a"](self.shared(x)))
    m, x, out = _fill(M()), _x(2, 4), []
    _fill(m.plain[0], seed=4)
    out += _np(m(x)) + _np(m(x))
    m.plain[0] = _fill(nn.Linear(4, 4), seed=5)
    out += _np(m(x))
    m.blocks.append(_fill(nn.Linear(4, 4), seed=6))
    out += _np(m(x))
    m.table["a"] = _fill(nn.Linear(4, 4), seed=7)
    out += _np(m(x))
    m.plain.append(nn.Linear(4, 4))      # not read: still right
    out += _np(m(x))
    return out


def closures_lambdas_partials():
    k = [2.0]
    scale = 3.0

    def act(t, s=1.0):
        return t * scale * s

    class M(Lin):
        def __init__(self):
            super().__init__()
            self.fn = lambda t: t * k[0]
            self.act = act
            self.p = functools.partial(act, s=2.0)

        def forward(self, x):
            return self.p(self.act(self.fn(self.l(x))))
    m, x, out = _fill(M()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    k[0] = 5.0
    out += _np(m(x))
    scale = 7.0                          # the closure cell of act  # noqa: F841
    out += _np(m(x))
    m.p.keywords["s"] = 4.0
    out += _np(m(x))
    m.fn = lambda t: t - 1.0
    out += _np(m(x))
    return out


def _g1(t):
    return t * 2.0


ACT = _g1


class UsesGlobal(Lin):
    factor = 1.0

    def forward(self, x):
        return ACT(self.l(x)) * self.factor


def globals_and_class_attributes():
    global ACT
    m, x, out = _fill(UsesGlobal()), _x(2, 4), []
    try:
        out += _np(m(x)) + _np(m(x))
        ACT = lambda t: t - 3.0          # noqa: E731
        out += _np(m(x))
        UsesGlobal.factor = 4.0
        out += _np(m(x))
    finally:
        ACT, UsesGlobal.factor = _g1, 1.0
    return out


def monkeypatched_methods():
    class M(Lin):
        def forward(self, x):
            return self.l(x) * 2.0
    m, x, out = _fill(M()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    m.forward = types.MethodType(lambda self, x: self.l(x) * 3.0, m)
    out += _np(m(x)) + _np(m(x))
    del m.forward
    M.forward = lambda self, x: self.l(x) * 4.0
    out += _np(m(x)) + _np(m(x))
    old = nn.Linear.forward
    try:
        nn.Linear.forward = lambda self, x: old(self, x) * 10.0
        out += _np(m(x)) + _np(m(x))
    finally:
        nn.Linear.forward = old
    out += _np(m(x))
    return out


def forward_raises_first():
    class M(Lin):
        def forward(self, x, fail):
            y = self.l(x)
            if fail:
                raise ValueError("failing on purpose")
            return y
    m, x, out = _fill(M()), _x(2, 4), []
    for fail in (True, False, True, False, False):
        try:
            out += _np(m(x, fail))
        except ValueError:
            out.append(np.array(-1.0))
    return out


def reentrant_top_level_module():
    other = _fill(Lin(3, 3), seed=3)

    class M(Lin):
        def forward(self, x):
            return other(self.l(x)) + other(self.l(x) * 2.0)
    m, x, out = _fill(M()), _x(2, 4), []
    out += _np(other(_x(2, 3))) + _np(m(x)) + _np(m(x)) + _np(other(_x(2, 3)))
    _fill(other, seed=4)
    out += _np(m(x))
    other.l = _fill(nn.Linear(3, 3), seed=5)
    out += _np(m(x))
    return out


def scalars_and_scalar_tensors():
    class M(Lin):
        def forward(self, x, pos, p2=None):
            y = self.l(x) * pos
            return y if p2 is None else y + p2
    m, x, out = _fill(M()), _x(2, 4), []
    for pos in (3, 4, 3, 4.0, True, 4):
        out += _np(m(x, pos))
    for pos in range(3):
        out += _np(m(x, 1, la.asarray(pos)))
        out += _np(m(x, 1, la.asarray(np.float32(pos)) + 1.0))
    return out


def numpy_and_none_arguments():
    class M(Lin):
        def forward(self, x, extra=None):
            y = self.l(x)
            return y if extra is None else y + la.asarray(extra)
    m, x, out = _fill(M()), _x(2, 4), []
    for k in range(3):
        out += _np(m(x, np.full(3, k, np.float32))) + _np(m(x, None))
    return out


def shapes_and_shape_dependent_flow():
    class M(Lin):
        def forward(self, x):
            y = self.l(x)
            return y * 2.0 if x.shape[0] > 2 else y - 1.0
    m, out = _fill(M()), []
    for n in (1, 3, 1, 3, 5, 2):
        out += _np(m(_x(n, 4, seed=n)))
    return out


def devices():
    m, out = _fill(Lin()), []
    x = _x(2, 4)
    out += _np(m(x)) + _np(m(x))
    m.to("fakecuda")
    out += _np(m(x.to("fakecuda"))) + _np(m(x.to("fakecuda")))
    m.to("cpu")
    out += _np(m(x))
    return out


def state_dict_and_pickle_round_trips():
    m, x, out = _fill(Lin()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    m.load_state_dict(_fill(Lin(), seed=9).state_dict())
    out += _np(m(x))
    m2 = pickle.loads(pickle.dumps(m))
    out += _np(m2(x)) + _np(m2(x)) + _np(m(x))
    m3 = copy.deepcopy(m)
    _fill(m3, seed=11)
    out += _np(m3(x)) + _np(m(x)) + _np(m3(x))
    return out


def in_loop_bodies():
    m = _fill(Lin(4, 4))
    x = _x(2, 4)
    out = _np(m(x))
    out += _np(la.fori_loop(0, 3, lambda i, c: m(c), x))
    out += _np(la.vmap(lambda v: m(v))(_x(3, 2, 4)))
    out += _np(m(x))
    return out


def under_a_tape_and_grad():
    m = _fill(Lin(4, 1))
    x = _x(2, 4)
    out = _np(m(x)) + _np(m(x))
    g = la.grad(lambda v: m(v).sum())(x)
    out += _np(g)
    with la.GradientTape() as tape:
        x2 = _x(2, 4)
        tape.watch(x2)
        y = m(x2).sum()
    out += _np(tape.gradient(y, x2))
    return out


def aliases_of_inputs():
    """Outputs that hold an input's node, the input written after: each output keeps the
    value forward gave it."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.buf = la.asarray(np.arange(3, dtype=np.float32))

        def forward(self, x, y):
            a, b, c = x[...], x.reshape(x.shape), self.buf.reshape(3)
            x.add_(1.0)
            self.buf.mul_(2.0)
            return a, b, c, x + y
    m, out = M(), []
    for k in range(3):
        x = _x(3, seed=k)
        out += _np(m(x, x)) + _np(m(x, _x(3)))
        y = _x(3, seed=5)
        out += _np(m(y, y)) + _np((x, y, m.buf))
    return out


GLOBAL_T = [None]


def _gt(t):
    return t * GLOBAL_T[0] + TABLE_T


TABLE_T = None


def global_tensors_read_and_written():
    global TABLE_T

    class M(Lin):
        def forward(self, x):
            y = _gt(self.l(x))
            GLOBAL_T[0].add_(1.0)
            return y
    GLOBAL_T[0] = la.asarray(np.ones(3, np.float32))
    TABLE_T = la.asarray(np.full(3, 2.0, np.float32))
    m, x, out = _fill(M()), _x(2, 4), []
    try:
        for k in range(4):
            out += _np(m(x)) + _np(GLOBAL_T[0])
            if k == 1:
                TABLE_T = la.asarray(np.full(3, -2.0, np.float32))
            if k == 2:
                GLOBAL_T[0] = la.asarray(np.zeros(3, np.float32))
    finally:
        GLOBAL_T[0] = TABLE_T = None
    return out


def python_and_numpy_attributes():
    class M(Lin):
        n = 1

        def __init__(self):
            super().__init__()
            self.cfg = {"s": 2.0, "n": 2}
            self.mask = np.array([1.0, 0.0, 1.0], np.float32)

        @property
        def width(self):
            return self.cfg["n"] + self.n

        def forward(self, x):
            y = self.l(x)[:, :self.width] * self.cfg["s"]
            return y * float(self.mask[1])
    m, x, out = _fill(M()), _x(2, 4), []
    out += _np(m(x)) + _np(m(x))
    m.cfg["s"] = 3.0
    out += _np(m(x))
    m.mask[1] = 5.0
    out += _np(m(x))
    M.n = 0
    out += _np(m(x))
    m.cfg["n"] = 1
    out += _np(m(x)) + _np(m(x))
    return out


def argument_dtypes_and_grad_modes():
    m, out = _fill(Lin()), []
    x = _x(2, 4)
    out += _np(m(x)) + _np(m(x))
    out += _np(m(x.to(dtype=la.float64)))
    with la.enable_grad():
        out += _np(m(x))
        xg = _x(2, 4)
        xg.requires_grad_(True)
        y = m(xg)
        y.sum().backward()
        out += _np(y) + _np(xg.grad) + _np(m.l.weight.grad)
        out += _np(m(x))
    out += _np(m(x))
    return out


def parameter_as_argument():
    class M(Lin):
        def forward(self, w, x):
            return self.l(x) + w.sum()
    m, out = _fill(M()), []
    x = _x(2, 4)
    for w in (_x(3, 4), m.l.weight, _x(3, 4, seed=3), m.l.weight):
        out += _np(m(w, x))
    return out


def requires_grad_read():
    """forward branching on a tensor's requires_grad (replayed with the old flag before)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(la.asarray(np.ones(3, np.float32)))

        def forward(self, x):
            return x * (2.0 if self.w.requires_grad else 3.0) * (5.0 if x.requires_grad else 1.0)
    m, x, out = M(), _x(3), []
    x2 = _x(3, seed=2)
    x2.requires_grad_(True)               # before the call remembered
    out += _np(m(x)) + _np(m(x))
    m.w.requires_grad_(False)
    out += _np(m(x)) + _np(m(x))
    out += _np(m(x2)) + _np(m(x))
    return out


def tied_weights_and_written_buffer_returned():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 4)
            self.head = nn.Linear(4, 5, bias=False)
            self.head.weight = self.emb.weight
            self.register_buffer("steps", la.asarray(np.zeros((), np.float32)))

        def forward(self, ids):
            self.steps.add_(1.0)
            return self.head(self.emb(ids)), self.steps
    m, out = _fill(M()), []
    ids = la.asarray(np.array([1, 3], np.int64))
    for k in range(5):
        if k == 3:                       # untied
            m.head.weight = nn.Parameter(la.asarray(np.ones((5, 4), np.float32)))
        y, steps = m(ids)
        assert steps is m.steps
        out += _np((y, steps))
    return out


def random_draws_in_methods():
    """Methods that draw random numbers: `__init__` (never run by forward: reused), a
    helper forward calls (run at every call: the draw is never frozen)."""
    class M(Lin):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(la.asarray(np.random.standard_normal(3).astype(np.float32)))

        def jitter(self):
            return float(np.random.standard_normal())

        def forward(self, x, noisy):
            y = self.l(x) * self.w
            return y + self.jitter() if noisy else y
    np.random.seed(5)
    m, x, out = _fill(M()), _x(2, 4), []
    for noisy in (False, False, True, True, False, True):
        out += _np(m(x, noisy))
    return out


def grad_enabled_inside_forward():
    """forward recording gradients under an outer no_grad: its outputs require grad."""
    class M(Lin):
        def forward(self, x):
            with la.enable_grad():
                return self.l(x)
    m, x, out = _fill(M()), _x(2, 4), []
    for _ in range(3):
        y = m(x)
        with la.enable_grad():
            assert y.requires_grad
        out += _np(y)
    with la.enable_grad():
        y.sum().backward()
    return out + _np(m.l.weight.grad)


def training_steps_between_inference_calls():
    """An optimizer step (and dropout drawing in training mode) between evaluations: each
    evaluation reads the current weights, and the random stream is the same."""
    class M(Lin):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.l(x))
    la.random.seed(3)
    m, x, out = _fill(M()), _x(2, 4), []
    opt = la.optim.SGD(m.parameters(), lr=0.1)
    for k in range(4):
        m.train()
        with la.enable_grad():
            loss = (m(x) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        m.eval()
        out += _np(m(x)) + _np(m(x)) + _np(loss)
    return out


def torch_front_end_modules():
    import lazyarray.torch as torch
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8))
    att = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    _fill(m), _fill(att, seed=2)
    out = []
    with torch.inference_mode():
        for k in range(3):
            h = m(_x(1, 3, 4, seed=k))
            a, w = att(h, h, h)
            out += _np((h, a, w)) + _np(att(h, h, h, need_weights=False)[0])
    return out


LAST_SEEN = None


class StoresGlobal(Lin):
    def forward(self, x):
        global LAST_SEEN
        LAST_SEEN = x                    # stored, never read
        return self.l(x)


def a_global_stored_not_read():
    global LAST_SEEN
    m, out = _fill(StoresGlobal()), []
    try:
        for k in range(3):
            x = _x(2, 4, seed=k)
            out += _np(m(x))
            assert LAST_SEEN is x
    finally:
        LAST_SEEN = None
    return out


def control_flow_inside_forward():
    """A loop and a scan inside forward, reading the module's weights: the remembered
    computation holds them whole."""
    class M(Lin):
        def __init__(self):
            super().__init__(4, 4)

        def forward(self, x, n):
            h = la.fori_loop(0, n, lambda i, h: la.tanh(self.l(h)), x)
            return la.cond(h.sum() > 0, lambda v: v * 2.0, lambda v: v - 1.0, h)
    m, out = _fill(M()), []
    for k in range(4):
        out += _np(m(_x(2, 4, seed=k % 2), 2 + k % 2))
        with la.no_grad():
            m.l.weight.mul_(0.9)
    return out


def copy_between_arguments():
    """forward writing one argument with another's node (copy_): the entry compares the
    inputs' sharing as the call began (it compared it after the write: never again)."""
    class M(nn.Module):
        def forward(self, a, b):
            a.copy_(b)
            return a * 2.0
    m, out = M(), []
    for k in range(4):
        b = la.asarray(np.full(3, k, np.float32)) + 1.0      # pending: a computation
        a = la.asarray(np.zeros(3, np.float32))
        out += _np(m(a, b)) + _np(a)
    return out


def constants_made_in_forward():
    """Outputs and writes that are constants made in forward (la.zeros, arange,
    buf.zero_()): computed inside the replay (they were doubted: never remembered)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("buf", la.asarray(np.ones(3, np.float32)))

        def forward(self, x):
            y = x * 2.0 + self.buf
            self.buf.zero_()
            return y, la.zeros(3), la.arange(3)
    m, out = M(), []
    for k in range(4):
        out += _np(m(la.asarray(np.full(3, k, np.float32)))) + _np(m.buf)
        m.buf.add_(float(k))
    return out


def copy_from_a_value():
    """forward copying a computed value (a buffer, an argument) into a buffer: the copy
    is made by the replay too (it was doubted: never remembered)."""
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("state", la.asarray(np.zeros(3, np.float32)))
            self.register_buffer("init", la.asarray(np.ones(3, np.float32)))

        def forward(self, x, reset):
            if reset:
                self.state.copy_(self.init)
            else:
                self.state.copy_(x)
            return self.state * 2.0
    m, out = M(), []
    for k in range(6):
        x = la.asarray(np.full(3, k, np.float32))
        x.numpy()
        out += _np(m(x, k % 3 == 0)) + _np(m.state)
        with la.no_grad():
            m.init.add_(1.0)
    return out


def reentrant_module_writing_its_buffer():
    """A top-level module (remembered on its own) called inside another's forward, writing
    its buffer: the outer replay makes the inner write, the inner replays stay right."""
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("n", la.asarray(np.zeros((), np.float32)))

        def forward(self, x):
            self.n.add_(1.0)
            return x * self.n

    inner = Counter()

    class Outer(Lin):
        def forward(self, x):
            return inner(self.l(x)) + inner(x.sum())
    m, x, out = _fill(Outer()), _x(2, 4), []
    for _ in range(3):
        out += _np(m(x)) + _np(inner(x)) + _np(inner.n)
    return out


class EqualByValue(nn.Module):
    """Two instances equal (and hashing equal) by their own __eq__."""

    def __init__(self, k):
        super().__init__()
        self.w = la.asarray(np.full(3, k, np.float32))
        self.k = k

    def __eq__(self, other):
        return type(other) is EqualByValue and other.k == self.k

    def __hash__(self):
        return hash(self.k)

    def forward(self, x):
        return x * self.w


def modules_equal_by_value():
    """The table found a module by ==: b replayed a's entry (a's weights)."""
    a, b, x = EqualByValue(2.0), EqualByValue(2.0), _x(3)
    out = _np(a(x)) + _np(a(x))
    b.w.mul_(10.0)
    return out + _np(b(x)) + _np(b(x)) + _np(a(x))


def gradient_inside_forward():
    """forward returning la.grad of an energy of its input (a force field)."""
    class M(Lin):
        def __init__(self):
            super().__init__(4, 1)

        def forward(self, x):
            def energy(v):
                return (la.tanh(self.l(v)) ** 2).sum()
            return la.grad(energy)(x), energy(x)
    m, out = _fill(M()), []
    for k in range(4):
        out += _np(m(_x(2, 4, seed=k % 2)))
        with la.no_grad():
            m.l.weight.mul_(1.5)
    return out


SCENARIOS = [
    # (scenario, replays at least once with reuse on)
    (kwargs_vs_positional, True),
    (defaults_changed, True),
    (star_args_forwarded, True),
    (containers_in_and_out, True),
    (returns_its_argument_and_a_parameter, True),
    (returns_views, True),
    (same_output_twice, True),
    (in_place_on_arguments, True),
    (in_place_on_a_counter_buffer, True),
    (batchnorm_train_and_eval, True),
    (parameters_replaced, True),
    (casts, True),
    (autocast_and_settings, True),
    (shared_and_listed_submodules, True),
    (closures_lambdas_partials, True),
    (globals_and_class_attributes, True),
    (monkeypatched_methods, True),
    (forward_raises_first, True),
    (reentrant_top_level_module, True),
    (scalars_and_scalar_tensors, True),
    (numpy_and_none_arguments, True),
    (shapes_and_shape_dependent_flow, True),
    (devices, True),
    (state_dict_and_pickle_round_trips, True),
    (in_loop_bodies, True),
    (under_a_tape_and_grad, True),
    (aliases_of_inputs, True),
    (global_tensors_read_and_written, True),
    (python_and_numpy_attributes, True),
    (argument_dtypes_and_grad_modes, True),
    (parameter_as_argument, True),
    (requires_grad_read, True),
    (tied_weights_and_written_buffer_returned, True),
    (random_draws_in_methods, True),
    (grad_enabled_inside_forward, False),
    (training_steps_between_inference_calls, True),
    (torch_front_end_modules, True),
    (a_global_stored_not_read, False),
    (control_flow_inside_forward, True),
    (copy_between_arguments, True),
    (constants_made_in_forward, True),
    (copy_from_a_value, True),
    (reentrant_module_writing_its_buffer, True),
    (modules_equal_by_value, True),
    (gradient_inside_forward, True),
]


def _run(scenario, reuse):
    MR.clear()
    with la.config.override(module_reuse=reuse), la.no_grad():
        out = scenario()
    return out, MR.COUNTS["hits"]


@pytest.mark.parametrize("scenario,replays", SCENARIOS, ids=[s.__name__ for s, _ in SCENARIOS])
def test_reuse_is_invisible(scenario, replays):
    on, hits = _run(scenario, True)
    off, _ = _run(scenario, False)
    MR.clear()
    assert len(on) == len(off)
    for k, (a, b) in enumerate(zip(on, off)):
        assert a.shape == b.shape and a.dtype == b.dtype, k
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"array {k}")
    if replays:
        assert hits > 0


# ---- memory and errors ---------------------------------------------------------------------

class HoldsItself(Lin):
    """A method of its own as an attribute, and a submodule's reference back to it."""

    def __init__(self, back: bool):
        super().__init__()
        if back:
            self.l.owners = [self]
        else:
            self.act = self.double

    def double(self, t):
        return t * 2.0

    def forward(self, x):
        return self.l(x) * 2.0


@pytest.mark.parametrize("back", [False, True])
def test_a_model_that_holds_itself_is_freed(back):
    """A guard holding such a model (through the bound method, the back reference) kept
    it and its weights alive for ever from the module-level table."""
    MR.clear()
    m, x = _fill(HoldsItself(back)), _x(2, 4)
    with la.config.override(module_reuse=True), la.no_grad():
        ys = [m(x).numpy() for _ in range(3)]
    with la.config.override(module_reuse=False), la.no_grad():
        np.testing.assert_allclose(ys[-1], m(x).numpy(), rtol=1e-6)
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None


class Inverts(nn.Module):
    def forward(self, a):
        return la.linalg.inv(a) + 1.0


def test_a_failing_replay_names_the_module():
    MR.clear()
    m = Inverts()
    good = la.asarray(np.eye(2, dtype=np.float32))
    bad = la.asarray(np.zeros((2, 2), np.float32))
    with la.config.override(module_reuse=True), la.no_grad():
        m(good).numpy()
        y = m(bad)                                       # replayed
        with pytest.raises(np.linalg.LinAlgError, match=r"Inverts\.forward \(replayed.*"
                           r"test_module_reuse_cases.py:\d+.*singular"):
            y.numpy()
    assert MR.COUNTS["hits"] >= 1


def test_gradient_through_a_replay_matches_finite_differences():
    """la.grad of a function calling a remembered module (a replay: the call's vjp), in
    float64, against central differences."""
    MR.clear()
    m = _fill(Lin(4, 3)).to(dtype=la.float64)
    x0 = np.random.default_rng(3).standard_normal((2, 4))

    def f(v):
        return (la.tanh(m(v)) ** 2).sum()
    with la.config.override(module_reuse=True):
        with la.no_grad():
            m(la.asarray(x0)), m(la.asarray(x0))          # remembered, replayed
        g = la.grad(f)(la.asarray(x0)).numpy()
    assert MR.COUNTS["hits"] >= 1
    eps, fd = 1e-6, np.zeros_like(x0)
    with la.no_grad():
        for i in np.ndindex(x0.shape):
            d = np.zeros_like(x0)
            d[i] = eps
            up, down = (float(f(la.asarray(x0 + s * d)).numpy()) for s in (1, -1))
            fd[i] = (up - down) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_replaced_weights_are_freed():
    """A remembered call's entry held the tensors of its time: weights replaced by new
    tensors (`m.l.weight = Parameter(...)`, a state loaded as new tensors) stayed alive
    as long as the model."""
    MR.clear()
    m, x = _fill(Lin()), _x(2, 4)
    with la.config.override(module_reuse=True), la.no_grad():
        m(x).numpy(), m(x).numpy()
        old = weakref.ref(m.l.weight)
        m.l.weight = nn.Parameter(la.asarray(np.ones((3, 4), np.float32)))
        y = m(x).numpy(), m(x).numpy()
    gc.collect()
    assert old() is None
    assert MR.COUNTS["hits"] >= 2
    np.testing.assert_allclose(y[1], x.numpy() @ np.ones((4, 3)) + m.l.bias.numpy(), rtol=1e-5)


class Verbose(Lin):
    def describe(self):
        print("a Lin")

    def forward(self, x, say):
        if say:
            self.describe()
        return self.l(x)


def test_a_method_that_prints_stops_reuse_only_when_forward_calls_it(capsys):
    MR.clear()
    m, x = _fill(Verbose()), _x(2, 4)
    with la.config.override(module_reuse=True), la.no_grad():
        for _ in range(3):
            m(x, False).numpy()
        assert MR.COUNTS["hits"] == 2
        for _ in range(3):
            m(x, True).numpy()
    assert capsys.readouterr().out.count("a Lin") == 3
