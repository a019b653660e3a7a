"""Imports follow DESIGN.md's table: compiler imports nothing else of the project; devices
import compiler; ops import compiler; lazyarray imports all. Read with `ast`, never run."""
from __future__ import annotations

import ast
import pathlib
import tomllib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# layer -> the layers it may import (its own included)
ALLOWED = {
    "compiler": {"compiler"},
    "devices": {"devices", "compiler"},
    "ops": {"ops", "compiler"},
    "lazyarray": {"lazyarray", "devices", "ops", "compiler"},
}


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def package_dirs() -> dict:
    """Package name -> folder, from pyproject.toml (the one source of truth): each package
    of `packages` lives in the folder `package-dir` maps it to, or in its parent's folder."""
    roots = _setuptools()["package-dir"]
    out = {}
    for pkg in _setuptools()["packages"]:
        parts = pkg.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in roots:
                out[pkg] = ROOT / roots[".".join(parts[:n])] / "/".join(parts[n:])
                break
    return out


def layer_of(module: str) -> str:
    """'lazyarray.compiler.passes.cse' -> 'compiler'; 'lazyarray.tensor' -> 'lazyarray'."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("compiler", "devices", "ops"):
        return parts[1]
    return "lazyarray"


def source_files() -> list:
    """(module name, path) of every .py file of the four layers."""
    out = {}
    for pkg, folder in package_dirs().items():
        for path in folder.glob("*.py"):
            name = pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"
            out[path.resolve()] = name
    return sorted((name, path) for path, name in out.items())


def test_every_package_folder_is_packaged():
    """A folder with an __init__.py under a layer's folder is a package of `packages` (a
    wheel would leave out a forgotten one), and every package listed is a folder."""
    roots = {pathlib.Path(p).resolve() for p in _setuptools()["package-dir"].values()}
    found = {init.parent.resolve() for root in roots for init in root.rglob("__init__.py")}
    listed = {folder.resolve() for folder in package_dirs().values()}
    assert not found - listed, f"folders missing from pyproject's packages: {sorted(found - listed)}"
    assert all((folder / "__init__.py").is_file() for folder in listed), sorted(listed)
    assert len(listed) == len(_setuptools()["packages"])


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(source: str, module: str, is_package: bool = False) -> list:
    """(line, project module) for every import of the project in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            if target == "lazyarray":       # `from lazyarray import ops` names sub-packages
                found += [(node.lineno, f"lazyarray.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return [(line, m) for line, m in found if m == "lazyarray" or m.startswith("lazyarray.")]


def violations(source: str, module: str, is_package: bool = False) -> list:
    layer = layer_of(module)
    return [f"{module} line {line} imports {target} ({layer} may import only "
            f"{', '.join(sorted(ALLOWED[layer]))})"
            for line, target in imported_modules(source, module, is_package)
            if layer_of(target) not in ALLOWED[layer]]


def test_every_layer_has_sources():
    layers = {layer_of(name) for name, _ in source_files()}
    assert layers == set(ALLOWED)


def test_imports_follow_the_layering_table():
    problems = []
    for name, path in source_files():
        problems += violations(path.read_text(), name, path.stem == "__init__")
    assert not problems, "imports against DESIGN.md's table:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("source, module, is_package, bad", [
    ("from ..devices import interpreter", "lazyarray.ops.bad", False, True),
    ("from ..compiler import dtypes", "lazyarray.ops.good", False, False),
    ("import lazyarray.tensor", "lazyarray.compiler.bad", False, True),
    ("from lazyarray import ops", "lazyarray.devices.bad", False, True),
    ("from .. import runtime", "lazyarray.devices.bad", False, True),
    ("from ...ops import manipulation", "lazyarray.compiler.passes.bad", False, True),
    ("from ..node import Node", "lazyarray.compiler.passes.good", False, False),
    ("from . import ops", "lazyarray", True, False),
    ("from .tensor import Tensor", "lazyarray.debug", False, False),
    ("def f():\n    from ..ops import promotion\n", "lazyarray.compiler.late", False, True),
    ("import numpy as np", "lazyarray.compiler.good", False, False),
])
def test_the_checker_catches_forbidden_imports(source, module, is_package, bad):
    assert bool(violations(source, module, is_package)) is bad


def test_relative_imports_resolve_to_the_right_module():
    assert imported_modules("from ..compiler.node import Node", "lazyarray.ops.x") == \
        [(1, "lazyarray.compiler.node")]
    assert imported_modules("from . import dtypes", "lazyarray.compiler", True) == \
        [(1, "lazyarray.compiler")]
    assert imported_modules("from .dtypes import DType", "lazyarray.compiler.node") == \
        [(1, "lazyarray.compiler.dtypes")]


