"""Reporters: the same findings as text (rich), JSON, SARIF or GitHub annotations."""
from __future__ import annotations

from typing import Optional, TextIO

from cglint.findings import Finding
from cglint.reach import Coverage

FORMATS = ("text", "concise", "json", "sarif", "github")


def write_report(findings: list[Finding], *, fmt: str, files_checked: int, stream: TextIO, statistics: bool = False, color: bool = False, coverage: Optional[Coverage] = None) -> None:
    if fmt == "json":
        from cglint.report.json_format import write_json

        write_json(findings, files_checked, stream)
    elif fmt == "sarif":
        from cglint.report.sarif import write_sarif

        write_sarif(findings, stream)
    elif fmt == "github":
        from cglint.report.github import write_github

        write_github(findings, stream)
    elif fmt == "concise":
        from cglint.report.text import write_concise

        write_concise(findings, files_checked, stream, statistics, coverage, color=color)
    else:
        from cglint.report.text import write_text

        write_text(findings, files_checked, stream, statistics=statistics, color=color, coverage=coverage)
