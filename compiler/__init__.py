"""The HLO: dtypes, nodes, primitives, modules, passes and code generation.

`compile(module, target, donated) -> Program` is the one entry point of compilation
(compiler/driver.py); a Program (compiler/program.py) is all a device loads and runs.

`compile` is looked up on first use (PEP 562): recording ops and running a cached
program need the IR, not the pass pipeline and code generators that the driver brings
(tens of milliseconds of a process's start)."""
from typing import Any

from .hlo import dtypes
from . import primitives  # noqa: F401  (fills the primitive registry)
from .hlo.module import Instruction, Module
from .graph.node import Node
from .primitive import PRIMITIVES, Primitive, apply
from .program import Program
from .graph.trace import Capture, capture

__all__ = ["dtypes", "Instruction", "Module", "Node", "PRIMITIVES", "Primitive", "apply",
           "Capture", "capture", "compile", "Program"]


def __getattr__(name: str) -> Any:
    if name == "compile":
        from .driver import compile as entry
        globals()["compile"] = entry
        return entry
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
