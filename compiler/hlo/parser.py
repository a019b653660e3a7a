"""Reads the HLO text form (see printer.py) back into a Module.

`parse_module(print_module(m)) == m` for every module, and the text printed again is the
same text. Malformed text raises ValueError naming the line and what was expected; each
instruction's declared type is checked against its primitive's shape and dtype rule.

Hand-written text (pass tests: HLO text in, HLO text out) may use any instruction names,
`//` comment lines, operands without their types (`add(%x, %y)`) and, except for
parameters and constants, no result type at all (`%y = negate(%x)`): it is inferred.
"""
from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from . import dtypes as D
from .literal import Literal
from .module import Instruction, Module
from ..primitive import PRIMITIVES

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<name>%[A-Za-z0-9_.\-?]+)
  | (?P<hex>0x[0-9a-fA-F]+)
  | (?P<float>-?(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+))
  | (?P<int>-?\d+)
  | (?P<word>-?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[{}()\[\],=])
  | (?P<bad>.)
""", re.VERBOSE)


class _Tokens:
    """The tokens of one line, with the line number for error messages."""

    def __init__(self, text: str, line: int, computations: Any = None) -> None:
        self.line = line
        self.computations = computations or {}    # name -> Module, for attribute values
        self.items: list = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup
            if kind == "bad":
                self.fail(f"unexpected character {m.group()!r} at column {m.start() + 1}")
            if kind != "ws":
                self.items.append((kind, m.group()))
        self.items.append(("end", "end of line"))
        self.i = 0

    def fail(self, what: str) -> None:
        raise ValueError(f"HLO text, line {self.line}: {what}")

    def peek(self) -> tuple:
        return self.items[self.i]

    def next(self) -> tuple:
        tok = self.items[self.i]
        if tok[0] != "end":      # the end token stays put
            self.i += 1
        return tok

    def at(self, text: str) -> bool:
        return self.items[self.i][1] == text

    def take(self, text: str) -> bool:
        if self.items[self.i][1] == text and self.items[self.i][0] != "end":
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str = "") -> None:
        if not self.take(text):
            self.fail(f"expected {text!r}{' ' + what if what else ''}, found {self.peek()[1]!r}")

    def expect_kind(self, kind: str, what: str) -> str:
        k, v = self.next()
        if k != kind:
            self.fail(f"expected {what}, found {v!r}")
        return v

    def end(self) -> None:
        if self.peek()[0] != "end":
            self.fail(f"unexpected {self.peek()[1]!r} at the end of the line")


# ---- the module ----------------------------------------------------------------------

def parse_module(text: str) -> Module:
    lines = [(n, raw.strip()) for n, raw in enumerate(text.splitlines(), 1)]
    lines = [(n, s) for n, s in lines if s and not s.startswith("//")]
    if not lines:
        raise ValueError("HLO text, line 1: expected 'HloModule <name>', found an empty text")
    name = _header(*lines[0])
    computations: dict = {}      # sub-computations (loop bodies, branches) by name
    k = 1
    while k < len(lines) and not lines[k][1].startswith("ENTRY"):
        k = _computation(lines, k, computations)
    if k >= len(lines) or not re.fullmatch(r"ENTRY\s+\S+\s*\{", lines[k][1]):
        n = lines[k][0] if k < len(lines) else lines[-1][0] + 1
        raise ValueError(f"HLO text, line {n}: expected 'ENTRY main {{'")
    if lines[-1][1] != "}":
        raise ValueError(f"HLO text, line {lines[-1][0]}: expected '}}' closing the ENTRY block")
    return _block(name, lines[k + 1:-1], computations, lines[-1][0])


def _computation(lines: list, k: int, computations: dict) -> int:
    """Parse the sub-computation block starting at lines[k] (`%body.0 {`) into
    `computations`; the index of the line after it."""
    n, s = lines[k]
    m = re.fullmatch(r"(%[A-Za-z0-9_.\-]+)\s*\{", s)
    if m is None:
        raise ValueError(f"HLO text, line {n}: expected 'ENTRY main {{' or a computation "
                         f"'%name {{', found {s[:40]!r}")
    if m.group(1) in computations:
        raise ValueError(f"HLO text, line {n}: computation {m.group(1)} is defined twice")
    end = next((j for j in range(k + 1, len(lines)) if lines[j][1] == "}"), None)
    if end is None:
        raise ValueError(f"HLO text, line {n}: computation {m.group(1)} is not closed by '}}'")
    computations[m.group(1)] = _block(m.group(1)[1:], lines[k + 1:end], computations,
                                      lines[end][0])
    return end + 1


def _block(name: str, body: list, computations: dict, last: int) -> Module:
    names: dict = {}
    instructions: list = []
    outputs = None
    for k, (n, s) in enumerate(body):
        if not s.startswith("ROOT "):
            _instruction(_Tokens(s, n, computations), names, instructions)
        elif k != len(body) - 1:
            raise ValueError(f"HLO text, line {n}: only the last instruction may be ROOT")
        else:
            outputs = _root(_Tokens(s[len("ROOT "):], n), names, instructions)
    if outputs is None:
        n = body[-1][0] if body else last
        raise ValueError(f"HLO text, line {n}: expected the last instruction to be "
                         f"'ROOT %tuple.N = (...) tuple(...)' naming the outputs")
    return Module(name, instructions, outputs)


def parse_attribute(text: str) -> Any:
    """One attribute value as the printer writes it (`{1,2}`, `f32`, `sum`, `"a b"`)."""
    t = _Tokens(text, 1)
    value = _attr(t)
    t.end()
    return value


def _header(n: int, s: str) -> str:
    m = re.fullmatch(r"HloModule\s+(\S.*)", s)
    if m is None:
        raise ValueError(f"HLO text, line {n}: expected 'HloModule <name>', found {s[:40]!r}")
    name = m.group(1).strip()
    if name.startswith('"'):
        try:
            return json.loads(name)
        except json.JSONDecodeError:
            raise ValueError(f"HLO text, line {n}: bad quoted module name {name}") from None
    return name


def _instruction(t: _Tokens, names: dict, instructions: list) -> None:
    name = t.expect_kind("name", "an instruction name like %add.3")
    if name in names:
        t.fail(f"instruction name {name} is defined twice")
    t.expect("=", "after the instruction name")
    shape, dtype = (None, None) if _op_follows(t) else _type(t)
    op = t.expect_kind("word", "an op name")
    if op not in PRIMITIVES:
        t.fail(f"unknown op {op!r}; known ops: {', '.join(sorted(PRIMITIVES))}")
    t.expect("(", f"after {op}")
    attrs: dict = {}
    operands: tuple = ()
    if shape is None and op in ("parameter", "constant"):
        t.fail(f"a {op} needs its type written, like f32[2,3] {op}(...)")
    if op == "constant":
        attrs["value"] = _literal_value(t, shape, dtype)
        t.expect(")", "closing the constant's value")
    else:
        operands = _operands(t, names, instructions)
    while t.take(","):
        key = t.expect_kind("word", "an attribute name")
        if key in attrs:
            t.fail(f"attribute {key!r} given twice")
        t.expect("=", f"after the attribute name {key!r}")
        attrs[key] = _attr(t)
    t.end()
    ins = Instruction(op, operands, (), D.bool_, attrs)   # the type is filled in below
    ins.shape, ins.dtype = _check_type(t, ins, shape, dtype, instructions)
    names[name] = len(instructions)
    instructions.append(ins)


def _op_follows(t: _Tokens) -> bool:
    """Whether the result type is left out (`%y = negate(%x)`): hand-written text may omit
    it, and then it is inferred."""
    kind, word = t.peek()
    after = t.items[t.i + 1][1] if t.i + 1 < len(t.items) else ""
    return kind == "word" and word in PRIMITIVES and after == "("


def _operands(t: _Tokens, names: dict, instructions: list) -> tuple:
    out = []
    if t.take(")"):
        return ()
    while True:
        declared = None if t.peek()[0] == "name" else _type(t)
        ref = t.expect_kind("name", "an operand name like %p.0")
        if ref not in names:
            t.fail(f"operand {ref} is not defined by an earlier instruction")
        pos = names[ref]
        if declared is not None and declared != (instructions[pos].shape, instructions[pos].dtype):
            have = instructions[pos]
            t.fail(f"operand {ref} is written as {_fmt(*declared)} but is "
                   f"{_fmt(have.shape, have.dtype)}")
        out.append(pos)
        if t.take(")"):
            return tuple(out)
        t.expect(",", "or ')' between operands")


def _root(t: _Tokens, names: dict, instructions: list) -> tuple:
    t.expect_kind("name", "the root's name like %tuple.4")
    t.expect("=", "after the root's name")
    shape, dtype = (None, None) if _op_follows(t) else _type(t)
    if t.expect_kind("word", "'tuple'") != "tuple":
        t.fail("the ROOT instruction must be a tuple of the outputs")
    t.expect("(", "after tuple")
    outputs = _operands(t, names, instructions)
    t.end()
    have = (tuple(instructions[o].shape for o in outputs),
            tuple(instructions[o].dtype for o in outputs))
    if shape is not None and (not isinstance(dtype, tuple) or (shape, dtype) != have):
        t.fail(f"the ROOT type {_fmt(shape, dtype)} does not match its operands "
               f"{_fmt(*have)}")
    return outputs


def _check_type(t: _Tokens, ins: Instruction, shape: Any, dtype: Any, instructions: list) -> tuple:
    """The instruction's type: the written one, checked against the primitive's rule, or
    the rule's answer where none is written."""
    if ins.op in ("parameter", "constant"):
        _check_leaf(t, ins, dtype)
        return shape, dtype
    declared = PRIMITIVES[ins.op].attrs
    unknown = sorted(set(ins.attrs) - set(declared))
    missing = [k for k in declared if k not in ins.attrs]
    if unknown or missing:
        t.fail(f"{ins.op} takes the attributes {list(declared)}; "
               f"unknown: {unknown}, missing: {missing}")
    try:
        rule = PRIMITIVES[ins.op].infer([instructions[o] for o in ins.operands], **ins.attrs)
    except (ValueError, TypeError, IndexError) as e:
        t.fail(f"invalid {ins.op}: {e}")
    rule = (tuple(rule[0]), rule[1])
    if shape is not None and rule != (shape, dtype):
        t.fail(f"{ins.op} is declared {_fmt(shape, dtype)} but its operands and "
               f"attributes give {_fmt(*rule)}")
    return rule


