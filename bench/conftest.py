"""Benchmarks run with `python -m pytest bench/ --benchmark-only` (not part of the test suite).

Each workload is measured for lazyarray and, in the same run, for the peers a user would
pick instead (NumPy, PyTorch eager, torch.compile, jax.jit), each skipped when not
installed. `python bench/report.py` turns the saved JSON into a table of ratios.
"""
import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(pytest.mark.benchmark(min_rounds=5, warmup=True))
