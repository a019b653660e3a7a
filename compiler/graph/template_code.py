"""A sync template's check as Python code, made once per graph structure.

`Template.bind` (compiler/graph/trace.py) checks a new graph node by node against a captured
one. Done by a loop over the template's entries, each node costs its entry's unpacking,
list indexing and a tuple of its fields; written out as straight-line code, each node is
a few attribute reads compared with constants, its operands unpacked into locals. A
training step's sync makes this check at every step, a tiny sync is mostly this check,
so the check is generated: one function per structure, kept by the capture's key (a
site whose graph changes back and forth makes it once per structure).

The generated function, for the graph of `roots`:

    def check(roots):
        f0, = roots
        if f0.buffer is not None or f0.op != 'reduce' or f0.dtype is not t0 \\
                or (f0.shape is not s0 and f0.shape != s0) \\
                or (f0.attrs is not a0 and f0.attrs != a0):
            return None
        f1, = f0.operands                   # (another operand count raises ValueError)
        ...
        if f4 is not f7:                    # one node in two operand slots
            return None
        order = (f9, f5, ...)               # the nodes by position
        if len({f5, f8}) != 2:              # positions alike: two nodes, not one
            return None
        ...leaf checks, each buffer and scalar into its argument...
        return order, [b0, f6.value]

Local `fJ` is entry J of the walk (compiler/graph/trace.py `_plan_walk`): the roots, then the
operands of each op node in turn; names `tJ`, `sJ`, `aJ`, ... are the constants the checks
compare with, in the function's own namespace (a shape and an attribute dict are the
captured node's own objects: a loop's nodes mostly share them, and `is` settles those).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

_CODE: dict = {}          # capture key -> generated check
_MAX_CODE = 256


def check_for(key: tuple, plan: Any, donated_type: type) -> Callable:
    """The check of the structure `key`, made from `plan` (a Template: its walk, leaves
    and outputs) the first time. `donated_type`: the buffer class that stands for a
    value no longer there (trace.py's DonatedBuffer)."""
    fn = _CODE.get(key)
    if fn is None:
        if len(_CODE) >= _MAX_CODE:
            _CODE.clear()
        fn = _CODE[key] = generate(plan, donated_type)
    return fn


def generate(plan: Any, donated_type: type) -> Callable:
    """The check function of `plan` (see the module docstring)."""
    names: dict = {"_ARRAY": np.ndarray, "_DonatedBuffer": donated_type}
    lines = ["def check(roots):"]
    add = lines.append
    count = len(plan.outputs)
    add(f"    {_targets(range(count))} = roots")
    for j, (op, shape, dtype, attrs), slots in plan.walk:
        node = f"f{j}"
        names[f"t{j}"], names[f"s{j}"] = dtype, shape
        # shapes and attributes by identity first: a loop's nodes mostly share them
        test = [f"{node}.buffer is not None", f"{node}.op != {op!r}", f"{node}.dtype is not t{j}",
                f"({node}.shape is not s{j} and {node}.shape != s{j})"]
        if attrs:
            names[f"a{j}"] = attrs
            test.append(f"({node}.attrs is not a{j} and {node}.attrs != a{j})")
        else:
            test.append(f"{node}.attrs")          # any attribute: not this node
        _fail_if(add, test)
        if slots:
            add(f"    {_targets(range(count, count + slots))} = {node}.operands")
        else:
            _fail_if(add, [f"{node}.operands"])
        count += slots
    for a, b in plan.shared:
        _fail_if(add, [f"f{a} is not f{b}"])
    add(f"    order = ({''.join(f'f{j}, ' for j in plan.pick)})")
    if plan.alike:                                # (see trace.py `_may_coincide`)
        alike = "".join(f"f{plan.pick[i]}, " for i in plan.alike)
        _fail_if(add, [f"len({{{alike}}}) != {len(plan.alike)}"])
    args = [""] * plan.nargs
    for i, shape, dtype, number in plan.buffers:
        node, buf = f"f{plan.pick[i]}", f"b{number}"
        names[f"t{node}"] = dtype
        add(f"    {buf} = {node}.buffer")
        _fail_if(add, [f"{buf} is None", f"{node}.dtype is not t{node}",
                       f"{node}.shape != {_constant(names, f's{node}', shape)}",
                       f"type({buf}) is not _ARRAY and isinstance({buf}, _DonatedBuffer)"])
        args[number] = buf
    for i, dtype, number in plan.scalars:
        node = f"f{plan.pick[i]}"
        names[f"t{node}"] = dtype
        _fail_if(add, [f"{node}.buffer is not None", f"{node}.op != 'scalar'",
                       f"{node}.operands", f"{node}.dtype is not t{node}"])
        args[number] = f"{node}.value"
    for i, kept, dtype, literal in plan.constants:
        node = f"f{plan.pick[i]}"
        names[f"k{node}"], names[f"t{node}"], names[f"l{node}"] = kept, dtype, literal
        # a kept constant is one node everywhere: found by identity first
        add(f"    if {node} is not k{node} or {node}.buffer is not None:")
        add(f"        value = {node}.value")
        add(f"        if {node}.buffer is not None or {node}.op != 'constant' or {node}.operands"
            f" or {node}.dtype is not t{node} or getattr(value, '_key', value) != l{node}:")
        add("            return None")
    add(f"    return order, [{', '.join(args)}]")
    source = "\n".join(lines) + "\n"
    exec(compile(source, "<lazyarray sync template>", "exec"), names)
    check = names["check"]
    check.source = source           # (for a reader debugging a template)
    return check


def _targets(indices: Any) -> str:
    """'f3, f4, ' : unpacking that raises ValueError for another count."""
    return "".join(f"f{j}, " for j in indices)


def _fail_if(add: Callable, tests: list) -> None:
    add(f"    if {' or '.join(tests)}:")
    add("        return None")


def _constant(names: dict, name: str, value: Any) -> str:
    """A shape as a literal when it is a plain tuple of ints, else a named constant."""
    if type(value) is tuple and all(type(d) is int for d in value):
        return repr(value)
    names[name] = value
    return name
