"""Host state that changes between replays: counters and flags a captured branch reads.

A branch on such state is decided once, at capture, and frozen for every replay.
State set only in `__init__` (configuration flags like `self.use_bias`) never
changes between replays, so reading it is safe: that is the false positive this
module exists to avoid.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo, self_attr
from cglint.engine.project import Project
from cglint.engine.replay_writes import (
    ANY_ITEM, ANY_OWNER, attribute_key, callees_of, entry_name, initialised_once, item_keys, loop_container, restored_state,
)
from cglint.engine.syntax import assigned_names, code_of, descendants
from cglint.engine.values import Kind, evaluate, host_reads
from cglint.rule import Location

if TYPE_CHECKING:
    from cglint.engine.checker import Engine
    from cglint.engine.scope import Scope

_SETUP_METHODS = frozenset({"__init__", "__post_init__", "__setstate__"})
_DERIVED = "is computed from "
_MAX_DERIVATION = 3  # local -> helper's return -> its local -> state


def _is_toggle(value: Optional[cst.BaseExpression]) -> bool:
    """Assigning a literal or a negation outside setup is a mode switch or a counter reset."""
    if value is None:
        return True
    if isinstance(value, cst.Name):
        return value.value in ("True", "False")
    return isinstance(value, (cst.Integer, cst.Float, cst.SimpleString)) or (
        isinstance(value, cst.UnaryOperation) and isinstance(value.operator, cst.Not)
    )


# First words of methods that configure an object before use or tear it down after
# (`enable_tiling()`, `set_context_parallel_group()`, `configure_nvtx_profiling()`,
# `initialize_rng_tracker()`, `enter_torch_compile()`, `destroy_model_parallel()`):
# configuration API that users call while building, before the first capture, or when done.
# With no call seen between replays, their writes are setup; taking them for
# state changed between replays was the largest share of false positives on real engine code
# (diffusers, Megatron, SGLang, Transformer Engine, DeepSpeed). A call seen in the replay loop
# still counts (engine.call_changing_between_replays).
_CONFIGURATION_WORDS = frozenset({
    "set", "enable", "disable", "configure", "init", "initialize", "setup", "register", "enter", "use", "build", "load",
    "exit", "leave", "destroy", "teardown", "cleanup", "close", "shutdown", "finalize", "unregister",
})


def configures(function) -> bool:
    return configuring_name(function.name)


def configuring_name(name: str) -> bool:
    return name.lstrip("_").split("_", 1)[0].lower() in _CONFIGURATION_WORDS


def _stores_own_argument(write) -> bool:
    """`self.attn_mask_type = attn_mask_type` in a forward: each call stores what it was given
    and reads it back (Transformer Engine's fused softmax); the capture froze the argument
    and the attribute together, so the attribute adds no hazard of its own."""
    method = write.method
    params = {p.name.value for p in method.params[1:]}
    is_call = method.name in ("forward", "__call__") or method.name.startswith("forward_")
    return is_call and isinstance(write.value, cst.Name) and write.value.value in params


def _private(method: FunctionInfo) -> bool:
    """`_create_transpose`, not `__call__` nor `set_scale`."""
    return method.name.startswith("_") and not method.name.startswith("__")


def _counts_up(write) -> bool:
    """`self.pos = self.pos + n`: a counter written as a plain assignment."""
    return write.value is not None and any(
        isinstance(n, cst.Attribute) and n.attr.value == write.attr and isinstance(n.value, cst.Name)
        and bool(write.method.params) and n.value.value == write.method.params[0].name.value
        for n in descendants(write.value)
    )


class Change(str):
    """How state changes between replays: the text rules put in their messages, with where
    (`sites`: rule.Location items for the write and the call between replays that runs it)
    and whether that write is known to run between calls (`runs`): it is in the replay loop
    or in a function called there, or in a method that the capture itself or other code calls,
    not merely defined (`resize()` that nothing calls)."""

    sites: tuple = ()
    _runs: Any = True
    by: Optional[FunctionInfo] = None
    repeats: bool = False

    def __new__(cls, text: str, sites: Iterable[Location] = (), runs: Any = True, by: Optional[FunctionInfo] = None,
                repeats: bool = False) -> "Change":
        change = super().__new__(cls, text)
        change.sites = tuple(sites)
        change._runs = runs  # a bool, or a function that decides it when first asked
        change.by = by  # the function whose running makes the change (called between replays, or the writer)
        # Made again between later replays (a call in the replay loop, a function that replays),
        # not once after the capture (a wrapper installing its graphed forward).
        change.repeats = repeats
        return change

    @property
    def flips(self) -> bool:
        """Whether a write it names flips a flag (`self.use_bias = not self.use_bias`, `= False`):
        in captured code that is no counter CG505 reports, so the branch reading it must say so."""
        return any(isinstance(site.node, cst.Assign) and _is_toggle(site.node.value) for site in self.sites)

    @property
    def runs(self) -> bool:
        if callable(self._runs):
            self._runs = bool(self._runs())
        return self._runs

    def reworded(self, text: str) -> "Change":
        return Change(text, self.sites, self._runs, self.by, self.repeats)


def reword(state: Optional[str], text: str) -> str:
    """`text`, keeping where `state` (a Change) says the change is made."""
    return state.reworded(text) if isinstance(state, Change) else text


class StateFacts:
    def __init__(self, project: Project, engine: "Engine"):
        self.project = project
        self.engine = engine

    def changing(
        self, expr: cst.BaseExpression, scope: "Scope", any_write: bool = False, depth: int = 0, statement: Optional[cst.CSTNode] = None
    ) -> Optional[str]:
        """How the state `expr` reads (in `statement`, when known) changes between replays, or
        None; a Change, which also says where."""
        change = self._change(expr, scope, any_write, depth, statement)
        if change and self._built_here(expr, scope):
            return None  # an object this call builds: nothing outside the call holds it to change it
        return change

    def _change(
        self, expr: cst.BaseExpression, scope: "Scope", any_write: bool, depth: int, statement: Optional[cst.CSTNode]
    ) -> Optional[str]:
        if self._selects_graph(expr, scope) or scope.function.key in self.engine.selecting_functions():
            return None
        keys = self._state_keys(expr, scope)
        reader = scope.function
        code = f"`{code_of(expr)}`"
        # Changed by a function the replay loop calls: a setter, `model.eval()`, `anneal()`.
        called = next((f for k in keys if (f := self.engine.call_changing_between_replays(k, reader)) is not None), None)
        if called is not None:  # the call in the loop says more than the method that writes
            return self._called_change(expr, code, *called)
        found = next((c for k in keys if (c := self.engine.change_between_replays(k, reader, statement)) is not None), None)
        where: Optional[str]
        if found is not None:  # assigned after the capture or in the replay loop
            function, written = found
            where = "the module" if function.qualname == "<module>" else f"{function.qualname}()"
            sites = [Location(function.module, written, f"changes {code} between calls")] if written is not None else []
            return Change(f"{code} is changed between replays in {where}", sites, by=function, repeats=self.engine.calls_replay(function))
        container = expr.value if isinstance(expr, cst.Subscript) else expr  # an entry changes with its container
        if isinstance(container, cst.Attribute):
            base = evaluate(container.value, scope)
            if base.kind == Kind.OBJECT and not base.is_class:
                for cls in base.targets:
                    if isinstance(cls, ClassInfo):
                        where = self._changed_attribute(cls, container.attr.value, any_write, scope)
                        if where:
                            return reword(where, f"{code} {where}")
        elif isinstance(container, cst.Name) and container.value not in scope.env:
            where = self._changed_globals(scope.module).get(container.value)
            if where:
                return reword(where, f"global `{container.value}` {where}")
        if isinstance(expr, cst.Name) and expr.value in scope.env:
            return self.derived(expr, scope, any_write, depth, statement)
        if isinstance(expr, cst.Attribute) and depth < _MAX_DERIVATION:
            prop = scope.property_read(expr)
            if prop is not None:  # `self.guidance_scale`, a @property computed from `self.step_index`
                return self._derived_from(code_of(expr), self._returns(prop), scope, any_write, depth, statement)
        return None

    def _selects_graph(self, expr: cst.BaseExpression, scope: "Scope") -> bool:
        """`params.offset` where the runner keys its graphs by that attribute (engine.selecting_attrs):
        changing it picks another graph, each captured with its own value."""
        container = expr.value if isinstance(expr, cst.Subscript) else expr
        if not isinstance(container, cst.Attribute):
            return False
        base = evaluate(container.value, scope)
        classes = [c for c in base.targets if isinstance(c, ClassInfo)] if base.kind == Kind.OBJECT and not base.is_class else []
        return bool(classes) and all(container.attr.value in self.engine.selecting_attrs(c) for c in classes)

    def derived(
        self, expr: cst.Name, scope: "Scope", any_write: bool = False, depth: int = 0, statement: Optional[cst.CSTNode] = None
    ) -> Optional[str]:
        """How the state a local was computed from changes between replays, or None:
        `lr = self.current_lr()` where the method reads `self.global_step`, which the replay
        loop steps (`frac = min(1, (step + 1) / n)` and `return base * frac`). Followed
        through local assignments and the returns of project functions, a few steps deep."""
        if depth >= _MAX_DERIVATION:
            return None
        return self._derived_from(expr.value, self._sources(expr.value, scope), scope, any_write, depth, statement)

    def returned(self, call: cst.Call, scope: "Scope", any_write: bool = False, depth: int = 0) -> Optional[str]:
        """How the state a project function's result is computed from changes between replays:
        `get_num_microbatches()` returning `_CALCULATOR.get()`, which returns
        `self.num_micro_batches`, which `update()` in the training loop rewrites."""
        if depth >= _MAX_DERIVATION:
            return None
        functions = [f for f in evaluate(call.func, scope).targets if isinstance(f, FunctionInfo)]
        sources = [source for function in functions for source in self._returns(function)]
        # Getters only: a function that computes with what it reads (`return self.x * self.n`)
        # is walked in the region itself, where its own reads are reported.
        if not sources or not all(isinstance(value, (cst.Name, cst.Attribute, cst.Subscript, cst.Call)) for value, _ in sources):
            return None
        return self._derived_from(f"{code_of(call)}", sources, scope, any_write, depth, None)

    def _calls_project(self, value: cst.BaseExpression, scope: "Scope") -> bool:
        return isinstance(value, cst.Call) and any(isinstance(f, FunctionInfo) for f in evaluate(value.func, scope).targets)

    def _derived_from(self, label: str, sources: Iterable[tuple[cst.BaseExpression, "Scope"]], scope: "Scope",
                      any_write: bool, depth: int, statement: Optional[cst.CSTNode]) -> Optional[str]:
        """How the state that any of `sources` (expressions, each in its scope) reads changes."""
        for value, source_scope in sources:
            assigned = self._assignments(source_scope.function)
            nested = [value] if source_scope is not scope and self._calls_project(value, source_scope) else []  # `return _CALC.get()`
            for read in nested or host_reads(value, source_scope):
                if isinstance(read, cst.Call):
                    state = self.returned(read, source_scope, any_write, depth + 1)
                elif isinstance(read, cst.Name) and read.value in assigned and source_scope is not scope:
                    state = self.derived(read, source_scope, any_write, depth + 1)  # a local of the helper
                elif evaluate(read, source_scope).kind == Kind.HOST or (
                    isinstance(read, cst.Attribute) and source_scope.property_read(read) is not None  # `lr = self.schedule.lr`
                ):
                    state = self.changing(read, source_scope, any_write, depth + 1, statement if source_scope is scope else None)
                elif any_write and isinstance(read, cst.Attribute) and source_scope is not scope:
                    # A getter's `return self.num_micro_batches` of unknown kind: rebound between
                    # replays, the graph keeps the old object, number or tensor (`+=` may be in place).
                    state = self.changing(read, source_scope, any_write, depth + 1)
                    state = state if isinstance(state, Change) and rebinds(state) else None
                else:
                    continue
                if state:
                    code = f"`{code_of(read)}`"
                    detail = state[len(code):].lstrip() if state.startswith(code) else state
                    if detail.startswith(_DERIVED):  # name the state itself, not the locals between
                        return reword(state, f"`{label}` {detail}")
                    return reword(state, f"`{label}` {_DERIVED}{code}, which {detail}")
        return None

    def _called_change(self, expr: cst.BaseExpression, code: str, function: FunctionInfo, call: cst.Call, caller: FunctionInfo) -> Change:
        """The change a call between replays makes: the call, and the write in the function called."""
        sites = [Location(caller.module, call, f"calls {function.qualname}(), which changes {code}")]
        found = self._write_below(function, expr)
        if found is not None:
            writer, written = found
            sites.append(Location(writer.module, written, f"changes {code}"))
        return Change(f"{code} is changed between replays by {function.qualname}()", sites, by=function, repeats=True)

    def _write_below(self, function: FunctionInfo, expr: cst.BaseExpression, depth: int = 3) -> Optional[tuple[FunctionInfo, cst.CSTNode]]:
        """The statement that writes the state `expr` reads: in `function`, or in the functions
        it calls (`prepare_batch()` calling `_load_to_slot()`, which writes), a few calls deep."""
        from cglint.engine.scope import Scope, initial_env  # scope imports this module

        written = _write_in(function, expr)
        if written is not None or depth == 0 or not isinstance(function.node, cst.FunctionDef):
            return (function, written) if written is not None else None
        scope = Scope(self.project, function, initial_env(self.project, function))
        for call in (n for n in descendants(function.node) if isinstance(n, cst.Call)):
            for callee in callees_of(self.project, scope, call):
                if callee is not function:
                    found = self._write_below(callee, expr, depth - 1)
                    if found is not None:
                        return found
        return None

    def _built_here(self, expr: cst.BaseExpression, scope: "Scope") -> bool:
        """Whether `expr` reads an attribute of an object the reading function itself constructs
        (`b = Batch(x)`, then `b.batch_size`), or `self` of a method every caller calls on an
        object it constructs (`Batch(x).scaled()`): each call has its own object, which only
        that call can change."""
        from cglint.engine.scope import Scope  # scope imports this module

        root = expr
        while isinstance(root, (cst.Attribute, cst.Subscript)):
            root = root.value
        if root is expr or not isinstance(root, cst.Name):
            return False
        function = scope.function
        if function.is_method and function.params and root.value == function.params[0].name.value:
            sites = self.engine.parameter_values.call_sites(function)
            return bool(sites) and all(
                isinstance(call.func, cst.Attribute) and self._fresh(call.func.value, Scope(self.project, caller))
                for caller, call in sites
            )
        return self._only_constructed(root.value, scope)

    def _fresh(self, receiver: cst.BaseExpression, scope: "Scope") -> bool:
        """`Batch(x)`, or a local that only ever holds objects its function constructs."""
        if isinstance(receiver, cst.Call):
            return self._constructs(receiver, scope)
        return isinstance(receiver, cst.Name) and self._only_constructed(receiver.value, scope)

    def _only_constructed(self, name: str, scope: "Scope") -> bool:
        function = scope.function
        if not isinstance(function.node, cst.FunctionDef) or any(p.name.value == name for p in function.params):
            return False
        if self.engine.captures_in(function) or self.engine.calls_replay(function):
            return False  # built once around the capture, then replayed or called many times
        built = False
        for node in descendants(function.node):
            if isinstance(node, (cst.Global, cst.Nonlocal)) and any(n.name.value == name for n in node.names):
                return False
            targets: list = []
            value = None
            if isinstance(node, cst.Assign):
                targets, value = [t.target for t in node.targets], node.value
            elif isinstance(node, (cst.AnnAssign, cst.AugAssign)):
                targets, value = [node.target], getattr(node, "value", None) if isinstance(node, cst.AnnAssign) else None
            elif isinstance(node, (cst.For, cst.CompFor)):
                targets = [node.target]
            elif isinstance(node, cst.WithItem) and node.asname is not None:
                targets = [node.asname.name]
            elif isinstance(node, cst.NamedExpr):
                targets = [node.target]
            for target in targets:
                leaves = list(assigned_names(target))
                if not any(isinstance(leaf, cst.Name) and leaf.value == name for leaf in leaves):
                    continue
                if len(leaves) != 1 or not self._constructs(value, scope):
                    return False
                built = True
        return built

    def _constructs(self, value: Optional[cst.BaseExpression], scope: "Scope") -> bool:
        """`Batch(x)`: a call of a project class."""
        if not isinstance(value, cst.Call):
            return False
        callee = evaluate(value.func, scope)
        return callee.kind == Kind.OBJECT and callee.is_class and bool(callee.targets) and all(isinstance(t, ClassInfo) for t in callee.targets)

    def _called_between_replays(self, cls: ClassInfo, attr: str, reader: FunctionInfo) -> bool:
        return self.engine.call_changing_between_replays(attribute_key(attr, cls.qualname), reader) is not None

    def _runs(self, method: FunctionInfo, reader: FunctionInfo) -> bool:
        """Whether code is seen running `method`: it reads the state itself, or something calls it."""
        if method is reader or method.key == reader.key:
            return True
        return bool(self.engine.parameter_values.call_sites(method))

    def _returns(self, function: FunctionInfo) -> Iterator[tuple[cst.BaseExpression, "Scope"]]:
        from cglint.engine.scope import Scope

        for returned in self._assignments(function).get(_RETURNED, ()):
            yield returned, Scope(self.project, function)

    def _sources(self, name: str, scope: "Scope") -> Iterator[tuple[cst.BaseExpression, "Scope"]]:
        """What a local is assigned in its function, with the return values of a project
        function it is assigned the result of (in that function's scope)."""
        for value in self._assignments(scope.function).get(name, ()):
            callees = evaluate(value.func, scope).targets if isinstance(value, cst.Call) else ()
            functions = [f for f in callees if isinstance(f, FunctionInfo)]
            if not functions:
                yield value, scope
            for function in functions:
                yield from self._returns(function)

    def _state_keys(self, expr: cst.BaseExpression, scope: "Scope") -> list[tuple]:
        """The keys under which the engine records writes of the state `expr` reads."""
        if isinstance(expr, cst.Subscript):  # `self.hparams["ent_coef"]`
            return item_keys(self._state_keys(expr.value, scope), entry_name(expr, scope))
        if isinstance(expr, cst.Name):
            keys: list[tuple] = [("name", scope.function.key, expr.value)]
            container = loop_container(scope, expr.value)
            if container is not None:  # `group` of `for group in self.param_groups`: an entry of it
                keys += item_keys(self._state_keys(container, scope), ANY_ITEM)
            if expr.value not in scope.env:  # a global or a closure variable
                body = scope.module.body_function
                keys += [("name", body.key, expr.value), ("global", scope.module.name, expr.value), ("cell", expr.value)]
                enclosing = scope.function.parent
                while enclosing is not None and enclosing is not body:  # `pos += 1` in the function that made the closure
                    keys.append(("name", enclosing.key, expr.value))
                    enclosing = enclosing.parent
            return keys
        base = evaluate(expr.value, scope) if isinstance(expr, cst.Attribute) else None
        if base is None or base.kind not in (Kind.OBJECT, Kind.UNKNOWN):
            return []
        name = expr.attr.value  # type: ignore[attr-defined]
        classes = [t for t in base.targets if isinstance(t, ClassInfo)] if not base.is_class else []
        if not classes:
            return [attribute_key(name, ANY_OWNER)]
        if isinstance(expr.value, cst.Name) and expr.value.value == scope.self_name and not scope.env.get(expr.value.value):  # type: ignore[attr-defined]
            # `self` of a base-class method with no known receiver: any subclass's object (its `update()` writes).
            classes += [sub for cls in classes for sub in self.project.subclasses(cls) if sub not in classes]
        # Written on this class or a base class, or on an object whose class is unknown.
        return [attribute_key(name, k.qualname) for cls in classes for k in self.project.mro(cls)] + [attribute_key(name)]

    def _assignments(self, function: FunctionInfo) -> dict[str, list[cst.BaseExpression]]:
        """The values a function assigns to each of its local names, and (under _RETURNED) returns."""
        return self.project.cached(("assignments", function.key), lambda: _assignments(function), {})

    def _changed_attribute(self, cls: ClassInfo, attr: str, any_write: bool = False, scope: Optional["Scope"] = None) -> Optional[str]:
        """How a method of the class changes the attribute: a Change at the write, which `runs`
        when code is seen calling that method (the first such write, else the first write)."""
        setup = self._setup_methods(cls)
        found: list[Change] = []
        for klass in self.project.mro(cls):
            for write in klass.attr_writes(attr):
                if write.method.name in _SETUP_METHODS or id(write.method) in setup:
                    continue
                if self.engine.called_only_before_replays(write.method):
                    continue  # `model.set_scale(0.5)` while building, before the capture
                if write.augmented or _counts_up(write):
                    text = f"is updated in {write.method.qualname}()"
                elif self._transient(write.method, write.node) or configures(write.method) or _stores_own_argument(write):
                    continue
                elif any_write or _is_toggle(write.value):
                    text = f"is reassigned in {write.method.qualname}()"
                else:
                    continue
                if _private(write.method) and scope is not None and not self._called_between_replays(klass, attr, scope.function):
                    # A private method is no API a user calls between replays: only the project's
                    # own calls run it, and none is seen between replays (Transformer Engine's
                    # `_create_columnwise()` of a quantized tensor).
                    continue
                found.append(self._written(text, write.method, write.node, f"changes `{attr}`", scope))
        if len(found) > 1:  # asking which runs searches for calls: only where there is a choice
            return next((change for change in found if change.runs), found[0])
        return found[0] if found else self._mutated_attribute(cls, attr, setup, scope)

    def _written(self, text: str, method: FunctionInfo, node: cst.CSTNode, note: str, scope: Optional["Scope"]) -> Change:
        runs = (lambda: self._runs(method, scope.function)) if scope is not None else True
        return Change(text, [Location(method.module, node, f"{note} (in {method.qualname}())")], runs, method)

    def _mutated_attribute(self, cls: ClassInfo, attr: str, setup: set[int], scope: Optional["Scope"] = None) -> Optional[str]:
        """A host list attribute grown or shrunk outside setup (`self.history.append(t)`):
        `len(self.history)` read at capture keeps its value then."""
        classes = self.project.mro(cls)
        if not any(_is_list(write.value) for klass in classes for write in klass.attr_writes(attr)):
            return None  # an object with a `pop()` of its own (Transformer Engine's wgrad store)
        for klass in classes:
            for method in klass.methods.values():
                if method.name in _SETUP_METHODS or id(method) in setup or configures(method) or self.engine.captures_in(method):
                    continue  # setup, or a capture that builds the state its graph reads
                if method.outline is not None and attr not in method.outline.facts.names:
                    continue  # not even named there: no reason to parse it
                if _mutates(method, attr) and not self.engine.called_only_before_replays(method):
                    return self._written(f"is changed in place in {method.qualname}()", method, method.node, f"changes `{attr}` in place", scope)
        return None

    def _transient(self, function, node: cst.CSTNode) -> bool:
        """A write that leaves no change behind: lazy initialisation, or state saved and put back."""
        if id(node) in initialised_once(self.project, function):
            return True
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [getattr(node, "target", None)]
        restored = restored_state(self.project, function)
        return any(target is not None and code_of(target, 400) in restored for target in targets)

    def _setup_methods(self, cls: ClassInfo) -> set[int]:
        """Methods only `__init__` calls (`self._build()`, `self.reset_parameters()`): they run before any capture."""
        return self.project.cached(("setup-methods", id(cls.node)), lambda: self._scan_setup(cls), set())

    def _scan_setup(self, cls: ClassInfo) -> set[int]:
        calls: dict[str, set[str]] = {}  # method -> methods it calls on self
        for klass in self.project.mro(cls):
            for method in klass.methods.values():
                if method.outline is not None:  # known without parsing the method
                    if method.outline.self_calls is not None:
                        calls.setdefault(method.name, set()).update(method.outline.self_calls)
                elif method.params and isinstance(method.node, cst.FunctionDef):
                    me = method.params[0].name.value
                    called = {
                        n.func.attr.value for n in descendants(method.node)
                        if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)
                        and isinstance(n.func.value, cst.Name) and n.func.value.value == me
                    }
                    calls.setdefault(method.name, set()).update(called)
        # Configuration API (`set_aux_layers()`) is setup too: a helper only it calls
        # (`self._cache_layout()`) runs when the object is configured, not between replays.
        setup = {name for name in calls if name in _SETUP_METHODS or configuring_name(name)}
        changed = True
        while changed:  # a method is setup when every method calling it is setup
            changed = False
            for name in calls:
                callers = {c for c, callees in calls.items() if name in callees}
                if name not in setup and callers and callers <= setup:
                    setup.add(name)
                    changed = True
        return {id(m) for k in self.project.mro(cls) for m in k.methods.values() if m.name in setup}

    def _changed_globals(self, module: ModuleInfo) -> dict[str, str]:
        key = ("globals-changed", module.name)
        return self.project.cached(key, lambda: self._scan_globals(module), {})

    def _scan_globals(self, module: ModuleInfo) -> dict[str, str]:
        found: dict[str, str] = {}
        functions = module.all_functions()
        for function in functions:
            if function.outline is not None and not (function.outline.mentions(("global",))
                                                     and function.outline.facts.declares_global):
                continue  # nothing to find, and no reason to parse it (or walk its `ast`: most never say `global`)
            declared: set[str] = set()
            # `if _ctx is None: _ctx = make()` fills a global once (lazy initialization, a
            # memo): it never flips between replays, so those writes are no state changes.
            declared_lazy = _tested_against_none(function.node)
            for node in descendants(function.node):
                if isinstance(node, cst.Global):
                    declared.update(n.name.value for n in node.names if n.name.value not in declared_lazy)
                elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name):
                    if node.target.value in declared:
                        found.setdefault(node.target.value, self._global_write(f"is updated in {function.qualname}()", function, node))
                elif isinstance(node, cst.Assign) and not configures(function):
                    for target in node.targets:
                        for leaf in assigned_names(target.target):
                            if isinstance(leaf, cst.Name) and leaf.value in declared:
                                found.setdefault(leaf.value, self._global_write(f"is reassigned in {function.qualname}()", function, node))
        return found

    def _global_write(self, text: str, function: FunctionInfo, node: cst.CSTNode) -> Change:
        """A `global` write: it runs between calls when something calls its function."""
        location = Location(function.module, node, f"changes `{code_of(assigned_target(node))}` (in {function.qualname}())")
        return Change(text, [location], lambda: bool(self.engine.parameter_values.call_sites(function)), function)


