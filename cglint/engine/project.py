"""The checked project: modules found on disk, parsed on demand, and what they define.

Nothing here imports the checked code. A module is parsed the first time it is
needed: because it may hold a capture, or because a call from a captured region
reaches it. Qualified names ("pkg.model.Model.forward") resolve to definitions
through imports, including re-exports in `__init__.py` files.
"""
from __future__ import annotations

import dataclasses
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import libcst as cst

from cglint import source
from cglint.discovery import module_name_for
from cglint.engine.outline import DefOutline, Outline, outline_of
from cglint.engine.prefilter import CAPTURE_TOKENS, mentions
from cglint.engine.syntax import assigned_names, descendants, dotted_name


class FunctionInfo:
    """A function or method. Its body is parsed with libcst the first time `node` is asked
    for: most functions of a module are never walked."""

    def __init__(
        self,
        module: "ModuleInfo",
        node: Optional[Union[cst.FunctionDef, cst.Lambda, cst.Module]],
        name: str,
        qualname: str,  # "Model.forward", "<module>", "<lambda>"
        cls: Optional["ClassInfo"] = None,
        parent: Optional["FunctionInfo"] = None,  # the enclosing function of a nested def
        header: Optional[cst.FunctionDef] = None,  # the definition as the module's skeleton has it
        outline: Optional[DefOutline] = None,
    ):
        self.module = module
        self._node = node
        self.name = name
        self.qualname = qualname
        self.cls = cls
        self.parent = parent
        self.header = header
        self.outline = outline
        self._writes: Optional[list[AttrWrite]] = None

    def __repr__(self) -> str:
        return f"<function {self.module.name}.{self.qualname}>"

    @property
    def node(self) -> Union[cst.FunctionDef, cst.Lambda, cst.Module]:
        if self._node is None:
            self._node = self.module.parse_function(self)
        return self._node

    @property
    def key(self) -> int:
        """Identifies the function without parsing its body (facts about it are kept by key)."""
        return id(self.header) if self.header is not None else id(self.node)

    @property
    def decorators(self) -> Sequence[cst.Decorator]:
        """The decorators (kept in the skeleton: a lazily parsed body starts at `def`)."""
        node = self.header if self.header is not None else self.node
        return node.decorators if isinstance(node, cst.FunctionDef) else ()

    @property
    def params(self) -> list[cst.Param]:
        node = self.header if self.header is not None else self.node  # the skeleton has the signature
        if isinstance(node, cst.Module):
            return []
        p = node.params
        return [*p.posonly_params, *p.params, *p.kwonly_params]

    @property
    def is_method(self) -> bool:
        return self.cls is not None and not any(dotted_name(d.decorator) == "staticmethod" for d in self.decorators)

    @property
    def body(self) -> list[cst.CSTNode]:
        node = self.node
        if isinstance(node, cst.Module):
            return list(node.body)
        if isinstance(node, cst.Lambda):
            return [node.body]
        if isinstance(node.body, cst.IndentedBlock):
            return list(node.body.body)
        return list(node.body.body)  # a one-line `def f(): return x`

    def self_writes(self) -> list["AttrWrite"]:
        if self._writes is None:
            self._writes = list(_self_writes(self))
        return self._writes


@dataclass(eq=False, repr=False)
class ClassInfo:
    module: "ModuleInfo"
    node: cst.ClassDef
    name: str
    methods: dict[str, FunctionInfo] = field(default_factory=dict)
    _attrs: Optional[dict[str, list["AttrWrite"]]] = None  # by attribute, as asked

    def __repr__(self) -> str:
        return f"<class {self.qualname}>"

    @property
    def qualname(self) -> str:
        return f"{self.module.name}.{self.name}"

    def attr_writes(self, attr: str) -> list["AttrWrite"]:
        """Every `self.<attr> = ...` / `self.<attr> += ...` in the class's methods; only the
        methods that `ast` saw assign such an attribute are parsed."""
        if self._attrs is None:
            self._attrs = {}
        if attr not in self._attrs:
            self._attrs[attr] = [
                write
                for method in self.methods.values()
                if method.outline is None or attr in method.outline.stored_attrs
                for write in method.self_writes()
                if write.attr == attr
            ]
        return self._attrs[attr]


@dataclass(frozen=True)
class AttrWrite:
    attr: str
    method: FunctionInfo
    value: Optional[cst.BaseExpression]  # None for augmented assignment
    augmented: bool
    node: cst.CSTNode


