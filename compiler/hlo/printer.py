"""The HLO text form: one instruction a line, close to XLA's.

    HloModule cpu_3

    ENTRY main {
      %p.0 = f32[4,4] parameter(), number=0
      %c.1 = f32[] constant(1)
      %add.2 = f32[4,4] add(f32[4,4] %p.0, f32[4,4] %mul.1)
      %reduce.3 = f32[4] reduce(f32[4,4] %add.2), axes={1}, kind=sum
      ROOT %tuple.4 = (f32[4], f32[4,4]) tuple(%reduce.3, %add.2)
    }

The module's outputs print as a final ROOT tuple (even for one output). Attributes print
in the primitive's declared order. Every value prints exactly: floats as the repr of the
Python float they equal (so that every float16, bfloat16, float32 and float64 value comes
back bit for bit), NaNs other than the dtype's default NaN with their bits. `parser.py`
reads this text back; the two must round-trip every module exactly.
"""
from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import DType
from .literal import Literal
from ..primitive import PRIMITIVES

if TYPE_CHECKING:     # module.py prints through this module (Module.__str__)
    from .module import Instruction, Module

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# words the parser reads as something other than a string
_RESERVED = frozenset(("true", "false", "none", "nan", "inf", "literal"))
_SHORT_NAMES = {"parameter": "p", "constant": "c"}


def print_module(module: Module) -> str:
    """The module's text; sub-computations (loop bodies, branches: modules held as
    attributes) print first, each as a block `%body.0 { ... }` that attributes name."""
    names: dict = {}
    lines = [f"HloModule {_module_name(module.name)}", ""]
    _computation_blocks(module, names, lines)
    lines.append("ENTRY main {")
    _block_lines(module, names, lines)
    return "\n".join(lines) + "\n"


def _block_lines(module: Module, names: dict, lines: list) -> None:
    for i in range(len(module.instructions)):
        lines.append("  " + instruction_text(module, i, names=names))
    lines.append("  " + root_text(module))
    lines.append("}")


def _computation_blocks(module: Module, names: dict, lines: list) -> None:
    """Blocks for the sub-computations `module` holds, inner ones first, each once
    (equal modules share a block); `names` maps each to its `%name`."""
    for _, attr, sub in module.sub_computations():
        if sub in names:
            continue
        _computation_blocks(sub, names, lines)
        names[sub] = f"%{attr.split('[')[0]}.{len(names)}"
        lines.append(names[sub] + " {")
        _block_lines(sub, names, lines)
        lines.append("")


def instruction_name(module: Module, i: int) -> str:
    """The deterministic, unique name of instruction i: its op (shortened for leaves) and
    its position. A position that does not exist prints as `%?.i` (for the verifier's
    messages about broken modules)."""
    if not isinstance(i, int) or not 0 <= i < len(module.instructions):
        return f"%?.{i}"
    op = module.instructions[i].op
    return f"%{_SHORT_NAMES.get(op, op)}.{i}"


def instruction_text(module: Module, i: int, strict: bool = True, names: Any = None) -> str:
    """One instruction as a line of text (without indentation). With strict=False an
    attribute value that has no text form prints as `<repr>` instead of raising (for the
    verifier's messages about broken modules)."""
    ins = module.instructions[i]
    head = f"{instruction_name(module, i)} = {type_text(ins.shape, ins.dtype)} {ins.op}"
    if ins.op == "constant" and isinstance(ins.attrs.get("value"), Literal):
        body = f"({literal_text(ins.attrs['value'])})"
        attrs = {k: v for k, v in ins.attrs.items() if k != "value"}
    else:
        body = "(" + ", ".join(_operand_text(module, o) for o in ins.operands) + ")"
        attrs = ins.attrs
    text = attr_text if strict else _lenient_attr_text
    if names is not None:      # sub-computations print as the names of their blocks
        plain = text
        text = lambda v: _computation_ref(v, type(module), names, plain)   # noqa: E731
    return head + body + "".join(f", {k}={text(v)}" for k, v in _ordered(ins.op, attrs))


def _computation_ref(value: Any, kind: type, names: dict, text: Any) -> str:
    """A sub-computation (`kind`: the Module class) by its block's name, else `text`."""
    if isinstance(value, kind):
        return names[value]
    if isinstance(value, tuple) and value and all(isinstance(v, kind) for v in value):
        return "{" + ",".join(names[v] for v in value) + "}"
    return text(value)


