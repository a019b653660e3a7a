"""The values of a module's runtime scalars, carried in its dumped text.

A dumped module has a parameter for each Python scalar of the traced program (a learning
rate, a slice start). Its value is not part of the module (it changes every step without
recompiling), so the dump carries it in comment lines the parser skips:

    // scalar number=3 value=0.001

and `run_hlo` gives each such parameter its recorded value, so that a replay computes
what the program computed (random values there would make starts, scales and shift
amounts meaningless: an all-NaN output is typical).
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

_LINE = re.compile(r"^//\s*scalar number=(\d+) value=(\S+)\s*$")


def scalar_comments(args: list) -> str:
    """Comment lines for the Python scalars among a capture's arguments (by number)."""
    lines = []
    for number, a in enumerate(args):
        if isinstance(a, (bool, int, float)):
            lines.append(f"// scalar number={number} value={a!r}")
    return "\n".join(lines) + ("\n" if lines else "")


def _value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        return float(text)          # repr of a float, 'nan' and 'inf' included: exact


def scalar_values(text: str) -> dict:
    """parameter number -> value, from the comment lines of a dumped module's text."""
    out = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[int(m.group(1))] = _value(m.group(2))
    return out


INPUTS_LIMIT = 64 << 20     # bytes: a dump does not copy a large model's weights


def save_inputs(path: str, args: list, to_host: Any = None) -> bool:
    """Every argument (p0, p1, ... by number) in an .npz, when they are host arrays (or
    device buffers, read back with `to_host(buffer)`) or scalars of INPUTS_LIMIT bytes in
    all; False (nothing written) otherwise."""
    arrays = {}
    total = 0
    for number, a in enumerate(args):
        if isinstance(a, (bool, int, float)):
            continue                    # carried by the text (scalar_comments)
        if not isinstance(a, np.ndarray):
            size = getattr(a, "nbytes", None)
            if to_host is None or size is None or total + size > INPUTS_LIMIT:
                return False            # a device buffer that is not read back
            a = np.asarray(to_host(a))
        total += a.nbytes
        if total > INPUTS_LIMIT:
            return False
        arrays[f"p{number}"] = a
    np.savez(path, **arrays)
    return True