@dataclass(eq=False, repr=False)
class ModuleInfo:
    name: str
    file: source.SourceFile
    tree: cst.Module
    is_package: bool
    root: Path  # the folder imports of this module resolve from first
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    globals: dict[str, list[cst.BaseExpression]] = field(default_factory=dict)
    # Where `tree` is the skeleton, the outline that made it; the parsed trees that hold
    # this module's nodes (the skeleton or whole module first, then functions as parsed).
    outline: Optional[Outline] = None
    pieces: list["Piece"] = field(default_factory=list)
    on_error: Optional[Callable[[Path, source.SourceError], None]] = None

    def __repr__(self) -> str:
        return f"<module {self.name}>"

    def parse_function(self, function: FunctionInfo) -> cst.FunctionDef:
        """Parse one function whose body the skeleton left out."""
        assert self.outline is not None and function.outline is not None and function.header is not None
        text, offset = self.outline.function_source(function.outline)
        tree = source.parse(text, cpython_accepts=True)
        if isinstance(tree, source.SourceError):
            # libcst cannot parse this function alone though `ast` could: report it, walk nothing.
            if self.on_error is not None:
                self.on_error(self.file.path, dataclasses.replace(tree, line=tree.line + offset))
            return function.header
        self.pieces.append(Piece(tree, [offset + 1]))
        statement = tree.body[0]
        if function.outline.indented:  # under the `if 1:` that lets it parse in place
            statement = statement.body.body[0]  # type: ignore[attr-defined]
        return statement  # type: ignore[return-value]

    @property
    def display(self) -> str:
        return self.file.display

    _body: Optional[FunctionInfo] = None

    @property
    def body_function(self) -> FunctionInfo:
        """The module's top-level code, walked like a function body."""
        if self._body is None:
            self._body = FunctionInfo(self, self.tree, "<module>", "<module>")
        return self._body

    def absolute(self, relative_level: int, module: Optional[str]) -> str:
        """Resolve `from ..x import` against this module's package."""
        package = self.name if self.is_package else self.name.rpartition(".")[0]
        parts = package.split(".") if package else []
        if relative_level > 1:
            parts = parts[: len(parts) - (relative_level - 1)]
        if module:
            parts.append(module)
        return ".".join(p for p in parts if p)


Definition = Union[FunctionInfo, ClassInfo, ModuleInfo]


@dataclass(eq=False)
class Piece:
    """A parsed tree holding some of a module's nodes, with the line on which each of its
    top-level statements starts (None where unknown: positions then come from the tree
    alone, which then is the whole module)."""

    tree: cst.Module
    starts: Optional[list[int]]
    start_lines: Optional[list[int]] = None  # the source line of each of the tree's lines
    end_lines: Optional[list[int]] = None  # ... where a node ends (see Outline)


def _self_writes(method: FunctionInfo) -> Iterator[AttrWrite]:
    if not method.params or not isinstance(method.node, cst.FunctionDef):
        return
    self_name = method.params[0].name.value
    for node in descendants(method.node.body):
        if isinstance(node, cst.Assign):
            for target in node.targets:
                for leaf in assigned_names(target.target):
                    attr = _self_attr(leaf, self_name)
                    if attr:
                        yield AttrWrite(attr, method, node.value, False, node)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            attr = _self_attr(node.target, self_name)
            if attr:
                augmented = isinstance(node, cst.AugAssign)
                yield AttrWrite(attr, method, None if augmented else node.value, augmented, node)


def _self_attr(target: cst.BaseExpression, self_name: str) -> Optional[str]:
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
        if target.value.value == self_name:
            return target.attr.value
    return None


