"""A profiler hook that records host work done by user code while a region runs.

It uses sys.setprofile, which is per thread: only the thread that captures is traced,
and only while it captures. A call counts when the calling frame is user code, so host
work torch does for itself (timers in its logging, say) is not the user's finding.

A generator that outlives the call (a global, an attribute, a local of the capture site) and
is stepped inside the capture (`next(gen)`, `gen.send(v)`) advances once, at capture: CG505 at
that line. sys.monitoring gives `next`'s argument; sys.setprofile gives the generator's frame  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
resuming right after the builtin `next` was called, and the generator is found by that frame.
"""
from __future__ import annotations

import builtins
import io
import logging
import pathlib
import random
import sys
import threading
import time
import warnings
from inspect import CO_GENERATOR
from types import BuiltinFunctionType, CodeType, FrameType, GeneratorType, MethodDescriptorType
from typing import TYPE_CHECKING, Any, Callable, Optional

from cglint import vocabulary
from cglint.verify.capture import sysmon, torchmodes
from cglint.verify.findings import frames
from cglint.verify.findings import rule_codes as rc
from cglint.verify.capture.attributes import Patched

if TYPE_CHECKING:
    from cglint.verify.capture.instrument import Instrumentation

_SEEDING = vocabulary.entry("cpu_rng.seeding")
_GENERATOR_STATE = _SEEDING.runtime("methods")  # of a torch.Generator
_FILE_IO = vocabulary.entry("host_effect.file_io")
_PATH_METHODS = _FILE_IO.runtime("path_methods")
_TIMERS = vocabulary.entry("host_effect.timers")
_TIME_FUNCTIONS = frozenset(name for module, _, name in (f.rpartition(".") for f in _TIMERS.runtime()) if module == time.__name__)
_CONTAINER_WRITES = vocabulary.entry("host_effect.container_writes")
_CONTAINER_METHODS = _CONTAINER_WRITES.runtime()
_verdicts = frames.verdicts  # is_user_code's cache, read directly on the hot path


def _python_targets() -> dict[CodeType, tuple[str, str]]:
    """Code objects of Python-level functions whose call from user code is a finding: the seeding
    functions of modules already imported, each named as its shortest spelling is
    (`torch.manual_seed`, also `torch.random.manual_seed`)."""
    found: dict[CodeType, tuple[str, str]] = {}
    for qualified in sorted(_SEEDING.runtime("functions"), key=lambda name: (name.count("."), name)):
        module, _, name = qualified.rpartition(".")
        fn = getattr(sys.modules.get(module), name, None)
        code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
        if code is not None and code not in found:
            found[code] = (_SEEDING.code, f"`{qualified}()` seeds or reads RNG state during capture")
    return found


