"""The static checker's engine: discover captures, walk what they reach, collect hits.

Three phases over the parsed modules:
1. discover: walk every function of the modules that may capture, recording
   capture sites, project capture helpers, and what regions read and write;
2. regions: breadth-first from each capture, walk its region and every project
   function it reaches (shortest call chain first), running the region rules;
3. replay: walk the code that runs between replays, running the replay rules.

The engine knows rules only through their `nodes` and `scope`.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Iterator, Optional, Sequence

import libcst as cst

from cglint.engine import captures, programs
from cglint.engine.blocks import Blocks
from cglint.engine.callers import ParameterValues
from cglint.engine.captures import Capture, CaptureKind, TraceStep
from cglint.engine.definitions import ClassInfo, FunctionInfo, ModuleInfo, self_attr
from cglint.engine.warmup_only import cached_on_first_use
from cglint.engine.project import Project
from cglint.engine.reach_graph import ReachGraph, marker_node
from cglint.engine.replay_writes import (
    ANY_CONTAINER, ANY_ITEM, ANY_OWNER, ITEM, argument_keys, attribute_key, attribute_write_keys, entry_name, item_keys, loop_container,
    callees_of, owners, reachable, restored_state, restores_on_exit, setter_scope, writes_of,
)
from cglint.engine.scope import Scope, function_values, initial_env
from cglint.engine.state import Change, StateFacts
from cglint.engine.syntax import call_method, called_names, callee_name, calls_in, code_of, decorator_callee, descendants, dotted_name, identifiers
from cglint.engine.values import TENSOR, Kind, Value, evaluate, output_root
from cglint.engine.walk import Mode, Walker
from cglint.rule import CAPTURE, REGION, REPLAY, Hit, Rule, applies

# Names that any function starting a region, replaying a graph or defining a capture helper uses.
CAPTURE_NAMES = frozenset(
    {"graph", "CUDAGraph", "make_graphed_callables", "capture_begin", "capture_end", "replay", "compile", "optimize", "contextmanager"}
)
# Steps of the longest call chain followed from a capture site (the site is the first step).
# A function is walked once per set of argument values, so this bounds only chains whose
# values change at every call (`f(n - 1)` with `n` known). The longest chain on the
# real-world bench (bench/realworld) has 13 steps, in Transformer Engine (the fixtures', 7):
# 24 is about twice that.
MAX_TRACE_STEPS = 24
# How many files that construct a class (`Cls(` in their text) are walked for the arguments
# they pass. On the fixtures and the real-world bench 21 classes are constructed in more, up
# to diffusers' `Attention(` in 100 files: searching up to 64 changed no finding and made
# diffusers' check 70% slower.
MAX_CONSTRUCTING_FILES = 8
# How many subclasses a class may have for their `super().__init__(...)` calls to be read as
# constructions of it: a base with more (the root of a model zoo) gets no single constant
# from them anyway, and asking each for its own constructions cascades through the hierarchy.
MAX_SUBCLASS_CONSTRUCTIONS = 3


def _raise(module: ModuleInfo, exc: BaseException) -> None:
    raise exc


@dataclass(eq=False)
class Job:
    function: FunctionInfo
    args: dict[str, Value]
    capture: Capture
    trace: tuple[TraceStep, ...]
    marker: Optional[cst.CSTNode] = None  # only this region of the function is captured; None: all of it
    at_call: bool = False  # `args` are every argument of one call (left-out parameters hold their defaults)

    @property
    def node(self) -> Hashable:
        """The job's node in the reach graph: the captured block, or the whole function."""
        return marker_node(self.marker) if self.marker is not None else self.function.key


@dataclass(frozen=True)
class RawHit:
    """A rule hit before positions are resolved."""

    rule: Rule
    module: ModuleInfo
    node: cst.CSTNode
    details: dict
    capture: Optional[Capture]
    trace: tuple[TraceStep, ...]
    function: FunctionInfo


@dataclass
class Helper:
    """What a project function does when called: capture its `with` body or its callable arguments."""

    name: str = ""  # the function's qualified name (the region kind says "capture helper NAME")
    context: bool = False
    callable_params: set = field(default_factory=set)