class Project:
    """Module lookup by name or path, parsing each file at most once."""

    def __init__(
        self,
        display: Callable[[Path], str],
        on_error: Callable[[Path, source.SourceError], None],
        whole_modules: bool = False,  # parse every function up front (what --fix rewrites need)
    ):
        self._display = display
        self.whole_modules = whole_modules
        self._on_error = on_error
        self.roots: list[Path] = []
        self._by_path: dict[Path, Optional[ModuleInfo]] = {}
        self._by_name: dict[tuple[Path, str], Optional[ModuleInfo]] = {}
        self._cache: dict[object, object] = {}
        self._only_capturing = False
        self._no_capture: set[Path] = set()
        self._files: dict[tuple[Path, str], Optional[Path]] = {}
        self._lookups: dict[tuple[Optional[Path], str], Optional[ModuleInfo]] = {}  # memo of module()
        self.sources: dict[Path, str] = {}  # text of every checked file, for whole-project searches
        self.find_constructions: Optional[Callable[[ClassInfo], list]] = None

    @property
    def only_capturing(self) -> bool:
        """While discovering captures, modules with no capture form are not parsed."""
        return self._only_capturing

    @only_capturing.setter
    def only_capturing(self, value: bool) -> None:
        self._only_capturing = value
        self._cache.clear()  # facts derived with modules left out must not outlive discovery

    @contextmanager
    def loading_everything(self) -> Iterator[None]:
        """Resolve with every module available (the targets of a capture must be found)."""
        saved, self._only_capturing = self._only_capturing, False
        try:
            yield
        finally:
            self._only_capturing = saved

    def cached(self, key: object, compute: Callable[[], object], pending: object) -> object:
        """Memoise a derived fact; `pending` answers recursive requests while it is computed."""
        if key not in self._cache:
            self._cache[key] = pending
            self._cache[key] = compute()
        return self._cache[key]

    def add_root(self, root: Path) -> None:
        root = root.resolve()
        if root not in self.roots:
            self.roots.append(root)
            self._lookups.clear()  # a name not found may be found under the new root

    def module_for_path(self, path: Path, text: Optional[str] = None) -> Optional[ModuleInfo]:
        path = path.resolve()
        if path in self._by_path:
            return self._by_path[path]
        if self._only_capturing and path in self._no_capture:
            return None
        name, root, is_package = module_name_for(path)
        self.add_root(root)
        info = None
        file = source.SourceFile(path, self._display(path), text) if text is not None else source.load(
            path, self._display(path)
        )
        if self.only_capturing and not isinstance(file, source.SourceError) and not mentions(file.text, CAPTURE_TOKENS):
            # While looking for capture helpers, a module without any capture form cannot
            # hold one: leave it unparsed (and unremembered) until a region reaches it.
            self._no_capture.add(path)
            return None
        if isinstance(file, source.SourceError):
            self._on_error(path, file)
        else:
            info = self._load(name, file, is_package, root)
        self._by_path[path] = info
        if info is not None:
            self._by_name.setdefault((root, name), info)
        return info

    def _load(self, name: str, file: source.SourceFile, is_package: bool, root: Path) -> Optional[ModuleInfo]:
        """Index the module: from a skeleton whose function bodies are parsed when walked,
        or, where `ast` cannot outline it (or --fix needs whole trees), from a whole parse."""
        outline = outline_of(file.text)
        if outline is not None and not self.whole_modules:
            skeleton = source.parse(outline.skeleton, cpython_accepts=True)
            if not isinstance(skeleton, source.SourceError):
                module = ModuleInfo(name, file, skeleton, is_package, root, outline=outline, on_error=self._on_error)
                if _index(module, outline, lazy=True):
                    return module
        tree = source.parse(file.text)
        if isinstance(tree, source.SourceError):
            self._on_error(file.path, tree)
            return None
        module = ModuleInfo(name, file, tree, is_package, root, on_error=self._on_error)
        if not _index(module, outline, lazy=False):
            module = ModuleInfo(name, file, tree, is_package, root, on_error=self._on_error)
            _index(module, None, lazy=False)
        return module

    def constructions(self, cls: ClassInfo) -> list[dict]:
        """Argument values of the calls that construct `cls` (filled in by the engine)."""
        return self.find_constructions(cls) if self.find_constructions is not None and not self._only_capturing else []

    def modules_mentioning(self, text: str, limit: int = 8) -> list[ModuleInfo]:
        """Modules among the checked files whose source contains `text` (parsed on demand).

        Nothing when more than `limit` files do: a name used that widely (torch's own
        classes, when torch is the checked tree) would cost a parse of half the tree and
        a join of so many call sites tells nothing anyway."""
        paths = [path for path, source_text in self.sources.items() if text in source_text]
        if len(paths) > limit:
            return []
        found = []
        for path in paths:
            module = self.module_for_path(path, self.sources[path])
            if module is not None:
                found.append(module)
        return found

    def attempted_paths(self) -> list[Path]:
        """Every file this project read to parse (whether or not it parsed)."""
        return list(self._by_path)

    def parsed(self, path: Path) -> Optional[ModuleInfo]:
        """The module at `path` if it was parsed (None if never needed, or broken)."""
        return self._by_path.get(path.resolve())

    def module(self, name: str, near: Optional[ModuleInfo] = None) -> Optional[ModuleInfo]:
        """The module `name`, looked up first beside `near` (as Python finds a script's siblings)."""
        key = (near.root if near is not None else None, name)
        if key in self._lookups:
            return self._lookups[key]
        found = None
        for root in ([near.root] if near is not None else []) + [r for r in self.roots if near is None or r != near.root]:
            found = self._in_root(root, name)
            if found is not None:
                break
        if found is not None or not self._only_capturing:  # a miss while discovering is not final
            self._lookups[key] = found
        return found

    def _locate(self, root: Path, name: str) -> Optional[Path]:
        """The file of module `name` under `root` (a filesystem fact, looked up once)."""
        key = (root, name)
        if key not in self._files:
            self._files[key] = None
            if name:
                base = os.path.join(str(root), *name.split("."))
                for candidate in (base + ".py", os.path.join(base, "__init__.py")):
                    if os.path.isfile(candidate):
                        self._files[key] = Path(candidate)
                        break
        return self._files[key]

    def _in_root(self, root: Path, name: str) -> Optional[ModuleInfo]:
        key = (root, name)
        if key not in self._by_name:
            found = None
            candidate = self._locate(root, name)
            if candidate is not None:
                found = self.module_for_path(candidate)
            if found is None and self.only_capturing:
                return None  # may be a module skipped while discovering: decide again later
            self._by_name[key] = found
        return self._by_name[key]

    def resolve(self, qualname: str, near: Optional[ModuleInfo] = None, _depth: int = 0) -> Optional[Definition]:
        """The project definition a qualified name refers to, if any."""
        if _depth > 8 or not qualname:
            return None
        parts = qualname.split(".")
        for cut in range(len(parts), 0, -1):
            module = self.module(".".join(parts[:cut]), near)
            if module is not None:
                return self._member(module, parts[cut:], _depth)
        return None

    def _member(self, module: ModuleInfo, rest: list[str], depth: int) -> Optional[Definition]:
        if not rest:
            return module
        head, tail = rest[0], rest[1:]
        found: Optional[Definition] = module.functions.get(head) or module.classes.get(head)
        if found is None and head in module.imports:
            target = module.imports[head]
            if target != f"{module.name}.{head}":
                found = self.resolve(target, module, depth + 1)
        if found is None and module.is_package:
            found = self.module(f"{module.name}.{head}", module)
        if found is None or not tail:
            return found
        if isinstance(found, ModuleInfo):
            return self._member(found, tail, depth)
        if isinstance(found, ClassInfo) and len(tail) == 1:
            return self.method(found, tail[0])
        return None

    def bases(self, cls: ClassInfo) -> list[ClassInfo]:
        found = []
        for base in cls.node.bases:
            name = dotted_name(base.value)
            if name is None:
                continue
            head, _, rest = name.partition(".")
            if head in cls.module.classes and not rest:
                found.append(cls.module.classes[head])
                continue
            qualified = cls.module.imports.get(head)
            target = self.resolve(f"{qualified}.{rest}" if rest else qualified, cls.module) if qualified else None
            if isinstance(target, ClassInfo):
                found.append(target)
        return found

    def mro(self, cls: ClassInfo) -> list[ClassInfo]:
        order, queue = [], [cls]
        while queue and len(order) < 32:
            current = queue.pop(0)
            if current not in order:
                order.append(current)
                queue.extend(self.bases(current))
        return order

    def method(self, cls: ClassInfo, name: str, skip_first: bool = False) -> Optional[FunctionInfo]:
        for klass in self.mro(cls)[1 if skip_first else 0 :]:
            if name in klass.methods:
                return klass.methods[name]
        return None

    def base_names(self, cls: ClassInfo) -> set[str]:
        """Qualified names of every base class, project or not (to recognise nn.Module)."""
        names = set()
        for klass in self.mro(cls):
            for base in klass.node.bases:
                name = dotted_name(base.value)
                if name:
                    head, _, rest = name.partition(".")
                    qualified = klass.module.imports.get(head, head)
                    names.add(f"{qualified}.{rest}" if rest else qualified)
        return names


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
