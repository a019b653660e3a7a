"""Flags: every LAZYARRAY_* variable is declared once in lazyarray/config.py with help text,
is readable and overridable from Python, and no other module reads the environment for one."""
from __future__ import annotations

import ast
import pathlib
import re

import pytest

import lazyarray as la
from lazyarray import config

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCE_DIRS = ("compiler", "devices", "ops", "lazyarray")
CONFIG_FILE = ROOT / "lazyarray" / "config.py"


def _sources() -> list:
    return sorted(p for d in SOURCE_DIRS for p in (ROOT / d).rglob("*.py"))


# ---- declared once, with help ---------------------------------------------------------------

def test_every_flag_has_help_and_its_variable_name():
    assert config.FLAGS
    for name, flag in config.FLAGS.items():
        assert flag.name == name
        assert flag.env == "LAZYARRAY_" + name.upper()
        assert len(flag.help.split()) >= 4, f"{flag.env}: help text too short: {flag.help!r}"


def test_each_flag_is_declared_once():
    tree = ast.parse(CONFIG_FILE.read_text())
    declared = [node.args[0].value for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Flag"
                and node.args and isinstance(node.args[0], ast.Constant)]
    assert sorted(declared) == sorted(set(declared)), f"declared twice: {declared}"
    assert set(declared) == set(config.FLAGS)


def test_every_variable_mentioned_anywhere_is_declared():
    declared = {f.env for f in config.FLAGS.values()}
    files = _sources() + sorted((ROOT / "tests").glob("*.py")) + \
        [p for p in (ROOT / "README.md", ROOT / "bench") if p.is_file()] + \
        sorted((ROOT / "docs").glob("*.md"))
    unknown = {}
    for path in files:
        for var in re.findall(r"LAZYARRAY_[A-Z0-9_]*[A-Z0-9]", path.read_text()):
            if var not in declared:
                unknown.setdefault(var, path.relative_to(ROOT).as_posix())
    assert not unknown, f"LAZYARRAY_* variables used but not declared in config.py: {unknown}"


def test_describe_lists_every_variable():
    text = config.describe()
    for flag in config.FLAGS.values():
        assert flag.env in text


# ---- reading, setting, overriding -------------------------------------------------------------

def test_override_sets_and_restores():
    strict, debug = la.config.strict, la.config.debug
    with la.config.override(strict=not strict, debug=debug + 3):
        assert la.config.strict is (not strict) and la.config.debug == debug + 3
    assert la.config.strict is strict and la.config.debug == debug


def test_override_restores_after_an_exception():
    before = la.config.dump
    with pytest.raises(KeyError):
        with la.config.override(dump="/tmp/somewhere"):
            assert la.config.dump == "/tmp/somewhere"
            raise KeyError("boom")
    assert la.config.dump == before


def test_overrides_nest():
    with la.config.override(debug=1):
        with la.config.override(debug=2):
            assert la.config.debug == 2
        assert la.config.debug == 1


def test_unknown_setting_is_refused():
    with pytest.raises(AttributeError, match="settings"):
        la.config.no_such_flag
    with pytest.raises(AttributeError, match="no_such_flag"):
        with la.config.override(no_such_flag=1):
            pass


def test_assignment_sets_a_flag():
    before = la.config.verify
    try:
        la.config.verify = True
        assert la.config.verify is True
    finally:
        la.config.verify = before


def test_strict_flag_takes_effect_through_override(device):
    x = la.asarray([0.0, 1.0])
    with la.config.override(strict=True):
        with pytest.raises(RuntimeError, match="nonzero"):
            la.nonzero(x)
    (idx,) = la.nonzero(x)                        # back to a counted graph break
    assert idx.numpy().tolist() == [1]


@pytest.mark.parametrize("raw, value", [("1", True), ("true", True), ("yes", True), ("0", False),
                                        ("false", False), ("", False), ("off", False)])
def test_environment_gives_the_starting_value(raw, value, monkeypatch):
    saved = dict(config._values)
    monkeypatch.setenv("LAZYARRAY_STRICT", raw)
    monkeypatch.setenv("LAZYARRAY_DEBUG", "2")
    try:
        config.reload()
        assert config.strict is value
        assert config.debug == 2
    finally:
        config._values.update(saved)


# ---- nobody else reads the environment for a LAZYARRAY_ variable -----------------------------

def environment_reads(source: str) -> list:
    """Lines where the environment (os.environ, os.getenv) is read with a LAZYARRAY_ name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Call, ast.Subscript, ast.Compare)):
            continue
        text = ast.unparse(node)
        if "environ" not in text and "getenv" not in text:
            continue
        names = [c.value for c in ast.walk(node)
                 if isinstance(c, ast.Constant) and isinstance(c.value, str)]
        if any(n.startswith("LAZYARRAY") for n in names):
            found.append(node.lineno)
    return sorted(set(found))


def test_no_other_module_reads_lazyarray_variables():
    offenders = []
    for path in _sources():
        if path.resolve() == CONFIG_FILE.resolve():
            continue
        for line in environment_reads(path.read_text()):
            offenders.append(f"{path.relative_to(ROOT)}:{line}")
    assert not offenders, ("read LAZYARRAY_* from the environment outside lazyarray/config.py "
                           f"(use lazyarray.config instead): {offenders}")


@pytest.mark.parametrize("source, bad", [
    ("import os\nx = os.environ.get('LAZYARRAY_DEBUG')\n", True),
    ("import os\nx = os.environ['LAZYARRAY_DUMP']\n", True),
    ("import os\nx = os.getenv('LAZYARRAY_STRICT', '0')\n", True),
    ("import os\nok = 'LAZYARRAY_DEBUG' in os.environ\n", True),
    ("import os\nx = os.environ.get('CUDA_HOME')\n", False),
    ("from . import config\nx = config.debug\n", False),
])
def test_the_environment_check_catches_direct_reads(source, bad):
    assert bool(environment_reads(source)) is bad
