"""Train an MLP and a small CNN on scikit-learn's bundled digits (8x8 images, no download).

    pip install -e '.[examples]'          # scikit-learn, and tqdm for the progress bar
    python examples/train_digits.py [--device cpu] [--epochs 30] [--model mlp|cnn|both]
                                    [--style tape|backward]

Each training step (forward, backward and Adam update) is one compiled program, compiled at
the first step and a cache hit at every later one; evaluation is a second program. Two
styles of the same step: `--style tape` (a GradientTape, the default) and
`--style backward` (PyTorch's loss.backward() / opt.step()). The script shows a progress
bar (tqdm if installed, else one line rewritten in place) and prints the loss, the test
accuracy, the programs counted by `la.debug.metrics()` (compiled, or loaded from the disk
cache) and the mean step time.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Iterable, Optional

import numpy as np

import lazyarray as la
import lazyarray.nn.functional as F


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> tuple:
    """(x_train, y_train, x_test, y_test) as NumPy: pixels scaled to [0, 1], int64 labels."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def make_mlp() -> la.nn.Module:
    return la.nn.Sequential(la.nn.Flatten(), la.nn.Linear(64, 256), la.nn.ReLU(),
                            la.nn.Dropout(0.1), la.nn.Linear(256, 10))


def make_cnn() -> la.nn.Module:
    return la.nn.Sequential(
        la.nn.Conv2d(1, 16, 3, padding=1), la.nn.ReLU(), la.nn.MaxPool2d(2),     # 16x4x4
        la.nn.Conv2d(16, 32, 3, padding=1), la.nn.ReLU(), la.nn.MaxPool2d(2),    # 32x2x2
        la.nn.Flatten(), la.nn.Linear(128, 64), la.nn.ReLU(), la.nn.Linear(64, 10))


# the model makers and the training settings each reaches its target with
MODELS = {"mlp": (make_mlp, {"lr": 3e-3, "batch": 64}),
          "cnn": (make_cnn, {"lr": 5e-3, "batch": 32})}


def accuracy(model: la.nn.Module, x: la.Tensor, y: la.Tensor) -> float:
    model.eval()
    correct = (model(x).argmax(axis=1) == y).astype(la.float32).mean()
    value = correct.item()
    model.train()
    return value


def train(model: la.nn.Module, data: tuple, epochs: int = 30, batch: int = 64, lr: float = 3e-3,
          device: Any = None, seed: int = 0, log: Any = print, style: str = "tape",
          progress: bool = False) -> dict:
    """Adam with a cosine schedule over mini-batches (the last partial batch is dropped, so
    every step has one shape), in the tape style or PyTorch's backward() style. Returns the
    final accuracy, the compiles and the timings."""
    if style not in ("tape", "backward"):
        raise ValueError(f"train: style must be 'tape' or 'backward', got {style!r}")
    x_train, y_train, x_test, y_test = data
    add_channel = model_wants_channels(model)
    shape = (-1, 1, 8, 8) if add_channel else (-1, 8, 8)
    xt = la.asarray(x_test.reshape(shape), device=device)
    yt = la.asarray(y_test, device=device)
    steps_per_epoch = len(y_train) // batch
    schedule = la.optim.schedules.cosine(lr, epochs * steps_per_epoch)
    opt = la.optim.Adam(model.parameters(), lr=schedule)
    rng = np.random.default_rng(seed)
    before = la.debug.metrics()
    programs_before, compiles_before = before.cache_misses, before.compiles
    step_times, first_step, loss_value = [], None, float("nan")
    criterion = la.nn.CrossEntropyLoss()
    for epoch in range(epochs):
        order = rng.permutation(len(y_train))
        batches = steps(range(steps_per_epoch), steps_per_epoch,
                        f"epoch {epoch + 1}/{epochs}", progress)
        for i, bar in batches:
            idx = order[i * batch:(i + 1) * batch]
            xb = la.asarray(x_train[idx].reshape(shape), device=device)
            yb = la.asarray(y_train[idx], device=device)
            t0 = time.perf_counter()
            if style == "tape":
                with la.GradientTape() as tape:
                    loss = criterion(model(xb), yb)
                opt.apply_gradients(tape.gradient(loss, model.parameters()))
            else:
                opt.zero_grad()
                loss = criterion(model(xb), yb)
                loss.backward()
                opt.step()
            loss_value = loss.item()            # one sync: forward, backward and update
            elapsed = time.perf_counter() - t0
            if first_step is None:
                first_step = elapsed
            else:
                step_times.append(elapsed)
            if bar is not None:
                bar.update(loss=loss_value)
        if log and (epoch % 5 == 4 or epoch == epochs - 1):
            log(f"  epoch {epoch + 1:3d}  loss {loss_value:.4f}  "
                f"test accuracy {accuracy(model, xt, yt):.4f}")
    acc = accuracy(model, xt, yt)
    after = la.debug.metrics()
    return {"accuracy": acc, "loss": loss_value,
            "compiles": after.cache_misses - programs_before,     # programs: compiled or loaded
            "compiled": after.compiles - compiles_before,
            "first_step_s": first_step,
            "step_s": float(np.mean(step_times)) if step_times else None}