def _check_leaf(t: _Tokens, ins: Instruction, dtype: Any) -> None:
    want = {"parameter": {"number"}, "constant": {"value"}}[ins.op]
    if set(ins.attrs) != want:
        t.fail(f"{ins.op} takes exactly the attributes {sorted(want)}, got {sorted(ins.attrs)}")
    if isinstance(dtype, tuple):
        t.fail(f"a {ins.op} cannot have a tuple type")
    if ins.op == "parameter" and (not isinstance(ins.attrs["number"], int)
                                  or isinstance(ins.attrs["number"], bool)):
        t.fail("a parameter's number must be an integer")


def _fmt(shape: Any, dtype: Any) -> str:
    from .printer import type_text
    return type_text(shape, dtype)


# ---- types ---------------------------------------------------------------------------

def _type(t: _Tokens) -> tuple:
    """`f32[4,4]` -> ((4, 4), float32); `(f32[4], s32[])` -> (((4,), ()), (f32, s32))."""
    if t.take("("):
        shapes, dtypes = [], []
        if not t.take(")"):
            while True:
                s, d = _type(t)
                shapes.append(s)
                dtypes.append(d)
                if t.take(")"):
                    break
                t.expect(",", "or ')' in a tuple type")
        return tuple(shapes), tuple(dtypes)
    word = t.expect_kind("word", "a type like f32[4,4]")
    dtype = _dtype(t, word)
    t.expect("[", f"after the dtype {word}")
    dims = []
    if not t.take("]"):
        while True:
            dims.append(int(t.expect_kind("int", "a dimension size")))
            if dims[-1] < 0:
                t.fail(f"negative dimension size {dims[-1]}")
            if t.take("]"):
                break
            t.expect(",", "or ']' between dimension sizes")
    return tuple(dims), dtype


