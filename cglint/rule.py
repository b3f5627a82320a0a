"""What a rule is: one small declarative class.

A rule names the node types it looks at and answers, for one node, whether it is
a hazard. Everything else (finding captured regions, following calls, telling
tensors from host values, suppression, positions, output) belongs to the engine,
which hands each rule a `Context`. The same class carries the rule's documentation
and its examples; the examples are also its tests (tests/test_rule_examples.py).

Example lines that must be flagged end with a marker comment `# expect: CG101`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Optional, Union

if TYPE_CHECKING:
    import libcst as cst

    from cglint.engine.context import Context

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
RUNTIME = "runtime"  # reported by the runtime verifier only

EXPECT_MARKER = re.compile(r"#\s*expect:\s*(CG\d{3}(?:\s*,\s*CG\d{3})*)")


@dataclass(frozen=True)
class Hit:
    """A rule's verdict on one node: where, plus values for the message template."""

    node: "cst.CSTNode"
    details: dict[str, Any] = field(default_factory=dict)


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
    nodes: ClassVar[tuple[type, ...]] = ()
    # Examples: complete small programs. Every `invalid` one must produce this rule
    # exactly on its marked lines; every `valid` one (the first is the fix) nothing.
    invalid: ClassVar[tuple[str, ...]] = ()
    valid: ClassVar[tuple[str, ...]] = ()

    def check(self, node: "cst.CSTNode", ctx: "Context") -> Iterable[Union[Hit, "cst.CSTNode"]]:
        """Yield the hazardous nodes (or Hits with message details) found at `node`."""
        return ()

    def format_message(self, details: dict[str, Any]) -> str:
        try:
            return self.message.format(**details)
        except (KeyError, IndexError, ValueError):
            return self.message

    @classmethod
    def doc(cls) -> "RuleDoc":
        return RuleDoc.of(cls)


@dataclass(frozen=True)
class RuleDoc:
    """The documentation of a rule, in the order ruff uses."""

    code: str
    name: str
    category: str
    severity: str
    summary: str
    why: str
    example: Optional[str]
    use_instead: Optional[str]
    fix_hint: str
    fix_safety: str

    @classmethod
    def of(cls, rule: type[Rule]) -> "RuleDoc":
        return cls(
            code=rule.code,
            name=rule.name,
            category=rule.category,
            severity=rule.severity,
            summary=rule.summary,
            why=" ".join(rule.why.split()),
            example=rule.invalid[0].strip("\n") if rule.invalid else None,
            use_instead=rule.valid[0].strip("\n") if rule.valid else None,
            fix_hint=rule.fix_hint,
            fix_safety=rule.fix_safety,
        )

    def markdown(self) -> str:
        parts = [
            f"## {self.code} `{self.name}` ({self.category}, {self.severity})",
            "",
            f"**What it does.** {self.summary}",
            "",
            f"**Why is this bad?** {self.why}",
        ]
        if self.example:
            parts += ["", "**Example**", "", "```python", self.example, "```"]
        if self.use_instead:
            parts += ["", "**Use instead**", "", "```python", self.use_instead, "```"]
        parts += ["", f"**Fix.** {self.fix_hint}", "", f"**Fix safety.** {self.fix_safety}", ""]
        return "\n".join(parts)


def expected_markers(source: str) -> set[tuple[str, int]]:
    """(code, line) pairs announced by `# expect: CG...` comments."""
    found = set()
    for lineno, line in enumerate(source.splitlines(), start=1):
        match = EXPECT_MARKER.search(line)
        if match:
            for code in match.group(1).split(","):
                found.add((code.strip(), lineno))
    return found
