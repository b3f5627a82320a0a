"""What `cglint.verify_function(...)` returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from cglint.findings import Finding


@dataclass
class VerifyReport:
    mode: str  # "gpu" (trial capture and replay) or "cpu" (trace only)
    findings: list[Finding] = field(default_factory=list)
    capture_error: Optional[str] = None  # the first error of the capture, as raised
    divergence: dict[str, float] = field(default_factory=dict)  # output -> max abs error vs eager
    pool_bytes: Optional[int] = None  # the graph's private memory pool
    eager_ms: Optional[float] = None  # one eager call (with the same input copies as replay)
    replay_ms: Optional[float] = None  # copy inputs + replay
    capture_ms: Optional[float] = None  # instrumented capture
    bare_capture_ms: Optional[float] = None  # the same capture without instrumentation
    skipped: list[str] = field(default_factory=list)  # checks not run, and why
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No error or warning findings (info findings, like CG990, do not count)."""
        return not any(f.severity in ("error", "warning") for f in self.findings)

    @property
    def codes(self) -> list[str]:
        return sorted({f.code for f in self.findings})

    def to_json(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "findings"}
        data["findings"] = [f.to_json() for f in self.findings]
        return data

    def summary(self) -> str:
        lines = [f"cglint verify ({self.mode} mode): {len(self.findings)} finding(s)"]
        for f in self.findings:
            lines.append(f"  {f.path}:{f.line}:{f.column}: {f.code} {f.message}")
        if self.capture_error:
            lines.append(f"  capture failed: {self.capture_error}")
        if self.divergence:
            worst = ", ".join(f"{k}={v:.3g}" for k, v in self.divergence.items())
            lines.append(f"  max |replay - eager|: {worst}")
        if self.eager_ms is not None and self.replay_ms is not None:
            lines.append(f"  eager {self.eager_ms:.3f} ms, replay {self.replay_ms:.3f} ms")
        if self.pool_bytes is not None:
            lines.append(f"  graph pool {self.pool_bytes / 2**20:.1f} MiB")
        lines += [f"  not checked: {s}" for s in self.skipped]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()