class Progress:
    """A progress bar over `total` steps: tqdm when installed, else a single line that is
    rewritten in place (`\\r`) at most a few times a second."""

    def __init__(self, total: int, desc: str, stream: Any = None) -> None:
        self.total, self.desc, self.done = total, desc, 0
        self.stream = stream or sys.stderr
        self.postfix, self._last = "", 0.0
        try:
            from tqdm import tqdm
            # leave=False: an epoch's bar goes when it is done (not 30 finished bars a model)
            self.bar: Optional[Any] = tqdm(total=total, desc=desc, file=self.stream,
                                           leave=False)
        except ImportError:
            self.bar = None

    def update(self, n: int = 1, **postfix: Any) -> None:
        self.done += n
        self.postfix = "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                 for k, v in postfix.items())
        if self.bar is not None:
            self.bar.update(n)
            if postfix:
                self.bar.set_postfix_str(self.postfix, refresh=False)
            return
        now = time.perf_counter()
        if now - self._last > 0.2 or self.done == self.total:
            self._last = now
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self, width: int = 30) -> str:
        filled = int(width * self.done / max(self.total, 1))
        return (f"{self.desc} [{'#' * filled}{'.' * (width - filled)}] "
                f"{self.done}/{self.total}  {self.postfix}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        else:                         # the line goes, as tqdm's bar does with leave=False
            self.stream.write("\r" + " " * len(self.line()) + "\r")
            self.stream.flush()


def steps(iterable: Iterable, total: int, desc: str, show: bool) -> Iterable:
    """(item, progress bar or None) for each item of `iterable`; a bar only when `show`."""
    bar = Progress(total, desc) if show else None
    try:
        for item in iterable:
            yield item, bar
    finally:
        if bar is not None:
            bar.close()


def model_wants_channels(model: la.nn.Module) -> bool:
    return any(isinstance(m, la.nn.Conv2d) for m in model.modules())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu, cuda or interpreter (default: la's)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--model", choices=("mlp", "cnn", "both"), default="both")
    parser.add_argument("--style", choices=("tape", "backward"), default="tape")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args()
    data = load_digits_split()
    print(f"digits: {len(data[1])} train, {len(data[3])} test images; device "
          f"{la.device(args.device).device.name}")
    for name in (("mlp", "cnn") if args.model == "both" else (args.model,)):
        la.random.seed(0)
        make, settings = MODELS[name]
        model = make().to(args.device)
        print(f"{name}: {la.nn.count_parameters(model)} parameters")
        r = train(model, data, epochs=args.epochs, device=args.device, style=args.style,
                  progress=not args.no_progress, **settings)
        loaded = r["compiles"] - r["compiled"]
        how = f"{r['compiled']} compiled, {loaded} loaded from the disk cache" if loaded \
            else "both compiled"
        print(f"{name}: test accuracy {r['accuracy']:.4f}, final loss {r['loss']:.4f}, "
              f"{r['compiles']} programs (training step + evaluation; {how}), first step "
              f"{r['first_step_s'] * 1e3:.1f} ms, then {r['step_s'] * 1e3:.2f} ms a step")


if __name__ == "__main__":
    main()
