"""What a rule may ask the engine about the node it is looking at."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional, Union

import libcst as cst

from cglint.engine import captures
from cglint.engine.captures import Capture, CaptureKind, capture_method
from cglint.engine.definitions import ClassInfo, FunctionInfo
from cglint.engine.replay_writes import loop_container
from cglint.engine.syntax import call_method, code_of, descendants, nearest_assignment
from cglint.engine.values import Kind, Value, evaluate, host_reads, output_root, to_device, truth

if TYPE_CHECKING:
    from cglint.engine.walk import Walker


class Context:
    def __init__(self, walker: "Walker"):
        self._walker = walker

    # --- values ------------------------------------------------------------
    def value(self, expr: cst.BaseExpression) -> Value:
        return evaluate(expr, self._walker.scope)

    def truth(self, expr: cst.BaseExpression) -> Optional[bool]:
        """Whether a condition is known to hold here (values.truth), None where unknown."""
        return truth(expr, self._walker.scope)

    def positional_values(self, call: cst.Call) -> list[Value]:
        """The values a call passes by position, `*args` spread into the items it is known to
        hold (`print(*args)` in a mixin's `print(self, *args)` called with a tensor)."""
        found: list[Value] = []
        for arg in call.args:
            if arg.keyword is None and arg.star != "**":
                value = self.value(arg.value)
                found.extend(value.items if arg.star == "*" else (value,))
        return found

    def is_tensor(self, expr: cst.BaseExpression) -> bool:
        """Known to be a tensor (on any device)."""
        return self.value(expr).is_tensor

    def is_device_tensor(self, expr: cst.BaseExpression) -> bool:
        return self.value(expr).kind == Kind.TENSOR

    def is_host_tensor(self, expr: cst.BaseExpression) -> bool:
        return self.value(expr).kind == Kind.CPU_TENSOR

    def maybe_tensor(self, expr: cst.BaseExpression) -> bool:
        """A tensor or something the checker cannot tell (but not a known host value)."""
        return self.value(expr).kind in (Kind.TENSOR, Kind.CPU_TENSOR, Kind.UNKNOWN)

    def host_reads(self, expr: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
        """Names and attributes a host expression reads (`n` and `self.cap` in `min(n + 1, self.cap)`)."""
        return host_reads(expr, self._walker.scope)

    def qualname(self, expr: cst.BaseExpression) -> Optional[str]:
        """`torch.cuda.synchronize` for `th.cuda.synchronize` after `import torch as th`."""
        return self._walker.scope.qualname(expr)

    def call_name(self, call: cst.Call) -> Optional[str]:
        return self.qualname(call.func)

    def method(self, call: cst.Call) -> Optional[tuple[cst.BaseExpression, str]]:
        """(receiver, name) when `call` is a method call on something that is not a module."""
        found = call_method(call)
        if found is None or self.qualname(call.func) is not None:
            return None
        return found

    def to_device(self, call: cst.Call) -> Optional[str]:
        """For `.to(...)`: 'cpu', 'device' or None (dtype only)."""
        return to_device(call, self._walker.scope)

    # --- state between replays ----------------------------------------------
    def changing_state(self, expr: cst.BaseExpression, any_write: bool = False) -> Optional[str]:
        """Describe `expr` if it reads host state that the code changes between replays: written
        by code seen running between replays, a counter stepped outside setup, or set by a
        method that is not configuration API (a mode switch; with `any_write`, any value, for
        a number baked into kernels)."""
        return self._walker.engine.state.changing(expr, self._walker.scope, any_write, statement=self._walker.statement)

    def returned_state(self, call: cst.Call) -> Optional[str]:
        """How the state a project function's result comes from changes between replays (StateFacts.returned)."""
        return self._walker.engine.state.returned(call, self._walker.scope, any_write=True)

    def derived_state(self, name: cst.Name) -> Optional[str]:
        """Describe the local `name` if it was computed from host state that changes between
        replays (`lr = self.current_lr()`, which reads a step counter), whatever `name`'s kind."""
        return self._walker.engine.state.derived(name, self._walker.scope, any_write=True, statement=self._walker.statement)

    @property
    def captured_names(self) -> set[str]:
        """Locals a capture in this function read or wrote (for replay rules)."""
        return self._walker.engine.captured_names(self._walker.function)

    def captured_earlier(self, name: str) -> bool:
        """Whether a capture of this function that read or wrote the local `name` can have run
        before the current statement; a capture that only comes after it takes the new value."""
        engine, function, statement = self._walker.engine, self._walker.function, self._walker.statement
        return any(
            name in c.names and (statement is None or c.marker is None or not engine.runs_before(function, statement, c.marker))
            for c in engine.captures_of(function)
        )

    def captured_attribute(self, target: cst.BaseExpression, anywhere: bool = False) -> Optional[str]:
        """`obj.attr` if it names an attribute that a capture of obj's class read or wrote, or
        (`anywhere`) that captured code read on `self` of an object of that class."""
        if not isinstance(target, cst.Attribute):
            return None
        engine = self._walker.engine
        base = self.value(target.value)
        for cls in base.targets:
            if isinstance(cls, ClassInfo):
                known = engine.captured_attrs(cls) | engine.fed_attrs(cls) | (engine.region_attrs(cls) if anywhere else set())
                if target.attr.value in known and target.attr.value not in engine.selecting_attrs(cls):
                    return target.attr.value
        return None

    @property
    def first_call_only(self) -> bool:
        """Inside `if self.static_x is None:`-style code that runs on a first call only."""
        return self._walker.lazily

    def replay_follows(self) -> bool:
        """Whether a replay() can run after the current statement in this function."""
        return self._walker.engine.replay_follows(self._walker.function, self._walker.statement)

    # --- captures, sites and neighbours --------------------------------------
    @property
    def function(self) -> FunctionInfo:
        return self._walker.function

    @property
    def statement(self) -> Optional[cst.CSTNode]:
        """The statement being walked (a SimpleStatementLine or a compound statement)."""
        return self._walker.statement

    @property
    def capture(self) -> Optional[Capture]:
        """The capture at hand: the site (capture rules) or the region being walked (region rules)."""
        if self._walker.site is not None:
            return self._walker.site
        return self._walker.job.capture if self._walker.job is not None else None

    @property
    def in_capture_block(self) -> bool:
        """Region code written in the capture's own block (the `with torch.cuda.graph(g):` body),
        not reached through a call: code there is written knowing it is captured."""
        job = self._walker.job
        return job is not None and job.marker is not None

    def before(self, node: Optional[cst.CSTNode] = None, function: Optional[FunctionInfo] = None) -> list:
        """Statements that run before `node` (default: the current statement), nearest first,
        then those before the enclosing statements. Inside the capture's own block, only
        statements of the region."""
        return list(self._blocks(function).before(self._node(node), self._region_stop(function)))

    def after(self, node: Optional[cst.CSTNode] = None, function: Optional[FunctionInfo] = None) -> list:
        """Statements that run after `node`, nearest first, then outward (within the region, as `before`)."""
        return list(self._blocks(function).after(self._node(node), self._region_stop(function)))

    def enclosing(self, node: Optional[cst.CSTNode] = None, function: Optional[FunctionInfo] = None) -> list:
        """Compound statements (with, for, while, if, try) around `node`, innermost first."""
        return self._blocks(function).enclosing(self._node(node))

    def module_mentions(self, *fragments: str) -> bool:
        """Whether the current module's source holds every fragment: a text test for questions
        about the rest of the module (`stack.pop(` beside `stack.append(`) that parses nothing."""
        text = self._walker.function.module.file.text
        return all(fragment in text for fragment in fragments)

    def callers(self, function: Optional[FunctionInfo] = None) -> list:
        """(caller function, call) pairs of the project functions known to call `function`."""
        return self._walker.engine.callers(function or self._walker.function)

    def site_before(self, capture: Optional[Capture] = None) -> list:
        """Statements before a capture's site in the function that holds it, nearest first."""
        capture = capture or self.capture
        if capture is None or capture.host is None:
            return []
        return list(self._walker.engine.blocks(capture.host).before(capture.site.node))

    def region_statements(self, capture: Optional[Capture] = None) -> list:
        """The statements of a capture's region in its own function: the `with` body, or what
        follows capture_begin() up to the statement that ends the capture."""
        capture = capture or self.capture
        if capture is None or capture.marker is None or capture.function is None:
            return []
        if isinstance(capture.marker, cst.With):
            return list(capture.marker.body.body)
        found = []
        for stmt in self._walker.engine.blocks(capture.function).after(capture.marker):
            found.append(stmt)
            if any(isinstance(n, cst.Call) and capture_method(n) == "end" for n in descendants(stmt)):
                break
        return found

    @property
    def captured_outputs(self) -> set[str]:
        """Local names the captures of this function bind inside their region (static outputs)."""
        return set().union(*(c.bound for c in self._walker.engine.captures_of(self._walker.function)))

    def capture_calling(self, *keys: str) -> Optional[Capture]:
        """The first capture that matters here (this function's own, or every capture when this
        function only replays) making one of these calls (see captures.call_keys)."""
        return next((c for c in self._replayed_captures() if c.calls.intersection(keys)), None)

    def capture_using(self, target: Union[str, cst.BaseExpression]) -> Optional[Capture]:
        """The capture of this function that read or wrote the local `target`, or a capture of
        obj's class that read or wrote `obj.attr`: what a finding between replays is about."""
        engine = self._walker.engine
        if isinstance(target, cst.Name):
            target = target.value
        if isinstance(target, str):
            return next((c for c in engine.captures_of(self._walker.function) if target in c.names), None)
        if isinstance(target, cst.Attribute):
            for cls in self.value(target.value).targets:
                if isinstance(cls, ClassInfo):
                    found = next((c for c in engine.captures_of_class(cls) if target.attr.value in c.attrs), None)
                    if found is not None:
                        return found
            # `model.weight.data = w` after a capture that called `model`: the capture used the root object.
            root = target.value
            while isinstance(root, cst.Attribute):
                root = root.value
            if isinstance(root, cst.Name):
                return self.capture_using(root)
        return None

    def compiled_capture(self, call: cst.Call) -> Optional[Capture]:
        """The compiled region a call runs, when it calls a function or module compiled with
        CUDA graphs (`step = torch.compile(model, mode="reduce-overhead")`; `step(x)`)."""
        site = captures.compiled_site(self.value(call.func), self._walker.scope)
        return self._walker.engine.capture_at(site) if site is not None else None

    @property
    def fullgraph(self) -> bool:
        """Whether the compiled region at hand was compiled with `fullgraph=True`."""
        capture = self.capture
        return capture is not None and capture.kind is CaptureKind.COMPILED and captures.fullgraph(capture)

    def runner_output(self, expr: cst.BaseExpression, within: Optional[cst.CSTNode]) -> Optional[Capture]:
        """The capture whose static output `expr` shares memory with, where it comes from a
        graph runner (a class whose capture binds `self.static_y` and one of whose methods
        replays it): `runner.static_y`, `runner.run(x)` returning it, `runner(x)`. Where the
        runner's class cannot be told (an untyped parameter), a replaying method of such a
        class must be called on the same object in `within` (the replay loop)."""
        engine, root = self._walker.engine, output_root(expr)
        if isinstance(root, cst.Attribute):
            base, attr = root.value, root.attr.value
            classes = self._instance_classes(base)
            if not classes and self.value(base).kind is Kind.UNKNOWN and within is not None:
                methods = [m for ms in engine.runner_methods().values() for m in ms if attr in engine.graph_outputs(m.cls)]
                if _calls_method_on(within, base, {m.name for m in methods}):
                    classes = [m.cls for m in methods if m.cls is not None]
            return next((c for cls in classes if (c := engine.output_capture(cls, attr)) is not None), None)
        if isinstance(root, cst.Call):
            methods = [function for function, _ in self._walker.callees(root)]
            if not methods and isinstance(root.func, cst.Attribute) and self.value(root.func.value).kind is Kind.UNKNOWN:
                methods = engine.runner_methods().get(root.func.attr.value, [])
            for method in methods:
                if method.cls is not None and (output := engine.returned_output(method)) is not None:
                    return engine.output_capture(method.cls, output)
        return None

    def call_arguments(self, call: cst.Call) -> Iterator[tuple[FunctionInfo, str, cst.BaseExpression]]:
        """Each project function the call runs, with the parameter each argument binds."""
        for function, bound in self._walker.callees(call):
            for name, expr in function.arguments(call, bound):
                yield function, name, expr

    def runner_methods(self) -> dict[str, list[FunctionInfo]]:
        """Replaying methods of graph runners, by name (Engine.runner_methods)."""
        return self._walker.engine.runner_methods()

    def _instance_classes(self, expr: cst.BaseExpression) -> list[ClassInfo]:
        value = self.value(expr)
        return [] if value.is_class else [t for t in value.targets if isinstance(t, ClassInfo)]

    def _replayed_captures(self) -> list:
        engine = self._walker.engine
        return engine.captures_of(self._walker.function) or engine.all_captures()

    def is_local(self, name: str) -> bool:
        """Whether `name` is bound in the current function so far (parameters included)."""
        return name in self._walker.scope.env and not isinstance(self._walker.function.node, cst.Module)

    def outlives_call(self, container: cst.BaseExpression) -> bool:
        """Whether a container outlives the current call: kept on the object (`self.scores`) or
        the module, so the next call of this function finds what this one put there."""
        root = container
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if not isinstance(root, cst.Name):
            return False
        function = self._walker.function
        if root is not container and function.is_method and function.params and root.value == function.params[0].name.value:
            return True  # `self.<attr>`
        return not self.is_local(root.value) and self.qualname(root) is None  # a module-level list

    def local_source(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        """What the local `name` was last assigned before the current statement, if anything."""
        found = nearest_assignment(name.value, self.before())
        return found[1] if found is not None else None

    def iterated(self, name: cst.Name) -> Optional[cst.BaseExpression]:
        """The container whose entries the loop variable `name` holds (`for group in
        self.param_groups`), if every binding of it is such a loop."""
        return loop_container(self._walker.scope, name.value)

    def declared_global(self, name: str) -> bool:
        """Whether the current function declares `global name` (so writing it changes module state)."""
        return name in self._walker.function.declared_globals

    def origin_argument(self, value: Value, index: int, name: str) -> Optional[tuple[cst.BaseExpression, Value]]:
        """An argument of the constructor call an object came from, with its value (resolved
        with the names of the module it is written in; locals there are unknown)."""
        origin = value.origin
        if origin is None:
            return None
        expr = next((a.value for a in origin.call.args if a.keyword is not None and a.keyword.value == name), None)
        if expr is None:
            args = [a.value for a in origin.call.args if a.keyword is None and not a.star]
            expr = args[index] if 0 <= index < len(args) else None
        if expr is None:
            return None
        scope = self._walker.scope if origin.function is self._walker.function else self._walker.scope.assigned(origin.function)
        return expr, evaluate(expr, scope)

    def _node(self, node: Optional[cst.CSTNode]) -> cst.CSTNode:
        return node if node is not None else self._walker.statement  # type: ignore[return-value]

    def _blocks(self, function: Optional[FunctionInfo]):
        return self._walker.engine.blocks(function or self._walker.function)

    def _region_stop(self, function: Optional[FunctionInfo]) -> Optional[cst.CSTNode]:
        job = self._walker.job
        same = function is None or function is self._walker.function
        if same and job is not None and job.marker is not None and self._walker.in_region:
            return job.marker
        return None


def _calls_method_on(within: cst.CSTNode, receiver: cst.BaseExpression, names: set[str]) -> bool:
    """Whether `within` calls `<receiver>.<name>(...)` for one of `names`."""
    text = code_of(receiver)
    return any(
        (method := call_method(n)) is not None and method[1] in names and code_of(method[0]) == text
        for n in descendants(within) if isinstance(n, cst.Call)
    )
