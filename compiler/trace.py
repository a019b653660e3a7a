"""From pending graph nodes to a module: the walk that every sync makes.

`capture` walks back from the nodes to be computed, stopping at leaves (nodes holding a
buffer, scalars, constants). It yields the structural key (what the executable cache is
keyed by: structure, shapes, dtypes, attributes and kept constants, never data) and the
runtime arguments in parameter order. Only on a cache miss is a `Module` built from it.
"""
from __future__ import annotations

from .module import Instruction, Module
from .node import Node


class Capture:
    __slots__ = ("order", "positions", "outputs", "key", "args")

    def __init__(self, order: list, positions: dict, outputs: tuple, key: tuple, args: list):
        self.order = order          # nodes, operands before users
        self.positions = positions  # node -> position in order
        self.outputs = outputs      # positions of the requested nodes
        self.key = key
        self.args = args            # a buffer or a scalar per parameter, by number

    def module(self, name: str = "module") -> Module:
        instructions = []
        number = 0
        pos = self.positions
        for n in self.order:
            if n.buffer is not None or n.op in ("parameter", "scalar"):
                ins = Instruction("parameter", (), n.shape, n.dtype, {"number": number})
                number += 1
            elif n.op == "constant":
                ins = Instruction("constant", (), n.shape, n.dtype, {"value": n.value})
            else:
                ins = Instruction(n.op, tuple(pos[o] for o in n.operands), n.shape, n.dtype, n.attrs)
            instructions.append(ins)
        return Module(name, instructions, self.outputs)


def _signature(n: Node) -> tuple:
    return (n.op, n.shape, n.dtype.short, tuple(n.attrs.items()))


def capture(outputs: list) -> Capture:
    positions: dict = {}
    order: list = []
    key: list = []
    args: list = []
    for root in outputs:
        stack = [root]
        while stack:
            n = stack[-1]
            if n in positions:
                stack.pop()
                continue
            if n.buffer is None and n.operands:
                waiting = [o for o in n.operands if o not in positions]
                if waiting:
                    stack.extend(waiting)
                    continue
            stack.pop()
            positions[n] = len(order)
            order.append(n)
            if n.buffer is not None:
                key.append(("P", n.shape, n.dtype.short))
                args.append(n.buffer)
            elif n.op == "scalar":
                key.append(("S", n.dtype.short))
                args.append(n.value)
            elif n.op == "constant":
                key.append(("C", n.dtype.short, n.value))
            elif n.op == "parameter":
                raise ValueError("a parameter leaf without a buffer cannot be computed")
            else:
                sig = n.sig
                if sig is None:
                    sig = n.sig = _signature(n)
                key.append((sig, tuple([positions[o] for o in n.operands])))
    out = tuple(positions[n] for n in outputs)
    key.append(out)
    return Capture(order, positions, out, tuple(key), args)
