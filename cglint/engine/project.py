"""The checked project: modules found on disk, parsed on demand, and name resolution.

Nothing here imports the checked code. A module is parsed the first time it is
needed: because it may hold a capture, or because a call from a captured region
reaches it. Qualified names ("pkg.model.Model.forward") resolve to definitions
(definitions.py) through imports, including re-exports in `__init__.py` files.
"""
from __future__ import annotations

import ast
import contextlib
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, TypeVar

from cglint import source
from cglint.discovery import module_name_for, resolved
from cglint import vocabulary
from cglint.engine.definitions import ClassInfo, Definition, FunctionInfo, ModuleInfo
from cglint.engine.index import load_module
from cglint.engine.prefilter import can_capture


# Bounds on what a malformed or cyclic project could make endless: re-exports followed to
# resolve one name (`pkg/__init__.py` importing from `pkg.core`, ...), and classes in an MRO.
# On the real-world bench the longest re-export chain is 4 and the longest MRO 11 classes:
# the bounds are twice those and more, never reached by real code.
_MAX_REEXPORTS = 8
_MAX_MRO = 32
# How many files naming a class are read for its subclasses: a base named more widely
# (diffusers' `Attention`, in 355 files) would have most of a tree parsed. The bound does cut:
# at 512, Transformer Engine gains three findings in a subclass of a widely named base.
MAX_SUBCLASS_FILES = 64
_T = TypeVar("_T")
_DEF = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M)


