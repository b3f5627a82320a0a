"""The rules' documentation, rendered from the rule classes (their documentation, examples
and the GPU evidence file), so it cannot drift from what the checker does: `cglint rule`,
the SARIF help text, and the rule reference

    python -m cglint.docs > docs/rules.md

tests/test_docs.py fails when docs/rules.md is not what this prints.
"""
from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from cglint import catalogue
from cglint.datafiles import data_file
from cglint.rule import CAPTURE, CATEGORIES, COMPILED, EXPECT_MARKER, RAW, REGION, REPLAY, RUNTIME, Rule


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
    where: str = ""
    evidence: Optional[str] = None

    @classmethod
    def of(cls, rule: type[Rule]) -> "RuleDoc":
        return cls(
            code=rule.code,
            name=rule.name,
            category=rule.category,
            severity=rule.severity,
            summary=rule.summary,
            why=" ".join(rule.why.split()),
            example=_flagged(rule.invalid[0].strip("\n")) if rule.invalid else None,
            use_instead=rule.valid[0].strip("\n") if rule.valid else None,
            fix_hint=_placeholders(rule.fix_hint),
            fix_safety=rule.fix_safety,
            where=" ".join(filter(None, (_WHERE.get(rule.scope, ""), _APPLIES.get(rule.applies_to, "") if rule.scope != RUNTIME else ""))),
            evidence=_evidence_line(rule.code, rule.severity),
        )

    def markdown(self, level: int = 2) -> str:
        parts = [
            f"{'#' * level} {self.code} `{self.name}` ({self.category}, {self.severity})",
            "",
            f"**What it does.** {self.summary}",
            "",
            f"**Why is this bad?** {self.why}",
        ]
        if self.where:
            parts += ["", f"**Where it looks.** {self.where}"]
        if self.evidence:
            parts += ["", f"**GPU evidence.** {self.evidence}"]
        if self.example:
            parts += ["", "**Example**", "", "```python", self.example, "```"]
        if self.use_instead:
            parts += ["", "**Use instead**", "", "```python", self.use_instead, "```"]
        parts += ["", f"**Fix.** {self.fix_hint}", "", f"**Fix safety.** {self.fix_safety}", ""]
        return "\n".join(parts)


_WHERE = {
    REGION: "Code that runs while a graph is captured: the capture block and every project function, method and module it calls.",
    REPLAY: "Code that runs after a capture, between replays, in the function that captures or replays.",
    CAPTURE: "The capture site itself and the statements around it.",
    RUNTIME: "Reported by `cglint verify` only, from a real capture.",
}

_APPLIES = {
    RAW: "Not in functions compiled with CUDA graphs, where this claim does not hold (docs/compiled.md).",
    COMPILED: "Only in functions compiled with CUDA graphs (`torch.compile(mode=\"reduce-overhead\")`, docs/compiled.md).",
}


def _flagged(example: str) -> str:
    """Test markers read as what they mean in documentation: `# expect: CG101` -> `# flagged: CG101`."""
    return EXPECT_MARKER.sub(lambda m: "# flagged: " + m.group(1), example)


def _placeholders(text: str) -> str:
    """`{name}` in a hint template reads as `<name>` in documentation."""
    return re.sub(r"\{(\w+)\}", r"<\1>", text)


@lru_cache(maxsize=1)
def gpu_evidence() -> dict:
    """rules/gpu-evidence.json, written by bench/gpu_evidence.py on a GPU ({} if absent)."""
    try:
        return json.loads(data_file("gpu-evidence.json").read_text("utf-8"))
    except (OSError, ModuleNotFoundError, ValueError):
        return {}


