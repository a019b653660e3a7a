"""Profile a small CNN's training step: which kernels run, how long each takes, what
bandwidth it reaches, and which of the lines below its ops came from.

    python examples/profile_cnn.py [--steps 3] [--batch 32] [--trace cnn_trace.json]

The first step compiles (outside the profile, so the table shows steady steps); the
profiled steps are cache hits. Open the trace in https://ui.perfetto.dev (or
chrome://tracing): one track for the syncing thread (syncs, their phases, kernels), one
per worker thread (the chunks of each split kernel).
"""
from __future__ import annotations

import argparse

import numpy as np

import lazyarray as la
import lazyarray.nn.functional as F


class SmallCNN(la.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = la.nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = la.nn.Conv2d(16, 32, 3, padding=1)
        self.fc = la.nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: la.Tensor) -> la.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)       # 16 x 16 x 16
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)       # 32 x 8 x 8
        return self.fc(x.reshape(x.shape[0], -1))


def train_step(model: la.nn.Module, opt: la.optim.Optimizer, xb: la.Tensor,
               yb: la.Tensor) -> float:
    with la.GradientTape() as tape:
        loss = F.cross_entropy(model(xb), yb)
    opt.apply_gradients(tape.gradient(loss, model.parameters()))
    return loss.item()                       # one sync: forward, backward and update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--trace", default="cnn_trace.json", help="Chrome trace output path")
    parser.add_argument("--rows", type=int, default=15)
    args = parser.parse_args()
    la.random.seed(0)
    rng = np.random.default_rng(0)
    model = SmallCNN()
    opt = la.optim.Adam(model.parameters(), lr=1e-3)
    batches = [(la.asarray(rng.standard_normal((args.batch, 3, 32, 32), dtype=np.float32)),
                la.asarray(rng.integers(0, 10, args.batch)))
               for _ in range(args.steps + 1)]
    train_step(model, opt, *batches[0])      # compiles: kept out of the profile
    with la.profiler.profile() as prof:
        for xb, yb in batches[1:]:
            with la.profiler.record("train_step"):     # a span of your own in the trace
                loss = train_step(model, opt, xb, yb)
    print(prof.table(row_limit=args.rows))
    print()
    print(prof.table(group_by="line", row_limit=8))      # the same time, by line of this file
    prof.export_chrome_trace(args.trace)
    print(f"\nloss {loss:.4f}; trace written to {args.trace} "
          "(open it in https://ui.perfetto.dev or chrome://tracing)")


if __name__ == "__main__":
    main()