class HostTracer:
    def __init__(self, inst: "Instrumentation"):
        self.inst = inst
        self._previous: Optional[Callable] = None
        self._hook: Optional[Callable] = None
        self._tool: Optional[int] = None  # the sys.monitoring tool id (3.12+)
        self._patched = Patched()  # numpy.random's functions, wrapped while tracing
        self._importing = 0  # module code run by an import is not the region's work
        self._block: Optional[FrameType] = None  # the capture block's frame, while tracing
        self._next_from: Optional[FrameType] = None  # a user frame that just called the builtin next()
        self._targets = _python_targets()
        self._files = {
            logging.__file__: (rc.LOGGING_IN_CAPTURE, "logging during capture runs once, not on replay"),
            random.__file__: (rc.PYTHON_RANDOM, "Python `random` draws a host value that the graph freezes"),
            pathlib.__file__: (_FILE_IO.code, "file I/O during capture runs once, not on replay"),
        }

    def start(self) -> None:
        # The frame that wrote the capture block (`with torch.cuda.graph(g):` or capture_begin()):
        # its own statements run once, at capture, on purpose (CG504 is about code it calls).
        self._block = frames.user_frame(sys._getframe(1))
        self._patch_numpy()
        self._codes: set[CodeType] = set()
        events = sysmon.events() if sysmon.AVAILABLE else None
        if events is not None:
            self._tool = sysmon.acquire("cglint host calls", {events.PY_START: self._on_start,
                                                              events.CALL: self._on_call}, events.PY_START)
            if self._tool is not None:
                frame: Optional[FrameType] = sys._getframe(1)
                while frame is not None:  # the capture site's frame and those around it are running already
                    # Module code included: a script's `with torch.cuda.graph(g):` runs at top level.
                    if frames.is_user_code(frame.f_code) and frame.f_code not in self._codes:
                        self._codes.add(frame.f_code)
                        sys.monitoring.set_local_events(self._tool, frame.f_code, sys.monitoring.events.CALL)  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
                    frame = frame.f_back
                return
        self._tool = None
        self._previous = sys.getprofile()
        hook = self._profile if self._previous is None else self._chained
        self._hook = hook
        torchmodes.own_hooks.add(hook)
        sys.setprofile(hook)

    def stop(self) -> None:
        if self._tool is not None:
            events = sysmon.events()
            sysmon.release(self._tool, (events.PY_START, events.CALL), self._codes)
            self._tool = None
        else:
            sys.setprofile(self._previous)
            torchmodes.own_hooks.discard(self._hook)
            self._previous = None
        self._patched.restore()

    # --- sys.monitoring (3.12+): calls made by user code only ---------------------
    def _on_start(self, code: CodeType, offset: int) -> Any:
        if code in self._codes or not sysmon.followed(code):
            return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # once per code object: its calls are now events, or never
        if sysmon.importing(sys._getframe(1)):
            return None  # module code run by an import is not the region's work; ask again after it
        self._codes.add(code)
        sys.monitoring.set_local_events(self._tool, code, sys.monitoring.events.CALL)  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
        return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE

    def _on_call(self, code: CodeType, offset: int, fn: Any, arg0: Any) -> Any:
        if threading.get_ident() != self.inst.thread:
            return None
        frame = sys._getframe(1)
        callee = fn
        if fn is next and type(arg0) is GeneratorType:
            hit = self._stepped(frame, lambda value: value is arg0)
            if hit:
                self.inst.recorder.observe(hit[0], hit[1], frame)
            return None
        if type(fn) is MethodDescriptorType and arg0 is not sys.monitoring.MISSING:  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
            fn = fn.__get__(arg0)  # `items.append(x)` arrives as list.append and items: the method, bound
        hit = self._builtin(fn, frame)
        if hit:
            self.inst.recorder.observe(hit[0], hit[1], frame, weak=hit[1].startswith("`print"))
            return None
        target = getattr(getattr(fn, "__func__", fn), "__wrapped__", getattr(fn, "__func__", fn))
        called = getattr(target, "__code__", None)
        if called is None:
            return sys.monitoring.DISABLE if _torch_work(callee) or _inert(callee) else None  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
        hit = self._targets.get(called)
        if hit is None:
            if _torch_work(callee):
                return sys.monitoring.DISABLE  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
            hit = self._files.get(called.co_filename)
            if hit is None:
                # A function of the user's: its own calls are watched once it starts (PY_START).
                return sys.monitoring.DISABLE if sysmon.followed(called) else None  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
            if called.co_filename == pathlib.__file__ and called.co_name not in _PATH_METHODS:
                return None
            if called.co_filename == random.__file__ and called.co_name.startswith("_"):
                return None
        self.inst.recorder.observe(hit[0], hit[1], frame)
        return None

    def _patch_numpy(self) -> None:
        """numpy.random's functions are Cython methods, invisible to a profiler: wrap them while tracing."""
        module = sys.modules.get("numpy.random")
        if module is None:
            return
        for name in getattr(module, "__all__", ()):
            original = getattr(module, name, None)
            if callable(original) and not isinstance(original, type):
                self._patched.set(module, name, self._numpy_hook(name, original))

    def _numpy_hook(self, name: str, original: Callable) -> Callable:
        inst = self.inst

        def hook(*args: Any, **kwargs: Any) -> Any:
            caller = sys._getframe(1)
            if inst.running and frames.is_user_code(caller.f_code) and threading.get_ident() == inst.thread:
                inst.recorder.observe(rc.NUMPY_RANDOM, f"`numpy.random.{name}` draws a host value that the graph freezes",
                                      caller)
            return original(*args, **kwargs)

        return hook

    # --- the hook ------------------------------------------------------------
    def _chained(self, frame: FrameType, event: str, arg: Any) -> None:
        """The hook when a profiler was already set: it still sees every event."""
        self._previous(frame, event, arg)  # type: ignore[misc]  # chained only when one was set
        self._profile(frame, event, arg)

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # Called for every call and builtin of the capture: the common events leave at once.
        if event == "c_call":
            code = frame.f_code
            user = _verdicts.get(code)
            if user is None:
                user = frames.is_user_code(code)
            if user and not self._importing:
                hit = self._builtin(arg, frame)
                if hit:
                    self.inst.recorder.observe(hit[0], hit[1], frame, weak=hit[1].startswith("`print"))
        elif event == "call":
            code = frame.f_code
            caller: Optional[FrameType]
            if self._next_from is not None and code.co_flags & CO_GENERATOR and frame.f_back is self._next_from:
                caller, self._next_from = self._next_from, None
                hit = self._stepped(caller, lambda value: getattr(value, "gi_frame", None) is frame)
                if hit:
                    self.inst.recorder.observe(hit[0], hit[1], caller)
                return
            if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib"):
                self._importing += 1  # module code run by an import is not the region's work
                return
            if self._importing:
                return
            hit = self._targets.get(code)
            if hit is not None:
                # torch wraps these (dynamo guards): blame the user frame that asked
                caller = frames.user_frame(frame.f_back)
                if caller is not None:
                    self.inst.recorder.observe(hit[0], hit[1], caller)
                return
            hit = self._files.get(code.co_filename)
            if hit is None:
                return
            caller = frame.f_back
            if caller is None or not frames.is_user_code(caller.f_code):
                return
            if code.co_filename == pathlib.__file__ and code.co_name not in _PATH_METHODS:
                return
            if code.co_filename == random.__file__ and code.co_name.startswith("_"):
                return
            self.inst.recorder.observe(hit[0], hit[1], caller)
        elif self._next_from is not None and event in ("c_return", "c_exception"):
            self._next_from = None  # next() of something that is not a generator
        elif event == "return" and self._importing:
            code = frame.f_code
            if code.co_name == "_find_and_load" and code.co_filename.startswith("<frozen importlib"):
                self._importing -= 1

    def _stepped(self, caller: FrameType, match: Callable[[Any], bool]) -> Optional[tuple[str, str]]:
        """CG505 for a generator stepped at `caller` that outlives the call: one held by a global, an
        attribute of a `self` on the way from the capture site, or a local of a frame that was running
        when the capture started. A generator made inside the capture starts afresh in every eager call."""
        try:
            return self._held(caller, match)
        except Exception:  # noqa: BLE001 - never worth breaking the user's capture
            return None

    def _held(self, caller: FrameType, match: Callable[[Any], bool]) -> Optional[tuple[str, str]]:
        frame: Optional[FrameType] = caller
        started = False
        while frame is not None:
            started = started or frame is self._block
            places = [("", frame.f_globals)]
            owner = frame.f_locals.get("self")
            if owner is not None and hasattr(owner, "__dict__"):
                places.append(("self.", vars(owner)))
            if started:
                places.append(("", frame.f_locals))
            for prefix, space in places:
                for name, value in list(space.items()):
                    if started and type(value) in (tuple, list):  # `fn(*args)` at the capture site
                        value = next((v for v in value if type(v) is GeneratorType and match(v)), value)
                    if type(value) is GeneratorType and match(value):
                        return (rc.HOST_COUNTER_IN_CAPTURE, f"`next()` steps the generator `{prefix}{name}` once, at "
                                "capture; replays never run it again, so it stops advancing while replays go on and "
                                "the value it gave is frozen")
            if started:
                break
            frame = frame.f_back
        return None

    def _builtin(self, fn: Any, frame: FrameType) -> Optional[tuple[str, str]]:
        owner = getattr(fn, "__self__", None)
        name = getattr(fn, "__name__", "")
        if fn is next:
            self._next_from = frame  # the generator's frame resumes next, if it is one (setprofile)
            return None
        if type(owner) is GeneratorType and name in ("send", "__next__"):
            return self._stepped(frame, lambda value: value is owner)
        if fn is print:
            return rc.PRINT_IN_CAPTURE, "`print` during capture runs once, not on replay"
        if fn is open or fn is io.open or fn is input:
            return rc.FILE_IO_IN_CAPTURE, f"`{name}` (host I/O) during capture runs once, not on replay"
        if fn is warnings.warn:
            return rc.LOGGING_IN_CAPTURE, "`warnings.warn` during capture runs once, not on replay"
        if owner is time and name in _TIME_FUNCTIONS:
            return _TIMERS.code, f"timer `time.{name}` during capture reads the clock once, not on replay"
        if isinstance(owner, random.Random):
            return rc.PYTHON_RANDOM, f"Python `random.{name}` draws a host value that the graph freezes"
        if isinstance(owner, io.IOBase):
            if owner in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                return rc.PRINT_IN_CAPTURE, f"`sys.stdout.{name}` during capture runs once, not on replay"
            return rc.FILE_IO_IN_CAPTURE, f"file `{name}` during capture runs once, not on replay"
        if _is_numpy_random(owner, fn):
            return rc.NUMPY_RANDOM, f"`numpy.random` `{name}` draws a host value that the graph freezes"
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(owner, torch.Generator) and name in _GENERATOR_STATE:
            return _SEEDING.code, f"`Generator.{name}()` seeds or reads RNG state during capture"
        if name in _CONTAINER_METHODS and (isinstance(owner, (list, dict, set)) or _is_deque(owner)):
            if frame is self._block:
                return None  # `outputs.append(out)` written in the capture block itself (see CG504's rule)
            where = _long_lived(owner, frame)
            if where:
                return _CONTAINER_WRITES.code, f"`{where}.{name}(...)` writes a host container once, not on replay"
        return None


def _torch_work(fn: Any) -> bool:
    """A call of a torch operator, tensor method or module: never host work of the user's. The host
    tracer stops watching such a call site for the rest of the capture (sys.monitoring DISABLE), as  # type: ignore[attr-defined]  # 3.12+, used when sysmon.AVAILABLE
    a site calls the same kind of thing every time: a decoder's captures ran 0.4x slower with every
    one of its operator calls seen."""
    torch = sys.modules["torch"]
    if type(fn) is MethodDescriptorType:
        return getattr(fn, "__objclass__", None) is torch._C.TensorBase
    if isinstance(fn, torch.nn.Module):
        return True
    module = getattr(fn, "__module__", None) or ""
    return module == "torch" or module.startswith("torch.")  # seeding functions are matched before this


def _inert(fn: Any) -> bool:
    """A class, or a function of the builtins module that `_builtin` found harmless (`len`, `isinstance`):
    what it is does not depend on the caller, so its call site need not be seen again. `len` and
    `super()` in every layer's forward were most of the events left after `_torch_work`."""
    if isinstance(fn, type):
        return True
    return type(fn) is BuiltinFunctionType and getattr(fn, "__self__", None) is builtins


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
