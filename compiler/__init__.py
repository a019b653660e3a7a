"""The HLO: dtypes, nodes, primitives, modules, passes and code generation.

`compile(module, target, donated) -> Program` is the one entry point of compilation
(compiler/driver.py); a Program (compiler/program.py) is all a device loads and runs."""
from . import dtypes, primitives  # noqa: F401  (fills the primitive registry)
from .driver import compile
from .module import Instruction, Module
from .node import Node
from .primitive import PRIMITIVES, Primitive, apply
from .program import Program
from .trace import Capture, capture

__all__ = ["dtypes", "Instruction", "Module", "Node", "PRIMITIVES", "Primitive", "apply",
           "Capture", "capture", "compile", "Program"]
