"""One ordered walk over one function body.

The walk keeps local values up to date statement by statement (so `x = x.cpu()`
changes what `x` is from there on), knows whether it is inside a captured region,
and at each node does what its mode asks:

- DISCOVER finds capture sites and what regions read and write;
- REGION hands nodes of one capture's region to the region rules and follows calls;
- REPLAY hands nodes that run between replays to the replay rules.

Every rule is served by this single walk; no rule walks the tree itself.
"""
from __future__ import annotations

import contextlib
import enum
import inspect
from dataclasses import replace
from typing import TYPE_CHECKING, Iterable, Optional, Union

import libcst as cst

from cglint.engine import captures, indirect
from cglint import vocabulary
from cglint.engine.captures import CaptureKind
from cglint.engine.context import Context
from cglint.engine.definitions import ClassInfo, FunctionInfo, dataclass_fields, self_attr
from cglint.engine.scope import CELL, Scope, config_field, config_parameter, imported
from cglint.engine.warmup_only import ends_with, fills_searched_cache, first_call_only, initializes_once, returns_once_filled, suite_body
from cglint.engine.syntax import (SCOPES, assigned_names, call_method, callee_name, children, code_of, descendants, named_attribute_write,
                                  positional)
from cglint.engine.unfollowed import why_unfollowed
from cglint.engine.arguments import bind
from cglint.engine.values import HOST, UNKNOWN, Kind, Value, evaluate, loop_element, narrowed, truth

if TYPE_CHECKING:
    from cglint.engine.checker import Engine, Job


# The tag of a function value given as an argument that replays a graph when called.
REPLAYS = "replays"
# Builtins that take an object without calling it (`getattr(self, name)`, `isinstance(f, cls)`);
# None: a callee that names no symbol. `map`, `filter`, `sorted(key=...)` do call theirs.
_NOT_CALLING = frozenset({None, "getattr", "setattr", "hasattr", "isinstance", "issubclass", "id", "type", "len", "repr", "str", "callable", "vars", "dir", "print", "hash"})


def _names_forward(call: cst.Call) -> bool:
    """`self.forward(x)` calls forward itself: module hooks run only through `__call__`."""
    return isinstance(call.func, cst.Attribute) and call.func.attr.value == "forward"


class Mode(enum.Enum):
    DISCOVER = "discover"
    REGION = "region"
    REPLAY = "replay"


# What `dispatch` hands to the rules, by exact node type; rules' `nodes` are checked against
# it when they load. Keep it in step with the `self.dispatch` calls below: the statements
# `stmt` and `small` dispatch (Return, Raise, Try, Match, Import, Global... are walked for
# their expressions only), and every node inside an expression `expr` walks.
DISPATCHED_STATEMENTS = frozenset({cst.If, cst.For, cst.While, cst.With, cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Assert, cst.Del})
_EXPRESSION_PARTS = (
    cst.BaseExpression, cst.Arg, cst.BaseElement, cst.BaseDictElement, cst.SubscriptElement, cst.BaseSlice,
    cst.CompFor, cst.CompIf, cst.ComparisonTarget, cst.BaseFormattedStringContent, cst.Asynchronous, cst.From,
    cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp,
)
# Through each class's MRO, not issubclass: on libcst's ABCs the first issubclass of every
# class against every base took 28 ms of each run's start-up.
DISPATCHED = DISPATCHED_STATEMENTS | frozenset(
    kind for kind in vars(cst).values()
    if isinstance(kind, type) and not inspect.isabstract(kind) and not set(kind.__mro__).isdisjoint(_EXPRESSION_PARTS)
)


