"""`la.aot.compile(fn, example_args)`: a function as a shared library and a C header,
compiled ahead of time (tfcompile's role); see devices/cpu/aot.py for what the library holds.

    lib = la.aot.compile(predict, [np.zeros((1, 784), np.float32)], name="predict",
                         out_dir="build")
    # build/libpredict.so, build/predict.h:  int predict(const float *x0, float *y0);

The function is traced once with the example arguments' shapes and dtypes (their values
do not matter). Its arguments become the library's inputs, in order; everything else it
reads -- weights it closes over, Python scalars -- is baked into the library as
constants, as tfcompile freezes a graph's variables.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from .compiler.hlo.literal import Literal
from .compiler.hlo.module import Instruction, Module
from .compiler.graph.trace import capture
from .creation import asarray
from .devices.cpu.aot import AOTError, Library, build_library, find_blas  # noqa: F401
from .tensor import Tensor


def trace(fn: Callable, example_args: Sequence[Any], name: str = "fn") -> tuple:
    """(module, input types): fn traced on fresh tensors like `example_args`; parameter k
    of the module is argument k, and every other leaf is a constant."""
    args = [asarray(np.array(a.numpy() if isinstance(a, Tensor) else a)) for a in example_args]
    result = fn(*args)
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    for k, o in enumerate(outs):
        if not isinstance(o, Tensor):
            raise TypeError(f"aot: {getattr(fn, '__name__', 'fn')} must return tensors; "
                            f"output {k} is {type(o).__name__}")
    cap = capture([o._node for o in outs])
    module = cap.module(name)
    number_of = {}
    for k, a in enumerate(args):
        pos = cap.positions.get(a._node)
        if pos is not None:
            number_of[module.instructions[pos].attrs["number"]] = k
    instructions = []
    for ins in module.instructions:
        if ins.op == "parameter":
            number = ins.attrs["number"]
            if number in number_of:
                ins = Instruction("parameter", (), ins.shape, ins.dtype,
                                  {"number": number_of[number]})
            else:       # a weight or a Python scalar: frozen into the library
                value = np.asarray(cap.args[number], dtype=ins.dtype.np).reshape(ins.shape)
                ins = Instruction("constant", (), ins.shape, ins.dtype, {"value": Literal(value)})
        instructions.append(ins)
    types = [(a.shape, a.dtype) for a in args]
    return Module(name, instructions, module.outputs), types


def compile(fn: Callable, example_args: Sequence[Any], name: Optional[str] = None,
            out_dir: str = ".", blas: Optional[str] = None, cc: Optional[str] = None) -> Library:
    """Trace `fn` on arguments like `example_args` and build `out_dir/lib<name>.so` and
    `out_dir/<name>.h`. `blas`: the CBLAS library matrix products call (default: the
    OpenBLAS NumPy ships, else the system's); `cc`: the C compiler (default: $CC or cc).
    Raises AOTError naming an op that needs Python at run time (sort, argsort)."""
    name = name or getattr(fn, "__name__", "fn")
    module, types = trace(fn, example_args, name)
    return build_library(module, name, out_dir, types, blas=blas, cc=cc)


__all__ = ["compile", "trace", "AOTError", "Library"]
