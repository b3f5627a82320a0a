"""What the checked project defines: modules, classes, functions, as the engine sees them.

A module's `tree` is libcst's tree of its skeleton (see outline.py), or of the whole file
where there is no skeleton; a function's body is parsed the first time it is asked for.
Every tree that holds some of a module's nodes is one of its pieces, which is how
positions are found for them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Optional, Sequence, Union

import libcst as cst

from cglint import source
from cglint.engine.outline import DefOutline, Outline, last_name
from cglint.engine.syntax import assigned_names, descendants, dotted_name, string_value

if TYPE_CHECKING:
    from cglint.engine.index import LazyStatements


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
        header: Union[cst.FunctionDef, cst.Module, None] = None,  # the definition as the module's skeleton has it
        outline: Optional[DefOutline] = None,
        load_header: Optional[Callable[[], Union[cst.FunctionDef, cst.Module, None]]] = None,  # parses the header when first asked for
    ):
        self.module = module
        self._node = node
        self.name = name
        self.qualname = qualname
        self.cls = cls
        self.parent = parent
        self._header = header
        self._load_header = load_header
        self._own_key = load_header is not None  # keyed by identity: the header may never be parsed
        self.outline = outline
        self._writes: Optional[list[AttrWrite]] = None
        self._globals: Optional[frozenset] = None

    def __repr__(self) -> str:
        return f"<function {self.module.name}.{self.qualname}>"

    @property
    def dunder_qualname(self) -> str:
        """The name as Python's `__qualname__` spells it: a nested def is `outer.<locals>.inner`."""
        if self.parent is not None and self.parent.qualname != "<module>":
            return f"{self.parent.dunder_qualname}.<locals>.{self.name}"
        return self.qualname

    def nested(self, node: cst.FunctionDef) -> "FunctionInfo":
        """A function defined inside this one (a closure)."""
        return FunctionInfo(self.module, node, node.name.value, f"{self.qualname}.{node.name.value}", None, self)

    @property
    def header(self) -> Union[cst.FunctionDef, cst.Module, None]:
        if self._header is None and self._load_header is not None:
            self._header, self._load_header = self._load_header(), None
        return self._header

    @property
    def node(self) -> Union[cst.FunctionDef, cst.Lambda, cst.Module]:
        if self._node is None:
            blanked = self.outline is not None and self.outline.blanked
            self._node = self.module.parse_function(self) if blanked or self.header is None else self.header
        return self._node

    @property
    def key(self) -> int:
        """Identifies the function without parsing anything (facts about it are kept by key)."""
        if self._own_key:
            return id(self)  # one object per function of a lazily indexed module
        return id(self.header) if self.header is not None else id(self.node)

    @property
    def _signature(self) -> Union[cst.FunctionDef, cst.Lambda, cst.Module]:
        """Where decorators and parameters are read: the skeleton has them (a lazily parsed
        body starts at `def`), so asking for them parses nothing."""
        return self.header if self.header is not None else self.node

    @property
    def decorators(self) -> Sequence[cst.Decorator]:
        node = self._signature
        return node.decorators if isinstance(node, cst.FunctionDef) else ()

    @property
    def params(self) -> list[cst.Param]:
        node = self._signature
        if isinstance(node, cst.Module):
            return []
        p = node.params
        return [*p.posonly_params, *p.params, *p.kwonly_params]

    @property
    def is_property(self) -> bool:
        """`@property` (not `cached_property`, computed once): reading the attribute runs it."""
        if self.outline is not None:  # from `ast`, without parsing the skeleton
            return any(last_name(d) == "property" for d in self.outline.node.decorator_list)  # type: ignore[attr-defined]
        return any(dotted_name(d.decorator) in ("property", "builtins.property") for d in self.decorators)

    @property
    def is_classmethod(self) -> bool:
        return self.cls is not None and any(dotted_name(d.decorator) == "classmethod" for d in self.decorators)

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

    @property
    def positional_params(self) -> list[str]:
        """The names its positional arguments bind, in order (`self` included)."""
        node = self._signature
        return [] if isinstance(node, cst.Module) else [p.name.value for p in (*node.params.posonly_params, *node.params.params)]

    @property
    def star_param(self) -> Optional[str]:
        """The name of its `*args` parameter, if it has one."""
        node = self._signature
        star = None if isinstance(node, cst.Module) else node.params.star_arg
        return star.name.value if isinstance(star, cst.Param) else None

    @property
    def keyword_only_params(self) -> list[str]:
        node = self._signature
        return [] if isinstance(node, cst.Module) else [p.name.value for p in node.params.kwonly_params]

    @property
    def kwargs_param(self) -> Optional[str]:
        """The name of its `**kwargs` parameter, if it has one."""
        node = self._signature
        star = None if isinstance(node, cst.Module) else node.params.star_kwarg
        return star.name.value if isinstance(star, cst.Param) else None

    def bound_names(self, bound: bool, passes_first: bool = False) -> list[str]:
        """The parameters a call's positional arguments bind, in order: after `self` where the
        call is `bound` (a method called on an object), after the first where the caller passes
        it itself (`passes_first`: autograd's `ctx`, which `Op.apply(x)` supplies)."""
        names = self.positional_params
        return names[1:] if (bound and self.is_method) or passes_first else names

    def arguments(self, call: cst.Call, bound: bool, passes_first: bool = False) -> Iterator[tuple[str, cst.BaseExpression]]:
        """Each argument of `call` with the parameter it binds (bound_names)."""
        params = self.bound_names(bound, passes_first)
        position = 0
        for arg in call.args:
            if arg.star:
                continue
            if arg.keyword is not None:
                yield arg.keyword.value, arg.value
            elif position < len(params):
                yield params[position], arg.value
                position += 1

    @property
    def declared_globals(self) -> frozenset:
        """The names its `global` statements declare (nested functions' included)."""
        if self._globals is None:
            if self.outline is not None and not self.outline.facts.declares_global:
                self._globals = frozenset()  # known from `ast`, without parsing the body
            else:
                self._globals = frozenset(n.name.value for d in descendants(self.node) if isinstance(d, cst.Global) for n in d.names)
        return self._globals

    def self_writes(self) -> list["AttrWrite"]:
        if self._writes is None:
            self._writes = list(_self_writes(self))
        return self._writes


