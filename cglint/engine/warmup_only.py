"""Which captured code runs at warmup only.

A capture follows warmup: the same calls ran eagerly first (CG901 reports captures that
skip it). Code that runs only on a first call has therefore already run, and at capture
its condition is false or its result is cached:

- lazy initialisation: `if self.table is None: self.table = torch.as_tensor(...)`,
  `if not hasattr(self, "cos"): self.cos = ...`, `if not self._ready: ...; self._ready = True`,
  a flag the body clears, tests joined with `and` / `or`;
- memos: `if key not in self._cache: self._compile(key)` (filled here or one helper away),
  `if params != cache["params"]:` (a copy of the inputs compared), `if key in cache: return
  cache[key]` before the code that fills it, a `for ... else` search of a cache filled on a miss;
- functions cached on first use: `@functools.lru_cache`, a project's `@cache_once`, `*_once()`.

Reporting their bodies as captured was a large share of the false positives on real engine
code (a `torch.as_tensor(..., device=...)` or a log line inside a lazy initialiser).
"""
from __future__ import annotations

from typing import Callable, Iterable, NamedTuple

import libcst as cst

from cglint.engine.definitions import FunctionInfo
from cglint.engine.syntax import assigned_names, call_method, children, code_of, decorator_callee, descendants, dotted_name, positional, string_value

# Words in a decorator's name that say its function body runs once per distinct argument
# tuple: `functools.lru_cache`, `cache`, `cached_property`, and projects' own memo decorators
# (SGLang's `@cache_once` around its JIT kernel loaders, `@memoize`, `@run_once`).
_CACHING_WORDS = frozenset({"cache", "cached", "memo", "memoize", "memoized", "once"})


# A test of first-use state: which state it reads and whether it is true once filled.
class StateTest(NamedTuple):
    kind: str  # "value": the expression itself, "item": a container's keys, "attr": hasattr()
    text: str
    filled: bool  # the test holds once the state is filled (after warmup)


# Methods that fill a container (`seen.add(key)`, `cache.setdefault(k, v)`).
_FILLING_METHODS = frozenset({"add", "append", "setdefault", "update", "__setitem__"})
# A memo fill usually sits in the branch itself or one helper away (`self._compile(key)`).
_FOLLOW_DEPTH = 1

Stateful = Callable[[cst.BaseExpression], bool]
Callees = Callable[[cst.Call], list]


def initializes_once(node: cst.If, stateful: Stateful, callees: Callees) -> bool:
    """`if <not yet filled>: <fill it>`: a body that fills what its test checks for, so at a
    capture after warmup the test is false. The state must outlive a call (`stateful`); a
    local (`if out is None: out = torch.empty_like(x)`) is set anew on every call."""
    # An `else:` (Transformer Engine: `if requires_update: select(); ... else: use the cached
    # choice`) is the path every later call takes; only the body is warmup's.
    return _once(node.test, _unconditional_nodes(node.body), stateful, callees)


def first_call_only(node: cst.If, stateful: Stateful, callees: Callees) -> bool:
    """initializes_once, where the test only asks whether the state is there yet (`is None`,
    `not hasattr`, `not in`): a test comparing it with a kept copy (`softcap != captured`)
    runs its body again whenever the state changes (a runner that recaptures on change)."""
    compares = any(
        isinstance(part.operator, (cst.Equal, cst.NotEqual, cst.LessThan, cst.GreaterThan, cst.LessThanEqual, cst.GreaterThanEqual))
        and not _sizes(comparison)  # `self.buf.shape != x.shape`: buffers reallocated per shape, graphs per shape
        for comparison in [node.test, *descendants(node.test)] if isinstance(comparison, cst.Comparison)
        for part in comparison.comparisons
    )
    if compares:
        return False
    test = node.test
    while isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or) and isinstance(test.right, cst.Comparison) and _sizes(test.right):
        test = test.left  # `if self.buf is None or self.buf.shape != x.shape:` allocates once per shape
    return initializes_once(node.with_changes(test=test) if test is not node.test else node, stateful, callees)


def _sizes(comparison: cst.Comparison) -> bool:
    names = {n.attr.value if isinstance(n, cst.Attribute) else n.value for n in descendants(comparison) if isinstance(n, (cst.Attribute, cst.Name))}
    return not names.isdisjoint({"shape", "size", "numel", "len", "ndim", "dtype", "device"})


