"""What CPython's `ast` tells cheaply about a module, so that libcst parses only what the engine walks.

libcst parses about ten times slower than `ast`, and a capture usually reaches a few
functions of a large module. The outline lists the module's top-level functions and
methods (as the project index finds them) with their line spans and the few facts the
engine asks about every one of them, and gives a skeleton of the source with those
bodies blanked out. libcst parses the skeleton for the module's structure (imports,
classes, signatures, decorators, module-level code) and each function only when the
engine walks it. Blanked lines stay as empty lines, so the skeleton keeps every line
number of the source.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterator, Optional

# Statements the project index looks through for definitions (`if TYPE_CHECKING:`, `try:`).
_BLOCKS = (ast.If, ast.Try, ast.TryStar, ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


@dataclass
class DefOutline:
    qualname: str  # "f" or "Class.method"
    line: int  # the line of `def` (or `async`), after any decorators
    indented: bool
    end_line: int
    blanked: bool  # the body's lines are empty in the skeleton
    names: frozenset  # names and attribute names used anywhere in the function
    stored_attrs: frozenset  # attribute names assigned anywhere in it (`self.x = ...`)
    self_calls: Optional[frozenset]  # methods called on the first parameter outside nested scopes
    declares_global: bool


@dataclass
class Outline:
    defs: list[DefOutline]  # in source order, as the index meets them
    starts: list[int]  # first line of each top-level statement
    skeleton: str
    lines: list[str] = field(repr=False)

    def names_by_qualname(self) -> dict[str, frozenset]:
        result: dict[str, frozenset] = {}
        for d in self.defs:
            result[d.qualname] = result.get(d.qualname, frozenset()) | d.names
        return result

    def function_source(self, d: DefOutline) -> tuple[str, int]:
        """The source of one function (without its decorators) and the line before its
        first line. An indented method gets an `if 1:` line above it, so that it parses
        where it stands, with its columns unchanged."""
        text = "".join(self.lines[d.line - 1 : d.end_line])
        if not text.endswith("\n"):
            text += "\n"
        if d.indented:
            return "if 1:\n" + text, d.line - 2
        return text, d.line - 1


def outline_of(text: str) -> Optional[Outline]:
    """The module's outline; None where `ast` cannot parse it or its lines are ambiguous
    (a lone carriage return or form feed counts differently in the two parsers): the
    module is then parsed whole, as before."""
    if "\f" in text or ("\r" in text and "\r" in text.replace("\r\n", "")):
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = _LINE.findall(text)
    defs: list[DefOutline] = []
    blank: list[tuple[int, int, str]] = []  # (first body line, last line, indentation)
    for qualname, node in _definitions(tree):
        first = node.body[0]
        line_text = lines[first.lineno - 1] if first.lineno <= len(lines) else ""
        prefix = line_text.encode("utf-8")[: first.col_offset]
        blanked = not prefix.strip()  # the body starts a line of its own
        if blanked:
            blank.append((first.lineno, node.end_lineno or first.lineno, prefix.decode("utf-8", "replace")))
        defs.append(
            DefOutline(
                qualname=qualname,
                line=node.lineno,
                indented=node.col_offset > 0,
                end_line=node.end_lineno or node.lineno,
                blanked=blanked,
                names=_names(node),
                stored_attrs=_stored_attrs(node),
                self_calls=_self_calls(node),
                declares_global=any(isinstance(n, ast.Global) for n in ast.walk(node)),
            )
        )
    skeleton = list(lines)
    for first, last, indent in blank:
        skeleton[first - 1] = indent + "...\n"
        for index in range(first, min(last, len(skeleton))):
            skeleton[index] = "\n"
    starts = [stmt.lineno for stmt in tree.body]
    return Outline(defs, starts, "".join(skeleton), lines)


def _top_level(body: list) -> Iterator[ast.stmt]:
    for stmt in body:
        if isinstance(stmt, _BLOCKS):
            for part in (stmt.body, *(h.body for h in getattr(stmt, "handlers", ())), getattr(stmt, "orelse", ()), getattr(stmt, "finalbody", ())):
                yield from _top_level(list(part))
        else:
            yield stmt


def _definitions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Top-level functions and methods, in the order the project index meets them."""
    for stmt in _top_level(tree.body):
        if isinstance(stmt, ast.ClassDef):
            for member in _top_level(stmt.body):
                if isinstance(member, _DEFS):
                    yield f"{stmt.name}.{member.name}", member
        elif isinstance(stmt, _DEFS):
            yield stmt.name, stmt


def _names(node: ast.AST) -> frozenset:
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return frozenset(found)


def _stored_attrs(node: ast.AST) -> frozenset:
    return frozenset(n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store))


def _self_calls(node) -> Optional[frozenset]:
    params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
    if not params:
        return None
    me = params[0].arg
    found = set()
    stack = list(ast.iter_child_nodes(node))
    while stack:
        current = stack.pop()
        if isinstance(current, ast.Call) and isinstance(current.func, ast.Attribute):
            if isinstance(current.func.value, ast.Name) and current.func.value.id == me:
                found.add(current.func.attr)
        if not isinstance(current, _SCOPES):
            stack.extend(ast.iter_child_nodes(current))
    return frozenset(found)