_RETURNED = "<return>"


def fed_by_caller(change: Change) -> bool:
    """Whether every write a change names stores what the writer's caller hands it
    (`self.temperature = params["temperature"]` in `update(self, params)`): a new value each
    time the loop calls it, not one the program computes, which may be the same every time
    (a rotary scaling that every init function returns as 1.0)."""
    function = change.by
    if function is None or not isinstance(function.node, cst.FunctionDef):
        return False
    params = {p.name.value for p in function.params[1:]} if function.is_method else {p.name.value for p in function.params}
    writes = [site.node for site in change.sites if isinstance(site.node, (cst.Assign, cst.AnnAssign))]
    values = [w.value for w in writes if w.value is not None]
    return bool(values) and len(values) == len(writes) and all(_root_name(v) in params for v in values)


def _root_name(expr: cst.BaseExpression) -> Optional[str]:
    """The name an argument-derived value starts from: `params` in `params["temperature"]`,
    `cfg.scale`, `float(t)`."""
    while True:
        if isinstance(expr, (cst.Subscript, cst.Attribute)):
            expr = expr.value
        elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in ("float", "int") and len(expr.args) == 1:
            expr = expr.args[0].value
        else:
            return expr.value if isinstance(expr, cst.Name) else None


def rebinds(change: Change) -> bool:
    """Whether the writes a change names assign the state anew (not `+=`, which a tensor does in place)."""
    writes = [site.node for site in change.sites if isinstance(site.node, (cst.Assign, cst.AugAssign, cst.AnnAssign))]
    return bool(writes) and all(not isinstance(w, cst.AugAssign) for w in writes)