def test_tests_and_tools_import_the_installed_package():
    """Tests, benchmarks and examples import `lazyarray.<layer>`, never the folders by path."""
    folders = {"compiler", "devices", "ops"}
    problems = []
    for sub in ("tests", "bench", "examples"):
        for path in sorted((ROOT / sub).rglob("*.py")) if (ROOT / sub).is_dir() else []:
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    names = [node.module]
                for name in names:
                    if name.split(".")[0] in folders:
                        problems.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {name}")
    assert not problems, "import lazyarray.<layer> instead:\n  " + "\n  ".join(problems)


# ---- a device only loads a Program and runs it -------------------------------------------

# What a device may take from the compiler: the entry point, the Program it returns, the
# data types a Program describes, and the primitive registry (a library call and the
# reference the interpreter runs are looked up in the primitives' stanzas). And
# profile_hooks: the one place a run loop reports its kernels' times while a profile
# records (devices may not import lazyarray, and the compiler's passes report there too);
# it holds no compiler internals. And fork_locks: every lock of the project is made there,
# so that a fork reinitializes them all in the child (no compiler internals either).
# And the loop builder of code generation: the CPU runtime writes its own native functions
# (the worker pool, GEMM tiles: devices/cpu/pool_ir.py) in LLVM IR with it, and the
# compiler turns that IR into object code (driver.host_object).
DEVICE_MAY_USE = {"lazyarray.compiler", "lazyarray.compiler.driver",
                  "lazyarray.compiler.codegen.loops",
                  "lazyarray.compiler.program", "lazyarray.compiler.hlo.dtypes",
                  "lazyarray.compiler.hlo.module", "lazyarray.compiler.hlo.literal",
                  "lazyarray.compiler.primitive", "lazyarray.compiler.profile_hooks",
                  "lazyarray.compiler.fork_locks"}


def compiler_modules_used(source: str, module: str, is_package: bool = False) -> list:
    """(line, compiler module) for each compiler module `source` imports or reaches as an
    attribute of an imported compiler package (`compiler.codegen.x`)."""
    found = []
    package_names = {}       # local name -> compiler package it is bound to
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            if target.startswith("lazyarray.compiler") or target == "lazyarray":
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    is_module = _is_compiler_module(sub)
                    name = sub if is_module else target
                    if name == "lazyarray":
                        continue
                    found.append((node.lineno, name))
                    if is_module:
                        package_names[a.asname or a.name] = sub
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("lazyarray.compiler"):
                    found.append((node.lineno, a.name))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in package_names:
            sub = f"{package_names[node.value.id]}.{node.attr}"
            if _is_compiler_module(sub):
                found.append((node.lineno, sub))
    return found


def _is_compiler_module(name: str) -> bool:
    if not name.startswith("lazyarray.compiler"):
        return False
    rel = name.split(".")[2:]
    base = package_dirs()["lazyarray.compiler"]
    path = base.joinpath(*rel) if rel else base
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def device_violations(source: str, module: str, is_package: bool = False) -> list:
    return [f"{module} line {line} uses {target} (a device may use only "
            f"{', '.join(sorted(DEVICE_MAY_USE))})"
            for line, target in compiler_modules_used(source, module, is_package)
            if target not in DEVICE_MAY_USE]


def test_devices_use_only_the_compile_entry_point_and_the_program():
    problems = []
    for name, path in source_files():
        if layer_of(name) == "devices":
            problems += device_violations(path.read_text(), name, path.stem == "__init__")
    assert not problems, "devices reach into the compiler:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("source, bad", [
    ("from ..compiler.passes.pipeline import compile_plan", True),
    ("from ..compiler.codegen import llvm_target", True),
    ("from ..compiler import codegen\ncodegen.nvptx.emit_plan", True),
    ("from .. import compiler\nx = compiler.planning", True),
    ("from ..compiler import planning\nx = planning.fusion", True),
    ("def f():\n    from ..compiler.planning.plan import ExecutionPlan\n", True),
    ("from ..compiler.driver import compile", False),
    ("from ..compiler.program import Program", False),
    ("from ..compiler.hlo import dtypes as D", False),
    ("from ..compiler import compile", False),
    ("from .. import compiler\nx = compiler.__file__", False),
])
def test_the_device_checker_catches_compiler_internals(source, bad):
    assert bool(device_violations(source, "lazyarray.devices.bad")) is bad
