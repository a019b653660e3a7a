"""`python -m lazyarray.tools.run_hlo`: a dumped module runs on its own."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import lazyarray as la
from lazyarray.compiler.hlo import dtypes as D
from lazyarray.compiler.graph.trace import capture
from lazyarray.devices.interpreter import InterpreterDevice
from lazyarray.tools import run_hlo

from harness import device_names
from primitive_cases import CASES_BY_ID, build_module, make_inputs


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lazyarray.tools.run_hlo", *args],
                          capture_output=True, text=True, timeout=120)


def _write(tmp_path, module, name="m.hlo"):
    path = tmp_path / name
    path.write_text(str(module))
    return str(path)


def _reference(module, inputs):
    dev = InterpreterDevice()
    return dev.compile(module).run([dev.put(a) for a in inputs])


def test_cli_prints_outputs(tmp_path):
    module = build_module(CASES_BY_ID["reduce_sum_rows"], D.float32)
    r = _cli(_write(tmp_path, module), "--device", "interpreter", "--seed", "3")
    assert r.returncode == 0, r.stderr
    assert "module case_reduce_sum_rows: 2 instructions, 1 parameters, 1 outputs" in r.stdout
    assert "output 0: f32[3] min=" in r.stdout


def test_cli_inputs_and_save(tmp_path):
    """Inputs by key p0, p1 from an .npz; outputs saved and equal to the interpreter's."""
    case = CASES_BY_ID["dot_general_batched"]
    module = build_module(case, D.float32)
    inputs = make_inputs(case, D.float32, seed=5)
    np.savez(tmp_path / "in.npz", p1=inputs[1], p0=inputs[0])
    out = tmp_path / "out.npz"
    r = _cli(_write(tmp_path, module), "--inputs", str(tmp_path / "in.npz"), "--save", str(out),
             "--device", "interpreter")
    assert r.returncode == 0, r.stderr
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["o0"], _reference(module, inputs)[0])


def test_cli_rejects_malformed_text(tmp_path):
    path = tmp_path / "bad.hlo"
    path.write_text("HloModule m\n\nENTRY main {\n  %p.0 = f32[2] parametr(), number=0\n}\n")
    r = _cli(str(path))
    assert r.returncode != 0
    assert "line 4" in r.stderr and "unknown op 'parametr'" in r.stderr


