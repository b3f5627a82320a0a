"""Building a module's index from its source: an `ast` outline and a libcst skeleton, or a
whole parse where there is no outline (or where --fix needs whole trees)."""
from __future__ import annotations

import ast
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Union

import libcst as cst

from cglint import source
from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo, Piece
from cglint.engine.outline import DEFS as AST_DEFS, SCOPES as AST_SCOPES, Outline, last_name, outline_of
from cglint.engine.outline import top_level as outline_top_level
from cglint.engine.syntax import assigned_names, descendants, dotted_name

Statement = Union[cst.SimpleStatementLine, cst.BaseCompoundStatement]  # what a Module holds


def load_module(
    name: str,
    file: source.SourceFile,
    is_package: bool,
    root: Path,
    whole: bool,
    on_error: Callable[[Path, source.SourceError], None],
    tree: Optional[ast.Module] = None,  # its `ast`, where already made
) -> Optional[ModuleInfo]:
    """Index the module: from its `ast` outline, with each top-level statement parsed by libcst
    when the engine first looks into it, or, where `ast` cannot outline it (or `whole` is asked
    for), from a whole parse."""
    outline = outline_of(file.text, tree)
    if outline is not None and not whole:
        module = _lazy_index(name, file, is_package, root, outline, on_error)
        if module is not None:
            return module
    parsed = source.parse(file.text)
    if isinstance(parsed, source.SourceError):
        on_error(file.path, parsed)
        return None
    module = ModuleInfo(name, file, parsed, is_package, root, on_error=on_error)
    if not _index(module, outline):
        module = ModuleInfo(name, file, parsed, is_package, root, on_error=on_error)
        _index(module, None)
    return module


class LazyStatements:
    """A module's skeleton (outline.py), parsed one top-level statement at a time.

    A capture that reaches a large module usually needs a few of its classes and functions:
    parsing its whole skeleton (class bodies, signatures, module-level code) was most of a
    whole-tree run's time on torch. Each top-level statement's lines of the skeleton parse
    alone, as a piece of the module whose lines map back to the source's."""

    def __init__(self, module: ModuleInfo, outline: Outline):
        self.module = module
        self.outline = outline
        tree = outline.tree
        self.lines = outline.skeleton
        row = {line: index + 1 for index, line in enumerate(outline.start_lines)}
        # Chunks: the skeleton rows of the statements that start each one (`a = 1; b = 2` is
        # one chunk of two `ast` statements), and the row each chunk starts on (decorators first).
        self.chunks: list[list[int]] = []
        self.first_rows: list[int] = []
        self.chunk_of: list[int] = []  # for each of ast's top-level statements
        for stmt in tree.body:
            at = row[stmt.lineno]
            first = row[min([stmt.lineno, *(d.lineno for d in getattr(stmt, "decorator_list", ()))])]
            if self.chunks and self.chunks[-1][-1] == at:
                self.chunks[-1].append(at)
            else:
                self.chunks.append([at])
                self.first_rows.append(first)
            self.chunk_of.append(len(self.chunks) - 1)
        self._parsed: dict[int, list[Statement]] = {}
        # Chunks a walk of the module's code has nothing to do in: a class statement (the walker
        # does not enter class bodies) or a `def` without decorators (module-level functions are
        # indexed, not bound by the walk). On torch they were a third of the text parsed for walks.
        self._inert = [True] * len(self.chunks)
        for top, stmt in enumerate(tree.body):
            if not (isinstance(stmt, ast.ClassDef) or (isinstance(stmt, AST_DEFS) and not stmt.decorator_list)):
                self._inert[self.chunk_of[top]] = False

    def chunk(self, index: int) -> list[Statement]:
        """The libcst statements of one chunk (parsed the first time)."""
        found = self._parsed.get(index)
        if found is None:
            found = self._parsed[index] = self._parse(index)
        return found

    def _parse(self, index: int) -> list[Statement]:
        first = self.first_rows[index]
        last = self.first_rows[index + 1] - 1 if index + 1 < len(self.first_rows) else len(self.lines)
        text = "".join(self.lines[first - 1:last])
        tree = source.parse(text if text.endswith("\n") else text + "\n", cpython_accepts=True)
        module = self.module
        if isinstance(tree, source.SourceError):
            # libcst cannot parse this statement alone though `ast` could: report it, walk nothing.
            if module.on_error is not None:
                line = self.outline.start_lines[min(first + (tree.line or 1) - 2, len(self.outline.start_lines) - 1)]
                module.on_error(module.file.path, source.SourceError(tree.code, tree.message, line, tree.column))
            return []
        starts = _aligned_starts(tree, self.chunks[index])
        module.pieces.append(Piece(tree, starts, self.outline.start_lines, self.outline.end_lines))
        return list(tree.body)

    def all(self) -> list[Statement]:
        return [stmt for index in range(len(self.chunks)) for stmt in self.chunk(index)]

    @cached_property
    def walked_calls(self) -> frozenset:
        """Last names of what the walked statements call or decorate with (a superset: the
        bodies of decorated defs count too), from `ast`, without parsing them."""
        called = set()
        for top, stmt in enumerate(self.outline.tree.body):
            if not self._inert[self.chunk_of[top]]:
                for node in ast.walk(stmt):
                    if type(node) is ast.Call:
                        called.add(last_name(node.func))
                    called.update(map(last_name, getattr(node, "decorator_list", ())))
        return frozenset(called)

    def walked(self) -> list[Statement]:
        """The statements a walk of the module's code looks at: all but the inert chunks."""
        return [stmt for index in range(len(self.chunks)) if not self._inert[index] for stmt in self.chunk(index)]


