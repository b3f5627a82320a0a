"""sys.monitoring (Python 3.12+) for the capture-time tracers: events only in the user's code.  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE

From 3.12, sys.settrace and sys.setprofile run on sys.monitoring and see every frame and  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
builtin call torch runs while dispatching an operator, and switching either off and on again
re-instruments every code object that runs afterwards (measured: 7 us a switch). A
sys.monitoring tool instead turns an event off for a code object the first time it fires there  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
(DISABLE): torch's own functions cost one callback per code object per capture, then nothing,
and the user's code gets local events (calls, lines, returns). The host tracer and the guard
collector each hold a tool id while a capture is instrumented.
"""
from __future__ import annotations

import sys
from inspect import CO_OPTIMIZED
from typing import Any, Callable, Iterable, Optional

from cglint.verify.findings import frames

AVAILABLE = sys.version_info >= (3, 12) and hasattr(sys, "monitoring")
# Ids no one else claims by convention (0 is the debugger's, 1 coverage's, 2 profilers').
_FREE_IDS = (3, 4, 5)


def followed(code: Any) -> bool:
    """A function of the user's (not module or class-body code, not code made by exec, not a library's)."""
    return bool(code.co_flags & CO_OPTIMIZED) and not code.co_filename.startswith("<") and frames.is_user_code(code)


def importing(frame: Any) -> bool:
    """Whether `frame` runs while its module is being imported (a lazy import inside the capture)."""
    spec = frame.f_globals.get("__spec__")
    return bool(getattr(spec, "_initializing", False))


def events() -> Any:
    return sys.monitoring.events  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE


def acquire(name: str, callbacks: dict[int, Callable[..., Any]], events: int) -> Optional[int]:
    """A tool id with these callbacks and global events, or None when every id is taken."""
    if not AVAILABLE:
        return None
    m = sys.monitoring  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
    for tool in _FREE_IDS:
        if m.get_tool(tool) is None:
            m.use_tool_id(tool, name)
            for event, callback in callbacks.items():
                m.register_callback(tool, event, callback)
            m.set_events(tool, events)
            m.restart_events()  # what an earlier capture DISABLEd fires again (once)
            return tool
    return None


def release(tool: int, callbacks: Iterable[int], codes: Iterable[Any]) -> None:
    m = sys.monitoring  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
    m.set_events(tool, 0)
    for code in codes:
        m.set_local_events(tool, code, 0)
    for event in callbacks:
        m.register_callback(tool, event, None)
    m.free_tool_id(tool)
