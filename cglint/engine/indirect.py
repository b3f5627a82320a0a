"""Code that runs where no call names it: decorator wrappers, module hooks, context managers.

- A function decorated by a project decorator that returns a closure (`@timed`,
  `@nvtx_range("attn")`) runs that closure when it is called; the closure calls the
  function through the decorator's parameter.
- A forward hook or pre-hook registered on a module (`self.register_forward_hook(self._log)`,
  `model.register_forward_pre_hook(check)`) runs wherever that module runs.
- `with obj:` runs `obj.__enter__()` and `obj.__exit__()`.
"""
from __future__ import annotations

from typing import Callable, Optional

import libcst as cst

from cglint.engine.definitions import ClassInfo, FunctionInfo, self_attr
from cglint.engine.project import Project
from cglint.engine.surgery import tested_torch_classes
from cglint.engine.syntax import descendants
from cglint.engine.values import Kind, Value, evaluate, loop_element, returned_closures, returns_of

# The tag of the function a decorator's closure holds: calling it runs the function itself.
UNDECORATED = "undecorated"
_HOOK_METHODS = ("register_forward_hook", "register_forward_pre_hook")
# How many files registering hooks are read for them: hooks registered across a whole
# framework (a profiler attaching to every layer) say nothing about one module. The most on
# the real-world bench is 5 files; past 32, a search would parse a framework's worth of them.
MAX_HOOK_FILES = 32


def decorator_wrapper(project: Project, function: FunctionInfo) -> Optional[tuple[FunctionInfo, str, bool]]:
    """The closure the outermost project decorator of `function` returns, the name its
    decorator gives the decorated function, and whether the closure surely replaces the
    function (False where the decorator may also return it unchanged: `identity if
    available else stub`). None where every decorator returns its argument or is another
    package's (`torch.no_grad()`, `functools.cache`)."""
    if not function.decorators:
        return None
    return project.cached(("decorator-wrapper", function.key), lambda: _wrapper(project, function), None)


def _wrapper(project: Project, function: FunctionInfo) -> Optional[tuple[FunctionInfo, str, bool]]:
    from cglint.engine.scope import Scope  # scope imports the value model this module uses

    scope = Scope(project, function.module.body_function)
    for decorator in function.decorators:
        for decorating in evaluate(decorator.decorator, scope).targets:
            if not isinstance(decorating, FunctionInfo) or decorating.is_method or not decorating.params:
                continue
            for wrapper in returned_closures(decorating, project).targets:
                if isinstance(wrapper, FunctionInfo) and wrapper.parent is decorating:
                    return wrapper, decorating.params[0].name.value, _surely(project, decorator.decorator, decorating, scope)
    return None


def _surely(project: Project, expr: cst.BaseExpression, decorating: FunctionInfo, scope) -> bool:
    """`@timed` naming a def, or `@nvtx("x")` calling a factory, each with one `return`: the
    decorator always returns its closure."""
    factory = expr.func if isinstance(expr, cst.Call) else None
    named = scope.qualname(factory if factory is not None else expr)
    resolved = project.resolve(named, scope.module) if named else None
    if not isinstance(resolved, FunctionInfo):
        return False
    chain = [resolved, decorating] if factory is not None else [resolved]
    return all(f.outline is not None and len(returns_of(f.outline.node)) == 1 for f in chain)


# The project objects each parameter of a function may hold, over its callers (ParameterValues.of).
Parameters = Callable[[FunctionInfo], dict]


def module_hooks(project: Project, cls: ClassInfo, holder: Optional[ClassInfo] = None, attr: str = "",
                 parameters: Optional[Parameters] = None) -> list[FunctionInfo]:
    """The hooks that run when a module of `cls` is called: registered on the module itself
    (`self.register_forward_hook(...)` in its class, `model.register_forward_hook(...)` in a
    script, `layer.register_forward_hook(...)` over `model.layers` in a function given the
    model), or, where the call is `self.<attr>(x)` in a method of `holder`, registered on that
    attribute (`self.o_proj.register_forward_hook(self._gate)`: that one submodule only)."""
    mro = project.mro(cls)
    found = [hook for owner, hook in _registered_hooks(project, parameters) if owner in mro]
    if holder is not None and attr:
        holders = project.mro(holder)
        on_attributes = _registered_hooks(project, parameters, on_attribute=True)
        found += [hook for (owner, name), hooks in on_attributes if name == attr and owner in holders for hook in hooks]
    return found


