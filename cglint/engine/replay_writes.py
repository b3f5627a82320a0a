"""What a function called between replays changes: the host state a capture froze.

A captured graph keeps every Python value it read at capture. A setter called in the replay
loop (`model.configure(t)`, `config.set_guidance(s)`, `model.eval()`, `anneal(0.9)`) changes
state the graph never sees again. The walk of the replaying function records its calls;
this module says which state each callee writes, following its own calls a few levels.

State keys (matched by engine/state.py against what captured code reads):
  ("attr", name, owner)    an attribute of an object of the project class `owner` (its
                           qualified name), or of an object of unknown class (owner None;
                           also a module global read as `mod.name`)
  ("global", module, name) a module global assigned through `global`
  ("cell", name)           a closure variable assigned through `nonlocal`
  ("item", key, entry)     the entry `entry` of the container that `key` stands for
                           (`cfg["scale"] = s`); a container's other writes use its own key
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Optional

import libcst as cst

from cglint import vocabulary
from cglint.engine.definitions import FunctionInfo
from cglint.engine.warmup_only import initializes_once, suite_nodes
from cglint.engine.syntax import assigned_names, call_method, code_of, descendants, identifiers, item_name, iterated_container, named_attribute_write

if TYPE_CHECKING:
    from cglint.engine.project import Project

# Levels of calls searched for what a function called between replays writes, or captures
# again: the function, its callees and theirs. A setter usually writes directly or through
# one helper (`set_adapters` -> `layer.enable()`); NeMo's decoder captures again two calls
# down (`_reinitialize` -> `_compile` -> `_capture`, tests/test_precision_real_code.py). A
# fourth level changes no finding on the fixtures or the real-world bench, and each level
# multiplies the functions parsed.
SETTER_DEPTH = 3
# nn.Module methods that switch the `training` attribute a captured forward may branch on.
_MODE_SWITCHES = frozenset({"train", "eval"})


def writes_of(project: "Project", function: FunctionInfo, depth: int = SETTER_DEPTH) -> frozenset:
    key = ("replay-writes", function.key, depth)
    return project.cached(key, lambda: _scan(project, function, depth), frozenset())


def _scan(project: "Project", function: FunctionInfo, depth: int) -> frozenset:
    from cglint.engine.values import evaluate

    node = function.node
    if not isinstance(node, cst.FunctionDef):
        return frozenset()
    declared = {
        "global": function.declared_globals,
        "nonlocal": {n.name.value for d in descendants(node) if isinstance(d, cst.Nonlocal) for n in d.names},
    }
    found: set = set()
    scope = functools.cache(lambda: setter_scope(project, function))  # made when first needed
    restored = restored_state(project, function)
    once = initialised_once(project, function)
    entered = {id(item.item) for n in descendants(node) if isinstance(n, cst.With) for item in n.items}
    for current in descendants(node):
        if id(current) in once:
            continue
        if isinstance(current, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
            targets = [t.target for t in current.targets] if isinstance(current, cst.Assign) else [current.target]
            for target in targets:
                for leaf in assigned_names(target):
                    if code_of(leaf, 400) not in restored:
                        found.update(_keys(leaf, declared, function, scope()))
        elif isinstance(current, cst.Call):
            method = call_method(current)
            if method is not None and method[1] in _MODE_SWITCHES and _mode_key(code_of(method[0], 400)) not in restored:
                # `runner.eval()` of a graph runner switches the runner's mode, not its model's.
                switched = owners(evaluate(method[0], scope()))
                found.update([attribute_key("training", owner) for owner in switched] or [attribute_key("training")])
            if method is not None and method[1] in vocabulary.names("host_effect.entry_methods") and isinstance(method[0], cst.Attribute):
                found.update(attribute_write_keys(method[0], scope()))  # `self.ctx.knobs.update(arm)`
            named = named_attribute_write(current)
            if named is not None:  # `self.register_buffer("inv_freq", f)`, `setattr(self, "scale", s)`
                found.update(attribute_write_keys(named, scope()))
            if depth > 1:
                for callee in callees_of(project, scope(), current):
                    if id(current) in entered and restores_on_exit(project, callee):
                        continue  # put back when the `with` ends, before this function returns
                    found.update(k for k in writes_of(project, callee, depth - 1) if k[0] != _PARAM)
    return frozenset(found)


def setter_scope(project: "Project", function: FunctionInfo, with_callers: bool = True):
    """A setter's scope: its parameters are what its callers pass where that is a project
    object (`activate_domain(model, d)` calling `model.set_enabled_adapters(...)`), and its
    locals as it assigns them (`for module in self.adapter_modules(): module.enable()`).
    Without `with_callers`, its parameters are unknown: no search for its call sites."""
    from cglint.engine.scope import Scope, function_values, initial_env

    def build():
        node = function.node
        if not isinstance(node, cst.FunctionDef):
            return Scope(project, function, initial_env(project, function))
        # Only what its calls' receivers read: the rest of a long function is not evaluated, and
        # its callers are searched only when a parameter is a receiver (`model.set_scale(s)`).
        callees = [n.func for n in descendants(node) if isinstance(n, cst.Call) and isinstance(n.func, cst.Attribute)]
        needed = {leaf for func in callees for leaf in identifiers(func)}
        given = {p.name.value for p in function.params} & needed if with_callers else set()
        params = {name: value for name, value in project.parameters(function).items() if name in given and (value.targets or value.items)} if given else {}
        return function_values(project, function, params, reading=callees)[0]
    return project.cached(("setter-scope", function.key, with_callers), build, Scope(project, function))


def initialised_once(project: "Project", function: FunctionInfo) -> frozenset:
    """Ids of the nodes in lazy initialisation (`if _te_version is None: _te_version = ...`):
    they ran at warmup, and a call between replays finds the state filled and writes nothing."""
    return project.cached(("initialised-once", function.key), lambda: _initialised_once(function.node), frozenset())


def reachable(project: "Project", function: FunctionInfo, depth: int = SETTER_DEPTH) -> tuple:
    """The project functions `function` calls, a few levels deep (itself included)."""
    key = ("reachable", function.key, depth)
    return project.cached(key, lambda: _reach(project, function, depth), ())


def _reach(project: "Project", function: FunctionInfo, depth: int) -> tuple:

    found = {function.key: function}
    if depth > 1 and isinstance(function.node, cst.FunctionDef):
        scope = setter_scope(project, function, with_callers=False)  # what it reaches, not what it writes
        for call in (n for n in descendants(function.node) if isinstance(n, cst.Call)):
            for callee in callees_of(project, scope, call):
                for reached in reachable(project, callee, depth - 1):
                    found.setdefault(reached.key, reached)
    return tuple(found.values())


def _initialised_once(node: cst.CSTNode) -> frozenset:
    names = {n.name.value for d in descendants(node) if isinstance(d, (cst.Global, cst.Nonlocal)) for n in d.names}
    stateful = lambda expr: isinstance(expr, cst.Attribute) or (isinstance(expr, cst.Name) and expr.value in names)  # noqa: E731
    skipped: set[int] = set()
    for current in descendants(node):
        if isinstance(current, cst.If) and initializes_once(current, stateful, lambda call: []):
            skipped.update(id(n) for n in suite_nodes(current.body))
    return frozenset(skipped)


def restored_state(project: "Project", function: FunctionInfo) -> frozenset:
    return project.cached(("restored", function.key), lambda: _restored(function.node), frozenset())


def _restored(node: cst.CSTNode) -> frozenset:
    """State a function saves, changes and puts back (`saved = self.flag; self.flag = False;
    ...; self.flag = saved`, as Megatron's layer does around eager code after a replay):
    when the function returns, the state is what it was."""
    saved: dict[str, str] = {}  # local -> the state it holds
    restored: set[str] = set()
    switches: dict[str, set[str]] = {}  # receiver -> the mode switches called on it
    for current in descendants(node):
        if isinstance(current, cst.Assign) and len(current.targets) == 1:
            target, value = current.targets[0].target, current.value
            if isinstance(target, cst.Name) and isinstance(value, (cst.Attribute, cst.Name)):
                saved.setdefault(target.value, code_of(value, 400))
            elif isinstance(value, cst.Name) and saved.get(value.value) == code_of(target, 400):
                restored.add(saved[value.value])
        elif isinstance(current, cst.Call):
            method = call_method(current)
            if method is not None and method[1] in _MODE_SWITCHES:
                switches.setdefault(code_of(method[0], 400), set()).add(method[1])
    # `model.eval()` ... `model.train()`: a called evaluation that puts the training mode back
    # (the replay loop's own switches still count: its replays run between them).
    restored.update(_mode_key(receiver) for receiver, called in switches.items() if called == _MODE_SWITCHES)
    return frozenset(restored)


def restores_on_exit(project: "Project", function: FunctionInfo) -> bool:
    """A `@contextmanager` that yields inside `try:` with a `finally:` (PEFT's
    `rescale_adapter_scale`): what it changes holds only while the `with` body runs."""
    def scan() -> bool:
        from cglint.engine.captures import is_contextmanager
        from cglint.engine.scope import Scope

        if not isinstance(function.node, cst.FunctionDef) or not is_contextmanager(function, Scope(project, function)):
            return False
        return any(
            isinstance(node, cst.Try) and node.finalbody is not None and any(isinstance(n, (cst.Yield, cst.Await)) for n in descendants(node.body))
            for node in descendants(function.node)
        )
    return project.cached(("restores-on-exit", function.key), scan, False)


def _mode_key(receiver: str) -> str:
    """How restored_state names the mode of a module switched with `receiver.eval()`."""
    return f"{receiver}.training"


# Reads of an attribute of an object of unknown class match writes to any object's attribute.
ANY_OWNER = "*"
_PARAM = "param"
ITEM = "item"
ANY_ITEM = "[*]"  # some entry, written through a slice or a computed index
ANY_CONTAINER = ("*",)


def param_key(name: str, item: Optional[str]) -> tuple:
    """Items of the container a function is given as `name` are assigned (the entry `item`, or
    any): which state that is depends on the call (argument_keys)."""
    return (_PARAM, name, item)


def argument_keys(keys: frozenset, function: FunctionInfo, call: cst.Call, caller: FunctionInfo) -> list[tuple]:
    """The state keys of the containers a call passes where `function` assigns items of its
    parameters (`anneal(trainer.hparams, u)`: any object's `hparams`; `anneal(HP, u)`: the name
    `HP` as the caller sees it), from the arguments' spelling."""
    written: dict[str, list] = {}
    for key in keys:
        if key[0] == _PARAM:
            written.setdefault(key[1], []).append(key[2])
    found: list[tuple] = []
    for name, value in function.arguments(call, isinstance(call.func, cst.Attribute)) if written else ():
        if name not in written:
            continue
        if isinstance(value, cst.Attribute):
            containers = [attribute_key(value.attr.value)]
        elif isinstance(value, cst.Name):
            containers = [("name", caller.key, value.value), ("name", caller.module.body_function.key, value.value)]
        else:
            continue
        for item in written[name]:
            found += item_keys(containers, item)
    return found


def attribute_key(name: str, owner: Optional[str] = None) -> tuple:
    return ("attr", name, owner)


def owners(value) -> list[str]:
    """Qualified names of the project classes an object value is an instance of."""
    from cglint.engine.definitions import ClassInfo
    from cglint.engine.values import Kind

    if value.kind != Kind.OBJECT or value.is_class:
        return []
    return [t.qualname for t in value.targets if isinstance(t, ClassInfo)]


def attribute_write_keys(leaf: cst.Attribute, scope) -> list[tuple]:
    """`self.state.x = v` in a class whose `state` is a `DecoderState`: keyed by that class, so a
    captured read of another class's `x` is not taken for it (NeMo's beam and greedy
    decoders both keep a `fusion_states_list`)."""
    from cglint.engine.values import evaluate

    found = owners(evaluate(leaf.value, scope))
    return [attribute_key(leaf.attr.value, owner) for owner in found] or [attribute_key(leaf.attr.value)]


def _keys(leaf: cst.BaseExpression, declared: dict, function: FunctionInfo, scope) -> list[tuple]:
    if isinstance(leaf, cst.Subscript):  # `self.opts["scale"] = s`: the container on `self` changed
        item, leaf = entry_name(leaf, scope), leaf.value
        if isinstance(leaf, cst.Name) and leaf.value in {p.name.value for p in function.params}:
            return [param_key(leaf.value, item)]  # `hparams["ent_coef"] = c`: the caller's container changed
        containers = _keys(leaf, declared, function, scope)
        if item is None:  # `cfg[key] = v`: the container, and some entry of it (`cfg[key]["enabled"]`)
            return containers + item_keys(containers, ANY_ITEM)
        return item_keys(containers, item)
    if isinstance(leaf, cst.Attribute):
        return attribute_write_keys(leaf, scope)
    if isinstance(leaf, cst.Name):
        if leaf.value in declared["global"]:
            return [("global", function.module.name, leaf.value), attribute_key(leaf.value)]
        if leaf.value in declared["nonlocal"]:
            return [("cell", leaf.value)]
        container = loop_container(scope, leaf.value)
        if container is not None:  # `param_group` of `for param_group in self.optimizer.param_groups`
            return item_keys(_keys(container, declared, function, scope), ANY_ITEM)
    return []


def loop_container(scope, name: str) -> Optional[cst.BaseExpression]:
    """The container a local iterates over (syntax.iterated_container), for the scope's function."""
    function = scope.function
    key = ("iterated", function.key, name)
    return scope.project.cached(key, lambda: iterated_container(name, function.node), None)


def entry_name(subscript: cst.Subscript, scope) -> Optional[str]:
    """The entry a subscript names: a literal (`cfg["lr"]`, `xs[0]`), or a constant the value
    model knows (`group[self.param_group_field]` with the field set to "lr")."""
    from cglint.engine.values import evaluate

    named = item_name(subscript)
    if named is not None or len(subscript.slice) != 1 or not isinstance(subscript.slice[0].slice, cst.Index):
        return named
    index = subscript.slice[0].slice.value
    if not isinstance(index, (cst.Name, cst.Attribute)):
        return None
    const = evaluate(index, scope).const
    if isinstance(const, str):
        return const
    return f"[{const}]" if isinstance(const, int) and not isinstance(const, bool) else None


def item_keys(keys: list[tuple], item: Optional[str], shared: bool = False) -> list[tuple]:
    """The keys of one named entry of the containers `keys` stand for (all of them if unnamed):
    `hparams["ent_coef"] = c` leaves a captured `hparams["clip"]` as it was. An entry of a
    `shared` container (a variable's, which models keep as `self.cfg = cfg`) is also the
    entry of that name of any container a capture read."""
    if item is None:
        return keys
    return [(ITEM, key, item) for key in keys] + ([(ITEM, ANY_CONTAINER, item)] if shared else [])


def callees_of(project: "Project", scope, call: cst.Call) -> list[FunctionInfo]:
    from cglint.engine.values import evaluate

    value = evaluate(call.func, scope)
    return [t for t in value.targets if isinstance(t, FunctionInfo)]
