"""Ahead-of-time libraries: a function becomes a shared library and a C header; a C
program compiled against them with the system C compiler runs it without Python and gets
lazyarray's results."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import lazyarray as la
from lazyarray.devices.cpu.aot import AOTError, find_blas
from lazyarray.compiler.primitives import linalg

CC = shutil.which(os.environ.get("CC", "cc"))
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")


def _blas_or_skip():
    try:
        return find_blas()
    except AOTError as e:
        pytest.skip(reason=f"no BLAS library to link an AOT library against: {e}")


def _model():
    rng = np.random.default_rng(0)
    lin1, lin2 = la.nn.Linear(12, 16), la.nn.Linear(16, 5)

    def predict(x, bias):
        h = la.tanh(lin1(x)) + bias * 0.25
        logits = lin2(h)
        probs = la.exp(logits - logits.max(axis=-1, keepdims=True))
        probs = probs / probs.sum(axis=-1, keepdims=True)
        return probs, logits.argmax(axis=0), h.sum(axis=0)
    x = rng.standard_normal((7, 12)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    return predict, x, bias


_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include "predict.h"
static void *slurp(const char *path, size_t n) {
    void *p = malloc(n); FILE *f = fopen(path, "rb");
    if (!f || fread(p, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
    fclose(f); return p;
}
int main(int argc, char **argv) {
    float *x = slurp(argv[1], PREDICT_INPUT0_SIZE * sizeof(float));
    float *bias = slurp(argv[2], PREDICT_INPUT1_SIZE * sizeof(float));
    float probs[PREDICT_OUTPUT0_SIZE], sums[PREDICT_OUTPUT2_SIZE];
    int64_t best[PREDICT_OUTPUT1_SIZE];
    if (predict(x, bias, probs, best, sums) != 0) return 3;
    FILE *out = fopen(argv[3], "wb");
    fwrite(probs, sizeof probs, 1, out); fwrite(best, sizeof best, 1, out);
    fwrite(sums, sizeof sums, 1, out); fclose(out);
    return 0;
}
"""


@needs_cc
def test_c_program_runs_the_library_without_python(tmp_path, monkeypatch):
    _blas_or_skip()
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)     # BLAS products, however small
    predict, x, bias = _model()
    lib = la.aot.compile(predict, [x, bias], out_dir=str(tmp_path))
    assert os.path.exists(lib.path) and lib.blas
    header = open(lib.header).read()
    assert "int predict(const float *x0, const float *x1, float *y0, int64_t *y1, float *y2);" in header
    (tmp_path / "main.c").write_text(_MAIN)
    exe = tmp_path / "main"
    subprocess.run([CC, "-O1", "-o", str(exe), str(tmp_path / "main.c"), f"-I{tmp_path}",
                    f"-L{tmp_path}", "-lpredict", f"-Wl,-rpath,{tmp_path}"], check=True)
    x.tofile(tmp_path / "x.bin")
    bias.tofile(tmp_path / "b.bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    subprocess.run([str(exe), str(tmp_path / "x.bin"), str(tmp_path / "b.bin"),
                    str(tmp_path / "out.bin")], check=True, env=env)
    raw = (tmp_path / "out.bin").read_bytes()
    want = [t.numpy() for t in predict(la.asarray(x), la.asarray(bias))]
    probs = np.frombuffer(raw[:7 * 5 * 4], np.float32).reshape(7, 5)
    best = np.frombuffer(raw[7 * 5 * 4:7 * 5 * 4 + 5 * 8], np.int64)
    sums = np.frombuffer(raw[7 * 5 * 4 + 5 * 8:], np.float32)
    np.testing.assert_allclose(probs, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(best, want[1])
    np.testing.assert_allclose(sums, want[2], rtol=1e-5, atol=1e-5)


@needs_cc
def test_batched_products_transposes_and_half_reductions(tmp_path):
    _blas_or_skip()
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k = rng.standard_normal((2, 3, 5, 8)).astype(np.float32)
    h = rng.standard_normal((6, 9)).astype(np.float16)

    def attend(q, k, h):
        scores = q @ k.permute(0, 1, 3, 2)           # batched, the rhs read transposed
        mixed = la.permute_dims(q, (0, 2, 1, 3)).reshape(2, 4, 24) @ la.ones((24, 3))
        return scores, mixed, h.sum(axis=0), (h.astype(la.float64) * 2).max(axis=0)
    lib = la.aot.compile(attend, [q, k, h], out_dir=str(tmp_path))
    got = lib.load()(q, k, h)
    want = [t.numpy() for t in attend(la.asarray(q), la.asarray(k), la.asarray(h))]
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3, atol=1e-3)


