"""What CPython's `ast` tells cheaply about a module, so that libcst parses only what the engine walks.

libcst parses about ten times slower than `ast`, and a capture usually reaches a few
functions of a large module. The outline lists the module's top-level functions and
methods (as the project index finds them) with their line spans and the few facts the
engine asks about every one of them, and gives a skeleton of the source with those
bodies replaced by `...`. The module is indexed from `ast` (index.py); libcst parses a
top-level statement of the skeleton (a class with its signatures, module-level code) when
the engine first looks into it, and each function only when the engine walks it, from the
function's own lines, so that its positions are those of the source; the skeleton's lines
map back to the source's.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator, NamedTuple, Optional, Union

from cglint import source

# Statements the project index looks through for definitions (`if TYPE_CHECKING:`, `try:`).
_BLOCKS = (ast.If, ast.Try, getattr(ast, "TryStar", ast.Try), ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)
DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)  # `ast` nodes that open a scope
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")


@dataclass(eq=False)
class DefOutline:
    qualname: str  # "f" or "Class.method"
    line: int  # the line of `def` (or `async`), after any decorators
    indented: bool
    end_line: int
    blanked: bool  # the body's lines are empty in the skeleton
    node: ast.AST = field(repr=False)
    source_lines: list[str] = field(repr=False)  # the module's (shared, not copied)

    @cached_property
    def text(self) -> str:
        """The function's source, decorators included."""
        first = min([self.line, *(d.lineno for d in self.node.decorator_list)])  # type: ignore[attr-defined]
        return "".join(self.source_lines[first - 1 : self.end_line])

    def mentions(self, words: Iterable[str]) -> bool:
        """Whether the function's text contains any of `words`: a byte-level test that saves
        walking the `ast` of most functions."""
        return any(word in self.text for word in words)

    @cached_property
    def facts(self) -> "Facts":
        """What one `ast` pass over the function finds, when first asked for."""
        names, called, stored, declares = set(), set(), set(), False
        for decorator in self.node.decorator_list:  # type: ignore[attr-defined]
            called.add(last_name(decorator))
        stack = [self.node]
        while stack:  # ast.walk, without its generators: this runs over every function of a module
            sub = stack.pop()
            kind = type(sub)
            if kind is ast.Name:
                names.add(sub.id)  # type: ignore[attr-defined]
                continue
            if kind is ast.Attribute:
                names.add(sub.attr)  # type: ignore[attr-defined]
                if type(sub.ctx) is ast.Store:  # type: ignore[attr-defined]
                    stored.add(sub.attr)  # type: ignore[attr-defined]
            elif kind is ast.Call:
                called.add(last_name(sub.func))  # type: ignore[attr-defined]
                registered = _registered_name(sub)
                if registered:
                    stored.add(registered)
            elif kind is ast.Global:
                declares = True
            for name in sub._fields:
                value = getattr(sub, name, None)
                if type(value) is list:
                    stack.extend(v for v in value if isinstance(v, ast.AST))
                elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
                    stack.append(value)
        return Facts(frozenset(names), frozenset(called), frozenset(stored), declares)

    @cached_property
    def self_calls(self) -> Optional[frozenset]:
        """Methods called on the first parameter outside nested scopes (None: no parameter)."""
        return _self_calls(self.node)


class Facts(NamedTuple):
    names: frozenset  # names and attribute names used anywhere in the function
    called: frozenset  # last names of what it calls or is decorated with (`graph` in `torch.cuda.graph(g)`)
    stored_attrs: frozenset  # attribute names assigned anywhere in it (`self.x = ...`)
    declares_global: bool


def _registered_name(call) -> str:
    """`"steps"` for `self.register_buffer("steps", ...)`: it stores an attribute too."""
    if isinstance(call.func, ast.Attribute) and call.func.attr in ("register_buffer", "register_parameter") and call.args:
        first = call.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return ""


