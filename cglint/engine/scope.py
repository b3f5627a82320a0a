"""Name resolution inside one function: locals, imports, module globals, `self`."""
from __future__ import annotations

import builtins
from typing import Optional

import libcst as cst

from cglint.engine.api import tables
from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo
from cglint.engine.project import Project
from cglint.engine.values import HOST, TENSOR, UNKNOWN, Kind, Value, evaluate, join

_DTYPES = frozenset(
    "float16 float32 float64 bfloat16 half float double int8 int16 int32 int64 uint8 long int short bool "
    "complex64 complex128 cfloat cdouble float8_e4m3fn float8_e5m2 strided channels_last".split()
)
_BUILTINS = frozenset(dir(builtins))
_HOST_ANNOTATIONS = frozenset("int float bool str bytes list tuple dict set Sequence Mapping".split())


class Scope:
    def __init__(self, project: Project, function: FunctionInfo, env: Optional[dict[str, Value]] = None):
        self.project = project
        self.function = function
        self.module: ModuleInfo = function.module
        self.cls: Optional[ClassInfo] = function.cls
        self.env: dict[str, Value] = {} if env is None else env
        self.value_cache: dict[int, tuple] = {}
        self._self_name = function.params[0].name.value if function.is_method and function.params else None

    # --- names -------------------------------------------------------------
    def qualname(self, expr: cst.BaseExpression) -> Optional[str]:
        """The fully qualified name an expression spells, if it names a module-level symbol."""
        if isinstance(expr, cst.Attribute):
            base = self.qualname(expr.value)
            return f"{base}.{expr.attr.value}" if base else None
        if not isinstance(expr, cst.Name):
            return None
        name = expr.value
        if name in self.env:
            return self.env[name].qualname or None
        if name in self.module.imports:
            return self.module.imports[name]
        if name in self.module.functions or name in self.module.classes:
            return f"{self.module.name}.{name}"
        if name in self.module.globals or name == self._self_name:
            return None
        return name if name in _BUILTINS else None

    def lookup(self, name: str) -> Value:
        if name in self.env:
            return self.env[name]
        if name in ("True", "False", "None"):
            return HOST
        if self._self_name and name == self._self_name and self.cls is not None:
            return Value(Kind.OBJECT, targets=(self.cls,), tag=self.class_tag(self.cls))
        if name in self.module.globals and name not in self.module.imports:
            return self.project_global(self.module, name)
        qualified = self.qualname(cst.Name(name))
        return self.reference(qualified) if qualified else UNKNOWN

    def reference(self, qualified: str) -> Value:
        """The value of a module-level symbol used as an expression (not called)."""
        definition = self.project.resolve(qualified, self.module)
        if isinstance(definition, ClassInfo):
            return Value(Kind.OBJECT, targets=(definition,), is_class=True, qualname=qualified)
        if definition is not None:
            return Value(Kind.OBJECT, targets=(definition,), qualname=qualified)
        module_name, _, attr = qualified.rpartition(".")
        module = self.project.module(module_name, self.module) if module_name else None
        if module is not None and attr in module.globals:
            return self.project_global(module, attr)
        if qualified.startswith("torch.") and attr in _DTYPES:
            return Value(Kind.HOST, qualname=qualified)
        return Value(Kind.OBJECT, qualname=qualified)

    def project_global(self, module: ModuleInfo, name: str) -> Value:
        return self.project.cached(("global", module.name, name), lambda: self._global(module, name), UNKNOWN)

    def _global(self, module: ModuleInfo, name: str) -> Value:
        scope = Scope(self.project, module.body_function)
        value: Optional[Value] = None
        for expr in module.globals[name]:
            current = evaluate(expr, scope)
            value = current if value is None else join(value, current)
        return value or UNKNOWN

    # --- members -----------------------------------------------------------
    def member(self, base: Value, attr: str) -> Value:
        if base.qualname and not base.targets:
            return self.reference(f"{base.qualname}.{attr}")
        result: Optional[Value] = None
        for target in base.targets:
            if isinstance(target, ModuleInfo):
                current = self.reference(f"{target.name}.{attr}")
            elif isinstance(target, ClassInfo):
                current = self.class_member(target, attr)
            else:
                current = UNKNOWN
            result = current if result is None else join(result, current)
        return result or UNKNOWN

    def class_member(self, cls: ClassInfo, attr: str) -> Value:
        method = self.project.method(cls, attr)
        if method is not None:
            return Value(Kind.OBJECT, targets=(method,))
        return self.project.cached(("attr", id(cls), attr), lambda: self._attr_value(cls, attr), UNKNOWN)

    def _attr_value(self, cls: ClassInfo, attr: str) -> Value:
        value: Optional[Value] = None
        for klass in self.project.mro(cls):
            for write in klass.attr_writes(attr):
                if write.augmented:
                    continue  # `self.step += 1` keeps the kind the plain assignments give it
                if write.value is None:
                    current = UNKNOWN
                else:
                    current = evaluate(write.value, Scope(self.project, write.method, initial_env(self.project, write.method)))
                    if not current.targets and _is_parameter(write.value, write.method):
                        # `self.model = model` in __init__: what the constructor's callers pass.
                        current = self._from_constructions(klass, write.value.value, current)  # type: ignore[union-attr]
                value = current if value is None else join(value, current)
        return value or UNKNOWN

    def _from_constructions(self, cls: ClassInfo, param: str, fallback: Value) -> Value:
        values = [args[param] for args in self.project.constructions(cls) if param in args]
        found = [v for v in values if v.targets or v.tag]
        if not found:
            return fallback
        result = found[0]
        for value in found[1:]:
            result = join(result, value)
        return result

    def class_tag(self, cls: ClassInfo) -> str:
        objects = tables().objects
        tags = {objects.get(name, "") for name in self.project.base_names(cls)}
        for tag in ("module_container", "module"):
            if tag in tags:
                return tag
        return ""


