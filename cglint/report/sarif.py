"""SARIF 2.1.0, for code-scanning services: one run, rule metadata from the catalogue."""
from __future__ import annotations

import json
from typing import TextIO

from cglint import __version__, catalogue
from cglint.findings import Finding

_LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _rules() -> list[dict]:
    rules = []
    for code, (name, text) in catalogue.TOOL_DIAGNOSTICS.items():
        rules.append({"id": code, "name": name, "shortDescription": {"text": text}, "defaultConfiguration": {"level": "error"}})
    for rule in catalogue.rule_classes():
        doc = rule.doc()
        rules.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": doc.why},
                "help": {"text": f"{doc.why}\n\nFix: {doc.fix_hint}", "markdown": doc.markdown()},
                "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                "properties": {"category": rule.category, "severity": rule.severity},
            }
        )
    return rules


def as_sarif(findings: list[Finding]) -> dict:
    rules = _rules()
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = []
    for f in findings:
        result = {
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, 0),
            "level": _LEVEL.get(f.severity, "warning"),
            "message": {"text": f.message + (f" Fix: {f.fix_hint}" if f.fix_hint else "")},
            "locations": [
                {
                    "physicalLocation": {
                        "artifactLocation": {"uri": f.path},
                        "region": {"startLine": f.line, "startColumn": f.column, "endLine": f.end_line, "endColumn": f.end_column},
                    }
                }
            ],
        }
        if f.region is not None:
            result["relatedLocations"] = [
                {
                    "id": 1,
                    "message": {"text": f"captured by {f.region.kind}"},
                    "physicalLocation": {"artifactLocation": {"uri": f.region.path}, "region": {"startLine": max(f.region.line, 1)}},
                }
            ]
        results.append(result)
    driver = {"name": "cglint", "version": __version__, "informationUri": "https://pypi.org/project/cglint/", "rules": rules}
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": results}]}


def write_sarif(findings: list[Finding], stream: TextIO) -> None:
    json.dump(as_sarif(findings), stream, indent=2)
    stream.write("\n")
