"""The stream a supervised run writes for its supervisor: one JSON object a line.

Each line is written with one os.write on an unbuffered descriptor, so what was written is
in the file (the kernel's copy) even when the process ends a moment later by os._exit, a
signal or a crash. The reader keeps the last complete line of each kind; a line torn by a
crash in the middle of a write is ignored.
"""
from __future__ import annotations

import json
import os
from typing import Any

STATE, END = "state", "end"  # the run's state so far (it replaces earlier ones); how it ended


class Writer:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def write(self, kind: str, data: dict[str, Any]) -> None:
        line = json.dumps({"event": kind, **data}, default=str) + "\n"
        os.write(self._fd, line.encode("utf-8"))


def read(path: str) -> dict[str, dict[str, Any]]:
    """The last complete event of each kind."""
    last: dict[str, dict[str, Any]] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict) and "event" in event:
                    last[event.pop("event")] = event
    except OSError:
        pass
    return last
