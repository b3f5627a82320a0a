"""Recognising capture sites: the forms that make code run under CUDA-graph capture.

Everything here answers "is this node a capture form, and what does it capture?"
from the vocabulary; the walker decides when to ask.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Optional, Union

import libcst as cst

from cglint import vocabulary
from cglint.engine.definitions import FunctionInfo, ModuleInfo
from cglint.engine.syntax import call_method, code_of, keyword, positional, string_value
from cglint.engine.values import Value, evaluate

if TYPE_CHECKING:
    from cglint.engine.scope import Scope


class CaptureKind(enum.Enum):
    """What makes code run captured. The values are the region kinds of the JSON output,
    a stable contract: a new form gets a new member, existing values never change. The values
    are the vocabulary's `capture.kinds`, which the verifier reports its captures under too."""

    GRAPH_BLOCK = vocabulary.capture_kind("graph_block")  # `with torch.cuda.graph(g):` captures its body
    CAPTURE_SPAN = vocabulary.capture_kind("capture_span")  # `g.capture_begin()` ... `g.capture_end()`
    GRAPHED_CALLABLES = vocabulary.capture_kind("graphed_callables")  # captures the callables it is given
    COMPILED = vocabulary.capture_kind("compiled")  # a compiled function with CUDA graphs on (its own semantics: docs/design.md, Compiled regions)
    HELPER = vocabulary.capture_kind("helper")  # a project function that captures, or one named in `capture-functions`
    CONFIGURED = vocabulary.capture_kind("configured")  # a function named in `captured`


@dataclass(frozen=True)
class TraceStep:
    module: ModuleInfo
    node: cst.CSTNode
    text: str


@dataclass(eq=False)
class Capture:
    """One capture site and what it captures."""

    kind: CaptureKind
    site: TraceStep
    # A region inside a function body (a `with` block or a capture_begin span) ...
    function: Optional[FunctionInfo] = None
    marker: Optional[cst.CSTNode] = None  # the With node, or the capture_begin Call
    # ... or whole callables that run captured.
    targets: tuple = ()
    # make_graphed_callables and torch.compile call their targets with tensors.
    tensor_args: bool = False
    # Names and `self.` attributes the region reads or writes (for replay rules).
    names: set = field(default_factory=set)
    attrs: set = field(default_factory=set)
    # The function the site is written in (for captured callables too; None when configured).
    host: Optional[FunctionInfo] = None
    # Local names the region binds, and `self.` attributes it assigns (static outputs).
    bound: set = field(default_factory=set)
    outputs: set = field(default_factory=set)
    # Calls made anywhere in the region, callees included (see call_keys).
    calls: set = field(default_factory=set)
    # The helper's qualified name, for CaptureKind.HELPER.
    helper: str = ""

    @property
    def region_kind(self) -> str:
        """The region's kind as reported in JSON: "torch.cuda.graph", "capture helper pkg.capture"..."""
        return f"{self.kind.value} {self.helper}" if self.helper else self.kind.value


# `a @ b` is remembered as a call of torch.matmul.
MATMUL_KEY = "torch.matmul"


def call_keys(call: cst.Call, scope: "Scope") -> set[str]:
    """How a call is remembered: its qualified name, `.method`, `tag.method` for tagged
    objects, and `tag.__call__` for a call of a tagged object (`self.proj(x)`, a module)."""
    qualified = scope.qualname(call.func)
    if qualified is not None:
        return {qualified}
    callee = evaluate(call.func, scope).tag
    keys = {f"{callee}.__call__"} if callee else set()
    method = call_method(call)
    if method is None:
        return keys
    keys.add(f".{method[1]}")
    tag = evaluate(method[0], scope).tag
    if tag:
        keys.add(f"{tag}.{method[1]}")
    return keys


def is_graph_context(call: cst.BaseExpression, scope: "Scope") -> bool:
    return isinstance(call, cst.Call) and scope.qualname(call.func) in vocabulary.names("capture.graph_context")


@cache
def _graph_methods() -> dict[str, str]:
    return {name: role for role in ("begin", "end", "replay") for name in vocabulary.names("capture.graph_methods", role)}


def capture_method(call: cst.Call) -> Optional[str]:
    """'begin', 'end' or 'replay' for `g.capture_begin()` and friends."""
    method = call_method(call)
    if method is None:
        return None
    return _graph_methods().get(method[1])