def _is_parameter(expr: cst.BaseExpression, method: FunctionInfo) -> bool:
    return method.name == "__init__" and isinstance(expr, cst.Name) and expr.value in {p.name.value for p in method.params}


def initial_env(project: Project, function: FunctionInfo, args: Optional[dict[str, Value]] = None) -> dict[str, Value]:
    """Parameter values from call-site arguments, annotations and defaults."""
    env: dict[str, Value] = {}
    params = function.params[1:] if function.is_method else function.params
    scope = Scope(project, function, env)
    for param in params:
        name = param.name.value
        if args and name in args and args[name].kind != Kind.UNKNOWN:
            env[name] = args[name]
        else:
            env[name] = _param_value(param, scope)
    return env


def _annotation_value(annotation: cst.BaseExpression, scope: Scope) -> Value:
    if isinstance(annotation, cst.SimpleString):  # "Transformer" (a forward reference)
        try:
            annotation = cst.parse_expression(annotation.evaluated_value)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - not an expression
            return UNKNOWN
    if isinstance(annotation, cst.Subscript):  # Optional[X], "X | None" handled below
        head = scope.qualname(annotation.value) or ""
        if head.rsplit(".", 1)[-1] in ("Optional", "Union") and annotation.slice:
            inner = annotation.slice[0].slice
            return _annotation_value(inner.value, scope) if isinstance(inner, cst.Index) else UNKNOWN
        return HOST if head.rsplit(".", 1)[-1] in _HOST_ANNOTATIONS else UNKNOWN
    if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
        return _annotation_value(annotation.left, scope)
    qualified = scope.qualname(annotation)
    if qualified is None:
        return UNKNOWN
    last = qualified.rsplit(".", 1)[-1]
    if last == "Tensor" or qualified in ("torch.Tensor", "torch.nn.Parameter"):
        return TENSOR
    if last in _HOST_ANNOTATIONS:
        return HOST
    reference = scope.reference(qualified)
    if reference.is_class:  # an instance of a project class
        return Value(Kind.OBJECT, targets=reference.targets, tag=scope.class_tag(reference.targets[0]))
    tag = tables().objects.get(qualified, "")
    return Value(Kind.OBJECT, tag=tag) if tag else UNKNOWN


def _param_value(param: cst.Param, scope: Scope) -> Value:
    if param.annotation is not None:
        value = _annotation_value(param.annotation.annotation, scope)
        if value.kind != Kind.UNKNOWN:
            return value
    default = param.default
    if isinstance(default, (cst.Integer, cst.Float, cst.SimpleString)) or (
        isinstance(default, cst.Name) and default.value in ("True", "False")
    ):
        return HOST
    return UNKNOWN