def _evidence_line(code: str, severity: str) -> Optional[str]:
    data = gpu_evidence()
    entry = data.get("rules", {}).get(code)
    if not entry:
        return None
    where = f"On {data.get('device', 'a GPU')} with torch {data.get('torch', '?')}"
    if entry.get("stale"):
        return f"Not yet run for the current example ({entry['stale']})."
    observed = entry.get("observed")
    verified = entry.get("verify")
    seen = ""
    if verified:  # the finding's message without its trailing [evidence]
        said = re.sub(r" \[[^\]]*\]$", "", verified["message"]).rstrip(".")
        seen = (f"`cglint verify` on {verified['device']} with torch {verified['torch']} reported it at "
                f"`{verified['script']}` line {verified['line']}: {said}")
    if observed == "torch_reported":
        return seen + "."
    if observed == "capture_failed":
        text = entry.get("error", "").split(" Search for ")[0].split(" CUDA kernel errors")[0]
        quote = "``" if "`" in text else "`"
        line = f"{where}, capture fails: {quote}{text}{quote}."
    elif observed == "diverged":
        measure = f" ({entry['measure']})" if entry.get("measure") else ""
        line = f"{where}, capture succeeds and replay diverges from eager: {entry.get('divergence'):.4g}{measure}."
    else:
        line = f"{where}, capture succeeds and nothing diverged."
    changed = entry.get("severity_changed")
    if changed:
        line += f" The severity was changed from {changed['from']} to {changed['to']} because {changed['because']}."
    return f"{line} {seen}." if seen else line


# What each category covers (the vocabulary of the design).
CATEGORY_TEXT = {
    "sync": "Host-device synchronization inside a captured region. A capturing stream cannot be synchronized, so capture fails.",
    "control-flow": "Python branches decided by tensor data (capture fails) or by host state that changes between replays (frozen branch).",
    "cpu-rng": "Host randomness and generator state: drawn once at capture and frozen, or refused during capture.",
    "realloc": "Address instability: tensors rebound, reallocated, created from host data or freed while a graph still uses their memory.",
    "host-effect": "Host work in captured code (prints, logs, files, counters, timers, progress bars) runs once, at capture, and never on replay.",
    "frozen-scalar": "Python numbers baked into captured kernels while the code changes them between replays.",
    "dynamic-shape": "Sizes taken from tensor data or from host state that changes between replays.",
    "stream": "Side streams not forked from and joined back to the capturing stream, the legacy default stream, timing events.",
    "setup": "How a capture is prepared: warmup, autocast caching, checkpointing, capturable optimizers, hooks, DDP, compiled functions.",
    "memory": "Private pools per capture, capture order in a shared pool, empty_cache around captures, static outputs kept across replays.",
}

SEVERITY_TEXT = (
    "Severities: **error** means the capture fails on a GPU; **warning** means the capture succeeds "
    "and replays silently give other results than eager execution; **info** means only memory or "
    "speed is lost. Every error and warning rule's first example was run on a GPU by "
    "`bench/gpu_evidence.py`; what happened is quoted under *GPU evidence* and kept in "
    "`rules/gpu-evidence.json`."
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    rules = catalogue.rule_classes()
    evidence = gpu_evidence()
    lines = [
        "# Rule reference",
        "",
        "<!-- Generated by `python -m cglint.docs > docs/rules.md`; edit the rule classes in rules/ instead. -->",
        "",
        SEVERITY_TEXT,
    ]
    if evidence:
        lines += ["", f"GPU evidence was recorded on {evidence.get('device', '?')} with torch {evidence.get('torch', '?')}."]
    lines += ["", "| Code | Name | Category | Severity | What it flags |", "| --- | --- | --- | --- | --- |"]
    for code, (name, text) in catalogue.TOOL_DIAGNOSTICS.items():
        lines.append(f"| {code} | `{name}` | internal | {catalogue.diagnostic_severity(code)} | {_cell(text)} |")
    for rule in rules:
        lines.append(f"| [{rule.code}](#{rule.code.lower()}) | `{rule.name}` | {rule.category} | {rule.severity} | {_cell(rule.summary)} |")
    for category in CATEGORIES:
        members = [r for r in rules if r.category == category]
        if not members:
            continue
        lines += ["", f"## {category}", "", CATEGORY_TEXT.get(category, ""), ""]
        for rule in members:
            lines += [f'<a id="{rule.code.lower()}"></a>', "", RuleDoc.of(rule).markdown(level=3)]
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
