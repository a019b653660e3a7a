"""The HLO: dtypes, nodes, primitives, modules, passes and code generation."""
from . import dtypes, primitives  # noqa: F401  (fills the primitive registry)
from .module import Instruction, Module
from .node import Node
from .primitive import PRIMITIVES, Primitive, apply
from .trace import Capture, capture

__all__ = ["dtypes", "Instruction", "Module", "Node", "PRIMITIVES", "Primitive", "apply",
           "Capture", "capture"]
