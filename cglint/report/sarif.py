"""SARIF 2.1.0, for code-scanning services (GitHub code scanning and others): one run, rule
metadata and help from the catalogue, the capture site and call chain of each finding as a
related location and a code flow, and a fingerprint that survives unrelated edits."""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Optional, TextIO
from urllib.parse import quote

from cglint import __version__, catalogue
from cglint.docs import RuleDoc
from cglint.findings import Finding

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_STEP = re.compile(r"^(?P<path>.+?):(?P<line>\d+) (?P<text>.*)$")


def _uri(path: str) -> str:
    """A relative path stays relative (to the checkout root); an absolute one becomes a file URI."""
    if PurePosixPath(path).is_absolute():
        return "file://" + quote(path)
    if PureWindowsPath(path).is_absolute():
        return "file:///" + quote(PureWindowsPath(path).as_posix())
    return quote(path.replace("\\", "/"))


def _location(path: str, line: int, column: Optional[int] = None, end_line: Optional[int] = None, end_column: Optional[int] = None) -> dict:
    region: dict = {"startLine": max(line, 1)}
    if column is not None:
        region.update(startColumn=max(column, 1), endLine=max(end_line or line, 1), endColumn=max(end_column or column, 1))
    return {"physicalLocation": {"artifactLocation": {"uri": _uri(path)}, "region": region}}


def _sentence(text: str) -> str:
    """`text` ending as a sentence: SARIF messages are complete sentences, and a message
    without a full stop ran into the fix that follows it ("...at that moment Fix: ...")."""
    text = text.rstrip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _rules() -> list[dict]:
    rules = []
    for code, (name, text) in catalogue.TOOL_DIAGNOSTICS.items():
        rules.append(
            {
                "id": code,
                "name": name,
                "shortDescription": {"text": text},
                "help": {"text": text},
                "defaultConfiguration": {"level": _LEVEL[catalogue.diagnostic_severity(code)]},
                "properties": {"category": "internal", "severity": catalogue.diagnostic_severity(code), "tags": ["cglint", "internal"]},
            }
        )
    for rule in catalogue.rule_classes():
        doc = RuleDoc.of(rule)
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": doc.why},
                "help": {"text": f"{doc.why}\n\nFix: {doc.fix_hint}\n\nFix safety: {doc.fix_safety}", "markdown": doc.markdown()},
                "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                "properties": {"category": rule.category, "severity": rule.severity, "tags": ["cglint", "cuda-graphs", rule.category]},
            }
        )
    return rules


def _code_flow(f: Finding) -> Optional[dict]:
    steps = [m for m in (_STEP.match(s) for s in f.trace) if m is not None]
    if not steps:
        return None
    locations = [
        {"location": {**_location(m["path"], int(m["line"])), "message": {"text": m["text"]}}, "nestingLevel": i}
        for i, m in enumerate(steps)
    ]
    locations.append({"location": {**_location(f.path, f.line, f.column, f.end_line, f.end_column), "message": {"text": f.code}}, "nestingLevel": len(steps)})
    return {"message": {"text": "how the line is reached from the capture"}, "threadFlows": [{"locations": locations}]}


def as_sarif(findings: list[Finding]) -> dict:
    from cglint.baseline import keys

    rules = _rules()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = []
    for f, key in zip(findings, keys(findings)):
        result = {
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, 0),
            "level": _LEVEL.get(f.severity, "warning"),
            "message": {"text": _sentence(f.message) + (f" Fix: {_sentence(f.fix_hint)}" if f.fix_hint else "")},
            "locations": [_location(f.path, f.line, f.column, f.end_line, f.end_column)],
            # The same key as baselines (file, code, line text, occurrence): stable across edits elsewhere.
            "partialFingerprints": {"cglintFinding/v1": hashlib.sha256("\0".join(map(str, key)).encode()).hexdigest()[:32]},
        }
        related = [{"message": {"text": f"captured by {f.region.kind}"}, **_location(f.region.path, f.region.line)}] if f.region else []
        related += [{"message": {"text": r.message}, **_location(r.path, r.line, r.column)} for r in f.related]
        if related:
            result["relatedLocations"] = [{"id": i, **location} for i, location in enumerate(related, 1)]
        flow = _code_flow(f)
        if flow is not None:
            result["codeFlows"] = [flow]
        if f.source != "static":
            result["properties"] = {"source": f.source}
        results.append(result)
    driver = {"name": "cglint", "version": __version__, "semanticVersion": __version__, "informationUri": "https://pypi.org/project/cglint/", "rules": rules}
    run = {"tool": {"driver": driver}, "columnKind": "unicodeCodePoints", "invocations": [{"executionSuccessful": True}], "results": results}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [run]}


def write_sarif(findings: list[Finding], stream: TextIO) -> None:
    json.dump(as_sarif(findings), stream, indent=2)
    stream.write("\n")
