"""What a rule is: one small declarative class.

A rule names the node types it looks at and answers, for one node, whether it is
a hazard. Everything else (finding captured regions, following calls, telling
tensors from host values, suppression, positions, output) belongs to the engine,
which hands each rule a `Context`. The same class carries the rule's documentation,
its examples and what its fix writes for them: the examples are also its tests
(tests/test_rule_examples.py), and cglint/docs.py renders the documentation from them.

Example lines that must be flagged end with a marker comment `# expect: CG101`.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Collection, Iterable, Optional, Union

if TYPE_CHECKING:
    import libcst as cst

    from cglint.engine.captures import Capture
    from cglint.engine.context import Context
    from cglint.fix import FixContext

    # What `fix` returns: a replacement for the node, its removal, or {original: replacement}.
    FixResult = Union[cst.CSTNode, cst.RemovalSentinel, dict[cst.CSTNode, Union[cst.CSTNode, cst.RemovalSentinel]]]

CATEGORIES = (
    "sync",
    "control-flow",
    "cpu-rng",
    "realloc",
    "host-effect",
    "frozen-scalar",
    "dynamic-shape",
    "stream",
    "setup",
    "memory",
    "internal",
)
SEVERITIES = ("error", "warning", "info")

# Where a rule looks.
REGION = "region"  # code that runs while a graph is being captured
REPLAY = "replay"  # code that runs after a capture, between replays
CAPTURE = "capture"  # the capture site itself (`with torch.cuda.graph(...)`, capture_begin(), make_graphed_callables(...))
RUNTIME = "runtime"  # reported by the runtime verifier only
SCOPES = (REGION, REPLAY, CAPTURE, RUNTIME)

# Which captures a rule's claim is true for (docs/compiled.md). A raw capture
# (torch.cuda.graph, capture_begin, make_graphed_callables, a capture helper) runs the
# Python once and replays the recorded kernels; a function compiled with CUDA graphs
# (torch.compile(mode="reduce-overhead")) is traced by Dynamo, which breaks the graph
# where it cannot trace, guards Python values and replays side effects.
RAW = "raw"
COMPILED = "compiled"
ANY_CAPTURE = "any"
APPLIES_TO = (RAW, COMPILED, ANY_CAPTURE)

EXPECT_MARKER = re.compile(r"#\s*expect:\s*(CG\d{3}(?:\s*,\s*CG\d{3})*)")


def without_markers(example: str) -> str:
    """An example as a user would write it: its `# expect: CG...` comments removed."""
    return re.sub(r"[ \t]*" + EXPECT_MARKER.pattern, "", example)


@dataclass(frozen=True)
class Hit:
    """A rule's verdict on one node: where, plus values for the message template.

    `{expr}` in a template is the flagged node's code unless `details` says otherwise.
    A rule that looks between replays names the capture its hit is about in `capture`
    (region and capture rules get theirs from the walk)."""

    node: "cst.CSTNode"
    details: dict[str, Any] = field(default_factory=dict)
    capture: Optional["Capture"] = None


@dataclass(frozen=True)
class Location:
    """Another line that explains a hit (the write that changes the value it reads), for its
    finding's `related` locations: a rule puts a sequence of them in `Hit.details["related"]`."""

    module: Any  # the ModuleInfo that holds `node`
    node: "cst.CSTNode"
    message: str


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]  # kebab-case, shown in `cglint rules`
    category: ClassVar[str]
    severity: ClassVar[str]
    summary: ClassVar[str]  # one line: what it flags
    message: ClassVar[str]  # str.format template filled from Hit.details
    fix_hint: ClassVar[str]
    why: ClassVar[str]  # documentation: what happens on a GPU
    fix_safety: ClassVar[str] = "No automatic fix."
    scope: ClassVar[str] = REGION
    # The captures whose code and sites the engine hands this rule (one of APPLIES_TO).
    applies_to: ClassVar[str] = RAW
    nodes: ClassVar[tuple[type, ...]] = ()
    # Hits of this rule in one function are one finding: the first, with the count and the
    # other lines as related locations. For hazards that are one decision however often they
    # repeat (a function with 120 `logger.debug` lines is one thing to move out of the graph).
    aggregate: ClassVar[bool] = False
    # Examples: complete small programs. Every `invalid` one must produce this rule
    # exactly on its marked lines; every `valid` one (the first is the fix) nothing.
    invalid: ClassVar[tuple[str, ...]] = ()
    valid: ClassVar[tuple[str, ...]] = ()
    # What `cglint check --fix` writes for each `invalid` example (`without_markers` of it), in
    # the same order; None where no edit is safe and the example stays as it is. Required
    # with fix(), one per `invalid` example.
    fixed: ClassVar[tuple[Optional[str], ...]] = ()

    def check(self, node: "cst.CSTNode", ctx: "Context") -> Iterable[Union[Hit, "cst.CSTNode"]]:
        """Yield the hazardous nodes (or Hits with message details) found at `node`."""
        return ()

    def fix(self, node: "cst.CSTNode", ctx: "FixContext") -> Optional["FixResult"]:
        """An edit of the reported `node` that keeps what the GPU computes, or None where no
        edit is safe (cglint/fix.py applies it and keeps it only if the check agrees)."""
        return None

    @classmethod
    def can_fix(cls) -> bool:
        return cls.fix is not Rule.fix