def last_name(expr: ast.AST) -> str:
    """`graph` for `torch.cuda.graph`, and for a call of it."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    if isinstance(expr, ast.Attribute):
        return expr.attr
    return expr.id if isinstance(expr, ast.Name) else ""


@dataclass
class Outline:
    defs: list[DefOutline]  # in source order, as the index meets them
    skeleton: list[str]  # the skeleton's lines
    starts: list[int]  # the skeleton's line on which each top-level statement starts
    # The source line of each skeleton line: where a node starts, and where it ends (a
    # blanked body's `...` line starts on the body's first line and ends on its last).
    start_lines: list[int] = field(repr=False)
    end_lines: list[int] = field(repr=False)
    lines: list[str] = field(repr=False)
    tree: ast.Module = field(repr=False)

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


def outline_of(text: str, tree: Optional[ast.Module] = None) -> Optional[Outline]:
    """The module's outline; None where `ast` cannot parse it or its lines are ambiguous
    (a lone carriage return or form feed counts differently in the two parsers): the
    module is then parsed whole, as before."""
    if "\f" in text or ("\r" in text and "\r" in text.replace("\r\n", "")):
        return None
    if tree is None:
        parsed = source.cpython_tree(text)  # parsed within CPython's limits: safe for libcst's parser
        tree = parsed if isinstance(parsed, ast.Module) else None
    if not isinstance(tree, ast.Module):
        return None
    lines = _LINE.findall(text)
    defs: list[DefOutline] = []
    blank: list[tuple[int, int, str]] = []  # (first body line, last line, indentation)
    for qualname, node in _definitions(tree):
        first = node.body[0]
        decorators = getattr(first, "decorator_list", None)
        # A decorated nested def or class starts at its first `@`, on a line of its own.
        start = min(d.lineno for d in decorators) if decorators else first.lineno
        line_text = lines[start - 1] if start <= len(lines) else ""
        if decorators:
            prefix = line_text[: len(line_text) - len(line_text.lstrip())].encode("utf-8")
            blanked = line_text.lstrip().startswith("@")  # else some odd spelling: keep the body
        else:
            prefix = line_text.encode("utf-8")[: first.col_offset]
            blanked = not prefix.strip()  # the body starts a line of its own
        if blanked:
            blank.append((start, node.end_lineno or start, prefix.decode("utf-8", "replace")))
        defs.append(DefOutline(qualname, node.lineno, node.col_offset > 0, node.end_lineno or node.lineno, blanked, node, lines))
    start_lines: list[int]
    end_lines: list[int]
    skeleton, start_lines, end_lines = [], [], []
    at = 0  # index of the next source line
    for begin, last, indent in sorted(blank):
        skeleton += lines[at : begin - 1]
        start_lines += range(at + 1, begin)
        end_lines += range(at + 1, begin)
        # One line in place of the body: libcst builds a node for every empty line, and
        # keeping the line count would cost more than the rest of the skeleton.
        skeleton.append(indent + "...\n")
        start_lines.append(begin)
        end_lines.append(last)
        at = last
    skeleton += lines[at:]
    start_lines += range(at + 1, len(lines) + 1)
    end_lines += range(at + 1, len(lines) + 1)
    row = {line: index + 1 for index, line in enumerate(start_lines)}
    starts = [row[stmt.lineno] for stmt in tree.body]
    return Outline(defs, skeleton, starts, start_lines, end_lines, lines, tree)


def top_level(body: list) -> Iterator[ast.stmt]:
    """Statements at this level, looking through if/try/with/for/while blocks, not into defs."""
    for stmt in body:
        if isinstance(stmt, _BLOCKS):
            for part in (stmt.body, *(h.body for h in getattr(stmt, "handlers", ())), getattr(stmt, "orelse", ()), getattr(stmt, "finalbody", ())):
                yield from top_level(list(part))
        else:
            yield stmt


def _definitions(tree: ast.Module) -> Iterator[tuple[str, Union[ast.FunctionDef, ast.AsyncFunctionDef]]]:
    """Top-level functions and methods, in the order the project index meets them."""
    for stmt in top_level(tree.body):
        if isinstance(stmt, ast.ClassDef):
            for member in top_level(stmt.body):
                if isinstance(member, DEFS):
                    yield f"{stmt.name}.{member.name}", member
        elif isinstance(stmt, DEFS):
            yield stmt.name, stmt


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
        if not isinstance(current, SCOPES):
            stack.extend(ast.iter_child_nodes(current))
    return frozenset(found)
