"""No import cycle between the modules of cglint and of the rule catalogue.

The graph is read from the source with `ast`: every import statement counts, also those
inside functions (a lazy import still ties the modules together), except imports under
`if TYPE_CHECKING:`, which never run.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
# Package folders and the names they are imported under (rules/ ships as cglint.rules).
PACKAGES = {"cglint": ROOT / "cglint", "cglint.rules": ROOT / "rules"}


def module_files() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Import statements of a module, anywhere but under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                yield from _imports_of(child)
            continue
        yield from _imports_of(node)


def _imports_of(node: ast.AST):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _imports(node)


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> Optional[str]:
    if not node.level:
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for module, path in files.items():
        for node in _imports(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                source = _absolute(module, path.name == "__init__.py", node)
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in files else source for a in node.names]
            graph[module] |= {t for t in targets if t in files and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_graph_sees_lazy_imports_and_skips_type_only_ones():
    graph = import_graph()
    assert "cglint.verify.api" in graph["cglint"]  # imported inside cglint.__getattr__
    assert "cglint.rule" in graph["cglint.rules.sync"]
    type_only = {"cglint.engine.context", "cglint.fix"}  # imported by cglint.rule for annotations
    assert not type_only & graph["cglint.rule"]


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    # The catalogue imports the engine (to check rules against what the walk dispatches), so
    # the engine reads its data files through cglint.datafiles, not cglint.catalogue.
    assert cycles(import_graph()) == []
