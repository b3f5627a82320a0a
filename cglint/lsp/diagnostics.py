"""Findings as LSP diagnostics: the rule code linked to its documentation, the severity of
the catalogue, the capture site and the call chain from it as related information."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from lsprotocol import types
from pygls.workspace import TextDocument

from cglint import catalogue
from cglint.discovery import resolved
from cglint.findings import Finding

SOURCE = "cglint"
_SEVERITY = {
    "error": types.DiagnosticSeverity.Error,
    "warning": types.DiagnosticSeverity.Warning,
    "info": types.DiagnosticSeverity.Information,
}
_STEP = re.compile(r"^(?P<path>.+?):(?P<line>\d+) (?P<text>.*)$")  # a trace step: "path:line text"


def default_docs_url() -> Optional[str]:
    """The rule reference of the checkout cglint runs from (docs/ is not in the wheel)."""
    import cglint

    rules = Path(cglint.__file__).resolve().parent.parent / "docs" / "rules.md"
    return rules.as_uri() if rules.is_file() else None


def rule_url(code: str, docs_url: Optional[str]) -> Optional[str]:
    """The rule's section of the reference (its headings are anchored by code); the tool's
    own diagnostics are described in its table."""
    if not docs_url:
        return None
    return docs_url if code in catalogue.TOOL_DIAGNOSTICS else f"{docs_url}#{code.lower()}"


def _location(path: str, line: int) -> types.Location:
    start = types.Position(line=max(line - 1, 0), character=0)
    return types.Location(uri=resolved(Path(path)).as_uri(), range=types.Range(start=start, end=start))


def related(finding: Finding) -> list[types.DiagnosticRelatedInformation]:
    """The capture site, then each call on the way to the finding's line (as the text
    report's `captured: a -> b -> c`)."""
    steps = [m for m in map(_STEP.match, finding.trace) if m is not None]
    found = [
        types.DiagnosticRelatedInformation(_location(m["path"], int(m["line"])), f"{'captured: ' if i == 0 else '-> '}{m['text']}")
        for i, m in enumerate(steps)
    ]
    region = finding.region
    if region is not None and not any(m["path"] == region.path and int(m["line"]) == region.line for m in steps):
        found.insert(0, types.DiagnosticRelatedInformation(_location(region.path, region.line), f"captured by {region.kind}"))
    return found


def diagnostic(finding: Finding, document: TextDocument, docs_url: Optional[str]) -> types.Diagnostic:
    # cglint counts columns in code points from 1; the document converts to the client's units.
    span = types.Range(
        start=types.Position(line=max(finding.line - 1, 0), character=max(finding.column - 1, 0)),
        end=types.Position(line=max(finding.end_line - 1, 0), character=max(finding.end_column - 1, 0)),
    )
    url = rule_url(finding.code, docs_url)
    return types.Diagnostic(
        range=document.range_to_client_units(span),  # type: ignore[arg-type]  # a Range in pygls 2.0, alike after
        message=finding.message + (f"\nFix: {finding.fix_hint}" if finding.fix_hint else ""),
        severity=_SEVERITY.get(finding.severity, types.DiagnosticSeverity.Warning),
        code=finding.code,
        code_description=types.CodeDescription(href=url) if url else None,
        source=SOURCE,
        related_information=related(finding) or None,
    )