def _once(test: cst.BaseExpression, body: list, stateful: Stateful, callees: Callees) -> bool:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        # `if cache["params"] is None or params != cache["params"]:` (Transformer Engine's
        # backend selection): false after warmup only if every side is.
        return _once(test.left, body, stateful, callees) and _once(test.right, body, stateful, callees)
    return any(
        _fills(body, t, callees, _FOLLOW_DEPTH) if not t.filled else t.kind == "value" and _clears(body, t.text)
        for t in _state_tests(test, stateful)
    )


def _clears(nodes: list, text: str) -> bool:
    """`if self._should_allocate: ...; self._should_allocate = False` (DeepSpeed): a flag that
    starts true and is cleared by the body it guards runs that body once."""
    return any(
        isinstance(n, cst.Assign) and isinstance(n.value, cst.Name) and n.value.value in ("False", "None")
        and any(code_of(t.target, 400) == text for t in n.targets)
        for n in nodes
    )


def returns_once_filled(node: cst.CSTNode, rest: list, stateful: Stateful, callees: Callees) -> bool:
    """`if key in self._cache: return self._cache[key]` followed by code that fills the cache:
    after warmup the early return is taken, and the rest of the block ran at warmup only
    (SGLang's `if (role, name) in _SEEN: return` before recording and printing)."""
    if not isinstance(node, cst.If) or node.orelse is not None:
        return False
    if not ends_with(node.body, (cst.Return,)):
        return False
    rest_nodes = [n for stmt in rest for n in (stmt, *descendants(stmt))]
    return any(
        test.filled and _fills(rest_nodes, test, callees, _FOLLOW_DEPTH)
        for test in _state_tests(node.test, stateful)
    )


def fills_searched_cache(node: cst.For, stateful: Stateful, callees: Callees) -> bool:
    """`for entry in cache: if entry.key == key: ...; break` with an `else:` that computes and
    stores the entry (Transformer Engine's backend choice, kept in a small list): the `else`
    runs on a miss, which warmup already had; at capture the loop finds the entry."""
    if node.orelse is None:
        return False
    container = node.iter
    while isinstance(container, cst.Call) and dotted_name(container.func) in ("enumerate", "reversed", "list", "tuple") and container.args:
        container = container.args[0].value
    if not stateful(container):
        return False
    test = StateTest("item", code_of(container, 400), False)
    return _fills(suite_nodes(node.orelse.body), test, callees, _FOLLOW_DEPTH)


def suite_body(suite: cst.BaseSuite) -> list:
    """The statements of a block (the small statements of a one-line `if x: return y`)."""
    return list(suite.body)


def ends_with(suite: cst.BaseSuite, kinds: tuple) -> bool:
    """Whether the block's last statement is one of `kinds` (`cst.Return`, `cst.Raise`)."""
    body = suite_body(suite)
    last = body[-1] if body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1]
    return isinstance(last, kinds)


def suite_nodes(suite: cst.BaseSuite) -> list:
    return [n for stmt in suite_body(suite) for n in (stmt, *descendants(stmt))]


def _state_tests(test: cst.BaseExpression, stateful: Stateful) -> list[StateTest]:
    """The first-use tests a condition makes: `self.table is None`, `not self._ready`,
    `not hasattr(self, "cos")`, `key not in self._cache`, and their filled forms; also a
    comparison with a cached copy (`if params != cache["params"]:`, vLLM's backend chosen
    again only when its inputs change)."""
    text = lambda expr: code_of(expr, 400)  # noqa: E731 - compared, not shown
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        # `if _te_version is None and HAVE_TE:` (Megatron): false once the state is filled
        # (or, for a plain flag, once the body cleared it).
        return [t for side in (test.left, test.right) for t in _state_tests(side, stateful) if not t.filled or t.kind == "value"]
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        return [t._replace(filled=not t.filled) for t in _state_tests(test.expression, stateful)]
    if isinstance(test, cst.Call) and dotted_name(test.func) == "hasattr":
        args = positional(test)
        name = string_value(args[1]) if len(args) == 2 else None
        return [StateTest("attr", f"{text(args[0])}.{name}", True)] if name else []
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        part = test.comparisons[0]
        operator, left, right = part.operator, test.left, part.comparator
        if isinstance(operator, (cst.In, cst.NotIn)):
            return [StateTest("item", text(right), isinstance(operator, cst.In))] if stateful(right) else []
        if isinstance(operator, (cst.Is, cst.IsNot)) and isinstance(right, cst.Name) and stateful(left):
            # `is None`, or `is _UNSET` (a sentinel)
            if right.value == "None" or right.value.lstrip("_").isupper():
                return [StateTest("value", text(left), isinstance(operator, cst.IsNot))]
            return []
        if isinstance(operator, (cst.Equal, cst.NotEqual)):
            filled = isinstance(operator, cst.Equal)
            return [StateTest("value", text(side), filled) for side in (left, right) if stateful(side)]
        return []
    return [StateTest("value", text(test), True)] if stateful(test) else []


