"""Host versus tensor: a small abstract interpretation of expressions.

Rules must tell `x.shape[0] > 4` (host) from `x.sum() > 0` (tensor data), and a
host tensor (`torch.rand(3)`) from a device one (`torch.rand(3, device="cuda")`).
Each expression gets a `Value`; anything the checker cannot tell is UNKNOWN, and
rules only fire on what is known, so an unknown never becomes a false positive.
"""
from __future__ import annotations

import ast
import enum
import re
import functools
import threading
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterator, Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo
from cglint.engine.outline import SCOPES as AST_SCOPES
from cglint.engine.syntax import assigned_names, call_method, descendants, item_name, keyword, positional, reads, string_value

if TYPE_CHECKING:
    from cglint.engine.scope import Scope


class Kind(enum.Enum):
    UNKNOWN = "unknown"
    HOST = "host"  # Python numbers, strings, metadata (shape, dtype), containers of those
    TENSOR = "tensor"  # a tensor on the device (or on a device we cannot tell)
    CPU_TENSOR = "cpu_tensor"  # a tensor known to live in host memory
    NUMPY = "numpy"
    OBJECT = "object"  # modules, functions, classes, streams, generators...


@dataclass(frozen=True, eq=False)
class Origin:
    """The constructor call a tagged object came from (`torch.optim.AdamW(params, lr=...)`)."""

    call: cst.Call
    qualname: str
    function: FunctionInfo  # where the call is written (its module resolves the arguments)


@dataclass(frozen=True)
class Value:
    kind: Kind = Kind.UNKNOWN
    random: bool = False  # drawn from a host random number generator
    tag: str = ""  # object tag from the vocabulary's objects.* entries: "stream", "generator", ...
    targets: tuple = ()  # project FunctionInfo / ClassInfo (instances) it may be
    qualname: str = ""  # the external symbol it names (`torch.cuda`, `random.random`)
    is_class: bool = False  # the targets are classes, not instances
    # Read from tensor data: a host number from `.item()`/`int(t)`, or a tensor whose
    # size depends on data (nonzero, masked_select, unique) and the sizes taken from it.
    data: bool = False
    origin: Optional[Origin] = field(default=None, compare=False)
    const: Any = None  # the Python constant a value is known to hold (PY_NONE for None); None: not known
    items: tuple = ()  # the values of a tuple a project function returns (`return step, set_scale`)
    # The arguments a `functools.partial` binds: (positional values, ((keyword, value), ...)).
    bound: tuple = field(default=(), compare=False)
    # A dict's entries under constant string keys, ((key, value), ...): `**kwargs` and
    # registries (`{"silu": SiluImpl, "gelu": GeluImpl}[name]`) read them.
    fields: tuple = field(default=(), compare=False)
    # A dict whose every key is known (a display with literal keys): no entry beyond `fields`.
    keys_known: bool = field(default=False, compare=False)
    # Methods taken from an instance (`fn = self.step`, `getattr(self, name)`): a call passes self.
    on_instance: bool = field(default=False, compare=False)

    @property
    def is_tensor(self) -> bool:
        return self.kind in (Kind.TENSOR, Kind.CPU_TENSOR)

    @property
    def is_host(self) -> bool:
        return self.kind in (Kind.HOST, Kind.NUMPY)


class _PyNone:
    """The constant `None` (Value.const uses None itself for "no known constant")."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "None"


PY_NONE = _PyNone()
UNKNOWN = Value()
MASK = "mask"  # tag of boolean tensors (comparisons, isnan, logical ops)
HOST = Value(Kind.HOST)
NONE = Value(Kind.HOST, const=PY_NONE)
TRUE = Value(Kind.HOST, const=True)
FALSE = Value(Kind.HOST, const=False)
TENSOR = Value(Kind.TENSOR)
CPU_TENSOR = Value(Kind.CPU_TENSOR)


# A partial's bound keyword under this name: it also unpacked a mapping of unknown keys.
OPEN_KEYWORDS = "**"


def join(a: Value, b: Value) -> Value:
    if a.keys_known and b.keys_known:  # `{"dwconv": d} if serial else {}`: either dict's keys
        return _join_dicts(a, b)
    if a == b:
        return a
    # `self.cache = None` in __init__, a tensor or module later: the attribute is what it is
    # once set (code that runs while it is still None is the lazy initialisation itself).
    if a.const is PY_NONE:
        return b
    if b.const is PY_NONE:
        return a
    # `fn = torch.compile(model, mode="reduce-overhead") if use_compile else model`: the
    # hazards of the compiled function hold whenever compiling is on.
    for compiled, other in ((a, b), (b, a)):
        if compiled.tag == "compiled" and compiled.origin is not None and other.tag != "compiled":
            return compiled
    if a.kind == b.kind:
        origin = a.origin if a.origin is b.origin else None
        targets = tuple(dict.fromkeys(a.targets + b.targets))
        # `nn.LayerNorm if not rms else RMSNorm`: a class either way, the project's among them.
        is_class = (a.is_class or b.is_class) and all(v.is_class or not v.targets for v in (a, b))
        return Value(a.kind, a.random and b.random, a.tag if a.tag == b.tag else "", targets, is_class=is_class, data=a.data or b.data,
                     origin=origin, on_instance=a.on_instance and b.on_instance)
    if a.is_tensor and b.is_tensor:
        return TENSOR
    # `graph_ctx = partial(adapter.cuda_graph, ...) if saver else self.device_module.graph`: a
    # capture form on one branch captures there. Only capture forms: other callables joined with
    # an unknown led into code of other platforms and configurations (DeepSpeed's oneCCL backend).
    for known, other in ((a, b), (b, a)):
        if other.kind == Kind.UNKNOWN and known.qualname in vocabulary.names("capture.graph_context"):
            return known
    return UNKNOWN


def _join_dicts(a: Value, b: Value) -> Value:
    entries = dict(a.fields)
    for key, value in b.fields:
        entries[key] = join(entries[key], value) if key in entries else value
    kind = a.kind if a.kind == b.kind else Kind.OBJECT
    return Value(kind, fields=tuple(entries.items()), keys_known=True)


def _as_mask(value: Value) -> Value:
    return replace(value, tag=MASK) if value.is_tensor else value


def _combine(values: list[Value]) -> Value:
    """The value of an arithmetic or comparison over operands."""
    data = any(v.data for v in values)
    if any(v.kind == Kind.TENSOR for v in values):
        return Value(Kind.TENSOR, data=data) if data else TENSOR
    if any(v.kind == Kind.CPU_TENSOR for v in values):
        return Value(Kind.CPU_TENSOR, any(v.random for v in values), data=data)
    if values and all(v.is_host for v in values):
        kind = Kind.NUMPY if any(v.kind == Kind.NUMPY for v in values) else Kind.HOST
        return Value(kind, any(v.random for v in values), data=data)
    return UNKNOWN


def evaluate(expr: cst.BaseExpression, scope: "Scope") -> Value:
    cache = scope.value_cache
    key = id(expr)
    if key in cache:
        return cache[key][1]
    value = _evaluate(expr, scope)
    cache[key] = (expr, value)  # keep the node alive so its id stays unique
    return value


def _literal(expr: cst.BaseExpression) -> Any:
    """The constant a literal spells (`3`, `-1.5`, `"cuda"`, `[1, 2, 4]`, `False`), else None."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return expr.evaluated_value
    if isinstance(expr, cst.Name) and expr.value in _NAMED_CONSTANTS:
        return _NAMED_CONSTANTS[expr.value]
    if isinstance(expr, cst.SimpleString):
        return string_value(expr)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        inner = _literal(expr.expression)
        return -inner if isinstance(inner, (int, float)) else None
    if isinstance(expr, (cst.Tuple, cst.List)) and expr.elements:
        items = tuple(_literal(e.value) for e in expr.elements if not isinstance(e, cst.StarredElement))
        return items if len(items) == len(expr.elements) and None not in items else None
    return None


