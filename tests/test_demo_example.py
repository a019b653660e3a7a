"""examples/demo.py shows what it says: the traced program, one line per fused kernel,
the first sync's compile, cached runs beside NumPy (same results), and one program for
four learning rates."""
import importlib.util
import os

import lazyarray as la
from lazyarray import runtime

_PATH = os.path.join(os.path.dirname(__file__), "..", "examples", "demo.py")


def test_the_demo_states_true_counts(capsys):
    spec = importlib.util.spec_from_file_location("demo_example", _PATH)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    runtime.clear_caches()
    with la.config.override(device="cpu", cache_dir="off"):
        result = demo.main()
    out = capsys.readouterr().out
    assert result["kernels"][0] == "1 kernel:"
    assert "multiply x2, add, reduce, divide" in result["kernels"][1]
    assert result["programs_for_rates"] == 1
    assert "4 learning rates in x * lr + y: 1 program, 3 cache hits" in out
    assert "the program compiled in" in out and "HloModule" in out


def test_train_digits_leaves_no_finished_progress_bars():
    """An epoch's bar goes when the epoch is done: tqdm's with leave=False, the built-in
    line cleared (a 30-epoch run printed 30 finished bars a model)."""
    import io
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "train_digits.py")
    spec = importlib.util.spec_from_file_location("digits_example", path)
    digits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits)
    out = io.StringIO()
    bar = digits.Progress(3, "epoch 1/2", stream=out)
    if bar.bar is not None:
        assert bar.bar.leave is False
        bar.bar.close()
    bar.bar = None
    for _ in range(3):
        bar.update(loss=0.5)
    bar.close()
    assert "3/3  loss 0.5000" in out.getvalue() and out.getvalue().endswith("\r")
    assert "\n" not in out.getvalue()