class Project:
    """Module lookup by name or path, parsing each file at most once."""

    def __init__(
        self,
        display: Callable[[Path], str],
        on_error: Callable[[Path, source.SourceError], None],
        whole_modules: bool = False,  # parse every function up front (what --fix rewrites need)
        sources: Optional[dict[Path, str]] = None,  # text of every checked file, for whole-project searches
        given: Optional[dict[Path, str]] = None,  # texts of files not (yet) on disk, by resolved path
    ):
        self._display = display
        self._given = given or {}
        self.whole_modules = whole_modules
        self._on_error = on_error
        self.roots: list[Path] = []
        self._by_path: dict[Path, Optional[ModuleInfo]] = {}
        self._by_name: dict[tuple[Path, str], Optional[ModuleInfo]] = {}
        self._cache: dict[object, Any] = {}  # each key names the type of its fact
        self._only_capturing = False
        self.epoch = 0  # counts the switches of capturing_modules_only, which clear the memo of derived facts
        self._no_capture: set[Path] = set()
        self._files: dict[tuple[Path, str], Optional[Path]] = {}
        self._listings: dict[str, frozenset] = {}
        # Memos of module(): one for answers with every module available, one for answers
        # while discovering, when modules without a capture form count as absent.
        self._lookups: dict[tuple[Optional[Path], str], Optional[ModuleInfo]] = {}
        self._capturing_lookups: dict[tuple[Optional[Path], str], Optional[ModuleInfo]] = {}
        # The module a name finds in the first root that has it, whichever module asks (the
        # same two memos): a tree with tests and examples has a root per folder of scripts,
        # and every module asking for every name it imports went through all of them.
        self._first: dict[str, Optional[ModuleInfo]] = {}
        self._loads = 0  # modules loaded so far
        self._capturing_first: dict[str, Optional[ModuleInfo]] = {}
        self.sources = sources or {}
        self.searches: dict[str, list[Path]] = {}  # text searched for -> files that had it
        self.missing: list[str] = []  # modules looked for on disk and not found ("root/pkg/mod")
        self._find_constructions: Optional[Callable[[ClassInfo], list]] = None
        self._note_construction: Optional[Callable[[ClassInfo, dict], None]] = None
        self._find_parameters: Optional[Callable[[FunctionInfo], dict]] = None
        self._defined_names: Optional[frozenset] = None

    @property
    def only_capturing(self) -> bool:
        """Whether modules with no capture form count as absent (inside `capturing_modules_only`)."""
        return self._only_capturing

    @contextlib.contextmanager
    def capturing_modules_only(self) -> Iterator[None]:
        """While the engine discovers captures, modules with no capture form count as absent:
        not parsed, not found (a capture helper lives in a module that captures)."""
        self._leave_out_uncapturing(True)
        try:
            yield
        finally:
            self._leave_out_uncapturing(False)

    def _leave_out_uncapturing(self, value: bool) -> None:
        self._only_capturing = value
        self._cache.clear()  # facts derived with modules left out must not outlive discovery
        self.epoch += 1  # the engine's own memos of derived facts follow this one's
        self._capturing_lookups.clear()
        self._capturing_first.clear()

    def cached(self, key: object, compute: Callable[[], _T], pending: _T) -> _T:
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
            self._capturing_lookups.clear()
            self._first.clear()
            self._capturing_first.clear()

    def module_for_path(self, path: Path, text: Optional[str] = None, tree: Optional[ast.Module] = None) -> Optional[ModuleInfo]:
        """The module at `path`; `tree` is its `ast` where the caller already made it."""
        path = resolved(path)
        if text is None:
            text = self._given.get(path)
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
        if self.only_capturing and not isinstance(file, source.SourceError) and not can_capture(file.text):
            # While looking for capture helpers, a module without any capture form cannot
            # hold one: leave it unparsed (and unremembered) until a region reaches it.
            self._no_capture.add(path)
            return None
        if isinstance(file, source.SourceError):
            self._on_error(path, file)
        else:
            info = load_module(name, file, is_package, root, self.whole_modules, self._on_error, tree)
        self._by_path[path] = info
        if info is not None:
            self._by_name.setdefault((root, name), info)
            self._loads += 1
            self._capturing_first.clear()  # a miss while discovering may be found now
        return info

    def find_constructions_with(self, finder: Callable[[ClassInfo], list], noter: Callable[[ClassInfo, dict], None]) -> None:
        """How constructions are found: by walking the functions that name the class, which
        the engine does (it is made after the project it walks, and gives its finder here),
        and where a value met constructs one without naming it (`noter`)."""
        self._find_constructions, self._note_construction = finder, noter

    def note_construction(self, cls: ClassInfo, args: dict) -> None:
        """A construction found while evaluating values: `self.mixer = mixer_cls(dim)`, where
        `mixer_cls` is a class or a partial of one, constructs it without naming it."""
        if self._note_construction is not None:
            self._note_construction(cls, args)

    def constructions(self, cls: ClassInfo) -> list[dict]:
        """Argument values of the calls that construct `cls` (none before the engine gives its finder)."""
        return self._find_constructions(cls) if self._find_constructions is not None and not self._only_capturing else []

    def find_parameters_with(self, finder: Callable[[FunctionInfo], dict]) -> None:
        """How a function's parameters are found from its callers (callers.ParameterValues.of)."""
        self._find_parameters = finder

    def parameters(self, function: FunctionInfo) -> dict:
        """The project objects each parameter of `function` may hold over its callers (none
        before the engine gives its finder)."""
        return self._find_parameters(function) if self._find_parameters is not None and not self._only_capturing else {}

    def modules_mentioning(self, text: str, *, limit: int) -> list[ModuleInfo]:
        """Modules among the checked files whose source contains `text` (parsed on demand).

        Nothing when more than `limit` files do: a name used that widely (torch's own
        classes, when torch is the checked tree) would cost a parse of half the tree and
        a join of so many call sites tells nothing anyway."""
        paths = self.searches.get(text)
        if paths is None:  # each search reads every checked file once per text, or fewer: a file
            # with "Model(" has "Model", so the files found for an earlier text inside this one
            # are all it needs to read.
            within = [found for searched, found in self.searches.items() if searched in text]
            candidates = min(within, key=len) if within else self.sources
            paths = self.searches[text] = [path for path in candidates if text in self.sources[path]]
        if len(paths) > limit:
            return []
        found = []
        for path in paths:
            module = self.module_for_path(path, self.sources[path])
            if module is not None:
                found.append(module)
        return found

    def defined_names(self) -> frozenset:
        """The names of every function and method the checked files define (a text scan, once):
        a method call on a value of unknown class can run project code only by one of them."""
        if self._defined_names is None:
            self._defined_names = frozenset(name for text in self.sources.values() for name in _DEF.findall(text))
        return self._defined_names

    def attempted_paths(self) -> list[Path]:
        """Every file this project read to parse (whether or not it parsed)."""
        return list(self._by_path)


    def module(self, name: str, near: Optional[ModuleInfo] = None) -> Optional[ModuleInfo]:
        """The module `name`, looked up first beside `near` (as Python finds a script's siblings)."""
        key = (near.root if near is not None else None, name)
        if key in self._lookups:
            return self._lookups[key]
        if self._only_capturing and key in self._capturing_lookups:
            return self._capturing_lookups[key]
        # Beside `near` first, then in the other roots in their order: where `near`'s root does
        # not have it, the first root that does (near's own answers the same again).
        found = self._in_root(near.root, name) if near is not None else None
        if found is None:
            found = self._in_first_root(name)
        if found is not None or not self._only_capturing:
            self._lookups[key] = found
        else:  # a miss while discovering holds only until modules are loaded for other reasons
            self._capturing_lookups[key] = found
        return found

    def _in_first_root(self, name: str) -> Optional[ModuleInfo]:
        """The module `name` in the first root that has it. With every module available the
        answer of each root is kept (_in_root), so this one holds until a root is added; while
        discovering, until then or until a module is loaded."""
        memo = self._capturing_first if self._only_capturing else self._first
        if name in memo:
            return memo[name]
        found, roots, loads = None, len(self.roots), self._loads
        for root in self.roots[:roots]:
            found = self._in_root(root, name)
            if found is not None:
                break
        if (roots, loads) == (len(self.roots), self._loads):  # kept only if nothing was added meanwhile
            memo[name] = found
        return found

    def _locate(self, root: Path, name: str) -> Optional[Path]:
        """The file of module `name` under `root` (a filesystem fact, looked up once)."""
        key = (root, name)
        if key not in self._files:
            self._files[key] = self._find_file(str(root), name.split(".")) if name else None
            if self._files[key] is None and name:
                self.missing.append(os.path.join(str(root), *name.split(".")))
        return self._files[key]

    def _find_file(self, folder: str, parts: list[str]) -> Optional[Path]:
        # Through folder listings, read once each: a tree with many import roots looks up
        # thousands of names (most of them other packages') under every root.
        for part in parts[:-1]:
            if part not in self._listing(folder):
                return None
            folder = os.path.join(folder, part)
        entries, last = self._listing(folder), parts[-1]
        if last + ".py" in entries and os.path.isfile(os.path.join(folder, last + ".py")):
            return Path(folder, last + ".py")
        if last in entries and "__init__.py" in self._listing(os.path.join(folder, last)):
            return Path(folder, last, "__init__.py")
        return None

    def _listing(self, folder: str) -> frozenset:
        found = self._listings.get(folder)
        if found is None:
            try:
                found = frozenset(os.listdir(folder))
            except OSError:  # absent, not a folder, unreadable
                found = frozenset()
            self._listings[folder] = found
        return found

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
        if _depth > _MAX_REEXPORTS or not qualname:
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
        if found is None:
            found = self.star_imported(module, head, depth)
        if found is None or not tail:
            return found
        if isinstance(found, ModuleInfo):
            return self._member(found, tail, depth)
        if isinstance(found, ClassInfo) and len(tail) == 1:
            return self.method(found, tail[0])
        return None

    def star_imported(self, module: ModuleInfo, name: str, depth: int = 0) -> Optional[Definition]:
        """`name` brought in by `from .ops import *` (through chains of them), from the
        project's modules only; `__all__` is not read: a name the module defines is enough."""
        for origin in module.star_imports:
            source = self.module(origin, module)
            if source is not None and source is not module:
                found = self._member(source, [name], depth + 1) if depth < _MAX_REEXPORTS else None
                if found is not None:
                    return found
        return None

    def bases(self, cls: ClassInfo) -> list[ClassInfo]:
        found = []
        for name in cls.bases_spelled:
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
        order: list[ClassInfo]
        order, queue = [], [cls]
        while queue and len(order) < _MAX_MRO:
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

    def subclasses(self, cls: ClassInfo) -> list[ClassInfo]:
        """The project classes that derive from `cls`, among the checked files that name it."""
        key = ("subclasses", id(cls))
        if key not in self._cache:
            self._cache[key] = [
                klass
                for module in self.modules_mentioning(cls.name, limit=MAX_SUBCLASS_FILES)
                for klass in module.classes.values()
                if klass is not cls and cls in self.mro(klass)
            ]
        return self._cache[key]

    def is_autograd_op(self, cls: ClassInfo) -> bool:
        """A custom autograd op (a subclass of torch.autograd.Function): `Op.apply` runs its forward."""
        return not self.base_names(cls).isdisjoint(vocabulary.names("values.autograd_functions"))

    def is_autograd_forward(self, function: FunctionInfo) -> bool:
        return function.name == "forward" and function.cls is not None and self.is_autograd_op(function.cls)

    def base_names(self, cls: ClassInfo) -> set[str]:
        """Qualified names of every base class, project or not (to recognise nn.Module)."""
        names = set()
        for klass in self.mro(cls):
            for name in klass.bases_spelled:
                if name:
                    head, _, rest = name.partition(".")
                    qualified = klass.module.imports.get(head, head)
                    names.add(f"{qualified}.{rest}" if rest else qualified)
        return names