class Engine:
    def __init__(
        self,
        project: Project,
        rules: Sequence[Rule],
        capture_functions: Iterable[str] = (),
        captured: Iterable[str] = (),
        on_error: Callable[[ModuleInfo, BaseException], None] = _raise,
    ):
        self.project = project
        self.on_error = on_error
        self._modules: list[ModuleInfo] = []
        self.region_rules = _by_node_type(r for r in rules if r.scope == REGION)
        self.replay_rules = _by_node_type(r for r in rules if r.scope == REPLAY)
        self.capture_rules = _by_node_type(r for r in rules if r.scope == CAPTURE)
        self.capture_functions = set(capture_functions)
        self.captured = list(captured)
        self._resolved_entries: set[tuple[str, str]] = set()  # ("captured" | "capture-functions", name)
        self.state = StateFacts(project, self)
        self.hits: list[RawHit] = []
        self.reach_graph = ReachGraph()
        self._captured_keys: Optional[set] = None  # keys of the functions any capture reaches
        self._replaying_args: dict[Any, dict[str, Value]] = {}  # function key -> replaying callables passed to it
        self.parameter_values = ParameterValues(self)
        self._seen_hits: set = set()
        self._captures: dict[tuple, Capture] = {}
        self._capture_hosts: set[int] = set()  # id() of the functions captures are written in (captures_in)
        self._discovered: set = set()  # function keys, and ("with-replaying-args", key)
        self._helpers: dict[int, Helper] = {}
        self._yields: set[int] = set()
        self._context_factories: dict[int, FunctionInfo] = {}  # functions returning `torch.cuda.graph(...)`
        self._param_calls: dict[int, set[str]] = {}
        self._replayers: dict[int, FunctionInfo] = {}  # functions that call replay() or a compiled function
        self._compiled_names: set[str] = set()
        self._host_writes: dict[tuple, list] = {}
        self._region_reads: dict[int, set[str]] = {}  # id(class) -> `self.` attributes captured code read
        self._callers_index: Optional[tuple[int, tuple[dict[int, list], dict[int, list]]]] = None  # (host calls known, _host_call_index())
        self._drivers: set[int] = set()  # replay only through calls of functions that replay
        self._replaying_calls: dict[int, set[int]] = {}  # function key -> ids of its calls of graphed callables
        self._lazy_capturers: set[int] = set()  # functions that capture in first-call-only branches
        self._eager_capturers: set[int] = set()  # and those that capture on every call
        self._host_keys: Optional[tuple[int, set]] = None  # (captures known, their host functions' keys)
        self._capturing_callers: dict[int, FunctionInfo] = {}  # functions that capture through a call
        self._host_calls: list[tuple] = []  # (caller, callees or None, call, env, after_capture)
        self._calls_by_caller: dict[int, list[tuple]] = {}  # caller key -> (resolved callees, call)
        self._replay_writes: Optional[dict[tuple, list[tuple]]] = None  # _writes_between_replays
        self._replay_writes_state: tuple = ()  # (_between_state() before, after, host calls taken in)
        self._host_resolved: dict[int, list] = {}  # host call index -> its callees, resolved again (one epoch)
        self._host_resolved_epoch = -1
        self._runners: Optional[tuple] = None  # (state, runner_methods, runner callers' keys)
        self._preludes: Optional[tuple] = None  # (replayers counted, {key: method}) of _replay_preludes
        self._deferred: dict[int, tuple] = {}
        self._constructions: dict[int, list] = {}
        self._owners: dict[tuple, bool] = {}
        self._construction_search: set[int] = set()
        project.find_constructions_with(self.constructions, self.note_construction)
        project.find_parameters_with(self.parameter_values.of)
        self._names = set(CAPTURE_NAMES) | {n.rsplit(".", 1)[-1] for n in self.capture_functions}
        self._queue: deque[Job] = deque()
        self._jobs_seen: set = set()
        self._order: dict[int, tuple] = {}
        self._sites: Optional[dict[int, Capture]] = None
        self._callers: dict[int, list] = {}
        self._capturing_call_args: dict[int, dict[int, dict[str, Value]]] = {}
        self._module_names: dict[int, tuple[int, set[str]]] = {}  # id(module) -> (len(_names), names)
        self._blocks: dict[int, Blocks] = {}

    # --- driver ------------------------------------------------------------
    def discover_modules(self, modules: Iterable[ModuleInfo], names: Iterable[str] = ()) -> None:
        """Phase 1 for these modules, and again for functions of known modules that use `names`
        (capture helpers found since)."""
        self._names |= set(names)
        for module in modules:
            if module not in self._modules:
                self._modules.append(module)
        with self.project.capturing_modules_only():
            for module in self._modules:
                self._guarded(module, lambda: self._discover_module(module))

    def _identifiers(self, function: FunctionInfo) -> frozenset:
        # From the `ast` outline where there is one: looking at names must not parse bodies.
        return function.outline.facts.names if function.outline is not None else identifiers(function.node)

    def _calls_capturing(self, function: FunctionInfo) -> bool:
        """Whether the function calls a capture form, replay() or a capture helper."""
        names = self._capture_names(function.module)
        if function.outline is not None and not function.outline.mentions(names):
            return False  # not even in its text
        return bool(self.called(function) & names)

    def _capture_names(self, module: ModuleInfo) -> set[str]:
        """The names a call of a capture form goes by in `module`: the forms' and helpers'
        own, and what the module imports them as (`from torch.cuda import graph as capture_graph`).
        Asked for every function of a module: kept until helpers add names."""
        known = self._module_names.get(id(module))
        if known is None or known[0] != len(self._names):
            aliases = {local for local, qualified in module.imports.items() if qualified.rpartition(".")[2] in self._names}
            known = self._module_names[id(module)] = (len(self._names), self._names | aliases)
        return known[1]

    def called(self, function: FunctionInfo) -> frozenset:
        """What the function calls or is decorated with, by last name. Every capture form is
        a call (`torch.cuda.graph(g)`, `g.replay()`, `helper()`), and torch's own code says
        `graph` everywhere without calling it (`gm.graph`): names alone would walk it all."""
        if function.outline is not None:
            return function.outline.facts.called
        statements = function.module.statements if function.qualname == "<module>" else None
        if statements is not None:
            return statements.walked_calls  # without parsing the module's code
        return called_names(function.node)

    @property
    def modules_left_out(self) -> bool:
        """Whether walks run now, in discovery, without the modules that hold no capture form
        (Project.capturing_modules_only): what they resolve may change once every module loads."""
        return self.project.only_capturing

    def walk_again_with_every_module(self, function: FunctionInfo, env: dict[str, Value]) -> None:
        """What a walk found may depend on modules: if this one runs while modules are left out,
        walk the function again once every module can load."""
        if self.modules_left_out:
            self._deferred.setdefault(function.key, (function, env))

    def _resolve_deferred(self) -> None:
        """Walk again, with every module available, the functions whose capture targets need them."""
        deferred, self._deferred = self._deferred, {}
        for function, env in deferred.values():
            self._guarded(function.module, lambda: Walker(self, function, dict(env), Mode.DISCOVER).run())

    def run(self) -> list[RawHit]:
        """Phases 2 and 3, after discovery."""
        self._replay_writes = None  # asked while discovering, it resolved calls without every module
        self._resolve_deferred()
        self._configured_captures(self._modules)
        for capture in list(self._captures.values()):
            self._start(capture)
        while self._queue:
            job = self._queue.popleft()
            env = initial_env(self.project, job.function, job.args, job.at_call)
            self._guarded(job.function.module, lambda: Walker(self, job.function, env, Mode.REGION, job).run())
        if self.replay_rules or self.capture_rules:
            for function in self._replay_candidates():
                env = initial_env(self.project, function, self._replaying_args.get(function.key))
                self._guarded(function.module, lambda: Walker(self, function, env, Mode.REPLAY).run())
        return [hit for hit in self.hits if not self._changed_by_capture_itself(hit)]

    def _changed_by_capture_itself(self, hit: RawHit) -> bool:
        """Whether every change a hit blames is made by captured code (a forward that updates
        its own attribute, run again eagerly between replays; a sibling graph's loop body):
        such a write is CG505's concern, at the write, not a change made between replays."""
        changes = [value for value in hit.details.values() if isinstance(value, Change)]
        if not changes or any(change.flips for change in changes):
            return False  # a flag captured code flips: no counter for CG505, the branch is the finding
        changers = [change.by for change in changes]
        if any(function is None for function in changers):
            return False
        if self._captured_keys is None:
            self._captured_keys = {key for capture in self._captures.values() for key in self.reach_graph.reach(capture)[0]}
        return all(function.key in self._captured_keys for function in changers if function is not None)

    def helper_names(self) -> set[str]:
        """Names of project functions found to capture when called (for a second file scan)."""
        with self.project.capturing_modules_only():
            for capture in list(self._captures.values()):
                if capture.function is not None:
                    self.helper(capture.function)
            for function in list(self._context_factories.values()):
                self.helper(function)
        helpers = {h.name.rsplit(".", 1)[-1] for h in self._helpers.values() if h.context or h.callable_params}
        return helpers | self._compiled_names | self._capturing_function_names() | self._replaying_function_names()

    def _capturing_function_names(self) -> set[str]:
        """Functions that capture their own body when called (`engine.capture_all()`, a runner
        built with `Runner(model)`): their callers hold the replay loop, where setters run
        between replays (`model.set_temperature(t)` in a serving loop)."""
        names = set()
        for capture in self._captures.values():
            function = capture.function
            if function is None or function.qualname == "<module>":
                continue
            if function.name == "__init__" and function.cls is not None:
                names.add(function.cls.name)
            elif not function.name.startswith("__") and function.name not in _GENERIC_NAMES:
                names.add(function.name)
        return names

    def _replaying_function_names(self) -> set[str]:
        """Functions that replay a graph captured elsewhere (`runner.execute_model(x)`): their
        callers run between replays too (a serving engine's `step()` updating the sampling
        parameters, then calling the runner)."""
        return {
            f.name for f in self._replayers.values()
            if f.qualname != "<module>" and not f.name.startswith("__") and f.name not in _GENERIC_NAMES and not self._captures_here(f)
        }

    def _guarded(self, module: ModuleInfo, work: Callable[[], None]) -> None:
        # One broken construct must not cost the user the findings of every other file.
        try:
            work()
        except RecursionError as exc:
            self.on_error(module, exc)
        except Exception as exc:  # noqa: BLE001 - reported as CG000 with the file
            self.on_error(module, exc)

    def _discover_module(self, module: ModuleInfo) -> None:
        # Module-level code, like a function, starts a region only by calling a capture form,
        # replay() or a capture helper; torch's capturing modules have ~60 statements of it
        # each (imports, registrations), a third of discovery there. Asked again once helpers
        # are known (their names are then among the names called).
        if module.statements is None or not self.called(module.body_function).isdisjoint(self._capture_names(module)):
            self.discover(module.body_function, {})
        for function in module.all_functions():
            # Walking a function costs far more than looking at its calls: only functions that
            # call a capture form, replay() or a capture helper can start a region.
            if not self._calls_capturing(function):
                continue
            self.discover(function, initial_env(self.project, function))
            decorator = captures.compile_decorator(function, Scope(self.project, function))
            if decorator is not None:
                self.capture_callables(function, decorator.decorator, CaptureKind.COMPILED, [function], tensor_args=True)
                self._compiled_names.add(function.name)

    def discover(self, function: FunctionInfo, env: dict[str, Value]) -> None:
        if function.key in self._discovered:
            return
        self._discovered.add(function.key)
        Walker(self, function, env, Mode.DISCOVER).run()

    def discover_with(self, function: FunctionInfo, args: dict[str, Value]) -> None:
        """Walk a function given replaying callables as arguments (once more, if it was walked without them)."""
        key = ("with-replaying-args", function.key)
        if key not in self._discovered:
            self._discovered.add(key)
            self._discovered.add(function.key)
            self._replaying_args[function.key] = args  # its replay walk needs them too (CG956 on `decode_fn(...)`)
            self._guarded(function.module, lambda: Walker(self, function, initial_env(self.project, function, args), Mode.DISCOVER).run())

    def _configured_captures(self, modules: list[ModuleInfo]) -> None:
        for name in self.captured:
            for function in self._functions_named(name, modules):
                self._resolved_entries.add(("captured", name))
                self.capture_callables(None, function.node, CaptureKind.CONFIGURED, [function])

    def unresolved_entries(self) -> list[tuple[str, str]]:
        """The configuration's `captured` and `capture-functions` entries that named no
        function defined in the parsed modules and no call made in them (CG003)."""
        for module in self._modules:
            for function in module.all_functions():
                self._is_configured(function)
        entries = [("captured", n) for n in self.captured] + [("capture-functions", n) for n in sorted(self.capture_functions)]
        return [entry for entry in entries if entry not in self._resolved_entries]

    def _functions_named(self, name: str, modules: list[ModuleInfo]) -> list[FunctionInfo]:
        found = self.project.resolve(name)
        if isinstance(found, FunctionInfo):
            return [found]
        # Also accept names relative to the module, like "Model.forward" or "decode_step".
        result = []
        for module in modules:
            for function in module.all_functions():
                if function.qualname == name or f"{module.name}.{function.qualname}" == name:
                    result.append(function)
        return result

    def _start(self, capture: Capture) -> None:
        if capture.marker is not None and capture.function is not None:
            args = self._caller_objects(capture.function)
            self._push(Job(capture.function, args, capture, (capture.site,), capture.marker), ("marker", id(capture.marker)))
        for target in capture.targets:
            args = _tensor_params(target) if capture.tensor_args else {}
            self._push(Job(target, args, capture, (capture.site,)), _job_key(target, args))

    def _push(self, job: Job, key: tuple) -> None:
        key += (job.capture.kind is CaptureKind.COMPILED,)  # compiled regions have their own rules: walked apart
        if key not in self._jobs_seen:
            self._jobs_seen.add(key)
            self._queue.append(job)

    def enqueue(self, function: FunctionInfo, args: dict[str, Value], parent: Job, step: TraceStep) -> None:
        # A cached function's body ran at warmup; at capture the cache answers (warmup_only.py).
        if len(parent.trace) < MAX_TRACE_STEPS and not _device_kernel(function) and not cached_on_first_use(function):
            self.reach_graph.call(parent.node, function, step)
            self._push(Job(function, args, parent.capture, parent.trace + (step,), at_call=True), _job_key(function, args, at_call=True))

    # --- discovery callbacks ---------------------------------------------------
    def capture_in(self, function: FunctionInfo, marker: cst.CSTNode, kind: CaptureKind, label: str, helper: str = "") -> Capture:
        key = ("in", id(marker))
        if key not in self._captures:
            step = TraceStep(function.module, marker, label)
            self._captures[key] = Capture(kind, step, function=function, marker=marker, host=function, helper=helper)
            self._capture_hosts.add(id(function))
        return self._captures[key]

    def capture_callables(
        self,
        function: Optional[FunctionInfo],
        site: cst.CSTNode,
        kind: CaptureKind,
        targets: list[FunctionInfo],
        tensor_args: bool = False,
        helper: str = "",
    ) -> None:
        if not targets and function is None:
            return
        # Kept with no project targets too (make_graphed_callables(nn.Linear(...))): capture rules check the site.
        module = targets[0].module if function is None else function.module
        key = ("callables", id(site))
        capture = self._captures.get(key)
        if capture is None:
            label = kind.value if function is None else code_of(site)
            capture = Capture(kind, TraceStep(module, site, label), tensor_args=tensor_args, host=function, helper=helper)
            self._captures[key] = capture
        capture.targets = tuple(dict.fromkeys(capture.targets + tuple(targets)))

    def note_yield_in_region(self, function: FunctionInfo) -> None:
        self._yields.add(function.key)

    def note_graph_context_factory(self, function: FunctionInfo) -> None:
        """`function` returns a graph capture context: a `with` over its call captures."""
        self._context_factories[function.key] = function

    def note_parameter_call(self, function: FunctionInfo, param: str) -> None:
        self._param_calls.setdefault(function.key, set()).add(param)

    def note_host_write(
        self, function: FunctionInfo, target: cst.BaseExpression, after_capture: bool, scope: Scope, statement: Optional[cst.CSTNode]
    ) -> None:
        """Remember names and attributes assigned outside regions (state that may change between replays)."""
        item = None
        if isinstance(target, cst.Subscript) and isinstance(target.value, (cst.Attribute, cst.Name)):
            container = evaluate(target.value, scope)
            if container.is_tensor:
                return  # `params.lengths[:] = n` writes into the tensor the graph reads: nothing is rebound
            # `engine.opts["scale"] = s` changes what `self.opts` holds; a slice or a computed
            # index of a container not known to be a host one changes some entry, not the binding
            # (`inference_params.lengths_per_sample[:] = seqlen` of a tensor whose class is unknown).
            item = entry_name(target, scope) or (None if container.is_host else ANY_ITEM)
            target = target.value
        if code_of(target, 400) in restored_state(self.project, function):
            return  # saved, changed and put back before the function returns
        if isinstance(target, cst.Name):
            keys: list[tuple] = [("name", function.key, target.value)]
            if target.value in function.declared_globals:  # `global SCALE` in main(), then `SCALE = s` in its replay loop
                keys.append(("global", function.module.name, target.value))
            iterated = loop_container(scope, target.value) if item is not None else None
            if isinstance(iterated, cst.Attribute):  # `for group in opt.param_groups: group["lr"] = lr`
                keys += item_keys(attribute_write_keys(iterated, scope), ANY_ITEM)
        elif isinstance(target, cst.Attribute):
            keys = attribute_write_keys(target, scope)
        else:
            return
        # A container named by a variable is typically handed around (`Sampler(net, hp)` keeps
        # `self.hp = hp`): its entry is that entry of whatever container a capture read.
        # A variable's string-named entry is that entry of any container a capture read (models
        # keep `self.cfg = cfg`); `shape[0] = n` of a local says nothing of another `x[0]`.
        shared = isinstance(target, cst.Name) and item is not None and not item.startswith("[") and item != ANY_ITEM
        for key in item_keys(keys, item, shared=shared):
            self._host_writes.setdefault(key, []).append((function, after_capture, statement))

    def note_host_call(self, caller: FunctionInfo, callees: list, call: cst.Call, env: dict, after_capture: bool) -> None:
        """Remember calls made outside regions: setters run between replays. A call the walk
        could not resolve is resolved again when first asked about (discovery runs before
        every module is loaded), with the caller's variables as they were at the call."""
        self._host_calls.append((caller, callees or None, call, env, after_capture))
        if callees:
            self._calls_by_caller.setdefault(caller.key, []).append((callees, call))
        # The writes between replays (_writes_between_replays) are looked at again, with this call.

    def note_mode_switch(self, function: FunctionInfo, after_capture: bool, receiver: Value) -> None:
        """`model.eval()` / `model.train()` outside regions: `self.training` of that object
        changes (of any object, where its class is unknown; a graph runner's `runner.eval()`
        is not its model's)."""
        for key in [attribute_key("training", owner) for owner in owners(receiver)] or [attribute_key("training")]:
            self._host_writes.setdefault(key, []).append((function, after_capture, None))

    def note_capture_call(self, function: FunctionInfo) -> None:
        """`function` captures through a call (`capture_graph(model, x)`): its code before
        that call runs before the capture."""
        self._capturing_callers[function.key] = function

    def between_replays(self, function: FunctionInfo, after_capture: bool, statement: Optional[cst.CSTNode] = None) -> bool:
        """Whether code of `function` (statement `statement`, where known) runs between
        replays: after a capture in it, or in a function that replays a graph captured
        elsewhere; in one that replays through calls, in a loop that makes them."""
        if after_capture:
            # Not once after its own capture in a helper that only captures (a capture-mode flag
            # reset, an offset put back, the graphed forward installed: setup before the first
            # replay); the code after a call of such a helper goes on to use the graph.
            if function.qualname == "<module>" or self.calls_replay(function) or self._called_in_replay_loop(function):
                return True
            # A caller of a capture helper that goes on to train or serve (`main()` capturing,
            # then calling `train()`, whose loop replays) a few calls down.
            return not self.captures_in(function) and self._replays_below(function)
        if not self.calls_replay(function) or self._captures_here(function):
            return False
        if function.key not in self._drivers:
            return True
        if statement is None:
            return False
        # In its replay loop; or before a replay when it is itself called from a replay loop
        # (a pipeline's `__call__` setting the guidance scale, run for each prompt).
        return self._in_replay_loop(function, statement) or (self._replay_after(function, statement) and self._called_in_replay_loop(function))

    def _replays_below(self, function: FunctionInfo) -> bool:
        return any(reached.key in self._replayers for reached in reachable(self.project, function))

    def _called_in_replay_loop(self, function: FunctionInfo) -> bool:
        return any(
            caller.key != function.key and self.calls_replay(caller) and self._in_replay_loop(caller, call)
            for call, caller in self._calls_of(function.key)
        )

    def _calls_of(self, key: int) -> list:
        """(call, caller) for each resolved host call of the function with this key."""
        return self._host_call_index()[0].get(key, [])

    def _host_call_index(self) -> tuple[dict[int, list], dict[int, list]]:
        """The host calls by callee key ((call, caller) of resolved calls) and by caller key
        (their positions in `_host_calls`), built again once more calls are known."""
        if self._callers_index is None or self._callers_index[0] != len(self._host_calls):
            by_callee: dict[int, list] = {}
            by_caller: dict[int, list] = {}
            for position, (caller, callees, call, _, _) in enumerate(self._host_calls):
                by_caller.setdefault(caller.key, []).append(position)
                for callee in callees or ():
                    by_callee.setdefault(callee.key, []).append((call, caller))
            self._callers_index = (len(self._host_calls), (by_callee, by_caller))
        return self._callers_index[1]

    def _in_replay_loop(self, function: FunctionInfo, node: cst.CSTNode) -> bool:
        """Whether the statement (or the call) is in a loop of `function` that replays."""
        index, replays, loops, _ = self._statement_order(function)
        position = index.get(id(node))
        if position is None:
            position = self._call_statements(function).get(id(node))
        if position is None:
            return False
        return any(start <= position <= end and any(start <= r <= end for r in replays) for start, end in loops)

    def _call_statements(self, function: FunctionInfo) -> dict[int, int]:
        """id(call) -> the position of the statement that makes it (statement order)."""
        def build() -> dict[int, int]:
            index = self._statement_order(function)[0]
            found: dict[int, int] = {}
            for node in descendants(function.node):
                if isinstance(node, cst.SimpleStatementLine) and id(node) in index:
                    found.update((id(call), index[id(node)]) for call in calls_in([node]))
            return found
        return self.project.cached(("call-statements", function.key), build, {})

    def runs_replay_rules(self, function: FunctionInfo, after_capture: bool, statement: Optional[cst.CSTNode] = None) -> bool:
        """Where rules about code between replays look: code between replays, and code that
        calls a graph runner's replaying method (`logits.append(runner.run(x))`). The second
        is matched by name where the runner's class is unknown, too loose to count its writes
        as changing state between replays: a `main()` of another script would reach them."""
        if self.between_replays(function, after_capture, statement) or self._is_prelude(function):
            return True
        if function.key in self._drivers:
            return False  # it replays through its calls: only its replay loops are between replays
        return function.key in self._runners_known()[1] and not self._captures_here(function)

    def _captures_here(self, function: FunctionInfo) -> bool:
        """It captures: a region, a callable it graphs or compiles (`make_graphed_callables`,
        whose replays follow in the same function), or a call of a capturing function. A
        runner that captures lazily (`if self.graph is None: self.capture()`, then replay())
        only replays once its first call is over: its code runs between replays then."""
        key = function.key
        if key in self._lazy_capturers and key not in self._eager_capturers:
            return False
        return self.captures_in(function) or key in self._capturing_callers or key in self._hosts()

    def note_capturer(self, function: FunctionInfo, lazily: bool) -> None:
        (self._lazy_capturers if lazily else self._eager_capturers).add(function.key)

    def _hosts(self) -> set:
        if self._host_keys is None or self._host_keys[0] != len(self._captures):
            # A compiled function captures when first called, not where it is compiled.
            hosts = {c.host.key for c in self._captures.values() if c.host is not None and c.kind is not CaptureKind.COMPILED}
            self._host_keys = (len(self._captures), hosts)
        return self._host_keys[1]

    def change_between_replays(
        self, key: tuple, reader: FunctionInfo, read: Optional[cst.CSTNode] = None
    ) -> Optional[tuple[FunctionInfo, Optional[cst.CSTNode]]]:
        """The function that changes this name or attribute, read by `reader` (in statement
        `read`), after a capture or around replay(), with the statement that writes (None for
        `model.eval()`)."""
        for function, after_capture, statement in (w for k in _matching(self._host_writes, key) for w in self._host_writes[k]):
            if key[0] == "name" and key[-1] in self.replay_selectors(function):
                continue  # `bs = pad(n); graphs[bs].replay()`: it picks a graph, each keeps its own value
            if function is reader and statement is not None and read is not None and self.runs_before(function, statement, read):
                continue  # set after one capture, before the next that reads it (triton's do_bench_cudagraph)
            if self.between_replays(function, after_capture, statement) and not self._separate_programs(function.module, reader.module):
                return function, statement
        return None

    def call_changing_between_replays(self, key: tuple, reader: FunctionInfo) -> Optional[tuple[FunctionInfo, cst.Call, FunctionInfo]]:
        """The function called between replays (a setter, `model.eval()`'s owner) that changes
        this state, as (that function, the call between replays, its caller)."""
        writes = self._writes_between_replays()
        return next((
            w for k in _matching(writes, key) for w in writes[k] if not self._separate_programs(w[0].module, reader.module)
        ), None)

    def _separate_programs(self, first: ModuleInfo, second: ModuleInfo) -> bool:
        return programs.separate_programs(self.project, first, second, self._is_program)

    def _is_program(self, module: ModuleInfo) -> bool:
        """A script: a `__main__` guard, or top-level code that captures or replays."""
        body = module.body_function
        return programs.has_main_guard(self.project, module) or self.captures_in(body) or self.calls_replay(body)

    def _writes_between_replays(self) -> dict[tuple, list[tuple]]:
        """State keys (replay_writes.py) that functions called between replays change, each with
        (the function, the call between replays, its caller).

        Made anew when host calls were added since it was made (walks keep adding them while
        rules ask for every read they look at). Where the captures, replayers and derived facts
        it was made with are unchanged, it is extended with the calls added since, in their
        order: what a new table would hold, without resolving and judging every call again."""
        writes = self._replay_writes
        done = self._replay_writes_state[-1] if writes is not None else 0
        if writes is not None and done == len(self._host_calls):
            return writes
        state = self._between_state()
        if writes is None or self._replay_writes_state[:2] != (state, state):
            writes, done = {}, 0
        capturing = {c.function.key for c in self._captures.values() if c.function is not None}
        for _, function, call, caller in self._host_callees(between=True, start=done):
            if restores_on_exit(self.project, function) and not self._with_body_replays(caller, call):
                continue  # `with lora_scale(model, s): model(x)` run eagerly, the scale put back
            changed = writes_of(self.project, function)
            if changed and any(f.key in capturing for f in reachable(self.project, function)):
                continue  # rebuilds the state and captures again (NeMo's `_graph_reinitialize`)
            for key in (*changed, *argument_keys(changed, function, call, caller)):
                writes.setdefault(key, []).append((function, call, caller))
        self._replay_writes = writes
        # Extended next time only if nothing it depends on changed while it was made.
        self._replay_writes_state = (state, self._between_state(), len(self._host_calls))
        return writes

    def _with_body_replays(self, function: FunctionInfo, call: cst.Call) -> bool:
        """Whether the `with` statement that enters `call` replays in its body (True where the
        call enters no `with`)."""
        node = function.node
        statement = next((w for w in descendants(node) if isinstance(w, cst.With) and any(i.item is call for i in w.items)), None) if node is not None else None
        if statement is None:
            return True
        index, replays, _, _ = self._statement_order(function)
        inside = [index[id(n)] for n in descendants(statement.body) if id(n) in index]
        return bool(inside) and any(min(inside) <= r <= max(inside) for r in replays)

    def _between_state(self) -> tuple:
        """What the answers of between_replays and the project's derived facts depend on; each
        part only grows (or, for the epoch, changes when those facts are dropped)."""
        return (self.project.epoch, len(self._captures), len(self._replayers), len(self._capturing_callers),
                len(self._drivers), len(self._lazy_capturers), len(self._eager_capturers))

    def called_only_before_replays(self, function: FunctionInfo) -> bool:
        """Seen called outside captures, and never between replays: a `set_scale()` run while
        the model is built, before the first capture (its writes are setup, not steady state)."""
        callers = {between for between, callee, _, _ in self._host_callees(named=function.name) if callee.key == function.key}
        if not callers:
            # No walk met a call: the calls the checked files make (a search), judged where they
            # are (`offloader.wrap_modules(...)` while a model is built). A caller that captures
            # may make it after its capture.
            callers = {self.between_replays(caller, self.captures_in(caller), call) for caller, call in self.parameter_values.call_sites(function)}
        return callers == {False}

    def _host_callees(self, between: Optional[bool] = None, named: Optional[str] = None, start: int = 0) -> Iterator[tuple]:
        """The project functions that host calls outside regions reach, each as (whether its
        caller runs between replays, the function, the call, the caller); only those callers
        (`between`), or only calls spelled with the name `named` (or not spelled with a name at
        all); the host calls from index `start` on. Resolving every host call of torch's tree
        was a tenth of its run."""
        host_calls = self._host_calls
        index = start - 1
        while index + 1 < len(host_calls):  # calls that resolving one adds (a walk) are looked at too
            index += 1
            caller, callees, call, env, after_capture = host_calls[index]
            in_loop = self.between_replays(caller, after_capture, call)
            if between is not None and in_loop != between:
                continue
            if callees is None:
                if named is not None and callee_name(call.func) not in (named, None):
                    continue
                callees = self._resolve_host_call(index)
            for function in callees:
                # A constructor builds a new object: the captured one keeps its state.
                if isinstance(function, FunctionInfo) and function.name not in ("__init__", "__post_init__"):
                    yield in_loop, function, call, caller

    def _resolve_host_call(self, index: int) -> list:
        """The callees of a host call the walk could not resolve, resolved again with every
        module that can be loaded now; once per call while the project's derived facts hold
        (the writes between replays are looked at again after every walk that adds a call)."""
        if self._host_resolved_epoch != self.project.epoch:
            self._host_resolved, self._host_resolved_epoch = {}, self.project.epoch
        found = self._host_resolved.get(index)
        if found is None:
            caller, _, call, env, _ = self._host_calls[index]
            # As the walk resolves calls: a module instance called runs its forward.
            found = self._host_resolved[index] = [function for function, _ in Walker(self, caller, dict(env), Mode.DISCOVER).callees(call)]
        return found

    def replay_receivers(self, function: FunctionInfo) -> list:
        """The graph expressions a function replays (`g`, `self.graphs[bs]`), and in a function
        that replays, the entries of containers it calls (`self._graphed[key](x)`, one graphed
        callable per key)."""
        def find() -> list:
            calls = [n for n in descendants(function.node) if isinstance(n, cst.Call)]
            found = [call_method(n)[0] for n in calls if captures.capture_method(n) == "replay"]  # type: ignore[index]
            if function.key in self._replayers:
                found += [n.func for n in calls if isinstance(n.func, cst.Subscript)]
            return found
        return self.project.cached(("replays", function.key, function.key in self._replayers), find, [])

    def _selector_exprs(self, function: FunctionInfo) -> list:
        """The expressions that pick the graph a function replays: the graph expressions and
        what the names in them are assigned (`key = (self.params.offset, bs)`)."""
        names = self.replay_selectors(function)
        return [*self.replay_receivers(function)] + [
            n.value for n in descendants(function.node)
            if isinstance(n, cst.Assign) and any(isinstance(t.target, cst.Name) and t.target.value in names for t in n.targets)
        ]

    def selecting_functions(self) -> frozenset:
        """Project functions whose result picks the graph replayed (`key =
        tuple(self.model.get_enabled_adapters())`, then `self._graphed[key](x)`), and those
        they call: the state they read selects a graph, each captured with its own."""
        def find() -> frozenset:
            found: set = set()
            for function in list(self._replayers.values()):  # resolving may discover more
                scope = setter_scope(self.project, function)
                for expr in self._selector_exprs(function):
                    for call in (n for n in [expr, *descendants(expr)] if isinstance(n, cst.Call)):
                        for callee in callees_of(self.project, scope, call):
                            found.update(f.key for f in reachable(self.project, callee))
            return frozenset(found)
        return self.project.cached(("selecting-functions", len(self._replayers)), find, frozenset())

    def selecting_attrs(self, cls: ClassInfo) -> set[str]:
        """Attributes of objects of `cls` that pick which graph is replayed: `self.` attributes
        of the replaying class (`key = self.do_cfg` then `self._graphs[key].replay()`, through a
        property one level), or of an object it holds (`key = (self.params.offset, ...)`, a
        graph per offset): each graph keeps its own value, so changing them picks another
        graph, not a stale one."""
        def find() -> set[str]:
            family = set(map(id, self.project.mro(cls)))
            found: set[str] = set()
            for function in self._replayers.values():
                if function.cls is None or not function.params:
                    continue
                me, exprs = function.params[0].name.value, self._selector_exprs(function)
                if id(function.cls) not in family:  # another class's runner: attributes of objects it holds
                    found.update(self._held_selectors(function, exprs, cls))
                    continue
                for expr in exprs:
                    for node in [expr, *descendants(expr)]:
                        attr = self_attr(node, me) if isinstance(node, cst.Attribute) else None
                        if attr is None:
                            continue
                        found.add(attr)
                        prop = self.project.method(cls, attr)
                        if prop is not None and prop.is_property and prop.params:
                            found.update(a for n in descendants(prop.node) if (a := self_attr(n, prop.params[0].name.value)) is not None)
            return found
        return self.project.cached(("selecting-attrs", id(cls), len(self._replayers)), find, set())

    def _held_selectors(self, function: FunctionInfo, exprs: list, cls: ClassInfo) -> set[str]:
        """`offset` in `(self.inference_params.offset, ...)` where `self.inference_params` is an
        object of `cls`: read with the runner's values."""
        attributes = [n for expr in exprs for n in [expr, *descendants(expr)]
                      if isinstance(n, cst.Attribute) and isinstance(n.value, cst.Attribute)]
        if not attributes:
            return set()
        scope = Scope(self.project, function, initial_env(self.project, function))
        return {n.attr.value for n in attributes
                if any(isinstance(t, ClassInfo) and cls in self.project.mro(t) for t in evaluate(n.value, scope).targets)}

    def replay_selectors(self, function: FunctionInfo) -> set[str]:
        """Names used inside the expression of the graph being replayed (`bs` in `graphs[bs].replay()`)."""
        return {n.value for r in self.replay_receivers(function) for n in [r, *descendants(r)] if isinstance(n, cst.Name) and n is not r}

    def noted_constructions(self, cls: ClassInfo) -> list[dict[str, Value]]:
        """The constructions of `cls` walks have met so far, without searching for more."""
        return self._constructions.get(id(cls), [])

    def note_construction(self, cls, args: dict[str, Value]) -> None:
        if not self.modules_left_out:  # values computed while modules were left out are unreliable
            self._constructions.setdefault(id(cls), []).append(args)

    def discover_calls_of(self, module: ModuleInfo, name: str) -> None:
        """Record (callers()) the calls spelled `name` in the functions of `module` that name it,
        each resolved with the calling function's locals as it assigns them. A scan of its own,
        not a discovery walk: a walk made while modules without a capture form were left out
        would have resolved fewer calls, and the answer must not depend on what ran first."""
        functions = [f for f in module.all_functions() if name in self._identifiers(f)]
        for function in [module.body_function, *functions]:
            key = ("calls-of", function.key, name)
            if key not in self._discovered:
                self._discovered.add(key)
                self._guarded(module, lambda: self._note_calls_named(function, name))

    def _note_calls_named(self, function: FunctionInfo, name: str) -> None:
        body = function is function.module.body_function
        env = {} if body else dict(Scope(self.project, function).assigned(function).env)
        walker = Walker(self, function, env, Mode.DISCOVER)
        for call in calls_in(function.body):
            if callee_name(call.func) == name:
                for callee, _ in walker.callees(call):
                    self.note_call(callee, function, call)

    def constructions(self, cls) -> list[dict[str, Value]]:
        """How `cls` is constructed anywhere in the checked files: the walks of the functions
        that name it record their calls (an engine's runner gets its model from a script)."""
        if id(cls) not in self._construction_search:
            self._construction_search.add(id(cls))
            for module in self.project.modules_mentioning(f"{cls.name}(", limit=MAX_CONSTRUCTING_FILES):
                functions = module.all_functions()
                self._guarded(module, lambda: Walker(self, module.body_function, {}, Mode.DISCOVER).run())
                for function in (f for f in functions if cls.name in self._identifiers(f)):
                    if self._may_drive(function):  # it may drive replays: discover it whole
                        calls = [call for call in calls_in(function.body) if callee_name(call.func) == cls.name]
                        env = {**initial_env(self.project, function), **self._constructor_params(function, calls)}
                        self._guarded(module, lambda: Walker(self, function, env, Mode.DISCOVER).run())
                    else:
                        self._guarded(module, lambda: self._note_constructions_named(function, cls.name))
            for method in cls.methods.values():  # `return cls(unet, scheduler)` in `from_config`
                if method.is_classmethod and method.params:
                    self._guarded(cls.module, lambda: self._note_constructions_named(method, method.params[0].name.value))
            self._subclass_constructions(cls)
        return self._constructions.get(id(cls), [])

    def _subclass_constructions(self, cls) -> None:
        """A subclass constructs its base too: `super().__init__(optimizer)` in its `__init__`,
        with what the subclass's own callers pass. Only for a base with few subclasses: each
        asks for its own constructions in turn, and a model zoo's base has hundreds."""
        subclasses = self.project.subclasses(cls) if "__init__" in cls.methods else []
        if len(subclasses) > MAX_SUBCLASS_CONSTRUCTIONS:
            return
        for sub in subclasses:
            init = sub.methods.get("__init__")
            if init is not None and "__init__" in self._identifiers(init):
                self._guarded(sub.module, lambda: self._note_constructions_named(init, "__init__"))

    def _constructor_params(self, function: FunctionInfo, calls: list[cst.Call]) -> dict[str, Value]:
        """`Block(timers)` inside `Model.__init__(self, timers)`: what Model's own callers pass;
        `InferenceEngine(model, cfg)` in `def init_inference(model)`: what its callers pass (for
        the parameters the constructions `calls` pass on as they are)."""
        if function.name == "__init__" and function.cls is not None:
            return Scope(self.project, function).constructor_objects(function.cls, function)
        passed = {a.value.value for call in calls for a in call.args if isinstance(a.value, cst.Name)}
        if function.cls is not None or function.parent is not None or not passed & {p.name.value for p in function.params}:
            return {}  # module-level factories only: searching every method's callers doubled SGLang's run
        return {name: value for name, value in self.project.parameters(function).items() if name in passed}

    def _may_drive(self, function: FunctionInfo) -> bool:
        """It captures or replays, or names a class whose methods do (a script that builds a
        pipeline and calls it for each prompt): what it does may drive replays."""
        if self._calls_capturing(function):
            return True
        module = function.module
        for name in self._identifiers(function):
            qualified = module.imports.get(name) or (f"{module.name}.{name}" if name in module.classes else None)
            cls = self.project.resolve(qualified, module) if qualified else None
            if isinstance(cls, ClassInfo) and self._owns_graphs(cls):
                return True
        return False

    def _owns_graphs(self, cls: ClassInfo) -> bool:
        """A method of `cls` (or of a base) captures or replays."""
        key = (id(cls), len(self._names))  # helpers found later add capture names
        if key not in self._owners:
            self._owners[key] = any(self._calls_capturing(m) for klass in self.project.mro(cls) for m in klass.methods.values())
        return self._owners[key]

    def _note_constructions_named(self, function: FunctionInfo, name: str) -> None:
        """The constructions spelled `name(...)` in `function`, with its locals as it assigns
        them: what the function does besides is not walked (a search, not a discovery walk)."""
        calls = [call for call in calls_in(function.body) if callee_name(call.func) == name]
        scope = function_values(self.project, function, self._constructor_params(function, calls), reading=calls)[0]
        walker = Walker(self, function, dict(scope.env), Mode.DISCOVER)
        for call in calls:
            walker.note_dataclass_construction(call)
            for callee, bound in walker.callees(call):
                walker.note_construction(callee, call, bound)

    def note_compiled_names(self, names: Iterable[Optional[str]]) -> None:
        """Names bound to callables compiled with CUDA graphs (`self.step = torch.compile(...)`,
        or an attribute a constructor stores one in): the functions that call them are found
        by a second scan, like capture helpers."""
        self._compiled_names.update(name for name in names if name)

    def is_compiled_name(self, name: Optional[str]) -> bool:
        return bool(name) and name in self._compiled_names

    def note_replay(self, function: FunctionInfo, through: bool = False, call: Optional[cst.Call] = None) -> None:
        """`function` replays a graph (at `call`, a call of a graphed callable, where given);
        `through` a call of a function that replays (a serving loop calling
        `runner.execute(x)`): then only its loops that make such calls run between replays
        (what it does before them may precede the capture itself)."""
        if call is not None:
            self._replaying_calls.setdefault(function.key, set()).add(id(call))
        if through and function.key not in self._replayers:
            self._drivers.add(function.key)
        elif not through:
            self._drivers.discard(function.key)
        self._replayers[function.key] = function

    def note_capturing_call_args(self, callee: FunctionInfo, call: cst.Call, args: dict[str, Value]) -> None:
        """The arguments a call outside regions passes to a function that may capture (a
        later walk of the same call, with every module loaded, replaces what discovery saw)."""
        self._capturing_call_args.setdefault(callee.key, {})[id(call)] = args

    def _caller_objects(self, function: FunctionInfo) -> dict[str, Value]:
        """The project objects a function that captures part of its body gets from its one
        caller (`capture_decode(state, x)` after `state = DecoderState(...)`), so that
        `state.decode_one(x)` in the region is followed. Objects only: the caller's numbers
        and flags would decide the region's branches for callers the checker cannot see."""
        sites = self._capturing_call_args.get(function.key, {})
        objects: dict[str, Value] = {}
        if len(sites) == 1:
            (args,) = sites.values()
            objects = {name: value for name, value in args.items() if value.kind == Kind.OBJECT and value.targets}
        # Parameters the one capturing call does not fill: what every caller passes (callers.py).
        for name, value in self.parameter_values.of(function).items():
            objects.setdefault(name, value)
        return objects

    def note_call(self, callee: FunctionInfo, caller: FunctionInfo, call: cst.Call) -> None:
        """Remember who calls a project function (rules ask what the callers do around the call)."""
        sites = self._callers.setdefault(callee.key, [])
        if all(c is not call for _, c in sites):
            sites.append((caller, call))

    def callers(self, function: FunctionInfo) -> list:
        """(caller, call) pairs seen while discovering; callers in modules never parsed are missing."""
        return list(self._callers.get(function.key, ()))

    def capture_at(self, node: cst.CSTNode) -> Optional[Capture]:
        """The capture whose site is this node (a `with` marker, capture_begin(), a capturing call)."""
        if self._sites is None:
            self._sites = {id(c.site.node): c for c in self._captures.values() if c.host is not None}
        return self._sites.get(id(node))

    def captures_of(self, function: FunctionInfo) -> list[Capture]:
        return [c for c in self._captures.values() if c.function is function]

    def all_captures(self) -> list[Capture]:
        return list(self._captures.values())

    def blocks(self, function: FunctionInfo) -> Blocks:
        key = function.key
        if key not in self._blocks:
            self._blocks[key] = Blocks(function.body)
        return self._blocks[key]

    def helper(self, function: FunctionInfo) -> Helper:
        """Whether calling `function` captures something (detected, or named in the configuration)."""
        key = function.key
        if key in self._helpers:
            return self._helpers[key]
        self._helpers[key] = Helper()  # recursion guard
        self.discover(function, initial_env(self.project, function))
        helper = Helper(name=function.qualname)
        if self._is_configured(function):
            # Named in `capture-functions`: whichever way it is used, it captures.
            helper.context = True
            helper.callable_params = {p.name.value for p in function.params}
        else:
            is_cm = captures.is_contextmanager(function, Scope(self.project, function))
            helper.context = (is_cm and key in self._yields) or key in self._context_factories
            helper.callable_params = self._param_calls.get(key, set())
        self._helpers[key] = helper
        return helper

    def may_capture(self, function: FunctionInfo) -> bool:
        """Whether a call of `function` can capture: it calls a capture form or helper (or is
        configured as one). Most calls fail this test, and their callees are never walked."""
        return self._calls_capturing(function) or self._is_configured(function)

    def _is_configured(self, function: FunctionInfo) -> bool:
        names = {function.qualname, f"{function.module.name}.{function.qualname}", function.name} & self.capture_functions
        self._resolved_entries.update(("capture-functions", name) for name in names)
        return bool(names)

    def is_configured_name(self, qualified: Optional[str]) -> bool:
        """A call target named in `capture-functions`, by full or last dotted name."""
        if not qualified or not self.capture_functions:
            return False
        names = {qualified, qualified.rsplit(".", 1)[-1]} & self.capture_functions
        self._resolved_entries.update(("capture-functions", name) for name in names)
        return bool(names)

    # --- facts for rules -----------------------------------------------------
    def captured_names(self, function: FunctionInfo) -> set[str]:
        names: set[str] = set()
        for capture in self._captures.values():
            if capture.function is function:
                names |= capture.names
        return names

    def captured_attrs(self, cls) -> set[str]:
        """Attributes of `cls` objects a capture of its class read or wrote."""
        return set().union(*(c.attrs for c in self.captures_of_class(cls)))

    def fed_attrs(self, cls) -> set[str]:
        """Attributes of objects of `cls` held by a capturing function's object that it reads
        into a local the capture uses (`input_ids = self.buffers.input_ids[:bs]`, read by the
        captured closure): static inputs, which a later rebinding leaves the graph without."""
        def find() -> dict[int, set[str]]:
            table: dict[int, set[str]] = {}
            for capture in list(self._captures.values()):
                function = capture.function
                if function is None or not isinstance(function.node, cst.FunctionDef):
                    continue
                used = set(capture.names)
                for node in descendants(function.node):  # a closure the region calls reads its locals
                    if isinstance(node, cst.FunctionDef) and node is not function.node and node.name.value in capture.names:
                        used |= identifiers(node)
                scope: Optional[Scope] = None
                for node in descendants(function.node):
                    if not (isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name)
                            and node.targets[0].target.value in used):
                        continue
                    value = node.value
                    while isinstance(value, cst.Subscript):  # a view of it: `[:bs]`
                        value = value.value
                    if isinstance(value, cst.Attribute) and isinstance(value.value, cst.Attribute):
                        scope = scope or Scope(self.project, function, initial_env(self.project, function))
                        for held in evaluate(value.value, scope).targets:
                            if isinstance(held, ClassInfo):
                                table.setdefault(id(held), set()).add(value.attr.value)
            return table
        empty: dict[int, set[str]] = {}
        return self.project.cached(("fed-attrs", len(self._captures)), find, empty).get(id(cls), set())

    def region_attrs(self, cls) -> set[str]:
        """Attributes on `self` of any method the regions ran (a rotary embedding's `inv_freq`)."""
        return set().union(*(self._region_reads.get(id(klass), ()) for klass in self.project.mro(cls)))

    def note_region_read(self, cls: ClassInfo, attr: str) -> None:
        self._region_reads.setdefault(id(cls), set()).add(attr)

    def graph_outputs(self, cls) -> set[str]:
        """`self.` attributes a capture of `cls` (or of its family) binds static outputs to."""
        return set().union(*(c.outputs for c in self.captures_of_class(cls)))

    def runner_methods(self) -> dict[str, list[FunctionInfo]]:
        """Methods that replay a graph whose outputs their class keeps on `self`, by name
        (`InferenceGraph.run`): each call overwrites the outputs the last call left there."""
        return self._runners_known()[0]

    def _runners_known(self) -> tuple[dict[str, list[FunctionInfo]], set[int]]:
        """runner_methods, and the functions of the capturing modules that call one of them:
        they hold a replay loop even where the runner's class cannot be told (`runner.run(x)`
        on an untyped parameter). Asked again when captures or replayers were added."""
        state = (len(self._captures), len(self._replayers))
        if self._runners is None or self._runners[0] != state:
            methods: dict[str, list[FunctionInfo]] = {}
            for function in self._replayers.values():
                if function.cls is not None and self.graph_outputs(function.cls):
                    methods.setdefault(function.name, []).append(function)
            callers = {
                function.key
                for module in (self._modules if methods else ())
                for function in [module.body_function, *module.all_functions()]
                if not self.called(function).isdisjoint(methods)
            }
            self._runners = (state, methods, callers)
        return self._runners[1], self._runners[2]

    def output_capture(self, cls: ClassInfo, attr: str) -> Optional[Capture]:
        """The capture of `cls` (or of its family) that binds its static output to `self.<attr>`."""
        return next((c for c in self.captures_of_class(cls) if attr in c.outputs), None)

    def returned_output(self, function: FunctionInfo) -> Optional[str]:
        """The static output attribute a runner method returns (`return self.static_y`)."""
        def find() -> Optional[str]:
            outputs = self.graph_outputs(function.cls) if function.cls is not None and function.params else set()
            this = function.params[0].name.value if outputs else None
            for node in descendants(function.node):
                if isinstance(node, cst.Return) and node.value is not None:
                    values = [e.value for e in node.value.elements] if isinstance(node.value, cst.Tuple) else [node.value]
                    for value in values:
                        base = output_root(value)
                        if isinstance(base, cst.Attribute) and isinstance(base.value, cst.Name) and base.value.value == this and base.attr.value in outputs:
                            return base.attr.value
            return None
        return self.project.cached(("returned_output", function.key), find, None)

    def captures_of_class(self, cls) -> list[Capture]:
        """Captures written in methods of `cls`, of its bases or of its subclasses."""
        family = set(map(id, self.project.mro(cls)))
        found = []
        for capture in self._captures.values():
            owner = capture.function.cls if capture.function is not None else None
            if owner is not None and (owner is cls or id(owner) in family or cls in self.project.mro(owner)):
                found.append(capture)
        return found

    def captures_in(self, function: FunctionInfo) -> bool:
        # Asked for every host call at every look at the writes between replays: kept as a set
        # (only capture_in() gives a capture a function, and captures are never removed).
        return id(function) in self._capture_hosts

    def calls_replay(self, function: FunctionInfo) -> bool:
        return function.key in self._replayers

    def replays_elsewhere(self, function: FunctionInfo) -> bool:
        """Replays a graph that another function captured: calling it is a replay."""
        return self.calls_replay(function) and not self._captures_here(function)

    def runs_before(self, function: FunctionInfo, earlier: cst.CSTNode, later: cst.CSTNode) -> bool:
        """Whether statement (or capture_begin() call) `earlier` runs before statement `later`
        of `function`, with no loop around both to run it again after."""
        index, _, loops, begins = self._statement_order(function)
        first, second = index.get(id(earlier), begins.get(id(earlier))), index.get(id(later))
        if first is None or second is None or first >= second:
            return False
        return not any(start <= first and second <= end for start, end in loops)

    def replay_follows(self, function: FunctionInfo, statement: Optional[cst.CSTNode]) -> bool:
        if self._is_prelude(function):
            return True  # its caller replays once it returns
        return self._replay_after(function, statement)

    def _replay_after(self, function: FunctionInfo, statement: Optional[cst.CSTNode]) -> bool:
        index, replays, loops, _ = self._statement_order(function)
        position = index.get(id(statement), self._call_statements(function).get(id(statement))) if statement is not None else None
        if position is None:
            return False
        if any(r > position for r in replays):
            return True
        return any(start <= position <= end and any(start <= r <= end for r in replays) for start, end in loops)

    def _statement_order(self, function: FunctionInfo) -> tuple:
        key = function.key
        # asked again once more of its calls are known
        known_calls = (len(self._calls_by_caller.get(key, ())), len(self._replaying_calls.get(key, ())))
        if key not in self._order or self._order[key][4] != known_calls:
            index: dict[int, int] = {}
            replays: list[int] = []
            begins: dict[int, int] = {}  # capture_begin() calls: the statement holding each
            loops: list[tuple[int, int]] = []
            open_loops: list[tuple[cst.CSTNode, int]] = []
            nodes = function.body if not isinstance(function.node, cst.Module) else list(function.node.body)
            # `step(images, masks)` where `step` is a runner whose __call__ replays: a replay too.
            running = {id(call) for callees, call in self._calls_by_caller.get(key, ()) if any(map(self.calls_replay, callees))}
            running |= self._replaying_calls.get(key, set())
            for top in nodes:
                for node in [top, *descendants(top)]:
                    if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                        index[id(node)] = len(index)
                        if isinstance(node, (cst.For, cst.While)):
                            open_loops.append((node, len(index) - 1))
                    elif isinstance(node, cst.Call) and (method := captures.capture_method(node)) in ("replay", "begin"):
                        if method == "replay":
                            replays.append(len(index) - 1)
                        else:
                            begins[id(node)] = len(index) - 1
                    elif type(node) is cst.Call and id(node) in running:
                        replays.append(len(index) - 1)
            for loop, start in open_loops:
                end = max(index[id(n)] for n in descendants(loop) if id(n) in index) if any(id(n) in index for n in descendants(loop)) else start
                loops.append((start, end))
            self._order[key] = (index, replays, loops, begins, known_calls)
        return self._order[key][:4]

    def _replay_candidates(self) -> list[FunctionInfo]:
        found = {c.function.key: c.function for c in self._captures.values() if c.function is not None}
        if self.capture_rules:
            found.update((c.host.key, c.host) for c in self._captures.values() if c.host is not None)
        found.update(self._replayers)
        callers = self._runners_known()[1]
        for module in self._modules if callers else ():
            found.update((f.key, f) for f in [module.body_function, *module.all_functions()] if f.key in callers)
        found.update(self._replay_preludes())
        # `step = GraphedIteration(model, opt, ...)`, then `step(x)` and `sched.step()` in a loop:
        # what follows a call that captures runs between replays.
        found.update(self._capturing_callers)
        return list(found.values())

    def _is_prelude(self, function: FunctionInfo) -> bool:
        # A function found to replay after the preludes were listed replays itself: no prelude.
        return function.key in self._replay_preludes() and not self.calls_replay(function)

    def _resolved_calls(self, function: FunctionInfo) -> dict[int, list]:
        """id(call) -> the project functions each host call of `function` runs, resolved now
        where discovery could not (the object's class came from a module loaded later)."""
        found: dict[int, list] = {}
        for index in self._host_call_index()[1].get(function.key, ()):
            _, callees, call, _, _ = self._host_calls[index]
            if id(call) not in found:
                found[id(call)] = callees if callees is not None else self._resolve_host_call(index)
        return found

    def _replay_preludes(self) -> dict[int, FunctionInfo]:
        """Methods a replaying method calls on its own object before replay() (`self._load_inputs(x)`
        then `self.graph.replay()`): they run between replays, right before one, so what they
        rebind is what the replay ignores. Methods that capture or replay are not preludes."""
        if self._preludes is None or self._preludes[0] != len(self._replayers):
            found: dict[int, FunctionInfo] = {}
            for function in list(self._replayers.values()):
                if function.cls is None or not function.params or self._captures_here(function):
                    continue
                me = function.params[0].name.value
                resolved = self._resolved_calls(function)
                for statement in descendants(function.node):
                    if not isinstance(statement, cst.SimpleStatementLine) or not self._replay_after(function, statement):
                        continue
                    for call in calls_in([statement]):
                        method = call_method(call)
                        if method is not None and isinstance(method[0], cst.Name) and method[0].value == me:
                            callees = [self.project.method(function.cls, method[1])]
                        else:  # `self.model.rotary_emb.update(n)`: a method of an object it holds
                            callees = [c for c in resolved.get(id(call), ()) if c.is_method and c.name != "__init__"]
                        for callee in callees:
                            if callee is not None and not self._captures_here(callee) and not self.calls_replay(callee):
                                found[callee.key] = callee
            self._preludes = (len(self._replayers), found)
        return self._preludes[1]

    # --- rules ---------------------------------------------------------------
    def run_rules(self, rules: dict[type, list[Rule]], node: cst.CSTNode, walker: Walker) -> None:
        job = walker.job
        known = job.capture if job else walker.site
        for rule in rules.get(type(node), ()):
            if known is not None and not applies(rule, known.kind is CaptureKind.COMPILED):
                continue  # a raw-capture claim in a compiled region, or the reverse (docs/compiled.md)
            for hit in rule.check(node, walker.ctx):
                if not isinstance(hit, Hit):
                    hit = Hit(hit)
                capture = known or hit.capture  # capture rules report their site
                if known is None and not applies(rule, capture is not None and capture.kind is CaptureKind.COMPILED):
                    continue
                key = (id(hit.node), rule.code)
                if key in self._seen_hits:
                    continue
                self._seen_hits.add(key)
                if "related" not in hit.details:
                    # A hit about changed state names where it changes (the write, the call).
                    sites = [site for value in hit.details.values() if isinstance(value, Change) for site in value.sites]
                    if sites:
                        hit.details["related"] = sites
                self.hits.append(
                    RawHit(
                        rule,
                        walker.function.module,
                        hit.node,
                        {"expr": code_of(hit.node), **hit.details},  # every message may name the flagged code
                        capture,
                        job.trace if job else (capture.site,) if capture else (),
                        walker.function,
                    )
                )


