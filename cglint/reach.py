"""What the static checker followed from each capture site: the data of `cglint reach` and
of the coverage line of `cglint check`, in the JSON shape of docs/design.md.

`cglint verify --save-reach` writes the same shape from a real run, so static reach can be
compared with what ran (bench/reach.py).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass(frozen=True)
class Reached:
    """A project function that runs while the capture records."""

    path: str
    qualname: str  # as Python's __qualname__: "Class.method", "outer.<locals>.inner"
    line: int
    via: tuple[str, ...]  # the call chain from the capture site, "path:line call" each


@dataclass(frozen=True)
class Unresolved:
    """A call made in captured code whose callee the checker could not tell."""

    path: str
    line: int
    call: str
    why: str


@dataclass
class CaptureReach:
    path: str
    line: int
    kind: str
    reached: list[Reached] = field(default_factory=list)
    unresolved: list[Unresolved] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "kind": self.kind,
            "reached": [{"path": r.path, "qualname": r.qualname, "line": r.line, "via": list(r.via)} for r in self.reached],
            "unresolved": [{"path": u.path, "line": u.line, "call": u.call, "why": u.why} for u in self.unresolved],
        }


@dataclass(frozen=True)
class Coverage:
    """How much of the captured code a check followed (the summary line's counts)."""

    captures: int = 0
    functions: int = 0  # distinct project functions followed from the capture sites
    unresolved: int = 0  # distinct calls out of captured code that could not be followed

    def to_json(self) -> dict[str, int]:
        return {"captures": self.captures, "functions": self.functions, "unresolved": self.unresolved}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Coverage":
        return cls(int(data["captures"]), int(data["functions"]), int(data["unresolved"]))


def as_json(captures: list[CaptureReach], version: str) -> dict[str, Any]:
    """`version` is cglint's, given by the caller: the verifier builds this object too, and
    importing the package from there would close an import cycle through its lazy `verify`."""
    return {"version": version, "captures": [c.to_json() for c in captures]}


def write_json(captures: list[CaptureReach], stream: TextIO, version: str) -> None:
    json.dump(as_json(captures, version), stream, indent=2)
    stream.write("\n")


def write_text(captures: list[CaptureReach], stream: TextIO) -> None:
    for capture in captures:
        stream.write(f"{capture.path}:{capture.line}: {capture.kind}\n")
        for r in capture.reached:
            stream.write(f"   reaches {r.path}:{r.line} {r.qualname}\n")
        for u in capture.unresolved:
            stream.write(f"   not followed {u.path}:{u.line} `{u.call}`: {u.why}\n")
    functions = len({(r.path, r.qualname) for c in captures for r in c.reached})
    unresolved = len({(u.path, u.line, u.call) for c in captures for u in c.unresolved})
    stream.write(coverage_phrase(Coverage(len(captures), functions, unresolved)).capitalize() + ".\n")


def coverage_phrase(coverage: Coverage) -> str:
    """"3 captures followed into 41 functions, 2 calls not followed"; "no capture found"."""
    if not coverage.captures:
        return "no capture found"
    text = f"{_count(coverage.captures, 'capture')} followed into {_count(coverage.functions, 'function')}"
    if coverage.unresolved:
        text += f", {_count(coverage.unresolved, 'call')} not followed (`cglint reach` lists them)"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"
