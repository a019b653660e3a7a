"""No import cycle anywhere in the four layers, hidden or not: the graph is built from
every import of the project, at module level and inside functions alike (a late import
only hides a cycle from Python's loader), read with `ast`, never run. Imports under
`if TYPE_CHECKING:` are left out: they never run, and only name types for annotations."""
from __future__ import annotations

import ast
import pathlib

import pytest

from test_layering import _resolve, source_files


def _runtime_nodes(tree: ast.AST) -> list:
    """Every node of `tree` except those inside an `if TYPE_CHECKING:` block."""
    out, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(source: str, module: str, is_package: bool, modules: set) -> set:
    """The project modules `source` imports anywhere: `from pkg import name` is the module
    pkg.name where that is a module, else pkg itself."""
    found = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(node, module, is_package)
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in modules:
                    found.add(sub)
                elif target in modules:
                    found.add(target)
    found.discard(module)
    return found


def import_graph() -> dict:
    files = source_files()
    modules = {name for name, _ in files}
    return {name: imports_of(path.read_text(), name, path.stem == "__init__", modules)
            for name, path in files}


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan's algorithm,
    iterative), each sorted; [] for a DAG."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_at_module_or_function_level():
    found = cycles(import_graph())
    assert not found, "modules that import each other (directly or around a loop):\n  " + \
        "\n  ".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"a", "b"}}, []),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
])
def test_the_cycle_finder(graph, expected):
    assert sorted(cycles(graph)) == expected


@pytest.mark.parametrize("source, found", [
    ("def f():\n    from .b import g\n", {"p.b"}),                # a late import counts
    ("from . import b\n", {"p.b"}),
    ("from .b import g\n", {"p.b"}),
    ("import p.b\n", {"p.b"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import g\n", set()),
    ("if TYPE_CHECKING:\n    pass\nelse:\n    from .b import g\n", {"p.b"}),
])
def test_imports_are_read_everywhere_but_type_checking_blocks(source, found):
    assert imports_of(source, "p.a", False, {"p.a", "p.b"}) == found


def test_the_checker_reads_this_project():
    graph = import_graph()
    assert "lazyarray.compiler.hlo.module" in graph["lazyarray.compiler.hlo.printer"] or \
        "lazyarray.compiler.hlo.printer" in graph["lazyarray.compiler.hlo.module"]
    assert len(graph) > 150 and sum(map(len, graph.values())) > 500
