"""Name resolution inside one function: locals, imports, module globals, `self`."""
from __future__ import annotations

import builtins
from dataclasses import replace
from typing import Iterable, Iterator, Optional, Union

import libcst as cst

from cglint.engine.syntax import assigned_names, callee_name, descendants, dotted_name, identifiers

from cglint import vocabulary
from cglint.engine.definitions import AttrWrite, ClassInfo, FunctionInfo, ModuleInfo, dataclass_fields, self_attr
from cglint.engine.project import Project
from cglint.engine.registries import written_entries
from cglint.engine.surgery import swapped_in
from cglint.engine.arguments import bind
from cglint.engine.values import FALSE, HOST, NONE, PY_NONE, TENSOR, TRUE, UNKNOWN, Kind, Value, class_instance, evaluate, instance_of, join, literal_value, loop_element, narrowed

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
        # True where the code runs under a Dynamo trace (a compiled region): `is_compiling()` holds.
        self.compiling: Optional[bool] = None
        self._self_name = function.params[0].name.value if function.is_method and function.params else None

    @property
    def self_name(self) -> Optional[str]:
        return self._self_name

    def returned(self, function: FunctionInfo) -> Value:
        """What `function` returns (function_values), computed once."""
        return self._function_values(function)[1]

    def entered(self, function: FunctionInfo, args: dict[str, Value]) -> "Scope":
        """A scope of `function` called from here with `args` (the rest from its declaration)."""
        scope = Scope(self.project, function, initial_env(self.project, function, args, at_call=True))
        scope.compiling = self.compiling
        return scope

    def with_names(self, names: dict[str, Value]) -> "Scope":
        """A scope of the same function with more names bound (a comprehension's variables)."""
        scope = Scope(self.project, self.function, {**self.env, **names})
        scope.compiling = self.compiling
        return scope

    def assigned(self, function: FunctionInfo) -> "Scope":
        """A scope of `function` with its locals as last assigned (function_values)."""
        return self._function_values(function)[0]

    def _function_values(self, function: FunctionInfo) -> tuple["Scope", Value]:
        pending = (Scope(self.project, function), UNKNOWN)
        return self.project.cached(("function-values", function.key), lambda: function_values(self.project, function), pending)

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
        if name in _BUILTINS:
            return name
        if self.module.star_imports:  # `from .ops import *` then `helper_op(x)`
            found = self.project.star_imported(self.module, name)
            if isinstance(found, ClassInfo):
                return found.qualname
            if isinstance(found, FunctionInfo):
                return f"{found.module.name}.{found.qualname}"
        return None

    def lookup(self, name: str) -> Value:
        if name in self.env:
            return self.env[name]
        if name in ("True", "False", "None"):
            return {"True": TRUE, "False": FALSE, "None": NONE}[name]
        if self._self_name and name == self._self_name and self.cls is not None:
            # `cls` of a classmethod is the class: `return cls(**config)` builds an instance.
            return Value(Kind.OBJECT, targets=(self.cls,), tag=self.class_tag(self.cls), is_class=self.function.is_classmethod)
        enclosing = self.enclosing(name)
        if enclosing is not None:
            return enclosing
        if name in self.module.globals and name not in self.module.imports:
            return self.project_global(self.module, name)
        qualified = self.qualname(cst.Name(name))
        return self.reference(qualified) if qualified else UNKNOWN

    def enclosing(self, name: str) -> Optional[Value]:
        """A free variable of a nested def: the enclosing function's local or parameter of that
        name, as that function assigns it (`def forward_fn(mode): model(**inputs)` inside the
        method that binds `model` and `inputs`)."""
        parent = self.function.parent
        if parent is None or parent.qualname == "<module>" or isinstance(self.function.node, cst.Module):
            return None
        outer = self.assigned(parent)
        if name in outer.env or name == outer._self_name:
            return outer.lookup(name)
        return outer.enclosing(name)

    def reference(self, qualified: str) -> Value:
        """The value of a module-level symbol used as an expression (not called)."""
        definition = self.project.resolve(qualified, self.module)
        if isinstance(definition, ClassInfo):
            return Value(Kind.OBJECT, targets=(definition,), is_class=True, qualname=qualified)
        if definition is not None:
            value = Value(Kind.OBJECT, targets=(definition,), qualname=qualified)
            if isinstance(definition, FunctionInfo) and definition.cls is None:
                for rebound in self._rebound_in_functions(definition.module, definition.name):
                    value = join(value, rebound)  # `global step; step = torch.compile(step, ...)` in main()
            return value
        module_name, _, attr = qualified.rpartition(".")
        module = self.project.module(module_name, self.module) if module_name else None
        if module is not None and attr in module.globals:
            return self.project_global(module, attr)
        owner = self.project.resolve(module_name, self.module) if module is None and module_name else None
        if isinstance(owner, ClassInfo):  # `Config.scale`, a class attribute
            value = self.class_member(owner, attr)
            if value.kind != Kind.UNKNOWN:
                return value
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
            if isinstance(expr, (cst.Dict, cst.Call)) and (current.kind == Kind.HOST or current.fields):
                # A registry: a dict the module's functions fill (`REGISTRY[name] = cls`).
                entries = written_entries(self.project, module, name, lambda writer: Scope(self.project, writer))
                if entries:
                    current = Value(Kind.OBJECT, fields=current.fields + entries)
            elif isinstance(expr, cst.List) and not expr.elements:
                # A stack the module's functions push onto (`_CURRENT_STORAGE_STACK.append(self)` in
                # `__enter__`): any index gives any of what they push.
                entries = written_entries(self.project, module, name, lambda writer: Scope(self.project, writer))
                if entries:
                    pushed = entries[0][1]
                    for _, other in entries[1:]:
                        pushed = join(pushed, other)
                    current = Value(Kind.OBJECT, items=(pushed,))
            value = current if value is None else join(value, current)
        for current in self._rebound_in_functions(module, name):
            value = current if value is None else join(value, current)
        return value or UNKNOWN

    def _rebound_in_functions(self, module: ModuleInfo, name: str) -> list[Value]:
        """The callables and objects a module's functions bind the global `name` to, through a
        `global` statement (gpt-fast's `main()` doing `decode_one_token = torch.compile(...)`)."""
        if name not in self._declared_globals(module):
            return []
        return self.project.cached(("rebound", module.name, name), lambda: list(self._rebinding(module, name)), [])

    def _declared_globals(self, module: ModuleInfo) -> frozenset:
        def scan() -> frozenset:
            return frozenset().union(*(
                f.declared_globals for f in module.all_functions()
                if f.outline is None or f.outline.facts.declares_global  # known from `ast`, without parsing
            ))
        return self.project.cached(("declared-globals", module.name), scan, frozenset())

    def _rebinding(self, module: ModuleInfo, name: str) -> Iterator[Value]:
        for function in module.all_functions():
            if name not in function.declared_globals or not isinstance(function.node, cst.FunctionDef):
                continue
            for node in descendants(function.node):
                if isinstance(node, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets):
                    current = evaluate(node.value, Scope(self.project, function, initial_env(self.project, function)))
                    if current.kind == Kind.OBJECT:
                        yield current

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

    def property_read(self, expr: cst.Attribute) -> Optional[FunctionInfo]:
        """The `@property` that reading `obj.attr` runs, where obj's class is known."""
        base = evaluate(expr.value, self)
        if base.kind != Kind.OBJECT or base.is_class:
            return None
        for cls in base.targets:
            method = self.project.method(cls, expr.attr.value) if isinstance(cls, ClassInfo) else None
            if method is not None and method.is_property:
                return method
        return None

    def defines(self, cls: ClassInfo, attr: str) -> bool:
        """Whether an instance of `cls` has `attr` by its code: a method, an attribute its
        methods assign, or one its class body declares (in `cls` or a base)."""
        return self.project.method(cls, attr) is not None or any(
            klass.attr_writes(attr) or _class_statement(klass, attr) is not None for klass in self.project.mro(cls)
        )

    def class_member(self, cls: ClassInfo, attr: str) -> Value:
        if attr == "apply" and self.project.is_autograd_op(cls):  # `Op.apply(x)` runs `Op.forward(ctx, x)`
            forward = self.project.method(cls, "forward")
            return Value(Kind.OBJECT, targets=(forward,)) if forward is not None else UNKNOWN
        method = self.project.method(cls, attr)
        if method is not None and method.is_property:
            return self.returned(method)
        if method is not None:
            return Value(Kind.OBJECT, targets=(method,))
        return self.project.cached(("attr", id(cls), attr), lambda: self._attr_value(cls, attr), UNKNOWN)

    def _attr_value(self, cls: ClassInfo, attr: str) -> Value:
        value: Optional[Value] = None
        set_by_setter = False  # `def configure(self, t): self.temperature = t`
        if any(_number_field(klass, attr) for klass in self.project.mro(cls)):
            return HOST
        for klass in self.project.mro(cls):
            declared = _class_level(klass, attr)  # a dataclass field's default, a class constant
            if declared is not None:
                value = declared if value is None else join(value, declared)
            if attr in dataclass_fields(klass):  # what the constructions pass (`ForwardBatch(ids, mask=m)`)
                passed = [args[attr] for args in self.project.constructions(klass) if attr in args]
                known = [v for v in passed if v.kind != Kind.UNKNOWN]
                if known and len(known) == len(passed):
                    for current in known:
                        value = current if value is None else join(value, current)
            for write in klass.attr_writes(attr):
                if write.augmented:
                    continue  # `self.step += 1` keeps the kind the plain assignments give it
                if write.value is None:
                    current = UNKNOWN
                else:
                    writer = Scope(self.project, write.method, initial_env(self.project, write.method))
                    current = evaluate(write.value, writer)
                    if current.tag == "module" and not current.targets and isinstance(write.value, cst.Call):
                        swapped = swapped_in(self.project, writer.qualname(write.value.func), lambda f: Scope(self.project, f).assigned(f))  # `nn.Linear` a LoRA layer replaced
                        current = join(current, swapped) if swapped is not None else current
                    if current.kind == Kind.CPU_TENSOR and isinstance(write.node, cst.Call):
                        current = replace(current, kind=Kind.TENSOR)  # a registered buffer moves with its module (`.cuda()`)
                    if current.kind == Kind.UNKNOWN and _is_parameter(write.value, write.method, setter=True):
                        named = write.value.value if isinstance(write.value, cst.Name) else ""
                        given = self.project.parameters(write.method).get(named, UNKNOWN)
                        if given.targets:  # `self.set_processor(PROCESSORS[name]())` in __init__
                            value = given if value is None else join(value, given)
                        else:
                            set_by_setter = True
                        continue
                    copied = _copied_parameter(write.value, write.method)
                    if not current.targets and copied is not None:
                        # `self.model = model`, `self.callbacks = list(callbacks)` in __init__:
                        # what the constructor's callers pass.
                        current = self._from_constructions(klass, write.method, copied, current)
                    elif not current.targets and current.kind in (Kind.UNKNOWN, Kind.OBJECT) and write.method.name == "__init__" and self._built(klass, write).targets:
                        # `self.mixer = mixer_cls(dim)`, `self.norm = norm_cls(d)` of a local
                        # picked by a branch: with what the callers pass and the locals assigned.
                        current = self._built(klass, write)
                    elif current.kind == Kind.UNKNOWN and write.method.name == "__init__" and config_field(write.value, write.method):
                        current = HOST
                value = current if value is None else join(value, current)
        if value is not None and (value.kind == Kind.HOST or value.fields or value.items) and not value.targets:
            # `self.graph_runners = {}`, then `self.graph_runners[bs] = runner` in a method:
            # the container holds what its methods put in it.
            entries = self._stored_entries(cls, attr)
            if entries:  # a list's entries are items, iterated; a dict's are fields, looked up
                listed = value.items or any(
                    isinstance(w.value, (cst.List, cst.Tuple, cst.ListComp)) for k in self.project.mro(cls) for w in k.attr_writes(attr)
                )
                value = Value(Kind.OBJECT, items=value.items + tuple(v for _, v in entries)) if listed else Value(Kind.OBJECT, fields=value.fields + entries)
        if set_by_setter:
            # A setter's argument has the kind of the value the class starts with: a number
            # set in __init__ stays a number (a sampling temperature, a step count). Without
            # such a value, nothing is known.
            return Value(Kind.HOST) if value is not None and value.kind == Kind.HOST and value.const is not PY_NONE else UNKNOWN
        return value or UNKNOWN

    def _stored_entries(self, cls: ClassInfo, attr: str) -> tuple:
        """((key, value), ...) that methods of `cls` store into the container `self.<attr>`
        (`self.runners[bs] = runner`, `self.layers.append(layer)`): project objects only."""
        found: list[tuple[str, Value]] = []
        for klass in self.project.mro(cls):
            for method in klass.methods.values():
                if method.outline is not None and not method.outline.mentions((f".{attr}[", f".{attr}.append(")):
                    continue
                if not isinstance(method.node, cst.FunctionDef) or not method.params:
                    continue
                me, scope = method.params[0].name.value, None
                for node in descendants(method.node):
                    stored = _stored_value(node, me, attr)
                    if stored is None:
                        continue
                    scope = scope or self.assigned(method)
                    current = evaluate(stored, scope)
                    if current.kind == Kind.OBJECT and current.targets:
                        found.append((f"<entry {len(found)}>", current))
        return tuple(found)

    def _built(self, cls: ClassInfo, write: AttrWrite) -> Value:
        scope = self._constructed(cls, write.method)
        if isinstance(write.value, cst.Call):
            self.project.cached(("built", id(write.value)), lambda: self._note_built(write.value, scope), None)  # type: ignore[arg-type]
        return evaluate(write.value, scope)  # type: ignore[arg-type]

    def _note_built(self, call: cst.Call, scope: "Scope") -> None:
        """`self.mixer = mixer_cls(dim)` with `mixer_cls` a class or a partial of one that the
        constructor's callers pass: a construction of that class, which no search for its
        name finds (flash-attn's and mamba's blocks get their mixers so)."""
        callee = evaluate(call.func, scope)
        if not callee.is_class:
            return
        for target in callee.targets:
            init = self.project.method(target, "__init__") if isinstance(target, ClassInfo) else None
            if init is not None and callee_name(call.func) != target.name:  # `Block(...)`: the search for `Block(` finds it
                self.project.note_construction(target, bind(init, call, True, lambda expr: evaluate(expr, scope), callee.bound))

    def _constructed(self, cls: ClassInfo, init: FunctionInfo) -> "Scope":
        """`__init__`'s locals as assigned, its parameters holding the objects its callers pass."""
        build = lambda: function_values(self.project, init, self.constructor_objects(cls, init))[0]  # noqa: E731
        return self.project.cached(("constructed", id(cls), init.key), build, Scope(self.project, init))

    def constructor_objects(self, cls: ClassInfo, init: FunctionInfo) -> dict[str, Value]:
        """The project objects `__init__`'s parameters hold: what its callers pass (a runner
        given its model), or a default naming a class (`dropout_cls=nn.Dropout`)."""

        def build() -> dict[str, Value]:
            objects = {}
            star = [init.star_param] if init.star_param else []
            for param in [p.name.value for p in init.params[1:]] + star:
                value = self._from_constructions(cls, init, param, UNKNOWN)
                default = next((p.default for p in init.params if p.name.value == param), None)
                if value.kind == Kind.OBJECT and (value.targets or value.items):
                    objects[param] = value
                elif default is not None:  # `dropout_cls=nn.Dropout`, when no caller passes one
                    default_value = evaluate(default, Scope(self.project, init))
                    if default_value.kind == Kind.OBJECT:
                        objects[param] = default_value
            return objects

        return self.project.cached(("constructor-objects", id(cls), init.key), build, {})

    def _from_constructions(self, cls: ClassInfo, init: FunctionInfo, param: str, fallback: Value) -> Value:
        """What the constructor's callers pass for `param`: project objects (a runner given
        its model), or host constants all callers agree on (`Block(dim, fused=True)`), which
        decide the captured branches that test them."""
        param_node = next((p for p in init.params if p.name.value == param), None)
        default = literal_value(param_node.default) if param_node is not None and param_node.default is not None else None
        values = [args.get(param, default) for args in self.project.constructions(cls)]
        known = [v for v in values if v is not None]
        chosen = [v for v in known if v.targets or v.tag or v.items]
        if not chosen and known and len(known) == len(values) and all(v.is_host for v in known):
            chosen = known
        if not chosen:
            return fallback
        result = chosen[0]
        for value in chosen[1:]:
            result = join(result, value)
        return result

    def class_tag(self, cls: ClassInfo) -> str:
        objects = vocabulary.object_tags()
        tags = {objects.get(name, "") for name in self.project.base_names(cls)}
        for tag in ("module_container", "module"):
            if tag in tags:
                return tag
        return ""


