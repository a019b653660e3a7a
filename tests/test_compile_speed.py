"""What makes compiling fast keeps results right: kernels with the same code share one
function, each kernel's optimization follows its size, and a long compile's progress
line appears only on a terminal. (Speed itself is measured in bench/, never here.)"""
import functools
import io
import re
import sys

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.codegen import llvm_target
from lazyarray.devices.compile_progress import Progress


def _layers(x, weights):
    for w in weights:
        h = x @ w
        h = la.exp(h - h.max(axis=-1, keepdims=True))
        x = h / h.sum(axis=-1, keepdims=True) + la.tanh(x) * 0.5
    return x


def _np_layers(x, weights):
    for w in weights:
        h = x @ w
        h = np.exp(h - h.max(axis=-1, keepdims=True))
        x = h / h.sum(axis=-1, keepdims=True) + np.tanh(x) * 0.5
    return x


def test_repeated_layers_share_functions_and_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    ws = [rng.standard_normal((32, 32)).astype(np.float32) * 0.2 for _ in range(5)]
    out = _layers(la.asarray(x), [la.asarray(w) for w in ws])
    llvm = la.debug.ir(out, "llvm")
    one = la.debug.ir(_layers(la.asarray(x), [la.asarray(ws[0])]), "llvm")
    # five layers need no more functions than one layer (plus the last one's own shapes)
    assert llvm.count("define ") <= one.count("define ") + 1
    np.testing.assert_allclose(out.numpy(), _np_layers(x, ws), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("n,tier", [(100, 0), (1 << 13, 1), (1 << 16, 2)])
def test_optimization_follows_kernel_size(n, tier):
    assert llvm_target.opt_tier(n) == tier
    x = np.linspace(-3, 3, n, dtype=np.float32)
    t = la.tanh(la.asarray(x)) * 2.0 + 1.0
    text = la.debug.ir(t, "llvm")
    assert ("optnone" in text) == (tier == 0)
    assert ("llvm.loop.vectorize.enable" in text) == (tier == 1)
    np.testing.assert_allclose(t.numpy(), np.tanh(x) * 2 + 1, rtol=1e-6, atol=1e-6)


def test_reductions_at_every_tier_match_numpy():
    for n in (50, 1 << 13, 1 << 16):
        x = np.random.default_rng(n).standard_normal((4, n // 4)).astype(np.float32)
        t = la.asarray(x)
        got = (t.sum(axis=1).numpy(), (t * t).mean().numpy(), t.max(axis=0).numpy())
        np.testing.assert_allclose(got[0], x.sum(axis=1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got[1], (x * x).mean(), rtol=1e-4)
        np.testing.assert_array_equal(got[2], x.max(axis=0))


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_line_only_on_a_terminal():
    tty = _Terminal()
    p = Progress("cpu_7", stream=tty, delay=0.0)
    p("generating", 3, 40)
    p("optimizing", 40, 40)
    p.close()
    text = tty.getvalue()
    assert "\r\x1b[K[lazyarray] compiling cpu_7: generating 3/40 kernels" in text
    assert "optimizing 40/40 kernels" in text and text.endswith("\r\x1b[K")
    pipe = io.StringIO()
    q = Progress("cpu_7", stream=pipe, delay=0.0)
    q("generating", 1, 2)
    q.close()
    assert pipe.getvalue() == ""


def test_a_device_compile_shows_its_progress_on_a_terminal(monkeypatch):
    """The CPU device's compile reports through the Progress line (its delay set to 0 so
    a small program shows it): kernel counts rise to the plan's, then LLVM's stages, and
    the line is erased at the end; the result is still right."""
    from lazyarray.devices.cpu import cpu as cpu_device
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(cpu_device, "Progress", functools.partial(Progress, delay=0.0))
    x = np.random.default_rng(5).standard_normal((8, 16)).astype(np.float32)
    with la.config.override(cache_dir="off"):
        t = la.asarray(x)
        got = (la.exp(t @ t.T * 0.1).sum(axis=1) + la.tanh(t).mean()).numpy()
    np.testing.assert_allclose(got, np.exp(x @ x.T * 0.1).sum(axis=1) + np.tanh(x).mean(),
                               rtol=1e-5)
    text = tty.getvalue()
    counts = [(int(k), int(n)) for k, n in re.findall(r"generating (\d+)/(\d+) kernels", text)]
    assert counts and counts[0][0] == 0 and len({n for _, n in counts}) == 1
    assert [k for k, _ in counts] == list(range(len(counts)))     # one update per kernel
    assert re.search(r"optimizing (\d+)/\1 kernels", text)
    assert re.search(r"emitting (\d+)/\1 kernels", text)
    assert text.startswith("\r\x1b[K[lazyarray] compiling ") and text.endswith("\r\x1b[K")


def test_short_compiles_stay_silent():
    tty = _Terminal()
    p = Progress("cpu_8", stream=tty, delay=60.0)
    p("generating", 1, 2)
    p.close()
    assert tty.getvalue() == ""


def test_shared_reduction_functions_write_their_own_outputs():
    """Two full reductions with the same code in one program (a shared function, with a
    second phase reading its own buffers) each give their own sum."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(7), rng.standard_normal(7)

    def f(x):
        for i in range(1, 4):
            x = x * 0.5 + la.sin(x) * i
        return (x * x).sum()
    with la.config.override(cache_dir="off"):
        s1, s2 = f(la.asarray(a)), f(la.asarray(b))
        la.sync()

    def g(x):
        for i in range(1, 4):
            x = x * 0.5 + np.sin(x) * i
        return (x * x).sum()
    np.testing.assert_allclose([s1.item(), s2.item()], [g(a), g(b)], rtol=1e-12)


_COLUMN_SUMS = """HloModule cols

ENTRY main {
  %p.0 = f32[ROWS,COLS] parameter(), number=0
  %c.1 = f32[] constant(3.0)
  %b.2 = f32[ROWS,COLS] broadcast_in_dim(f32[] %c.1), shape={ROWS,COLS}, broadcast_dimensions={}
  %multiply.3 = f32[ROWS,COLS] multiply(f32[ROWS,COLS] %p.0, f32[ROWS,COLS] %b.2)
  %reduce.4 = f32[COLS] reduce(f32[ROWS,COLS] %multiply.3), axes={0}, kind=sum
  %tanh.5 = f32[COLS] tanh(f32[COLS] %reduce.4)
  ROOT %tuple.6 = (f32[COLS]) tuple(%tanh.5)
}
"""


def _attributes(llvm_text: str) -> dict:
    """function name -> the text of its attribute groups, from optimized LLVM IR."""
    groups = dict(re.findall(r"^attributes (#\d+) = \{(.*)\}$", llvm_text, re.M))
    return {m.group(1): " ".join(groups.get(g, "") for g in re.findall(r"#\d+", m.group(2)))
            for m in re.finditer(r'^define [^@]*@"?([\w.]+)"?\(.*\)(.*)\{$', llvm_text, re.M)}


@pytest.mark.parametrize("rows,n,tier", [(16384, 16, 0), (1024, 1024, 1), (256, 8192, 2)])
def test_a_partial_reductions_finish_is_optimized_for_its_own_size(rows, n, tier):
    """A column reduction's chunks run over the whole input, its finish (partials combined,
    epilogue) over the outputs only: the finish's optimization follows its outputs
    (16 channels: not optimized), not the input's size, and the result is unchanged."""
    from lazyarray.compiler import driver
    from lazyarray.compiler.hlo.parser import parse_module
    from lazyarray.compiler.program import PartialStep
    program = driver.compile(parse_module(_COLUMN_SUMS.replace("ROWS", str(rows)).replace("COLS", str(n))), dumps=True)
    (step,) = [s for s in program.steps if isinstance(s, PartialStep)]
    attrs = _attributes(program.dumps["llvm"])
    assert step.finish is not None
    assert "optnone" not in attrs[step.fn]          # rows x n elements: optimized
    assert ("optnone" in attrs[step.finish]) == (tier == 0)
    assert ("llvm.loop.vectorize.enable" in program.dumps["llvm"]) == (tier == 1)
    x = (np.random.default_rng(n).random((rows, n)) / rows).astype(np.float32)
    got = la.tanh((la.asarray(x) * 3.0).sum(axis=0)).numpy()
    np.testing.assert_allclose(got, np.tanh((x.astype(np.float64) * 3.0).sum(axis=0)),
                               rtol=1e-5)


def _conv_module():
    """A convolution's forward pass and both gradients (the CPU's direct convolution
    loops, large enough to be optimized), with a ReLU and a sum around them, as HLO."""
    from lazyarray.compiler.hlo.parser import parse_module
    from lazyarray.lift import lift
    from lazyarray.ops import convolution as C
    conv2d = lift(C.conv2d)
    rng = np.random.default_rng(5)
    x = la.asarray(rng.standard_normal((2, 16, 16, 16)).astype(np.float32))
    w = la.asarray(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.1)
    with la.GradientTape() as tape:
        tape.watch(x)
        tape.watch(w)
        loss = (la.maximum(conv2d(x, w, padding=1), 0.0) ** 2).sum()
    gx, gw = tape.gradient(loss, [x, w])
    module = parse_module(la.debug.ir([loss, gx, gw], stage="hlo"))
    args = {}
    for p in module.parameters:
        ins = module.instructions[p]
        args[ins.attrs["number"]] = (x if ins.shape == tuple(x.shape) else w).numpy()
    return module, [args[k] for k in sorted(args)]


@pytest.mark.parametrize("cores", [1, 2])
def test_convolution_loops_get_the_vector_code_pipeline(monkeypatch, tmp_path, cores):
    """A direct convolution's loops are explicit vector code (`Loop.vector_code`): LLVM
    optimizes them with the short vector code pipeline, in pieces of their own (two
    cores: module_split.Stream) or in a part linked into the rest after (one module);
    every other function gets -O2; the results equal the interpreter's, compiled and
    from the disk cache."""
    from lazyarray.compiler import driver
    from lazyarray.compiler.codegen import module_split
    from lazyarray.devices.cpu.cpu import CPUDevice
    from lazyarray.devices.interpreter import InterpretedExecutable
    monkeypatch.setattr(driver, "_cores", lambda: cores)
    monkeypatch.setattr(module_split, "MIN_SPLIT_CHARS", 0)
    built, real = [], llvm_target.optimize_apart

    def spy(text, name, vector_code=False, **kw):
        built.append((vector_code, re.findall(r'^define [^@]*@"([\w.]+)"', text, re.M)))
        return real(text, name, vector_code=vector_code, **kw)
    monkeypatch.setattr(llvm_target, "optimize_apart", spy)
    module, args = _conv_module()
    want = InterpretedExecutable(module).run(args)
    for attempt in ("compiled", "from the disk cache"):
        exe = CPUDevice(lambda: {"cache_dir": str(tmp_path)}).compile(module)
        assert exe.from_disk_cache == (attempt != "compiled")
        for got, ref in zip(exe.run(args), want):
            np.testing.assert_allclose(got, ref, rtol=2e-4, atol=1e-3 * np.abs(ref).max())
    built.clear()
    program = driver.compile(module)
    fns = {s.fn for s in program.steps if getattr(s, "fn", None)}
    convs = {fn for fn in fns if fn.startswith("opaque_")}
    assert len(convs) >= 2     # the forward (and input gradient: the same code) and the filter's
    vector = {n for kind, names in built if kind for n in names}
    assert vector == convs
    others = {n for kind, names in built if not kind for n in names} & fns
    if cores == 2:
        assert others == fns - convs
    else:                       # (the rest is optimized on the compiling thread)
        assert not others
