"""The frontend (`lazyarray/*.py`) has no import loop and no function-local imports of the
project holding one together: its modules form a DAG, read with `ast`, never run.
`__init__.py` is the one place that defers imports, through one table (`_LAZY`, PEP 562)
of leaf modules that recording and running ops never need."""
from __future__ import annotations

import ast
import pathlib

import lazyarray
from lazyarray.compiler.transforms import autodiff
from lazyarray.compiler.graph import builders

ROOT = pathlib.Path(lazyarray.__file__).resolve().parent

# deliberate late imports: a device's module is loaded when the device is first used
# (llvmlite, cuda-python, MPI for distributed); callsite names the package folders without
# importing them on load
LATE_OK = {"devices_registry", "callsite", "distributed"}


def frontend_modules() -> dict:
    return {p.stem: p for p in ROOT.glob("*.py") if p.stem != "__init__"}


def project_imports(path: pathlib.Path, top_level_only: bool) -> set:
    """Frontend modules (by stem) that `path` imports, at module level or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names = set(frontend_modules())
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module is None:
                found |= {a.name for a in node.names if a.name in names}
            elif node.module.split(".")[0] in names:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module in ("lazyarray",):
            found |= {a.name for a in node.names if a.name in names}
    return found


def late_imports(path: pathlib.Path) -> list:
    """Import statements of the project inside functions (line numbers)."""
    tree = ast.parse(path.read_text())
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or
                                                         (node.module or "").startswith("lazyarray")):
                    out.append(node.lineno)
                elif isinstance(node, ast.Import) and any(a.name.startswith("lazyarray")
                                                           for a in node.names):
                    out.append(node.lineno)
    return out


def find_cycle(graph: dict) -> list:
    state: dict = {}
    path: list = []

    def visit(n: str) -> list:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        state[n] = 2
        path.pop()
        return []
    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return []


def test_frontend_modules_import_each_other_without_a_loop():
    graph = {stem: project_imports(p, top_level_only=False)
             for stem, p in frontend_modules().items()}
    assert find_cycle(graph) == []


def test_no_function_local_imports_of_the_project():
    problems = {stem: late_imports(p) for stem, p in frontend_modules().items()
                if stem not in LATE_OK and late_imports(p)}
    for p in (ROOT / "nn").glob("*.py"):
        if late_imports(p):
            problems[f"nn.{p.stem}"] = late_imports(p)
    for p in (ROOT / "optim").glob("*.py"):
        if late_imports(p):
            problems[f"optim.{p.stem}"] = late_imports(p)
    assert problems == {}


def test_lazily_loaded_modules_are_leaves():
    """`lazyarray/__init__.py` loads the modules of its `_LAZY` table on first use (PEP 562)
    rather than by an import statement; that is only sound, and only saves time, when
    no other frontend module imports them (a lazy module may import another)."""
    lazy = {module for module, _ in lazyarray._LAZY.values()}
    assert all((ROOT / f"{m}.py").exists() or (ROOT / m / "__init__.py").exists() for m in lazy)
    importers = {stem: imported_names(p) & lazy
                 for stem, p in frontend_modules().items() if stem not in lazy}
    assert {stem: found for stem, found in importers.items() if found} == {}


def imported_names(path: pathlib.Path) -> set:
    """First components of the frontend modules and packages `path` imports, anywhere."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {a.name for a in node.names} if node.module is None \
                else {node.module.split(".")[0]}
        elif isinstance(node, ast.ImportFrom) and node.module == "lazyarray":
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[1] for a in node.names
                      if a.name.startswith("lazyarray.")}
    return found


def test_the_cycle_finder_finds_a_loop():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_the_late_import_finder_sees_one(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("def f():\n    from .tensor import Tensor\n    import numpy\n")
    assert late_imports(p) == [2]


def test_autodiff_is_the_walk_and_builders_the_helpers():
    assert hasattr(autodiff, "vjp_graph") and hasattr(autodiff, "stop")
    assert not hasattr(autodiff, "take_along_axis") and not hasattr(autodiff, "full")
    assert hasattr(builders, "take_along_axis") and not hasattr(builders, "vjp_graph")


def test_every_tensor_method_is_installed_from_the_table():
    """Tensor's class body defines no op: each operator comes from methods.py."""
    body = (ROOT / "tensor.py").read_text()
    assert "def __add__" not in body and "from . import ops" not in body
    x = lazyarray.asarray([1.0, 2.0])
    assert (x + 1).tolist() == [2.0, 3.0] and (1 - x).tolist() == [0.0, -1.0]