_NAMED_CONSTANTS = {"True": True, "False": False, "None": PY_NONE}


def literal_value(expr: cst.BaseExpression) -> Optional[Value]:
    """The value of a literal (`3`, `"cuda"`, `False`, `None`, `(1, 2)`), else None."""
    known = _literal(expr)
    return None if known is None else Value(Kind.HOST, const=known)


def _evaluate(expr: cst.BaseExpression, scope: "Scope") -> Value:
    # The common kinds first, by exact type (libcst's node classes are final; isinstance on
    # their ABC metaclass costs a Python call for every miss).
    kind = type(expr)
    if kind is cst.Name:
        return scope.lookup(expr.value)  # type: ignore[attr-defined]
    if kind is cst.Attribute:
        return _attribute(expr, scope)  # type: ignore[arg-type]
    if kind is cst.Call:
        return _call(expr, scope)  # type: ignore[arg-type]
    if isinstance(expr, (cst.Integer, cst.Float, cst.SimpleString)):
        return Value(Kind.HOST, const=_literal(expr))
    if isinstance(expr, (cst.Imaginary, cst.ConcatenatedString)):
        return HOST
    if isinstance(expr, cst.FormattedString):
        return HOST
    if isinstance(expr, cst.Name):
        return scope.lookup(expr.value)
    if isinstance(expr, cst.Attribute):
        return _attribute(expr, scope)
    if isinstance(expr, cst.Call):
        return _call(expr, scope)
    if isinstance(expr, cst.Subscript):
        return _subscript(expr, scope)
    if isinstance(expr, cst.BinaryOperation):
        left, right = evaluate(expr.left, scope), evaluate(expr.right, scope)
        combined = _combine([left, right])
        if isinstance(expr.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)) and MASK in (left.tag, right.tag):
            return _as_mask(combined)
        return combined
    if isinstance(expr, cst.Comparison):
        if all(isinstance(t.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for t in expr.comparisons):
            return HOST  # identity and membership tests yield a Python bool
        operands = [evaluate(expr.left, scope)] + [evaluate(t.comparator, scope) for t in expr.comparisons]
        return _as_mask(_combine(operands))
    if isinstance(expr, cst.BooleanOperation):
        return _combine([evaluate(expr.left, scope), evaluate(expr.right, scope)])
    if isinstance(expr, cst.UnaryOperation):
        inner = evaluate(expr.expression, scope)
        if isinstance(expr.operator, cst.Not) and inner.is_host:
            return HOST
        if isinstance(expr.operator, cst.BitInvert) and inner.tag == MASK:
            return inner
        if isinstance(expr.operator, cst.Minus) and inner.const is not None:
            return Value(Kind.HOST, const=_literal(expr))
        return inner if inner.kind != Kind.OBJECT else UNKNOWN
    if isinstance(expr, cst.IfExp):
        return join(evaluate(expr.body, scope), evaluate(expr.orelse, scope))
    if isinstance(expr, (cst.Tuple, cst.List, cst.Set)):
        elements = [evaluate(e.value, scope) for e in expr.elements if not isinstance(e, cst.StarredElement)]
        if all(v.is_host for v in elements):
            return Value(Kind.HOST, data=any(v.data for v in elements), const=_literal(expr))
        if len(elements) == len(expr.elements) and not isinstance(expr, cst.Set):
            # `static_batch = (x, y)`: unpacked into a call (`step(*static_batch)`) or indexed.
            return Value(Kind.OBJECT, items=tuple(elements))
        return UNKNOWN
    if isinstance(expr, cst.Dict):
        return _dict(expr, scope)
    if isinstance(expr, cst.Lambda):
        return Value(Kind.OBJECT, targets=(FunctionInfo(scope.module, expr, "<lambda>", "<lambda>", scope.cls, scope.function),))
    if isinstance(expr, (cst.ListComp, cst.GeneratorExp, cst.SetComp)):
        return _comprehension(expr, scope)
    return UNKNOWN


def _comprehension(expr: cst.BaseExpression, scope: "Scope") -> Value:
    """A list of project objects: `[m for m in self.modules() if isinstance(m, AdapterMixin)]`
    holds adapter modules, `[Block(d) for _ in range(n)]` blocks. Anything else stays unknown
    (a list of tensors is no object the rules look into)."""
    inner = scope.with_names({})
    comp: Optional[cst.CompFor] = expr.for_in  # type: ignore[attr-defined]
    while comp is not None:
        element = loop_element(comp.iter, inner)
        leaves = list(assigned_names(comp.target))
        for index, leaf in enumerate(leaves):
            if isinstance(leaf, cst.Name):
                known = element if len(leaves) == 1 else (element.items[index] if index < len(element.items) else UNKNOWN)
                inner.env[leaf.value] = known
        for test in comp.ifs:
            inner.env.update(narrowed(test.test, inner))
        comp = comp.inner_for_in
    value = evaluate(expr.elt, inner)  # type: ignore[attr-defined]
    if value.kind == Kind.OBJECT and not value.is_class and any(isinstance(t, (ClassInfo, FunctionInfo)) for t in value.targets):
        return Value(Kind.OBJECT, items=(value,))
    return UNKNOWN


def truth(expr: cst.BaseExpression, scope: "Scope") -> Optional[bool]:
    """Whether a condition is known to hold (True), known not to (False), or unknown (None):
    constant flags passed by the captured call (`helper(x, check_bounds=False)`), literal
    defaults, constructor constants, and `is None` tests of values known to be set."""
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = truth(expr.expression, scope)
        return None if inner is None else not inner
    if isinstance(expr, cst.BooleanOperation):
        left, right = truth(expr.left, scope), truth(expr.right, scope)
        if isinstance(expr.operator, cst.And):
            return False if False in (left, right) else (True if left and right else None)
        return True if True in (left, right) else (False if left is False and right is False else None)
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        return _compare(evaluate(expr.left, scope), expr.comparisons[0], scope)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value == "isinstance":
        tensor_check = _is_tensor_check(expr, scope)
        return tensor_check if tensor_check is not None else _is_instance_of_torch_class(expr, scope)
    if isinstance(expr, cst.Call) and scope.compiling is not None and compiling_check(expr, scope):
        return scope.compiling
    if isinstance(expr, cst.Call):
        decided = _predicate(expr, scope)
        if decided is not None:
            return decided
    value = evaluate(expr, scope)
    if value.const is not None and not isinstance(value.const, tuple):
        return bool(value.const)
    return None


# Modules whose names are types of no object (`typing.Any`, `collections.abc.Mapping`): no instance.
_TYPING = ("typing.", "typing_extensions.", "collections.abc.", "abc.", "builtins.")


_BUILTIN_TYPES = frozenset({"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "int", "float", "bool"})


def instance_of(qualified: Optional[str], scope: "Scope") -> Optional[Value]:
    """What an instance of the class `qualified` is, where it is known not to be a tensor: a
    project class's object, or an object of another library's class (`TensorDictBase`,
    `NonTensorStack`). None for tensor classes (torch's, `*Tensor` subclasses such as `DTensor`),
    typing names, torch's own types and names that are no class (lower case)."""
    if not qualified or qualified in vocabulary.names("values.tensor_classes"):
        return None
    if qualified in _BUILTIN_TYPES:
        return HOST
    last = qualified.rsplit(".", 1)[-1]
    if not last[:1].isupper() or last.endswith("Tensor") or qualified.startswith(("torch.", "numpy.") + _TYPING):
        return None
    definition = scope.project.resolve(qualified, scope.module)
    if isinstance(definition, ClassInfo):
        if any(base.rsplit(".", 1)[-1].endswith("Tensor") for base in scope.project.base_names(definition)):
            return None  # a project tensor subclass
        return class_instance(definition, scope)
    if definition is not None or "." not in qualified or qualified.split(".")[0] == scope.module.name.split(".")[0]:
        return None  # a function, or a name of the project that resolved to nothing
    return Value(Kind.OBJECT)


def loop_element(iterable: cst.BaseExpression, scope: "Scope") -> Value:
    """The value of the loop variable of `for x in iterable`: an element of a module list, of a
    tuple of known items, a tensor's row; `enumerate` gives (index, element), `zip` a tuple."""
    if isinstance(iterable, cst.Call) and isinstance(iterable.func, cst.Name):
        name = iterable.func.value
        if name == "range":
            return HOST
        if name in ("enumerate", "reversed", "sorted") and positional(iterable):
            inner = loop_element(positional(iterable)[0], scope)
            return inner if name != "enumerate" else Value(Kind.OBJECT, items=(HOST, inner))
        if name == "zip":  # `for layer, cache in zip(self.layers, caches)`
            return Value(Kind.OBJECT, items=tuple(loop_element(arg, scope) for arg in positional(iterable)))
    value = evaluate(iterable, scope)
    if value.kind == Kind.OBJECT and value.tag == "module_container":
        return Value(Kind.OBJECT, targets=value.targets, tag="module")
    if value.is_tensor:
        return Value(value.kind)
    if value.items and not isinstance(iterable, cst.Dict):  # a list or tuple of known items: any of them
        return entry(value, None, scope) or UNKNOWN
    return UNKNOWN


def class_instance(cls: ClassInfo, scope: "Scope") -> Value:
    """An object declared (annotated, or tested with isinstance) to be a `cls`: one of the
    class or of any project subclass, whose overrides a method call may run
    (`storage.update_usage()` on a `QuantizedTensorStorage` runs `Float8TensorStorage`'s)."""
    return Value(Kind.OBJECT, targets=(cls, *scope.project.subclasses(cls)), tag=scope.class_tag(cls))


def narrowed(test: cst.BaseExpression, scope: "Scope") -> dict[str, Value]:
    """Names an `if` test proves to hold an instance of a non-tensor class in its body:
    `isinstance(result, TensorDictBase)`, alone or as a conjunct of `and`; and the objects of
    a union that have an attribute, `hasattr(processor, "update")`."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return {**narrowed(test.left, scope), **narrowed(test.right, scope)}
    if isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "hasattr":
        return _having(test, scope)
    if not (isinstance(test, cst.Call) and isinstance(test.func, cst.Name) and test.func.value == "isinstance"):
        return {}
    args = [a.value for a in test.args]
    if len(args) != 2 or not isinstance(args[0], cst.Name) or test.func.value in scope.env:
        return {}
    classes = [e.value for e in args[1].elements] if isinstance(args[1], (cst.Tuple, cst.List)) else [args[1]]
    values = [instance_of(scope.qualname(c), scope) for c in classes]
    if not values or any(v is None for v in values):
        return {}
    value = values[0] if len(values) == 1 else Value(Kind.OBJECT)
    return {args[0].value: value}  # type: ignore[dict-item]


def _having(test: cst.Call, scope: "Scope") -> dict[str, Value]:
    """`hasattr(processor, "update")` over a list of processors of several project classes:
    in the body, `processor` is one of those whose code defines `update`."""
    args = [a.value for a in test.args]
    attr = string_value(args[1]) if len(args) == 2 else None
    if attr is None or not isinstance(args[0], cst.Name) or "hasattr" in scope.env:
        return {}
    value = evaluate(args[0], scope)
    if value.kind != Kind.OBJECT or value.is_class or not value.targets or not all(isinstance(t, ClassInfo) for t in value.targets):
        return {}
    having = tuple(t for t in value.targets if scope.defines(t, attr))
    if not having or len(having) == len(value.targets):
        return {}
    return {args[0].value: replace(value, targets=having)}


def compiling_check(call: cst.Call, scope: "Scope") -> bool:
    """`torch.compiler.is_compiling()` in any spelling (`from torch._dynamo import is_compiling as
    is_dynamo_compiling`), or a project function that returns one (transformers'
    `is_torchdynamo_compiling()`: a check in a `try`, `return False` where torch is missing)."""
    if call.args:
        return False
    checks = vocabulary.names("capture.compiling_check")
    qualified = scope.qualname(call.func)
    if qualified is None:
        return False
    if qualified in checks:
        return True
    definition = scope.project.resolve(qualified, scope.module)
    if not isinstance(definition, FunctionInfo) or definition.outline is None:
        return False
    return scope.project.cached(("compiling-check", definition.key), lambda: _returns_compiling_check(definition, checks), False)


def _returns_compiling_check(function: FunctionInfo, checks: frozenset) -> bool:
    """Every `return` of the function gives a compiling check or False, and one gives a check."""
    node = function.outline.node  # type: ignore[union-attr]
    names = dict(function.module.imports)
    returns, stack = [], list(reversed(getattr(node, "body", [])))
    while stack:
        inner = stack.pop()
        if isinstance(inner, ast.Import):
            for alias in inner.names:
                names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(inner, ast.ImportFrom) and inner.module and not inner.level:
            names.update((alias.asname or alias.name, f"{inner.module}.{alias.name}") for alias in inner.names)
        elif isinstance(inner, ast.Return):
            returns.append(inner.value)
        elif not isinstance(inner, AST_SCOPES):
            stack.extend(reversed(list(ast.iter_child_nodes(inner))))

    def dotted(expr) -> Optional[str]:
        if isinstance(expr, ast.Attribute):
            base = dotted(expr.value)
            return f"{base}.{expr.attr}" if base else None
        return names.get(expr.id, expr.id) if isinstance(expr, ast.Name) else None

    found = False
    for value in returns:
        if isinstance(value, ast.Call) and not value.args and dotted(value.func) in checks:
            found = True
        elif not (isinstance(value, ast.Constant) and value.value is False):
            return False
    return found


def _is_tensor_check(call: cst.Call, scope: "Scope") -> Optional[bool]:
    """`isinstance(label, torch.Tensor)` where the captured call passes a tensor (True) or a
    Python number (False): NeMo's `_pred_step(label)` takes either, and the capture passes a
    tensor, so its integer branch never runs captured."""
    args = [a.value for a in call.args]
    if len(args) == 2 and scope.qualname(args[1]) in _HOST_TYPES and evaluate(args[0], scope).is_tensor:
        return False  # `isinstance(args[0], bool)` of a tensor (Transformer Engine's checkpoint)
    if len(args) != 2 or scope.qualname(args[1]) not in vocabulary.names("values.tensor_classes"):
        return None
    value = evaluate(args[0], scope)
    if value.is_tensor:
        return True
    if value.kind == Kind.HOST and value.const is not None:
        return False
    return None


_HOST_TYPES = frozenset({"bool", "int", "float", "str", "bytes", "list", "tuple", "dict", "set"})


def _is_instance_of_torch_class(call: cst.Call, scope: "Scope") -> Optional[bool]:
    """`isinstance(network, torch.nn.Module)` of a function or closure: False."""
    args = [a.value for a in call.args]
    if len(args) != 2 or not (scope.qualname(args[1]) or "").startswith("torch."):
        return None
    value = evaluate(args[0], scope)
    functions = value.kind == Kind.OBJECT and not value.is_class and bool(value.targets)
    return False if functions and all(isinstance(t, FunctionInfo) for t in value.targets) else None


# A predicate is evaluated inside another's body at most this deep, and only when short: the
# helpers that decide a path (`has_te_modules(fn)`, `self._use_graphs()`) are a few lines.
# The longest asked about on the real-world bench has 22 statements; allowing four levels and
# 200 statements changed no finding there.
_PREDICATE_DEPTH = 2
_PREDICATE_STATEMENTS = 40
_predicates = threading.local()


def _predicate(call: cst.Call, scope: "Scope") -> Optional[bool]:
    """What a short project function returns as a truth value for this call's arguments:
    the truth of every `return` its body can reach, where they all agree (Transformer
    Engine's `has_te_modules(fn)` returns True for any callable that is not a module)."""
    depth = getattr(_predicates, "depth", 0)
    if depth >= _PREDICATE_DEPTH or isinstance(call.func, cst.Name) and call.func.value == "isinstance":
        return None
    callee = evaluate(call.func, scope)
    if callee.kind != Kind.OBJECT or callee.is_class or len(callee.targets) != 1 or callee.bound:
        return None
    function = callee.targets[0]
    node = function.node if isinstance(function, FunctionInfo) else None
    if not isinstance(node, cst.FunctionDef) or not scope.project.cached(("short", function.key), lambda: _is_short(node), False):
        return None
    bound = function.is_method and isinstance(call.func, cst.Attribute)
    inner = scope.entered(function, {name: evaluate(expr, scope) for name, expr in function.arguments(call, bound)})
    outcomes: set = set()
    _predicates.depth = depth + 1
    try:
        if _falls_through(node.body, inner, outcomes):
            outcomes.add(False)  # the implicit `return None`
    finally:
        _predicates.depth = depth
    return outcomes.pop() if len(outcomes) == 1 else None


def _is_short(node: cst.FunctionDef) -> bool:
    statements = (n for n in descendants(node) if isinstance(n, (cst.SimpleStatementLine, cst.BaseCompoundStatement)))
    return sum(1 for _ in statements) <= _PREDICATE_STATEMENTS


def _falls_through(block: cst.BaseSuite, scope: "Scope", outcomes: set) -> bool:
    """Walk a block on the paths its tests leave open, adding the truth of each `return` (None:
    unknown) to `outcomes`; whether the end of the block can be reached."""
    body = block.body if isinstance(block, cst.IndentedBlock) else (block,) if isinstance(block, cst.SimpleStatementSuite) else ()
    for statement in body:
        if isinstance(statement, cst.If):
            decided = truth(statement.test, scope)
            reached = False
            if decided is not False:
                reached |= _falls_through(statement.body, scope, outcomes)
            if decided is not True:
                orelse = statement.orelse
                if orelse is None:
                    reached = True
                elif isinstance(orelse, cst.Else):
                    reached |= _falls_through(orelse.body, scope, outcomes)
                else:  # elif
                    reached |= _falls_through(cst.IndentedBlock(body=[orelse]), scope, outcomes)
            if not reached:
                return False
        elif isinstance(statement, (cst.SimpleStatementLine, cst.SimpleStatementSuite)):
            for small in statement.body:
                if isinstance(small, cst.Return):
                    outcomes.add(truth(small.value, scope) if small.value is not None else False)
                    return False
                if isinstance(small, cst.Raise):
                    return False
                if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Name):
                    scope.env[small.targets[0].target.value] = evaluate(small.value, scope)
                elif isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                    return _unknown(outcomes)  # a binding this walk does not follow
        elif any(isinstance(n, cst.Return) for n in descendants(statement)):
            return _unknown(outcomes)  # returns inside loops, `with`, `try`: not followed
    return True


def _unknown(outcomes: set) -> bool:
    outcomes.add(None)
    return False


def returned_closures(function: FunctionInfo, project) -> Value:
    """What a factory returns when it returns functions it defines (`return sample,
    set_temperature`): the closures, so that calls of them are followed and a `nonlocal`
    written by one and read by the other is seen. Anything else: unknown."""
    return project.cached(("returned-closures", function.key), lambda: _closures(function), UNKNOWN)


def returned_torch_value(function: FunctionInfo, scope: "Scope") -> Value:
    """What a project function returns where that is tensors or torch objects: a tensor
    (`return torch.linalg.vector_norm(...)`: `float(self._grad_norm())` syncs), an optimizer,
    or a tuple with such items (`return boxes, scores`; `return opt, sched`); else unknown.
    Told from the `ast` outline first, so that only functions that may return tensors are parsed."""
    if function.outline is None or not _may_return_tensors(function):
        return UNKNOWN
    value = scope.returned(function)
    if value.is_tensor:
        return Value(value.kind, data=value.data)
    if value.tag in _TORCH_OBJECTS:  # `return torch.optim.SGD(...)`
        return value
    return value if any(i.is_tensor or i.tag in _TORCH_OBJECTS for i in value.items) else UNKNOWN


def returned_objects(function: FunctionInfo, scope: "Scope") -> Value:
    """The project objects or classes a factory returns (`def create_block(cfg, i): return
    Block(cfg)`; `return partial(MHA, ...)`): `layers = ModuleList([create_block(cfg, i) ...])`
    holds Blocks, whose forward a captured `for layer in self.layers: layer(x)` runs. Told
    from the `ast` outline first: only functions whose every return is a call or a name and
    that name something like a class."""
    if function.outline is None or not _may_return_objects(function):
        return UNKNOWN
    value = scope.returned(function)
    return value if _project_objects(value) else UNKNOWN


def _project_objects(value: Value) -> bool:
    """Instances or classes of the project, or a list or tuple of them (`build_processors()`
    returning `[Penalty(1.3), Temperature(0.7)]`)."""
    if value.kind != Kind.OBJECT:
        return False
    if value.targets:
        return all(isinstance(t, ClassInfo) for t in value.targets)
    return bool(value.items) and all(_project_objects(item) for item in value.items)


def _may_return_objects(function: FunctionInfo) -> bool:
    returns = returns_of(function.outline.node)  # type: ignore[union-attr]
    returns = [e for v in returns for e in (v.elts if isinstance(v, (ast.List, ast.Tuple)) else (v,))]
    names = function.outline.facts.names  # type: ignore[union-attr]
    # Something like a class: `Block`, a classmethod's `cls`, a class picked by `getattr`.
    classes = any(name[:1].isupper() for name in names) or not names.isdisjoint(("cls", "getattr"))
    if returns and all(isinstance(v, (ast.Name, ast.Subscript)) for v in returns):
        return True  # `return _ACCELERATOR`, `return self.timers[name]`: objects held, not built here
    # `return [m for m in self.modules() if isinstance(m, AdapterMixin)]`: objects filtered by class.
    built = (ast.Call, ast.Name, ast.Attribute, ast.ListComp, ast.GeneratorExp)
    return classes and bool(returns) and all(isinstance(v, built) for v in returns)


def returns_of(node: ast.AST) -> list:
    """The values of a function's own `return` statements (not those of nested defs)."""
    returns, stack = [], list(node.body)  # type: ignore[attr-defined]
    while stack:
        child = stack.pop()
        if isinstance(child, ast.Return):
            returns.append(child.value)
        elif not isinstance(child, AST_SCOPES):
            stack.extend(ast.iter_child_nodes(child))
    return returns


# Tags of torch objects a helper may build and return (`opt, sched = build_optim(model)`);
# project modules (tag "module") are left to how their construction is seen.
_TORCH_OBJECTS = frozenset({"optimizer", "lr_scheduler", "grad_scaler", "stream", "event", "graph", "generator", "compiled", "graphed"})


def _may_return_tensors(function: FunctionInfo) -> bool:
    """Every `return` gives a torch op's result, a name or a tuple of those, and the function
    calls torch: an `ast` test that keeps most helpers (returning flags, strings, None) unparsed."""
    torch_names = {local for local, qualified in function.module.imports.items() if qualified.split(".")[0] == "torch"}
    if not torch_names or not function.outline.mentions(torch_names):  # type: ignore[union-attr]
        return False
    returns = returns_of(function.outline.node)  # type: ignore[union-attr]

    def tensor_like(value) -> bool:
        if isinstance(value, ast.Name):
            return True
        root = value.func if isinstance(value, ast.Call) else None
        while isinstance(root, ast.Attribute):
            root = root.value
        return isinstance(root, ast.Name) and root.id in torch_names

    return bool(returns) and all(
        value is not None and (all(map(tensor_like, value.elts)) if isinstance(value, ast.Tuple) else tensor_like(value))
        for value in returns
    )


def _closures(function: FunctionInfo) -> Value:
    node = function.node
    if not isinstance(node, cst.FunctionDef) or not isinstance(node.body, cst.IndentedBlock):
        return UNKNOWN
    nested = {stmt.name.value: function.nested(stmt) for stmt in node.body.body if isinstance(stmt, cst.FunctionDef)}
    if not nested:
        return UNKNOWN
    returns = [s.value for stmt in node.body.body if isinstance(stmt, cst.SimpleStatementLine)
               for s in stmt.body if isinstance(s, cst.Return) and s.value is not None]
    if len(returns) != 1:
        return UNKNOWN

    def closure(expr: cst.BaseExpression) -> Value:
        found = nested.get(expr.value) if isinstance(expr, cst.Name) else None
        return Value(Kind.OBJECT, targets=(found,)) if found is not None else UNKNOWN

    value = returns[0]
    if isinstance(value, (cst.Tuple, cst.List)):
        items = tuple(closure(e.value) for e in value.elements)
        return Value(Kind.OBJECT, items=items) if any(i.targets for i in items) else UNKNOWN
    return closure(value)


def _compare(left: Value, part: cst.ComparisonTarget, scope: "Scope") -> Optional[bool]:
    right = evaluate(part.comparator, scope)
    op = part.operator
    if isinstance(op, (cst.Is, cst.IsNot)) and PY_NONE in (left.const, right.const):
        other = right if left.const is PY_NONE else left
        if other.const is PY_NONE:
            result: Optional[bool] = True
        elif other.const is not None or other.is_tensor or (other.kind == Kind.OBJECT and other.targets and not other.is_class):
            result = False  # a number, a tensor, a project object: not None
        else:
            return None
        return result if isinstance(op, cst.Is) else not result
    if left.const is None or right.const is None or PY_NONE in (left.const, right.const):
        return None
    compare = {cst.Equal: lambda a, b: a == b, cst.NotEqual: lambda a, b: a != b}.get(type(op))
    if compare is None:
        return None
    return compare(left.const, right.const)


# Calls whose result is computed from their arguments' values: `min(n, cap)` reads `n`.
_ARITHMETIC_CALLS = frozenset({"min", "max", "int", "float", "bool", "round", "abs", "math", "len"})
_HOST_OPERATORS = (cst.Subscript, cst.BinaryOperation, cst.UnaryOperation, cst.IfExp, cst.Tuple, cst.List)


def host_reads(expr: cst.BaseExpression, scope: "Scope") -> Iterator[cst.BaseExpression]:
    """Names and attributes a host expression reads: through arithmetic, subscripts and
    `min`/`len`-like calls, not into tensor sub-expressions (`x.shape[0]` reads metadata of
    a tensor, which a graph fixes anyway)."""

    def opens(node: cst.BaseExpression) -> bool:
        if evaluate(node, scope).is_tensor:
            return False
        if type(node) is cst.Subscript and item_name(node) is not None:
            return False  # `self.hparams["ent_coef"]` is read as that entry (its own state)
        if isinstance(node, cst.Call):
            return (scope.qualname(node.func) or "").split(".")[0] in _ARITHMETIC_CALLS
        return isinstance(node, _HOST_OPERATORS)

    return (read for read in reads(expr, opens) if not evaluate(read, scope).is_tensor)


def output_root(expr: cst.BaseExpression) -> cst.BaseExpression:
    """What `expr` still shares memory with: `y` for `y[:n]`, `y.view(...)`, `y.detach()`, `y.T`."""
    views = vocabulary.names("memory.views")
    while True:
        if isinstance(expr, cst.Subscript):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in views:
            expr = expr.func.value
        elif isinstance(expr, cst.Attribute) and expr.attr.value in views:
            expr = expr.value
        else:
            return expr


def _attribute(expr: cst.Attribute, scope: "Scope") -> Value:
    qualified = scope.qualname(expr)
    if qualified is not None:
        return scope.reference(qualified)
    base = evaluate(expr.value, scope)
    attr = expr.attr.value
    if base.is_tensor or (base.kind == Kind.UNKNOWN and attr in vocabulary.names("values.host_attributes")):
        if attr in vocabulary.names("values.host_attributes"):
            return Value(Kind.HOST, data=True) if base.data else HOST
        if attr in ("T", "mT", "H", "mH", "data", "real", "imag", "grad"):
            return base if base.is_tensor else UNKNOWN
        return UNKNOWN
    if base.kind == Kind.OBJECT and base.tag == "module" and not base.targets and attr in vocabulary.names("values.module_tensor_attributes"):
        return TENSOR  # `self.dt_proj.bias` of an `nn.Linear`
    if base.kind == Kind.OBJECT:
        value = _attribute_of(base, attr, scope)
        if value.kind == Kind.UNKNOWN and base.tag == "module" and attr in vocabulary.names("values.module_host_attributes"):
            return HOST
        return value
    if base.kind == Kind.HOST:
        return HOST
    return UNKNOWN


def _dict(expr: cst.Dict, scope: "Scope") -> Value:
    """A dict display: `{"scale": 1.0, "top_k": 50}` (options held on `self`, read by captured
    code) is a host value; its entries under string keys are kept (`fields`), with those of
    `**other` dicts it unpacks, and whether they are all its keys (`keys_known`)."""
    entries: dict[str, Value] = {}
    host, complete = True, True
    for element in expr.elements:
        if isinstance(element, cst.DictElement):
            key, value = _literal(element.key), evaluate(element.value, scope)
            host = host and value.is_host and evaluate(element.key, scope).is_host
            if isinstance(key, str):
                entries[key] = value
            else:
                complete = False
        else:  # `**other`
            other = evaluate(element.value, scope)
            host = host and other.is_host
            complete = complete and other.keys_known
            entries.update(other.fields)
    if host:
        return Value(Kind.HOST, fields=tuple(entries.items()), keys_known=complete)
    return Value(Kind.OBJECT, fields=tuple(entries.items()), keys_known=complete) if entries else UNKNOWN


def dict_call(call: cst.Call, scope: "Scope") -> Value:
    """`dict(x=x, **extra)` or `dict(other)`: the entries it is known to hold."""
    entries: dict[str, Value] = {}
    complete = True
    for arg in call.args:
        if arg.keyword is not None:
            entries[arg.keyword.value] = evaluate(arg.value, scope)
        else:
            other = evaluate(arg.value, scope)
            complete = complete and other.keys_known
            entries.update(other.fields)
    if not entries:
        return Value(Kind.HOST, keys_known=True) if not call.args else UNKNOWN
    host = all(v.is_host for v in entries.values())
    return Value(Kind.HOST if host else Kind.OBJECT, fields=tuple(entries.items()), keys_known=complete)


def entry(base: Value, key: Optional[cst.BaseExpression], scope: "Scope") -> Optional[Value]:
    """What indexing a container of known entries gives: the entry of a constant key, every
    entry where the key is not a constant (a registry looked up by a config string, a layer
    picked by an index). Dicts are mutable, so a host entry's constant is not kept."""
    if not base.fields and not base.items:
        return None
    index = _literal(key) if key is not None else None
    if base.fields and isinstance(index, str):
        found = dict(base.fields).get(index)
        return None if found is None else replace(found, const=None)
    if base.items and isinstance(index, int):
        return base.items[index] if -len(base.items) <= index < len(base.items) else None
    if index is not None:
        return None
    held = [v for _, v in base.fields] if base.fields else list(base.items)
    result = held[0]
    for value in held[1:]:
        result = join(result, value)
    return replace(result, const=None)


def _subscript(expr: cst.Subscript, scope: "Scope") -> Value:
    base = evaluate(expr.value, scope)
    if (base.items or base.fields) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        found = entry(base, expr.slice[0].slice.value, scope)
        if found is not None:
            return found  # `batch[0]` of a tuple whose items are known, `REGISTRY[name]`
    if base.is_tensor:
        # Indexing with a mask or a data-sized index gives a data-sized result.
        data = base.data or any(_data_index(e, scope) for e in expr.slice)
        return Value(base.kind, base.random, tag=MASK if base.tag == MASK else "", data=data)  # a mask's slice is a mask
    if base.kind == Kind.OBJECT and base.tag == "module_container":  # `self.lora_B[name]`: a module
        return Value(Kind.OBJECT, targets=base.targets, tag="module")
    if base.kind in (Kind.HOST, Kind.NUMPY):
        return replace(base, const=None, qualname="")
    return UNKNOWN


def _data_index(element: cst.SubscriptElement, scope: "Scope") -> bool:
    if not isinstance(element.slice, cst.Index):
        return False
    index = evaluate(element.slice.value, scope)
    return index.is_tensor and (index.tag == MASK or index.data)


def device_of(call: cst.Call, scope: "Scope") -> Optional[str]:
    """'cpu', 'device' or None (not given) for a call's device= argument."""
    device = keyword(call, "device")
    if device is None:
        return None
    text = string_value(device)
    if text is None and isinstance(device, cst.Call) and scope.qualname(device.func) == "torch.device":
        text = string_value(positional(device)[0]) if positional(device) else None
    if text is not None:
        return "cpu" if text.split(":")[0] == "cpu" else "device"
    return "device"


def _call(call: cst.Call, scope: "Scope") -> Value:
    qualified = scope.qualname(call.func)
    if qualified is not None:
        return _call_qualified(call, qualified, scope)
    method = call_method(call)
    if method is not None:
        receiver, name = method
        return _call_method(call, evaluate(receiver, scope), name, scope)
    callee = evaluate(call.func, scope)
    if callee.kind == Kind.OBJECT and callee.qualname and not callee.targets:
        return _call_qualified(call, callee.qualname, scope)  # `RMSNorm = nn.RMSNorm`, then `RMSNorm(dim)`
    if callee.kind == Kind.OBJECT:
        if callee.is_class:
            return Value(Kind.OBJECT, targets=callee.targets)
        called = _called_object(callee, call, scope)
        if called is not None:
            return called
        # `forward_fn = create_forward_fn(desc)` of factories passed as an argument: what the
        # factories known to return something return (a call may reach any of them).
        known = [v for v in (_returned_by_call(f, call, scope) for f in callee.targets if isinstance(f, FunctionInfo)) if v is not UNKNOWN]
        if known:
            result = known[0]
            for value in known[1:]:
                result = join(result, value)
            return result
    return UNKNOWN


def _called_object(callee: Value, call: cst.Call, scope: "Scope") -> Optional[Value]:
    """What calling an object gives: an nn.Module runs its forward (a tensor); an object of
    another project class runs its `__call__` (`timer = self.timers(name)`, a timer)."""
    if callee.tag in ("module", "module_container"):
        return TENSOR
    classes = [c for c in callee.targets if isinstance(c, ClassInfo)]
    if not classes:
        return None
    if any(scope.class_tag(c) in ("module", "module_container") for c in classes):
        return TENSOR
    calls = [m for c in classes for m in scope.member(Value(Kind.OBJECT, targets=(c,)), "__call__").targets if isinstance(m, FunctionInfo)]
    value = _returned_by_call(calls[0], call, scope) if len(calls) == 1 else UNKNOWN
    return value if value is not UNKNOWN else TENSOR


def _returned_by_call(function: FunctionInfo, call: cst.Call, scope: "Scope") -> Value:
    """What one call of a project function gives: the argument it hands back, else returned_value."""
    given = _returned_parameters(function)
    if given and not function.is_method:
        # `model = inject_adapter(TinyModel())` where `inject_adapter` changes its argument in
        # place and returns it: the caller's object, whatever the function did to it.
        passed = [evaluate(expr, scope) for name, expr in function.arguments(call, False) if name in given]
        if len(passed) == len(given) and all(v is not UNKNOWN for v in passed):
            result = passed[0]
            for value in passed[1:]:
                result = join(result, value)
            return result
    return returned_value(function, scope)


def _returned_parameters(function: FunctionInfo) -> frozenset:
    """The parameters a function returns where every `return` names one (`return model`)."""
    if function.outline is None:
        return frozenset()
    returns = returns_of(function.outline.node)
    names = frozenset(v.id for v in returns if isinstance(v, ast.Name))
    params = {p.name.value for p in function.params}
    return names if returns and all(isinstance(v, ast.Name) for v in returns) and names <= params else frozenset()


def returned_value(function: FunctionInfo, scope: "Scope") -> Value:
    """What a call of a project function gives where it is known: the closures it defines,
    tensors or torch objects, or the project objects it constructs."""
    closures = returned_closures(function, scope.project)
    if closures is not UNKNOWN:
        return closures
    value = returned_torch_value(function, scope)
    if value is UNKNOWN:
        value = returned_host_number(function, scope)
    return value if value is not UNKNOWN else returned_objects(function, scope)


def returned_host_number(function: FunctionInfo, scope: "Scope") -> Value:
    """A Python number a project function returns (`return indices[0].item()`, `return
    int(n)`, `return 0`): a counter set from it is host state that captured code freezes. Told
    from the `ast` outline first: only functions whose every return is such a call or constant."""
    if function.outline is None or not _may_return_numbers(function):
        return UNKNOWN
    value = scope.returned(function)
    return Value(Kind.HOST, data=value.data) if value.kind == Kind.HOST else UNKNOWN


_NUMBER_CALLS = frozenset({"item", "tolist", "int", "float", "len", "round"})


def _may_return_numbers(function: FunctionInfo) -> bool:
    def number_like(value) -> bool:
        if isinstance(value, ast.Constant):
            return isinstance(value.value, (int, float)) and not isinstance(value.value, bool)
        func = value.func if isinstance(value, ast.Call) else None
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        return name in _NUMBER_CALLS

    returns = returns_of(function.outline.node)  # type: ignore[union-attr]
    return bool(returns) and all(value is not None and number_like(value) for value in returns)


def _call_qualified(call: cst.Call, qualified: str, scope: "Scope") -> Value:
    if qualified in vocabulary.object_tags():
        tag = vocabulary.object_tags()[qualified]
        if tag == "module_container":  # nn.ModuleList([Layer() for ...]), nn.Sequential(A(), B())
            return Value(Kind.OBJECT, tag=tag, targets=_contained_modules(call, scope))
        targets: tuple = ()
        if tag in vocabulary.tags_with("wraps") and positional(call):  # torch.compile(fn), DDP(model): calls reach the wrapped code
            wrapped = evaluate(positional(call)[0], scope)
            targets = wrapped.targets if wrapped.kind == Kind.OBJECT and not wrapped.is_class else ()
        return Value(Kind.OBJECT, tag=tag, targets=targets, origin=Origin(call, qualified, scope.function))
    if qualified in vocabulary.names("values.device_modules"):
        return Value(Kind.OBJECT, qualname="torch.cuda")
    if qualified in vocabulary.names("values.partials") and positional(call):
        # `partial(decode_step, model, scores=scores)` is called like decode_step, with these first.
        wrapped = evaluate(positional(call)[0], scope)
        given = tuple(evaluate(a, scope) for a in positional(call)[1:])
        named: list[tuple[str, Value]] = []
        for arg in call.args:
            if arg.keyword is not None:
                named.append((arg.keyword.value, evaluate(arg.value, scope)))
            elif arg.star == "**":  # `partial(MHA, **factory_kwargs)`: its entries, or it may bind any keyword
                unpacked = evaluate(arg.value, scope)
                named.extend(unpacked.fields)
                if not unpacked.keys_known:
                    named.append((OPEN_KEYWORDS, UNKNOWN))
        return replace(wrapped, bound=(given, tuple(named))) if wrapped.targets else wrapped
    if qualified in vocabulary.names("values.copies") and positional(call):
        return evaluate(positional(call)[0], scope)
    if qualified == "dict":
        return dict_call(call, scope)
    if qualified == "getattr" and len(positional(call)) >= 2:
        return _getattr(call, scope)
    if qualified in ("tuple", "list") and len(positional(call)) == 1:
        held = evaluate(positional(call)[0], scope)
        if held.kind == Kind.OBJECT and (held.targets or held.items):  # `tuple(layers)` of a ModuleList
            return held
    definition = scope.project.resolve(qualified, scope.module)
    if isinstance(definition, ClassInfo):
        return Value(Kind.OBJECT, targets=(definition,), tag=scope.class_tag(definition))
    if isinstance(definition, FunctionInfo):
        return _returned_by_call(definition, call, scope)
    if isinstance(definition, ModuleInfo):
        return UNKNOWN
    if definition is None and not qualified.startswith("torch.") and qualified not in vocabulary.names("values.host_builtins") | vocabulary.names("values.host_containers"):
        constructed = instance_of(qualified, scope)  # `TensorDict(...)`: an object of another library
        if constructed is not None:
            return constructed
    if qualified in vocabulary.names("values.host_containers"):
        return HOST
    if qualified in vocabulary.names("values.host_functions") or qualified in vocabulary.names("values.host_builtins"):
        args = [evaluate(a, scope) for a in positional(call)]
        # int(t.sum()), float(t): a number read from tensor data; len(idx) of a data-sized tensor.
        reads_data = qualified in vocabulary.names("sync.scalar_reads", "builtins") and any(a.kind == Kind.TENSOR for a in args)
        return Value(Kind.HOST, data=True) if reads_data or any(a.data for a in args) else HOST
    if qualified in ("min", "max", "sum", "abs"):
        return _combine([evaluate(a, scope) for a in positional(call)] or [UNKNOWN])
    if qualified.startswith("random."):
        return Value(Kind.HOST, random=True)
    if qualified.startswith("math."):  # math.exp(self.log_alpha): a Python number
        return Value(Kind.HOST, data=any(evaluate(a, scope).data for a in positional(call)))
    if qualified.startswith("numpy.random."):
        return Value(Kind.NUMPY, random=True)
    if qualified.startswith("numpy."):
        return Value(Kind.NUMPY)
    if qualified in vocabulary.names("factories.creation"):
        made = _factory(call, qualified, scope)
        dtype = keyword(call, "dtype")
        # `torch.zeros(bs, dtype=torch.bool)`: a mask, which indexing counts on the host.
        return replace(made, tag=MASK) if made.is_tensor and dtype is not None and scope.qualname(dtype) == "torch.bool" else made
    if qualified in vocabulary.names("values.tensor_classes"):
        return TENSOR  # nn.Parameter(torch.zeros(n)): a tensor, whatever its capitalised name says
    if qualified.startswith("torch."):
        last = qualified.rsplit(".", 1)[-1]
        if last.startswith(tuple(vocabulary.names("values.host_prefixes"))) or qualified in vocabulary.names("values.host_results"):
            return HOST  # predicates, getters, settings: torch.is_grad_enabled(), torch.are_deterministic_algorithms_enabled()
        if any(part.startswith("_") for part in qualified.split(".")[1:]):
            return UNKNOWN  # private helpers are no tensor ops we know
        if last in vocabulary.names("values.mask_ops"):
            return Value(Kind.TENSOR, tag=MASK)
        if _sized_by_data(last, call, scope, method=False):
            return Value(Kind.TENSOR, data=True)
        if last[:1].isupper():
            return Value(Kind.OBJECT, tag="module" if qualified.startswith("torch.nn.") else "", qualname=qualified)
        if qualified.startswith(("torch.cuda.", "torch.distributed.", "torch.backends.", "torch.utils.")):
            return UNKNOWN
        return TENSOR
    return UNKNOWN


def _getattr(call: cst.Call, scope: "Scope") -> Value:
    """`getattr(obj, name)`: the member of that name, or where the name is built
    (`getattr(self, f"_forward_{mode}")`) every method whose name fits it."""
    args = positional(call)
    base = evaluate(args[0], scope)
    name = string_value(args[1])
    if name is None:
        name_value = evaluate(args[1], scope)
        name = name_value.const if isinstance(name_value.const, str) else None
    module = _project_module(args[0], scope) if name is None else None
    if module is not None and module.classes:
        # `getattr(sys.modules[__name__], config["_class_name"])`: a class of that module, by
        # a name only the configuration knows (a scheduler, a model architecture).
        return Value(Kind.OBJECT, targets=tuple(module.classes.values()), is_class=True)
    if name is not None:
        found = _attribute_of(base, name, scope)
    else:
        pattern = name_pattern(args[1])
        classes = [t for t in base.targets if isinstance(t, ClassInfo)] if base.kind == Kind.OBJECT and not base.qualname else []
        names: set[str] = set()
        for cls in classes if pattern else ():
            names |= scope.project.cached(("spelled-methods", id(cls), pattern.pattern), lambda: {  # type: ignore[union-attr]
                m for klass in scope.project.mro(cls) for m in klass.methods if pattern.fullmatch(m)  # type: ignore[union-attr]
            }, set())
        found = UNKNOWN
        for method in sorted(names):
            current = _attribute_of(base, method, scope)
            found = current if found is UNKNOWN else join(found, current)
    if len(args) > 2:
        # An attribute that may be missing: often set from outside the class, where its value
        # is not known (`getattr(linear, "_use_cutlass", False)` after a model sets it), so
        # only the objects it may hold are kept, never a constant that would prune a branch.
        return join(found, evaluate(args[2], scope)) if found.targets else UNKNOWN
    return found


def _project_module(expr: cst.BaseExpression, scope: "Scope") -> Optional[ModuleInfo]:
    """The project module `expr` names: `sys.modules[__name__]` (its own) or an imported one."""
    if isinstance(expr, cst.Subscript) and scope.qualname(expr.value) == "sys.modules" and len(expr.slice) == 1:
        index = expr.slice[0].slice
        if isinstance(index, cst.Index) and isinstance(index.value, cst.Name) and index.value.value == "__name__":
            return scope.module
        return None
    qualified = scope.qualname(expr)
    return scope.project.module(qualified, scope.module) if qualified else None


def _attribute_of(base: Value, attr: str, scope: "Scope") -> Value:
    if base.kind == Kind.OBJECT:
        value = scope.member(base, attr)
        return replace(value, on_instance=True) if not base.is_class and _methods_only(value) else value
    return UNKNOWN


def _methods_only(value: Value) -> bool:
    return bool(value.targets) and all(isinstance(t, FunctionInfo) and t.is_method for t in value.targets)


def name_pattern(expr: cst.BaseExpression) -> Optional["re.Pattern[str]"]:
    """The names an f-string can spell (`f"_forward_{mode}"` -> `_forward_.*`), if it has text."""
    if not isinstance(expr, cst.FormattedString):
        return None
    parts = [re.escape(p.value) if isinstance(p, cst.FormattedStringText) else ".*" for p in expr.parts]
    if not any(isinstance(p, cst.FormattedStringText) for p in expr.parts):
        return None
    return re.compile("".join(parts))


def _factory(call: cst.Call, qualified: str, scope: "Scope") -> Value:
    random = qualified in vocabulary.names("factories.random")
    if qualified in vocabulary.names("factories.like"):
        args = positional(call)
        source = evaluate(args[0], scope) if args else UNKNOWN
        device = device_of(call, scope)
        if device == "device":
            return TENSOR
        if device == "cpu" or source.kind == Kind.CPU_TENSOR:
            return Value(Kind.CPU_TENSOR, random)
        return TENSOR
    if device_of(call, scope) == "device":
        return TENSOR
    return Value(Kind.CPU_TENSOR, random)


def _call_method(call: cst.Call, receiver: Value, name: str, scope: "Scope") -> Value:
    if receiver.kind == Kind.OBJECT:
        if name in vocabulary.names("values.module_self_methods") and (receiver.tag in ("module", "module_container") or receiver.targets):
            return receiver  # model.cuda(), model.to(device), model.eval() return the module itself
        if receiver.targets and any(isinstance(t, ClassInfo) for t in receiver.targets):
            member = scope.member(receiver, name)
            # self.proj(x): an attribute holding a module; calling it runs its forward, as for a name.
            if member.kind == Kind.OBJECT and not member.is_class and not any(isinstance(t, FunctionInfo) for t in member.targets):
                called = _called_object(member, call, scope)
                if called is not None:
                    return called
            methods = [t for t in member.targets if isinstance(t, FunctionInfo)]
            if len(methods) == 1 and _returned_parameters(methods[0]) == {methods[0].params[0].name.value if methods[0].params else ""}:
                return receiver  # `def to_device(self, d): ...; return self`
            if len(methods) == 1:  # `norm = self._grad_norm()`, `index = self.index_for_timestep(t)`
                return returned_value(methods[0], scope)
            if methods:  # `scheduler_cls.from_config(c)` over every class the name may pick
                returned = [returned_value(method, scope) for method in methods]
                if UNKNOWN not in returned:
                    return functools.reduce(join, returned)
        if receiver.tag == "numpy_rng":
            return Value(Kind.NUMPY, random=True)
        if receiver.tag == "python_rng":
            return Value(Kind.HOST, random=True)
        return UNKNOWN
    if receiver.kind == Kind.NUMPY:
        return Value(Kind.NUMPY, receiver.random)
    if receiver.kind == Kind.HOST:
        return HOST if name not in ("cuda", "to") else UNKNOWN
    tensorish = receiver.is_tensor or (receiver.kind == Kind.UNKNOWN and name in vocabulary.names("values.tensor_methods"))
    if name in vocabulary.names("values.host_methods") and receiver.is_tensor:
        return Value(Kind.HOST, data=True) if receiver.data else HOST
    if name in vocabulary.names("values.number_reads") and receiver.kind == Kind.CPU_TENSOR:
        return HOST  # read from host memory: no device data, nothing waits for the GPU
    if name in vocabulary.names("values.number_reads") and (receiver.is_tensor or receiver.kind == Kind.UNKNOWN):
        return Value(Kind.HOST, data=True)
    if not tensorish and name not in ("cpu", "numpy", "pin_memory"):
        return UNKNOWN
    if name in ("cpu", "pin_memory"):
        return Value(Kind.CPU_TENSOR, receiver.random)
    if name == "numpy":
        return Value(Kind.NUMPY, receiver.random)
    if name == "cuda":
        return TENSOR
    if name == "to":
        target = to_device(call, scope)
        if target == "cpu":
            return Value(Kind.CPU_TENSOR, receiver.random)
        if target == "device":
            return TENSOR
    kind = Kind.CPU_TENSOR if receiver.kind == Kind.CPU_TENSOR else Kind.TENSOR
    if name in vocabulary.names("values.mask_ops"):
        return Value(kind, receiver.random, MASK)
    data = _sized_by_data(name, call, scope, method=True) or (receiver.data and name not in vocabulary.names("values.reductions"))
    return Value(kind, receiver.random, data=data)


def _sized_by_data(name: str, call: cst.Call, scope: "Scope", method: bool) -> bool:
    """Whether an op of data_size_ops takes its output size from the data in this call:
    `torch.where(cond)` does, `torch.where(cond, a, b)` and `x.where(cond, y)` select
    elementwise; `repeat_interleave` does only with tensor repeats and no `output_size`
    (Transformer Engine repeats its KV heads by a host int)."""
    if name not in vocabulary.names("values.data_sized"):
        return False
    args = positional(call)
    if name == "where":
        return not method and len(args) <= 1
    if name == "repeat_interleave":
        if keyword(call, "output_size") is not None:
            return False
        repeats = keyword(call, "repeats") or (args[0] if method and args else args[1] if len(args) > 1 else None)
        return repeats is None or not evaluate(repeats, scope).is_host
    return True


def to_device(call: cst.Call, scope: "Scope") -> Optional[str]:
    """For `.to(...)`: 'cpu', 'device' (some other device), or None (a dtype-only cast)."""
    device = keyword(call, "device")
    args = positional(call)
    candidates = [device] if device is not None else args[:1]
    for arg in candidates:
        text = string_value(arg)
        if text is not None:
            return "cpu" if text.split(":")[0] == "cpu" else "device"
        if isinstance(arg, cst.Call) and scope.qualname(arg.func) == "torch.device":
            inner = positional(arg)
            text = string_value(inner[0]) if inner else None
            return "cpu" if text and text.split(":")[0] == "cpu" else "device"
        value = evaluate(arg, scope)
        if value.is_tensor:  # .to(other): follows the other tensor's device
            return "device" if value.kind == Kind.TENSOR else "cpu"
        if device is not None:
            return "device"
        # A bare name or attribute may be a device or a dtype: only names that say
        # "device" count, so `x.to(dtype)` on a host tensor is not a host-to-device copy.
        leaf = arg.attr.value if isinstance(arg, cst.Attribute) else arg.value if isinstance(arg, cst.Name) else ""
        if "device" in leaf.lower() or leaf in ("dev", "rank", "local_rank"):
            return "device"
    return None


def _contained_modules(call: cst.Call, scope: "Scope") -> tuple:
    found: list = []
    for arg in (a.value for a in call.args if a.keyword is None):
        elements = [arg]
        if isinstance(arg, (cst.List, cst.Tuple)):
            elements = [e.value for e in arg.elements]
        elif isinstance(arg, (cst.ListComp, cst.GeneratorExp)):
            elements = [arg.elt]
        for element in elements:
            value = evaluate(element, scope)
            if value.kind == Kind.OBJECT and not value.is_class:
                found.extend(value.targets)
                found.extend(t for item in value.items for t in item.targets)  # `nn.ModuleList(modules)` of `*modules`
    return tuple(dict.fromkeys(t for t in found if isinstance(t, ClassInfo)))