def captured_callables(call: cst.Call, scope: "Scope") -> Optional[tuple[CaptureKind, list[cst.BaseExpression]]]:
    """(kind, callable expressions) when `call` captures the callables it is given."""
    qualified = scope.qualname(call.func)
    if qualified in vocabulary.names("capture.graphed_callables"):
        args = positional(call)
        first = args[0] if args else keyword(call, "callables")
        if first is None:
            return None
        items = [e.value for e in first.elements] if isinstance(first, (cst.Tuple, cst.List)) else [first]
        return CaptureKind.GRAPHED_CALLABLES, items
    if qualified in vocabulary.names("capture.compile") and compiles_cudagraphs(call, scope):
        args = positional(call)
        if args:
            return CaptureKind.COMPILED, [args[0]]
    return None


def compiles_cudagraphs(call: cst.Call, scope: Optional["Scope"] = None) -> bool:
    """torch.compile(mode="reduce-overhead"), backend="cudagraphs", or options that turn cudagraphs on.
    A mode or backend may be a module constant or a parameter with a literal default
    (`def build(mode="reduce-overhead"): torch.compile(m, mode=mode)`)."""
    if _string(keyword(call, "mode"), scope) in vocabulary.names("capture.cudagraph_modes"):
        return True
    backend = keyword(call, "backend")
    if backend is None and isinstance(call.func, cst.Attribute) and call.func.attr.value == "optimize" and call.args:
        backend = call.args[0].value  # torch._dynamo.optimize("cudagraphs")
    if _string(backend, scope) in vocabulary.names("capture.cudagraph_backends"):
        return True
    options = keyword(call, "options")
    if isinstance(options, cst.Dict):
        for element in options.elements:
            if isinstance(element, cst.DictElement) and string_value(element.key) in vocabulary.names("capture.cudagraph_options"):
                if isinstance(element.value, cst.Name) and element.value.value == "True":
                    return True
    return False


def _string(expr: Optional[cst.BaseExpression], scope: Optional["Scope"]) -> Optional[str]:
    """A string literal, a name bound to one (a module constant), or a parameter's literal default."""
    found = string_value(expr)
    if found is not None or not isinstance(expr, cst.Name) or scope is None:
        return found
    const = evaluate(expr, scope).const
    if isinstance(const, str):
        return const
    for param in scope.function.params:
        if param.name.value == expr.value and param.default is not None:
            return string_value(param.default)
    return None


def fullgraph(capture: Capture) -> bool:
    """Whether a compiled region was compiled with `fullgraph=True` (a graph break is then a compile error)."""
    node = capture.site.node
    value = keyword(node, "fullgraph") if isinstance(node, cst.Call) else None
    return isinstance(value, cst.Name) and value.value == "True"


def compile_decorator(function: FunctionInfo, scope: "Scope") -> Optional[cst.Decorator]:
    for decorator in function.decorators:
        expr = decorator.decorator
        if isinstance(expr, cst.Call) and scope.qualname(expr.func) in vocabulary.names("capture.compile"):
            if compiles_cudagraphs(expr, scope):
                return decorator
    return None


def is_contextmanager(function: FunctionInfo, scope: "Scope") -> bool:
    return any(scope.qualname(d.decorator) in vocabulary.names("capture.contextmanager") for d in function.decorators)


def site(module: ModuleInfo, node: cst.CSTNode, text: Optional[str] = None) -> TraceStep:
    return TraceStep(module, node, text or code_of(node))


def with_label(item: Union[cst.WithItem, cst.CSTNode]) -> str:
    return "with " + code_of(item.item if isinstance(item, cst.WithItem) else item)


def compiled_site(value: Value, scope: "Scope") -> Optional[cst.CSTNode]:
    """The site of a callable compiled with CUDA graphs that `value` is: the `torch.compile(...)`
    call it came from, or the compile decorator of the function it names."""
    from cglint.engine.scope import Scope

    origin = value.origin
    if value.tag == "compiled" and origin is not None:
        return origin.call if compiles_cudagraphs(origin.call, Scope(scope.project, origin.function)) else None
    for target in value.targets:
        if isinstance(target, FunctionInfo):
            decorator = compile_decorator(target, Scope(scope.project, target))
            if decorator is not None:
                return decorator.decorator
    return None