@dataclass(eq=False, repr=False)
class ClassInfo:
    module: "ModuleInfo"
    _node: Optional[cst.ClassDef]
    name: str
    methods: dict[str, FunctionInfo] = field(default_factory=dict)
    _attrs: Optional[dict[str, list["AttrWrite"]]] = None  # by attribute, as asked
    _load: Optional[Callable[[], cst.ClassDef]] = None  # parses the class when first asked for
    # The dotted names its bases are spelled with (None where one is not a dotted name), from
    # the `ast` outline: class hierarchies are asked for far more classes than are walked.
    _bases: Optional[tuple] = None

    def __repr__(self) -> str:
        return f"<class {self.qualname}>"

    @property
    def node(self) -> cst.ClassDef:
        if self._node is None and self._load is not None:
            self._node, self._load = self._load(), None
        return self._node  # type: ignore[return-value]

    @property
    def qualname(self) -> str:
        return f"{self.module.name}.{self.name}"

    @property
    def bases_spelled(self) -> tuple:
        if self._bases is None:
            from cglint.engine.syntax import dotted_name

            self._bases = tuple(dotted_name(base.value) for base in self.node.bases)
        return self._bases

    def attr_writes(self, attr: str) -> list["AttrWrite"]:
        """Every `self.<attr> = ...` / `self.<attr> += ...` in the class's methods; only the
        methods that `ast` saw assign such an attribute are parsed."""
        if self._attrs is None:
            self._attrs = {}
        if attr not in self._attrs:
            self._attrs[attr] = [
                write
                for method in self.methods.values()
                if method.outline is None or attr in method.outline.facts.stored_attrs
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
    _tree: Optional[cst.Module]  # None: built from its statements when first asked for
    is_package: bool
    root: Path  # the folder imports of this module resolve from first
    imports: dict[str, str] = field(default_factory=dict)  # local name -> qualified name
    star_imports: list[str] = field(default_factory=list)  # modules of `from m import *`
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    globals: Mapping[str, list[cst.BaseExpression]] = field(default_factory=dict)  # name -> values assigned
    # Where `tree` is the skeleton, the outline that made it; the parsed trees that hold
    # this module's nodes (the skeleton or whole module first, then functions as parsed).
    outline: Optional[Outline] = None
    pieces: list["Piece"] = field(default_factory=list)
    on_error: Optional[Callable[[Path, source.SourceError], None]] = None
    # A lazily indexed module: its statements, parsed one top-level statement at a time (index.py).
    statements: Optional["LazyStatements"] = None

    def __repr__(self) -> str:
        return f"<module {self.name}>"

    @property
    def lazy(self) -> bool:
        return self.statements is not None

    @property
    def tree(self) -> cst.Module:
        if self._tree is None:
            assert self.statements is not None
            self._tree = cst.Module(body=self.statements.all())
        return self._tree

    def parse_function(self, function: FunctionInfo) -> cst.FunctionDef:
        """Parse one function whose body the skeleton left out."""
        assert self.outline is not None and function.outline is not None
        text, offset = self.outline.function_source(function.outline)
        tree = source.parse(text, cpython_accepts=True)
        if isinstance(tree, source.SourceError):
            # libcst cannot parse this function alone though `ast` could: report it, walk nothing.
            if self.on_error is not None:
                self.on_error(self.file.path, dataclasses.replace(tree, line=tree.line + offset))
            return function.header  # type: ignore[return-value]
        self.pieces.append(Piece(tree, [offset + 1]))
        statement = tree.body[0]
        if function.outline.indented:  # under the `if 1:` that lets it parse in place
            statement = statement.body.body[0]  # type: ignore[union-attr, assignment]
        return statement  # type: ignore[return-value]

    @property
    def display(self) -> str:
        return self.file.display

    def all_functions(self) -> list[FunctionInfo]:
        """The module's functions and its classes' methods (not nested functions)."""
        return [*self.functions.values(), *(m for c in self.classes.values() for m in c.methods.values())]

    _body: Optional[FunctionInfo] = None

    @property
    def body_function(self) -> FunctionInfo:
        """The module's top-level code, walked like a function body."""
        if self._body is None:
            if self.lazy:  # parsed when walked, without the classes and plain defs (index.LazyStatements)
                statements = self.statements
                assert statements is not None
                self._body = FunctionInfo(self, None, "<module>", "<module>",
                                          load_header=lambda: cst.Module(body=statements.walked()))
            else:
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
                for leaf, value in _paired(target.target, node.value):
                    attr = self_attr(leaf, self_name)
                    if attr:
                        yield AttrWrite(attr, method, value, False, node)
        elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
            attr = self_attr(node.target, self_name)
            if attr:
                augmented = isinstance(node, cst.AugAssign)
                yield AttrWrite(attr, method, None if augmented else node.value, augmented, node)
        elif isinstance(node, cst.Call):
            registered = _registered(node, self_name)
            if registered is not None:
                yield AttrWrite(registered[0], method, registered[1], False, node)


def _paired(target: cst.BaseExpression, value: cst.BaseExpression) -> Iterator[tuple[cst.BaseExpression, cst.BaseExpression]]:
    """Each name or attribute a target binds, with the value it gets: `self.model, self.sampler
    = model, sampler` gives `self.sampler` the value `sampler`, not the tuple (its class was
    lost, and with it what the captured `self.sampler.draw()` runs)."""
    if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
        if len(target.elements) == len(value.elements) and not any(
            isinstance(e, cst.StarredElement) for e in (*target.elements, *value.elements)
        ):
            for element, item in zip(target.elements, value.elements):
                yield from _paired(element.value, item.value)
            return
    for leaf in assigned_names(target):
        yield leaf, value


# `self.register_buffer("steps", torch.zeros(()))` sets `self.steps` to a tensor: a counter
# kept there and incremented in place is device state, not a Python counter.
REGISTERING_METHODS = ("register_buffer", "register_parameter")


def _registered(call: cst.Call, self_name: str) -> Optional[tuple[str, Optional[cst.BaseExpression]]]:
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value in REGISTERING_METHODS):
        return None
    if not (isinstance(func.value, cst.Name) and func.value.value == self_name):
        return None
    args = [a.value for a in call.args if a.keyword is None and not a.star]
    name = string_value(args[0]) if args else None
    if name is None:
        return None
    return name, args[1] if len(args) > 1 else None


def self_attr(target: cst.CSTNode, self_name: str) -> Optional[str]:
    """`attr` for `self.attr`, where `self_name` is the method's first parameter."""
    if isinstance(target, cst.Attribute) and isinstance(target.value, cst.Name):
        if target.value.value == self_name:
            return target.attr.value
    return None


def dataclass_fields(cls: ClassInfo) -> list[str]:
    """The fields of a `@dataclass` (annotated names of its body, in order); [] for other classes."""
    node = cls.node
    if not any((dotted_name(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) or "").endswith("dataclass") for d in node.decorators):
        return []
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    return [
        statement.target.value
        for line in body if isinstance(line, cst.SimpleStatementLine)
        for statement in line.body
        if isinstance(statement, cst.AnnAssign) and isinstance(statement.target, cst.Name)
        and "ClassVar" not in cst.Module([]).code_for_node(statement.annotation.annotation)
    ]
