"""Which captured code runs at warmup only.

A capture follows warmup: the same calls ran eagerly first (CG901 reports captures that
skip it). Code that runs only on a first call has therefore already run, and at capture
its condition is false or its result is cached:

- lazy initialisation: `if self.table is None: self.table = torch.as_tensor(...)`,
  `if not hasattr(self, "cos"): self.cos = ...`, `if not self._ready: ...; self._ready = True`;
- memo dicts: `if key not in self._cache: self._cache[key] = build(key)`;
- functions cached on first use: `@functools.lru_cache`, `@functools.cache`.

Reporting their bodies as captured was a large share of the false positives on real engine
code (a `torch.as_tensor(..., device=...)` or a log line inside a lazy initialiser).
"""
from __future__ import annotations

from typing import Optional

import libcst as cst

from cglint.engine.definitions import FunctionInfo
from cglint.engine.syntax import assigned_names, code_of, decorator_callee, descendants, dotted_name, positional, string_value

# Decorators whose function body runs once per distinct argument tuple.
_CACHING_DECORATORS = frozenset({"lru_cache", "cache", "cached_property", "memoize", "memoized"})


def initializes_once(node: cst.If, globals_declared: frozenset = frozenset()) -> bool:
    """`if <not yet set>: <set it>`: a body that fills what its test checks for.

    The state must outlive a call: an attribute, or a global the function declares; a
    local (`if out is None: out = torch.empty_like(x)`) is set anew on every call."""
    if node.orelse is not None:
        return False
    state = _tested_state(node.test, globals_declared)
    if state is None:
        return False
    kind, text = state
    for inner in descendants(node.body):
        if isinstance(inner, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            targets = [t.target for t in inner.targets] if isinstance(inner, cst.Assign) else [inner.target]
            for target in targets:
                for leaf in assigned_names(target):
                    if kind == "item" and isinstance(leaf, cst.Subscript) and code_of(leaf.value) == text:
                        return True
                    if kind != "item" and code_of(leaf) == text:
                        return True
        elif isinstance(inner, cst.Call) and kind == "attr" and dotted_name(inner.func) == "setattr":
            args = positional(inner)
            if len(args) >= 2 and f"{code_of(args[0])}.{string_value(args[1])}" == text:
                return True
    return False


def _tested_state(test: cst.BaseExpression, globals_declared: frozenset) -> Optional[tuple[str, str]]:
    """What a first-use test checks: ("value", "self.table") for `self.table is None` or
    `not self._ready`, ("attr", "self.cos") for `not hasattr(self, "cos")`, ("item",
    "self._cache") for `key not in self._cache`."""

    def _stateful(expr: cst.BaseExpression) -> bool:
        return isinstance(expr, cst.Attribute) or (isinstance(expr, cst.Name) and expr.value in globals_declared)

    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        part = test.comparisons[0]
        if isinstance(part.operator, cst.Is) and isinstance(part.comparator, cst.Name) and _stateful(test.left):
            # `is None`, or `is _UNSET` (a sentinel)
            if part.comparator.value == "None" or part.comparator.value.lstrip("_").isupper():
                return "value", code_of(test.left)
        if isinstance(part.operator, cst.NotIn) and _stateful(part.comparator):
            return "item", code_of(part.comparator)
        return None
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = test.expression
        if isinstance(inner, cst.Call) and dotted_name(inner.func) == "hasattr":
            args = positional(inner)
            name = string_value(args[1]) if len(args) == 2 else None
            return ("attr", f"{code_of(args[0])}.{name}") if name else None
        if _stateful(inner):
            return "value", code_of(inner)
    return None


def cached_on_first_use(function: FunctionInfo) -> bool:
    """Decorated with a cache (`@functools.lru_cache`, `@cache`): warmup filled it."""
    for decorator in function.decorators:
        name = dotted_name(decorator_callee(decorator)) or ""
        if name.rsplit(".", 1)[-1] in _CACHING_DECORATORS:
            return True
    return False
