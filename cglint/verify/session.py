"""What a whole instrumented run (a script, a pytest session) has seen so far."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from cglint.findings import Finding
from cglint.verify.recorder import Recorder


@dataclass
class GraphInfo:
    site: str
    kind: str
    ok: bool
    capture_seconds: float
    pool_bytes: Optional[int] = None
    replays: int = 0


@dataclass
class Session:
    gpu: bool
    recorders: list[Recorder] = field(default_factory=list)
    graphs: list[GraphInfo] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    handled: set[int] = field(default_factory=set)  # ids of exceptions already reported
    # Captures begun but not ended, each with how to close it given the error that ended the run.
    open: dict[int, Callable[[Optional[BaseException]], None]] = field(default_factory=dict)

    def close_open(self, exc: Optional[BaseException]) -> None:
        while self.open:
            _, close = self.open.popitem()
            close(exc if exc is not None and id(exc) not in self.handled else None)
            if exc is not None:
                self.handled.add(id(exc))

    def findings(self, since: int = 0) -> list[Finding]:
        """Findings of the recorders added after the first `since` ones, one per (code, line)."""
        merged = Recorder()
        for recorder in self.recorders[since:]:
            merged.merge(recorder)
        return merged.findings()

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


_current: Optional[Session] = None


def current() -> Optional[Session]:
    return _current


def begin(gpu: bool) -> Session:
    global _current
    _current = Session(gpu=gpu)
    return _current


def end() -> None:
    global _current
    _current = None
