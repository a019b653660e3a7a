"""Threads and fork: grad mode is per thread (as in PyTorch), a thread training while
others read its parameters and run the model under no_grad() never sees a wrong value,
and a fork while another thread syncs leaves a child that works."""
from __future__ import annotations

import os
import subprocess
import sys
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
    # (a reader's sync may compute part of a step in its own program: rounding may differ)
    np.testing.assert_allclose(losses, _train(*_net(), steps=40), rtol=1e-5)


FORK_WHILE_SYNCING = r"""
import os, sys, threading, time
import numpy as np
import lazyarray as la

x = la.asarray(np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32))
stop = threading.Event()


def syncing():
    while not stop.is_set():
        ((x @ x).exp() * 2.0).sum(axis=0).numpy()
        (x * 3.0 + 1.0).sum().item()


t = threading.Thread(target=syncing)
t.start()
time.sleep(0.2)
results = []
for i in range(FORKS):
    time.sleep(0.02)
    pid = os.fork()
    if pid == 0:                      # the child: compute, check, exit
        ((x @ x).exp() * 2.0).sum(axis=0).numpy()
        z = (la.asarray(np.arange(10.0)) * 7.0 + float(i)).sum().item()
        os._exit(0 if z == 315 + 10 * i else 3)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            results.append(os.waitstatus_to_exitcode(status))
            break
        if time.monotonic() > deadline:       # hung: a failure, not a timing figure
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            results.append("hung")
            break
        time.sleep(0.05)
stop.set()
t.join()
print("RESULTS", results)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_fork_while_another_thread_syncs_leaves_a_working_child(tmp_path):
    """os.fork() while another thread syncs (holding the device's lock, a program's lock,
    LLVM's lock or the native pool's): each child computes and exits; none hangs (a child
    still running after CHILD_TIMEOUT is killed and counted as hung)."""
    script = tmp_path / "fork_while_syncing.py"
    script.write_text(FORK_WHILE_SYNCING.replace("FORKS", "4").replace("CHILD_TIMEOUT", "120"))
    env = dict(os.environ, PYTHONWARNINGS="ignore::DeprecationWarning")   # (fork with threads)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RESULTS [0, 0, 0, 0]" in out.stdout, (out.stdout[-500:], out.stderr[-2000:])
