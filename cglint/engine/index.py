"""Building a module's index from its source: an `ast` outline and a libcst skeleton, or a
whole parse where there is no outline (or where --fix needs whole trees)."""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable, Iterator, Optional

import libcst as cst

from cglint import source
from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo, Piece
from cglint.engine.outline import Outline, outline_of
from cglint.engine.syntax import assigned_names, descendants, dotted_name


def load_module(
    name: str,
    file: source.SourceFile,
    is_package: bool,
    root: Path,
    whole: bool,
    on_error: Callable[[Path, source.SourceError], None],
    tree: Optional[ast.Module] = None,  # its `ast`, where already made
) -> Optional[ModuleInfo]:
    """Index the module: from a skeleton whose function bodies are parsed when walked, or,
    where `ast` cannot outline it (or `whole` is asked for), from a whole parse."""
    outline = outline_of(file.text, tree)
    if outline is not None and not whole:
        skeleton = source.parse(outline.skeleton, cpython_accepts=True)
        if not isinstance(skeleton, source.SourceError):
            module = ModuleInfo(name, file, skeleton, is_package, root, outline=outline, on_error=on_error)
            if _index(module, outline, lazy=True):
                return module
    tree = source.parse(file.text)
    if isinstance(tree, source.SourceError):
        on_error(file.path, tree)
        return None
    module = ModuleInfo(name, file, tree, is_package, root, on_error=on_error)
    if not _index(module, outline, lazy=False):
        module = ModuleInfo(name, file, tree, is_package, root, on_error=on_error)
        _index(module, None, lazy=False)
    return module


def _index(module: ModuleInfo, outline: Optional[Outline], lazy: bool) -> bool:
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

    def function(stmt: cst.FunctionDef, qualname: str, cls: Optional[ClassInfo] = None) -> FunctionInfo:
        shape = next(outlines, None) if outlines is not None else None
        if outlines is not None and (shape is None or shape.qualname != qualname):
            raise _Unpaired
        body = None if lazy and shape is not None and shape.blanked else stmt
        return FunctionInfo(module, body, stmt.name.value, qualname, cls, header=stmt, outline=shape)

    try:
        for stmt in _top_level(module.tree.body):
            if isinstance(stmt, cst.FunctionDef):
                module.functions[stmt.name.value] = function(stmt, stmt.name.value)
            elif isinstance(stmt, cst.ClassDef):
                cls = ClassInfo(module, stmt, stmt.name.value)
                for member in _top_level(stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else []):
                    if isinstance(member, cst.FunctionDef):
                        cls.methods[member.name.value] = function(member, f"{cls.name}.{member.name.value}", cls)
                module.classes[cls.name] = cls
            elif isinstance(stmt, (cst.Assign, cst.AnnAssign)) and stmt.value is not None:
                targets = [t.target for t in stmt.targets] if isinstance(stmt, cst.Assign) else [stmt.target]
                for target in targets:
                    for leaf in assigned_names(target):
                        if isinstance(leaf, cst.Name):
                            module.globals.setdefault(leaf.value, []).append(stmt.value)
    except _Unpaired:
        return False
    if outlines is not None and next(outlines, None) is not None:
        return False
    if outline is None:
        module.pieces.append(Piece(module.tree, None))
    elif lazy:  # the skeleton: its lines map to the source's
        module.pieces.append(Piece(module.tree, _aligned_starts(module.tree, outline.starts), outline.start_lines, outline.end_lines))
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