# Names a constructor's configuration parameter goes by. Its fields are sizes, flags and
# rates (`self.n_rep = config.n_head // config.n_kv_heads`): reading `self.n_rep` in a
# captured forward was taken for tensor data (repeat_interleave repeats, branches).
_CONFIG_NAMES = ("config", "cfg", "conf", "args", "opt", "opts", "options", "hparams", "params", "settings")


def config_parameter(expr: cst.BaseExpression, function: FunctionInfo) -> bool:
    """`cfg` itself, a parameter of `function` named as a configuration."""
    return isinstance(expr, cst.Name) and expr.value.lower().endswith(_CONFIG_NAMES) and any(p.name.value == expr.value for p in function.params)


def config_field(expr: cst.BaseExpression, function: FunctionInfo) -> bool:
    """`config.n_head`, `args.model.dim // 2`, `int(cfg.size * 4)` of a configuration parameter of `function`."""
    params = {p.name.value for p in function.params}
    leaves = [n for n in [expr, *descendants(expr)] if isinstance(n, (cst.Attribute, cst.Name, cst.Call, cst.Subscript))]
    roots: list[str] = []
    for leaf in leaves:
        if isinstance(leaf, cst.Attribute):
            root: cst.BaseExpression = leaf
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name):
                roots.append(root.value)
    if not roots or not isinstance(expr, (cst.Attribute, cst.BinaryOperation, cst.Call)):
        return False
    if isinstance(expr, cst.Call) and dotted_name(expr.func) not in ("int", "float", "bool", "round", "max", "min"):
        return False
    return all(r in params and r.lower().endswith(_CONFIG_NAMES) for r in roots)


