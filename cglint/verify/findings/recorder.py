"""Observations made while instrumented code runs, and how they become findings.

An observation is keyed by (code, file, line): the same hazard seen in several passes or
captures is one finding with its evidence merged. While a recognised API call runs
(`.item()`, `print`), the operators it dispatches are evidence of that call, not new
observations: `explaining()` keeps that context.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Callable, Iterator, Optional

from cglint.findings import Finding, Region, Related
from cglint.verify.findings import frames
from cglint.verify.findings.rule_metadata import meta

# Evidence notes and related lines kept per finding: a hazard seen in every pass, capture
# and replay would list each; six show what differed and keep the report readable.
_MAX_EVIDENCE = 6
# Told after an observation is made or gains evidence (a supervised run streams findings from here).
on_observation: Optional[Callable[[], None]] = None


@dataclass
class Observation:
    code: str
    where: frames.Where
    what: str
    region: Optional[Region] = None
    trace: tuple[str, ...] = ()
    evidence: list[str] = field(default_factory=list)
    weak: bool = False  # dropped when a stronger observation shares its line (print of a tensor)
    phases: list[str] = field(default_factory=list)  # "eager trace", "capture", ...
    related: list[Related] = field(default_factory=list)  # the line that changed a guarded value

    def relate(self, related: Related) -> None:
        if related not in self.related and len(self.related) < _MAX_EVIDENCE:
            self.related.append(related)

    def add(self, note: str) -> None:
        if note.startswith("seen during "):
            phase = note[len("seen during "):]
            if phase not in self.phases:
                self.phases.append(phase)
        elif note and note not in self.evidence and len(self.evidence) < _MAX_EVIDENCE:
            self.evidence.append(note)

    def finding(self) -> Finding:
        rule = meta(self.code)
        message = self.what
        notes = ([f"seen during {', '.join(self.phases)}"] if self.phases else []) + self.evidence
        if notes:
            message += f" [{'; '.join(notes)}]"
        w = self.where
        return Finding(
            path=frames.display_path(w.path),
            line=w.line,
            column=w.column,
            end_line=w.end_line or w.line,
            end_column=w.end_column or w.column,
            code=self.code,
            category=rule.category,
            severity=rule.severity,
            message=message,
            fix_hint=rule.fix_hint,
            region=self.region,
            trace=self.trace,
            source="runtime",
            related=tuple(self.related),
        )


class Recorder:
    """Collects the observations of one instrumented run (a capture, a trace pass)."""

    def __init__(self, region: Optional[Region] = None, stop: Optional[FrameType] = None, phase: str = "capture"):
        self.region = region
        self.stop = stop  # the outermost frame of traces (the capture site)
        self.phase = phase
        self.observations: dict[tuple[str, str, int], Observation] = {}
        self._explaining: list[Observation] = []
        self._lock = threading.Lock()

    # --- recording ---------------------------------------------------------
    def observe(
        self,
        code: str,
        what: str,
        frame: Optional[FrameType] = None,
        *,
        evidence: str = "",
        weak: bool = False,
    ) -> Optional[Observation]:
        """Record at `frame`'s user line (the innermost user frame when not given)."""
        user = frames.user_frame(frame) if frame is not None else frames.current_user_frame(2)
        if user is None:
            return None
        stack = tuple(w.label() for w in frames.user_stack(user, self.stop))
        site = self.site_label()
        if site and stack[:1] == site:
            stack = stack[1:]  # the outermost frame is the site's own line (`verify(fn, ...)`): shown once
        return self.observe_at(code, what, frames.where(user), site + stack, evidence=evidence, weak=weak)

    def observe_at(
        self, code: str, what: str, where: frames.Where, trace: tuple[str, ...] = (), *, evidence: str = "",
        weak: bool = False,
    ) -> Observation:
        key = (code, where.path, where.line)
        with self._lock:
            obs = self.observations.get(key)
            new = obs is None
            if obs is None:
                obs = Observation(code, where, what, self.region, trace, weak=weak)
                self.observations[key] = obs
            known = len(obs.evidence) + len(obs.phases)
            obs.add(evidence or f"seen during {self.phase}")
            grew = new or len(obs.evidence) + len(obs.phases) != known
        if grew and on_observation is not None:
            on_observation()
        return obs

    def site_label(self) -> tuple[str, ...]:
        """The capture site as the first step of a trace: 'run.py:17 with torch.cuda.graph(g):'."""
        if self.region is None:
            return ()
        import linecache

        text = linecache.getline(self.region.path, self.region.line).strip()
        return (f"{self.region.path}:{self.region.line} {text}".rstrip(),)

    @contextmanager
    def explaining(self, obs: Optional[Observation]) -> Iterator[None]:
        """Operators dispatched inside this block are evidence of `obs`."""
        if obs is None:
            yield
            return
        self._explaining.append(obs)
        try:
            yield
        finally:
            self._explaining.pop()

    @property
    def explained_by(self) -> Optional[Observation]:
        return self._explaining[-1] if self._explaining else None

    def at_line(self, where: frames.Where) -> list[Observation]:
        return [o for (_, path, line), o in self.observations.items() if (path, line) == (where.path, where.line)]

    # --- results -----------------------------------------------------------
    def merge(self, other: "Recorder") -> None:
        for key, obs in other.observations.items():
            mine = self.observations.get(key)
            if mine is None:
                self.observations[key] = obs
            else:
                for note in obs.evidence + [f"seen during {p}" for p in obs.phases]:
                    mine.add(note)
                for related in obs.related:
                    mine.relate(related)

    def findings(self) -> list[Finding]:
        lines = {}
        for obs in self.observations.values():
            if not obs.weak:
                lines[(obs.where.path, obs.where.line)] = True
        kept = [o for o in self.observations.values() if not (o.weak and (o.where.path, o.where.line) in lines)]
        return sorted((o.finding() for o in kept), key=lambda f: f.sort_key)