class _LazyGlobals(Mapping):
    """Module-level names to the values assigned to them (ModuleInfo.globals); the values of a
    name are parsed when first read. Until then, (chunk, ordinal of the assignment among the
    chunk's) per assignment."""

    def __init__(self, statements: LazyStatements):
        self._statements = statements
        self._where: dict[str, list[tuple[int, int]]] = {}
        self._values: dict[str, list[cst.BaseExpression]] = {}

    def declare(self, name: str, chunk: int, ordinal: int) -> None:
        self._where.setdefault(name, []).append((chunk, ordinal))

    def __contains__(self, name: object) -> bool:
        return name in self._where  # without parsing

    def __getitem__(self, name: str) -> list[cst.BaseExpression]:
        found = self._values.get(name)
        if found is None:
            where = self._where[name]
            found = self._values[name] = [value for chunk, ordinal in where for value in self._value(chunk, ordinal)]
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def _value(self, chunk: int, ordinal: int) -> list[cst.BaseExpression]:
        assigns = [s for s in _top_level(self._statements.chunk(chunk)) if _assigns_value(s)]
        return [assigns[ordinal].value] if ordinal < len(assigns) else []  # type: ignore[attr-defined]


def _assigns_value(stmt: cst.CSTNode) -> bool:
    return isinstance(stmt, (cst.Assign, cst.AnnAssign)) and stmt.value is not None


def _lazy_index(name: str, file: source.SourceFile, is_package: bool, root: Path, outline: Outline,
                on_error: Callable[[Path, source.SourceError], None]) -> Optional[ModuleInfo]:
    """The module's index from `ast`; libcst parses a statement when the engine first asks for
    one of its nodes. None where the outline's definitions do not pair up with `ast`'s."""
    tree = outline.tree
    module = ModuleInfo(name, file, None, is_package, root, outline=outline, on_error=on_error)
    statements = module.statements = LazyStatements(module, outline)
    _ast_imports(module, tree)
    module.globals = globals_ = _LazyGlobals(statements)
    shapes = iter(outline.defs)
    chunk = -1
    for top, stmt in enumerate(tree.body):
        if statements.chunk_of[top] != chunk:  # definitions and assignments are counted per chunk
            chunk, defs, assigns = statements.chunk_of[top], 0, 0
        for node in outline_top_level([stmt]):
            if isinstance(node, AST_DEFS):
                shape = next(shapes, None)
                if shape is None or shape.node is not node:
                    return None
                module.functions[node.name] = FunctionInfo(module, None, node.name, shape.qualname, outline=shape,
                                                           load_header=_nth_def(statements, chunk, defs, cst.FunctionDef))
                defs += 1
            elif isinstance(node, ast.ClassDef):
                bases = tuple(_dotted(base) for base in node.bases)
                cls = ClassInfo(module, None, node.name, _load=_nth_def(statements, chunk, defs, cst.ClassDef), _bases=bases)
                methods = 0
                for member in outline_top_level(node.body):
                    if isinstance(member, AST_DEFS):
                        shape = next(shapes, None)
                        if shape is None or shape.node is not member:
                            return None
                        if not (member.name in cls.methods and _ast_accessor(member)):
                            cls.methods[member.name] = FunctionInfo(
                                module, None, member.name, f"{cls.name}.{member.name}", cls, outline=shape,
                                load_header=_nth_method(cls, methods))
                        methods += 1
                module.classes[cls.name] = cls
                defs += 1
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                    for leaf in _ast_assigned_names(target):
                        globals_.declare(leaf, chunk, assigns)
                assigns += 1
    if next(shapes, None) is not None:
        return None
    return module


