"""The finding object shared by the static checker, the verifier and every reporter.

Its JSON form is a stable contract (see docs/design.md): field names and meanings never change.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class Region:
    """The capture site that makes a line captured."""

    path: str
    line: int
    kind: str  # "torch.cuda.graph", "capture_begin", "make_graphed_callables", ...

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "kind": self.kind}


@dataclass(frozen=True)
class Related:
    """Another location that explains a finding: the line that changes a frozen value, another
    occurrence of the same hazard in the function."""

    path: str
    line: int
    column: int
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "column": self.column, "message": self.message}


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
    related: tuple[Related, ...] = ()
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
        if self.related:
            data["related"] = [r.to_json() for r in self.related]
        if self.source != "static":
            data["source"] = self.source
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Finding":
        region = data.get("region")
        return cls(
            path=data["path"],
            line=data["line"],
            column=data["column"],
            end_line=data["end_line"],
            end_column=data["end_column"],
            code=data["code"],
            category=data["category"],
            severity=data["severity"],
            message=data["message"],
            fix_hint=data.get("fix_hint", ""),
            region=Region(region["path"], region["line"], region["kind"]) if region else None,
            trace=tuple(data.get("trace", ())),
            source=data.get("source", "static"),
            related=tuple(Related(r["path"], r["line"], r["column"], r["message"]) for r in data.get("related", ())),
        )


def filled(template: str, details: Mapping[str, Any]) -> str:
    """A rule's `message` or `fix_hint` template filled from a hit's details (`{expr}`, `{name}`,
    the verifier's `{what}`); as written where the details lack a name it uses."""
    try:
        return template.format(**details)
    except (KeyError, IndexError, ValueError):
        return template
