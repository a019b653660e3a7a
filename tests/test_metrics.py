"""la.debug.metrics() says what happened: programs compiled, loaded from the disk cache
and the runtime's own native code built are counted apart; a recompile's reason names
the input and what changed for every kind of change; per-program figures are keyed by
program names that cannot be read as device names. Counts only, never times."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lazyarray as la
from lazyarray import runtime

PROGRAM = """
import json
import numpy as np
import lazyarray as la
a = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
value = float((la.asarray(a) @ la.asarray(a)).sum())
m = la.debug.metrics()
print(json.dumps({k: getattr(m, k) for k in ("compiles", "disk_hits", "cache_misses",
                  "runtime_builds", "runtime_loads")}))
"""


def _child(cache: str) -> dict:
    env = dict(os.environ, LAZYARRAY_CACHE_DIR=cache)
    env.pop("LAZYARRAY_DEVICE", None)
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compiles_disk_loads_and_runtime_builds_are_counted_apart(tmp_path):
    first, second = _child(str(tmp_path)), _child(str(tmp_path))
    # a new process with an empty cache compiles the program and builds the runtime's code
    assert (first["compiles"], first["disk_hits"], first["cache_misses"]) == (1, 0, 1)
    assert first["runtime_builds"] >= 1 and first["runtime_loads"] == 0
    # the next loads both from disk: no compile
    assert (second["compiles"], second["disk_hits"], second["cache_misses"]) == (0, 1, 1)
    assert second["runtime_builds"] == 0 and second["runtime_loads"] == first["runtime_builds"]


def _step(x, s=2.5):
    return float((x * s + 1).sum())


def _reasons(calls: list, device: str = "cpu") -> list:
    la.sync()                        # what earlier tests left pending (a generator's key)
    la.debug.reset_metrics()
    runtime.clear_caches()
    with la.config.override(device=device):
        for x, s, where in calls:
            with la.config.override(device=where or device):
                _step(la.asarray(x), s)
    return [r for _, r in la.debug.metrics().recompiles]


F32 = np.ones(4, np.float32)
I32 = np.ones(4, np.int32)


@pytest.mark.parametrize("second, reason", [
    ((np.ones(5, np.float32), 2.5, None), "input 1 (tensor) changed shape: f32[4] -> f32[5]"),
    ((np.ones(4), 2.5, None), "input 1 (tensor) changed dtype: f32[4] -> f64[4]"),
    ((F32, 2.5, "interpreter"), "device cpu -> interpreter"),
    ((F32, 1.0, None), "a Python scalar's static value: a runtime scalar -> the constant f32 1.0"),
    ((I32, 3.5, None), "input 0 (Python scalar) changed dtype: s32 -> f32"),
])
def test_a_recompile_names_the_input_and_the_change(second, reason):
    first = (I32, 3, None) if second[0] is I32 else (F32, 2.5, None)
    reasons = _reasons([first, second])
    assert len(reasons) == 1 and reasons[0].startswith(reason), reasons


def test_per_program_figures_are_keyed_by_program_names():
    la.debug.reset_metrics()
    runtime.clear_caches()
    with la.config.override(device="cpu"):
        _step(la.asarray(F32))
    (name,) = la.debug.metrics().peak_bytes
    assert name.startswith("cpu_program_") and ":" not in name
