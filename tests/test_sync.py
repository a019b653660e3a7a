"""Sync semantics: what materializes, one module per sync, metrics, graph breaks, failures."""
from __future__ import annotations

import inspect
import os
import sys

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime

HERE = os.path.abspath(__file__)


def _line() -> int:
    """The line number of the caller's next line."""
    return inspect.currentframe().f_back.f_lineno + 1


def _pending():
    x = la.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    t = x * 2.0 + 1.0
    assert not t.is_materialized
    return t


# ---- what materializes ------------------------------------------------------------------

@pytest.mark.parametrize("read", ["print", "repr", "str", "numpy", "item", "bool", "float",
                                  "int", "array", "tolist", "format"])
def test_reading_a_value_materializes(read, device, capsys, fresh_metrics):
    t = _pending()
    if read in ("item", "bool", "float", "int", "format"):
        t = t.sum()
    readers = {"print": print, "repr": repr, "str": str, "numpy": lambda v: v.numpy(),
               "item": lambda v: v.item(), "bool": bool, "float": float, "int": int,
               "array": np.asarray, "tolist": lambda v: v.tolist(),
               "format": lambda v: f"{v:.1f}"}
    out = readers[read](t)
    assert t.is_materialized and fresh_metrics.syncs == 1
    readers[read](t)
    assert fresh_metrics.syncs == 1                       # a computed value is read, not rerun
    if read == "print":
        assert "11" in capsys.readouterr().out
    if read == "item":
        assert out == 36.0
    if read == "format":
        assert out == "36.0"


def test_recording_does_not_run(device, fresh_metrics):
    x = la.asarray([1.0, 2.0])
    y = (x * 3).exp().sum()
    assert not y.is_materialized
    assert fresh_metrics.syncs == 0 and fresh_metrics.cache_misses == 0


# ---- one module per sync -----------------------------------------------------------------

def test_one_sync_computes_every_live_pending_tensor(device, fresh_metrics):
    x = la.asarray([1.0, 2.0, 3.0])
    a = x + 1
    b = (x * 2).sum()
    c = a * b
    assert not any(t.is_materialized for t in (a, b, c))
    np.testing.assert_allclose(a.numpy(), [2, 3, 4])
    assert b.is_materialized and c.is_materialized       # taken by the same sync
    assert fresh_metrics.syncs == 1 and fresh_metrics.cache_misses == 1
    np.testing.assert_allclose(c.numpy(), [24, 36, 48])
    assert fresh_metrics.syncs == 1                       # nothing left to compute


def test_explicit_sync(device, fresh_metrics):
    x = la.asarray([[1.0, 2.0], [3.0, 4.0]])
    ys = [x * i for i in range(2, 6)]
    la.sync()
    assert all(y.is_materialized for y in ys)
    assert fresh_metrics.syncs == 1 and fresh_metrics.cache_misses == 1
    la.sync()                                              # nothing pending: no sync counted
    assert fresh_metrics.syncs == 1
    np.testing.assert_allclose(ys[-1].numpy(), x.numpy() * 5)


def test_dropped_pending_tensors_are_not_computed(device, monkeypatch, fresh_metrics):
    state = runtime.get_device(device)
    compiled = []
    real = state.device.compile

    def spy(module):
        compiled.append(len(module.outputs))
        return real(module)

    monkeypatch.setattr(state.device, "compile", spy)
    x = la.asarray([1.0, 2.0])
    dropped = x * 7
    kept_a, kept_b = x + 1, x - 1
    del dropped                                  # no longer referenced: not live
    np.testing.assert_allclose(kept_a.numpy(), [2, 3])
    assert compiled == [2] and kept_b.is_materialized


def test_training_loop_runs_one_program_per_step(device, fresh_metrics):
    rng = np.random.default_rng(0)
    w = la.asarray(rng.standard_normal(8).astype(np.float32))
    target = la.asarray(rng.standard_normal(8).astype(np.float32))
    w_np, t_np = w.numpy(), target.numpy()
    la.debug.reset_metrics()
    steps = 6
    losses = []
    for step in range(steps):
        lr = 0.1 + 0.01 * step                   # a scalar that changes every step
        w = w - lr * 2 * (w - target)
        loss = ((w - target) ** 2).sum()
        losses.append(loss.item())               # the new w comes out of the same program
        assert w.is_materialized
        w_np = w_np - np.float32(lr) * 2 * (w_np - t_np)
        np.testing.assert_allclose(w.numpy(), w_np, rtol=1e-5, atol=1e-6)
    m = la.debug.metrics()
    assert m.syncs == steps
    assert m.cache_misses == 1 and m.cache_hits == steps - 1
    assert losses[-1] < losses[0]


def test_a_sync_takes_only_its_own_devices_tensors(device, other_device, fresh_metrics):
    here = la.asarray([1.0, 2.0], device=device) * 2
    there = la.asarray([3.0, 4.0], device=other_device) * 2
    here.numpy()
    assert here.is_materialized and not there.is_materialized
    la.sync(other_device)
    assert there.is_materialized
    np.testing.assert_allclose(there.numpy(), [6, 8])


