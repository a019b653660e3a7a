"""One process of the data-parallel test (tests/test_distributed.py launches it with
`mpiexec -n 2`): trains a small model with DistributedDataParallel on its shard of a fixed
batch and, on rank 0, saves the final parameters, the losses and the compile count."""
from __future__ import annotations

import sys

import numpy as np

import lazyarray as la

STEPS = 5


def data() -> tuple:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = rng.integers(0, 3, 32)
    return x, y


def model(seed: int) -> "la.nn.Module":
    la.random.seed(seed)
    return la.nn.Sequential(la.nn.Linear(8, 16), la.nn.Tanh(), la.nn.Linear(16, 3))


def train(net, params, x, y, reduce=None) -> list:
    opt = la.optim.SGD(params, lr=0.2, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        with la.GradientTape() as tape:
            loss = la.nn.functional.cross_entropy(net(la.asarray(x)), la.asarray(y))
        grads = tape.gradient(loss, params)
        # the mean loss recorded before the step ends (apply_gradients computes what is
        # pending), so that it comes out of the step's program
        mean_loss = la.distributed.all_reduce(loss, "mean") if reduce else loss
        opt.apply_gradients(reduce(grads) if reduce else grads)
        losses.append(mean_loss.item())
    return losses


def train_backward(net, x, y, accumulate: bool = False) -> list:
    """The PyTorch idiom: zero_grad, loss.backward(), step. With a DistributedDataParallel
    `net`, backward() averages the gradients. `accumulate`: each step in two micro-batches,
    the first under `no_sync()` (gradients accumulated locally, averaged with the second)."""
    opt = la.optim.SGD(net.parameters(), lr=0.2, momentum=0.9)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        if accumulate:
            half = len(x) // 2
            with net.no_sync():
                first = la.nn.functional.cross_entropy(net(la.asarray(x[:half])),
                                                       la.asarray(y[:half])) / 2
                first.backward()
            second = la.nn.functional.cross_entropy(net(la.asarray(x[half:])),
                                                    la.asarray(y[half:])) / 2
            second.backward()
            loss = first + second
        else:
            loss = la.nn.functional.cross_entropy(net(la.asarray(x)), la.asarray(y))
            loss.backward()
        opt.step()
        mean_loss = la.distributed.all_reduce(loss, "mean") \
            if isinstance(net, la.distributed.DistributedDataParallel) else loss
        losses.append(mean_loss.item())
    return losses


def main(out: str) -> None:
    la.distributed.init()
    rank, size = la.distributed.rank(), la.distributed.world_size()
    x, y = data()
    shard = slice(rank * len(x) // size, (rank + 1) * len(x) // size)
    ddp = la.distributed.DistributedDataParallel(model(seed=rank))   # rank 0's weights win
    params = list(ddp.parameters())
    losses = train(ddp, params, x[shard], y[shard], ddp.reduce_gradients)
    gathered = la.distributed.all_gather(la.asarray(np.float32(rank))).numpy()
    compiles = la.debug.metrics().cache_misses
    styles = {}
    for style, accumulate in (("backward", False), ("no_sync", True)):
        net = la.distributed.DistributedDataParallel(model(seed=rank))
        before = la.debug.metrics().cache_misses
        styles[style + "_losses"] = np.array(train_backward(net, x[shard], y[shard], accumulate))
        styles[style + "_compiles"] = la.debug.metrics().cache_misses - before
        for i, p in enumerate(net.parameters()):
            styles[f"{style}_{i}"] = p.numpy()
    if rank == 0:
        np.savez(out, *[p.numpy() for p in params], losses=np.array(losses),
                 compiles=compiles, gathered=gathered, size=size,
                 **styles)
    la.distributed.barrier()


if __name__ == "__main__":
    main(sys.argv[1])