def rules_defined_in(namespace: dict[str, Any]) -> tuple[type[Rule], ...]:
    """The rules a module's namespace defines, in the order it defines them (imported ones
    are not its own; a base class named with a leading underscore is not a rule)."""
    return tuple(
        value for name, value in list(namespace.items())
        if isinstance(value, type) and issubclass(value, Rule) and value is not Rule and value.__module__ == namespace["__name__"]
        and not name.startswith("_")
    )


_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_TEXTS = ("summary", "message", "fix_hint", "why", "fix_safety")


def contract_problems(rule: type[Rule], dispatched: Collection[type]) -> list[str]:
    """What is wrong with a rule class, given the node types the walk hands to rules."""
    problems = []
    missing = [a for a in ("code", "name", "category", "severity", *_TEXTS) if not isinstance(getattr(rule, a, None), str) or not getattr(rule, a)]
    if missing:
        return [f"{rule.__name__} lacks {', '.join(missing)}"]
    if not re.fullmatch(r"CG\d{3}", rule.code):
        problems.append(f"code {rule.code!r} is not CG plus three digits")
    if not _NAME.fullmatch(rule.name):
        problems.append(f"name {rule.name!r} is not kebab-case")
    if rule.category not in CATEGORIES:
        problems.append(f"category {rule.category!r} is not one of {', '.join(CATEGORIES)}")
    if rule.severity not in SEVERITIES:
        problems.append(f"severity {rule.severity!r} is not one of {', '.join(SEVERITIES)}")
    if rule.applies_to not in APPLIES_TO:
        problems.append(f"applies_to {rule.applies_to!r} is not one of {', '.join(APPLIES_TO)}")
    if rule.scope not in SCOPES:
        problems.append(f"scope {rule.scope!r} is not one of {', '.join(SCOPES)}")
    if rule.scope == RUNTIME:
        if rule.nodes or rule.check is not Rule.check or rule.can_fix():
            problems.append("a runtime rule is reported by the verifier: it has no nodes, check or fix")
    else:
        if not rule.nodes:
            problems.append("names no node types in `nodes`")
        never = [getattr(kind, "__name__", repr(kind)) for kind in rule.nodes if kind not in dispatched]
        if never:
            problems.append(f"`nodes` names {', '.join(never)}, which the walk never hands to rules (cglint/engine/walk.py DISPATCHED)")
        if rule.check is Rule.check:
            problems.append("does not define check()")
    if rule.can_fix() and list(inspect.signature(rule.fix).parameters) != ["self", "node", "ctx"]:
        problems.append("fix() must take (self, node, ctx)")
    if rule.can_fix() and rule.fix_safety == Rule.fix_safety:
        problems.append("defines fix() but no fix_safety (what the fix can change, shown by `cglint rule`)")
    if rule.can_fix() and len(rule.fixed) != len(rule.invalid):
        problems.append(f"defines fix() but `fixed` has {len(rule.fixed)} outputs for {len(rule.invalid)} `invalid` examples "
                        "(what --fix writes for each, None where it writes nothing)")
    if rule.fixed and not rule.can_fix():
        problems.append("has `fixed` outputs but no fix()")
    return [f"{rule.code} {rule.__name__}: {problem}" for problem in problems]


def applies(rule: "type[Rule] | Rule", compiled: bool) -> bool:
    """Whether a rule's claim holds for a compiled region (`compiled`) or a raw capture."""
    return rule.applies_to == ANY_CAPTURE or rule.applies_to == (COMPILED if compiled else RAW)
