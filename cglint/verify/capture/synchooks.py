"""Hooks for the synchronizations that sync debug mode does not report.

torch.cuda.synchronize, Stream and Event synchronize/query fail a capture with a bare
CUDA error (or, on another thread, break it); the hooks record a CG104 finding at the
caller's line first and then call the real function, so the real outcome still happens.
They are installed once and record only while a capture is being instrumented.
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

from cglint import vocabulary
from cglint.verify.capture.attributes import Patched
from cglint.verify.findings.rule_codes import EXPLICIT_SYNCHRONIZE

_active: list[Any] = []  # Instrumentation objects of captures in progress
_lock = threading.Lock()
_patched = Patched()


def activate(inst: Any) -> None:
    with _lock:
        _active.append(inst)


def deactivate(inst: Any) -> None:
    with _lock:
        if inst in _active:
            _active.remove(inst)


def record(label: str) -> None:
    """Record a synchronization during every active capture (all threads: a sync anywhere breaks it)."""
    with _lock:
        active = list(_active)
    me = threading.get_ident()
    for inst in active:
        other = "" if inst.thread == me else " (from another thread)"
        inst.recorder.observe(EXPLICIT_SYNCHRONIZE, f"`{label}` synchronizes with the host{other}", None)


def _wrap(owner: Any, attr: str, label: str) -> None:
    original = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if original is None or getattr(original, "_cglint_hook", False):
        return

    @functools.wraps(original)
    def hook(*args: Any, **kwargs: Any) -> Any:
        if _active:
            record(label)
        return original(*args, **kwargs)

    hook._cglint_hook = True  # type: ignore[attr-defined]
    _patched.set(owner, attr, hook)


def install() -> bool:
    """Install the hooks; False when they were installed already (by someone else to remove)."""
    import torch

    if _patched:
        return False
    explicit = vocabulary.entry("sync.explicit")
    for qualified in sorted(explicit.runtime("functions")):  # those of modules: torch.cuda.synchronize
        module, _, name = qualified.rpartition(".")
        if callable(getattr(sys.modules.get(module), name, None)):
            _wrap(sys.modules[module], name, f"{qualified}()")
    for cls, kind in ((torch.cuda.Stream, "Stream"), (torch.cuda.Event, "Event")):
        for method in sorted(explicit.runtime("methods")):
            _wrap(cls, method, f"{kind}.{method}()")
    return True


def uninstall() -> None:
    _patched.restore()


def wrap_function(fn: Callable, label: str) -> Callable:
    """A stand-in that records like the hooks (for CPU mode's torch.cuda shims)."""

    @functools.wraps(fn)
    def hook(*args: Any, **kwargs: Any) -> Any:
        if _active:
            record(label)
        return fn(*args, **kwargs)

    return hook