_NUMBER_TYPES = ("int", "float", "bool", "str")


def _class_level(cls: ClassInfo, attr: str) -> Optional[Value]:
    """The kind of `attr: float = 1.1` or `attr = 4` written in the class body. Not the
    constant: a dataclass field's default is what a constructor call leaves out
    (`ModelConfig(profile_layers=True)` elsewhere decides the captured branch)."""
    statement = _class_statement(cls, attr)
    if isinstance(statement, cst.AnnAssign):
        known = literal_value(statement.value) if statement.value is not None else None
        return HOST if (known is not None and known.const is not PY_NONE) or _number_annotation(statement.annotation) else None
    if isinstance(statement, cst.Assign):
        known = literal_value(statement.value)
        return HOST if known is not None and known.const is not PY_NONE else None
    return None


def _class_statement(cls: ClassInfo, attr: str) -> Optional[Union[cst.AnnAssign, cst.Assign]]:
    """The first statement of the class body that declares `attr` (`attr: float = 1.0`, `attr = 4`)."""
    body = cls.node.body
    for line in body.body if isinstance(body, cst.IndentedBlock) else ():
        for statement in line.body if isinstance(line, cst.SimpleStatementLine) else ():
            if isinstance(statement, cst.AnnAssign) and isinstance(statement.target, cst.Name) and statement.target.value == attr:
                return statement
            if isinstance(statement, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value == attr for t in statement.targets):
                return statement
    return None


