"""Threads and fork: grad mode is per thread (as in PyTorch), a thread training while
others read its parameters and run the model under no_grad() never sees a wrong value,
and a fork while another thread syncs leaves a child that works."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import lazyarray as la


@pytest.fixture(autouse=True)
def on_cpu():
    with la.config.override(device="cpu"):
        yield


def _net(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    net = la.nn.Sequential(la.nn.Linear(8, 16), la.nn.ReLU(), la.nn.Linear(16, 2))
    net.load_state_dict({n: rng.standard_normal(p.shape).astype(np.float32) * 0.3
                         for n, p in net.named_parameters()})
    x = la.asarray(rng.standard_normal((4, 8)).astype(np.float32))
    return net, x


def _train(net: la.nn.Module, x: la.Tensor, steps: int, each=None) -> list:
    opt = la.optim.SGD(net.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        loss = (net(x) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if each is not None:
            each()
    return losses


def test_no_grad_in_one_thread_leaves_the_others_recording():
    """Another thread inside no_grad() (waiting there) does not turn off this thread's
    gradients: a backward() step here works and matches the step with no other thread."""
    inside, done = threading.Event(), threading.Event()
    seen = []

    def evaluator() -> None:
        with la.no_grad():
            seen.append(la.is_grad_enabled())
            inside.set()
            done.wait(60)
    t = threading.Thread(target=evaluator)
    t.start()
    try:
        assert inside.wait(60)
        assert la.is_grad_enabled()
        with_other = _train(*_net(), steps=3)
    finally:
        done.set()
        t.join()
    assert seen == [False] and la.is_grad_enabled()
    assert with_other == _train(*_net(), steps=3)


def test_readers_under_no_grad_never_see_a_wrong_parameter():
    """One thread trains (backward, step, item) while three read the parameters and run
    the model under no_grad(): every read is the parameter's array (shape, dtype,
    finite), every model output is finite, and training matches training alone."""
    net, x = _net()
    shapes = [(p.shape, p.dtype.np) for p in net.parameters()]
    stop = threading.Event()
    bad, reads = [], [0]

    def reader() -> None:
        while not stop.is_set():
            try:
                for p, (shape, dtype) in zip(net.parameters(), shapes):
                    a = p.numpy()
                    if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype \
                            or not np.isfinite(a).all():
                        bad.append(repr(a)[:80])
                    reads[0] += 1
                with la.no_grad():
                    y = net(x).numpy()
                if y.shape != (4, 2) or not np.isfinite(y).all():
                    bad.append(repr(y)[:80])
            except Exception as e:        # any error in a reader is a wrong read
                bad.append(repr(e)[:300])
    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        losses = _train(net, x, steps=40)
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert bad == [], (len(bad), reads[0], bad[:3])
    assert reads[0] > 0
    assert losses == _train(*_net(), steps=40)
