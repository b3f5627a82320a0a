"""Module-level containers filled away from their definition: registries.

`ATTENTION_BACKENDS = {}` is empty where it is defined; a decorator fills it
(`@register_backend("flash") class FlashImpl`, whose closure runs
`ATTENTION_BACKENDS[name] = cls`) or a function does (`ACTIVATIONS["gelu"] = GeluImpl`).
Code that looks an entry up by a configuration string (`ATTENTION_BACKENDS[cfg.backend]()`)
may get any of them, so the entries are what the module's functions write, and where the
written value is the decorator's parameter, every definition the decorator decorates.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst

from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo
from cglint.engine.project import Project
from cglint.engine.syntax import descendants, dotted_name
from cglint.engine.values import Kind, Value, evaluate, returned_closures

if TYPE_CHECKING:
    from cglint.engine.scope import Scope

# How many files that name a decorator are searched for what it decorates. A registry's
# decorator is written once per class it registers, mostly one class a file: 64 files is a
# large model zoo, the count past which the second file scan also stops (check._SCAN_LIMIT);
# a name in more files is a common word, not one registry.
MAX_DECORATED_FILES = 64


def written_entries(project: Project, module: ModuleInfo, name: str, scope_of: Callable[[FunctionInfo], "Scope"]) -> tuple:
    """((key, value), ...) that the module's functions store into its global `name`, each
    value evaluated in `scope_of(the writing function)`; keys that are not string constants
    get a placeholder (a lookup by a variable joins them all)."""
    return project.cached(("registry", module.name, name), lambda: _entries(project, module, name, scope_of), ())


def _entries(project: Project, module: ModuleInfo, name: str, scope_of: Callable[[FunctionInfo], "Scope"]) -> tuple:
    entries: list[tuple[str, Value]] = []
    needles = (f"{name}[", f"{name}.append(")
    for function in module.all_functions():
        if function.outline is None or not function.outline.mentions(needles):
            continue
        for writer, key, value in _stores(function, name):
            found = evaluate(value, scope_of(writer))
            if not found.targets and isinstance(value, cst.Name) and value.value in _param_names(writer):
                found = decorated_by(project, writer, scope_of)
            if found.targets:
                literal = key.evaluated_value if isinstance(key, cst.SimpleString) else None
                entries.append((literal if isinstance(literal, str) else f"<entry {len(entries)}>", found))
    return tuple(entries)


def _stores(function: FunctionInfo, name: str):
    """(the function or nested def that writes, key, value) for each `name[key] = value`, and
    (..., None, value) for each `name.append(value)` (a stack of current contexts)."""
    pending = [(function, function.node)]
    while pending:
        owner, node = pending.pop()
        for child in descendants(node):
            if isinstance(child, cst.FunctionDef) and child is not node:
                pending.append((owner.nested(child), child))
            elif isinstance(child, cst.Call) and isinstance(child.func, cst.Attribute) and child.func.attr.value == "append" and len(child.args) == 1:
                if isinstance(child.func.value, cst.Name) and child.func.value.value == name:  # `_STACK.append(self)`
                    yield owner, None, child.args[0].value
            elif isinstance(child, cst.Assign) and len(child.targets) == 1:
                target = child.targets[0].target
                if (isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and target.value.value == name
                        and len(target.slice) == 1 and isinstance(target.slice[0].slice, cst.Index)):
                    yield owner, target.slice[0].slice.value, child.value


def _param_names(function: FunctionInfo) -> set[str]:
    return {p.name.value for p in function.params}


def decorated_by(project: Project, decorator: FunctionInfo, scope_of: Callable[[FunctionInfo], "Scope"]) -> Value:
    """The classes and functions decorated by `decorator`, used as `@decorator` or, where it
    is the closure a factory returns, as `@factory(...)`."""
    factory = decorator.parent if decorator.parent is not None and decorator.parent.qualname != "<module>" else None
    spelled = factory.name if factory is not None else decorator.name
    if factory is not None and decorator.key not in {t.key for t in returned_closures(factory, project).targets}:
        return Value()
    wanted = factory if factory is not None else decorator
    found: list = []
    for module in project.modules_mentioning(spelled, limit=MAX_DECORATED_FILES):
        scope = scope_of(module.body_function)
        for definition in (*module.classes.values(), *module.functions.values()):
            if _decorated_with(project, scope, definition, wanted, spelled):
                found.append(definition)
    if not found:
        return Value()
    return Value(Kind.OBJECT, targets=tuple(found), is_class=all(isinstance(d, ClassInfo) for d in found))


def _decorated_with(project: Project, scope: "Scope", definition, wanted: FunctionInfo, spelled: str) -> bool:
    """Whether a decorator of `definition` is `@wanted` or `@wanted(...)`, resolved in `scope`
    (the module's own: imports and aliases as the module writes them)."""
    node = definition.node if isinstance(definition, ClassInfo) else (definition.header or definition.node)
    for decorator in getattr(node, "decorators", ()):
        expr = decorator.decorator.func if isinstance(decorator.decorator, cst.Call) else decorator.decorator
        if (dotted_name(expr) or "").rsplit(".", 1)[-1] != spelled:
            continue  # a cheap test before resolving
        named = scope.qualname(expr)
        if named is not None and project.resolve(named, scope.module) is wanted:
            return True
    return False
