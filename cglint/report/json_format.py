"""The JSON contract of docs/design.md: {"version", "findings", "files_checked"}."""
from __future__ import annotations

import json
from typing import TextIO

from cglint import __version__
from cglint.findings import Finding


def as_json(findings: list[Finding], files_checked: int) -> dict:
    return {"version": __version__, "findings": [f.to_json() for f in findings], "files_checked": files_checked}


def write_json(findings: list[Finding], files_checked: int, stream: TextIO) -> None:
    json.dump(as_json(findings, files_checked), stream, indent=2)
    stream.write("\n")
