"""The finding object shared by the static checker, the verifier and every reporter.

Its JSON form is a stable contract (see docs/design.md): field names and meanings never change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Region:
    """The capture site that makes a line captured."""

    path: str
    line: int
    kind: str  # "torch.cuda.graph", "capture_begin", "make_graphed_callables", ...

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "kind": self.kind}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    category: str
    severity: str
    message: str
    fix_hint: str = ""
    region: Optional[Region] = None
    trace: tuple[str, ...] = ()
    source: str = "static"  # "static" or "runtime"
    fixable: bool = field(default=False, compare=False)

    @property
    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.code, self.message)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "code": self.code,
            "category": self.category,
            "severity": self.severity,
            "message": self.message,
            "fix_hint": self.fix_hint,
            "region": self.region.to_json() if self.region else None,
            "trace": list(self.trace),
        }
        if self.source != "static":
            data["source"] = self.source
        return data