def test_sync_without_a_device_takes_every_device(device, other_device):
    here = la.asarray([1.0], device=device) + 1
    there = la.asarray([1.0], device=other_device) + 2
    la.sync()
    assert here.is_materialized and there.is_materialized


# ---- metrics ----------------------------------------------------------------------------

def test_metrics_record_the_users_line_of_each_sync(device, fresh_metrics):
    t = _pending()
    line = _line()
    t.numpy()
    assert fresh_metrics.sync_sites == {f"{HERE}:{line}": 1}
    u = _pending()
    line2 = _line()
    la.sync()
    assert fresh_metrics.sync_sites[f"{HERE}:{line2}"] == 1
    assert u.is_materialized


def test_graph_breaks_are_counted_with_their_site(device, fresh_metrics):
    x = la.asarray([0.0, 1.5, 0.0, 2.0]) * 2
    line = _line()
    (idx,) = la.nonzero(x)
    np.testing.assert_array_equal(idx.numpy(), [1, 3])
    assert fresh_metrics.graph_breaks == 1
    assert fresh_metrics.graph_break_sites == {f"nonzero at {HERE}:{line}": 1}
    la.unique_values(x)
    assert fresh_metrics.graph_breaks == 2


def test_static_nonzero_is_no_graph_break(device, fresh_metrics):
    x = la.asarray([0.0, 1.5, 0.0, 2.0])
    (idx,) = la.nonzero(x, size=3, fill_value=-1)
    np.testing.assert_array_equal(idx.numpy(), [1, 3, -1])
    assert fresh_metrics.graph_breaks == 0


def test_strict_mode_names_the_op_and_the_users_line(device, fresh_metrics):
    x = la.asarray([0.0, 1.0]) + 1
    with la.config.override(strict=True):
        line = _line()
        with pytest.raises(RuntimeError, match="nonzero") as err:
            la.nonzero(x)
    assert f"{HERE}:{line + 1}" in str(err.value)
    assert fresh_metrics.graph_breaks == 0
    np.testing.assert_allclose(x.numpy(), [1.0, 2.0])     # nothing else changed


# ---- a failed compile or run: the error is stored on what depends on it -----------------
# (the full rule, with interrupts, is tested in test_failures.py)

class Boom(RuntimeError):
    pass


def _failing_on(op: str, stage: str, real):
    """A device compile that fails (at compile or at the first run) for modules that
    contain `op`, as an op the device cannot handle would."""
    def compile(module, **kwargs):
        if any(i.op == op for i in module.instructions):
            if stage == "compile":
                raise Boom(f"{op} failed on purpose")
            return _FailingRun(real(module, **kwargs), op)
        return real(module, **kwargs)
    return compile


class _FailingRun:
    def __init__(self, exe, op):
        self.exe, self.op = exe, op

    def run(self, args):
        raise Boom(f"{self.op} run failed on purpose")


@pytest.mark.parametrize("stage", ["compile", "run"])
def test_a_failed_sync_leaves_other_tensors_intact(stage, device, monkeypatch, fresh_metrics):
    state = runtime.get_device(device)
    x = la.asarray([1.0, 2.0, 3.0])
    done = x * 2
    done.numpy()
    done_buffer = done._node.buffer
    line = _line()
    pending = la.cos(done)
    other = (x - 1).sum()
    monkeypatch.setattr(state.device, "compile", _failing_on("cosine", stage, state.device.compile))
    with pytest.raises(runtime.SyncError) as err:
        pending.numpy()
    assert "cosine" in str(err.value) and f"{HERE}:{line}" in str(err.value), str(err.value)
    assert isinstance(err.value.__cause__, Boom)
    assert other.is_materialized and other.item() == 3.0      # the same sync: computed
    with pytest.raises(runtime.SyncError, match="cosine"):
        pending.numpy()                                      # stored: raised again
    with pytest.raises(runtime.SyncError, match="cosine"):
        (pending + 1).numpy()                                # and by what depends on it
    monkeypatch.undo()
    assert done.is_materialized and done._node.buffer is done_buffer
    np.testing.assert_allclose(done.numpy(), [2, 4, 6])
    np.testing.assert_allclose((done + 10).numpy(), [12, 14, 16])   # the device works on


def test_a_failed_sync_caches_nothing(device, monkeypatch, fresh_metrics):
    state = runtime.get_device(device)
    x = la.asarray([1.0, 2.0])
    monkeypatch.setattr(state.device, "compile", _failing_on("multiply", "compile",
                                                             state.device.compile))
    with pytest.raises(runtime.SyncError):
        (x * 3).numpy()
    monkeypatch.undo()
    before = fresh_metrics.cache_misses
    np.testing.assert_allclose((x * 3).numpy(), [3, 6])     # compiled now, not a stale entry
    assert fresh_metrics.cache_misses == before + 1


def test_strict_mode_from_the_environment(tmp_path):
    import subprocess
    script = tmp_path / "user_code.py"
    script.write_text("import lazyarray as la\n"
                      "x = la.asarray([0.0, 1.0], device='interpreter')\n"
                      "la.unique_values(x)\n")
    env = dict(os.environ, LAZYARRAY_STRICT="1")
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode != 0
    assert "unique_values" in run.stderr and f"{script}:3" in run.stderr, run.stderr[-2000:]
