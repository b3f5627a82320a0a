"""What a whole instrumented run (a script, a pytest session) has seen so far.

A supervised run streams its state as it changes (`listener`): every new observation,
capture, replay count that starts and note reaches the supervising process at once, so
nothing is lost when the script ends the process abruptly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

from cglint.findings import Finding
from cglint.verify.findings import recorder as recorders
from cglint.verify.findings.recorder import Recorder
from cglint.verify.run.captures import CaptureRecord

# What the summary and the JSON say about a capture that the run ended inside of.
ENDED_INSIDE = "the run ended during this capture"


@dataclass
class Session:
    gpu: bool
    recorders: list[Recorder] = field(default_factory=list)
    graphs: list[CaptureRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    handled: set[int] = field(default_factory=set)  # ids of exceptions already reported
    # Captures begun but not ended, each with how to close it given the error that ended the run.
    open: dict[int, Callable[[Optional[BaseException]], None]] = field(default_factory=dict)
    listener: Optional[Callable[["Session"], None]] = None  # told of every change (a supervised run)

    def close_open(self, exc: Optional[BaseException]) -> None:
        while self.open:
            _, close = self.open.popitem()
            close(exc if exc is not None and id(exc) not in self.handled else None)
            if exc is not None:
                self.handled.add(id(exc))
        self.changed()

    def findings(self, since: int = 0) -> list[Finding]:
        """Findings of the recorders added after the first `since` ones, one per (code, line)."""
        merged = Recorder()
        for recorder in list(self.recorders[since:]):
            merged.merge(recorder)
        return merged.findings()

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
            self.changed()

    def add_graph(self, record: CaptureRecord) -> None:
        self.graphs.append(record)
        self.changed()

    def replayed_graph(self, record: CaptureRecord) -> None:
        """The graph of `record` was replayed (graphs captured at one line, in a loop, count apart)."""
        record.replays += 1
        if record.replays == 1:  # not-replayed becomes ok: worth telling at once
            self.changed()

    def captures(self) -> list[CaptureRecord]:
        """The "captures" of the report, with the ones still open when asked shown as failed."""
        done = list(self.graphs)
        begun = [r for r in self.recorders if r.region is not None and r.phase != "replay"]
        for recorder in begun[len(begun) - len(self.open):] if self.open else ():
            done.append(CaptureRecord.at(recorder.region, ok=False, error=ENDED_INSIDE))
        return done

    def changed(self) -> None:
        if self.listener is not None:
            self.listener(self)


_current: Optional[Session] = None


def current() -> Optional[Session]:
    return _current


def _observed() -> None:
    if _current is not None:
        _current.changed()


def begin(gpu: bool, listener: Optional[Callable[[Session], None]] = None) -> Session:
    global _current
    _current = Session(gpu=gpu, listener=listener)
    recorders.on_observation = _observed if listener is not None else None
    return _current


def end() -> None:
    global _current
    _current = None
    recorders.on_observation = None
