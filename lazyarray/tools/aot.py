"""Compile a function or a dumped HLO module ahead of time into a shared library and a
C header (tfcompile's role; see lazyarray/aot.py and devices/cpu/aot.py).

    python -m lazyarray.tools.aot model.py:predict --arg f32[1,784] -o build [--name predict]
    python -m lazyarray.tools.aot package.module:fn --arg s64[8] --arg f32[8,16] -o build
    python -m lazyarray.tools.aot dump/cpu_3.hlo -o build --name step

A function is traced with zero-valued arguments of the given types (`--arg`, one per
argument, in order). A dumped module's parameters are its inputs, in number order, except
runtime scalars whose values the dump recorded (`// scalar` lines): those are frozen.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import sys
from typing import Callable, Optional, Sequence

import numpy as np

from ..compiler.hlo import dtypes as D
from ..compiler.hlo.literal import Literal
from ..compiler.hlo.module import Instruction, Module
from ..compiler.hlo.parser import parse_module
from ..compiler.hlo.replay import scalar_values
from ..compiler.hlo.verifier import verify

_TYPE = re.compile(r"^([a-z]+[0-9]*)\[([0-9,\s]*)\]$")


def parse_type(text: str) -> tuple:
    """'f32[2,3]' -> ((2, 3), float32), the HLO text's type syntax."""
    m = _TYPE.match(text.strip())
    by_short = {d.short: d for d in D.ALL}
    if not m or m.group(1) not in by_short:
        raise ValueError(f"aot: bad --arg type {text!r}; write a dtype and a shape as in HLO "
                         f"text, e.g. f32[2,3] or s64[] (dtypes: {', '.join(sorted(by_short))})")
    dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
    return dims, by_short[m.group(1)]


def load_function(spec: str) -> Callable:
    """'path/to/file.py:name' or 'package.module:name' -> the function."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise ValueError(f"aot: {spec!r} is not FILE.py:FUNCTION or MODULE:FUNCTION")
    if where.endswith(".py"):
        loaded = importlib.util.spec_from_file_location("_aot_source", where)
        if loaded is None or not os.path.exists(where):
            raise ValueError(f"aot: no such file {where!r}")
        module = importlib.util.module_from_spec(loaded)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        loaded.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"aot: {where} has no function {attr!r}")
    return fn


def module_inputs(module: Module, recorded: dict) -> tuple:
    """A dumped module with its recorded scalars frozen as constants and the remaining
    parameters renumbered 0, 1, ...: (module, input types in number order)."""
    frozen = []
    for ins in module.instructions:
        if ins.op == "parameter" and ins.attrs["number"] in recorded:
            value = np.asarray(recorded[ins.attrs["number"]], dtype=ins.dtype.np)
            ins = Instruction("constant", (), ins.shape, ins.dtype, {"value": Literal(value)})
        frozen.append(ins)
    numbers = sorted(i.attrs["number"] for i in frozen if i.op == "parameter")
    renumber = {n: k for k, n in enumerate(numbers)}
    out, types = [], {}
    for ins in frozen:
        if ins.op == "parameter":
            k = renumber[ins.attrs["number"]]
            ins = Instruction("parameter", (), ins.shape, ins.dtype, {"number": k})
            types[k] = (ins.shape, ins.dtype)
        out.append(ins)
    return Module(module.name, out, module.outputs), [types[k] for k in range(len(types))]


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lazyarray.tools.aot",
                                description="Compile a function or HLO module into a shared "
                                            "library and a C header.")
    p.add_argument("source", help="FILE.py:FUNCTION, MODULE:FUNCTION, or a dumped .hlo file")
    p.add_argument("--arg", action="append", default=[],
                   help="an argument's type, e.g. f32[2,3] (one per argument, in order)")
    p.add_argument("-o", "--out-dir", default=".", help="where to write lib<name>.so and <name>.h")
    p.add_argument("--name", help="the library's name (default: the function's or module's)")
    p.add_argument("--blas", help="the CBLAS shared library to link (default: NumPy's OpenBLAS)")
    p.add_argument("--cc", help="the C compiler (default: $CC or cc)")
    args = p.parse_args(argv)
    from .. import aot
    from ..devices.cpu.aot import AOTError, build_library
    try:
        if args.source.endswith(".hlo"):
            with open(args.source) as f:
                text = f.read()
            parsed = parse_module(text)
            verify(parsed)
            module, types = module_inputs(parsed, scalar_values(text))
            name = args.name or re.sub(r"\W", "_", parsed.name)
            lib = build_library(module, name, args.out_dir, types, blas=args.blas, cc=args.cc)
        else:
            examples = [np.zeros(s, d.np) for s, d in (parse_type(a) for a in args.arg)]
            fn = load_function(args.source)
            lib = aot.compile(fn, examples, name=args.name, out_dir=args.out_dir,
                              blas=args.blas, cc=args.cc)
    except (OSError, ValueError, TypeError, AOTError) as e:
        msg = str(e)
        print(msg if msg.startswith("aot") else f"aot: {msg}", file=sys.stderr)
        return 1
    print(f"wrote {lib.path} and {lib.header}")
    for k, (shape, dtype) in enumerate(lib.inputs):
        print(f"  input {k}: {dtype.short}{list(shape)}")
    for k, (shape, dtype) in enumerate(lib.outputs):
        print(f"  output {k}: {dtype.short}{list(shape)}")
    if lib.blas:
        print(f"  BLAS: {lib.blas}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
