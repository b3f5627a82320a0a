"""A profiler hook that records host work done by user code while a region runs.

It uses sys.setprofile, which is per thread: only the thread that captures is traced,
and only while it captures. A call counts when the calling frame is user code, so host
work torch does for itself (timers in its logging, say) is not the user's finding.
"""
from __future__ import annotations

import io
import logging
import pathlib
import random
import sys
import threading
import time
import warnings
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any, Callable, Optional

from cglint.verify import frames

if TYPE_CHECKING:
    from cglint.verify.instrument import Instrumentation

_TIMERS = {"time", "perf_counter", "monotonic", "process_time", "time_ns", "perf_counter_ns", "monotonic_ns", "sleep"}
_CONTAINER_WRITES = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft"}
_PATH_IO = {"open", "read_text", "write_text", "read_bytes", "write_bytes", "touch", "unlink", "mkdir"}
_TORCH_SEEDING = (
    ("torch.random", ("manual_seed", "seed", "get_rng_state", "set_rng_state", "fork_rng")),
    ("torch.cuda.random", ("manual_seed", "manual_seed_all", "seed", "seed_all", "get_rng_state", "set_rng_state",
                           "get_rng_state_all", "set_rng_state_all")),
)
_GENERATOR_STATE = {"manual_seed", "seed", "get_state", "set_state", "graphsafe_get_state", "graphsafe_set_state"}


def _python_targets() -> dict[CodeType, tuple[str, str]]:
    """Code objects of Python-level functions whose call from user code is a finding."""
    found: dict[CodeType, tuple[str, str]] = {}
    for module_name, names in _TORCH_SEEDING:
        module = sys.modules.get(module_name)
        for name in names:
            fn = getattr(module, name, None)
            code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
            if code is not None:
                shown = "torch" if module_name == "torch.random" else "torch.cuda"
                found[code] = ("CG306", f"`{shown}.{name}()` seeds or reads RNG state during capture")
    return found


class HostTracer:
    def __init__(self, inst: "Instrumentation"):
        self.inst = inst
        self._previous: Optional[Callable] = None
        self._patched: list[tuple[Any, str, Any]] = []
        self._importing = 0  # module code run by an import is not the region's work
        self._targets = _python_targets()
        self._files = {
            logging.__file__: ("CG502", "logging during capture runs once, not on replay"),
            random.__file__: ("CG301", "Python `random` draws a host value that the graph freezes"),
            pathlib.__file__: ("CG503", "file I/O during capture runs once, not on replay"),
        }

    def start(self) -> None:
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        self._patch_numpy()

    def stop(self) -> None:
        sys.setprofile(self._previous)
        self._previous = None
        for module, name, original in self._patched:
            setattr(module, name, original)
        self._patched = []

    def _patch_numpy(self) -> None:
        """numpy.random's functions are Cython methods, invisible to a profiler: wrap them while tracing."""
        self._patched: list[tuple[Any, str, Any]] = []
        module = sys.modules.get("numpy.random")
        if module is None:
            return
        for name in getattr(module, "__all__", ()):
            original = getattr(module, name, None)
            if callable(original) and not isinstance(original, type):
                self._patched.append((module, name, original))
                setattr(module, name, self._numpy_hook(name, original))

    def _numpy_hook(self, name: str, original: Callable) -> Callable:
        inst = self.inst

        def hook(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            if inst.running and frames.is_user_code(caller.f_code) and threading.get_ident() == inst.thread:
                inst.recorder.observe("CG302", f"`numpy.random.{name}` draws a host value that the graph freezes",
                                      caller)
            return original(*args, **kwargs)

        return hook

    # --- the hook ------------------------------------------------------------
    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if self._previous is not None:
            self._previous(frame, event, arg)
        if event in ("call", "return") and frame.f_code.co_name == "_find_and_load":
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                self._importing += 1 if event == "call" else -1
                return
        if self._importing:
            return
        if event == "c_call":
            if frames.is_user_code(frame.f_code):
                hit = self._builtin(arg, frame)
                if hit:
                    self.inst.recorder.observe(hit[0], hit[1], frame, weak=hit[1].startswith("`print"))
        elif event == "call":
            code = frame.f_code
            hit = self._targets.get(code)
            if hit is not None:
                # torch wraps these (dynamo guards): blame the user frame that asked
                caller = frames.user_frame(frame.f_back)
                if caller is not None:
                    self.inst.recorder.observe(hit[0], hit[1], caller)
                return
            hit = self._files.get(code.co_filename)
            caller = frame.f_back
            if hit is None or caller is None or not frames.is_user_code(caller.f_code):
                return
            if code.co_filename == pathlib.__file__ and code.co_name not in _PATH_IO:
                return
            if code.co_filename == random.__file__ and code.co_name.startswith("_"):
                return
            self.inst.recorder.observe(hit[0], hit[1], caller)

    def _builtin(self, fn: Any, frame: FrameType) -> Optional[tuple[str, str]]:
        owner = getattr(fn, "__self__", None)
        name = getattr(fn, "__name__", "")
        if fn is print:
            return "CG501", "`print` during capture runs once, not on replay"
        if fn is open or fn is io.open or fn is input:
            return "CG503", f"`{name}` (host I/O) during capture runs once, not on replay"
        if fn is warnings.warn:
            return "CG502", "`warnings.warn` during capture runs once, not on replay"
        if owner is time and name in _TIMERS:
            return "CG506", f"timer `time.{name}` during capture reads the clock once, not on replay"
        if isinstance(owner, random.Random):
            return "CG301", f"Python `random.{name}` draws a host value that the graph freezes"
        if isinstance(owner, io.IOBase):
            if owner in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                return "CG501", f"`sys.stdout.{name}` during capture runs once, not on replay"
            return "CG503", f"file `{name}` during capture runs once, not on replay"
        if _is_numpy_random(owner, fn):
            return "CG302", f"`numpy.random` `{name}` draws a host value that the graph freezes"
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(owner, torch.Generator) and name in _GENERATOR_STATE:
            return "CG306", f"`Generator.{name}()` seeds or reads RNG state during capture"
        if name in _CONTAINER_WRITES and (isinstance(owner, (list, dict, set)) or _is_deque(owner)):
            where = _long_lived(owner, frame)
            if where:
                return "CG504", f"`{where}.{name}(...)` writes a host container once, not on replay"
        return None


def _is_numpy_random(owner: Any, fn: Any) -> bool:
    if "numpy" not in sys.modules:
        return False
    module = getattr(type(owner), "__module__", "") if owner is not None else ""
    return module.startswith("numpy.random") or (getattr(fn, "__module__", "") or "").startswith("numpy.random")


def _is_deque(owner: Any) -> bool:
    return type(owner).__name__ == "deque" and type(owner).__module__ == "collections"


def _long_lived(container: Any, frame: FrameType) -> Optional[str]:
    """The name under which `container` outlives the call: a global or an attribute of self."""
    for name, value in frame.f_globals.items():
        if value is container:
            return name
    self = frame.f_locals.get("self")
    for name, value in getattr(self, "__dict__", {}).items():
        if value is container:
            return f"self.{name}"
    return None