class Walker:
    def __init__(self, engine: "Engine", function: FunctionInfo, env: dict[str, Value], mode: Mode, job: Optional["Job"] = None):
        self.engine = engine
        self.function = function
        self.initial_env = dict(env)
        self.scope = Scope(engine.project, function, env)
        if mode is Mode.REGION and job is not None and job.capture.kind is CaptureKind.COMPILED:
            self.scope.compiling = True  # Dynamo traces it: `if not is_compiling():` is not compiled
        self.mode = mode
        self.job = job
        self.ctx = Context(self)
        # The capture whose region is being walked (DISCOVER) and whether we are inside it.
        self.capture: Optional[captures.Capture] = None
        self.in_region = mode is Mode.REGION and job is not None and job.marker is None
        self.after_capture = False
        self.branches: list[cst.If] = []  # the `if` bodies being walked, outermost first
        self._first_call: dict[int, bool] = {}
        self.statement: Optional[cst.CSTNode] = None
        self.site: Optional[captures.Capture] = None  # the capture site capture rules are looking at

    def run(self) -> None:
        if isinstance(self.function.node, cst.Lambda):
            self.expr(self.function.node.body)
        else:
            self.block(self.function.body)

    # --- statements --------------------------------------------------------
    def block(self, statements: Iterable[cst.CSTNode]) -> None:
        statements = list(statements)
        for index, stmt in enumerate(statements):
            self.stmt(stmt)
            if isinstance(stmt, cst.If) and stmt.orelse is None and isinstance(stmt.test, cst.UnaryOperation) \
                    and isinstance(stmt.test.operator, cst.Not) and ends_with(stmt.body, (cst.Raise, cst.Return)):
                self.scope.env.update(narrowed(stmt.test.expression, self.scope))  # `if not isinstance(x, C): raise`
            if self.exits_while_capturing(stmt):
                return  # `if capturing(): raise ...`: what follows never runs during capture
            if self.in_region and self.mode is Mode.REGION and returns_once_filled(stmt, statements[index + 1:], self.stateful, self.project_callees):
                return  # `if key in cache: return cache[key]`: the rest filled the cache at warmup

    @contextlib.contextmanager
    def narrowing(self, names: dict[str, Value]):
        """Inside `if isinstance(x, C):`, `x` is an instance of C; a name the body does not
        rebind gets its value back after it."""
        saved = {name: self.scope.env.get(name) for name in names}
        self.scope.env.update(names)
        try:
            yield
        finally:
            for name, value in names.items():
                if self.scope.env.get(name) is value:
                    if saved[name] is None:
                        self.scope.env.pop(name, None)
                    else:
                        self.scope.env[name] = saved[name]  # type: ignore[assignment]

    def exits_while_capturing(self, node: cst.CSTNode) -> bool:
        """`if torch.cuda.is_current_stream_capturing(): raise/return` (or any branch known to
        be taken) with no else, in a region: what follows never runs during capture."""
        if not isinstance(node, cst.If) or node.orelse is not None or self.dead_branch(node) != "orelse":
            return False
        return ends_with(node.body, (cst.Raise, cst.Return))

    def stmt(self, node: cst.CSTNode) -> None:
        self.statement = node
        if isinstance(node, cst.SimpleStatementLine):
            for small in node.body:
                self.small(small)
        elif isinstance(node, cst.BaseSmallStatement):  # of a one-line suite: `def f(x): return x.item()`
            self.small(node)
        elif isinstance(node, cst.If):
            self.dispatch(node)
            self.expr(node.test)
            dead = self.dead_branch(node)
            if dead != "body":
                self.branches.append(node)
                with self.narrowing(narrowed(node.test, self.scope)):
                    self.block(suite_body(node.body))
                self.branches.pop()
            if dead == "orelse":
                pass
            elif isinstance(node.orelse, cst.If):
                self.stmt(node.orelse)
            elif node.orelse is not None:
                self.block(suite_body(node.orelse.body))
        elif isinstance(node, cst.For):
            self.dispatch(node)
            self.expr(node.iter)
            if self.mode is Mode.DISCOVER and not self.in_region:
                self.note_loop_variable(node)
            self.bind(node.target, self.element_of(node.iter))
            self.block(suite_body(node.body))
            searched = self.in_region and self.mode is Mode.REGION and fills_searched_cache(node, self.stateful, self.project_callees)
            if node.orelse is not None and not searched:
                self.block(suite_body(node.orelse.body))
        elif isinstance(node, cst.While):
            self.dispatch(node)
            self.expr(node.test)
            self.block(suite_body(node.body))
            if node.orelse is not None:
                self.block(suite_body(node.orelse.body))
        elif isinstance(node, cst.With):
            self.with_statement(node)
        elif isinstance(node, (cst.Try, cst.TryStar)):
            self.block(suite_body(node.body))
            for handler in node.handlers:
                if handler.name is not None:
                    self.bind(handler.name.name, UNKNOWN)
                self.block(suite_body(handler.body))
            if node.orelse is not None:
                self.block(suite_body(node.orelse.body))
            if node.finalbody is not None:
                self.block(suite_body(node.finalbody.body))
        elif isinstance(node, cst.FunctionDef):
            self.nested_def(node)
        elif isinstance(node, cst.Match):
            self.expr(node.subject)
            for case in node.cases:
                self.block(suite_body(case.body))
        elif isinstance(node, cst.ClassDef):
            pass

    def small(self, node: cst.CSTNode) -> None:
        if self.mode is Mode.DISCOVER and isinstance(node, (cst.Assign, cst.AugAssign)) and not self.in_region:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for written in targets:
                for leaf in assigned_names(written):
                    self.engine.note_host_write(self.function, leaf, self.after_capture, self.scope, self.statement)
        if isinstance(node, cst.Expr):
            self.expr(node.value)
        elif isinstance(node, cst.Assign):
            self.expr(node.value)
            for target in node.targets:
                self.targets(target.target)
                self.note_output(target.target)
            self.dispatch(node)
            value = evaluate(node.value, self.scope)
            for target in node.targets:
                self.bind(target.target, value, node.value)
            if self.mode is Mode.DISCOVER and captures.compiled_site(value, self.scope) is not None:
                self.engine.note_compiled_names(callee_name(n) for t in node.targets for n in assigned_names(t.target))
        elif isinstance(node, cst.AnnAssign):
            if node.value is not None:
                self.expr(node.value)
                self.dispatch(node)
                self.bind(node.target, evaluate(node.value, self.scope), node.value)
        elif isinstance(node, cst.AugAssign):
            self.expr(node.value)
            self.targets(node.target)
            self.dispatch(node)
            if isinstance(node.target, cst.Name):
                current = self.scope.lookup(node.target.value)
                combined = evaluate(cst.BinaryOperation(node.target, cst.Add(), node.value), self.scope)
                self.scope.env[node.target.value] = combined if current.kind != Kind.UNKNOWN else UNKNOWN
        elif isinstance(node, (cst.Return, cst.Raise)):
            for child in children(node):
                self.expr(child)
            if self.mode is Mode.DISCOVER and isinstance(node, cst.Return) and node.value is not None \
                    and captures.is_graph_context(node.value, self.scope):
                # `def capture_to_graph(self, graph): return torch.cuda.graph(graph)` (DeepSpeed's
                # accelerator): `with accelerator.capture_to_graph(g):` captures its body.
                self.engine.note_graph_context_factory(self.function)
        elif isinstance(node, (cst.Assert, cst.Del)):
            self.dispatch(node)
            for child in children(node):
                if isinstance(child, cst.BaseExpression):
                    self.expr(child)
        elif isinstance(node, (cst.Import, cst.ImportFrom)):
            for local, qualified, known in imported(node, self.scope):
                if known is None and self.function.qualname == "<module>" and self.function.module.imports.get(local) == qualified:
                    # Module-level code finds the name through the module's imports when it
                    # uses it (Scope.lookup): resolving each import as it was walked outlined
                    # 40 of the 140 modules a run over torch's sources parsed, for names unused.
                    self.scope.env.pop(local, None)
                else:
                    self.scope.env[local] = known if known is not None else self.scope.reference(qualified)

    @property
    def lazily(self) -> bool:
        """Inside `if self.graph is None:`-style code outside regions, run on a first call only
        (asked where it matters: at a capture, at a rebinding)."""
        if self.mode is Mode.REGION or self.in_region:
            return False
        for branch in self.branches:
            if id(branch) not in self._first_call:
                self._first_call[id(branch)] = first_call_only(branch, self.stateful, self.project_callees)
            if self._first_call[id(branch)]:
                return True
        return False

    def dead_branch(self, node: cst.If) -> Optional[str]:
        """In a region, the branch of an `if` that cannot run during capture ('body' or
        'orelse'), from what the capture knows: whether it is capturing, the constant
        flags of the captured call and its constructors, and first-use initialisation
        that warmup has already run (see warmup_only.py)."""
        if not self.in_region:
            return None
        dead = self.dead_while_capturing(node.test)
        if dead is not None or self.mode is not Mode.REGION:
            return dead
        known = truth(node.test, self.scope)
        if known is not None:
            return "orelse" if known else "body"
        if initializes_once(node, self.stateful, self.project_callees):
            return "body"
        return None

    def stateful(self, expr: cst.BaseExpression) -> bool:
        """Whether `expr` names state that outlives a call: an attribute, a module global or
        closure variable (not a local or parameter of this call), or an item of either."""
        if isinstance(expr, cst.Subscript):
            return self.stateful(expr.value)
        if isinstance(expr, cst.Attribute):
            return True
        return isinstance(expr, cst.Name) and (expr.value in self.function.declared_globals or expr.value not in self.scope.env)

    def project_callees(self, call: cst.Call) -> list[FunctionInfo]:
        return [function for function, _ in self.callees(call)]

    def dead_while_capturing(self, test: cst.BaseExpression) -> Optional[str]:
        """In a region, the branch of `if [not] torch.cuda.is_current_stream_capturing():` that
        cannot run during capture ('body' or 'orelse'): checks and syncs that code keeps for
        eager runs only (`if not capturing: assert torch.isfinite(x).all()`) are not captured."""
        if not self.in_region:
            return None
        negated = isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not)
        inner = test.expression if negated else test  # type: ignore[attr-defined]
        if isinstance(inner, cst.Call) and self.scope.qualname(inner.func) in vocabulary.names("capture.capturing_check"):
            return "body" if negated else "orelse"
        return None

    def note_loop_variable(self, node: cst.For) -> None:
        """A replay loop's variable changes between replays, like an assignment there."""
        for leaf in assigned_names(node.target):
            self.engine.note_host_write(self.function, leaf, self.after_capture, self.scope, self.statement)

    def targets(self, target: cst.BaseExpression) -> None:
        """Walk the expressions inside an assignment target (`x[mask] = 0` indexes with `mask`)."""
        for leaf in assigned_names(target):
            if isinstance(leaf, cst.Subscript):
                self.expr(leaf)
            elif isinstance(leaf, cst.Attribute):
                self.note_attribute(leaf, written=True)

    def bind(self, target: cst.BaseExpression, value: Value, expr: Optional[cst.BaseExpression] = None) -> None:
        if isinstance(target, cst.Name):
            self.scope.env[target.value] = value
            if self.capture is not None:
                self.capture.names.add(target.value)
                self.capture.bound.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            items = expr.elements if isinstance(expr, (cst.Tuple, cst.List)) else None
            each = self.comprehension_element(expr) if isinstance(expr, (cst.GeneratorExp, cst.ListComp)) else None
            for index, element in enumerate(target.elements):
                if each is not None and not isinstance(element, cst.StarredElement):
                    self.bind(element.value, each)
                elif items is not None and index < len(items) and not isinstance(element, cst.StarredElement):
                    self.bind(element.value, evaluate(items[index].value, self.scope), items[index].value)
                elif index < len(value.items) and not isinstance(element, cst.StarredElement):
                    self.bind(element.value, value.items[index])  # closures a factory returned
                else:
                    # Unpacking a tensor-valued result (topk, a module returning a tuple) gives tensors.
                    self.bind(element.value, Value(value.kind) if value.is_tensor else UNKNOWN)

    def comprehension_element(self, expr: Union[cst.GeneratorExp, cst.ListComp]) -> Value:
        """`tokens, labels = (t.to(device) for t in batch)`: a tensor where the element
        expression is one whatever its loop variables hold (they shadow the function's own
        names: Transformer Engine reuses `x` for a data-sized tensor before such a list)."""
        env = dict(self.scope.env)
        comp: Optional[cst.CompFor] = expr.for_in
        while comp is not None:
            env.update((leaf.value, UNKNOWN) for leaf in assigned_names(comp.target) if isinstance(leaf, cst.Name))
            comp = comp.inner_for_in
        value = evaluate(expr.elt, Scope(self.engine.project, self.function, env))
        return Value(value.kind) if value.is_tensor else UNKNOWN

    def element_of(self, iterable: cst.BaseExpression) -> Value:
        """The value of the loop variable of `for x in iterable`."""
        return loop_element(iterable, self.scope)

    def nested_def(self, node: cst.FunctionDef) -> None:
        for decorator in node.decorators:
            self.expr(decorator.decorator)
        if isinstance(self.function.node, cst.Module):
            return  # module-level functions are indexed and resolved by name
        nested = self.function.nested(node)
        self.scope.env[node.name.value] = Value(Kind.OBJECT, targets=(nested,))
        if self.mode is Mode.DISCOVER:
            self.engine.discover(nested, dict(self.scope.env))

    def with_statement(self, node: cst.With) -> None:
        self.dispatch(node)
        form, capturing = None, None
        for item in node.items:
            self.expr(item.item)
            if self.mode is Mode.REGION and self.in_region:
                assert self.job is not None
                for method in indirect.context_methods(self.engine.project, evaluate(item.item, self.scope)):
                    self.engine.enqueue(method, {}, self.job, captures.site(self.function.module, item.item))
            found = self.capture_context(item.item)
            if found and form is None:
                form, capturing = found, item
            if item.asname is not None:
                self.bind(item.asname.name, UNKNOWN)
        if form is None:
            self.block(suite_body(node.body))
            return
        kind, helper = form
        assert capturing is not None  # found with the form
        self.enter_region(node, kind, captures.with_label(capturing), helper)
        self.block(suite_body(node.body))
        self.leave_region(node)

    def capture_context(self, expr: cst.BaseExpression) -> Optional[tuple[CaptureKind, str]]:
        """The region's kind (and the capture helper's name) if `with expr:` captures its body."""
        if captures.is_graph_context(expr, self.scope):
            return CaptureKind.GRAPH_BLOCK, ""
        if isinstance(expr, cst.Call):
            qualified = self.scope.qualname(expr.func)
            if self.engine.is_configured_name(qualified):
                return CaptureKind.HELPER, qualified or ""
            for function, _ in self.callees(expr):
                helper = self.engine.helper(function)
                if helper.context:
                    return CaptureKind.HELPER, helper.name
            if self.engine.modules_left_out and evaluate(expr.func, self.scope).kind == Kind.UNKNOWN:
                # `with graph_ctx(cuda_graph=g):` where graph_ctx is `self.device_module.graph`, set
                # in a base class whose module holds no capture form: known once every module is.
                self.engine.walk_again_with_every_module(self.function, self.initial_env)
        return None

    # --- regions -----------------------------------------------------------
    def enter_region(self, marker: cst.CSTNode, kind: CaptureKind, label: str, helper: str = "") -> None:
        if self.mode is Mode.DISCOVER:
            self.capture = self.engine.capture_in(self.function, marker, kind, label, helper)
            self.engine.note_capturer(self.function, lazily=self.lazily)
            self.in_region = True
        elif self.mode is Mode.REGION:
            if self.job is not None and marker is self.job.marker:
                self.in_region = True
        else:
            self.in_region = True

    def leave_region(self, marker: Optional[cst.CSTNode] = None) -> None:
        if self.mode is Mode.REGION and self.job is not None and self.job.marker is None:
            return  # a whole captured function stays captured
        if self.in_region:
            self.after_capture = True
        self.in_region = False
        self.capture = None

    # --- expressions -------------------------------------------------------
    def expr(self, node: cst.CSTNode) -> None:  # an expression and the nodes inside it
        stack = [node]
        while stack:
            current = stack.pop()
            self.dispatch(current)
            # Exact types: libcst's node classes are final, and isinstance on their ABC metaclass
            # costs a Python call for every miss.
            kind = type(current)
            if kind is cst.Call:
                self.call(current)  # type: ignore[arg-type]
            elif kind is cst.Attribute or kind is cst.Name:
                self.note_read(current)  # type: ignore[arg-type]
                if kind is cst.Attribute and self.mode is Mode.REGION and self.in_region:
                    self.follow_property(current)  # type: ignore[arg-type]
            elif kind is cst.Yield and self.in_region and self.mode is Mode.DISCOVER:
                self.engine.note_yield_in_region(self.function)
            elif kind is cst.BinaryOperation and self.mode is Mode.REGION and self.in_region:
                if type(current.operator) is cst.MatrixMultiply:  # type: ignore[attr-defined]
                    self.job.capture.calls.add(captures.MATMUL_KEY)  # type: ignore[union-attr]
            if kind in SCOPES:
                continue
            kids = list(children(current))
            if kind is cst.BooleanOperation and self.mode is Mode.REGION and self.in_region and self.short_circuits(current):  # type: ignore[arg-type]
                kids = [current.left]  # type: ignore[attr-defined]  # `False and x.item()`: the right side never runs
            kids.reverse()
            stack.extend(kids)

    def short_circuits(self, node: cst.BooleanOperation) -> bool:
        """Whether the left side of `and`/`or` is known to decide it, so the right side never runs."""
        known = truth(node.left, self.scope)
        return known is not None and known == isinstance(node.operator, cst.Or)

    def call(self, node: cst.Call) -> None:
        method = captures.capture_method(node)
        if method == "begin":
            self.enter_region(node, CaptureKind.CAPTURE_SPAN, code_of(node))
        elif method == "end":
            self.leave_region()
        elif method == "replay" and self.mode is Mode.DISCOVER:
            self.engine.note_replay(self.function)
        if self.mode is Mode.DISCOVER:
            self.discover_call(node)
        elif self.mode is Mode.REPLAY and not self.in_region:
            for function, _ in self.callees(node):
                self.note_capturing_call(function)
        elif self.mode is Mode.REGION and self.in_region:
            assert self.job is not None
            self.job.capture.calls.update(captures.call_keys(node, self.scope))
            self.follow(node)

    def note_capturing_call(self, function: FunctionInfo) -> None:
        """`g, out = capture_graph(model, x)`: what follows the call runs after a capture."""
        if not self.in_region and self.engine.captures_in(function):
            self.engine.note_capture_call(self.function)
            self.engine.note_capturer(self.function, lazily=self.lazily)
            self.after_capture = True

    def discover_call(self, node: cst.Call) -> None:
        found = captures.captured_callables(node, self.scope)
        if found is not None:
            kind, exprs = found
            self.capture_targets(node, kind, exprs, tensor_args=True)
            if kind is CaptureKind.GRAPHED_CALLABLES and not self.in_region:
                self.after_capture = True  # make_graphed_callables captures before it returns
        qualified = self.scope.qualname(node.func)
        if self.engine.is_configured_name(qualified) and not self.callees(node):
            # A capture function of another package, named in the configuration.
            self.capture_targets(node, CaptureKind.HELPER, [a.value for a in node.args], helper=qualified or "")
        callees = self.callees(node)
        if not self.in_region and self.replays_when_called(evaluate(node.func, self.scope)):
            self.engine.note_replay(self.function, call=node)  # calling a graphed or compiled callable replays its graphs
        elif not self.in_region and any(self.engine.replays_elsewhere(function) for function, _ in callees) and not self.engine.captures_in(self.function):
            self.engine.note_replay(self.function, through=True)  # `self.model_runner.execute_model(x)`: a method that replays
        if not self.in_region and self.mode is Mode.DISCOVER:
            self.note_call_writes(node)
        if not self.in_region:
            resolved = [function for function, _ in callees]
            self.engine.note_host_call(self.function, resolved, node, {} if resolved else dict(self.scope.env), self.after_capture)
            if not resolved and (self.after_capture or self.engine.replay_receivers(self.function)):
                # While discovering, `model = Decoder()` was evaluated without the modules that
                # hold no capture form, and constructors' arguments were not searched, so
                # `model.set_temperature(t)` in the replay loop, or `processor.update(params)`
                # before a server's replay, resolved to nothing: walk again with every module,
                # as for capture targets. Only after a capture in this function or in one that
                # replays (a script, a serving loop), where a call runs between replays.
                self.engine.walk_again_with_every_module(self.function, self.initial_env)
            elif not resolved and self.engine.is_compiled_name(callee_name(node.func)):
                # `self.denoiser(x, s)`, the attribute a constructor stores a compiled model in:
                # its value comes from the constructor's callers, known once every module is.
                self.engine.walk_again_with_every_module(self.function, self.initial_env)
            if (call_method(node) or (None, ""))[1] in ("train", "eval"):
                self.engine.note_mode_switch(self.function, self.after_capture, evaluate(call_method(node)[0], self.scope))  # type: ignore[index]
        self.note_dataclass_construction(node)
        for function, bound in callees:
            if not self.in_region:
                self.pass_replaying_arguments(function, node, bound)
                self.pass_replaying_receiver(function, node, bound)
            self.note_construction(function, node, bound)
            self.engine.note_call(function, self.function, node)
            if not self.engine.may_capture(function):
                continue
            if not self.in_region:
                self.engine.note_capturing_call_args(function, node, {name: evaluate(expr, self.scope) for name, expr in function.arguments(node, bound)})
            helper = self.engine.helper(function)
            if helper.callable_params:
                exprs = [arg for param, arg in function.arguments(node, True) if param in helper.callable_params]
                self.capture_targets(node, CaptureKind.HELPER, exprs, helper=helper.name)
            self.note_capturing_call(function)
        if self.in_region and isinstance(node.func, cst.Name):
            if node.func.value in {p.name.value for p in self.function.params}:
                self.engine.note_parameter_call(self.function, node.func.value)

    def note_construction(self, function: FunctionInfo, node: cst.Call, bound: bool) -> None:
        """A call that runs `function`, when it is a class's `__init__`: what it constructs with."""
        if function.name != "__init__" or function.cls is None:
            return
        # `Sequential(Actor(...), Noise(...))` into `*modules`; `mixer_cls(dim)` of a partial
        # that bound the class's keywords first.
        partial = evaluate(node.func, self.scope).bound
        self.engine.note_construction(function.cls, bind(function, node, bound, self.construction_argument, partial))

    def note_call_writes(self, node: cst.Call) -> None:
        """`setattr(model, "temperature", t)` and `self.register_buffer("inv_freq", f)` write an
        attribute like an assignment, and `cfg.knobs.update(arm)` writes the entries of `cfg.knobs`."""
        method = call_method(node)
        if method is not None and method[1] in vocabulary.names("host_effect.entry_methods") and isinstance(method[0], (cst.Attribute, cst.Name)):
            self.engine.note_host_write(self.function, method[0], self.after_capture, self.scope, self.statement)
            return
        target = named_attribute_write(node)
        if target is not None:
            self.engine.note_host_write(self.function, target, self.after_capture, self.scope, self.statement)

    def replays_when_called(self, value: Value, passed: bool = False) -> bool:
        """A make_graphed_callables result or a callable compiled with CUDA graphs; `passed` as
        an argument, also a function or a runner object that replays a graph (`run(actor.act,
        obs)`, where `act` calls `self.graph.replay()`; `run(graphed_target, ...)`, whose
        `__call__` does): a loop calling it is a replay loop. (A direct call of such
        a function is not: its caller is the code around the replays, not a runner.)"""
        if value.tag in ("graphed", REPLAYS) or captures.compiled_site(value, self.scope) is not None:
            return True
        if not passed or value.is_class:
            return False
        functions = [t for t in value.targets if isinstance(t, FunctionInfo)]
        functions += [c for t in value.targets if isinstance(t, ClassInfo) and (c := self.engine.project.method(t, "__call__"))]
        return any(self.engine.calls_replay(f) and not self.engine.captures_in(f) for f in functions)

    def pass_replaying_arguments(self, function: FunctionInfo, call: cst.Call, bound: bool) -> None:
        """`train(graphed, data)`: where `train` calls the parameter it gets `graphed` as, it
        replays; its walk is given the arguments so that it sees so, and what its other calls run."""
        passed, replaying = {}, set()
        for name, expr in function.arguments(call, bound):
            root = expr.value if isinstance(expr, cst.Attribute) else expr  # `graphed`, `actor.act`
            if not (isinstance(root, cst.Name) and root.value in self.scope.env):
                continue  # a cheap test first: most arguments are no such callable
            value = evaluate(expr, self.scope)
            if value.kind is Kind.OBJECT and value.targets and not value.is_class:
                passed[name] = value  # objects too: `model.freeze_normalizer()` between its replays
                if self.replays_when_called(value, passed=True):
                    replaying.add(name)
                    passed[name] = value if value.tag else replace(value, tag=REPLAYS)  # seen as such in its walk
        if replaying and (not self.engine.called(function).isdisjoint(replaying) or _passes_on(function, replaying)):
            self.engine.discover_with(function, passed)  # it calls the callable, or hands it to a function that may
        if replaying and function.name == "__init__":  # `DPMSolver(compiled_model)` keeps it as `self.denoiser`
            self.engine.note_compiled_names(
                w.attr for w in function.self_writes() if isinstance(w.value, cst.Name) and w.value.value in replaying
            )

    def pass_replaying_receiver(self, function: FunctionInfo, call: cst.Call, bound: bool) -> None:
        """`collector.rollout(obs)` where `collector` was built with a graphed policy
        (`Collector(CudaGraphModule(policy), ...)`): the method may replay it through
        `self.policy(obs)`, so it is walked, with what the construction gave the object."""
        if not bound or function.cls is None or not isinstance(call.func, cst.Attribute) or function.name == "__init__":
            return
        if self.mode is not Mode.DISCOVER or self.in_region:
            return
        given = [v for args in self.engine.noted_constructions(function.cls) for v in args.values()]
        if any(v.kind is Kind.OBJECT and v.targets and self.replays_when_called(v, passed=True) for v in given):
            self.engine.discover_with(function, {})

    def note_dataclass_construction(self, call: cst.Call) -> None:
        """`ForwardBatch(ids, pos, lens, mask)` of a dataclass: its fields, in declaration
        order, get the arguments, as a constructor's parameters would."""
        qualified = self.scope.qualname(call.func)
        cls = self.engine.project.resolve(qualified, self.function.module) if qualified else None
        fields = dataclass_fields(cls) if isinstance(cls, ClassInfo) else []
        if not fields or self.engine.project.method(cls, "__init__"):  # type: ignore[arg-type]
            return
        args: dict[str, Value] = {}
        for index, arg in enumerate(a for a in call.args if not a.star and a.keyword is None):
            if index < len(fields):
                args[fields[index]] = self.construction_argument(arg.value)
        args.update((a.keyword.value, self.construction_argument(a.value)) for a in call.args if a.keyword is not None)
        self.engine.note_construction(cls, args)

    def construction_argument(self, expr: cst.BaseExpression) -> Value:
        """What a constructor is given: `DynamicLossScaler(cfg.init_scale)` passes a number
        (a field of the caller's configuration parameter), so the scale it keeps is one;
        `Block(cfg)` passes the configuration on, a host object whatever its type."""
        value = evaluate(expr, self.scope)
        if value.kind == Kind.UNKNOWN and (config_field(expr, self.function) or config_parameter(expr, self.function)):
            return HOST
        return value

    def capture_targets(self, node: cst.Call, kind: CaptureKind, exprs: list, tensor_args: bool = False, helper: str = "") -> None:
        # While discovering, values here were computed without the modules that hold no
        # capture form: the targets are resolved by walking this function again with every module.
        self.engine.walk_again_with_every_module(self.function, self.initial_env)
        self.engine.capture_callables(self.function, node, kind, self.callables(exprs), tensor_args=tensor_args, helper=helper)
        self.engine.note_capturer(self.function, lazily=self.lazily)

    def callables(self, exprs: Iterable[cst.BaseExpression]) -> list[FunctionInfo]:
        """The project functions (or module forwards) that callable expressions stand for."""
        found: list[FunctionInfo] = []
        for expr in exprs:
            value = evaluate(expr, self.scope)
            for target in value.targets:
                if isinstance(target, FunctionInfo):
                    found.append(target)
                elif isinstance(target, ClassInfo) and not value.is_class:
                    found.extend(self.module_entry(target))
        return found

    def module_entry(self, cls: ClassInfo) -> list[FunctionInfo]:
        project = self.engine.project
        entry = project.method(cls, "forward") or project.method(cls, "__call__")
        return [entry] if entry is not None else []

    def note_read(self, node: cst.BaseExpression) -> None:
        if self.capture is None:
            if self.mode is Mode.REGION and self.in_region and isinstance(node, cst.Attribute):
                self.note_region_attribute(node)
            return
        if isinstance(node, cst.Name) and node.value in self.scope.env:
            self.capture.names.add(node.value)
        elif isinstance(node, cst.Attribute):
            self.note_attribute(node, written=False)

    def note_region_attribute(self, node: cst.Attribute) -> None:
        """`self.u` read by `self._step()`, a method of the capturing object that the capture
        calls: the graph reads that attribute too (rebinding it before replay is CG401)."""
        assert self.job is not None
        if self.function.cls is None or not self.function.params or not self.function.is_method:
            return
        attr = self_attr(node, self.function.params[0].name.value)
        if attr is not None:  # `self.inv_freq` read in a captured forward: rebinding it later is CG401
            self.engine.note_region_read(self.function.cls, attr)
        host = self.job.capture.function
        if host is None or host.cls is None:
            return
        if attr is not None and host.cls in self.engine.project.mro(self.function.cls):
            self.job.capture.attrs.add(attr)

    def note_output(self, target: cst.BaseExpression) -> None:
        """`self.static_y = model(x)` or `self.outputs[bs] = ...` in a capture of this method:
        the attribute holds the graph's static output, which every replay overwrites."""
        if self.capture is None or self.capture.function is not self.function or self.scope.cls is None or not self.function.params:
            return
        for leaf in assigned_names(target):
            base = leaf.value if isinstance(leaf, cst.Subscript) else leaf
            if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and base.value.value == self.function.params[0].name.value:
                self.capture.outputs.add(base.attr.value)

    def note_attribute(self, node: cst.Attribute, written: bool) -> None:
        if self.capture is not None and isinstance(node.value, cst.Name) and self.scope.cls is not None:
            if self.function.params and node.value.value == self.function.params[0].name.value:
                self.capture.attrs.add(node.attr.value)

    # --- calls -------------------------------------------------------------
    def callees(self, call: cst.Call) -> list[tuple[FunctionInfo, bool]]:
        """Project functions a call may run, each with whether it is bound (self passed)."""
        project = self.engine.project
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and callee_name(func.value.func) == "super":
            return [(method, True) for method in self.super_methods(func.value, func.attr.value)]
        qualified = self.scope.qualname(func)
        if qualified is not None:
            definition = project.resolve(qualified, self.function.module)
            if isinstance(definition, FunctionInfo):
                return [(definition, False)]
            if isinstance(definition, ClassInfo):
                init = project.method(definition, "__init__")
                return [(init, True)] if init else []
            if definition is not None:
                return []
            # Not a definition: a module global (`all_gather = AllGatherFunc.apply`), a class
            # attribute, or another package's symbol: its value says.
        value = evaluate(func, self.scope)
        found: list[tuple[FunctionInfo, bool]] = []
        for target in value.targets:
            if isinstance(target, FunctionInfo):
                found.append((target, target.is_method and (isinstance(func, cst.Attribute) or value.on_instance)))
            elif isinstance(target, ClassInfo):
                if value.is_class:
                    init = project.method(target, "__init__")
                    found.extend([(init, True)] if init else [])
                else:
                    found.extend((entry, True) for entry in self.module_entry(target))
        return found

    def super_methods(self, call: cst.Call, name: str) -> list[FunctionInfo]:
        """What `super().name` or `super(Cls, obj).name` finds: the next definition after the
        class in the MRO of the object's own class (a mixin's `super()` reaches its sibling)."""
        project = self.engine.project
        args = positional(call)
        after = self.function.cls
        if len(args) == 2:
            pinned = evaluate(args[0], self.scope)
            after = next((t for t in pinned.targets if isinstance(t, ClassInfo)), None) if pinned.is_class else None
            receiver = evaluate(args[1], self.scope)
        else:
            receiver = self.scope.lookup(self.scope.self_name) if self.scope.self_name else UNKNOWN
        if after is None:
            return []
        found: list[FunctionInfo] = []
        for cls in [t for t in receiver.targets if isinstance(t, ClassInfo)] or [after]:
            mro = project.mro(cls)
            following = mro[mro.index(after) + 1:] if after in mro else project.mro(after)[1:]
            method = next((klass.methods[name] for klass in following if name in klass.methods), None)
            if method is not None and method not in found:
                found.append(method)
        return found

    def receiver(self, call: cst.Call, function: FunctionInfo) -> Optional[Value]:
        """The object a bound call runs on, where its class is a project subclass of the
        method's own: `self.impl(x)` in an inherited `forward` runs the subclass's `impl`."""
        owner = function.cls
        if owner is None:
            return None
        func = call.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and callee_name(func.value.func) == "super":
            super_args = positional(func.value)
            base = evaluate(super_args[1], self.scope) if len(super_args) == 2 else self.scope.lookup(self.scope.self_name or "")
        elif isinstance(func, cst.Attribute):
            base = evaluate(func.value, self.scope)
        elif isinstance(func, cst.Call) and self.scope.qualname(func.func) == "getattr" and func.args:
            base = evaluate(func.args[0].value, self.scope)  # `getattr(self, name)(x)`
        else:
            base = evaluate(func, self.scope)  # `model(x)`, or `Block(...)` running `__init__`
        project = self.engine.project
        classes = tuple(t for t in base.targets if isinstance(t, ClassInfo) and t is not owner and owner in project.mro(t))
        if not classes:
            return None
        return Value(Kind.OBJECT, targets=classes, tag=self.scope.class_tag(classes[0]))

    def follow(self, call: cst.Call) -> None:
        assert self.job is not None
        targets = self.callees(call)
        step = captures.site(self.function.module, call)
        callee = evaluate(call.func, self.scope) if targets else UNKNOWN
        partial = callee.bound
        project = self.engine.project
        for function, bound in targets:
            # `Op.apply(x)` binds `x` to forward's second parameter, after autograd's `ctx`
            # (`Op.forward(None, x)` passes ctx itself).
            ctx = project.is_autograd_forward(function) and not _names_forward(call)
            receiver = self.receiver(call, function) if bound and function.params else None
            wrapper = indirect.decorator_wrapper(project, function) if callee.tag != indirect.UNDECORATED else None
            if wrapper is not None:  # `@timed def step(x)`: the call runs timed's closure, which calls step
                closure, wrapped, surely = wrapper
                first = (receiver or Value(Kind.OBJECT, targets=(function.cls,)),) if bound and function.cls else ()
                args = self.call_arguments(closure, call, False, (first + tuple(partial[0] if partial else ()), partial[1] if partial else ()))
                args[CELL + wrapped] = Value(Kind.OBJECT, targets=(function,), tag=indirect.UNDECORATED)
                self.engine.enqueue(closure, args, self.job, step)
                if surely:
                    continue
            args = self.call_arguments(function, call, bound, partial, ctx)
            if receiver is not None:
                args[function.params[0].name.value] = receiver
            self.engine.enqueue(function, args, self.job, step)
            if bound and function.cls is not None and function.name in ("forward", "__call__") and not _names_forward(call):
                # Hooks registered on the module run around its forward.
                held = (self_attr(call.func, self.scope.self_name) if self.scope.self_name else None) or ""  # `self.o_proj(x)`
                for cls in receiver.targets if receiver is not None else (function.cls,):
                    for hook in indirect.module_hooks(project, cls, self.function.cls, held, self.engine.parameter_values.of):
                        self.engine.enqueue(hook, {}, self.job, step)
        called = evaluate(call.func, self.scope) if not targets else callee
        if not targets and called.tag == "module" and not called.targets and not called.is_class:
            # `self.out_proj(x)` of an `nn.Linear`: hooks registered on torch's linears run.
            torch_classes = {called.qualname} if called.qualname else None
            for hook in indirect.torch_module_hooks(project, torch_classes, self.engine.parameter_values.of):
                self.engine.enqueue(hook, {}, self.job, step)
        if not targets and self.scope.qualname(call.func) not in _NOT_CALLING:
            # An external function given a project callable will call it (checkpoint(fn, x), vmap(fn)).
            for function in self.callables(a.value for a in call.args):
                self.engine.enqueue(function, {}, self.job, step)
        if not targets:
            why = why_unfollowed(call, self.scope)
            if why is not None:
                self.engine.reach_graph.unfollowed(self.job.node, self.function.module, call, why)

    def call_arguments(self, function: FunctionInfo, call: cst.Call, bound: bool, partial: tuple = (), passes_first: bool = False) -> dict[str, Value]:
        """The values a call gives the callee's parameters (arguments.bind): `*batch` unpacked
        where the tuple's items are known (`trainer.train_step(*static_batch)`), surplus
        positionals as the tuple a `*args` parameter holds, and what a `functools.partial`
        bound first (`partial(decode_step, model, scores=scores)`)."""
        if function.star_param is None and function.kwargs_param is None and not partial and not any(arg.star for arg in call.args):
            return {name: evaluate(expr, self.scope) for name, expr in function.arguments(call, bound, passes_first)}
        return bind(function, call, bound, lambda expr: evaluate(expr, self.scope), partial, passes_first)

    def follow_property(self, node: cst.Attribute) -> None:
        """Reading a `@property` (`self.num_tokens`) runs its function in the region."""
        assert self.job is not None
        prop = self.scope.property_read(node)
        if prop is not None:
            self.engine.enqueue(prop, {}, self.job, captures.site(self.function.module, node))

    # --- rules -------------------------------------------------------------
    def dispatch(self, node: cst.CSTNode) -> None:
        if self.mode is Mode.REGION:
            if self.in_region:
                self.engine.run_rules(self.engine.region_rules, node, self)
            return
        if self.mode is Mode.REPLAY and self.engine.capture_rules:
            site = self.engine.capture_at(node)
            if site is not None:  # a capture site: `with torch.cuda.graph(...)`, capture_begin(), make_graphed_callables(...)
                self.site = site
                self.engine.run_rules(self.engine.capture_rules, node, self)
                self.site = None
        if self.mode is Mode.REPLAY and not self.in_region:
            # Between replays: after a capture in this function, or anywhere in a
            # function that replays a graph captured elsewhere (a runner's __call__).
            if self.engine.runs_replay_rules(self.function, self.after_capture, self.statement):
                self.engine.run_rules(self.engine.replay_rules, node, self)


def _passes_on(function: FunctionInfo, names: set[str]) -> bool:
    """Whether `function` hands one of its parameters `names` to a call (`generate(decode_fn,
    ...)` passing `decode_fn` on to `decode_n_tokens`, which calls it)."""
    if not isinstance(function.node, cst.FunctionDef):
        return False
    return any(
        isinstance(node, cst.Call) and any(isinstance(a.value, cst.Name) and a.value.value in names for a in node.args)
        for node in descendants(function.node)
    )