def torch_module_hooks(project: Project, torch_classes: Optional[set[str]], parameters: Optional[Parameters] = None) -> list[FunctionInfo]:
    """The hooks registered on torch's own modules of these classes (any class, where not
    known): `for m in model.modules(): if isinstance(m, nn.Linear): m.register_forward_hook(
    self.check)`, a NaN detector on every linear layer."""
    return [hook for torch_class, hook in _registered_hooks(project, parameters, on_torch=True)
            if torch_classes is None or torch_class in torch_classes]


def _registered_hooks(project: Project, parameters: Optional[Parameters], on_attribute: bool = False, on_torch: bool = False) -> list:
    found: tuple[list, list, list] = project.cached("module-hooks", lambda: _find_hooks(project, parameters), ([], [], []))
    return found[2] if on_torch else found[1] if on_attribute else found[0]


def _find_hooks(project: Project, parameters: Optional[Parameters]) -> tuple[list, list, list]:
    """(owner class, hook) for hooks registered on a module, ((holder class, attribute),
    hooks) for hooks registered on `self.<attribute>` in a method of the holder, and (torch
    class, hook) for hooks registered on torch modules that an `isinstance` test picked."""
    from cglint.engine.scope import Scope

    found: list[tuple[ClassInfo, FunctionInfo]] = []
    on_attributes: dict[tuple, list] = {}
    on_torch: list[tuple[str, FunctionInfo]] = []
    modules = {id(m): m for name in _HOOK_METHODS for m in project.modules_mentioning(name, limit=MAX_HOOK_FILES)}
    for module in modules.values():
        for function in [*module.all_functions(), module.body_function]:
            if function.outline is not None and not function.outline.mentions(_HOOK_METHODS):
                continue
            scope = Scope(project, function).assigned(function)
            if parameters is not None and _loops_over_parameter(function):
                # `def attach(model, monitor): for layer in model.layers: ...`: what callers give.
                # Asked only for this shape: finding the callers of every function that
                # registers a hook cost a third more time and memory on diffusers' hooks.
                given = parameters(function)
                # An annotation (`model: nn.Module`) says less than the objects callers pass.
                env = {**scope.env, **{name: value for name, value in given.items() if name not in scope.env or not scope.env[name].targets}}
                scope = Scope(project, function, env)  # a new scope: the assigned one is shared, its values cached
            for node in descendants(function.node):
                if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in _HOOK_METHODS and node.args):
                    continue
                hooks = _hook_functions(node.args[0].value, scope, project)
                receiver = node.func.value
                held = self_attr(receiver, function.params[0].name.value) if function.is_method and function.params else None
                if held is not None:
                    on_attributes.setdefault((function.cls, held), []).extend(hooks)
                else:  # `self`, a module a script or function holds, or one of its parts (`model.box_head`)
                    value = evaluate(receiver, scope)
                    if not value.targets and isinstance(receiver, cst.Name):  # `for layer in model.layers: layer.register_forward_hook(...)`
                        value = _loop_variable(function.node, receiver.value, scope)
                    if not value.targets and isinstance(receiver, cst.Name):  # `for name, m in model.named_modules(): m.register_forward_hook(...)`
                        value = _every_submodule(function.node, receiver.value, scope)
                    owners = [t for t in value.targets if isinstance(t, ClassInfo)]
                    found.extend((owner, hook) for owner in owners for hook in hooks)
                    if not owners and isinstance(receiver, cst.Name):  # a torch module the function was given or loops over
                        tested = tested_torch_classes(function, lambda f: scope) or _tested_in_callers(project, function, parameters)
                        on_torch.extend((torch_class, hook) for torch_class in tested for hook in hooks)
    return found, list(on_attributes.items()), on_torch


def _tested_in_callers(project: Project, function: FunctionInfo, parameters: Optional[Parameters]) -> set[str]:
    """The torch classes the callers of a hook-registering helper test (`if isinstance(mod,
    nn.Linear): self.add_hooks(mod)`): only those in its own module, a helper's usual place."""
    from cglint.engine.scope import Scope

    called = f"{function.name}("
    callers = [f for f in function.module.all_functions() if f is not function and (f.outline is None or f.outline.mentions((called,)))]
    return set().union(*(tested_torch_classes(f, lambda g: Scope(project, g)) for f in callers))