def _fills(nodes: Iterable[cst.CSTNode], test: StateTest, callees: Callees, depth: int) -> bool:
    """Whether `nodes` write the state `test` reads, directly or in a function they call."""
    for inner in nodes:
        if isinstance(inner, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in inner.targets] if isinstance(inner, cst.Assign) else [inner.target]
            for target in targets:
                for leaf in assigned_names(target):
                    if test.kind == "item" and isinstance(leaf, cst.Subscript):
                        if code_of(leaf.value, 400) == test.text:
                            return True
                    elif code_of(leaf, 400) == test.text:
                        return True
        elif isinstance(inner, cst.Call):
            method = call_method(inner)
            if method is not None and test.kind == "item" and method[1] in _FILLING_METHODS:
                if code_of(method[0], 400) == test.text:
                    return True
            if test.kind == "attr" and dotted_name(inner.func) == "setattr":
                args = positional(inner)
                if len(args) >= 2 and f"{code_of(args[0], 400)}.{string_value(args[1])}" == test.text:
                    return True
            if depth > 0 and _fills_in_callee(inner, test, callees, depth):
                return True
    return False


def _fills_in_callee(call: cst.Call, test: StateTest, callees: Callees, depth: int) -> bool:
    """`self._compile(key)` filling `self._cache`: the callee writes the same state through its
    own receiver (`self` renamed to its first parameter); a global keeps its name."""
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    for function in callees(call):
        if not isinstance(function.node, cst.FunctionDef):
            continue
        renamed = test
        if isinstance(receiver, cst.Name) and test.text.startswith(receiver.value + "."):
            if not (function.is_method and function.params):
                continue
            renamed = test._replace(text=function.params[0].name.value + test.text[len(receiver.value):])
        if _fills(_unconditional_nodes(function.node.body), renamed, callees, depth - 1):
            return True
    return False


def _unconditional_nodes(suite: cst.BaseSuite) -> list:
    """suite_nodes, less what an `if` without `else` in it guards: code that sets the flag
    only when it finds something (`if err is not None: self.has_printed = True`, a NaN
    detector) leaves it unset on the usual call, and the guarded code runs again."""
    found: list = []
    for stmt in suite_body(suite):
        if isinstance(stmt, cst.If):
            found.extend(descendants(stmt.test))
            if isinstance(stmt.orelse, cst.Else):  # `if fast: self._t = a` / `else: self._t = b` fills it either way
                found.extend([*_unconditional_nodes(stmt.body), *_unconditional_nodes(stmt.orelse.body)])
            continue
        found.append(stmt)
        if isinstance(stmt, cst.BaseCompoundStatement) and not isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            for part in children(stmt):
                if isinstance(part, cst.BaseSuite):
                    found.extend(_unconditional_nodes(part))
                else:
                    found.extend([part, *descendants(part)])
        else:
            found.extend(descendants(stmt))
    return found


# `run_once()` runs a step one time, each time it is called (SGLang's captured forward is
# `def run_once(): return self.model.forward(...)`): it is no init-once function.
_RUNNING_VERBS = frozenset({"run", "step", "forward", "call", "execute", "do", "decode", "apply"})


def cached_on_first_use(function: FunctionInfo) -> bool:
    """Decorated with a cache (`@functools.lru_cache`, `@cache_once`), or named to run once
    (`_init_jit_cuda_arch_once()`): warmup ran it, and at capture it returns early or its
    result comes from the cache."""
    words = function.name.lower().strip("_").split("_")
    if "once" in words and words[0] not in _RUNNING_VERBS:
        return True
    for decorator in function.decorators:
        name = dotted_name(decorator_callee(decorator)) or ""
        if _CACHING_WORDS & set(name.rsplit(".", 1)[-1].lower().split("_")):
            return True
    return False