def assigned_target(node: cst.CSTNode) -> cst.BaseExpression:
    return node.targets[0].target if isinstance(node, cst.Assign) else node.target  # type: ignore[attr-defined]


def _write_in(function: FunctionInfo, expr: cst.BaseExpression) -> Optional[cst.CSTNode]:
    """The statement of `function` itself that writes the state `expr` reads (an attribute, a
    name or an entry of the same name), or None (written in a function it calls)."""
    container = expr.value if isinstance(expr, cst.Subscript) else expr
    name = container.attr.value if isinstance(container, cst.Attribute) else getattr(container, "value", None)
    if not isinstance(function.node, cst.FunctionDef) or not isinstance(name, str):
        return None
    for node in descendants(function.node):
        if isinstance(node, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            for leaf in (leaf for target in targets for leaf in assigned_names(target)):
                leaf = leaf.value if isinstance(leaf, cst.Subscript) else leaf
                if (leaf.attr.value if isinstance(leaf, cst.Attribute) else getattr(leaf, "value", None)) == name:
                    return node
    return None


def _is_list(value: Optional[cst.BaseExpression]) -> bool:
    """`[]`, `[...]`, a list comprehension, `list(...)` or `deque(...)`."""
    if isinstance(value, (cst.List, cst.ListComp)):
        return True
    return isinstance(value, cst.Call) and (code_of(value.func) in ("list", "deque", "collections.deque"))


def _mutates(method: FunctionInfo, attr: str) -> bool:
    """Whether the method grows or shrinks the list `self.<attr>` in place (the vocabulary's
    `host_effect.container_writes`, as the checker reads them: item assignment and dict methods,
    which on vLLM and SGLang fill caches on first use, do not count)."""
    if not method.params or not isinstance(method.node, cst.FunctionDef):
        return False
    me, growing = method.params[0].name.value, vocabulary.names("host_effect.container_writes")
    return any(
        isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in growing
        and self_attr(node.func.value, me) == attr
        for node in descendants(method.node)
    )


def _assignments(function: FunctionInfo) -> dict[str, list[cst.BaseExpression]]:
    found: dict[str, list[cst.BaseExpression]] = {}
    for node in descendants(function.node):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            found.setdefault(node.targets[0].target.value, []).append(node.value)
        elif isinstance(node, cst.AnnAssign) and node.value is not None and isinstance(node.target, cst.Name):
            found.setdefault(node.target.value, []).append(node.value)
        elif isinstance(node, cst.Return) and node.value is not None:
            found.setdefault(_RETURNED, []).append(node.value)
    return found


def _tested_against_none(function: cst.CSTNode) -> set[str]:
    """Globals a function initializes once: compared by identity with None or a sentinel
    (`if _ctx is None:`, `if _backend is _UNRESOLVED:`), or a once-flag only ever set to True
    (`if not _done: _done = True`, `if _warned: return` then `_warned = True`)."""
    names: set[str] = set()
    negated: set[str] = set()
    for node in descendants(function):
        if isinstance(node, cst.Comparison) and isinstance(node.left, cst.Name):
            for part in node.comparisons:
                if isinstance(part.operator, (cst.Is, cst.IsNot)) and isinstance(part.comparator, cst.Name):
                    names.add(node.left.value)
        elif isinstance(node, cst.If) and isinstance(node.test, cst.UnaryOperation) and isinstance(node.test.operator, cst.Not):
            if isinstance(node.test.expression, cst.Name):
                negated.add(node.test.expression.value)
        elif isinstance(node, cst.If) and isinstance(node.test, cst.Name):
            negated.add(node.test.value)  # `if _warned: return` before `_warned = True`
    if negated:
        writes: dict[str, set[str]] = {}
        for node in descendants(function):
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    if isinstance(target.target, cst.Name):
                        written = node.value.value if isinstance(node.value, cst.Name) else "?"
                        writes.setdefault(target.target.value, set()).add(written)
        names |= {name for name in negated if writes.get(name) == {"True"}}
    return names
