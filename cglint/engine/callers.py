"""What a function's parameters hold, from every call the project makes of it.

A capture is often written in a helper that gets the model it captures as a parameter
(`def capture_graph(model, ...): with torch.cuda.graph(g): model(x)`), called by another
helper that got it as a parameter too, up to a method that passes `self`
(`GenerationMixin.generate` calling `decode(input_ids, self, ...)`). The objects such a
parameter can hold are the union of what each call site passes: found by searching the
checked files for calls of the function by name, resolving each, and evaluating its
argument in the caller; a caller's own parameter is followed to its callers in turn
(bounded), and `self` of a method is its class and every project subclass (class-hierarchy
analysis: the object may be any of them).

Objects only (project classes, functions, bound methods): a caller's numbers and flags
would decide branches for callers the checker cannot all see.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import libcst as cst

from cglint.engine.definitions import ClassInfo, FunctionInfo
from cglint.engine.values import Kind, Value, evaluate, join

if TYPE_CHECKING:
    from cglint.engine.checker import Engine

# How many callers deep a parameter is followed (`generate` -> `decode` ->
# `update_graph_cache` -> `capture_graph` is three, the most on the real-world bench), and
# how many files a name may be called from before its call sites are not searched (a name
# called that widely, `forward` or `__call__`, says nothing about one function). On the
# bench the widest search reads 22 files; the names left out are `__call__(` (478 files)
# and diffusers' `encode_prompt(` (264): searching them too changed no finding and made
# diffusers' check 2.7 times slower.
MAX_CALLER_DEPTH = 4
MAX_CALLING_FILES = 40


class ParameterValues:
    def __init__(self, engine: "Engine"):
        self.engine = engine
        self.project = engine.project
        self._values: dict[int, dict[str, Value]] = {}
        self._searched: set[tuple] = set()

    def of(self, function: FunctionInfo, depth: int = 0) -> dict[str, Value]:
        """The project objects each parameter of `function` may hold, over all its callers."""
        if self.engine.modules_left_out:
            return {}  # while discovering, modules without a capture form are left out: ask later
        key = function.key
        if key in self._values:
            return self._values[key]
        self._values[key] = {}  # a recursive call sees no values rather than looping
        params = function.params[1:] if function.is_method else function.params
        if depth >= MAX_CALLER_DEPTH or function.qualname == "<module>" or not params:
            return {}
        found: dict[str, Value] = {}
        for caller, call in self._call_sites(function):
            # `obj.method(x)` and `Cls(x)` (running `__init__`) pass self themselves.
            bound = function.is_method and (isinstance(call.func, cst.Attribute) or function.name == "__init__")
            for name, expr in function.arguments(call, bound):
                value = self._argument(caller, expr, depth)
                if value is not None:
                    found[name] = join(found[name], value) if name in found else value
        self._values[key] = found
        return found

    def call_sites(self, function: FunctionInfo) -> list[tuple[FunctionInfo, cst.Call]]:
        """(caller, call) for each call of `function` the checked files make (see _call_sites)."""
        return self._call_sites(function)

    def _call_sites(self, function: FunctionInfo) -> list[tuple[FunctionInfo, cst.Call]]:
        """Calls of `function`: in its own module and its class's subclasses' modules
        (`super().capture(create_forward_fn)`), and in any checked file that names it, where
        few do (a name as common as `forward` or `capture` says nothing about one function)."""
        name = function.name
        if (function.key, name) not in self._searched:
            self._searched.add((function.key, name))
            modules = [function.module]
            if function.cls is not None:
                modules += [sub.module for sub in self.project.subclasses(function.cls)]
            modules += self.project.modules_mentioning(f"{name}(", limit=MAX_CALLING_FILES)
            for module in dict.fromkeys(modules):
                self.engine.discover_calls_of(module, name)
        return self.engine.callers(function)

    def _argument(self, caller: FunctionInfo, expr: cst.BaseExpression, depth: int) -> Optional[Value]:
        from cglint.engine.scope import Scope  # scope imports this module's callers: loaded when first asked

        if isinstance(expr, cst.Name) and caller.is_method and caller.params and expr.value == caller.params[0].name.value:
            return self.instance_of(caller.cls)  # type: ignore[arg-type]
        value = evaluate(expr, Scope(self.project, caller).assigned(caller))
        if value.kind == Kind.OBJECT and value.targets:
            return value
        if isinstance(expr, cst.Name) and any(p.name.value == expr.value for p in caller.params):
            return self.of(caller, depth + 1).get(expr.value)
        return None

    def instance_of(self, cls: ClassInfo) -> Value:
        """An object of `cls` or of any project subclass of it."""
        return Value(Kind.OBJECT, targets=(cls, *self.project.subclasses(cls)))