@pytest.mark.parametrize("name", device_names())
def test_dumped_api_module_runs_on_each_device(tmp_path, name):
    x = la.asarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    tensors = [la.tanh(x * 0.5 + 1).sum(axis=1), x.T @ x]
    module = capture([t._node for t in tensors]).module("api")
    inputs = run_hlo.random_inputs(module, seed=1)
    outs = run_hlo.run(module, inputs, name)
    expected = _reference(module, inputs)
    assert len(outs) == 2
    for got, want in zip(outs, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_main_in_process_by_position_and_casts(tmp_path, capsys):
    """An .npz without p-keys gives inputs by position; float64 input casts to f32."""
    case = CASES_BY_ID["add"]
    module = build_module(case, D.float32)
    a, b = np.ones((2, 3)), np.full((2, 3), 2.0)
    np.savez(tmp_path / "pos.npz", a, b)
    out = tmp_path / "o.npz"
    rc = run_hlo.main([_write(tmp_path, module), "--inputs", str(tmp_path / "pos.npz"),
                       "--save", str(out), "--device", "interpreter"])
    assert rc == 0
    with np.load(out) as saved:
        assert saved["o0"].dtype == np.float32
        np.testing.assert_array_equal(saved["o0"], np.full((2, 3), 3.0, np.float32))
    assert "saved 1 outputs" in capsys.readouterr().out


def test_bfloat16_inputs_round_trip_through_npz(tmp_path):
    module = build_module(CASES_BY_ID["negate"], D.bfloat16)
    x = make_inputs(CASES_BY_ID["negate"], D.bfloat16)[0]
    np.savez(tmp_path / "in.npz", p0=x)      # stored as raw 2-byte values
    inputs = run_hlo.load_inputs(module, str(tmp_path / "in.npz"))
    assert inputs[0].dtype == D.bfloat16.np
    np.testing.assert_array_equal(inputs[0].view(np.uint16), x.view(np.uint16))


@pytest.mark.parametrize("arrays,why", [
    ({"p0": np.ones((3, 2), np.float32), "p1": np.ones((2, 3), np.float32)}, "shape (3, 2)"),
    ({"p0": np.ones((2, 3), np.float32)}, "holds 1 arrays"),
    ({"p0": np.ones((2, 3), np.complex64), "p1": np.ones((2, 3), np.float32)}, "complex64"),
])
def test_bad_inputs_are_clear_errors(tmp_path, capsys, arrays, why):
    module = build_module(CASES_BY_ID["add"], D.float32)
    np.savez(tmp_path / "in.npz", **arrays)
    rc = run_hlo.main([_write(tmp_path, module), "--inputs", str(tmp_path / "in.npz"),
                       "--device", "interpreter"])
    assert rc == 1
    assert why in capsys.readouterr().err


def test_unknown_device_is_an_error(tmp_path, capsys):
    module = build_module(CASES_BY_ID["add"], D.float32)
    assert run_hlo.main([_write(tmp_path, module), "--device", "tpu"]) == 1
    assert "unknown device 'tpu'" in capsys.readouterr().err


def test_runs_what_lazyarray_dump_wrote(tmp_path, fresh_metrics):
    la.sync()        # other tests may leave pending tensors (a random key) that a sync takes
    x = la.asarray(np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), device="interpreter")
    y = (la.exp(x) * 3 - 1).max(axis=0)
    cap = capture([y._node])                 # the runtime arguments the sync will pass
    with la.config.override(dump=str(tmp_path)):
        want = y.numpy()
    dumped = [p for p in tmp_path.iterdir() if p.suffix == ".hlo"]
    assert dumped, "LAZYARRAY_DUMP wrote no .hlo file"
    first = min(dumped, key=lambda p: (len(p.name), p.name))   # the module as traced
    module = run_hlo.parse_module(first.read_text())
    types = run_hlo.parameter_types(module)
    assert len(types) == len(cap.args)
    args = {f"p{i}": np.asarray(a, dtype=d.np).reshape(s) for i, (a, (s, d)) in
            enumerate(zip(cap.args, types))}
    np.savez(tmp_path / "in.npz", **args)
    out = tmp_path / "o.npz"
    assert run_hlo.main([str(first), "--inputs", str(tmp_path / "in.npz"),
                         "--save", str(out), "--device", "interpreter"]) == 0
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["o0"], want)


# ---- a dump replays exactly: runtime scalars carry their values ----------------------

def _dumped(tmp_path, fn):
    """Run fn() with LAZYARRAY_DUMP on (fresh caches); -> (its result, the .hlo path)."""
    la.runtime.clear_caches()
    with la.config.override(dump=str(tmp_path), cache_dir="off"):
        out = fn().numpy()
    (path,) = [p for p in tmp_path.glob("*.hlo") if not p.name.endswith(".optimized.hlo")]
    return out, str(path)


def test_dump_carries_runtime_scalars_and_replays_exactly(tmp_path):
    x = la.asarray(np.random.default_rng(1).standard_normal((9, 4)).astype(np.float32))
    x.numpy()
    want, path = _dumped(tmp_path, lambda: la.log(x[3:7] * 0.37 + 2.25 ** 2) - 1.5)
    text = open(path).read()
    assert "// scalar number=" in text and "value=3" in text and "value=0.37" in text
    out = tmp_path / "replayed.npz"
    r = _cli(path, "--save", str(out), "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "inputs.npz" in r.stdout
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["o0"], want)


def test_recorded_scalars_without_the_inputs_file(tmp_path):
    """Only the scalars are known (the .npz removed): they keep their values, so a start
    and a scale mean what they meant, and buffers are random."""
    want, path = _dumped(tmp_path, lambda: la.arange(20, dtype=la.float32)[5:9] * 0.5 + 100.0)
    inputs = tmp_path / (path.rsplit("/", 1)[1][:-4] + ".inputs.npz")
    if inputs.exists():
        inputs.unlink()
    module_text = open(path).read()
    module = run_hlo.parse_module(module_text)
    got, source = run_hlo.replay_inputs(module, module_text, path)
    assert "recorded scalars" in source
    np.testing.assert_array_equal(run_hlo.run(module, got, "interpreter")[0], want)
