"""Why a call in captured code was not followed: the callee's value is not known.

A call whose callee is torch, the standard library or another installed package, or a
method of a value known not to be a project object (a tensor, a string, `nn.LayerNorm`), is
not the project's code and needs no following. A call is unfollowed when the project may
define what it runs but the checker cannot tell what: `self.model(x)` where `self.model`
came from a parameter nobody passes a known value to, `fn(x)` of a callable argument,
`getattr(self, name)(x)`. `cglint reach` lists these with the reason, so a user can see how
much of a capture was read and name the missing entry points in `captured`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.definitions import ClassInfo, ModuleInfo
from cglint.engine.syntax import code_of
from cglint.engine.values import Kind, evaluate

if TYPE_CHECKING:
    from cglint.engine.scope import Scope

_HINT = "name what it runs in `captured` to follow it"
# Methods of Python's own types and of loggers: on a receiver of unknown class, these are
# almost always what they seem, whatever a project class also defines under the name.
_LIBRARY_METHODS = frozenset(
    name for kind in (list, dict, str, set, tuple, bytes, int, float, object) for name in dir(kind) if not name.startswith("__")
) | vocabulary.names("host_effect.logger_methods")


def why_unfollowed(call: cst.Call, scope: "Scope") -> Optional[str]:
    """The reason a call that resolved to no project function may still run project code,
    or None when it runs no project code (an external function, a method of a known value)."""
    func = call.func
    qualified = scope.qualname(func)
    if qualified is not None:
        return _missing_member(qualified, scope)
    value = evaluate(func, scope)
    if value.kind is not Kind.UNKNOWN or value.qualname or value.targets:
        return None  # known, and not the project's (a torch function, a tensor, nn.Linear)
    if isinstance(func, cst.Attribute):
        if _is_super(func.value):
            return None  # a method of an external base class (nn.Module)
        receiver = evaluate(func.value, scope)
        if receiver.kind is not Kind.UNKNOWN and not receiver.targets:
            return None  # a tensor's, a string's or a torch object's own method
        name = func.attr.value
        if not receiver.targets and (name not in scope.project.defined_names() or name in _LIBRARY_METHODS):
            return None  # no project class defines it, or a list's, dict's, str's or logger's method
        if receiver.targets and not _assigned(func.attr.value, receiver.targets, scope):
            return None  # inherited from a library base class (`model.parameters()`)
    elif isinstance(func, cst.Name) and any(p.name.value == func.value for p in scope.function.params):
        return f"`{func.value}` is a parameter no call passes a known callable to; {_HINT}"
    return f"the value of `{code_of(func)}` is not known; {_HINT}"


def _missing_member(qualified: str, scope: "Scope") -> Optional[str]:
    """A dotted name into one of the project's own modules that names nothing there."""
    if scope.project.resolve(qualified, scope.module) is not None:
        return None  # a class with no __init__ of its own (a dataclass), a module
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = scope.project.resolve(".".join(parts[:cut]), scope.module)
        if isinstance(module, ModuleInfo):
            return f"`{qualified}` is not defined in the project's module `{module.name}`"
    return None


def _assigned(attr: str, targets: tuple, scope: "Scope") -> bool:
    """Whether a project class among `targets` (or a base) assigns `self.<attr>`."""
    classes = [c for t in targets if isinstance(t, ClassInfo) for c in scope.project.mro(t)]
    return any(c.attr_writes(attr) for c in classes)


def _is_super(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "super"