def _dotted(expr: ast.expr) -> Optional[str]:
    """`a.b.c` for an `ast` Name/Attribute chain, else None (as syntax.dotted_name for libcst)."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        base = _dotted(expr.value)
        return f"{base}.{expr.attr}" if base else None
    return None


def _nth_def(statements: LazyStatements, chunk: int, ordinal: int, kind: type) -> Callable[[], Any]:
    """Loads the `ordinal`-th def or class of a chunk (as `ast` counted them), if it is a `kind`."""
    def load() -> Any:
        found = [s for s in _top_level(statements.chunk(chunk)) if isinstance(s, (cst.FunctionDef, cst.ClassDef))]
        node = found[ordinal] if ordinal < len(found) else None
        return node if isinstance(node, kind) else None
    return load


def _nth_method(cls: ClassInfo, ordinal: int) -> Callable[[], Optional[cst.FunctionDef]]:
    def load() -> Optional[cst.FunctionDef]:
        node = cls.node
        if node is None:
            return None
        body = node.body.body if isinstance(node.body, cst.IndentedBlock) else []
        found = [m for m in _top_level(body) if isinstance(m, cst.FunctionDef)]
        return found[ordinal] if ordinal < len(found) else None
    return load



def _ast_imports(module: ModuleInfo, tree: ast.Module) -> None:
    """What `_index` records of imports, from `ast`: every import outside defs, classes and lambdas."""
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname is not None:
                    module.imports[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    module.imports.setdefault(head, head)
        elif isinstance(node, ast.ImportFrom):
            base = node.module
            origin = module.absolute(node.level, base) if node.level else (base or "")
            if any(alias.name == "*" for alias in node.names):
                if origin:
                    module.star_imports.append(origin)
                continue
            for alias in node.names:
                local = alias.asname or alias.name
                module.imports[local] = f"{origin}.{alias.name}" if origin else alias.name
        elif not isinstance(node, AST_SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _ast_assigned_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _ast_assigned_names(element)
    elif isinstance(target, ast.Starred):
        yield from _ast_assigned_names(target.value)
    elif isinstance(target, ast.Name):
        yield target.id


def _index(module: ModuleInfo, outline: Optional[Outline]) -> bool:
    """Record the module's imports, functions, classes and globals (no walk into bodies).
    False where the outline's definitions do not pair up with the tree's."""
    for node in descendants(module.tree):
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = dotted_name(alias.name) or ""
                if alias.asname is not None:
                    module.imports[alias.asname.name.value] = full  # type: ignore[union-attr]
                else:
                    head = full.split(".")[0]
                    module.imports.setdefault(head, head)
        elif isinstance(node, cst.ImportFrom):
            base = dotted_name(node.module) if node.module is not None else None
            origin = module.absolute(len(node.relative), base) if node.relative else (base or "")
            if isinstance(node.names, cst.ImportStar):
                if origin:
                    module.star_imports.append(origin)
                continue
            for alias in node.names:
                name = alias.name.value if isinstance(alias.name, cst.Name) else dotted_name(alias.name)
                local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[union-attr]
                if name and local:
                    module.imports[local] = f"{origin}.{name}" if origin else name
    outlines = iter(outline.defs) if outline is not None else None
    globals_: dict[str, list[cst.BaseExpression]] = {}
    module.globals = globals_

    def function(stmt: cst.FunctionDef, qualname: str, cls: Optional[ClassInfo] = None) -> FunctionInfo:
        shape = next(outlines, None) if outlines is not None else None
        if outlines is not None and (shape is None or shape.qualname != qualname):
            raise _Unpaired
        return FunctionInfo(module, stmt, stmt.name.value, qualname, cls, header=stmt, outline=shape)

    try:
        for stmt in _top_level(module.tree.body):
            if isinstance(stmt, cst.FunctionDef):
                module.functions[stmt.name.value] = function(stmt, stmt.name.value)
            elif isinstance(stmt, cst.ClassDef):
                cls = ClassInfo(module, stmt, stmt.name.value)
                for member in _top_level(stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []):
                    if isinstance(member, cst.FunctionDef):
                        method = function(member, f"{cls.name}.{member.name.value}", cls)
                        if not (member.name.value in cls.methods and _accessor(member)):
                            cls.methods[member.name.value] = method
                module.classes[cls.name] = cls
            elif isinstance(stmt, (cst.Assign, cst.AnnAssign)) and stmt.value is not None:
                targets = [t.target for t in stmt.targets] if isinstance(stmt, cst.Assign) else [stmt.target]
                for target in targets:
                    for leaf in assigned_names(target):
                        if isinstance(leaf, cst.Name):
                            globals_.setdefault(leaf.value, []).append(stmt.value)
    except _Unpaired:
        return False
    if outlines is not None and next(outlines, None) is not None:
        return False
    if outline is None:
        module.pieces.append(Piece(module.tree, None))
    else:
        source_starts = [outline.start_lines[line - 1] for line in outline.starts]
        module.pieces.append(Piece(module.tree, _aligned_starts(module.tree, source_starts)))
    return True


class _Unpaired(Exception):
    """The `ast` outline and the libcst tree disagree on the module's definitions."""


