"""GitHub Actions workflow commands, which annotate the lines of a pull request."""
from __future__ import annotations

from typing import TextIO

from cglint.findings import Finding

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape(text: str, property_value: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    if property_value:
        text = text.replace(":", "%3A").replace(",", "%2C")
    return text


def write_github(findings: list[Finding], stream: TextIO) -> None:
    for f in findings:
        props = f"file={_escape(f.path, True)},line={f.line},col={f.column},endLine={f.end_line},endColumn={f.end_column},title={_escape(f.code, True)}"
        stream.write(f"::{_LEVEL.get(f.severity, 'warning')} {props}::{_escape(f'{f.code} {f.message}')}\n")
