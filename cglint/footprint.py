"""A run's footprint: what the engine's findings depend on besides the files it read,
and its stored form (the cache keeps one per set of checked files and settings).

A later run in which only other files changed, none of them read by the engine nor
answering its searches differently, reuses the engine's findings (check.py decides,
cache.py stores). Paths are stored absolute.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from cglint.findings import Finding
from cglint.reach import Coverage


@dataclass
class Footprint:
    read: set  # every file the engine parsed or tried to, resolved
    tokens: frozenset  # the byte scan that picks the files parsed up front
    helpers: frozenset  # capture helpers found, looked for by name in every file
    searches: dict[str, list]  # texts looked for in every file -> the files that had them
    missing: list[str]  # modules the engine looked for on disk and did not find ("root/pkg/mod")
    engine: list[Finding]  # the run's findings that came from the engine
    per_file: dict  # the rest (read and syntax errors), by file
    coverage: Coverage  # what the engine followed from the captures (the summary's counts)
    # The paths whose creation would give the engine a module it looked for: from `missing`,
    # and only when a cache asks (thousands of lookups on a large tree).
    known_absent: Optional[list[str]] = None

    @property
    def absent(self) -> list[str]:
        if self.known_absent is None:
            self.known_absent = _absent(self.missing)
        return self.known_absent

    def to_json(self) -> dict[str, Any]:
        return {
            "read": sorted(str(p) for p in self.read),
            "tokens": sorted(self.tokens),
            "helpers": sorted(self.helpers),
            "searches": {text: [os.path.abspath(p) for p in paths] for text, paths in self.searches.items()},
            "absent": self.absent,
            "engine": [f.to_json() for f in self.engine],
            "per_file": {os.path.abspath(p): [f.to_json() for f in found] for p, found in self.per_file.items()},
            "coverage": self.coverage.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Footprint":
        """A stored footprint; the modules it looked for are known only by `absent`."""
        return cls(
            read=set(data["read"]),
            tokens=frozenset(data["tokens"]),
            helpers=frozenset(data["helpers"]),
            searches=data["searches"],
            missing=[],
            engine=[Finding.from_json(f) for f in data["engine"]],
            per_file={path: [Finding.from_json(f) for f in found] for path, found in data["per_file"].items()},
            coverage=Coverage.from_json(data["coverage"]),
            known_absent=list(data["absent"]),
        )


def _absent(missing: list[str]) -> list[str]:
    """For modules looked for and not found ("root/pkg/mod"), the paths that must stay absent
    for them to stay missing: of `mod.py` and `mod/__init__.py`, the outermost path that does
    not exist (a few hundred paths for thousands of names: most are in folders that do not)."""
    found: set[str] = set()
    exists: dict[str, bool] = {}

    def is_dir(path: str) -> bool:
        if path not in exists:
            exists[path] = os.path.isdir(path)
        return exists[path]

    for base in missing:
        for path in (base + ".py", os.path.join(base, "__init__.py")):
            while os.path.dirname(path) != path and not is_dir(os.path.dirname(path)):
                path = os.path.dirname(path)
            found.add(path)
    return sorted(found)