def _number_annotation(annotation: Optional[cst.Annotation]) -> bool:
    """`: float`, `-> int`: a Python number (or bool, str)."""
    return annotation is not None and isinstance(annotation.annotation, cst.Name) and annotation.annotation.value in _NUMBER_TYPES


def _number_field(cls: ClassInfo, attr: str) -> bool:
    """`gain: float` in the class body: every value the attribute gets is a number, also where
    the checker cannot tell what a write assigns (`self.gain = rng.uniform(lo, hi)`)."""
    statement = _class_statement(cls, attr)
    return isinstance(statement, cst.AnnAssign) and _number_annotation(statement.annotation)


def _copied_parameter(expr: cst.BaseExpression, method: FunctionInfo) -> Optional[str]:
    """The parameter a value is, or a copy of: `model`, `list(callbacks)`, `tuple(layers)`."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("list", "tuple") \
            and len(expr.args) == 1 and not expr.args[0].star:
        expr = expr.args[0].value
    return expr.value if isinstance(expr, cst.Name) and _is_parameter(expr, method) else None


def _is_parameter(expr: cst.BaseExpression, method: FunctionInfo, setter: bool = False) -> bool:
    """`expr` names a parameter of __init__ (or, with `setter`, of another method, or a field
    of one: `self.temperature = req.temperature` in a `configure(self, req)`)."""
    if (method.name == "__init__") == setter:
        return False
    if setter:
        while isinstance(expr, cst.Attribute):
            expr = expr.value
        return isinstance(expr, cst.Name) and expr.value in {p.name.value for p in method.params[1:]}
    return isinstance(expr, cst.Name) and expr.value in {p.name.value for p in method.params}


# Job arguments named `CELL + name` bind a free variable of the callee, not a parameter.
CELL = "cell:"


def initial_env(project: Project, function: FunctionInfo, args: Optional[dict[str, Value]] = None, at_call: bool = False) -> dict[str, Value]:
    """Parameter values from call-site arguments, annotations and defaults.

    `at_call`: `args` are every argument of one known call, so a parameter it leaves out
    has its default (`helper(x)` runs `helper`'s `if check_bounds:` with the default's
    value); otherwise (an entry point, a configured capture) callers are unknown and a
    default says only what kind of value the parameter holds."""
    env: dict[str, Value] = {}
    params = function.params[1:] if function.is_method else function.params
    scope = Scope(project, function, env)
    for param in params:
        name = param.name.value
        passed = args.get(name) if args else None
        declared = _param_value(param, scope)
        if passed is not None and passed.kind != Kind.UNKNOWN:
            env[name] = passed
        elif passed is None and at_call:
            env[name] = declared  # left out of the call: it holds its default
        else:
            env[name] = _kind_only(declared)
    for name, value in (args or {}).items():
        if name.startswith(CELL):  # a free variable the call binds (a decorator's wrapped function)
            env[name[len(CELL):]] = value
    receiver = args.get(function.params[0].name.value) if function.is_method and function.params and args else None
    if receiver is not None and function.cls is not None and receiver.targets and all(
        isinstance(t, ClassInfo) and function.cls in project.mro(t) for t in receiver.targets
    ):
        env[function.params[0].name.value] = receiver  # the object a bound call ran on, of a subclass (Walker.receiver)
    for star in (function.star_param, function.kwargs_param):
        if star is not None and args and star in args:
            env[star] = args[star]  # `def train_step(self, *batch)`, `**kwargs`: what the call passed
    return env


def imported(node: Union[cst.Import, cst.ImportFrom], scope: Scope) -> Iterator[tuple[str, str, Optional[Value]]]:
    """The names an import statement binds in `scope`'s function: (local name, qualified name,
    its value where known without resolving: a plain `import`'s module). A `from` import's name
    is resolved by the caller, when it needs it (`scope.reference`)."""
    if isinstance(node, cst.Import):
        for alias in node.names:
            full = dotted_name(alias.name) or ""
            local = alias.asname.name.value if alias.asname is not None else full.split(".")[0]  # type: ignore[union-attr]
            yield local, full, Value(Kind.OBJECT, qualname=full if alias.asname is not None else local)
    elif not isinstance(node.names, cst.ImportStar):
        base = dotted_name(node.module) if node.module is not None else ""
        origin = scope.module.absolute(len(node.relative), base) if node.relative else base
        for alias in node.names:
            name = dotted_name(alias.name) or ""
            local = alias.asname.name.value if alias.asname is not None else name  # type: ignore[union-attr]
            yield local, f"{origin}.{name}" if origin else name, None


def function_values(
    project: Project, function: FunctionInfo, params: Optional[dict[str, Value]] = None, reading: Optional[Iterable[cst.CSTNode]] = None
) -> tuple["Scope", Value]:
    """A function's locals, assigned in order, and what it returns (`frac = self.step /
    self.total` then `return self.w0 + (self.w1 - self.w0) * frac`; `boxes, scores = ...` then
    `return boxes, scores`, a tuple whose items are known; `return opt, sched`, torch objects).
    Its parameters are what their declarations say, or `params` where given.

    `reading`: only the locals these expressions read, and those their assignments read (a
    search for one call's arguments need not evaluate the rest of a long function), loop
    variables and `isinstance` tests included (evaluating every loop of every function
    whose locals are asked for made SGLang's run half as long again)."""
    env = initial_env(project, function)
    env.update(params or {})
    scope = Scope(project, function, env)
    signature = function.header if function.header is not None else function.node
    declared = HOST if _number_annotation(getattr(signature, "returns", None)) else None
    result: Optional[Value] = None
    nodes = list(descendants(function.node))
    if reading is not None:
        nodes = _assignments_read(nodes, reading)
    for node in nodes:
        if isinstance(node, cst.FunctionDef) and node is not function.node:  # a closure it defines
            env[node.name.value] = Value(Kind.OBJECT, targets=(function.nested(node),))
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            target, value = node.targets[0].target, evaluate(node.value, scope)
            if isinstance(target, cst.Name):
                env[target.value] = value
            elif isinstance(target, (cst.Tuple, cst.List)):
                for index, element in enumerate(target.elements):
                    if isinstance(element.value, cst.Name):
                        item = value.items[index] if index < len(value.items) else Value(value.kind) if value.is_tensor else UNKNOWN
                        env[element.value.value] = item
        elif reading is not None and isinstance(node, (cst.For, cst.CompFor)):  # `for module in self.adapter_modules()`
            each = loop_element(node.iter, scope)
            leaves = list(assigned_names(node.target))
            for index, leaf in enumerate(leaves):
                # A comprehension's variable is its own: it leaves a local of the same name alone.
                if isinstance(leaf, cst.Name) and (isinstance(node, cst.For) or leaf.value not in env):
                    env[leaf.value] = each if len(leaves) == 1 else each.items[index] if index < len(each.items) else UNKNOWN
        elif reading is not None and isinstance(node, cst.If):  # `if isinstance(module, LoraLinear): module.set_scale(s)`
            env.update((name, value) for name, value in narrowed(node.test, scope).items() if not env.get(name, UNKNOWN).targets)
        elif isinstance(node, cst.Return) and node.value is not None and declared is None:
            current = evaluate(node.value, scope)
            if isinstance(node.value, cst.Tuple):
                items = tuple(evaluate(e.value, scope) for e in node.value.elements)
                current = Value(Kind.OBJECT, items=items) if any(i.is_tensor or i.tag for i in items) else current
            result = current if result is None else join(result, current)
    return scope, declared or result or UNKNOWN  # `def alpha(self) -> float:` says what it returns


def _assignments_read(nodes: list[cst.CSTNode], reading: Iterable[cst.CSTNode]) -> list[cst.CSTNode]:
    """Of a function's nodes, the assignments and nested defs that bind a name `reading`
    reads, or a name those assignments read in turn (in their order)."""
    needed = set().union(*(identifiers(expr) for expr in reading))
    kept: list[cst.CSTNode] = []
    for node in reversed(nodes):
        if isinstance(node, cst.FunctionDef):
            bound = {node.name.value}
        elif isinstance(node, cst.Assign) and len(node.targets) == 1:
            bound = {leaf.value for leaf in assigned_names(node.targets[0].target) if isinstance(leaf, cst.Name)}
        elif isinstance(node, (cst.For, cst.CompFor)):
            bound = {leaf.value for leaf in assigned_names(node.target) if isinstance(leaf, cst.Name)}
        elif isinstance(node, cst.If) and isinstance(node.test, cst.Call) and node.test.args:  # `isinstance(m, Lora)`
            first = node.test.args[0].value
            bound = {first.value} if isinstance(first, cst.Name) else set()
        else:
            continue
        if bound & needed:
            kept.append(node)
            if isinstance(node, (cst.Assign, cst.For, cst.CompFor)):
                needed |= identifiers(node.value if isinstance(node, cst.Assign) else node.iter)
    kept.reverse()
    return kept


def _kind_only(value: Value) -> Value:
    """What a literal default says without a call: the kind of value, not the value
    (a `None` default says nothing: callers pass tensors, modules, anything)."""
    if value.const is None:
        return value
    return UNKNOWN if value.const is PY_NONE else HOST


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
        if head.rsplit(".", 1)[-1] not in _HOST_ANNOTATIONS:
            return UNKNOWN
        # `batch: dict[str, torch.Tensor]`: a container of tensors, whose entries are no host values.
        held = (e.slice.value for e in annotation.slice if isinstance(e.slice, cst.Index))
        return UNKNOWN if any(_annotation_value(h, scope).is_tensor for h in held) else HOST
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
        return class_instance(reference.targets[0], scope) if len(reference.targets) == 1 else \
            Value(Kind.OBJECT, targets=reference.targets, tag=scope.class_tag(reference.targets[0]))
    tag = vocabulary.object_tags().get(qualified, "")
    if tag:
        return Value(Kind.OBJECT, tag=tag)
    return instance_of(qualified, scope) or UNKNOWN  # `td: TensorDictBase`: an object of another library


def _param_value(param: cst.Param, scope: Scope) -> Value:
    """What a parameter holds when its default is used: the literal default (`fused: bool =
    False`), else what its annotation says."""
    annotated = _annotation_value(param.annotation.annotation, scope) if param.annotation is not None else UNKNOWN
    default = literal_value(param.default) if param.default is not None else None
    if default is not None and annotated.kind in (Kind.UNKNOWN, Kind.HOST):
        return default
    return annotated


def _stored_value(node: cst.CSTNode, me: str, attr: str) -> Optional[cst.BaseExpression]:
    """The value `node` puts into `self.<attr>` as an entry: `self.<attr>[k] = v` or
    `self.<attr>.append(v)`."""
    if isinstance(node, cst.Assign) and len(node.targets) == 1:
        target = node.targets[0].target
        if isinstance(target, cst.Subscript) and self_attr(target.value, me) == attr:
            return node.value
    elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "append" and node.args:
        if self_attr(node.func.value, me) == attr:
            return node.args[0].value
    return None