@needs_cc
def test_an_op_that_needs_python_is_refused_by_name(tmp_path):
    with pytest.raises(AOTError, match=r"aot: sort .*no C form"):
        la.aot.compile(lambda x: la.sort(x) * 2.0, [np.ones(5, np.float32)], name="s",
                       out_dir=str(tmp_path))
    with pytest.raises(AOTError, match="argsort"):
        la.aot.compile(lambda x: la.argsort(x), [np.ones(5, np.float32)], name="a",
                       out_dir=str(tmp_path))


@needs_cc
def test_cli_compiles_a_function_file(tmp_path):
    src = tmp_path / "model.py"
    src.write_text("import lazyarray as la\n\ndef scale(x, y):\n    return (x * 3.0 + y).sum(axis=1)\n")
    r = subprocess.run([sys.executable, "-m", "lazyarray.tools.aot", f"{src}:scale", "--arg",
                        "f32[4,6]", "--arg", "f32[6]", "-o", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "input 1: f32[6]" in r.stdout and "output 0: f32[4]" in r.stdout
    lib = la.aot.Library("scale", str(tmp_path / "out" / "libscale.so"), "",
                         [((4, 6), la.float32), ((6,), la.float32)], [((4,), la.float32)], None)
    x, y = np.arange(24, dtype=np.float32).reshape(4, 6), np.ones(6, np.float32)
    np.testing.assert_allclose(lib.load()(x, y)[0], (x * 3 + y).sum(axis=1))


def test_cli_rejects_a_bad_type(tmp_path):
    r = subprocess.run([sys.executable, "-m", "lazyarray.tools.aot", "m.py:f", "--arg", "f33[2]"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "bad --arg type 'f33[2]'" in r.stderr


@needs_cc
def test_cli_compiles_a_dumped_module_with_its_scalars_frozen(tmp_path):
    hlo = tmp_path / "m.hlo"
    hlo.write_text("// scalar number=1 value=2.5\n"
                   "HloModule m\n\nENTRY main {\n"
                   "  %p.0 = f32[3] parameter(), number=0\n"
                   "  %p.1 = f32[] parameter(), number=1\n"
                   "  %b.2 = f32[3] broadcast_in_dim(f32[] %p.1), shape={3}, broadcast_dimensions={}\n"
                   "  %m.3 = f32[3] multiply(f32[3] %p.0, f32[3] %b.2)\n"
                   "  ROOT %t.4 = (f32[3]) tuple(%m.3)\n}\n")
    r = subprocess.run([sys.executable, "-m", "lazyarray.tools.aot", str(hlo), "-o",
                        str(tmp_path), "--name", "times"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert "input 0: f32[3]" in r.stdout and "input 1" not in r.stdout
    lib = la.aot.Library("times", str(tmp_path / "libtimes.so"), "", [((3,), la.float32)],
                         [((3,), la.float32)], None)
    np.testing.assert_array_equal(lib.load()(np.array([1, 2, 4], np.float32))[0], [2.5, 5, 10])


@needs_cc
def test_large_loops_split_over_threads_give_the_same_result(tmp_path):
    x = np.random.default_rng(2).standard_normal((300, 400)).astype(np.float32)

    def f(a):
        return la.tanh(a * 1.5) + a.T.sum(axis=0, keepdims=True).T * 0.01
    lib = la.aot.compile(f, [x], out_dir=str(tmp_path))
    source = open(tmp_path / "f.c").read()
    assert "la_job(" in source and "lzp_run(" in source     # the native pool's runner
    loaded = lib.load()
    one = loaded(x)[0]
    want = f(la.asarray(x)).numpy()     # (before counting threads: it may start the pool's)
    threads = _threads()
    loaded.set_threads(3)
    three = loaded(x)[0]
    if threads is not None:       # set_threads(3) started the pool's two workers
        assert _threads() == threads + 2
    np.testing.assert_array_equal(one, three)
    np.testing.assert_allclose(three, want, rtol=1e-5, atol=1e-5)
    loaded.set_threads(2)
    np.testing.assert_array_equal(loaded(x)[0], one)
    loaded.set_threads(1)         # ... and set_threads(1) stopped them
    if threads is not None:
        assert _threads() == threads
    np.testing.assert_array_equal(loaded(x)[0], one)


def _threads():
    """The threads of this process (Linux), or None."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _loops(a, w):
    """A fori_loop over products, a data-dependent while_loop, a cond, and a loop whose
    body holds a cond: each a loop or branch of the library's C code."""
    y = la.fori_loop(0, 4, lambda i, v: la.tanh(v @ w) + i * 0.5, a)
    n, z = la.while_loop(lambda s: s[1].sum() < 100.0, lambda s: (s[0] + 1, s[1] * 1.5 + 1.0),
                         ((y[0] * 0).astype(la.int32), y))
    picked = la.cond(z.sum() > 200.0, lambda u: u * 2.0, lambda u: -u, z)
    mixed = la.fori_loop(0, 5, lambda i, v: la.cond(i % 2 == 0, lambda u: u + 1.0,
                                                    lambda u: u * 3.0, v), a)
    return picked, n, mixed


_LOOPS_MAIN = r"""
#include <stdio.h>
#include "loops.h"
int main(int argc, char **argv) {
    float a[LOOPS_INPUT0_SIZE], w[LOOPS_INPUT1_SIZE], picked[LOOPS_OUTPUT0_SIZE],
          mixed[LOOPS_OUTPUT2_SIZE];
    int32_t n;
    FILE *f = fopen(argv[1], "rb");
    if (fread(a, sizeof a, 1, f) != 1 || fread(w, sizeof w, 1, f) != 1) return 2;
    fclose(f);
    if (loops(a, w, picked, &n, mixed) != 0) return 3;
    FILE *out = fopen(argv[2], "wb");
    fwrite(picked, sizeof picked, 1, out); fwrite(&n, sizeof n, 1, out);
    fwrite(mixed, sizeof mixed, 1, out); fclose(out);
    return 0;
}
"""


@needs_cc
def test_loops_and_branches_run_in_c(tmp_path):
    """fori_loop, while_loop and cond compile into the library as C loops and branches
    over the sub-programs' kernels (no Python, no host round trip): a C program gets the
    interpreter's results."""
    _blas_or_skip()
    a = np.linspace(-1, 1, 4).astype(np.float32)
    w = (np.eye(4) * 0.7 + 0.05).astype(np.float32)
    lib = la.aot.compile(_loops, [a, w], name="loops", out_dir=str(tmp_path))
    (tmp_path / "main.c").write_text(_LOOPS_MAIN)
    exe = tmp_path / "main"
    subprocess.run([CC, "-O1", "-o", str(exe), str(tmp_path / "main.c"), f"-I{tmp_path}",
                    f"-L{tmp_path}", "-lloops", f"-Wl,-rpath,{tmp_path}"], check=True)
    (tmp_path / "in.bin").write_bytes(a.tobytes() + w.tobytes())
    subprocess.run([str(exe), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")], check=True)
    raw = (tmp_path / "out.bin").read_bytes()
    want = [t.numpy() for t in _loops(la.asarray(a, device="interpreter"),
                                      la.asarray(w, device="interpreter"))]
    np.testing.assert_allclose(np.frombuffer(raw[:16], np.float32), want[0], rtol=1e-5)
    assert int(np.frombuffer(raw[16:20], np.int32)[0]) == int(want[1]) > 0
    np.testing.assert_allclose(np.frombuffer(raw[20:], np.float32), want[2], rtol=1e-6)
    np.testing.assert_allclose(lib.load()(a, w)[0], want[0], rtol=1e-5)     # and via ctypes


@needs_cc
def test_the_library_runs_the_run_plan(tmp_path, monkeypatch):
    """The C driver is written from the plan an in-process run binds (run_plan.py): one
    la_job per job of the plan, its task table naming the plan's kernels in order."""
    import re

    from lazyarray.compiler.driver import CPU_LIBRARY, compile as compile_program
    from lazyarray.devices.cpu import run_plan
    _blas_or_skip()
    monkeypatch.setattr(linalg, "SMALL_PRODUCT", 0)     # BLAS products, however small
    predict, x, bias = _model()
    la.aot.compile(predict, [x, bias], name="predict", out_dir=str(tmp_path))
    module, _ = la.aot.trace(predict, [x, bias], "predict")
    plan = run_plan.plan(run_plan.ProgramView(compile_program(module, CPU_LIBRARY)), 1,
                         products_in_jobs=False)
    source = (tmp_path / "predict.c").read_text()
    jobs = [s for s in plan.segments if isinstance(s, run_plan.JobPlan)]
    assert source.count("la_job(la_job") == len(jobs) > 1
    assert any(isinstance(s, run_plan.CallPlan) for s in plan.segments)    # BLAS products
    tables = re.findall(r"static const la_task (la_job\d+)\[\d+\] = (.*);", source)
    assert [re.findall(r"\(void \*\)(\w+), la_job", rows) for _, rows in tables] == \
        [[t.fn for t in job.tasks] for job in jobs]