# Method names too common to scan files for (nearly every model file says `forward`): a
# capture inside one of them is found, its callers elsewhere are not read for replay loops.
_GENERIC_NAMES = frozenset({"forward", "run", "step", "call", "main", "execute", "apply", "setup", "build", "init", "start"})


def _matching(table: dict, key: tuple) -> list[tuple]:
    """The keys of `table` a read's state key matches: itself, or for an attribute of an object
    of unknown class, the attribute on any object; for an entry of a container, that entry's
    writes and the container's own."""
    if key[0] == ITEM:
        _, container, item = key
        entries = [k for k in table if k[0] == ITEM and k[2] in (item, ANY_ITEM) and (k[1] == ANY_CONTAINER or _matching({k[1]: None}, container))]
        return entries + _matching(table, container)
    if key[0] == "attr" and key[2] == ANY_OWNER:
        return [k for k in table if k[:2] == key[:2]]
    return [key] if key in table else []


def _by_node_type(rules: Iterable[Rule]) -> dict[type, list[Rule]]:
    table: dict[type, list[Rule]] = {}
    for rule in rules:
        for node_type in rule.nodes:
            table.setdefault(node_type, []).append(rule)
    return table


def _tensor_params(function: FunctionInfo) -> dict[str, Value]:
    """Required parameters without annotation: what make_graphed_callables and compiled calls pass are tensors."""
    params = function.params[1:] if function.is_method else function.params
    return {p.name.value: TENSOR for p in params if p.default is None and p.annotation is None and not p.star}