def _aligned_starts(tree: cst.Module, starts: list[int]) -> Optional[list[int]]:
    """The first line of each of the tree's top-level statements, from `ast`'s (which counts
    `a = 1; b = 2` as two statements)."""
    lines = iter(starts)
    aligned = []
    for statement in tree.body:
        count = len(statement.body) if isinstance(statement, cst.SimpleStatementLine) else 1
        first = next(lines, None)
        for _ in range(count - 1):
            next(lines, None)
        if first is None:
            return None
        aligned.append(first)
    return None if next(lines, None) is not None else aligned


# A property's `@x.setter` / `@x.deleter` def reuses the getter's name; the getter stays the
# method of that name, since reading the attribute is what runs code in captured regions.
def _ast_accessor(member: ast.AST) -> bool:
    return any(isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter") for d in member.decorator_list)  # type: ignore[attr-defined]


def _accessor(member: cst.FunctionDef) -> bool:
    return any(isinstance(d.decorator, cst.Attribute) and d.decorator.attr.value in ("setter", "deleter") for d in member.decorators)


def _top_level(body) -> Iterator[cst.CSTNode]:
    """Statements at this level, looking through if/try/with/for/while blocks (as the
    outline does) but not into defs."""
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            yield from stmt.body
        elif isinstance(stmt, (cst.If, cst.Try, cst.TryStar, cst.With, cst.For, cst.While)):
            for suite in _suites(stmt):
                yield from _top_level(suite.body)
        else:
            yield stmt


def _suites(stmt: cst.CSTNode) -> Iterator[cst.BaseSuite]:
    """The blocks of a compound statement in source order, `elif` and `else` included."""
    yield stmt.body  # type: ignore[attr-defined]
    for handler in getattr(stmt, "handlers", ()):
        yield handler.body
    orelse = getattr(stmt, "orelse", None)
    if isinstance(orelse, cst.If):
        yield from _suites(orelse)
    elif orelse is not None:
        yield orelse.body
    final = getattr(stmt, "finalbody", None)
    if final is not None:
        yield final.body
