"""Modules swapped into a model by name: `setattr(parent, name, LoraLinear(child))` over a
model's children, as PEFT injects adapters and quantization libraries swap their linears.

After such a swap, `self.fc1(x)` in the model's own forward runs the project module that
replaced the `nn.Linear` built in `__init__`. Which attributes were swapped is a runtime
fact (the name is computed), so the swap is matched by type: the torch classes that the
swapping code tests with `isinstance` (`if isinstance(child, nn.Linear): setattr(...)`), in
the function that swaps or the module that holds it. A swap with no such test is not
followed: which attributes it reaches is not known.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Optional

import libcst as cst

from cglint.engine.definitions import ClassInfo, FunctionInfo
from cglint.engine.syntax import descendants, positional
from cglint.engine.values import Kind, Value, evaluate, join

if TYPE_CHECKING:
    from cglint.engine.project import Project
    from cglint.engine.scope import Scope

ScopeOf = Callable[[FunctionInfo], "Scope"]  # a function's scope with its locals as assigned

# `setattr(obj, name, value)` whose name is not a literal.
_SWAP = re.compile(r"\bsetattr\(\s*[^,()]+(?:\([^()]*\))?\s*,\s*[A-Za-z_]")
# A tree where more files than this swap by name (a serving engine's many model families) is
# not searched: the parse would cost more than a type-matched guess is worth.
MAX_SWAPPING_FILES = 40


def swapped_in(project: "Project", torch_class: Optional[str], scope_of: ScopeOf) -> Optional[Value]:
    """The project modules a swap by name may put where an instance of `torch_class`
    (`torch.nn.Linear`) was held, or None."""
    if not torch_class:
        return None
    pending: dict[str, Value] = {}
    return project.cached(("swaps",), lambda: _swaps(project, scope_of), pending).get(torch_class)


def _swaps(project: "Project", scope_of: ScopeOf) -> dict[str, Value]:
    paths = [path for path, text in project.sources.items() if "setattr(" in text and _SWAP.search(text)]
    if len(paths) > MAX_SWAPPING_FILES:
        return {}
    found: dict[str, Value] = {}
    for path in paths:
        module = project.module_for_path(path, project.sources[path])
        if module is None:
            continue
        tested_here = None
        for function in module.all_functions():
            if function.outline is not None and not function.outline.mentions(("setattr(",)):
                continue
            for call in _swaps_in(function):
                value = _swapped_value(project, scope_of(function), call)
                if value is None:
                    continue
                if tested_here is None:
                    tested_here = set().union(*(tested_torch_classes(f, scope_of) for f in module.all_functions()))
                tested = tested_torch_classes(function, scope_of) or tested_here
                for torch_class in tested:
                    found[torch_class] = join(found[torch_class], value) if torch_class in found else value
    return found


def _swaps_in(function: FunctionInfo) -> list[cst.Call]:
    node = function.node
    if not isinstance(node, cst.FunctionDef):
        return []
    return [
        n for n in descendants(node)
        if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "setattr"
        and len(positional(n)) == 3 and not isinstance(positional(n)[1], (cst.SimpleString, cst.ConcatenatedString))
    ]


def _swapped_value(project: "Project", scope: "Scope", call: cst.Call) -> Optional[Value]:
    """The project module instances the swap stores, or None."""
    value = evaluate(positional(call)[2], scope)
    if value.kind != Kind.OBJECT or value.is_class:
        return None
    modules = tuple(t for t in value.targets if isinstance(t, ClassInfo) and (project.method(t, "forward") or project.method(t, "__call__")))
    return Value(Kind.OBJECT, targets=modules, tag="module") if modules else None


def tested_torch_classes(function: FunctionInfo, scope_of: ScopeOf) -> set[str]:
    """The torch.nn classes `isinstance` tests in a function (`isinstance(m, (nn.Linear, nn.Conv2d))`)."""
    node = function.node
    if not isinstance(node, cst.FunctionDef) or (function.outline is not None and not function.outline.mentions(("isinstance(",))):
        return set()
    scope = scope_of(function)
    found: set[str] = set()
    for call in descendants(node):
        if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) and call.func.value == "isinstance" and len(positional(call)) == 2:
            tested = positional(call)[1]
            for cls in [e.value for e in tested.elements] if isinstance(tested, cst.Tuple) else [tested]:
                name = scope.qualname(cls)
                if name and name.startswith("torch.nn."):
                    found.add(name)
    return found
