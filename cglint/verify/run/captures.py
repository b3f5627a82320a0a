"""One capture of a run, as the report lists it: where it was made and how it went.

A capture is named by its site and kind, `path:line (kind)`, in the summary, in findings'
messages ("the graph captured at ...") and in the JSON report's "captures" (path, line and
kind apart). `CaptureRecord` holds the three apart and is the one place that writes the
label; the child streams records as JSON (`to_json`) and the supervisor reads them back
(`from_json`), so nothing parses a label. Nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from cglint.findings import Region

# The site of a capture whose stack holds no user frame (torch captured on another thread).
NO_USER_FRAME = "capture with no user frame (made by torch on another thread)"


@dataclass
class CaptureRecord:
    path: str  # the capture site's display path; without a user frame, what stands for it ("?")
    line: int  # 0 when there is no user frame
    kind: str  # the capture form: torch.cuda.graph, CUDAGraph.capture_begin, torch.compile, ...
    ok: bool = True  # False when the capture failed or the run ended inside it
    capture_seconds: float = 0.0
    pool_bytes: Optional[int] = None
    replays: int = 0
    error: Optional[str] = None  # why the capture failed, when it did

    @classmethod
    def at(cls, region: Optional["Region"], kind: Optional[str] = None, *, no_frame: str = "?",
           **state: Any) -> "CaptureRecord":
        """The record of a capture made at `region` (None: no user frame, shown as `no_frame`);
        `kind` defaults to the region's."""
        if region is None:
            return cls(no_frame, 0, kind or "?", **state)
        return cls(region.path, region.line, kind or region.kind, **state)

    @property
    def label(self) -> str:
        """`path:line (kind)`, or what stands for a site with no user frame."""
        return f"{self.path}:{self.line} ({self.kind})" if self.line else self.path

    @property
    def status(self) -> str:
        if not self.ok:
            return "failed"
        return "ok" if self.replays else "not-replayed"

    def to_json(self) -> dict[str, Any]:
        """One entry of the report's "captures" (docs/design.md, JSON output)."""
        return {
            "path": self.path,
            "line": self.line,
            "kind": self.kind,
            "status": self.status,
            "capture_ms": round(self.capture_seconds * 1000, 3),
            "pool_bytes": self.pool_bytes,
            "replays": self.replays,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CaptureRecord":
        """The record `to_json` wrote (the supervisor reads the child's captures back)."""
        return cls(data["path"], int(data["line"]), data["kind"], data["status"] != "failed",
                   data.get("capture_ms", 0.0) / 1000, data.get("pool_bytes"), int(data.get("replays", 0)),
                   data.get("error"))