def root_text(module: Module) -> str:
    n = len(module.instructions)
    types = ", ".join(_type_of(module, o) for o in module.outputs)
    names = ", ".join(instruction_name(module, o) for o in module.outputs)
    return f"ROOT %tuple.{n} = ({types}) tuple({names})"


def type_text(shape: Any, dtype: Any) -> str:
    """`f32[4,4]`; a tuple type (of the `tuple` op) as `(f32[4], s32[])`."""
    if isinstance(dtype, tuple):
        return "(" + ", ".join(type_text(s, d) for s, d in zip(shape, dtype)) + ")"
    short = dtype.short if isinstance(dtype, DType) else f"?{dtype!r}"
    return f"{short}[{','.join(str(int(n)) for n in shape)}]"


def attr_text(value: Any) -> str:
    """An attribute value: ints, floats, bools, strings, dtypes, nested tuples, literals."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, DType):
        return value.short
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return _float_text(float(value))
    if isinstance(value, str):
        return _string_text(value)
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):   # a list is not canonical (the verifier says so)
        return "{" + ",".join(attr_text(v) for v in value) + "}"
    if isinstance(value, Literal):
        a = value.array
        return f"literal({type_text(a.shape, _dtype_of(a))} {literal_text(value)})"
    raise TypeError(f"HLO printer: cannot print attribute value {value!r} of type "
                    f"{type(value).__name__}; attributes are ints, floats, bools, strings, "
                    f"dtypes, tuples of these, or Literals")


def literal_text(literal: Literal) -> str:
    """A literal's values as nested braces, `{{1, 2}, {3, 4}}`; a 0-d one as its value."""
    a = literal.array
    return _nested(a, _element_printer(a.dtype))


# ---- helpers -------------------------------------------------------------------------

def _lenient_attr_text(value: Any) -> str:
    try:
        return attr_text(value)
    except TypeError:
        return f"<{value!r}>"


def _module_name(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_.\-]+", name) else json.dumps(name)


def _ordered(op: str, attrs: dict) -> list:
    declared = PRIMITIVES[op].attrs if op in PRIMITIVES else ()
    first = [(k, attrs[k]) for k in declared if k in attrs]
    rest = sorted((k, v) for k, v in attrs.items() if k not in declared)
    return first + rest


def _operand_text(module: Module, o: Any) -> str:
    return f"{_type_of(module, o)} {instruction_name(module, o)}"


def _type_of(module: Module, o: Any) -> str:
    if not isinstance(o, int) or not 0 <= o < len(module.instructions):
        return "?"
    ins: Instruction = module.instructions[o]
    return type_text(ins.shape, ins.dtype)


def _string_text(s: str) -> str:
    from .dtypes import _BY_NAME
    if _BARE.match(s) and s not in _RESERVED and s not in _BY_NAME:
        return s
    return json.dumps(s)


def _float_text(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return repr(x)


def _dtype_of(array: np.ndarray) -> DType:
    from .dtypes import from_numpy
    return from_numpy(array.dtype)


def _element_printer(np_dtype: np.dtype):
    if np_dtype == np.bool_:
        return lambda v: "true" if v else "false"
    if np_dtype.kind in "iu":
        return lambda v: str(int(v))
    if np_dtype.kind == "c":        # complex: (real, imaginary)
        part = _element_printer(np.dtype(np_dtype.char.lower()))
        return lambda v: f"({part(v.real)}, {part(v.imag)})"
    bits_dtype = np.dtype(f"u{np_dtype.itemsize}")
    default_nan = np.array(np.nan, dtype=np_dtype).view(bits_dtype)[()]

    def element(v: Any) -> str:
        x = float(v)
        if math.isnan(x):
            bits = np.array(v, dtype=np_dtype).view(bits_dtype)[()]
            # any other NaN keeps its sign and payload bits, so constants stay bit-exact
            return "nan" if bits == default_nan else f"nan(0x{int(bits):x})"
        return _float_text(x)
    return element


def _nested(a: np.ndarray, element) -> str:
    if a.ndim == 0:
        return element(a[()])
    if a.ndim == 1:
        return "{" + ", ".join(element(v) for v in a) + "}"
    return "{" + ", ".join(_nested(sub, element) for sub in a) + "}"
