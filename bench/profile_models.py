"""The profiler's table (`la.profiler`) for one steady-state step of each benchmark model:
where the time of bench_models.py's lazyarray rows goes.

    python bench/profile_models.py [gpt|encoder|cnn|decode|decode_loop ...] [--rows N]
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
sys.path.insert(0, os.path.dirname(__file__))

import lazyarray as la                          # noqa: E402

from bench_models import MODELS, la_runner      # noqa: E402


def profile(model: str, rows: int) -> str:
    run = la_runner(model)
    run()
    run()                                       # compiled and a cache hit before profiling
    with la.profiler.profile():
        run()       # a profile builds the backward afresh (no walk templates): its first
                    # step looks its program up anew (0.3 s for the GPT), not steady state
    with la.profiler.profile() as prof:
        run()
    return f"## {model}\n\n{prof.table(row_limit=rows)}\n"


def main(argv: list) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("models", nargs="*", default=list(MODELS))
    p.add_argument("--rows", type=int, default=15)
    args = p.parse_args(argv)
    for model in args.models:
        print(profile(model, args.rows))


if __name__ == "__main__":
    main(sys.argv[1:])