def _loops_over_parameter(function: FunctionInfo) -> bool:
    """A loop over something a parameter holds: `for layer in model.layers:`, `enumerate(model.layers)`."""
    if not isinstance(function.node, cst.FunctionDef):
        return False
    params = {p.name.value for p in function.params}
    return any(
        isinstance(name, cst.Name) and name.value in params
        for node in descendants(function.node) if isinstance(node, cst.For)
        for name in [node.iter, *descendants(node.iter)]
    )


def _hook_functions(expr: cst.BaseExpression, scope, project: Project) -> list[FunctionInfo]:
    """The functions a hook expression gives: `self._log`, `check`, or the closure a factory
    returns (`monitor.make_hook(name)`, which defines `def hook(module, inputs, output)`)."""
    value = evaluate(expr, scope)
    functions = [t for t in value.targets if isinstance(t, FunctionInfo)]
    if functions or not isinstance(expr, cst.Call):
        return functions
    factories = [t for t in evaluate(expr.func, scope).targets if isinstance(t, FunctionInfo)]
    return [t for f in factories for t in returned_closures(f, project).targets if isinstance(t, FunctionInfo)]


def _loop_variable(function: cst.CSTNode, name: str, scope) -> Value:
    """What the loop variable `name` of `function` holds (values.loop_element): a layer of
    `for layer in model.layers`, or of `for i, layer in enumerate(model.layers)`."""
    for node in descendants(function):
        if not isinstance(node, cst.For):
            continue
        if isinstance(node.target, cst.Name) and node.target.value == name:
            return loop_element(node.iter, scope)
        if isinstance(node.target, cst.Tuple):
            for index, part in enumerate(node.target.elements):
                if isinstance(part.value, cst.Name) and part.value.value == name:
                    element = loop_element(node.iter, scope)
                    return element.items[index] if index < len(element.items) else Value(Kind.UNKNOWN)
    return Value(Kind.UNKNOWN)


_SUBMODULE_ITERATORS = {"modules": False, "children": False, "named_modules": True, "named_children": True}
# Module classes one model may hold, all levels together; a bound on the attribute search.
MAX_SUBMODULE_CLASSES = 200


def _every_submodule(function: cst.CSTNode, name: str, scope) -> Value:
    """The module classes the loop variable `name` of `function` may be, when it runs over
    `model.named_modules()` (or `modules()`, `children()`): the model's classes and the project
    module classes their attributes hold, at every level. A hook registered so (a sanity check
    on every `.mlp`) runs where any of them runs."""
    for node in descendants(function):
        if not isinstance(node, cst.For):
            continue
        iterable = node.iter
        if not (isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Attribute)
                and iterable.func.attr.value in _SUBMODULE_ITERATORS):
            continue
        named = _SUBMODULE_ITERATORS[iterable.func.attr.value]
        target = node.target.elements[-1].value if named and isinstance(node.target, cst.Tuple) else node.target
        if isinstance(target, cst.Name) and target.value == name:
            root = evaluate(iterable.func.value, scope)
            return Value(Kind.OBJECT, targets=_held_modules([t for t in root.targets if isinstance(t, ClassInfo)], scope))
    return Value(Kind.UNKNOWN)


def _held_modules(classes: list[ClassInfo], scope) -> tuple:
    seen: list[ClassInfo] = []
    while classes and len(seen) < MAX_SUBMODULE_CLASSES:
        cls = classes.pop()
        if cls in seen:
            continue
        seen.append(cls)
        attrs = {attr for klass in scope.project.mro(cls) for m in klass.methods.values()
                 for attr in (m.outline.facts.stored_attrs if m.outline is not None else [w.attr for w in m.self_writes()])}
        for attr in sorted(attrs):
            member = scope.class_member(cls, attr)
            if member.kind == Kind.OBJECT and not member.is_class:
                classes += [t for t in member.targets if isinstance(t, ClassInfo)]
    return tuple(seen)


def context_methods(project: Project, value: Value) -> list[FunctionInfo]:
    """`__enter__` and `__exit__` of the project objects a `with` statement enters."""
    if value.kind != Kind.OBJECT or value.is_class:
        return []
    methods = []
    for cls in value.targets:
        if isinstance(cls, ClassInfo):
            methods += [m for name in ("__enter__", "__exit__") if (m := project.method(cls, name)) is not None]
    return methods
