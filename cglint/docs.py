"""The rules' documentation, rendered from the rule classes (their documentation, examples,
fix outputs and the GPU evidence file), so it cannot drift from what the checker does:
`cglint rule`, the SARIF help text, and every generated file of a source checkout: the rule
reference docs/rules.md, the code index rules/index.toml, and the tables between
`<!-- generated: NAME ... -->` and `<!-- end of generated: NAME -->` in README.md and docs/*.md.
Regenerate them all after changing a rule:

    python -m cglint.docs            # writes what changed; --check only says what is stale

tests/test_docs.py fails when a checked-in copy is not what this writes.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from cglint import catalogue
from cglint.datafiles import data_file
from cglint.rule import CAPTURE, CATEGORIES, COMPILED, EXPECT_MARKER, RAW, REGION, REPLAY, RUNTIME, Rule, without_markers


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
    fix_diff: Optional[str] = None  # what `--fix` changes in the example

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
            fix_diff=_fix_diff(rule),
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
        if self.fix_diff:
            parts += ["", "**What `--fix` changes in the example**", "", "```diff", self.fix_diff, "```"]
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


def _fix_change(rule: type[Rule]) -> list[str]:
    """The lines of a unified diff (one line of context, no file headers) from the rule's first
    example to what `--fix` writes for it (`Rule.fixed`); none where the fix leaves it alone."""
    fixed = rule.fixed[0] if rule.fixed else None
    if fixed is None:
        return []
    before = without_markers(rule.invalid[0]).strip("\n").splitlines()
    return list(difflib.unified_diff(before, fixed.strip("\n").splitlines(), n=1, lineterm=""))[2:]


def _fix_diff(rule: type[Rule]) -> Optional[str]:
    lines = [" ..." if line.startswith("@@") else line for line in _fix_change(rule)][1:]
    return "\n".join(lines) or None


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


def reference() -> str:
    """docs/rules.md: every rule in full, by category, after a table of them all."""
    rules = catalogue.rule_classes()
    evidence = gpu_evidence()
    lines = [
        "# Rule reference",
        "",
        "<!-- Generated by `python -m cglint.docs`; edit the rule classes in rules/ instead. -->",
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


def _codes(rules: list[type[Rule]]) -> str:
    codes = [rule.code for rule in rules]
    return ", ".join(codes[:-1]) + f" and {codes[-1]}" if len(codes) > 1 else "".join(codes)


def rule_table() -> str:
    """The README's rule table, with the rules the verifier alone reports and those about
    compiled functions named after it."""
    rules = catalogue.rule_classes()
    lines = ["| code | category | severity | what it flags |", "|---|---|---|---|"]
    lines += [f"| {r.code} | {r.category} | {r.severity} | {_cell(r.summary)} |" for r in rules]
    runtime = [r for r in rules if r.scope == RUNTIME]
    compiled = [r for r in rules if r.applies_to == COMPILED]
    return "\n".join([
        *lines,
        "",
        f"{_codes(runtime)} are reported by the runtime verifier only.",
        "",
        f"{_codes(compiled)} are about functions compiled with CUDA graphs",
        '(`torch.compile(mode="reduce-overhead")`), where the raw-capture rules do not apply: graph breaks,',
        "recompiles and skipped CUDA graphs cost speed, and outputs kept past the next call are overwritten",
        "([docs/compiled.md](docs/compiled.md)).",
    ])


def autofix_table() -> str:
    """The README's table of the rules that fix: the lines of each rule's first example and
    what `--fix` writes in their place."""
    lines = ["| code | rule | in the rule's example | `--fix` writes |", "|---|---|---|---|"]
    for rule in catalogue.rule_classes():
        change = _fix_change(rule)
        if not change:
            continue
        removed = " ".join(f"`{line[1:].strip()}`" for line in change if line.startswith("-"))
        added = " ".join(f"`{line[1:].strip()}`" for line in change if line.startswith("+"))
        lines.append(f"| {rule.code} | `{rule.name}` | {_cell(removed)} | {_cell(added) or 'nothing: the statement is removed'} |")
    return "\n".join(lines)


def runtime_table() -> str:
    """docs/verify.md's table of the codes only the verifier reports."""
    lines = ["| code | severity | what it reports |", "|---|---|---|"]
    lines += [f"| {r.code} | {r.severity} | {_cell(r.summary)} |" for r in catalogue.rule_classes() if r.scope == RUNTIME]
    return "\n".join(lines)


# The blocks a page of the checkout may hold, by name.
BLOCKS = {"rule-table": rule_table, "autofix-table": autofix_table, "runtime-table": runtime_table}
BLOCK = re.compile(r"(<!-- generated: (?P<name>[\w-]+)\b[^>]*-->\n)(?P<body>.*?)(<!-- end of generated: (?P=name) -->)", re.S)
ROOT = Path(__file__).resolve().parent.parent  # a source checkout: README.md, docs/, rules/


def fill_blocks(text: str) -> str:
    """A page with each generated block rendered afresh."""

    def block(match: re.Match) -> str:
        if match["name"] not in BLOCKS:
            raise ValueError(f"unknown generated block {match['name']!r}: one of {', '.join(BLOCKS)}")
        return match[1] + BLOCKS[match["name"]]() + "\n" + match[4]

    return BLOCK.sub(block, text)


def pages(root: Path = ROOT) -> list[Path]:
    """The pages of a checkout that may hold generated blocks."""
    return [root / "README.md", *sorted(p for p in (root / "docs").glob("*.md") if p.name != "rules.md")]


def generated(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file of a checkout and what it must hold."""
    files = {root / "rules" / "index.toml": catalogue.render_index(), root / "docs" / "rules.md": reference()}
    for page in pages(root):
        text = page.read_text("utf-8")
        if BLOCK.search(text):
            files[page] = fill_blocks(text)
    return files


def stale(files: dict[Path, str]) -> list[Path]:
    """The generated files whose checked-in copy is not what they must hold."""
    return [path for path, text in files.items() if not path.is_file() or path.read_text("utf-8") != text]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cglint.docs", description="Regenerate the files generated from the rule classes.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a generated file is stale")
    args = parser.parse_args(argv)
    if not (ROOT / "README.md").is_file():
        sys.stderr.write(f"{ROOT} is not a source checkout of cglint: nothing to generate\n")
        return 2
    files = generated(ROOT)
    changed = stale(files)
    for path in changed:
        if not args.check:
            path.write_text(files[path], "utf-8")
        sys.stderr.write(f"{'stale' if args.check else 'wrote'} {path.relative_to(ROOT)}\n")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