def _dtype(t: _Tokens, word: str) -> D.DType:
    d = _SHORT.get(word)
    if d is None:
        t.fail(f"unknown dtype {word!r}; valid: {', '.join(_SHORT)}")
    return d


_SHORT = {d.short: d for d in D.EVERY}


# ---- attribute values ----------------------------------------------------------------

def _attr(t: _Tokens) -> Any:
    kind, text = t.next()
    if text == "{":
        items: list = []
        if t.take("}"):
            return ()
        while True:
            items.append(_attr(t))
            if t.take("}"):
                return tuple(items)
            t.expect(",", "or '}' in a tuple")
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "string":
        return json.loads(text)
    if kind == "word":
        return _word_value(t, text)
    if kind == "name":
        if text not in t.computations:
            t.fail(f"computation {text} is not defined before this line")
        return t.computations[text]
    t.fail(f"expected an attribute value, found {text!r}")


def _word_value(t: _Tokens, text: str) -> Any:
    fixed = {"true": True, "false": False, "none": None,
             "nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
    if text in fixed:
        return fixed[text]
    if text in _SHORT:
        return _SHORT[text]
    if text == "literal":
        t.expect("(", "after literal")
        shape, dtype = _type(t)
        if isinstance(dtype, tuple):
            t.fail("a literal cannot have a tuple type")
        value = _literal_value(t, shape, dtype)
        t.expect(")", "closing the literal")
        return value
    if text.startswith("-"):
        t.fail(f"unexpected {text!r}: only numbers and -inf take a minus sign")
    return text


# ---- literals ------------------------------------------------------------------------

def _literal_value(t: _Tokens, shape: tuple, dtype: Any) -> Literal:
    if isinstance(dtype, tuple):
        t.fail("a constant cannot have a tuple type")
    nested = _literal_element(t) if not t.at("{") else _literal_list(t)
    flat: list = []
    _check_nesting(t, nested, shape, flat)
    return Literal(_array(t, flat, shape, dtype))


def _literal_list(t: _Tokens) -> list:
    t.expect("{")
    out: list = []
    if t.take("}"):
        return out
    while True:
        out.append(_literal_list(t) if t.at("{") else _literal_element(t))
        if t.take("}"):
            return out
        t.expect(",", "or '}' in a literal")


class _NaN:
    """A NaN with explicit bits, as printed `nan(0x7fc00001)`."""

    def __init__(self, bits: int) -> None:
        self.bits = bits


def _literal_element(t: _Tokens) -> Any:
    if t.take("("):                 # a complex value: (real, imaginary)
        re = _literal_element(t)
        t.expect(",", "between a complex value's parts")
        im = _literal_element(t)
        t.expect(")", "closing a complex value")
        return complex(*(float("nan") if isinstance(v, _NaN) else float(v) for v in (re, im)))
    kind, text = t.next()
    if kind == "int":
        return int(text)
    if kind == "float":
        return float(text)
    if kind == "word" and text in ("true", "false"):
        return text == "true"
    if kind == "word" and text in ("inf", "-inf"):
        return float(text)
    if kind == "word" and text == "nan":
        if t.take("("):
            bits = int(t.expect_kind("hex", "NaN bits like 0x7fc00001"), 16)
            t.expect(")", "closing the NaN bits")
            return _NaN(bits)
        return float("nan")
    t.fail(f"expected a literal value (a number, true, false, inf or nan), found {text!r}")


def _check_nesting(t: _Tokens, value: Any, shape: tuple, flat: list) -> None:
    if not shape:
        if isinstance(value, list):
            t.fail("the literal has more nesting levels than its type has dimensions")
        flat.append(value)
        return
    if not isinstance(value, list) or len(value) != shape[0]:
        got = len(value) if isinstance(value, list) else "a scalar"
        t.fail(f"the literal does not match its shape {list(shape)}: expected {shape[0]} "
               f"elements at a nesting level, got {got}")
    for v in value:
        _check_nesting(t, v, shape[1:], flat)


def _array(t: _Tokens, flat: list, shape: tuple, dtype: D.DType) -> np.ndarray:
    nans = [(i, v.bits) for i, v in enumerate(flat) if isinstance(v, _NaN)]
    values = [float("nan") if isinstance(v, _NaN) else v for v in flat]
    if dtype is D.bool_ and any(not isinstance(v, bool) for v in values):
        t.fail("a pred literal holds only true and false")
    if dtype is not D.bool_ and any(isinstance(v, bool) for v in values):
        t.fail(f"a {dtype.short} literal cannot hold true or false")
    if dtype.is_complex != any(isinstance(v, complex) for v in values) and values:
        t.fail(f"a {dtype.short} literal holds " + ("only (real, imaginary) pairs"
                                                    if dtype.is_complex else "no complex pairs"))
    if dtype.is_int and any(not isinstance(v, int) for v in values):
        t.fail(f"a {dtype.short} literal holds only integers")
    if dtype.is_int:
        info = np.iinfo(dtype.np)
        bad = [v for v in values if not info.min <= v <= info.max]
        if bad:
            t.fail(f"literal value {bad[0]} is out of range for {dtype.short}")
    flat_array = np.array(values, dtype=dtype.np) if values else np.zeros(0, dtype.np)
    if nans:
        bits = flat_array.view(np.dtype(f"u{dtype.itemsize}"))
        for i, b in nans:
            bits[i] = b
    return flat_array.reshape(shape)
