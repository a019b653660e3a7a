"""Host work per recorded op (issue 29 point 3: <= 2 us per op on average across a step):
thread CPU of the main thread for one steady-state call of each benchmark model, outside
the program's run, divided by the graph ops the call records.

    python bench/host_per_op.py [gpt|encoder|decode ...] [--calls 7]

For each call: `record` is the thread CPU outside syncs (the model's code recording ops),
`sync` the thread CPU inside syncs less the program's run (trace key or template check,
cache lookup, binding the results), `ops` the op nodes the call's syncs computed (counted
once, in a call of its own: the walk is not timed). Medians over the calls. The run is
measured with the runtime's own clock made `time.thread_time` (the main thread's share
of the kernels; the pool's threads are not this thread). Not a test: nothing is asserted.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, os.path.dirname(__file__))

import lazyarray as la                          # noqa: E402
from lazyarray import runtime                   # noqa: E402

from bench_models import la_runner              # noqa: E402

_SYNC = [0.0]
_OPS = [0, False]


def _count(nodes: list) -> int:
    """Op nodes (not leaves, not computed) behind `nodes`, each once."""
    seen, stack, n_ops = set(), list(nodes), 0
    while stack:
        n = stack.pop()
        if id(n) in seen or n.buffer is not None:
            continue
        seen.add(id(n))
        if n.operands:
            n_ops += 1
            stack.extend(n.operands)
    return n_ops


def _instrument() -> None:
    original = runtime._compute

    def compute(state, nodes, donate, site=""):
        if _OPS[1]:
            _OPS[0] += _count(nodes)
        t0 = time.thread_time()
        try:
            return original(state, nodes, donate, site)
        finally:
            _SYNC[0] += time.thread_time() - t0
    runtime._compute = compute
    runtime._clock = time.thread_time       # run_seconds: this thread's CPU in the run


def measure(model: str, calls: int) -> dict:
    run = la_runner(model)
    for _ in range(3):
        run()                                # compiled, cache hits, templates made
    _OPS[0], _OPS[1] = 0, True
    run()
    ops, _OPS[1] = _OPS[0], False
    rows = []
    m = la.debug.metrics()
    for _ in range(calls):
        run_before, _SYNC[0] = m.run_seconds, 0.0
        t0 = time.thread_time()
        run()
        total = time.thread_time() - t0
        in_run = m.run_seconds - run_before
        rows.append((total - _SYNC[0], _SYNC[0] - in_run))
    record = statistics.median(r for r, _ in rows)
    sync = statistics.median(s for _, s in rows)
    return {"ops": ops, "record_ms": record * 1e3, "sync_ms": sync * 1e3,
            "us_per_op": (record + sync) / ops * 1e6}


def main(argv: list) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=["gpt", "encoder", "decode"])
    p.add_argument("--calls", type=int, default=7)
    args = p.parse_args(argv)
    _instrument()
    for model in args.models:
        r = measure(model, args.calls)
        print(f"{model:8s} ops {r['ops']:6d}  record {r['record_ms']:8.2f} ms  "
              f"sync {r['sync_ms']:7.2f} ms  host {r['us_per_op']:.2f} us/op", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