# Kernel languages embedded in Python: a function they decorate is traced and compiled to
# device code (its `if` on a `cutlass.Int32` is a device branch), never run on the host.
_KERNEL_PACKAGES = ("triton", "cutlass", "numba", "tilelang", "warp", "helion", "cuda.tile", "cupy")


def _device_kernel(function: FunctionInfo) -> bool:
    for decorator in function.decorators:
        name = dotted_name(decorator_callee(decorator))
        if not name or "." not in name:
            continue
        head, _, rest = name.partition(".")
        qualified = f"{function.module.imports.get(head, head)}.{rest}"
        if qualified.startswith(tuple(f"{p}." for p in _KERNEL_PACKAGES)) and rest.rsplit(".", 1)[-1] in ("jit", "kernel", "autotune", "heuristics", "func", "njit"):
            return True
    return False


def _job_key(function: FunctionInfo, args: dict[str, Value], at_call: bool = False) -> tuple:
    signature = tuple(sorted(
        (name, v.kind.value, v.random, v.tag, tuple(map(id, v.targets)), v.data, id(v.origin.call) if v.origin else 0, repr(v.const),
         # What a `*args` tuple or a `**kwargs` dict holds, one level: `print(*args)` is walked
         # again when a call passes a tensor where another passed only strings.
         tuple((i.kind.value, i.data) for i in v.items), tuple((k, i.kind.value, i.data) for k, i in v.fields))
        for name, v in args.items()
    ))
    return ("call", function.key, signature, at_call)

